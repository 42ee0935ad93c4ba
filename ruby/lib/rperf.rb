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
      stop if running? && @run && @run[:yields_to_start]
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
      @run = { output: output, exporter: exporter_name, aggregate: aggregate ? true : false,
               sample_type: sample_type,
               verbose: verbose, stat: stat, inherit: inherit,
               # what a forked child starts again with (inherit: :fork)
               start_opts: { frequency: frequency, mode: mode, backend: backend_name.to_sym, signal: signal,
                             aggregate: aggregate ? true : false, ring_size: ring_size,
                             max_label_sets: max_label_sets, allow_signal: allow_signal, defer: defer,
                             allocations: allocations, alloc_interval: alloc_interval },
               started_at: Process.clock_gettime(Process::CLOCK_MONOTONIC) }
      if verbose && !verified_ruby?
        warn "[rperf] Ruby #{RUBY_VERSION} is not a series rperf is verified on " \
             "(#{VERIFIED_RUBIES.join(', ')}): the holder backend sends every tick by signal"
      end
      # The last argument: a run left going at exit is stopped there (in C)
      # and, when it asked for output or reports, finished like Rperf.stop.
      begin
        _c_start(frequency, MODES[mode], aggregate ? true : false, backend_name.to_s, signo, ring_size,
                 verbose || stat ? :messages : (output ? true : false), max_label_sets, defer, sampled_interval,
                 mode != :alloc)
        # a C exporter writes the output at exit and exec from C: no method
        # the application may have redefined on the way
        if output && aggregate && !(@ruby_exporters || {}).key?(exporter_name)
          _c_exit_output(output, exporter_name.to_s, false, sample_type)
        end
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
    def __finish_stop(data, output_written = false)
      run = @run || {}
      @run = nil
      ENV.update(run[:saved_env]) if run[:saved_env] # inherit: true's variables go
      finish_result(data)
      if run[:child_stats] && !File.directory?(File.dirname(run[:child_stats]))
        warn "rperf: process #{Process.pid} ended after the run it was part of; its profile is left out" unless output_written
        run = run.merge(output: nil, heap_output: nil, child_stats: nil)
      end
      if run[:inherit_dir]
        # open Rperf::Window readers keep the children's parts new to them
        Window.__children_going(run[:inherit_dir]) if defined?(Window)
        # the forked children's profiles join this one (the output written
        # from C at exit had this process's alone: written again)
        data = __merge_children(data, run[:inherit_dir], remove: true)
        output_written = false if data[:process_count] > 1
      end
      if run[:output] && !output_written
        write_output(data, run)
        __export_at_stop(data, run[:heap_output], :pprof, :inuse_space) if run[:heap_output]
      end
      write_child_stats(data, run) if run[:child_stats]
      report_verbose(data) if run[:verbose]
      report_stat(data, run) if run[:stat]
      data
    end
    private :__finish_stop

    # ---- runs of the rperf command (RPERF_CHILD_DIR, docs/cli.md) ----------
    #
    # Under the rperf command every Ruby process of the command (the command
    # itself, its forks, the Ruby processes it spawns) profiles itself into
    # the run's private directory: the profile as pprof in <dir>/<pid>.pb.gz
    # (with allocations beside time, its heap profile beside it in
    # <dir>/<pid>.heap.pb.gz, RunDir), its counters (samples, GC, memory,
    # context switches) in <dir>/<pid>.stat.json (<pid>.<n>.*: the n-th program the process
    # exec'd into, whose predecessor's run ended at the exec). The command merges them into one output at exit
    # (ruby/lib/rperf/cli.rb) and prints the stats block itself.

    # Start the command's run in this process (env auto-start, and again in
    # a fork child). `opts`: Rperf.start's options from the environment. A
    # process started after the command has exited (the directory is gone)
    # is not profiled.
    def __start_child_run(dir, opts, stat_base = nil, windows: ENV["RPERF_CHILD_WINDOWS"] == "1")
      return unless File.directory?(dir)

      __load_merge_libraries # its stop may run in a signal handler: no require then
      @child_run = [dir, opts, windows]
      # A program this process exec'd into profiles as the same pid: the
      # profile its predecessor wrote at the exec keeps its name.
      base = File.join(dir, Process.pid.to_s)
      n = 0
      base = File.join(dir, "#{Process.pid}.#{n += 1}") while File.exist?("#{base}.pb.gz")
      # the process's context switches go on across exec: only its own count
      stat_base ||= stat_counters.slice(*STAT_SINCE_EXEC).compact if n.positive?
      start(**opts.merge(output: "#{base}.pb.gz", exporter: :pprof, stat: false))
      # a run with allocations beside time: its heap profile goes beside
      # the time profile (<base>.heap.pb.gz, RunDir)
      heap = "#{base}#{RunDir::HEAP_SUFFIX}" if opts[:allocations] && opts[:mode] != :alloc
      @run[:heap_output] = heap
      _c_exit_output("#{base}.pb.gz", "pprof", true, nil, heap) if @run[:aggregate]
      # a child of Rperf.start(inherit:) writes its windows as it goes, so
      # that the root's snapshots hold it while it runs (child_windows.c)
      _c_child_windows(base, CHILD_WINDOW_SECONDS) if windows && @run[:aggregate]
      @run[:child_stats] = "#{base}.stat.json"
      @run[:stat_base] = stat_base
      nil
    end

    # [dir, opts] of the run a fork child starts again (ForkHook, in the
    # parent just before fork): the rperf command's run, or a run started
    # with inherit: :fork (its directory is made at the first fork).
    def __child_run_going
      return nil unless @run && running?
      return @child_run if @run[:child_stats]
      return nil unless @run[:inherit] == :fork || @run[:inherit] == true

      @run[:inherit_dir] ||= __make_inherit_dir
      [@run[:inherit_dir], @run[:start_opts], true]
    end

    # In a fork child (ForkHook): the inherited run was dropped; start the
    # command's run again for this process. GC and allocation counts are
    # the parent's at this point: the child reports what it adds to them.
    def __restart_child_run(child_run)
      dir, opts, windows = child_run
      @run = nil # the parent's: this process's profiler is stopped
      __start_child_run(dir, opts, stat_counters.slice(*STAT_SINCE_FORK), windows: windows)
      return @run[:yields_to_start] = true if @run

      __left_out_at_exit
    rescue StandardError => e
      # the root stopped (and removed the directory) while this child got going
      return __left_out_at_exit unless File.directory?(dir)

      warn "rperf: process #{Process.pid} could not be profiled: #{e.message}"
    end

    # A forked child whose run ended before it could start again: said at
    # its end, as for a child that outlives the run (__finish_stop).
    def __left_out_at_exit
      pid = Process.pid
      at_exit { warn "rperf: process #{pid} ended after the run it was part of; its profile is left out" if Process.pid == pid }
      nil
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
        __export_at_stop(data, run[:output], run[:exporter], run[:sample_type])
      else
        warn "rperf: output #{run[:output]} not written: no exporters are built"
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

    # Counters a fork child inherits from its parent (reported as deltas).
    STAT_SINCE_FORK = %w[gc_time_ms gc_count minor_gc_count major_gc_count allocated freed].freeze
    STAT_SINCE_EXEC = %w[voluntary involuntary].freeze

    # This process's counters for the stats block; `data`'s sampling
    # counters when given.
    def stat_counters(data = nil)
      gc = GC.stat
      c = { "gc_time_ms" => gc[:time].to_f, "gc_count" => gc[:count], "minor_gc_count" => gc[:minor_gc_count],
            "major_gc_count" => gc[:major_gc_count], "allocated" => gc[:total_allocated_objects],
            "freed" => gc[:total_freed_objects] }
      status = File.exist?("/proc/self/status") ? File.read("/proc/self/status") : ""
      c["maxrss_kb"] = status[/^VmHWM:\s+(\d+)/, 1]&.to_i
      c["voluntary"] = status[/^voluntary_ctxt_switches:\s+(\d+)/, 1]&.to_i
      c["involuntary"] = status[/^nonvoluntary_ctxt_switches:\s+(\d+)/, 1]&.to_i
      if data
        c.merge!("threads" => data[:detected_thread_count], "samples" => data[:sampling_count],
                 "triggers" => data[:trigger_count], "sampling_time_ns" => data[:sampling_time_ns])
      end
      c
    end

    def report_stat(data, run)
      real = Process.clock_gettime(Process::CLOCK_MONOTONIC) - run[:started_at]
      t = Process.times
      c = stat_counters(data).merge("user_ms" => t.utime * 1000, "sys_ms" => t.stime * 1000, "real_ms" => real * 1000)
      # children merged in: their threads too
      c["threads"] = data[:threads].size if data[:process_count].to_i > 1 && data[:threads]
      warn(*__stat_lines(ENV["RPERF_STAT_COMMAND"] || "(unknown)", c, data,
                         report: ENV["RPERF_STAT_REPORT"] == "1"))
    end

    # The counters file of the command's run, written like the profile
    # (temporary file, then rename: the command never reads half a file).
    def write_child_stats(data, run)
      __load_merge_libraries # JSON (loaded at the child's start: no require here)
      c = stat_counters(data)
      run[:stat_base]&.each { |k, v| c[k] -= v }
      tmp = "#{run[:child_stats]}.#{Process.pid}.tmp"
      File.write(tmp, ::JSON.generate(c))
      File.rename(tmp, run[:child_stats])
    rescue StandardError => e
      warn "rperf: writing #{run[:child_stats]} failed: #{e.message}"
    end
  end

  # Fork: the child starts with a stopped profiler and clean state. Under
  # the rperf command, or when the run was started with inherit: :fork, the
  # child then starts the run again for itself (its profile goes to the
  # run's directory by its pid, and from there into the root's result).
  module ForkHook
    def _fork
      child_run = Rperf.__child_run_going
      pid = super
      if pid.zero?
        Rperf._c_after_fork_child
        Rperf.__restart_child_run(child_run) if child_run
      end
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
