# frozen_string_literal: true

# rperf — a Ractor-aware sampling profiler for Ruby (C11 extension).
#
#   Rperf.start(frequency: 1000, mode: :cpu, backend: :signal)
#   ... code ...
#   data = Rperf.stop        # => result Hash (see README / docs/architecture.md)
#
#   Rperf.start(output: "profile.pb.gz") { work }   # block form writes the file
#
# Option validation happens here, before anything starts; the engine lives in
# rperf.so (core/, backends/, exporters/, ruby/*.c).

require "rperf.so"
# Loaded by rperf 0.6 too; scripts written for it may rely on them.
require "zlib"
require "stringio"

module Rperf
  VERSION = "0.7.0"

  MODES = { cpu: 0, wall: 1, alloc: 0 }.freeze
  # Mean number of allocations per sampled allocation (mode: :alloc,
  # allocations: true): docs/performance.md, "Allocations".
  DEFAULT_ALLOC_INTERVAL = 1024
  MAX_ALLOC_INTERVAL = 1 << 30
  # start(inherit:): :fork — a forked child goes on profiling with the same
  # settings and its profile joins the root's (a preloaded server's
  # workers are profiled from the master's start); false — a fork child
  # starts with a stopped profiler.
  # true — forks as with :fork, and Ruby programs this process spawns too,
  # through the environment (RPERF_* variables, RUBYOPT=-rrperf, RUBYLIB,
  # set while the run goes and put back at its stop: the application sees
  # them in ENV meanwhile).
  INHERIT_VALUES = [:fork, true, false].freeze
  DEFAULT_INHERIT = :fork
  # How often a child of such a run writes its window (docs/servers.md):
  # the root's snapshots hold a running child up to this many seconds late.
  CHILD_WINDOW_SECONDS = begin
    s = Float(ENV.fetch("RPERF_WINDOW_SECONDS", "5"), exception: false)
    s&.positive? ? s : 5.0
  end
  MAX_FREQUENCY = 10_000
  # New label sets per snapshot window; past it, label applications fold
  # into the set {rperf_label_overflow: true} (result: label_sets_overflowed).
  DEFAULT_MAX_LABEL_SETS = 65_536
  MAX_LABEL_SETS_LIMIT = 1 << 23
  # The real-time signals of this libc (glibc: 34..64; Ruby reserves none of
  # them) and the tick signal used when none is given (SIGRTMIN+8).
  rtmin, rtmax, default_signal = _c_signal_range
  REALTIME_SIGNALS = (rtmin..rtmax)
  DEFAULT_SIGNAL = default_signal

  @run = nil

  # A run's settings as start decided them, read back at its stop and by a
  # fork child that starts it again (inherit:, the rperf command). Its
  # readers and writers are this class's own: the stop at exit and exec and
  # a fork child's restart run after the program's code, and read the run
  # without calling a method the program may have redefined (a Hash of
  # settings would need Hash#[]). c_args / child_c_args: _c_start's
  # arguments for this run and for a fork child's part of it.
  class Run
    attr_accessor :output, :exporter, :c_exporter, :export_opts, :aggregate, :sample_type, :verbose, :stat,
                  :inherit, :start_opts, :c_args, :child_c_args, :heap_beside, :started_at, :inherit_dir,
                  :saved_env, :heap_output, :child_stats, :stat_base, :child_dir, :child_windows,
                  :yields_to_start

    # A setting by name, as the run record was read when it was a Hash.
    def [](key)
      public_send(key)
    end
  end
  # The heap profile beside a time profile (a run with allocations: true).
  HEAP_EXPORT_OPTS = { sample_type: :inuse_space }.freeze

  class << self
    # Registered timer backends, as Symbols (the first is the default).
    def backends
      _c_backends
    end

    # Rperf.running? (any Ractor), Rperf.stop and Rperf.snapshot(clear:) are
    # defined in C (ruby/api.c): a tracer sees only the public call.

    def start(frequency: 1000, mode: :cpu, backend: nil, exporter: nil, format: nil,
              output: nil, aggregate: true, signal: nil, verbose: false, stat: false,
              ring_size: DEFAULT_RING_SLOTS, max_label_sets: DEFAULT_MAX_LABEL_SETS,
              allow_signal: false, inherit: DEFAULT_INHERIT, defer: false, allocations: false,
              alloc_interval: DEFAULT_ALLOC_INTERVAL, sample_type: nil, &block)
      main_ractor!("start")
      # A fork child's inherited run gives way to the child's own start (a
      # fork child's profiler was stopped in rperf 0.6: `fork { Rperf.start
      # ... }` keeps working); its part so far goes to the run's directory.
      stop if running? && @run && @run.yields_to_start
      raise RuntimeError, "Rperf is already running" if running?

      validate_frequency(frequency)
      unless MODES.key?(mode)
        raise ArgumentError, "mode must be :cpu, :wall or :alloc, got #{mode.inspect}"
      end
      unless allocations == true || allocations == false
        raise ArgumentError, "allocations must be true or false, got #{allocations.inspect}"
      end
      unless alloc_interval.is_a?(Integer) && alloc_interval >= 1 && alloc_interval <= MAX_ALLOC_INTERVAL
        raise ArgumentError,
              "alloc_interval must be an Integer between 1 and #{MAX_ALLOC_INTERVAL}, got #{alloc_interval.inspect}"
      end
      backend_name, signo = resolve_backend(backend, signal, allow_signal)
      unless ring_size.is_a?(Integer) && ring_size >= 1024 && ring_size <= (1 << 24) &&
             (ring_size & (ring_size - 1)).zero?
        raise ArgumentError,
              "ring_size must be a power of two between 1024 and #{1 << 24}, got #{ring_size.inspect}"
      end
      unless max_label_sets.is_a?(Integer) && max_label_sets >= 1 && max_label_sets <= MAX_LABEL_SETS_LIMIT
        raise ArgumentError,
              "max_label_sets must be an Integer between 1 and #{MAX_LABEL_SETS_LIMIT}, got #{max_label_sets.inspect}"
      end
      unless output.nil? || output.is_a?(String) || output.respond_to?(:to_path)
        raise ArgumentError, "output must be nil or a path String, got #{output.inspect}"
      end
      unless INHERIT_VALUES.include?(inherit)
        raise ArgumentError, "inherit must be :fork, true or false, got #{inherit.inspect}"
      end
      unless defer == true || defer == false
        raise ArgumentError, "defer must be true or false, got #{defer.inspect}"
      end
      if defer && mode == :alloc
        raise ArgumentError,
              "defer: true needs mode :cpu or :wall (for allocations in profile blocks: allocations: true)"
      end
      sampled_interval = mode == :alloc || allocations ? alloc_interval : 0
      sample_type = check_start_sample_type(sample_type, mode, sampled_interval.positive?)
      output = output.to_path if output.respond_to?(:to_path)
      exporter_name = resolve_exporter(exporter, format, output)
      __check_output(output) if respond_to?(:__check_output, true)

      verbose ||= ENV["RPERF_VERBOSE"] == "1"
      run = Run.new
      run.output = output
      run.exporter = exporter_name
      # a C exporter writes the output at the stop from C
      if exporter_name && !(@ruby_exporters || {}).key?(exporter_name) && respond_to?(:__export_opts, true)
        run.c_exporter = exporter_name.to_s.freeze
      end
      run.export_opts = sample_type && { sample_type: sample_type }.freeze
      run.aggregate = aggregate ? true : false
      run.sample_type = sample_type
      run.verbose = verbose
      run.stat = stat
      run.inherit = inherit
      # spawned Ruby programs start with these (inherit: true)
      run.start_opts = { frequency: frequency, mode: mode, backend: backend_name.to_sym, signal: signal,
                         aggregate: run.aggregate, ring_size: ring_size, max_label_sets: max_label_sets,
                         allow_signal: allow_signal, defer: defer, allocations: allocations,
                         alloc_interval: alloc_interval }
      # The last argument of _c_start: a run left going at exit is stopped
      # there (in C) and, when it asked for output or reports, finished like
      # Rperf.stop.
      run.c_args = [frequency, MODES[mode], run.aggregate, backend_name.to_s, signo, ring_size,
                    verbose || stat ? :messages : (output ? true : false), max_label_sets, defer,
                    sampled_interval, mode != :alloc].freeze
      # a fork child's part: its profile is its output (__relaunch)
      run.child_c_args = [*run.c_args[0, 6], verbose ? :messages : true, *run.c_args[7..]].freeze
      run.heap_beside = allocations && mode != :alloc ? true : false
      run.started_at = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      @run = run
      if verbose && !verified_ruby?
        warn "[rperf] Ruby #{RUBY_VERSION} is not a series rperf is verified on " \
             "(#{VERIFIED_RUBIES.join(', ')}): the holder backend sends every tick by signal"
      end
      begin
        _c_start(*run.c_args)
        # a C exporter writes the output at exit and exec from C: no method
        # the application may have redefined on the way
        _c_exit_output(output, run.c_exporter, false, sample_type) if output && run.aggregate && run.c_exporter
        __inherit_spawned if inherit == true
      rescue Exception # rubocop:disable Lint/RescueException
        # nothing started: no run left behind, no descriptor kept for it
        # (unless another thread's start won the race and owns both)
        unless running?
          @run = nil
          _c_output_release if output
        end
        raise
      end
      return nil unless block

      completed = false
      begin
        block.call
        completed = true
      ensure
        # an exception or a throw leaves the block: stop, then let it go on
        stop if !completed && running?
      end
      stop
    end

    # Rperf.stop is defined in C (ruby/api.c): it stops the engine before
    # any Ruby code runs, then calls __finish_stop with the result Hash, and
    # releases the engine's data afterwards (C exporters read it meanwhile).
    # The output is written before the reports: a failing report never
    # loses it.
    # `output_written`: at exit and exec the output went through a C
    # exporter already (ruby/api.c), which also reported a gone directory.
    #
    # At exit and exec this runs after the program's code, which may have
    # redefined any core method (Ruby's own tests redefine Hash#[],
    # Integer#+, ...): up to the reports it calls only Run's and Rperf's
    # own methods, C ones for the work (ruby/merge.c, ruby/stat.c,
    # _c_export_engine), and tests truthiness (no !, ==, nil?).
    # docs/reliability.md lists what is not covered.
    def __finish_stop(data, output_written = false)
      run = @run
      @run = nil
      return finish_result(data) unless run # a bare _c_start

      ENV.update(run.saved_env) if run.saved_env # inherit: true's variables go
      data = _c_aggregate_raw(data) unless run.aggregate
      output = run.output
      heap = run.heap_output
      counters = run.child_stats
      # a part of a run (the rperf command's, a root's forked children)
      # whose run has ended: its directory is gone
      if counters
        unless _c_dir_of_p(counters)
          _c_warn(_c_process_text("ended after the run it was part of; its profile is left out")) unless output_written
          output = heap = counters = nil
        end
      end
      stats = run.stat ? {} : nil
      if (dir = run.inherit_dir)
        # open Rperf::Window readers keep the children's parts new to them
        Window.__children_going(dir) if defined?(Window)
        # the forked children's profiles join this one (the output written
        # from C at exit had this process's alone: written again)
        data = __merge_children(data, dir, remove: true, stats: stats)
        output_written = false if _c_joined_p(data)
      end
      unless output_written
        __write_at_stop(data, run, output, heap) if output
      end
      _c_write_part_counters(counters, data, run.stat_base) if counters
      __reports(data, run, stats) if run.verbose || run.stat
      data
    end
    private :__finish_stop

    # verbose: and stat: at the stop. Reports format in Ruby: one that
    # fails (a core method it uses was redefined) is one line on stderr,
    # after the output and the counters were written.
    def __reports(data, run, stats)
      report_verbose(data) if run.verbose
      report_stat(data, run, stats) if run.stat
    rescue StandardError => e
      _c_report_error("rperf: the report at the stop failed", e)
    end

    # The output (and the heap profile beside it) at the stop: a C exporter
    # writes from C; a Ruby exporter (Rperf.register_exporter) runs its
    # Ruby code.
    def __write_at_stop(data, run, output, heap)
      if (name = run.c_exporter)
        _c_flush_std
        __c_export(name, output, data, run.export_opts)
      else
        write_output(data, run)
      end
      __c_export("pprof", heap, data, HEAP_EXPORT_OPTS) if heap
    end

    # A file written by the C exporter `name`; a failure is one line on
    # stderr ("rperf: exporter NAME failed: ..."), no partial file.
    def __c_export(name, path, data, opts)
      _c_export_engine(name, path, data, opts)
    rescue StandardError, ScriptError, NoMemoryError, SystemStackError => e
      _c_report_error("rperf: exporter #{name} failed", e)
    ensure
      _c_output_release
    end

    # ---- runs of the rperf command (RPERF_CHILD_DIR, docs/cli.md) ----------
    #
    # Under the rperf command every Ruby process of the command (the command
    # itself, its forks, the Ruby processes it spawns) profiles itself into
    # the run's private directory: the profile as pprof in <dir>/<pid>.pb.gz
    # (with allocations beside time, its heap profile beside it in
    # <dir>/<pid>.heap.pb.gz, RunDir), its counters (samples, GC, memory,
    # context switches, thread names) in <dir>/<pid>.stat.json
    # (ruby/stat.c; <pid>.<n>.*: the n-th program the process exec'd into,
    # whose predecessor's run ended at the exec), and while it runs its
    # windows (RPERF_CHILD_WINDOWS=1, child_windows.c). The command folds
    # them as they come and merges them into one output at exit
    # (ruby/lib/rperf/cli.rb) and prints the stats block itself.

    # Start the command's run in this process (env auto-start). `opts`:
    # Rperf.start's options from the environment. A process started after
    # the command has exited (the directory is gone) is not profiled.
    def __start_child_run(dir, opts, windows: ENV["RPERF_CHILD_WINDOWS"] == "1")
      return unless File.directory?(dir)

      # A program this process exec'd into profiles as the same pid: the
      # profile its predecessor wrote at the exec keeps its name.
      base, execd = _c_child_base(dir)
      return unless base

      # the process's context switches go on across exec: only its own count
      stat_base = execd ? _c_stat_counters(:exec) : nil
      start(**opts.merge(output: "#{base}.pb.gz", exporter: :pprof, stat: false))
      __child_part(@run, dir, base, windows, stat_base)
      nil
    end

    # The run `run` just started is this process's part of the run in
    # `dir`: its profile goes to <base>.pb.gz from C at exit and exec (its
    # heap profile beside it), its windows as it goes (a child of
    # Rperf.start(inherit:), or any process under the rperf command: the
    # root's snapshots hold it while it runs, and a process killed keeps
    # its windows; child_windows.c), its counters to <base>.stat.json
    # (each window's beside it), counted from `stat_base` (nil: from the
    # process's start), each file from where the previous one ended.
    def __child_part(run, dir, base, windows, stat_base)
      run.child_dir = dir
      run.child_windows = windows
      run.heap_output = "#{base}#{RunDir::HEAP_SUFFIX}" if run.heap_beside
      _c_exit_output(run.output, "pprof", true, nil, run.heap_output) if run.aggregate
      _c_child_windows(base, CHILD_WINDOW_SECONDS, stat_base) if windows && run.aggregate
      run.child_stats = "#{base}.stat.json"
      run.stat_base = stat_base
    end

    # [dir, run, windows] of the run a fork child starts again (ForkHook, in
    # the parent just before fork): the rperf command's run, or a run
    # started with inherit: :fork (its directory is made at the first
    # fork). A fork may come after the program redefined core methods:
    # this, and the child's restart, call Run's, Rperf's and C methods.
    def __child_run_going
      run = @run
      return nil unless run && running?
      return [run.child_dir, run, run.child_windows] if run.child_stats
      return nil unless run.inherit

      run.inherit_dir ||= __make_inherit_dir
      [run.inherit_dir, run, true]
    end

    # ForkHook, after the fork, in the parent and in the child.
    def __forked(pid, child_run)
      return unless _c_fork_child_p(pid)

      _c_after_fork_child
      __restart_child_run(child_run) if child_run
    end

    # In a fork child: the inherited run was dropped; start its run again
    # for this process. GC and allocation counts are the parent's at this
    # point: the child reports what it adds to them.
    def __restart_child_run(child_run)
      dir, template, windows = child_run
      @run = nil # the parent's: this process's profiler is stopped
      _c_left_out_at_exit unless __relaunch(dir, template, windows)
    rescue StandardError => e
      # the root stopped (and removed the directory) while this child got going
      return _c_left_out_at_exit unless _c_dir_p(dir)

      _c_report_error(_c_process_text("could not be profiled"), e)
    end

    # The run of `template` (the parent's) started again in a fork child,
    # as its part of the run in `dir`; nil when the directory is gone.
    def __relaunch(dir, template, windows)
      base, = _c_child_base(dir)
      return nil unless base

      stat_base = _c_stat_counters(:fork)
      run = Run.new
      run.output = "#{base}.pb.gz"
      run.exporter = :pprof
      run.c_exporter = "pprof"
      run.aggregate = template.aggregate
      run.verbose = template.verbose
      run.stat = false
      run.inherit = :fork
      run.start_opts = template.start_opts
      run.c_args = template.child_c_args
      run.child_c_args = template.child_c_args
      run.heap_beside = template.heap_beside
      run.started_at = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      run.yields_to_start = true # the child's own Rperf.start replaces it
      if (reason = _c_output_check(run.output))
        raise ArgumentError, "output: #{run.output} cannot be written: #{reason}"
      end

      @run = run
      begin
        _c_start(*run.c_args)
      rescue Exception # rubocop:disable Lint/RescueException
        @run = nil
        _c_output_release
        raise
      end
      __child_part(run, dir, base, windows, stat_base)
      true
    end

    # The stats block's lines (report_stat, and the rperf command with the
    # counters of every process summed): `c` holds the counters
    # (stat_counters' keys plus user_ms, sys_ms, real_ms), `data` the
    # samples.
    def __stat_lines(command, c, data, report: false)
      lines = ["", " Performance stats for '#{command}':", ""]
      lines << stat_line(fmt_ms(c["user_ms"]), "ms", "user")
      lines << stat_line(fmt_ms(c["sys_ms"]), "ms", "sys")
      lines << stat_line(fmt_ms(c["real_ms"]), "ms", "real")
      samples = data[:aggregated_samples] || []
      total = samples.sum { |s| s[1] }
      # a process tree (inherit:, the rperf command's forks and spawns)
      processes = c["processes"] || data[:process_count] || 1
      lines << "" << format("%14d     [Rperf] Ruby processes profiled", processes) if processes > 1
      if total.positive?
        by = Hash.new(0)
        samples.each do |frames, w|
          by[STAT_CATEGORIES.fetch(frames[0] && frames[0][1], "CPU execution")] += w
        end
        lines << ""
        (["CPU execution"] + STAT_CATEGORIES.values).each do |cat|
          next unless by[cat].positive?
          lines << format("%14s ms %5.1f%%  %s", fmt_ms(by[cat] / 1e6), 100.0 * by[cat] / total, cat)
        end
      end
      lines << format("%14d     [Ruby] detected threads", c["threads"]) if c["threads"].positive?
      lines << format("%14s ms   [Ruby] GC time (%d count: %d minor, %d major)", fmt_ms(c["gc_time_ms"].to_f),
                      c["gc_count"], c["minor_gc_count"], c["major_gc_count"])
      lines << format("%14d     [Ruby] allocated objects", c["allocated"])
      lines << format("%14d     [Ruby] freed objects", c["freed"])
      lines << format("%14s MB   [OS] peak memory (maxrss)", fmt_ms(c["maxrss_kb"] / 1024.0)) if c["maxrss_kb"]
      if c["voluntary"] && c["involuntary"]
        lines << format("%14d     [OS] context switches (%d voluntary, %d involuntary)",
                        c["voluntary"] + c["involuntary"], c["voluntary"], c["involuntary"])
      end
      if report && defined?(Rperf::Text)
        lines << ""
        lines << Rperf::Text.encode(data, header: false)
      end
      lines << ""
      overhead = c["real_ms"].positive? ? c["sampling_time_ns"] / 1e6 / c["real_ms"] * 100 : 0
      lines << format("  %d samples / %d triggers, %.1f%% profiler overhead",
                      c["samples"], c["triggers"], overhead)
      lines << ""
    end

    # The current run's record (compared by identity: a later run is a
    # different object), or nil. For code that must tell its own run from
    # one somebody else started (Rperf::PprofApp's on-demand runs).
    def __current_run
      running? ? @run : nil
    end

    # Rperf.start's checks of frequency, backend and signal, without
    # starting anything (ArgumentError names the option).
    def __check_timing_options(frequency: 1000, backend: nil, signal: nil, allow_signal: false)
      validate_frequency(frequency)
      resolve_backend(backend, signal, allow_signal)
      nil
    end

    # Rperf.label(**labels) { ... } and Rperf.labels are defined in C
    # (ruby/labels.c), so that tracers see no helper calls: label merges
    # labels into the current thread's label set (nil deletes a key; with a
    # block, the previous set is restored afterwards); labels returns the
    # current set. Both work in any Ractor.

    private

    def validate_frequency(frequency)
      unless frequency.is_a?(Integer) && frequency > 0
        raise ArgumentError,
              "frequency must be a positive integer (got #{frequency.inspect}); accepted: Integer 1..#{MAX_FREQUENCY}"
      end
      return if frequency <= MAX_FREQUENCY

      raise ArgumentError, "frequency must be <= #{MAX_FREQUENCY} (10KHz), got #{frequency}"
    end

    UNCATCHABLE = { 9 => "KILL", 19 => "STOP" }.freeze
    # Raised by faults: a handler that returns would re-run the faulting
    # instruction. Refused even with allow_signal: true.
    FAULT_SIGNALS = %w[ILL TRAP ABRT BUS FPE SEGV SYS].to_h { |n| [Signal.list.fetch(n), n] }.freeze

    # -> [backend_name, signal_number (0 = backend default)]
    def resolve_backend(backend, signal, allow_signal = false)
      names = backends
      unless allow_signal == true || allow_signal == false
        raise ArgumentError, "allow_signal must be true or false, got #{allow_signal.inspect}"
      end
      unless signal.nil? || signal == false || signal.is_a?(Integer)
        raise ArgumentError, "signal must be nil, false, or an Integer, got #{signal.inspect} " \
                             "(accepted: #{signal_accepted})"
      end
      validate_signal_number(signal, allow_signal) if signal.is_a?(Integer) && signal != 0
      from_signal =
        if signal == false || signal == 0 then :nanosleep
        elsif signal.is_a?(Integer) && signal > 0 then :signal
        end
      if backend.nil?
        name = from_signal || names.first
      else
        unless (backend.is_a?(Symbol) || backend.is_a?(String)) && names.include?(backend.to_sym)
          raise ArgumentError,
                "unknown backend #{backend.inspect}; registered backends: #{names.map(&:inspect).join(', ')}"
        end
        name = backend.to_sym
        # An Integer names the tick signal of either backend (:nanosleep
        # signals other Ractors' threads with it); false/0 means :nanosleep.
        if from_signal == :nanosleep && name != :nanosleep
          raise ArgumentError,
                "backend: #{name.inspect} conflicts with signal: #{signal.inspect} " \
                "(signal: false selects :nanosleep; an Integer is the tick signal of either backend)"
        end
      end
      [name, signal.is_a?(Integer) && signal > 0 ? signal : 0]
    end

    def signal_accepted
      "nil, false, 0 (nanosleep) or a real-time signal number #{REALTIME_SIGNALS} (SIGRTMIN..SIGRTMAX)"
    end

    def validate_signal_number(signal, allow_signal)
      if UNCATCHABLE.key?(signal)
        raise ArgumentError, "signal #{signal} (#{UNCATCHABLE[signal]}) cannot be caught; use a different signal"
      end
      return if REALTIME_SIGNALS.cover?(signal)

      name = Signal.signame(signal) if signal.positive?
      shown = name ? "#{signal} (SIG#{name})" : signal.to_s
      if !allow_signal || signal <= 0 || signal > REALTIME_SIGNALS.max
        raise ArgumentError, "signal must be #{signal_accepted}, got #{shown}; " \
                             "another catchable signal needs allow_signal: true"
      end
      return unless FAULT_SIGNALS.key?(signal)

      raise ArgumentError, "signal #{shown} is raised by faults and cannot be the tick signal, even with " \
                           "allow_signal: true (refused: #{FAULT_SIGNALS.values.map { |n| "SIG#{n}" }.join(', ')}); " \
                           "accepted: #{signal_accepted}"
    end

    def resolve_exporter(exporter, format, output)
      if respond_to?(:__resolve_exporter, true)
        __resolve_exporter(exporter, format, output)
      elsif exporter || format
        raise ArgumentError, "exporter #{(exporter || format).inspect} is not available: no exporters are built"
      end
    end

    # The sample type of output: written at stop: nil (the result's
    # default), or one the run records.
    def check_start_sample_type(sample_type, mode, allocations)
      return nil if sample_type.nil?

      __check_sample_type(sample_type) if respond_to?(:__check_sample_type, true)
      type = sample_type.to_sym
      alloc = ALLOC_SAMPLE_TYPES.include?(type)
      if alloc && !allocations
        raise ArgumentError, "sample_type: #{type.inspect} needs mode: :alloc or allocations: true"
      elsif !alloc && mode == :alloc
        raise ArgumentError,
              "sample_type: #{type.inspect} is a time profile; mode: :alloc records #{ALLOC_SAMPLE_TYPES.map(&:inspect).join(', ')}"
      elsif !alloc && type != :time && type != mode
        raise ArgumentError, "sample_type: #{type.inspect} does not match mode: #{mode.inspect}"
      end
      type
    end

    def write_output(data, run)
      if respond_to?(:__export_at_stop, true)
        __export_at_stop(data, run.output, run.exporter, run.sample_type)
      else
        warn "rperf: output #{run.output} not written: no exporters are built"
      end
    end

    def main_ractor!(what)
      return if Ractor.current == Ractor.main

      raise RuntimeError, "Rperf.#{what} must be called from the main Ractor " \
                          "(Rperf.label, Rperf.labels and Rperf.running? work in any Ractor)"
    end

    def finish_result(data)
      if data.key?(:raw_samples)
        agg = {}
        data[:raw_samples].each do |frames, weight, thread_seq, label_set_id|
          key = [frames, thread_seq, label_set_id]
          agg[key] = (agg[key] || 0) + weight
        end
        data[:aggregated_samples] = agg.map { |(f, t, l), w| [f, w, t, l] }
      end
      data
    end

    def report_verbose(data)
      samples = data[:aggregated_samples] || []
      total = samples.sum { |s| s[1] }
      count = data[:sampling_count]
      avg = count.positive? ? data[:sampling_time_ns] / 1000.0 / count : 0.0
      warn format("[rperf] mode=%s frequency=%dHz backend=%s", data[:mode], data[:frequency], data[:backend])
      warn format("[rperf] sampling: %d calls, %.2fms total, %.1fus/call avg",
                  count, data[:sampling_time_ns] / 1e6, avg)
      warn format("[rperf] samples recorded: %d, dropped: %d, profiler memory: %d bytes (%s)",
                  samples.size, data[:dropped_samples], data[:profiler_memory_bytes], data[:allocator])
      flat = Hash.new(0)
      cum = Hash.new(0)
      samples.each do |frames, w|
        flat[frames[0]] += w if frames[0]
        frames.uniq.each { |f| cum[f] += w } # recursion counts once per sample
      end
      { "flat" => flat, "cum" => cum }.each do |name, table|
        warn "[rperf] top 10 by #{name}:"
        table.sort_by { |_, w| -w }.first(10).each do |(path, label), w|
          warn format("[rperf] %8.1fms %5.1f%%  %s (%s)", w / 1e6, total.positive? ? 100.0 * w / total : 0, label, path)
        end
      end
    end

    def fmt_ms(ms)
      int, frac = format("%.1f", ms).split(".")
      "#{int.reverse.scan(/\d{1,3}/).join(',').reverse.sub(/^,/, '')}.#{frac}".sub(/^(-?),/, '\\1')
    end

    STAT_CATEGORIES = {
      "[GVL blocked]" => "[Ruby] GVL blocked (I/O, sleep)",
      "[GVL wait]" => "[Ruby] GVL wait (contention)",
      "[GC marking]" => "[Ruby] GC marking",
      "[GC sweeping]" => "[Ruby] GC sweeping",
    }.freeze

    def stat_line(value, unit, label)
      format("%14s %-4s %s", value, unit, label)
    end

    # This process's counters for the stats block (ruby/stat.c: GC,
    # allocations, peak memory, context switches of all its threads);
    # `data`'s sampling counters when given.
    def stat_counters(data = nil)
      c = _c_stat_counters
      if data
        c.merge!("threads" => data[:detected_thread_count], "samples" => data[:sampling_count],
                 "triggers" => data[:trigger_count], "sampling_time_ns" => data[:sampling_time_ns])
      end
      c
    end

    # The stats block of Rperf.start(stat: true). With forked children
    # merged in (`children`: their processes' counters, from
    # __merge_children), every count is the processes' sum (peak memory:
    # the largest), and user and sys include the children waited for.
    def report_stat(data, run, children = nil)
      real = Process.clock_gettime(Process::CLOCK_MONOTONIC) - run.started_at
      t = Process.times
      joined = data[:process_count].to_i > 1
      c = stat_counters(data).merge("user_ms" => (t.utime + (joined ? t.cutime : 0)) * 1000,
                                    "sys_ms" => (t.stime + (joined ? t.cstime : 0)) * 1000,
                                    "real_ms" => real * 1000)
      children&.each do |k, v|
        c[k] = if k == "maxrss_kb" then [c[k], v].compact.max
               elsif c[k].is_a?(Numeric) && v.is_a?(Numeric) then c[k] + v
               end
      end
      warn(*__stat_lines(ENV["RPERF_STAT_COMMAND"] || "(unknown)", c, data,
                         report: ENV["RPERF_STAT_REPORT"] == "1"))
    end
  end

  # Fork: the child starts with a stopped profiler and clean state. Under
  # the rperf command, or when the run was started with inherit: :fork, the
  # child then starts the run again for itself (its profile goes to the
  # run's directory by its pid, and from there into the root's result).
  module ForkHook
    def _fork
      # the fork goes ahead whatever this meets (the child is not profiled)
      child_run = begin
        Rperf.__child_run_going
      rescue StandardError => e
        Rperf._c_report_error("rperf: a forked child is not profiled", e)
        nil
      end
      pid = super
      Rperf.__forked(pid, child_run)
      pid
    end
  end
  Process.singleton_class.prepend(ForkHook)
