# frozen_string_literal: true

module StaticTracing
  VERSION = "0.1.0"
end
