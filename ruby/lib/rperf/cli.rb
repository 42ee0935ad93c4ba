# frozen_string_literal: true

# rperf/cli.rb — the `rperf` command (exe/rperf): record, stat, exec,
# report, diff, help.
#
# record/stat/exec: the CLI never profiles itself. It validates the options, then runs the
# command with `RUBYOPT=-rrperf`, the library on `RUBYLIB` and the settings in
# `RPERF_*` variables, so that every Ruby started by the command profiles
# itself through the library's environment auto-start (ruby/lib/rperf.rb).
# Every such process (forks and spawned Ruby children too) writes its own
# pprof, named by its pid, into a private directory of this run
# (RPERF_CHILD_DIR: $TMPDIR/rperf-run-<cli pid>-<random>, mode 0700): a
# window every RPERF_WINDOW_SECONDS while it runs (RPERF_CHILD_WINDOWS=1)
# and the rest at its exit, each with its counters. While the command runs
# a thread of the CLI folds the windows into one aggregate per process
# (Rperf::Children) and deletes them; when the command has exited the CLI
# takes every part and merges them into one profile with a numeric `pid`
# label on every sample (ruby/merge.c), names the processes that ended
# without their last part (SIGKILL after a window), writes the output /
# prints the stats block with every process summed, and removes the
# directory. Directories of runs whose CLI is gone are removed at the
# next start. `record -m alloc` samples allocations instead of time
# (RPERF_MODE=alloc, and RPERF_ALLOC_INTERVAL from --alloc-interval): the
# processes write heap profiles, merged like time profiles; `record
# --allocations` samples them beside cpu or wall time (RPERF_ALLOCATIONS=1);
# --sample-index names the sample type written (report/diff: the type read).
# It exits with the command's status (a command killed by a
# signal kills the CLI with the same signal). report/diff read profile files
# in-process through Rperf::Report (ruby/lib/rperf/report.rb; no Go): a
# missing file is `File not found: <file>`, a file that cannot be read is one
# line `rperf: <file>: <why>`, exit status 1.
# Every usage error is one line on stderr plus the usage text, exit status 1;
# any other error (the extension cannot be loaded, a bug) is one line, exit
# status 1, never a stack trace. Where rperf 0.6 had a message for the same
# case, the line is 0.6's, word for word and without our `rperf: ` prefix
# (scripts and CI logs grep for it); our own messages start with `rperf: `.
# docs/cli.md lists every option and message; ruby/lib/rperf/help.md is the
# manual `rperf help` prints.

require "fileutils"
require "optparse"
require "rbconfig"
require "tmpdir"
require_relative "run_dir"

