# frozen_string_literal: true

# rperf.gemspec — `gem build rperf.gemspec && gem install --local rperf-*.gem`.
# The extension is built by the project's CMake, driven by
# ext/rperf/extconf.rb (tests off, no -Werror). The gem ships the C sources,
# the CMake files, the Ruby library and the `rperf` command; no tests, no
# scripts, no build output.

version = File.read(File.join(__dir__, "ruby/lib/rperf.rb"), encoding: "UTF-8")[/^\s*VERSION = "([^"]+)"/, 1] or
  raise "rperf.gemspec: VERSION not found in ruby/lib/rperf.rb"

Gem::Specification.new do |s|
  s.name = "rperf"
  s.version = version
  s.summary = "A Ractor-aware sampling profiler for Ruby (C11 extension)"
  s.description = "Time-corrected safepoint sampling with GVL and GC attribution, " \
                  "per-thread lock-free rings, pprof/collapsed/speedscope/text output " \
                  "and the rperf command (record, stat, exec)."
  s.authors = ["rperf developers"]
  # 3.3.1: a postponed job triggered from a non-Ruby thread goes to the
  # main Ractor's running thread (Ruby bug #20197), which the default
  # backend's direct trigger relies on; 3.3.0 sends it to the main thread.
  # Tested on 3.3 and 3.4; a newer series runs in rperf's conservative form
  # (docs/architecture.md, "Ruby versions").
  s.required_ruby_version = ">= 3.3.1"
  s.platform = Gem::Platform::RUBY

  s.files = Dir.chdir(__dir__) do
    Dir[
      "CMakeLists.txt",
      "{core,backends,exporters}/**/*.{c,h}",
      "{core,backends,exporters,ruby}/CMakeLists.txt",
      "ruby/*.{c,h}",
      "ruby/lib/**/*.{rb,md}",
      "ext/rperf/extconf.rb",
      "exe/rperf",
      "README.md",
      "docs/*.md",
    ].sort
  end
  s.require_paths = ["ruby/lib"]
  s.extensions = ["ext/rperf/extconf.rb"]
  s.bindir = "exe"
  s.executables = ["rperf"]
end
