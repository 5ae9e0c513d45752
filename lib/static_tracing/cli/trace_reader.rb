# frozen_string_literal: true

# The reader of the recorder's files (ext/trace_reader): the format's one
# implementation, in Rust. A library of its own, so that the command loads
# it, and nothing of the gem's runtime (no watcher, no signal handlers, no
# stubs), into its own process, and only when it reads a file. It raises
# the command's errors, which are defined before it loads.
require_relative "../native_library"
StaticTracing::NativeLibrary.require("trace_reader")
