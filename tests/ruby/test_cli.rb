# frozen_string_literal: true

# tests/ruby/test_cli.rb — the `rperf` command (exe/rperf, ruby/lib/rperf/cli.rb)
# run as a user runs it, from a temporary directory: every usage error (one
# line, the usage, exit 1, nothing run), help and version, record writing a
# readable file, stat/exec printing the stats block to stderr, settings
# reaching the command, and the command's exit status passed on; report and
# diff on files written here, and each of their error cases; rperf 0.6's
# messages and manual headings, word for word; an extension that does not
# load is one line. tests/ruby/test_cli_ruby_mismatch.rb runs the command
# under a Ruby the build is not for.

require_relative "helper"
require_relative "../interop/helper"
require "zlib"

class TestCLI < Test::Unit::TestCase
  EXE = File.expand_path("../../exe/rperf", __dir__)
  # A command that burns ~0.1 s of CPU in a named method.
  WORK = ["ruby", "-e", "def rperf_cli_work = 3_000_000.times { }; rperf_cli_work"].freeze

  def setup
    @dir = Dir.mktmpdir("rperf-cli-test")
  end

  def teardown
    FileUtils.remove_entry(@dir)
  end

  # -> [stdout, stderr, Process::Status], run in @dir
  # The command's output is UTF-8 (diff prints "Δ"), whatever the locale:
  # in the POSIX locale Open3 would tag it US-ASCII.
  def rperf(*args, env: {})
    out, err, st = Open3.capture3({ "RUBYOPT" => nil, "RPERF_ENABLED" => nil }.merge(env), RbConfig.ruby, EXE,
                                  *args, chdir: @dir)
    [out.force_encoding(Encoding::UTF_8), err.force_encoding(Encoding::UTF_8), st]
  end

  # A usage error: one message line, a blank line, the usage; exit 1; the
  # command did not run (it would have created a marker file).
  def assert_usage_error(args, message)
    marker = File.join(@dir, "ran")
    out, err, st = rperf(*args, "ruby", "-e", "File.write(#{marker.dump}, '')")
    assert_equal(1, st.exitstatus, "#{args.inspect}: #{err}")
    lines = err.lines
    assert_match(message, lines[0], args.inspect)
    assert_equal("\n", lines[1], "#{args.inspect}: a blank line, then the usage\n#{err}")
    assert_match(/\AUsage: rperf/, lines[2], args.inspect)
    assert_equal("", out)
    refute(File.exist?(marker), "#{args.inspect}: the command must not run")
    err
  end

  def test_no_subcommand
    out, err, st = rperf
    assert_equal(1, st.exitstatus)
    assert_equal("rperf: no subcommand given\n", err.lines[0])
    assert_match(/^Usage: rperf <subcommand>/, err)
    assert_equal("", out)
  end

  def test_unknown_subcommand
    err = assert_usage_error(["bogus"], /\AUnknown subcommand: "bogus"$/)
    assert_match(/^Subcommands:/, err)
  end

  def test_no_command
    %w[record stat exec].each do |sub|
      out, err, st = rperf(sub)
      assert_equal(1, st.exitstatus, sub)
      assert_equal("No command specified.\n", err.lines[0], sub)
      assert_match(/^Usage: rperf #{sub} \[options\] command/, err, sub)
      assert_equal("", out)
    end
  end

  def test_unknown_option
    %w[record stat exec].each do |sub|
      err = assert_usage_error([sub, "--bogus"], /\Arperf: invalid option: --bogus$/)
      assert_match(/^Usage: rperf #{sub} /, err)
    end
    assert_usage_error(%w[stat --print], /invalid option: --print/) # record only
    assert_usage_error(%w[record --report], /invalid option: --report/) # stat only
  end

  def test_missing_option_argument
    out, err, st = rperf("record", "-o")
    assert_equal(1, st.exitstatus)
    assert_equal("rperf: missing argument: -o\n", err.lines[0])
    assert_equal("", out)
  end

  def test_bad_frequency
    assert_usage_error(%w[record -f 0], /\AError: frequency must be a positive integer \(got 0\)$/)
    assert_usage_error(%w[stat --frequency -5], /\AError: frequency must be a positive integer \(got -5\)$/)
    assert_usage_error(%w[exec -f abc], /\AError: frequency must be a positive integer \(got abc\)$/)
    assert_usage_error(%w[record -f 10001], /\AError: frequency must be <= 10000 \(10KHz\), got 10001$/)
  end

  def test_bad_mode
    assert_usage_error(%w[record -m gpu], /\Arperf: mode must be cpu, wall or alloc, got "gpu"$/)
    assert_usage_error(%w[stat --mode CPU], /mode must be cpu or wall, got "CPU"/)
  end

  # ---- allocation profiles ----------------------------------------------------

  def test_record_mode_alloc_settings_reach_the_command
    show = ["/bin/sh", "-c", 'echo "$RPERF_MODE ${RPERF_ALLOC_INTERVAL-unset}"']
    out, err, st = rperf("record", "-m", "alloc", "--alloc-interval", "512", *show)
    assert_equal(0, st.exitstatus, err)
    assert_equal("alloc 512\n", out)
    # without --alloc-interval the library's default; a caller's value does not leak in
    out, err, st = rperf("record", "-m", "alloc", "-o", "h.pb.gz", *show, env: { "RPERF_ALLOC_INTERVAL" => "9" })
    assert_equal([0, "alloc unset\n"], [st.exitstatus, out], err)
    out, = rperf("record", "--alloc-interval=1073741824", "--mode=alloc", *show)
    assert_equal("alloc 1073741824\n", out)
  end

  def test_alloc_usage_errors
    range = "1\\.\\.1073741824"
    assert_usage_error(%w[record -m alloc --alloc-interval 0], /\Arperf: --alloc-interval must be an integer #{range}, got "0"$/)
    assert_usage_error(%w[record -m alloc --alloc-interval x], /--alloc-interval must be an integer #{range}, got "x"$/)
    assert_usage_error(%w[record -m alloc --alloc-interval 1073741825], /--alloc-interval must be an integer #{range}, got "1073741825"$/)
    assert_usage_error(%w[record --alloc-interval 64], /\Arperf: --alloc-interval needs -m alloc or --allocations$/)
    assert_usage_error(%w[record -m wall --alloc-interval 64], /\Arperf: --alloc-interval needs -m alloc or --allocations$/)
    assert_usage_error(%w[record -m alloc --allocations],
                       /\Arperf: --allocations is for -m cpu or wall \(-m alloc samples allocations alone\)$/)
    assert_usage_error(%w[stat --allocations], /\Arperf: invalid option: --allocations$/)
    %w[stat exec].each do |sub|
      assert_usage_error([sub, "-m", "alloc"], /\Arperf: mode must be cpu or wall, got "alloc" \(alloc: record only\)$/)
      assert_usage_error([sub, "--alloc-interval", "5"], /\Arperf: invalid option: --alloc-interval$/)
      assert_usage_error([sub, "--sample-index", "time"], /\Arperf: invalid option: --sample-index$/)
    end
    assert_usage_error(%w[record -m alloc --sample-index time],
                       /\Arperf: --sample-index must be alloc_objects, alloc_space, inuse_objects or inuse_space with -m alloc, got "time"$/)
    assert_usage_error(%w[record --sample-index inuse_space], /\Arperf: --sample-index must be time with -m cpu, got "inuse_space"$/)
    assert_usage_error(%w[record -m alloc --sample-index heap], /--sample-index must be .* with -m alloc, got "heap"$/)
  end

  # End to end: a real Ruby program and a forked child of it, recorded with
  # -m alloc; the report counts each method's allocations per sample index.
  def test_record_alloc_end_to_end
    # each process ends with a GC: objects are in use as of the last GC
    prog = "def cli_keep(k, n) = n.times { |i| k << [i] }\n" \
           "k = []; cli_keep(k, 200_000)\n" \
           "Process.wait(fork { j = []; cli_keep(j, 100_000); GC.start })\n" \
           "GC.start\n"
    _, err, st = rperf("record", "-m", "alloc", "--alloc-interval", "64", "-o", "heap.pb.gz", "ruby", "-e", prog)
    assert_equal(0, st.exitstatus, err)
    { "alloc_objects" => 300_000, "inuse_objects" => 300_000 }.each do |index, want|
      out, err, st = rperf("report", "--top", "--sample-index", index, "heap.pb.gz")
      assert_equal(0, st.exitstatus, err)
      assert_match(/^Type: #{index} \(count\)$/, out)
      line = out.lines.find { |l| l.include?("Object#cli_keep") }
      assert_not_nil(line, out)
      # flat column: 300,000 Arrays from two processes, estimated one in 64
      assert_in_delta(want, Integer(line.split.first), want * 0.08, line)
    end
  end

  # --allocations beside cpu time, a forked child included: either profile
  # comes out of the one run, chosen with --sample-index.
  def test_record_allocations_beside_time_end_to_end
    prog = "def cli_keep(k, n) = n.times { |i| k << [i] }\n" \
           "def cli_spin = (t = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID); " \
           "nil while Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - t < 0.1)\n" \
           "k = []; cli_keep(k, 200_000); cli_spin\n" \
           "Process.wait(fork { j = []; cli_keep(j, 100_000) })\n"
    out, err, st = rperf("record", "--allocations", "-m", "wall", "--alloc-interval", "128",
                         "/bin/sh", "-c", 'echo "$RPERF_MODE $RPERF_ALLOCATIONS $RPERF_ALLOC_INTERVAL"')
    assert_equal([0, "wall 1 128\n"], [st.exitstatus, out], err)
    _, err, st = rperf("record", "--allocations", "--alloc-interval", "64", "--sample-index", "alloc_objects",
                       "-o", "heap.pb.gz", "ruby", "-e", prog)
    assert_equal(0, st.exitstatus, err)
    out, err, st = rperf("report", "--top", "heap.pb.gz")
    assert_equal(0, st.exitstatus, err)
    assert_match(/^Type: alloc_objects \(count\)$/, out)
    line = out.lines.find { |l| l.include?("Object#cli_keep") }
    assert_not_nil(line, out)
    assert_in_delta(300_000, Integer(line.split.first), 300_000 * 0.08, line)
    _, err, st = rperf("record", "--allocations", "-o", "time.pb.gz", "ruby", "-e", prog)
    assert_equal(0, st.exitstatus, err)
    out, err, st = rperf("report", "--top", "time.pb.gz")
    assert_equal(0, st.exitstatus, err)
    assert_match(/^Type: cpu/, out)
    assert_match(/Object#cli_spin/, out)
  end

  def test_record_sample_index_time
    out, err, st = rperf("record", "-p", "--sample-index", "time", *WORK)
    assert_equal(0, st.exitstatus, err)
    assert_match(/\ATotal: [\d.]+ms \(cpu\)\n/, out)
  end

  def test_report_heap_profiles
    data = InteropHelper.alloc_profile
    Rperf.save(File.join(@dir, "heap.pb.gz"), data)
    out, err, st = rperf("report", "heap.pb.gz")
    assert_equal(0, st.exitstatus, err)
    assert_match(/^Type: inuse_space \(bytes\)$/, out, "the file's default type")
    { alloc_objects: "8192", alloc_space: "401kB", inuse_objects: "6144", inuse_space: "2.06MB" }.each do |t, total|
      out, err, st = rperf("report", "--sample-index", t.to_s, "heap.pb.gz")
      assert_equal(0, st.exitstatus, err)
      assert_match(/^Type: #{t} \((bytes|count)\)$/, out)
      assert_match(/ of #{Regexp.escape(total)} total\)$/, out, t)
    end
    out, _, st = rperf("report", "--text", "--sample-index", "alloc_space", "heap.pb.gz")
    assert_equal(0, st.exitstatus)
    assert_match(/\ATotal: 401\.0 KiB \(alloc_space\)\nSamples: \d+, interval 1024\n\n Flat:\n/, out)
    out, _, st = rperf("report", "--sample-index", "alloc_objects", "--label", "class=MyApp::User", "heap.pb.gz")
    assert_equal(0, st.exitstatus)
    assert_match(/^Filters: --label class=MyApp::User$/, out)
    assert_match(/^\s+1024\s+100\.00%\s+100\.00%\s+1024\s+100\.00%\s+block \(2 levels\) in <main> \(app\.rb\)$/, out)
    out, _, st = rperf("report", "--html", "--sample-index", "alloc_objects", "heap.pb.gz")
    assert_equal(0, st.exitstatus)
    assert_include(out, '"sample_type":"alloc_objects","unit":"objects"')
    out, err, st = rperf("diff", "--sample-index", "inuse_objects", "heap.pb.gz", "heap.pb.gz")
    assert_equal(0, st.exitstatus, err)
    assert_match(/^Base:   heap\.pb\.gz \(inuse_objects, 6144 total\)$/, out)
    # errors: a type the file lacks is one line; a bad value a usage error
    assert_report_error(%w[report --sample-index time heap.pb.gz],
                        /\Arperf: heap\.pb\.gz: no time sample type in this profile \(its types: alloc_objects\/count, /)
    write_profile("p.pb.gz")
    assert_report_error(%w[report --sample-index alloc_space p.pb.gz],
                        /\Arperf: p\.pb\.gz: no alloc_space sample type in this profile \(its types: cpu\/nanoseconds\)$/)
    out, _, st = rperf("report", "--sample-index", "time", "p.pb.gz")
    assert_equal([0, true], [st.exitstatus, out.include?("Type: cpu (nanoseconds)")])
    %w[report diff].each do |sub|
      assert_report_usage_error([sub, "--sample-index", "bogus", "heap.pb.gz", "heap.pb.gz"],
                                /\Arperf: --sample-index must be time, alloc_objects, alloc_space, inuse_objects or inuse_space, got "bogus"$/)
    end
  end

  def test_uncatchable_or_bad_signal
    range = Regexp.escape(Rperf::REALTIME_SIGNALS.to_s)
    assert_usage_error(%w[record --signal 9], /\AError: signal 9 \(KILL\) cannot be caught; use a different signal$/)
    assert_usage_error(%w[stat --signal 19], /\AError: signal 19 \(STOP\) cannot be caught/)
    assert_usage_error(%w[record --signal 99],
                       /\Arperf: signal must be a real-time signal number #{range} \(SIGRTMIN\.\.SIGRTMAX\) or false, got 99$/)
    assert_usage_error(%w[record --signal SIGUSR1], /signal must be a signal number or false, got "SIGUSR1"/)
    assert_usage_error(%w[record --signal false --backend signal], /--backend signal conflicts with --signal false/)
  end

  def test_signal_must_be_real_time
    # Signals below SIGRTMIN (here SIGPROF, SIGUSR1, SIGSEGV) are refused
    # like in Rperf.start; the range comes from the libc at run time.
    range = Regexp.escape(Rperf::REALTIME_SIGNALS.to_s)
    [Signal.list["PROF"], Signal.list["USR1"], Signal.list["SEGV"], Rperf::REALTIME_SIGNALS.min - 1,
     Rperf::REALTIME_SIGNALS.max + 1].each do |sig|
      assert_usage_error(%W[record --signal #{sig}], /real-time signal number #{range} .* or false, got #{sig}$/)
    end
  end

  def test_signal_with_nanosleep_backend
    # A number is the tick signal of either backend: --backend nanosleep
    # --signal N runs (nanosleep sends it to other Ractors' threads only).
    sig = Rperf::REALTIME_SIGNALS.min + 3
    out, err, st = rperf("record", "-p", "--backend", "nanosleep", "--signal", sig.to_s, *WORK)
    assert_equal(0, st.exitstatus, err)
    assert_match(/rperf_cli_work/, out)
  end

  def test_unknown_backend_and_format
    assert_usage_error(%w[record --backend itimer],
                       /\Arperf: unknown backend "itimer" \(available: #{Rperf.backends.join(', ')}\)$/)
    assert_usage_error(%w[record --format svg], /\Arperf: unknown format "svg" \(available: .*pprof.*\)$/)
  end

  def test_print_with_output
    assert_usage_error(%w[record -p -o x.txt], /-p\/--print and -o\/--output cannot be combined/)
  end

  def test_help_and_version
    out, err, st = rperf("--version")
    assert_equal(["rperf #{Rperf::VERSION}\n", "", 0], [out, err, st.exitstatus])
    out, _, st = rperf("-h")
    assert_equal(0, st.exitstatus)
    assert_match(/\AUsage: rperf <subcommand>/, out)
    assert_match(/^Run 'rperf help' for full documentation$/, out, "rperf 0.6's pointer to the manual")
    %w[record stat exec].each do |sub|
      out, err, st = rperf(sub, "-h")
      assert_equal(0, st.exitstatus, err)
      assert_match(/\AUsage: rperf #{sub} \[options\] command \[args\.\.\.\]/, out)
      %w[--output --frequency --mode --format --signal --backend --no-aggregate --verbose --help].each do |opt|
        assert_match(/#{opt}\b/, out, "#{sub} -h lists #{opt}")
      end
      assert_equal(sub == "record", out.include?("--print"), sub)
      assert_equal(sub == "record", out.include?("--alloc-interval"), sub)
      assert_equal(sub == "record", out.include?("--sample-index"), sub)
      assert_match(/^\s+-m, --mode MODE\s+#{sub == 'record' ? 'cpu, wall or alloc' : 'cpu or wall'}/, out, sub)
      assert_equal(sub == "stat", out.include?("--report"), sub)
      assert_equal(out, rperf("help", sub)[0], "rperf help #{sub} = rperf #{sub} -h")
    end
    out, _, st = rperf("help")
    assert_equal(0, st.exitstatus)
    assert(out.start_with?("# rperf manual\n"), "manual title")
  end

  # `rperf help` has rperf 0.6's section headings (docs/help.md of 0.6), in
  # 0.6's order, so that what its users look up is still found; our own
  # sections may come in between.
  RPERF06_HEADINGS = ["## OVERVIEW", "## CLI USAGE", "## RUBY API", "## PROFILING MODES", "## OUTPUT FORMATS",
                      "## SYNTHETIC FRAMES", "## INTERPRETING RESULTS", "## DIAGNOSING COMMON PERFORMANCE PROBLEMS",
                      "## READING COLLAPSED STACKS PROGRAMMATICALLY", "## READING PPROF PROGRAMMATICALLY",
                      "## ENVIRONMENT VARIABLES", "## TIPS"].freeze

  def test_help_has_rperf06_headings
    out, err, st = rperf("help")
    assert_equal([0, ""], [st.exitstatus, err])
    lines = out.lines.map(&:chomp)
    at = RPERF06_HEADINGS.map { |h| lines.index(h) }
    missing = RPERF06_HEADINGS.zip(at).filter_map { |h, i| h unless i }
    assert_empty(missing, "rperf help lacks rperf 0.6's headings")
    assert_equal(at.sort, at, "in rperf 0.6's order")
  end

  # Where rperf 0.6 printed a message, the command prints 0.6's line word
  # for word (no `rperf: ` prefix), as a grep of a script or CI log for it
  # expects; then, as for every usage error, the usage. Exit status 1.
  def test_rperf06_messages
    write_profile("p.pb.gz")
    {
      %w[bogus] => "Unknown subcommand: \"bogus\"",
      %w[record] => "No command specified.",
      %w[stat -m cpu] => "No command specified.",
      %w[record -f 0 ruby -e 1] => "Error: frequency must be a positive integer (got 0)",
      %w[stat -f -3 ruby -e 1] => "Error: frequency must be a positive integer (got -3)",
      %w[exec -f 20000 ruby -e 1] => "Error: frequency must be <= 10000 (10KHz), got 20000",
      %w[record --signal 9 ruby -e 1] => "Error: signal 9 (KILL) cannot be caught; use a different signal",
      %w[stat --signal 19 ruby -e 1] => "Error: signal 19 (STOP) cannot be caught; use a different signal",
      %w[report missing.pb.gz] => "File not found: missing.pb.gz",
      %w[report --top 5 missing.pb.gz] => "File not found: missing.pb.gz",
      %w[report] => "File not found: rperf.data",
      %w[diff p.pb.gz missing.pb.gz] => "File not found: missing.pb.gz",
      %w[diff p.pb.gz] => "Two profile files required.",
      %w[diff] => "Two profile files required.",
    }.each do |args, line|
      out, err, st = rperf(*args)
      assert_equal(1, st.exitstatus, "#{args.inspect}: #{err}")
      assert_equal("", out, args.inspect)
      assert_equal("#{line}\n", err.lines[0], args.inspect)
      assert_equal(1, err.lines.grep(/\A#{Regexp.escape(line)}$/).size, "#{args.inspect}: grep finds it once\n#{err}")
      refute_match(/^\s+from |\.rb:\d+:in /, err, "#{args.inspect}: no stack trace")
    end
  end

  # rperf.so that does not load into this Ruby (here: not an ELF file) is
  # one line naming the Ruby and what to do, exit 1, before the command
  # runs; never the loader's stack trace or a NameError from a rescue
  # clause naming a class the library did not get to define.
  def test_extension_that_does_not_load
    write_profile("p.pb.gz")
    build = File.join(@dir, "broken build")
    FileUtils.mkdir_p(File.join(build, "lib"))
    File.write(File.join(build, "lib", "rperf.so"), "not a shared object\n")
    File.write(File.join(build, "CMakeCache.txt"), "RPERF_RUBY:FILEPATH=#{RbConfig.ruby}\n")
    env = { "RPERF_BUILD_DIR" => build }
    marker = File.join(@dir, "ran")
    [%w[report p.pb.gz], %w[report --html p.pb.gz], %w[diff p.pb.gz p.pb.gz], %w[record --backend holder true],
     ["record", "-p", "ruby", "-e", "File.write(#{marker.dump}, '')"],
     ["stat", "ruby", "-e", "File.write(#{marker.dump}, '')"]].each do |args|
      out, err, st = rperf(*args, env: env)
      assert_equal(1, st.exitstatus, "#{args.inspect}: #{err}")
      assert_equal("", out, args.inspect)
      assert_equal(1, err.lines.size, "#{args.inspect}: one line\n#{err}")
      assert_match(/\Arperf: cannot load the rperf extension into Ruby #{Regexp.escape(RUBY_VERSION)} .*rperf\.so.*script\/setup/,
                   err, args.inspect)
      refute(File.exist?(marker), "#{args.inspect}: the command must not run")
    end
  end

  # A defect of the command itself (here: run raising) is still one line,
  # naming the exception and where it was raised; exit status 1.
  def test_internal_error_is_one_line
    prog = 'module Rperf; class CLI; prepend(Module.new { def run(_) = raise(TypeError, "boom\nmore") }); end; end; ' \
           "load #{EXE.dump}"
    out, err, st = Open3.capture3({ "RUBYOPT" => nil, "RPERF_ENABLED" => nil }, RbConfig.ruby, "-e", prog, "--", "help",
                                  chdir: @dir)
    assert_equal([1, ""], [st.exitstatus, out])
    assert_match(/\Arperf: internal error: TypeError: boom \(.*\)\n\z/, err)
  end

  def test_record_writes_pprof_by_default
    out, err, st = rperf("record", *WORK)
    assert_equal(0, st.exitstatus, err)
    assert_equal("", out)
    path = File.join(@dir, "rperf.data")
    assert(File.exist?(path), "record writes rperf.data in the current directory")
    pb = Zlib.gunzip(File.binread(path))
    assert_equal(0x0a, pb.getbyte(0), "a pprof Profile (field 1 first)")
    assert_include(pb, "Object#rperf_cli_work")
    assert_include(pb, "mode: cpu")
  end

  def test_record_output_format_from_suffix_and_flag
    _, err, st = rperf("record", "-o", "p.collapsed", *WORK)
    assert_equal(0, st.exitstatus, err)
    lines = File.read(File.join(@dir, "p.collapsed")).lines
    assert(lines.all? { |l| l.match?(/\A\S.* \d+\n\z/) }, lines.first(3).inspect)
    assert(lines.any? { |l| l.include?("Object#rperf_cli_work") })

    _, err, st = rperf("record", "--format", "text", "-o", "p.out", *WORK)
    assert_equal(0, st.exitstatus, err)
    assert_match(/\ATotal: [\d.]+ms \(cpu\)\n/, File.read(File.join(@dir, "p.out")))
  end

  def test_settings_reach_the_command
    out, err, st = rperf("record", "-p", "-v", "-f", "250", "-m", "wall", "--signal", "false", *WORK)
    assert_equal(0, st.exitstatus, err)
    assert_match(/\ATotal: [\d.]+ms \(wall\)\nSamples: \d+, Frequency: 250Hz\n/, out)
    assert_match(/Object#rperf_cli_work/, out)
    assert_match(/^\[rperf\] mode=wall frequency=250Hz backend=nanosleep$/, err)
    assert_empty(Dir.children(@dir), "-p writes no file")
  end

  def test_verbose_tables
    _, err, st = rperf("record", "-v", "-o", "v.pb.gz", *WORK)
    assert_equal(0, st.exitstatus, err)
    flat = err.index("[rperf] top 10 by flat:\n")
    cum = err.index("[rperf] top 10 by cum:\n")
    assert(flat && cum && flat < cum, err)
    assert_match(/^\[rperf\] +[\d.]+ms +[\d.]+%  Object#rperf_cli_work \(-e\)$/, err[cum..])
  end

  def test_stat_prints_the_block_to_stderr
    out, err, st = rperf("stat", *WORK, env: { "RPERF_OUTPUT" => "leaked.pb.gz" })
    assert_equal(0, st.exitstatus, err)
    assert_equal("", out)
    assert_include(err, "\n Performance stats for '#{WORK.join(' ')}':\n\n")
    %w[user sys real].each { |w| assert_match(/^ +[\d,]+\.\d ms +#{w}$/, err) }
    assert_match(/^ +[\d,]+\.\d ms +[\d.]+%  CPU execution$/, err)
    assert_match(/\[Ruby\] GC time \(\d+ count: \d+ minor, \d+ major\)/, err)
    assert_match(/^  \d+ samples \/ \d+ triggers, [\d.]+% profiler overhead$/, err)
    refute_match(/^ Flat:/, err, "tables only with --report")
    assert_empty(Dir.children(@dir), "stat writes no file (RPERF_OUTPUT from outside is not passed on)")

    _, err, st = rperf("stat", "--report", *WORK)
    assert_equal(0, st.exitstatus, err)
    assert_match(/^ Flat:.*Object#rperf_cli_work.* Cumulative:/m, err)

    _, err, st = rperf("exec", "-o", "e.pb.gz", *WORK)
    assert_equal(0, st.exitstatus, err)
    assert_match(/Performance stats for .* Flat:.* Cumulative:/m, err)
    assert(File.exist?(File.join(@dir, "e.pb.gz")), "stat/exec -o writes the file too")
  end

  def test_exit_status_propagates
    %w[record stat exec].each do |sub|
      _, err, st = rperf(sub, "-o", "x.pb.gz", "ruby", "-e", "exit 7")
      assert_equal(7, st.exitstatus, "#{sub}: #{err}")
    end
    _, _, st = rperf("stat", "ruby", "-e", "Process.kill(:TERM, $$)")
    assert_equal(Signal.list["TERM"], st.termsig, "a command killed by a signal")
    _, err, st = rperf("record", "rperf-no-such-command")
    assert_equal(127, st.exitstatus)
    assert_equal("rperf: command not found: rperf-no-such-command\n", err)
  end

  # ---- report / diff ------------------------------------------------------

  REPORT_DATA = {
    mode: :cpu, frequency: 1000, duration_ns: 50_000_000,
    aggregated_samples: [[[["a.rb", "Hot#spin"], ["a.rb", "main"]], 30_000_000, 1, 1],
                         [[["b.rb", "Cold#wait"], ["a.rb", "main"]], 10_000_000, 2, 0]],
    label_sets: [{}, { job: "x" }],
    threads: [{ thread_seq: 1, ractor_id: 1 }, { thread_seq: 2, ractor_id: 1 }],
  }.freeze

  def write_profile(name, data = REPORT_DATA)
    Rperf.save(File.join(@dir, name), data)
    name
  end

  # A data error: one line naming the file, no usage, exit 1.
  def assert_report_error(args, message)
    out, err, st = rperf(*args)
    assert_equal(1, st.exitstatus, "#{args.inspect}: #{err}")
    assert_equal("", out)
    assert_equal(1, err.lines.size, "#{args.inspect}: one line, no usage\n#{err}")
    assert_match(message, err, args.inspect)
  end

  # A usage error of report/diff: the message, a blank line, the subcommand's usage.
  def assert_report_usage_error(args, message)
    out, err, st = rperf(*args)
    assert_equal(1, st.exitstatus, "#{args.inspect}: #{err}")
    assert_equal("", out)
    assert_match(message, err.lines[0], args.inspect)
    assert_equal("\n", err.lines[1], args.inspect)
    assert_match(/\AUsage: rperf #{args[0]} \[options\]/, err.lines[2], args.inspect)
  end

  def test_report_and_diff
    write_profile("p.pb.gz")
    out, err, st = rperf("report", "p.pb.gz")
    assert_equal(0, st.exitstatus, err)
    assert_match(/^Showing top 3 of 3 functions/, out)
    assert_match(/^\s+30ms\s+75\.00%\s+75\.00%\s+30ms\s+75\.00%\s+Hot#spin \(a\.rb\)$/, out)
    # --top N before or after the file; --top FILE is --top alone
    [%w[report --top 1 p.pb.gz], %w[report p.pb.gz --top 1], %w[report --top=1 p.pb.gz]].each do |args|
      out, err, st = rperf(*args)
      assert_equal(0, st.exitstatus, err)
      assert_match(/^Showing top 1 of 3 functions/, out, args.inspect)
    end
    out, _, st = rperf("report", "--top", "p.pb.gz")
    assert_equal([0, true], [st.exitstatus, out.include?("Showing top 3 of 3")])
    # --html / --flame: the self-contained flame graph page on stdout
    %w[--html --flame].each do |opt|
      out, err, st = rperf("report", opt, "p.pb.gz")
      assert_equal(0, st.exitstatus, err)
      assert_match(/\A<!DOCTYPE html>/i, out, opt)
      assert_include(out, "Hot#spin", opt)
      refute_match(%r{https?://}, out, "no network reference (#{opt})")
    end
    out, _, st = rperf("report", "--thread", "2", "--label", "ractor=1", "p.pb.gz")
    assert_equal(0, st.exitstatus)
    assert_match(/^Filters: --thread 2 --label ractor=1$/, out)
    assert_match(/Cold#wait/, out)
    refute_match(/Hot#spin/, out)
    out, _, = rperf("report", "--label", "job=x", "--ignore", "^Hot", "p.pb.gz")
    assert_match(/^No samples match the filters\.$/, out)
    out, _, st = rperf("report", "--text", "p.pb.gz")
    assert_equal(0, st.exitstatus)
    assert_match(/\ATotal: 40\.0ms \(cpu\)\n/, out)
    assert_match(/^ Flat:\n\s+30\.0 ms  75\.0%  Hot#spin \(a\.rb\)$/, out)
    # report reads rperf.data by default
    FileUtils.cp(File.join(@dir, "p.pb.gz"), File.join(@dir, "rperf.data"))
    out, _, st = rperf("report")
    assert_equal([0, "File: rperf.data\n"], [st.exitstatus, out.lines[0]])

    slower = REPORT_DATA.merge(aggregated_samples: [REPORT_DATA[:aggregated_samples][0],
                                                    [REPORT_DATA[:aggregated_samples][1][0], 25_000_000, 2, 0]])
    write_profile("q.json", slower)
    out, err, st = rperf("diff", "p.pb.gz", "q.json")
    assert_equal(0, st.exitstatus, err)
    assert_match(/^Change: \+15ms \(\+37\.50%\)$/, out)
    assert_match(/^\s+\+15ms\s+\+15ms\s+10ms\s+25ms\s+Cold#wait \(b\.rb\)$/, out)
  end

  def test_report_errors
    write_profile("p.pb.gz")
    File.write(File.join(@dir, "garbage.pb.gz"), "not a profile at all\n")
    assert_report_error(%w[report missing.pb.gz], /\AFile not found: missing\.pb\.gz$/)
    assert_report_error(%w[report], /\AFile not found: rperf\.data$/)
    Dir.mkdir(File.join(@dir, "adir"))
    assert_report_error(%w[report adir], /\Arperf: adir: is a directory, not a profile$/)
    assert_report_error(%w[report garbage.pb.gz], /\Arperf: garbage\.pb\.gz: not a readable pprof profile: /)
    assert_report_error(%w[diff p.pb.gz garbage.pb.gz], /\Arperf: garbage\.pb\.gz: not a readable pprof/)
    File.write(File.join(@dir, "unreadable.pb.gz"), "x")
    File.chmod(0, File.join(@dir, "unreadable.pb.gz"))
    unless Process.uid.zero? # root reads it anyway
      assert_report_error(%w[report unreadable.pb.gz], /\Arperf: unreadable\.pb\.gz: cannot read: /)
    end
    %w[report diff].each do |sub|
      assert_report_usage_error([sub, "--bogus", "p.pb.gz", "p.pb.gz"], /\Arperf: invalid option: --bogus$/)
      assert_report_usage_error([sub, "--focus", "(", "p.pb.gz", "p.pb.gz"],
                                /\Arperf: invalid --focus regex "\(": end pattern with unmatched parenthesis/)
      assert_report_usage_error([sub, "--ignore", "[", "p.pb.gz", "p.pb.gz"], /\Arperf: invalid --ignore regex "\["/)
      assert_report_usage_error([sub, "--top", "0", "p.pb.gz", "p.pb.gz"],
                                /\Arperf: --top must be a positive integer, got 0$/)
      assert_report_usage_error([sub, "--top=-2", "p.pb.gz", "p.pb.gz"], /--top must be a positive integer, got -2$/)
      assert_report_usage_error([sub, "--thread", "x", "p.pb.gz", "p.pb.gz"],
                                /\Arperf: --thread must be a positive thread number, got "x"$/)
      assert_report_usage_error([sub, "--label", "novalue", "p.pb.gz", "p.pb.gz"],
                                /\Arperf: --label must be KEY=VALUE, got "novalue"$/)
    end
    assert_report_usage_error(%w[diff p.pb.gz], /\ATwo profile files required\.$/)
    assert_report_usage_error(%w[diff], /\ATwo profile files required\.$/)
    assert_report_usage_error(%w[diff p.pb.gz p.pb.gz p.pb.gz],
                              /\Arperf: diff reads two files \(BASE TARGET\), got 3: p\.pb\.gz p\.pb\.gz p\.pb\.gz$/)
    assert_report_usage_error(%w[report p.pb.gz p.pb.gz], /\Arperf: report reads one file, got 2/)
    assert_report_usage_error(%w[report --text --top 3 p.pb.gz], /--top and --text cannot be combined/)
    assert_report_usage_error(%w[diff --text p.pb.gz p.pb.gz], /invalid option: --text/)
  end

  def test_report_help
    %w[report diff].each do |sub|
      [[sub, "-h"], ["help", sub]].each do |args|
        out, err, st = rperf(*args)
        assert_equal(0, st.exitstatus, err)
        assert_match(/\AUsage: rperf #{sub} \[options\]/, out)
        %w[--top --focus --ignore --thread --label --sample-index].each { |o| assert_match(/#{o}\b/, out, "#{args.inspect}: #{o}") }
      end
    end
    out, = rperf("-h")
    assert_match(/^\s+report\s/, out)
    assert_match(/^\s+diff\s/, out)
  end

  def test_non_ruby_command_runs_unchanged
    out, err, st = rperf("stat", "/bin/sh", "-c", "echo \"$RPERF_MODE $RPERF_ENABLED\"; exit 3")
    assert_equal(3, st.exitstatus, err)
    assert_equal("wall 1\n", out)
  end
end

# `require "rperf"` loads what rperf 0.6 loaded, so its users' scripts work.
class TestRequire < Test::Unit::TestCase
  def test_require_loads_zlib_and_stringio
    out, err, st = Open3.capture3(RbConfig.ruby, "--disable-gems", "-I", RPERF_BUILD_LIB,
                                  "-I", File.expand_path("../../ruby/lib", __dir__), "-e",
                                  'require "rperf"; print [Zlib::GzipWriter, StringIO].join(",")')
    assert(st.success?, err)
    assert_equal("Zlib::GzipWriter,StringIO", out)
  end
end
