# frozen_string_literal: true

# tests/ruby/test_cli_ruby_mismatch.rb — the checkout's `rperf` command run by
# a Ruby the build is not for: Debian's /usr/bin/ruby (3.1 on Debian 12),
# the one `#!/usr/bin/env ruby` picks when it comes first on PATH. The
# command runs itself under the build's Ruby (recorded as RPERF_RUBY in the
# build's CMakeCache.txt), so report, record and usage errors behave as
# under that Ruby; when the build's Ruby is not there, or no Ruby is
# recorded and this one is older than rperf needs, it prints one line
# naming the Ruby and how to run the command, exit status 1, and runs
# nothing. Never a stack trace.

require_relative "helper"
require "fileutils"

class TestCLIRubyMismatch < Test::Unit::TestCase
  EXE = File.expand_path("../../exe/rperf", __dir__)
  OTHER_RUBY = "/usr/bin/ruby"
  BUILD_DIR = File.dirname(RPERF_BUILD_LIB)

  def setup
    omit("#{OTHER_RUBY} is absent: no other Ruby to run the command with") unless File.executable?(OTHER_RUBY)
    version = IO.popen([OTHER_RUBY, "-e", "print RUBY_VERSION"], &:read)
    if (version.split(".").map(&:to_i) <=> [3, 3]) >= 0
      omit("#{OTHER_RUBY} is Ruby #{version}, not one older than the 3.3 the build needs")
    end
    @other_version = version
    @dir = Dir.mktmpdir("rperf-cli-mismatch")
  end

  def teardown
    FileUtils.remove_entry(@dir) if @dir
  end

  # -> [stdout, stderr, Process::Status]: `/usr/bin/ruby exe/rperf ARGS` in @dir
  def other_ruby_rperf(*args, env: {})
    base = { "RUBYOPT" => nil, "RUBYLIB" => nil, "RPERF_ENABLED" => nil, "RPERF_EXE_REEXEC" => nil,
             "RPERF_BUILD_DIR" => BUILD_DIR }
    out, err, st = Open3.capture3(base.merge(env), OTHER_RUBY, EXE, *args, chdir: @dir)
    [out.force_encoding(Encoding::UTF_8), err.force_encoding(Encoding::UTF_8), st]
  end

  def write_profile
    Rperf.save(File.join(@dir, "p.pb.gz"),
               { mode: :cpu, frequency: 1000, duration_ns: 40_000_000,
                 aggregated_samples: [[[["a.rb", "Hot#spin"], ["a.rb", "main"]], 30_000_000, 1, 0]],
                 label_sets: [{}] })
  end

  def refute_stack_trace(err, what)
    refute_match(/^\s+from |:in [`']|\(NameError\)|\(LoadError\)/, err, "#{what}: no stack trace")
  end

  # The case first reported: `report --html` under Debian's Ruby printed
  # "incompatible library version" and then a NameError from a rescue clause.
  def test_runs_itself_under_the_builds_ruby
    write_profile
    out, err, st = other_ruby_rperf("report", "--html", "p.pb.gz")
    assert_equal([0, ""], [st.exitstatus, err])
    assert_match(/\A<!DOCTYPE html>/i, out)
    assert_include(out, "Hot#spin")

    out, err, st = other_ruby_rperf("--version")
    assert_equal(["rperf #{Rperf::VERSION}\n", "", 0], [out, err, st.exitstatus])

    # `ruby` in the command is the build's Ruby, as under that Ruby
    out, err, st = other_ruby_rperf("record", "-p", "ruby", "-e",
                                    "def mismatch_work = 3_000_000.times { }; mismatch_work; print RUBY_VERSION")
    assert_equal(0, st.exitstatus, err)
    assert_match(/Object#mismatch_work/, out)
    assert_match(/\A#{Regexp.escape(RUBY_VERSION)}Total: /, out, "the command ran the build's Ruby")

    # errors are those of the build's Ruby: one line, then the usage
    out, err, st = other_ruby_rperf("record")
    assert_equal([1, ""], [st.exitstatus, out])
    assert_equal("No command specified.\n", err.lines[0])
    out, err, st = other_ruby_rperf("report", "missing.pb.gz")
    assert_equal([1, "", "File not found: missing.pb.gz\n"], [st.exitstatus, out, err])

    # the marker of the second run does not reach the command
    out, err, st = other_ruby_rperf("stat", "/bin/sh", "-c", 'echo "${RPERF_EXE_REEXEC-unset}"')
    assert_equal([0, "unset\n"], [st.exitstatus, out], err)
  end

  # A build whose Ruby is gone: one line naming it and how to run the command.
  def test_builds_ruby_not_there
    write_profile
    build = File.join(@dir, "build")
    FileUtils.mkdir_p(File.join(build, "lib"))
    File.write(File.join(build, "CMakeCache.txt"), "CMAKE_BUILD_TYPE:STRING=RelWithDebInfo\n" \
                                                   "RPERF_RUBY:FILEPATH=/nonexistent/rperf-ruby/bin/ruby\n")
    marker = File.join(@dir, "ran")
    [%w[report --html p.pb.gz], %w[--version], %w[help], %w[bogus],
     ["record", "ruby", "-e", "File.write(#{marker.dump}, '')"]].each do |args|
      out, err, st = other_ruby_rperf(*args, env: { "RPERF_BUILD_DIR" => build })
      assert_equal([1, ""], [st.exitstatus, out], "#{args.inspect}: #{err}")
      assert_equal(1, err.lines.size, "#{args.inspect}: one line\n#{err}")
      head = "rperf: this checkout's build (#{build}) is for /nonexistent/rperf-ruby/bin/ruby, which is not there; "
      assert(err.start_with?(head), "#{args.inspect}: #{err}")
      assert_match(%r{; this is .* \(Ruby #{Regexp.escape(@other_version)}\); .*script/ruby exe/rperf}, err, args.inspect)
      refute_stack_trace(err, args.inspect)
      refute(File.exist?(marker), "#{args.inspect}: the command must not run")
    end
  end

  # Nothing built and no Ruby recorded (no CMakeCache.txt, no RPERF_RUBY, no
  # ruby-path from script/setup): a Ruby older than 3.3.1 is one line.
  def test_no_ruby_recorded_and_too_old
    empty = File.join(@dir, "not built")
    Dir.mkdir(empty)
    env = { "RPERF_BUILD_DIR" => empty, "RPERF_RUBY" => nil, "RPERF_CACHE" => File.join(@dir, "no cache") }
    [%w[--version], %w[report p.pb.gz], %w[stat true]].each do |args|
      out, err, st = other_ruby_rperf(*args, env: env)
      assert_equal([1, ""], [st.exitstatus, out], "#{args.inspect}: #{err}")
      assert_equal(1, err.lines.size, "#{args.inspect}: one line\n#{err}")
      assert_match(/\Arperf: rperf needs Ruby >= 3\.3\.1, this is .* \(Ruby #{Regexp.escape(@other_version)}\); .*script\/setup.*script\/ruby exe\/rperf/,
                   err, args.inspect)
      refute_stack_trace(err, args.inspect)
    end
  end
end
