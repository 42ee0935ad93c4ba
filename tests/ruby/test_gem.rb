# frozen_string_literal: true

# tests/ruby/test_gem.rb — the gem as a user gets it (CTest labels `ruby` and
# `gem`, no M:N rerun): `gem build rperf.gemspec` ships no tests and no
# build output; `gem install --local` into a temporary GEM_HOME builds the
# extension with CMake; then, from a directory outside the checkout and with
# nothing of the checkout on the load path, `ruby -rrperf` and `rperf stat`
# work. A missing prerequisite stops extconf.rb with one line naming the
# Debian package.

require_relative "helper"

class TestGem < Test::Unit::TestCase
  ROOT = File.expand_path("../..", __dir__)
  GEM = File.join(RbConfig::CONFIG["bindir"], "gem")
  VERSION = Rperf::VERSION

  # The checkout must not leak into the installed gem's processes.
  def clean_env(gem_home)
    { "GEM_HOME" => gem_home, "GEM_PATH" => gem_home, "RUBYLIB" => nil, "RUBYOPT" => nil,
      "RPERF_BUILD_DIR" => nil, "RPERF_ENABLED" => nil, "BUNDLE_GEMFILE" => nil }
  end

  def run_ok(env, *cmd, chdir:)
    out, err, st = Open3.capture3(env, *cmd, chdir: chdir)
    assert(st.success?, "#{cmd.join(' ')} failed (#{st.inspect})\n#{out}\n#{err}")
    [out, err]
  end

  def test_build_install_and_run
    Dir.mktmpdir("rperf-gem-test") do |tmp|
      gem_file = File.join(tmp, "rperf-#{VERSION}.gem")
      run_ok({}, RbConfig.ruby, GEM, "build", "rperf.gemspec", "--output", gem_file, chdir: ROOT)

      files, = run_ok({}, RbConfig.ruby, GEM, "spec", gem_file, "files", chdir: tmp)
      files = files.lines.grep(/^- /).map { |l| l.sub(/^- /, "").chomp }
      assert_include(files, "ext/rperf/extconf.rb")
      assert_include(files, "exe/rperf")
      assert_include(files, "ruby/lib/rperf/cli.rb")
      assert_include(files, "core/engine.c")
      bad = files.grep(%r{\A(tests|script|build[^/]*|bench|examples|\.ci)/|\.(so|o|a|gem)\z})
      assert_empty(bad, "the gem ships no tests, scripts or build output")

      gem_home = File.join(tmp, "gem home")
      env = clean_env(gem_home)
      run_ok(env, RbConfig.ruby, GEM, "install", "--local", "--no-document", gem_file, chdir: tmp)

      elsewhere = File.join(tmp, "app")
      Dir.mkdir(elsewhere)
      out, = run_ok(env, RbConfig.ruby, "-rrperf", "-e",
                    'd = Rperf.start { 1_000_000.times { } }; print $LOADED_FEATURES.grep(/rperf\.so/).first, "|", d[:aggregated_samples].size',
                    chdir: elsewhere)
      so, count = out.split("|")
      assert(so.start_with?(gem_home), "rperf.so comes from the gem: #{so}")
      assert_operator(count.to_i, :>, 0)

      rperf = File.join(gem_home, "bin", "rperf")
      _, err = run_ok(env, rperf, "stat", "ruby", "-e", "def gem_work = 2_000_000.times { }; gem_work",
                      chdir: elsewhere)
      assert_match(/Performance stats for 'ruby -e def gem_work/, err)
      assert_match(/^  \d+ samples \/ \d+ triggers/, err)

      _, err = run_ok(env, rperf, "record", "-o", "p.pb.gz", "ruby", "-e", "1_000_000.times { }",
                      chdir: elsewhere)
      assert(File.exist?(File.join(elsewhere, "p.pb.gz")), err)
    end
  end

  def test_missing_prerequisites_stop_with_one_message
    Dir.mktmpdir("rperf-extconf-test") do |tmp|
      extconf = File.join(ROOT, "ext", "rperf", "extconf.rb")
      out, err, st = Open3.capture3({ "CMAKE" => "/nonexistent/cmake" }, RbConfig.ruby, extconf, chdir: tmp)
      refute(st.success?)
      assert_equal("", out)
      assert_equal(["rperf: cannot build the extension: missing CMake >= 3.20; " \
                    "on Debian/Ubuntu: apt-get install cmake\n"], err.lines)

      _, err, st = Open3.capture3({ "CMAKE" => "/nonexistent/cmake", "CC" => "/nonexistent/cc" },
                                  RbConfig.ruby, extconf, chdir: tmp)
      refute(st.success?)
      assert_equal(1, err.lines.size, err)
      assert_match(/missing CMake >= 3\.20, a C11 compiler .*apt-get install cmake build-essential$/, err)
      refute(File.exist?(File.join(tmp, "Makefile")), "no Makefile after a failed check")
    end
  end
end
