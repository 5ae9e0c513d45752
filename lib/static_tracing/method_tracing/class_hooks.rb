# frozen_string_literal: true

module StaticTracing
  module MethodTracing
    # Prepended to the singleton class of a traced class: sees its methods
    # come and go. (Visibility changes are seen by VisibilityHooks, native.)
    module ClassHooks
      def method_added(name)
        super
        StaticTracing::MethodTracing.method_defined(self, name)
      end

      def method_removed(name)
        super
        StaticTracing::MethodTracing.method_gone(self, name)
      end

      def method_undefined(name)
        super
        StaticTracing::MethodTracing.method_gone(self, name)
      end
    end

    # Prepended to a traced singleton class (class methods): its methods
    # come and go through the object it belongs to.
    module SingletonHooks
      private

      def singleton_method_added(name)
        super
        StaticTracing::MethodTracing.method_defined(singleton_class, name)
      end

      def singleton_method_removed(name)
        super
        StaticTracing::MethodTracing.method_gone(singleton_class, name)
      end

      def singleton_method_undefined(name)
        super
        StaticTracing::MethodTracing.method_gone(singleton_class, name)
      end
    end
  end
end
