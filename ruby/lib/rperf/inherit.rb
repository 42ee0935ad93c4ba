# frozen_string_literal: true

# Profiles of forked children joining their root's (Rperf.start's
# inherit: :fork, the default; inherit: true adds spawned Ruby programs).
# A run's first fork (or its start, with inherit: true) makes its private
# directory in Dir.tmpdir (rperf-run-<root pid>-<random>, mode 0700, the
# name the rperf command uses, so a root killed before it cleaned up is
# removed by the next command's run); each forked child (and its own forks)
# starts the run again and writes its profile there: a window every
# CHILD_WINDOW_SECONDS while it runs (<pid>.w<n>.pb.gz, ruby/child_windows.c)
# and the rest as <pid>.pb.gz when it stops or exits (ruby/lib/rperf.rb,
# __start_child_run); in a run recording allocations beside time, each
# part's heap profile beside it (<pid>[.w<n>].heap.pb.gz, RunDir). The
# root's stop (and its exit) merges every part written into its result
# (time samples, and allocation entries: allocations summed, the objects
# in use from each pid's newest part that has them), each child's samples
# labelled `pid` => its pid (the root's own samples carry no pid label, as
# without children), with `process_count`, and removes the directory; its
# snapshots merge them too (a clear consumes them). A child still running
# at the root's stop loses what it has not written yet: it says so on
# stderr at its end.

require "rperf/run_dir"

