# frozen_string_literal: true

module StaticTracing
  # Provider and probe names arrive as Symbols or Strings. #string is where
  # a name from Ruby is checked, against the naming rule the native side
  # owns (Native::NAME_RULE); the stapsdt crate checks again only to defend
  # itself as a library. One exception, for speed: a probe name given to
  # Provider#add_tracepoint that is a Symbol or an ASCII String goes
  # straight to the native side, which applies the same rule with the same
  # message (Native.name_problem's); #string explains any other.
  module Names
    SHOWN_BYTES = 256

    module_function

    # The name as a String, or an ArgumentError that states the rule.
    def string(kind, name)
      unless name.is_a?(Symbol) || name.is_a?(String)
        raise ArgumentError, "#{kind} name must be a Symbol or String, got #{shown(name)}: " \
                             "#{kind} names #{Native::NAME_RULE}"
      end
      string = name.to_s
      unless string.ascii_only? && string.valid_encoding?
        # A UTF-16 "ab" shows as "ab": only its encoding tells what is wrong.
        problem = if string.encoding.ascii_compatible?
                    "only letters, digits and underscores are allowed"
                  else
                    "encoded in #{string.encoding}, not ASCII"
                  end
        raise ArgumentError, "invalid #{kind} name #{shown(string)} (#{problem}): #{kind} names #{Native::NAME_RULE}"
      end
      problem = Native.name_problem(kind.to_s, string)
      raise ArgumentError, problem if problem

      string
    end

    # A refused name as a message shows it: cut when long (as the native
    # side does), so that a megabyte of input does not make a megabyte of message.
    def shown(name)
      text = name.inspect
      return text if text.bytesize <= SHOWN_BYTES

      size = name.is_a?(String) || name.is_a?(Symbol) ? "#{name.to_s.bytesize} bytes" : "a #{name.class}"
      "#{text.byteslice(0, SHOWN_BYTES / 2).scrub("")}... (#{size})"
    end

    # The registry key for a name, or nil when it cannot name anything.
    def key(name)
      case name
      when Symbol then name
      when String then name.to_sym if name.ascii_only? && name.valid_encoding?
      end
    end
  end
end
