# frozen_string_literal: true

require "monitor"

# Templates have %{key} placeholders of their own; no string here is a format.
# rubocop:disable Style/FormatStringToken

module StaticTracing
  # Generates the methods that tracers prepend in front of traced methods. A
  # wrapper reaches the traced method through +super+ with exactly what its
  # caller passed, so the traced method binds the arguments, applies its own
  # defaults and raises its own errors as if it had been called directly.
  #
  # A wrapper defined with +def+ has the traced method's parameter list,
  # names included (see Signature), so Method#parameters and #arity read the
  # same, and it rejects what the traced method would reject, with the same
  # message, before its body runs (no probe fires for such a call). An
  # optional parameter gets a default that only records that it was
  # omitted, and +super+ is the call that leaves it out, so the traced
  # method's own default applies. The block goes through +super+ implicitly
  # and is never made into a Proc. Without keywords the armed path allocates
  # nothing; with keywords, one object (CRuby 3.1 builds a call-info object
  # for each +super+ that passes keywords, hand-written ones included); with
  # more than MAX_OPTIONAL_KEYWORDS optional keywords, one hash for those
  # given. Keywords that cannot be locals (a reserved word, or a local of the
  # template) make it +def name(...)+ and +super(...)+ instead.
  #
  # Wrappers are compiled with tail calls (see evaluate_in): a +super+ the
  # template returns directly leaves no wrapper frame behind, and the
  # others' frames are under SOURCE_FILE, which warn(uplevel:) skips.
  #
  # A name that +def+ cannot spell gets +define_method+ with a ruby2_keywords
  # block taking +*args+ and the block, calling +super(*args, &block)+;
  # +return+ in the template returns from the method as in a +def+.
  #
  # A C method that sets +$~+ or +$_+ (String#sub, Regexp#match, ...) sets them
  # in a Ruby wrapper's frame, where its caller does not see them: C methods
  # get wrappers written in C instead (define_c).
  module MethodWrapper
    # Above this, optional keywords go through a hash: the exact form needs one
    # +super+ call for each combination of given and omitted keywords.
    MAX_OPTIONAL_KEYWORDS = 3

    # The file wrappers are compiled under: folded stacks (StackTracer) know
    # their frames by it and leave them out.
    SOURCE_FILE = Native::WRAPPER_FILE

    COMPILE_OPTIONS = { tailcall_optimization: true }.freeze
    # One wrapper compiled at a time: they share compile_scope's constant.
    COMPILING = Monitor.new

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
    # A word that may be a local: not after ".", "::", ":", "@" or "$".
    LOCAL_WORD = /(?<![.:@$\w]|[^\x00-\x7F])(?:[a-z_]|[^\x00-\x7F])(?:\w|[^\x00-\x7F])*/
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
        signature = Signature.new(parameters, text.scan(WORD).uniq, text.scan(LOCAL_WORD).uniq)
        quiet_redefinition(mod, name)
        if def_name?(name)
          define_with_def(mod, name, signature, expand(template, values, signature.super_call))
        else
          define_with_block(mod, name, signature.prefix, template, values)
        end
        name
      end

      # Defines +name+ in +mod+ again as +wrapper+, an UnboundMethod of a
      # wrapper #define made in +mod+ before (and removed since), without
      # compiling anything: the same code, parameters and +super+. Returns
      # the method name.
      def define_again(mod, name, wrapper)
        raise TypeError, "#{mod.inspect} is not a module" unless mod.is_a?(Module)
        raise ArgumentError, "#{wrapper.inspect} is not a wrapper of #{mod.inspect}" unless wrapper.owner.equal?(mod)

        name = method_name(name)
        quiet_redefinition(mod, name)
        mod.send(:define_method, name, wrapper)
        name
      end

      # Defines in +mod+ the wrapper of C method +original+ (an
      # UnboundMethod), firing +tracepoint+ as a wrapper of +kind+ (a key of
      # MethodTracing::TEMPLATES) does, +label+ naming the method in folded
      # stacks. It is written in C (ext/static_tracing/src/ruby_api/
      # c_method_wrapper.rs): no Ruby frame, so a C method that sets $~ or $_
      # (String#gsub, Regexp#match, ...) sets them in its caller's frame,
      # where blocks given to it and the caller read them, as untraced; and
      # it has the C method's arity and parameters. Returns the method name.
      def define_c(mod, original, tracepoint, kind, label)
        raise TypeError, "#{mod.inspect} is not a module" unless mod.is_a?(Module)

        quiet_redefinition(mod, original.name)
        Native.define_c_wrapper(mod, original.name, original.arity, tracepoint, kind, label.to_s)
        original.name
      end

      # The anonymous module whose constant Target names the module a wrapper
      # is being compiled into (see evaluate_in); for the compiled code only.
      def compile_scope
        @compile_scope ||= Module.new
      end

      private

      def define_with_def(mod, name, signature, body)
        definition = "def #{name}(#{signature.parameter_list})\n#{body}\nend"
        definition = "ruby2_keywords #{definition}" if signature.ruby2_keywords?
        compile(name) { evaluate_in(mod, definition) }
      end

      # Evaluates +definition+ in +mod+ compiled with tail calls: a +super+
      # the template returns directly (the path without a tracer) replaces
      # the wrapper's frame instead of stacking on it, so recursion goes as
      # deep as untraced and caller_locations and warn(uplevel:) in the
      # traced method see its real caller. Only RubyVM::InstructionSequence
      # takes the option for one compilation (the global default would
      # reach other threads' code too), and it compiles at top level: the
      # +module+ keyword gives the definition +mod+ as its lexical scope, for
      # the template's constants, through a constant of an anonymous module.
      def evaluate_in(mod, definition)
        source = "module (::StaticTracing::MethodWrapper.compile_scope)::Target\n#{definition}\nend\n"
        COMPILING.synchronize do
          compile_scope.const_set(:Target, mod)
          RubyVM::InstructionSequence.compile(source, SOURCE_FILE, SOURCE_FILE, 0, COMPILE_OPTIONS).eval
        ensure
          compile_scope.send(:remove_const, :Target) if compile_scope.const_defined?(:Target, false)
        end
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

    # The parameter list and +super+ call of a wrapper defined with +def+:
    # the traced method's own, names included, so that Method#parameters
    # and #arity read the same through the wrapper. A parameter is renamed
    # only where it cannot be a local of the wrapper: unnamed (destructured,
    # C methods, Ruby 3.1's anonymous +*+ and +**+), a repeated +_+, or a
    # local the template itself uses.
    class Signature
      KINDS = %i[req opt rest keyreq key keyrest nokey block].freeze
      # What Method#parameters says of +...+ (and, from Ruby 3.2, of +*, **, &+).
      FORWARD_ALL = [%i[rest *], %i[keyrest **], %i[block &]].freeze
      ANONYMOUS = { rest: :*, keyrest: :**, block: :& }.freeze
      # Whether Method#parameters shows that a method is ruby2_keywords (Ruby
      # 3.1 adds [:keyrest, :**] to its *rest): if it does not, a wrapper
      # cannot tell and must be ruby2_keywords for every plain *rest.
      SHOWS_RUBY2_KEYWORDS = Module.new { ruby2_keywords def probe(*) = nil }
                                   .instance_method(:probe).parameters.include?(%i[keyrest **])

      # Locals of the wrapper start with this, lengthened until no word of the
      # template and no parameter starts with it.
      attr_reader :prefix

      def initialize(parameters, template_words, template_locals = template_words)
        kinds = parameter_kinds(parameters)
        @template_locals = template_locals
        @prefix = prefix_avoiding(template_words + parameters.filter_map { |(_, name)| name&.to_s })
        @forward_all = parameters.last(3) == FORWARD_ALL
        parameters = parameters[0...-3] if @forward_all
        @lead, @optional, @post = positional_counts(kinds)
        @required_keywords, @optional_keywords = keywords(parameters)
        @nokey = kinds.include?(:nokey)
        @shown_ruby2_keywords = shown_ruby2_keywords?(parameters)
        name_locals(@shown_ruby2_keywords ? parameters - [%i[keyrest **]] : parameters)
      end

      def parameter_list
        return "..." if forward?

        positional = Array.new(@lead) { |i| @positional[i] } +
                     Array.new(@optional) { |i| "#{@positional[@lead + i]} = (#{omitted(i)} = true; nil)" }
        positional << "*#{@rest}" if @rest
        positional.concat(Array.new(@post) { |i| @positional[@lead + @optional + i] })
        list = positional + keyword_parameters
        list << (@block == "&" ? "&" : "&#{@block}") if @block
        list << "..." if @forward_all
        list.join(", ")
      end

      def super_call
        return "super(...)" if forward?

        call = keyword_call(positional_args(@optional))
        (@optional - 1).downto(0) do |given|
          call = "(#{omitted(given)} ? #{keyword_call(positional_args(given))} : #{call})"
        end
        call
      end

      # Whether the wrapper must be ruby2_keywords: as its original, which
      # takes keywords given in its *rest as a flagged hash, to pass on as
      # keywords. Where Method#parameters does not say, every wrapper that
      # takes a *rest and no keywords is: then a plain *rest original gets
      # its keywords in a hash collected anew, unflagged, as without it.
      def ruby2_keywords?
        return false if forward? || !@rest
        return @shown_ruby2_keywords || @unnamed_rest if SHOWS_RUBY2_KEYWORDS

        takes_no_keywords?
      end

      def takes_no_keywords?
        !@keyrest && !@nokey && @required_keywords.empty? && @optional_keywords.empty?
      end

      private

      # A *rest with [:keyrest, :**] and no other keyword parameter: what
      # Ruby 3.1 shows of a ruby2_keywords method (and Ruby 3.2+ of an
      # anonymous **, which a ruby2_keywords wrapper forwards the same way).
      def shown_ruby2_keywords?(parameters)
        !@forward_all && parameters.include?(%i[keyrest **]) && parameters.any? { |(kind, _)| kind == :rest } &&
          parameters.none? { |(kind, _)| %i[keyreq key nokey].include?(kind) }
      end

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

      # Names of required and of optional keywords.
      def keywords(parameters)
        %i[keyreq key].map { |kind| parameters.select { |(k, _)| k == kind }.map(&:last) }
      end

      # The wrapper's local for each positional, rest, keyword rest and block
      # parameter: the original's name where it can be one.
      def name_locals(parameters)
        used = (@required_keywords + @optional_keywords).map(&:to_s)
        @positional = []
        others = {}
        parameters.each_with_index do |(kind, name), index|
          if %i[req opt].include?(kind)
            @positional << local(name, used, "arg#{index}")
          elsif ANONYMOUS.key?(kind)
            others[kind] = anonymous(kind, name) || local(name, used, kind.to_s)
          end
        end
        @rest, @keyrest, @block = others.values_at(:rest, :keyrest, :block)
        # A C method (which may take keywords), or Ruby 3.1's anonymous *.
        @unnamed_rest = parameters.include?([:rest])
      end

      # "*", "**" or "&" for a parameter Ruby 3.2+ reports as anonymous: the
      # wrapper forwards it anonymously too, and so reports it as the original.
      def anonymous(kind, name)
        name.to_s if name == ANONYMOUS[kind]
      end

      def local(name, used, role)
        text = name.to_s if name.is_a?(Symbol)
        text = "#{@prefix}#{role}" unless text && local_name?(text) && !used.include?(text)
        used << text
        text
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

      # Optional keywords through one hash rather than a +super+ call for
      # each combination of given and omitted ones.
      def keyword_hash?
        @optional_keywords.size > MAX_OPTIONAL_KEYWORDS
      end

      # Keywords that cannot be locals of the wrapper: then it forwards
      # everything with +...+ instead of naming parameters.
      def forward?
        return @forward if defined?(@forward)

        @forward = !(@required_keywords + @optional_keywords).all? { |keyword| local_name?(keyword.to_s) }
      end

      # Whether +text+ can be a local of the wrapper: a local of the template
      # would then read or overwrite the parameter instead of what it meant.
      def local_name?(text)
        (text.ascii_only? || (text.encoding == Encoding::UTF_8 && text.valid_encoding?)) &&
          text.match?(LOCAL_NAME) && !RESERVED_WORDS.include?(text) && !@template_locals.include?(text)
      end

      def keyword_parameters
        list = @required_keywords.map { |keyword| "#{keyword}:" }
        list.concat(@optional_keywords.each_with_index.map { |k, i| "#{k}: (#{keyword_omitted(i)} = true; nil)" })
        list << (@keyrest == "**" ? "**" : "**#{@keyrest}") if @keyrest
        list << "**nil" if @nokey
        list
      end

      # The positional arguments of the +super+ call when +optional_given+
      # optional positionals were given: *rest only holds any when all were.
      def positional_args(optional_given)
        args = Array.new(@lead + optional_given) { |i| @positional[i] }
        args << (@rest == "*" ? "*" : "*#{@rest}") if @rest && optional_given == @optional
        args + Array.new(@post) { |i| @positional[@lead + @optional + i] }
      end

      # The +super+ call for these positionals, choosing among the optional
      # keywords those that were given (flag unset).
      def keyword_call(positional, pending = @optional_keywords.each_index.to_a, passed = [])
        return super_with(positional, given_keywords_hash) if keyword_hash?
        return super_with(positional, passed.map { |i| @optional_keywords[i] }) if pending.empty?

        index, *others = pending
        "(#{keyword_omitted(index)} ? #{keyword_call(positional, others, passed)} : " \
          "#{keyword_call(positional, others, passed + [index])})"
      end

      # +optional+: the optional keywords to pass by name, or an expression
      # for a hash of them.
      def super_with(positional, optional)
        keywords = @required_keywords.map { |k| "#{k}: #{k}" }
        if optional.is_a?(String)
          keywords << "**#{optional}"
        else
          keywords.concat(optional.map { |k| "#{k}: #{k}" })
        end
        keywords << (@keyrest == "**" ? "**" : "**#{@keyrest}") if @keyrest
        args = positional + keywords
        args << "..." if @forward_all
        "super(#{args.join(", ")})"
      end

      # A hash of the optional keywords given: one allocation a call.
      def given_keywords_hash
        hash = "#{@prefix}given"
        sets = @optional_keywords.each_with_index.map do |keyword, i|
          "#{hash}[:#{keyword}] = #{keyword} unless #{keyword_omitted(i)}"
        end
        "(#{hash} = {}; #{sets.join("; ")}; #{hash})"
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