module Rperf
  class << self
    # A new private directory for the run's children. What merging their
    # profiles needs is loaded now: the merge may run in a signal handler
    # (a server's SIGTERM trap calling Rperf.stop or snapshot), where
    # `require` raises ThreadError (RubyGems takes a lock).
    def __make_inherit_dir
      __load_merge_libraries
      dir = RunDir.make
      _c_children_dir_made
      dir
    end

    # inherit: true: Ruby programs spawned while the run goes start the
    # run's child run through the environment (as under the rperf command)
    # and write into the run's directory; the variables are put back at
    # the stop (__finish_stop).
    def __inherit_spawned
      @run[:inherit_dir] ||= __make_inherit_dir
      o = @run[:start_opts]
      so = $LOADED_FEATURES.find { |f| File.basename(f) == "rperf.so" }
      dirs = [File.expand_path("..", __dir__), so && File.dirname(so)].compact.uniq
      env = SPAWN_KEYS.to_h { |k| [k, nil] }.merge(
        "RPERF_ENABLED" => "1", "RPERF_MODE" => o[:mode].to_s, "RPERF_FREQUENCY" => o[:frequency].to_s,
        "RPERF_BACKEND" => o[:backend].to_s, "RPERF_CHILD_DIR" => @run[:inherit_dir],
        "RUBYOPT" => ["-rrperf", ENV["RUBYOPT"]].compact.reject(&:empty?).join(" "),
        "RUBYLIB" => [*dirs, ENV["RUBYLIB"]].compact.reject(&:empty?).join(File::PATH_SEPARATOR)
      )
      env["RPERF_AGGREGATE"] = "0" unless o[:aggregate]
      env["RPERF_SIGNAL"] = o[:signal].to_s if o[:signal].is_a?(Integer)
      env["RPERF_ALLOW_SIGNAL"] = "1" if o[:allow_signal]
      env["RPERF_DEFER"] = "1" if o[:defer]
      if o[:allocations] || o[:mode] == :alloc
        env["RPERF_ALLOCATIONS"] = "1" if o[:allocations]
        env["RPERF_ALLOC_INTERVAL"] = o[:alloc_interval].to_s
      end
      env["RPERF_CHILD_WINDOWS"] = "1"
      @run[:saved_env] = env.keys.to_h { |k| [k, ENV[k]] }
      ENV.update(env)
    end

    # Rperf.snapshot (ruby/api.c) of a run with forked children: the
    # profiles of the children that have ended join it; with clear: they
    # are consumed (the next window holds what ends after it).
    def __finish_snapshot(data, clear)
      dir = @run && @run[:inherit_dir]
      if dir && File.directory?(dir)
        read = []
        data = __merge_children(data, dir, read: read)
        # open Rperf::Window readers keep the parts new to them that this
        # clear consumes
        Window.__children_going(dir) if clear && defined?(Window)
        # only what was merged: a child may have written its profile since
        read.each do |path|
          [path, path.sub(/\.pb\.gz\z/, ".stat.json")].each { |f| File.delete(f) if File.exist?(f) }
        rescue SystemCallError
          nil
        end if clear
      end
      data
    end

    # The directory the run's children write into, or nil.
    def __children_dir
      @run && @run[:inherit_dir]
    end

    # The names of the children's part files in `dir` now ([] when it is
    # gone).
    def __child_part_names(dir)
      RunDir.parts(dir).flat_map { |part| [part.time, part.heap].compact.map { |f| File.basename(f) } }
    rescue SystemCallError
      []
    end

    # `data` (this process's result) with the samples, label sets and
    # threads of every child profile in `dir` added; process_count counts
    # this process and them. A child file that cannot be read is reported
    # and left out. With remove: the directory goes afterwards.
    def __merge_children(data, dir, remove: false, read: [])
      __merge_parts(data, __child_profiles(dir, read))
    ensure
      __remove_inherit_dir(dir) if remove
    end

    # `data` with the children's profiles `parts` ([[pid,
    # Rperf::Report::Profile]], oldest first) added.
    def __merge_parts(data, parts)
      return data.merge(process_count: 1) if parts.empty?

      # this process's label set ids stay as they are; children's sets are
      # added after them (or found among them)
      list = (data[:label_sets] || [{}]).dup
      sets = {}
      list.each_with_index { |h, i| sets[h] ||= i }
      samples = data[:aggregated_samples].dup
      # a heap profile's entries: allocations add up, the objects in use
      # are each process's newest part's that has them (a window holds its
      # live heap)
      allocs = data[:allocations] && data[:allocations][:samples].dup
      newest = {}
      parts.each_with_index { |(pid, prof), i| newest[pid] = i if prof.data[:allocations] }
      threads = (data[:threads] || []).dup
      # A process's parts (its windows and its last part) share its thread
      # numbers: one offset per pid, its threads listed once.
      offsets = __pid_offsets(parts, threads.map { |t| t[:thread_seq] }.max || 0)
      seen = {}
      parts.each_with_index do |(pid, prof), index|
        d = prof.data
        offset = offsets[pid]
        ids = (d[:label_sets].empty? ? [{}] : d[:label_sets]).map do |h|
          key = { PID_KEY => pid, **h.except(PID_KEY) }
          sets[key] ||= (list << key).size - 1
        end
        d[:aggregated_samples].each do |frames, w, seq, set|
          seq ||= 0
          samples << [frames.map { |f| [f[0], f[1]] }, w, seq.positive? ? seq + offset : 0, ids[set || 0]]
        end
        if allocs && d[:allocations]
          current = newest[pid] == index
          d[:allocations][:samples].each do |frames, cls, ao, ab, io, ib, seq, set|
            next unless current || ao.positive?

            seq ||= 0
            allocs << [frames.map { |f| [f[0], f[1]] }, cls, ao, ab, *(current ? [io, ib] : [0, 0]),
                       seq.positive? ? seq + offset : 0, ids[set || 0]]
          end
        end
        d[:threads].each do |t|
          seq = t[:thread_seq] + offset
          if seen.key?(seq) then threads[seen[seq]] = t.merge(thread_seq: seq)
          else
            seen[seq] = threads.size
            threads << t.merge(thread_seq: seq)
          end
        end
      end
      merged = data.merge(process_count: 1 + offsets.size, aggregated_samples: samples, label_sets: list,
                          threads: threads)
      merged[:allocations] = data[:allocations].merge(samples: allocs) if allocs
      merged
    end

    private

    PID_KEY = :pid
    # Every variable the env auto-start reads, set or cleared for spawned
    # children (inherit: true).
    SPAWN_KEYS = %w[RPERF_ENABLED RPERF_MODE RPERF_FREQUENCY RPERF_OUTPUT RPERF_FORMAT RPERF_SIGNAL
                    RPERF_ALLOW_SIGNAL RPERF_BACKEND RPERF_AGGREGATE RPERF_STAT RPERF_VERBOSE
                    RPERF_STAT_COMMAND RPERF_STAT_REPORT RPERF_CHILD_DIR RPERF_INHERIT RPERF_DEFER RPERF_CHILD_WINDOWS
                    RPERF_ALLOCATIONS RPERF_ALLOC_INTERVAL
                    RPERF_SERVE RPERF_SERVE_TOKEN RPERF_SERVE_START RUBYOPT RUBYLIB].freeze

    # {pid => thread_seq offset}: each process's threads numbered after
    # those of the processes before it (and this one's, up to `base`).
    def __pid_offsets(parts, base)
      top = Hash.new(0)
      parts.each do |pid, prof|
        d = prof.data
        seqs = d[:aggregated_samples].map { |s| s[2] || 0 } + d[:threads].map { |t| t[:thread_seq] }
        seqs += d[:allocations][:samples].map { |s| s[6] || 0 } if d[:allocations]
        top[pid] = [top[pid], seqs.max || 0].max
      end
      top.each_with_object({}) do |(pid, n), h|
        h[pid] = base
        base += n
      end
    end

    # -> [[pid, Rperf::Report::Profile]] of the children's parts in `dir`
    # (RunDir.parts: a part's time and heap profiles as one; only the files
    # named in `names`, when given), oldest first. The paths read are added
    # to `read`.
    def __child_profiles(dir, read = [], names = nil)
      __load_merge_libraries
      RunDir.parts(dir).filter_map do |part|
        time, heap = [part.time, part.heap].map do |path|
          next unless path
          next if names && !names.include?(File.basename(path))

          prof = Rperf::Report.load(path)
          read << path
          prof
        rescue Rperf::Report::Error => e
          warn "rperf: a forked child's profile is left out: #{e.message}"
          nil
        end
        prof = Rperf::Report.combine(time, heap) and [part.pid, prof]
      rescue Rperf::Report::Error => e
        warn "rperf: a forked child's profile is left out: #{e.message}"
        nil
      end.sort_by { |pid, prof| [prof.data[:start_time_ns] || 0, pid] }
    rescue SystemCallError
      []
    end

    # Loaded once, outside any signal handler (see __make_inherit_dir); a
    # later call requires nothing.
    def __load_merge_libraries
      return if defined?(Rperf::Report::Profile) && defined?(::FileUtils) && defined?(::JSON)

      require "rperf/report"
      require "fileutils"
      require "json"
    end

    # A child still starting or ending may add or remove a file while the
    # directory goes (its start's writability probe, its last part): a
    # removal that meets one tries again, a few times.
    def __remove_inherit_dir(dir)
      __load_merge_libraries
      tries = 0
      begin
        FileUtils.remove_entry_secure(dir) if File.directory?(dir)
      rescue Errno::ENOENT, Errno::ENOTEMPTY
        retry if (tries += 1) < 5
        warn "rperf: could not remove #{dir}: files kept appearing"
      end
    rescue SystemCallError => e
      warn "rperf: could not remove #{dir}: #{e.message}"
    end
  end
end