module Rperf
  class CLI
    LIB_DIR = File.expand_path("..", __dir__)
    VERSION = File.read(File.join(LIB_DIR, "rperf.rb"), encoding: "UTF-8")[/^\s*VERSION = "([^"]+)"/, 1]
    MANUAL = File.join(__dir__, "help.md")
    MAX_FREQUENCY = 10_000
    UNCATCHABLE = { Signal.list["KILL"] => "KILL", Signal.list["STOP"] => "STOP" }.freeze
    # Signals the CLI passes on to the command. INT and QUIT come from the
    # terminal to the whole process group, so the command has them already.
    FORWARDED = %w[TERM HUP USR1 USR2].freeze
    # Variables the CLI owns: unset in the command's environment unless set.
    ENV_KEYS = %w[RPERF_ENABLED RPERF_MODE RPERF_FREQUENCY RPERF_OUTPUT RPERF_FORMAT RPERF_SIGNAL
                  RPERF_BACKEND RPERF_AGGREGATE RPERF_STAT RPERF_VERBOSE RPERF_STAT_COMMAND
                  RPERF_STAT_REPORT RPERF_CHILD_DIR RPERF_CHILD_WINDOWS RPERF_ALLOC_INTERVAL
                  RPERF_ALLOCATIONS].freeze
    # -m values: record takes alloc too (allocation sampling; the time modes
    # are what stat/exec report on).
    MODES = %w[cpu wall].freeze
    RECORD_MODES = %w[cpu wall alloc].freeze
    MAX_ALLOC_INTERVAL = 1 << 30 # the limit of Rperf.start's alloc_interval:
    # --sample-index values (Go pprof's name for the sample type shown).
    SAMPLE_INDEXES = %w[time alloc_objects alloc_space inuse_objects inuse_space].freeze
    # The run's private directory in Dir.tmpdir: rperf-run-<CLI pid>-<random>.
    RUN_DIR = Rperf::RunDir::NAME

    USAGE = <<~TEXT
      Usage: rperf <subcommand> [options] command [args...]
             rperf report [options] [FILE]
             rperf diff [options] BASE TARGET

      Subcommands:
        record   profile a command, write a profile file (default rperf.data, pprof)
        stat     run a command, print performance stats to stderr at its exit
        exec     stat with the flat and cumulative tables always
        report   print a profile file's top functions (pprof or rperf JSON; no Go needed)
        diff     print the per-function change between two profile files
        help     print the manual

      Options:
        -h, --help       this usage
        -v, --version    print the version

      `rperf <subcommand> -h` lists the options of a subcommand.
      Run 'rperf help' for full documentation
    TEXT

    # An error that is one line on stderr, exit status 1.
    class Error < StandardError
      # verbatim: the message is rperf 0.6's line for the same case, printed
      # as it is (no `rperf: ` prefix).
      def initialize(message, verbatim: false)
        super(message)
        @verbatim = verbatim
      end

      def line
        @verbatim ? message : "rperf: #{message}"
      end
    end

    # A usage error: the line, a blank line, then the (subcommand's) usage.
    class UsageError < Error
      attr_reader :subcommand

      def initialize(message, subcommand = nil, verbatim: false)
        super(message, verbatim: verbatim)
        @subcommand = subcommand
      end
    end

    Settings = Struct.new(:subcommand, :output, :frequency, :mode, :format, :print, :signal,
                          :backend, :aggregate, :verbose, :report, :alloc_interval, :sample_index, :allocations)
    # report/diff: view :top or :text, rows, filters, the sample type read.
    ReportSettings = Struct.new(:subcommand, :view, :top, :focus, :ignore, :threads, :labels, :sample_index)
    REPORT_SUBCOMMANDS = %w[report diff].freeze
    DEFAULT_TOP = 50
    DEFAULT_REPORT_FILE = "rperf.data"

    def initialize(out: $stdout, err: $stderr)
      @out = out
      @err = err
    end

    # Returns the exit status.
    def run(argv)
      args = argv.dup
      case (sub = args.shift)
      when nil then raise UsageError, "no subcommand given"
      when "-h", "--help" then @out.print USAGE
      when "-v", "--version" then @out.puts "rperf #{VERSION}"
      when "help" then help(args)
      when "record", "stat", "exec"
        settings = parse(sub, args)
        return 0 if settings.nil? # -h

        return run_command(settings, args)
      when "report", "diff"
        settings = parse_report(sub, args)
        return 0 if settings.nil? # -h

        return run_report(settings, args)
      else
        raise UsageError.new("Unknown subcommand: #{sub.inspect}", verbatim: true)
      end
      0
    rescue UsageError => e
      @err.puts e.line
      @err.puts
      @err.print e.subcommand ? parser(e.subcommand).help : USAGE
      1
    rescue Error => e
      @err.puts e.line
      1
    end

    # The profiles the processes of a run wrote into its directory `dir`
    # (their windows and last parts, with what was folded while the
    # command ran: Rperf::Children), merged into one
    # Rperf::Report::Profile (a numeric `pid` label on every sample, each
    # process's threads numbered apart, every count the processes' sum;
    # nil when no process wrote one); [[pid, result Hash]] of each
    # process, oldest first; and [pid] of the processes that ended
    # without their last part (killed after writing windows). `stats` (a
    # Hash or nil) gets the processes' counters summed (peak memory: the
    # largest).
    def merge_run_dir(dir, stats: nil)
      report = report_library
      children = children_library
      parts, ended = children.final_parts(dir)
      return [nil, parts, ended] if parts.empty?

      data = library._c_merge_parts(merge_root(parts), parts, stats)
      data[:process_count] = parts.size # the command runs no profiler of its own
      spans = parts.filter_map { |_, d| [d[:start_time_ns], d[:duration_ns].to_i] if d[:start_time_ns] }
      unless spans.empty?
        data[:start_time_ns] = spans.map(&:first).min
        data[:duration_ns] = spans.map(&:sum).max - data[:start_time_ns]
      end
      type, unit = data[:mode] == :alloc ? %w[inuse_space bytes] : [data[:mode].to_s, "nanoseconds"]
      [report::Profile.new(file: nil, format: :pprof, type: type, unit: unit, data: data), parts, ended]
    end

    private

    def help(args)
      case (topic = args.first)
      when nil then @out.print File.read(MANUAL, encoding: "UTF-8")
      when "record", "stat", "exec", *REPORT_SUBCOMMANDS then @out.print parser(topic).help
      else raise UsageError, "no help for #{topic.inspect} (topics: record, stat, exec, report, diff)"
      end
    end

    # -> Settings, or nil after -h; raises UsageError. Leaves the command in args.
    def parse(sub, args)
      s = Settings.new(sub, nil, 1000, sub == "record" ? "cpu" : "wall", nil, false, nil, nil, true,
                       false, sub == "exec")
      return nil if parse_options(sub, s, args, :order!)
      raise UsageError.new("No command specified.", sub, verbatim: true) if args.empty?
      raise UsageError.new("-p/--print and -o/--output cannot be combined", sub) if s.print && s.output

      validate(s)
      s
    end

    # Parse `args` in place with the subcommand's parser (`how`: :order! or
    # :permute!). Returns true after -h (the help is printed).
    def parse_options(sub, s, args, how)
      wants_help = false
      op = parser(sub, s) { wants_help = true }
      begin
        op.public_send(how, args)
      rescue OptionParser::ParseError => e
        raise UsageError.new(e.message, sub)
      end
      @out.print op.help if wants_help
      wants_help
    end

    def parser(sub, s = nil, &on_help)
      return report_parser(sub, s || ReportSettings.new, &on_help) if REPORT_SUBCOMMANDS.include?(sub)

      s ||= Settings.new
      OptionParser.new do |op|
        op.banner = "Usage: rperf #{sub} [options] command [args...]"
        op.separator ""
        op.separator(
          case sub
          when "record" then "Profile the command and write a profile file at its exit."
          when "stat" then "Run the command and print performance stats to stderr at its exit."
          else "Run the command and print performance stats and the flat and cumulative tables to stderr."
          end
        )
        op.separator ""
        op.separator "Options:"
        if sub == "record"
          op.on("-o", "--output PATH", "profile file (default rperf.data; format from the suffix)") { |v| s.output = v }
        else
          op.on("-o", "--output PATH", "also write a profile file (default: none)") { |v| s.output = v }
        end
        op.on("-f", "--frequency HZ", "samples per second, 1..#{MAX_FREQUENCY} (default 1000)") { |v| s.frequency = v }
        if sub == "record"
          op.on("-m", "--mode MODE", "cpu, wall or alloc (allocations; default cpu)") { |v| s.mode = v }
          op.on("--allocations", "with -m cpu or wall: sample allocations too " \
                                 "(--sample-index chooses the profile written)") { s.allocations = true }
          op.on("--alloc-interval N", "with -m alloc or --allocations: sample one allocation in N on average " \
                                      "(1..#{MAX_ALLOC_INTERVAL}; default: the library's)") { |v| s.alloc_interval = v }
          op.on("--sample-index TYPE", "the output's sample type: time (cpu, wall), or with -m alloc or " \
                                       "--allocations #{SAMPLE_INDEXES.drop(1).join(', ')} " \
                                       "(-m alloc's default inuse_space)") { |v| s.sample_index = v }
        else
          op.on("-m", "--mode MODE", "cpu or wall (default wall)") { |v| s.mode = v }
        end
        op.on("--format NAME", "pprof, collapsed, json, text or a registered exporter " \
                               "(default: from the output suffix)") { |v| s.format = v }
        op.on("-p", "--print", "print the text report to stdout instead of writing a file") { s.print = true } if sub == "record"
        op.on("--signal N|false", "tick signal, a real-time signal number (SIGRTMIN..SIGRTMAX), " \
                                   "or false for the nanosleep backend") { |v| s.signal = v }
        op.on("--backend NAME", "timer backend: holder (default), signal or nanosleep") { |v| s.backend = v }
        op.on("--no-aggregate", "keep every sample (raw mode)") { s.aggregate = false }
        op.on("--report", "add the flat and cumulative tables to the stats") { s.report = true } if sub == "stat"
        op.on("-v", "--verbose", "print sampling statistics and the top frames to stderr") { s.verbose = true }
        op.on("-h", "--help", "this help") { on_help&.call }
      end
    end

    # ---- report / diff ----------------------------------------------------

    # -> ReportSettings, or nil after -h; raises UsageError. Leaves the files
    # in args. Options may come before or after the files.
    def parse_report(sub, args)
      s = ReportSettings.new(sub, :top, nil, nil, nil, [], {}, nil)
      args.replace(join_top_count(args))
      return nil if parse_options(sub, s, args, :permute!)

      validate_report(s, args)
      s
    end

    # `--top N` takes N only when N is a number (`--top FILE` is --top alone):
    # it becomes `--top=N` for OptionParser.
    def join_top_count(args)
      out = []
      i = 0
      while i < args.size
        if args[i] == "--top" && args[i + 1]&.match?(/\A[-+]?\d+\z/)
          out << "--top=#{args[i + 1]}"
          i += 2
        else
          out << args[i]
          i += 1
        end
      end
      out
    end

    def report_parser(sub, s, &on_help)
      OptionParser.new do |op|
        if sub == "report"
          op.banner = "Usage: rperf report [options] [FILE]"
          op.separator ""
          op.separator "Print the top functions of a profile file (default #{DEFAULT_REPORT_FILE}): pprof " \
                       "(.pb.gz, .pb; ours or Go's) or rperf's speedscope JSON. No Go needed."
        else
          op.banner = "Usage: rperf diff [options] BASE TARGET"
          op.separator ""
          op.separator "Print each function's change in flat and cumulative time from BASE to TARGET, " \
                       "largest change first."
        end
        op.separator ""
        op.separator "Options:"
        op.on("--top[=N]", "show the top N functions (default #{DEFAULT_TOP}); `--top N` works too") do |v|
          s.top = v || DEFAULT_TOP.to_s
        end
        if sub == "report"
          op.on("--text", "rperf's flat and cumulative tables (as record -p prints)") { s.view = :text }
          op.on("--html", "--flame", "a self-contained HTML flame graph on stdout (e.g. > p.html)") { s.view = :html }
        end
        op.on("--focus REGEX", "only samples through a function whose name or file matches") do |v|
          s.focus = report_regexp("--focus", v, sub)
        end
        op.on("--ignore REGEX", "drop samples through a function whose name or file matches") do |v|
          s.ignore = report_regexp("--ignore", v, sub)
        end
        op.on("--sample-index TYPE", "the sample type to read: time, #{SAMPLE_INDEXES.drop(1).join(', ')} " \
                                     "(default: the file's default type)") do |v|
          unless SAMPLE_INDEXES.include?(v)
            raise UsageError.new("--sample-index must be #{SAMPLE_INDEXES[0..-2].join(', ')} or " \
                                 "#{SAMPLE_INDEXES[-1]}, got #{v.inspect}", sub)
          end

          s.sample_index = v
        end
        op.on("--thread SEQ", "only samples of thread SEQ (the thread_seq label; repeatable)") do |v|
          seq = Integer(v, 10, exception: false)
          raise UsageError.new("--thread must be a positive thread number, got #{v.inspect}", sub) unless seq&.positive?

          s.threads << seq
        end
        op.on("--label KEY=VALUE", "only samples with this label (repeatable; also thread_seq=N, ractor=N, " \
                                   "class=NAME in a heap profile)") do |v|
          key, value = v.split("=", 2)
          raise UsageError.new("--label must be KEY=VALUE, got #{v.inspect}", sub) if key.to_s.empty? || value.nil?

          s.labels[utf8(key)] = utf8(value)
        end
        op.on("-h", "--help", "this help") { on_help&.call }
      end
    end

    def utf8(str)
      str.dup.force_encoding(Encoding::UTF_8)
    end

    def report_regexp(opt, source, sub)
      Regexp.new(utf8(source))
    rescue RegexpError => e
      raise UsageError.new("invalid #{opt} regex #{source.inspect}: #{e.message}", sub)
    end

    def validate_report(s, files)
      sub = s.subcommand
      if s.top
        n = Integer(s.top, 10, exception: false)
        raise UsageError.new("--top must be a positive integer, got #{s.top}", sub) unless n&.positive?

        s.top = n
      end
      if s.view != :top && s.top
        raise UsageError.new("--top and --#{s.view} cannot be combined", sub)
      end
      if sub == "report"
        files << DEFAULT_REPORT_FILE if files.empty?
        raise UsageError.new("report reads one file, got #{files.size}: #{files.join(' ')}", sub) if files.size > 1
      elsif files.size < 2
        raise UsageError.new("Two profile files required.", sub, verbatim: true)
      elsif files.size > 2
        raise UsageError.new("diff reads two files (BASE TARGET), got #{files.size}: #{files.join(' ')}", sub)
      end
    end

    def run_report(s, files)
      missing = files.find { |f| !File.exist?(f) }
      raise Error.new("File not found: #{missing}", verbatim: true) if missing

      report = report_library
      begin
        profiles = files.map do |f|
          report.filter(report.load(f, sample_index: s.sample_index), focus: s.focus, ignore: s.ignore,
                                                                      threads: s.threads, labels: s.labels)
        end
        limit = s.top || DEFAULT_TOP
        @out.write(
          if s.subcommand == "diff"
            report.diff(*profiles, limit: limit)
          elsif s.view != :top
            report.export(profiles[0], s.view)
          else
            report.top(profiles[0], limit: limit)
          end
        )
        0
      rescue report::Error => e
        raise Error, e.message
      end
    end

    # Rperf::Children (the folding of a run's parts), loaded with the library.
    def children_library
      library
      require "rperf/children"
      Rperf::Children
    end

    # Rperf::Report (the profile reader), loaded with the library. A rescue
    # clause names its Error class through the returned module, never through
    # a constant that is not loaded when the library could not be.
    def report_library
      library
      require "rperf/report"
      Rperf::Report
    end

    def validate(s)
      sub = s.subcommand
      freq = Integer(s.frequency.to_s, 10, exception: false)
      unless freq&.positive?
        raise UsageError.new("Error: frequency must be a positive integer (got #{s.frequency})", sub, verbatim: true)
      end
      if freq > MAX_FREQUENCY
        raise UsageError.new("Error: frequency must be <= #{MAX_FREQUENCY} (10KHz), got #{freq}", sub, verbatim: true)
      end
      s.frequency = freq
      validate_mode(s)
      validate_signal(s)
      if s.backend && !library.backends.include?(s.backend.to_sym)
        raise UsageError.new("unknown backend #{s.backend.inspect} " \
                             "(available: #{library.backends.join(', ')})", sub)
      end
      if s.format && !library.exporters.include?(s.format.to_sym)
        raise UsageError.new("unknown format #{s.format.inspect} " \
                             "(available: #{library.exporters.join(', ')})", sub)
      end
    end

    # -m, --alloc-interval and --sample-index. alloc is record's only: stat
    # and exec report time.
    def validate_mode(s)
      sub = s.subcommand
      modes = sub == "record" ? RECORD_MODES : MODES
      unless modes.include?(s.mode)
        raise UsageError.new("mode must be #{modes[0..-2].join(', ')} or #{modes[-1]}, got #{s.mode.inspect}" \
                             "#{' (alloc: record only)' if s.mode == 'alloc'}", sub)
      end
      if s.alloc_interval
        n = Integer(s.alloc_interval, 10, exception: false)
        unless n&.between?(1, MAX_ALLOC_INTERVAL)
          raise UsageError.new("--alloc-interval must be an integer 1..#{MAX_ALLOC_INTERVAL}, " \
                               "got #{s.alloc_interval.inspect}", sub)
        end
        raise UsageError.new("--alloc-interval needs -m alloc or --allocations", sub) unless s.mode == "alloc" || s.allocations

        s.alloc_interval = n
      end
      if s.allocations && s.mode == "alloc"
        raise UsageError.new("--allocations is for -m cpu or wall (-m alloc samples allocations alone)", sub)
      end
      return unless s.sample_index

      wanted = if s.mode == "alloc" then SAMPLE_INDEXES.drop(1)
               elsif s.allocations then ["time", *SAMPLE_INDEXES.drop(1)]
               else ["time"]
               end
      return if wanted.include?(s.sample_index)

      raise UsageError.new("--sample-index must be #{wanted[0..-2].join(', ')}#{' or ' if wanted.size > 1}" \
                           "#{wanted[-1]} with -m #{s.mode}, got #{s.sample_index.inspect}", sub)
    end

    # The same rules as Rperf.start's signal: (lib/rperf.rb): false, or a
    # real-time signal number of this libc (SIGRTMIN..SIGRTMAX, read from
    # the extension). The CLI has no allow_signal: opt-in; a program that
    # needs another signal sets it through Rperf.start.
    def validate_signal(s)
      sub = s.subcommand
      return if s.signal.nil?

      if s.signal == "false"
        return unless s.backend && s.backend != "nanosleep"

        raise UsageError.new("--backend #{s.backend} conflicts with --signal false " \
                             "(--signal false selects nanosleep; a number is the tick signal of either backend)", sub)
      end
      signo = Integer(s.signal, 10, exception: false)
      raise UsageError.new("signal must be a signal number or false, got #{s.signal.inspect}", sub) unless signo
      if UNCATCHABLE.key?(signo)
        raise UsageError.new("Error: signal #{signo} (#{UNCATCHABLE[signo]}) cannot be caught; use a different signal",
                             sub, verbatim: true)
      end
      range = library::REALTIME_SIGNALS
      return if range.cover?(signo)

      raise UsageError.new("signal must be a real-time signal number #{range} (SIGRTMIN..SIGRTMAX) " \
                           "or false, got #{signo}", sub)
    end

    # The library, loaded into the CLI only to list backends and exporters
    # and to read profiles (never started here). rperf.so that does not load
    # (not built, or built for another Ruby) is one line.
    def library
      @library ||= begin
        $LOAD_PATH.unshift(*load_dirs.reverse)
        enabled = ENV.delete("RPERF_ENABLED")
        begin
          require "rperf"
        rescue LoadError => e
          raise Error, "cannot load the rperf extension into Ruby #{RUBY_VERSION} (#{RbConfig.ruby}): " \
                       "#{e.message.lines.first.to_s.chomp}; rperf.so must be built for this Ruby " \
                       "(from a checkout: script/setup, then script/ruby exe/rperf ...)"
        ensure
          ENV["RPERF_ENABLED"] = enabled if enabled
        end
        Rperf
      end
    end

    # Directories the command needs on RUBYLIB: this library, and the
    # directory holding rperf.so when it is elsewhere (a checkout's build
    # directory; an installed gem has it next to the library or in its
    # extension directory).
    def load_dirs
      @load_dirs ||= begin
        root = File.expand_path("../..", LIB_DIR)
        candidates = [LIB_DIR]
        candidates << File.join(ENV["RPERF_BUILD_DIR"], "lib") if ENV["RPERF_BUILD_DIR"]
        candidates << File.join(root, "build", "lib")
        spec = defined?(Gem) && Gem.loaded_specs["rperf"]
        candidates << spec.extension_dir if spec
        so_dir = candidates.find { |d| File.exist?(File.join(d, "rperf.so")) }
        [LIB_DIR, so_dir].compact.uniq
      end
    end

    # The command's environment: every Ruby process profiles itself into
    # the run directory `dir` (the output, format and stats are the CLI's).
    def child_env(s, dir)
      env = ENV_KEYS.to_h { |k| [k, nil] }
      env.merge!(
        "RPERF_ENABLED" => "1",
        "RPERF_MODE" => s.mode,
        "RPERF_FREQUENCY" => s.frequency.to_s,
        "RPERF_CHILD_DIR" => dir,
        "RPERF_CHILD_WINDOWS" => "1",
        "RUBYOPT" => ["-rrperf", ENV["RUBYOPT"]].compact.reject(&:empty?).join(" "),
        "RUBYLIB" => [*load_dirs, ENV["RUBYLIB"]].compact.reject(&:empty?).join(File::PATH_SEPARATOR),
      )
      env["RPERF_SIGNAL"] = s.signal
      env["RPERF_BACKEND"] = s.backend
      env["RPERF_ALLOC_INTERVAL"] = s.alloc_interval.to_s if s.alloc_interval
      env["RPERF_ALLOCATIONS"] = "1" if s.allocations
      env["RPERF_AGGREGATE"] = "0" unless s.aggregate
      env["RPERF_VERBOSE"] = "1" if s.verbose
      env
    end

    def output_path(s)
      s.output || (s.subcommand == "record" && !s.print ? "rperf.data" : nil)
    end

    # An output that cannot be written is a usage error: nothing runs.
    def check_output(s)
      path = output_path(s)
      return unless path

      library.send(:__check_output, path)
      library.send(:_c_output_release)
    rescue ArgumentError => e
      raise UsageError.new("-o/--output #{e.message.delete_prefix('output: ')}", s.subcommand)
    end

    def run_command(s, cmd)
      library # an extension that does not load is one line, before the command runs
      check_output(s)
      dir = make_run_dir
      # `ruby` means the Ruby rperf was built for (rperf.so is tied to it).
      argv = cmd[0] == "ruby" ? [RbConfig.ruby, *cmd[1..]] : cmd
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      folder = fold_while_running(dir)
      status = spawn_and_wait(child_env(s, dir), argv)
      stop_folding(folder)
      folder = nil
      return status if status.is_a?(Integer)

      finish_run(s, cmd, dir, Process.clock_gettime(Process::CLOCK_MONOTONIC) - started)
      remove_run_dir(dir) # before exit_status: it may end this process
      dir = nil
      exit_status(status)
    ensure
      stop_folding(folder) if folder
      remove_run_dir(dir) if dir
    end

    # While the command runs, a thread looks at the run's directory every
    # window interval and folds what the processes wrote whenever
    # Children::FOLD_AT part files wait (Rperf::Children: each part read
    # once into one aggregate per process, its files deleted), so that the
    # directory stays small however long the command runs.
    # -> [thread, queue] for stop_folding.
    def fold_while_running(dir)
      children = children_library
      seconds = library::CHILD_WINDOW_SECONDS
      stop = Thread::Queue.new
      thread = Thread.new do
        Thread.current.report_on_exception = false
        until stop.pop(timeout: seconds)
          waiting = Dir.children(dir).count { |name| Rperf::RunDir::PART.match?(name) }
          children.fold(dir) if waiting >= children::FOLD_AT
        end
      rescue StandardError => e
        @err.puts "rperf: folding the processes' profiles stopped (they are read at the end): " \
                  "#{e.class}: #{e.message}"
      end
      [thread, stop]
    end

    def stop_folding((thread, stop))
      stop << true
      thread.join
    end

    # ---- the run directory ------------------------------------------------

    # A new private directory (mode 0700) for this run, after removing
    # those of runs whose CLI is gone (killed before it could clean up).
    def make_run_dir
      tmp = Dir.tmpdir
      remove_stale_run_dirs(tmp)
      Rperf::RunDir.make(tmp)
    end

    def remove_stale_run_dirs(tmp)
      Dir.each_child(tmp) do |name|
        pid = name[RUN_DIR, 1]&.to_i
        next if pid.nil? || pid == Process.pid || process_alive?(pid)

        path = File.join(tmp, name)
        st = File.lstat(path)
        remove_run_dir(path) if st.directory? && st.owned?
      rescue SystemCallError
        next # gone meanwhile, or not ours to look at
      end
    rescue SystemCallError
      nil # an unreadable tmpdir: nothing to clean
    end

    def process_alive?(pid)
      Process.kill(0, pid)
      true
    rescue Errno::ESRCH
      false
    rescue Errno::EPERM
      true # someone else's process
    end

    def remove_run_dir(dir)
      FileUtils.remove_entry_secure(dir) if File.directory?(dir)
    rescue SystemCallError => e
      @err.puts "rperf: could not remove #{dir}: #{e.message}"
    end

    # ---- merging the processes' profiles ----------------------------------

    # Merge every process's profile (and counters) from the run directory,
    # write the output, print the stats block. The processes that ended
    # without their last part (killed after writing windows) are named.
    def finish_run(s, cmd, dir, real)
      stats = {}
      merged, parts, ended = merge_run_dir(dir, stats: stats)
      @err.puts children_library.ended_line(ended) unless ended.empty?
      unless merged
        @err.puts "rperf: no Ruby process of the command was profiled; " \
                  "#{s.subcommand == 'record' ? 'no profile written' : 'no stats'}"
        return
      end
      data = merged.data
      # pprof does not carry the backend: the one the processes were given
      data[:backend] ||= (s.backend || (s.signal.to_s == "false" ? "nanosleep" : library.backends.first)).to_sym
      write_output(s, data)
      return if s.subcommand == "record"

      t = Process.times # the command and every descendant it waited for
      c = stat_counters(data, stats).merge("user_ms" => t.cutime * 1000, "sys_ms" => t.cstime * 1000,
                                           "real_ms" => real * 1000, "processes" => parts.size)
      @err.puts library.__stat_lines(cmd.join(" "), c, data, report: s.report)
    end

    # The first part with time samples (else the first) gives the mode and
    # frequency; allocations, when a part has them, their interval.
    def merge_root(parts)
      list = parts.map(&:last)
      first = list.find { |d| d[:mode] != :alloc } || list.first
      root = { mode: first[:mode], frequency: first[:frequency], aggregated_samples: [], label_sets: [{}],
               threads: [] }
      allocs = list.filter_map { |d| d[:allocations] }
      return root if allocs.empty?

      root[:allocations] = { samples: [] }
      interval = allocs.find { |a| a[:interval] }
      root[:allocations][:interval] = interval[:interval] if interval
      root
    end

    # The merged result's counts and the counters they are in the stats block.
    RESULT_COUNTS = { sampling_count: "samples", trigger_count: "triggers", sampling_time_ns: "sampling_time_ns",
                      detected_thread_count: "threads" }.freeze
    GC_COUNTERS = %w[gc_time_ms gc_count minor_gc_count major_gc_count allocated freed].freeze

    # The stats block's counters: the merged counts, the processes'
    # counters summed (`stats`); a counter some process could not read
    # (context switches, peak memory) is left out.
    def stat_counters(data, stats)
      c = RESULT_COUNTS.to_h { |key, name| [name, data[key].to_i] }
      GC_COUNTERS.each { |k| c[k] = stats[k].to_i }
      %w[voluntary involuntary maxrss_kb].each { |k| c[k] = stats[k].is_a?(Integer) ? stats[k] : nil }
      c
    end

    # The merged profile: printed (-p), or written where -o (or record's
    # default) says, in --format or the suffix's format. A failure is
    # reported and does not change the exit status.
    def write_output(s, data)
      sample_type = s.sample_index&.to_sym
      if s.print
        @out.write(library::Text.encode(data, sample_type: sample_type))
      elsif (path = output_path(s))
        library.save(path, data, exporter: s.format&.to_sym, sample_type: sample_type)
      end
    rescue StandardError => e
      @err.puts "rperf: writing #{s.print ? 'the report' : output_path(s)} failed: #{e.message}"
    end

    def spawn_and_wait(env, argv)
      old = {}
      pid = nil
      FORWARDED.each do |sig|
        old[sig] = trap(sig) { Process.kill(sig, pid) if pid rescue nil } # rubocop:disable Style/RescueModifier
      end
      old["INT"] = trap("INT") {}
      old["QUIT"] = trap("QUIT") {}
      begin
        pid = Process.spawn(env, [argv[0], argv[0]], *argv[1..])
      rescue Errno::ENOENT
        @err.puts "rperf: command not found: #{argv[0]}"
        return 127
      rescue SystemCallError => e
        @err.puts "rperf: cannot run #{argv[0]}: #{e.message}"
        return 126
      end
      Process.wait2(pid)[1]
    ensure
      old.each { |sig, h| trap(sig, h || "DEFAULT") }
    end

    # The command's exit status; a command killed by a signal kills the CLI
    # with the same signal (so a caller sees what a shell would).
    def exit_status(status)
      return status.exitstatus if status.exited?

      sig = status.termsig
      return 1 unless sig

      @out.flush
      @err.flush
      begin
        trap(sig, "SYSTEM_DEFAULT")
      rescue ArgumentError
        return 128 + sig # a signal Ruby reserves (SEGV, BUS, ...): the shell's convention
      end
      Process.kill(sig, Process.pid)
      sleep 1 # not reached when the signal's default action ends the process
      128 + sig
    end
  end
end
