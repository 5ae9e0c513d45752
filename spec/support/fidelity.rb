# frozen_string_literal: true

# For the specs comparing a traced method with its untraced self.
module FidelityHelpers
  # Turns tracing on and checks that +klass+'s method +name+ is wrapped now.
  def enable_and_check_wrapped(klass, name)
    StaticTracing.enable!
    expect(klass.instance_method(name).owner).to be_a(StaticTracing::MethodTracing::Wrappers)
  end
end