end

require "rperf/inherit"

begin
  require "rperf/exporters"
rescue LoadError
  # exporters are optional until built
end

if ENV["RPERF_ENABLED"] == "1"
  mode = (ENV["RPERF_MODE"] || "cpu")
  unless %w[cpu wall alloc].include?(mode)
    raise ArgumentError, "RPERF_MODE must be 'cpu', 'wall' or 'alloc', got: #{mode.inspect}"
  end
  opts = { frequency: Integer(ENV.fetch("RPERF_FREQUENCY", "1000"), exception: false) || 0,
           mode: mode.to_sym, aggregate: ENV["RPERF_AGGREGATE"] != "0",
           stat: ENV["RPERF_STAT"] == "1" }
  opts[:backend] = ENV["RPERF_BACKEND"].to_sym if ENV["RPERF_BACKEND"]
  opts[:output] = ENV["RPERF_OUTPUT"] || (opts[:stat] ? nil : "rperf.data")
  opts[:exporter] = ENV["RPERF_FORMAT"].to_sym if ENV["RPERF_FORMAT"]
  case ENV["RPERF_SIGNAL"]
  when nil then nil
  when "false" then opts[:signal] = false
  else opts[:signal] = Integer(ENV["RPERF_SIGNAL"], exception: false) ||
                       raise(ArgumentError, "RPERF_SIGNAL must be 'false' or an Integer, got #{ENV['RPERF_SIGNAL'].inspect}")
  end
  opts[:allow_signal] = true if ENV["RPERF_ALLOW_SIGNAL"] == "1"
  if (interval = ENV["RPERF_ALLOC_INTERVAL"]) && !interval.empty?
    opts[:alloc_interval] = Integer(interval, exception: false) ||
                            raise(ArgumentError, "RPERF_ALLOC_INTERVAL must be an Integer, got #{interval.inspect}")
  end
  case ENV["RPERF_ALLOCATIONS"]
  when nil, "", "0", "false" then nil
  when "1", "true" then opts[:allocations] = true
  else raise ArgumentError, "RPERF_ALLOCATIONS must be '1' or '0', got #{ENV['RPERF_ALLOCATIONS'].inspect}"
  end
  case ENV["RPERF_DEFER"]
  when nil, "", "0", "false" then nil
  when "1", "true" then opts[:defer] = true
  else raise ArgumentError, "RPERF_DEFER must be '1' or '0', got #{ENV['RPERF_DEFER'].inspect}"
  end
  case ENV["RPERF_INHERIT"]
  when nil, "" then nil
  when "fork" then opts[:inherit] = :fork
  when "true", "1" then opts[:inherit] = true
  when "false", "0" then opts[:inherit] = false
  else raise ArgumentError, "RPERF_INHERIT must be 'fork', 'true' or 'false', got #{ENV['RPERF_INHERIT'].inspect}"
  end
  # Stopped at exit by the extension's end proc (ruby/api.c), which runs
  # after the application's at_exit blocks and writes the output.
  if (dir = ENV["RPERF_CHILD_DIR"])
    Rperf.__start_child_run(dir, opts) # the rperf command's run: it merges the processes' profiles
  else
    Rperf.start(**opts)
  end
end
require "rperf/serve" if ENV["RPERF_SERVE"] # the pprof listener of RPERF_SERVE (docs/continuous-profiling.md)
