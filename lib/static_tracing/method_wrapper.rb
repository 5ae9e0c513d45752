# frozen_string_literal: true

# Templates have %{key} placeholders of their own; no string here is a format.
# rubocop:disable Style/FormatStringToken

module StaticTracing
  # Generates the methods that tracers prepend in front of traced methods. A
  # wrapper reaches the traced method through +super+ with exactly what its
  # caller passed, so the traced method binds the arguments, applies its own
  # defaults and raises its own errors as if it had been called directly.
  #
  # The form of the wrapper depends on the traced method's parameters:
  #
  # - No +*rest+, no +**rest+, at most MAX_OPTIONAL_KEYWORDS optional keywords
  #   (so: required, optional and post positionals, keywords, +**nil+, a
  #   block): a +def+ with the same parameter list, renamed. It rejects what
  #   the traced method would reject, with the same message. An optional
  #   parameter gets a default that only records that it was omitted, and
  #   +super+ is the call that leaves it out, so the traced method's own
  #   default applies. The block goes through +super+ implicitly and is never
  #   made into a Proc. Without keywords the armed path allocates nothing.
  #   With keywords it allocates one object: CRuby 3.1 builds a new call-info
  #   object for each +super+ that passes keywords, hand-written ones included.
  # - +**rest+, or more optional keywords: the same, except that the keywords
  #   not required go through one +**hash+ (the traced method reports unknown
  #   ones itself). One hash per call, as +**rest+ costs anyway, instead of a
  #   +super+ call for each combination of given and omitted keywords.
  # - +*rest+ (C methods with a variable argument count included), or a
  #   keyword that cannot be a local (a reserved word, or a word of the
  #   template, which would then read or overwrite the keyword):
  #   +def name(...)+ and +super(...)+. Its own rest array, and a hash when
  #   keywords are given, cost as much as a +*args+ wrapper's. +...+ carries
  #   keywords as a ruby2_keywords hash: the only way they stay keywords both
  #   for ruby2_keywords methods and for C methods, which +parameters+ does not
  #   tell apart from plain +*rest+ methods. What it changes: a plain +*rest+
  #   method without keywords, called with keywords, gets them in a hash
  #   flagged by ruby2_keywords instead of an unflagged one.
  # - A name that +def+ cannot spell: +define_method+ with a ruby2_keywords
  #   block taking +*args+ and the block, calling +super(*args, &block)+;
  #   +return+ in the template returns from the method as in a +def+.
  #
  # A C method that sets +$~+ or +$_+ (String#sub, Regexp#match, ...) sets them
  # in the wrapper's frame: the caller of a wrapped one does not see them.
  module MethodWrapper
    # Above this, optional keywords go through a hash: the exact form needs one
    # +super+ call for each combination of given and omitted keywords.
    MAX_OPTIONAL_KEYWORDS = 3

    # The file wrappers are compiled under: folded stacks (StackTracer) know
    # their frames by it and leave them out.
    SOURCE_FILE = Native::WRAPPER_FILE

    OPERATORS = %w[
      + - * / % ** == != === =~ !~ <=> < <= > >= << >> & | ^ ~ ! +@ -@ [] []= `
    ].freeze

    RESERVED_WORDS = %w[
      __ENCODING__ __LINE__ __FILE__ BEGIN END alias and begin break case class def defined? do else elsif
      end ensure false for if in module next nil not or redo rescue retry return self super then true undef
      unless until when while yield
    ].freeze

    # An identifier, then at most one of ? ! =.
    DEF_NAME = /\A(?:[A-Za-z_]|[^\x00-\x7F])(?:\w|[^\x00-\x7F])*[?!=]?\z/
    LOCAL_NAME = /\A(?:[a-z_]|[^\x00-\x7F])(?:\w|[^\x00-\x7F])*\z/
    WORD = /(?:\w|[^\x00-\x7F])+/
    # %{key}, and %% for a literal %, as in Kernel#format.
    PLACEHOLDER = /%(?:%|\{([^{}]*)\})/

    class << self
      # Defines method +name+ in module +mod+ from +template+, fitted to
      # +parameters+ (UnboundMethod#parameters of the method being wrapped).
      # +template+ is the Ruby source of the method body, where %{super} calls
      # the wrapped method with the arguments and block of the call and
      # returns its value, and %{key} is values[key]. Returns the method name.
      def define(mod, name, parameters, template, values = {})
        raise TypeError, "#{mod.inspect} is not a module" unless mod.is_a?(Module)

        name = method_name(name)
        values = template_values(values)
        text = expand(template, values, "super")
        signature = Signature.new(parameters, text.scan(WORD).uniq)
        quiet_redefinition(mod, name)
        if def_name?(name)
          define_with_def(mod, name, signature, expand(template, values, signature.super_call))
        else
          define_with_block(mod, name, signature.prefix, template, values)
        end
        name
      end

      private

      def define_with_def(mod, name, signature, body)
        source = "def #{name}(#{signature.parameter_list})\n#{body}\nend\n"
        compile(name) { mod.module_eval(source, SOURCE_FILE, 1) }
      end

      def define_with_block(mod, name, prefix, template, values)
        args = "#{prefix}args"
        block = "#{prefix}block"
        body = expand(template, values, "super(*#{args}, &#{block})")
        source = "::Proc.new do |*#{args}, &#{block}|\n#{body}\nend.ruby2_keywords\n"
        mod.define_method(name, &compile(name) { mod.module_eval(source, SOURCE_FILE, 1) })
      end

      # Redefining a wrapper (for a method that changed) would warn "method
      # redefined" under -w; not once the old one has an alias, its own name.
      def quiet_redefinition(mod, name)
        return unless mod.method_defined?(name, false) || mod.private_method_defined?(name, false)

        mod.send(:alias_method, name, name)
      end

      def compile(name)
        yield
      rescue SyntaxError => e
        raise ArgumentError, "the wrapper of #{name} does not compile: #{e.message}"
      end

      def method_name(name)
        return name.to_sym if name.is_a?(Symbol) || name.is_a?(String)

        raise TypeError, "method name must be a Symbol or String, not #{name.inspect}"
      end

      def def_name?(name)
        text = name.to_s
        return false unless text.ascii_only? || (text.encoding == Encoding::UTF_8 && text.valid_encoding?)

        text.match?(DEF_NAME) || OPERATORS.include?(text)
      end

      def template_values(values)
        values.to_h do |key, value|
          key = key.to_s
          raise ArgumentError, "%{super} is reserved in templates, it cannot be given a value" if key == "super"

          [key, value.to_s]
        end
      end

      def expand(template, values, super_call)
        raise TypeError, "template must be a String, not #{template.class}" unless template.is_a?(String)

        calls_super = false
        text = template.gsub(PLACEHOLDER) do
          key = Regexp.last_match(1)
          calls_super ||= key == "super"
          case key
          when nil then "%"
          when "super" then super_call
          else values.fetch(key) { raise ArgumentError, unknown_key(key, values) }
          end
        end
        raise ArgumentError, "template never calls %{super}: #{template.inspect}" unless calls_super

        text
      end

      def unknown_key(key, values)
        given = values.keys.map { |k| "%{#{k}}" }
        "template uses %{#{key}}, which has no value (given: #{given.empty? ? "none" : given.join(", ")})"
      end
    end

    # The parameter list and +super+ call of a wrapper defined with +def+.
    class Signature
      KINDS = %i[req opt rest keyreq key keyrest nokey block].freeze

      # Locals of the wrapper start with this, lengthened until no word of the
      # template and no keyword starts with it.
      attr_reader :prefix

      def initialize(parameters, template_words)
        kinds = parameter_kinds(parameters)
        @lead, @optional, @post = positional_counts(kinds)
        @rest, @keyrest, @nokey = %i[rest keyrest nokey].map { |kind| kinds.include?(kind) }
        @required_keywords, @optional_keywords = %i[keyreq key].map do |kind|
          parameters.select { |(k, _)| k == kind }.map(&:last)
        end
        @template_words = template_words
        @prefix = prefix_avoiding(template_words + (@required_keywords + @optional_keywords).map(&:to_s))
      end

      def parameter_list
        return "..." if forward?

        positional = Array.new(@lead) { |i| arg(i) } +
                     Array.new(@optional) { |i| "#{arg(@lead + i)} = (#{omitted(i)} = true; nil)" } +
                     Array.new(@post) { |i| arg(@lead + @optional + i) }
        (positional + keyword_parameters).join(", ")
      end

      def super_call
        return "super(...)" if forward?

        call = keyword_call(positional_args(@optional))
        (@optional - 1).downto(0) do |given|
          call = "(#{omitted(given)} ? #{keyword_call(positional_args(given))} : #{call})"
        end
        call
      end

      private

      def parameter_kinds(parameters)
        raise TypeError, "parameters must be an Array, not #{parameters.class}" unless parameters.is_a?(Array)

        parameters.map do |kind, name|
          raise ArgumentError, "unknown parameter kind #{kind.inspect}" unless KINDS.include?(kind)
          if %i[keyreq key].include?(kind) && !name.is_a?(Symbol)
            raise ArgumentError, "a #{kind.inspect} parameter needs a Symbol name, not #{name.inspect}"
          end

          kind
        end
      end

      # Required positionals before and after the optional ones and *rest
      # (Ruby fills those first), and optional ones.
      def positional_counts(kinds)
        lead_end = kinds.index { |kind| %i[opt rest].include?(kind) } || kinds.size
        lead = kinds.first(lead_end).count(:req)
        [lead, kinds.count(:opt), kinds.count(:req) - lead]
      end

      def prefix_avoiding(words)
        prefix = +"__w"
        prefix << "w" while words.any? { |word| word.start_with?(prefix) }
        prefix
      end

      # Keywords through one hash rather than one by one.
      def keyword_hash?
        @keyrest || @optional_keywords.size > MAX_OPTIONAL_KEYWORDS
      end

      # The keywords that become locals of the wrapper.
      def named_keywords
        keyword_hash? ? @required_keywords : @required_keywords + @optional_keywords
      end

      def forward?
        @rest || !named_keywords.all? { |keyword| local_name?(keyword.to_s) }
      end

      # Whether +text+ can be a local of the wrapper: a word of the template
      # would then read or overwrite the keyword instead of what it meant.
      def local_name?(text)
        (text.ascii_only? || (text.encoding == Encoding::UTF_8 && text.valid_encoding?)) &&
          text.match?(LOCAL_NAME) && !RESERVED_WORDS.include?(text) && !@template_words.include?(text)
      end

      def keyword_parameters
        list = @required_keywords.map { |keyword| "#{keyword}:" }
        if keyword_hash?
          list << "**#{@prefix}keywords"
        else
          list.concat(@optional_keywords.each_with_index.map { |k, i| "#{k}: (#{keyword_omitted(i)} = true; nil)" })
        end
        list << "**nil" if @nokey
        list
      end

      def positional_args(optional_given)
        Array.new(@lead + optional_given) { |i| arg(i) } + Array.new(@post) { |i| arg(@lead + @optional + i) }
      end

      # The +super+ call for these positionals, choosing among the optional
      # keywords those that were given (flag unset).
      def keyword_call(positional, pending = @optional_keywords.each_index.to_a, passed = [])
        if pending.empty? || keyword_hash?
          keywords = (@required_keywords + passed.map { |i| @optional_keywords[i] }).map { |k| "#{k}: #{k}" }
          keywords << "**#{@prefix}keywords" if keyword_hash?
          return "super(#{(positional + keywords).join(", ")})"
        end

        index, *others = pending
        "(#{keyword_omitted(index)} ? #{keyword_call(positional, others, passed)} : " \
          "#{keyword_call(positional, others, passed + [index])})"
      end

      def arg(index)
        "#{@prefix}arg#{index}"
      end

      def omitted(optional_index)
        "#{@prefix}omitted#{optional_index}"
      end

      def keyword_omitted(index)
        "#{@prefix}keyword_omitted#{index}"
      end
    end
  end
end
# rubocop:enable Style/FormatStringToken
