# frozen_string_literal: true

module StaticTracing
  # The providers of this process, by name: `StaticTracing.providers`.
  # "my_app" and :my_app are the same name.
  class Registry
    include Enumerable

    def initialize
      @providers = {}
      @lock = Mutex.new
    end

    # The provider named +name+; ProviderMissingError (a KeyError) if none.
    def [](name)
      key = Names.key(name)
      @providers.fetch(key) do
        known = @providers.empty? ? "none is" : "registered: #{names.join(", ")}"
        raise ProviderMissingError.new("no provider named #{Names.shown(name)} (#{known})", receiver: self, key: name)
      end
    end

    def key?(name)
      @providers.key?(Names.key(name))
    end
    alias include? key?

    def each(&block)
      return enum_for(:each) { size } unless block

      @providers.values.each(&block)
      self
    end

    def names
      @providers.keys
    end

    def size
      @providers.size
    end

    def to_h
      @providers.dup
    end

    def inspect
      "#<#{self.class} #{names.join(", ")}>"
    end

    # The provider named +name+, created by the block if there is none yet.
    def fetch_or_create(name)
      string = Names.string(:provider, name)
      key = string.to_sym
      @lock.synchronize { @providers[key] ||= yield(string) }
    end

    def delete(provider)
      @lock.synchronize do
        @providers.delete(provider.name) if @providers[provider.name].equal?(provider)
      end
    end
  end
end
