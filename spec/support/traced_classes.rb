# frozen_string_literal: true

# Named classes for specs that trace them (providers are named after the
# class), each removed after its example, and whether a method is wrapped.
RSpec.shared_context "traced classes" do
  before { @defined = [] }
  after { @defined.each { |name| Object.send(:remove_const, name) } }

  def define_class(name, superclass = Object, &body)
    klass = Class.new(superclass)
    Object.const_set(name, klass)
    @defined << name
    klass.class_eval(&body) if body
    klass
  end

  def wrapped?(klass, name)
    klass.instance_method(name).owner != klass
  end
end
