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
# snapshots merge them too (a clear consumes them). The root folds the
# files into one aggregate per process as they come and deletes them
# (Rperf::Children), so the directory holds only the newest few. A child still running
# at the root's stop loses what it has not written yet: it says so on
# stderr at its end.

require "rperf/run_dir"

module Rperf
  class << self
    # A new private directory for the run's children. What folding their
    # profiles needs is loaded now: a fold may run in a signal handler (a
    # server's SIGTERM trap calling Rperf.stop or snapshot), where `require`
    # raises ThreadError (RubyGems takes a lock). The first fork may come
    # after the program redefined core methods, which libraries meet as
    # they load: then none is loaded, the directory is still made (in C),
    # and the stop merges the children in C (__merge_children).
    def __make_inherit_dir
      loaded = begin
        __load_merge_libraries
        true
      rescue StandardError, ScriptError
        false
      end
      dir = _c_run_dir_make
      _c_children_dir_made
      Children.watch(dir) if loaded
      dir
    end

    # inherit: true: Ruby programs spawned while the run goes start the
    # run's child run through the environment (as under the rperf command)
    # and write into the run's directory; the variables are put back at
    # the stop (__finish_stop).
    def __inherit_spawned
      @run.inherit_dir ||= __make_inherit_dir
      o = @run.start_opts
      so = $LOADED_FEATURES.find { |f| File.basename(f) == "rperf.so" }
      dirs = [File.expand_path("..", __dir__), so && File.dirname(so)].compact.uniq
      env = SPAWN_KEYS.to_h { |k| [k, nil] }.merge(
        "RPERF_ENABLED" => "1", "RPERF_MODE" => o[:mode].to_s, "RPERF_FREQUENCY" => o[:frequency].to_s,
        "RPERF_BACKEND" => o[:backend].to_s, "RPERF_CHILD_DIR" => @run.inherit_dir,
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
      @run.saved_env = env.keys.to_h { |k| [k, ENV[k]] }
      ENV.update(env)
    end

    # Rperf.snapshot (ruby/api.c) of a run with forked children: the
    # profiles the children have written join it; with clear: they are
    # consumed (the next window holds what they write after it).
    # Rperf::Children folds them.
    def __finish_snapshot(data, clear)
      dir = @run && @run.inherit_dir
      return data unless dir && File.directory?(dir)

      Children.merge(data, dir, clear: clear)
    end

    # The directory the run's children write into, or nil.
    def __children_dir
      @run && @run.inherit_dir
    end

    # `data` (this process's result) with the samples, label sets and
    # threads of every child profile in `dir` added (Rperf::Children);
    # process_count counts this process and them. A child file that cannot
    # be read is reported and left out. With remove (the run's stop): the
    # directory goes afterwards. `stats` (a Hash or nil) gets the children's
    # process counters (the stats block).
    #
    # While nothing of the children's was folded (no snapshot, window or
    # fold thread read them: a short run, a run nobody reads, and the stop
    # at exit and exec of most), every part is still in the directory and
    # is read and merged in C (ruby/merge.c): the stop at exit and exec runs
    # after the program's code, which may have redefined core methods.
    def __merge_children(data, dir, remove: false, stats: nil)
      if __children_folded?
        Children.merge(data, dir, final: remove, stats: stats)
      else
        _c_run_dir_ended(dir) if remove
        _c_merge_parts(data, _c_run_dir_parts(dir, nil, nil), stats)
      end
    ensure
      __remove_inherit_dir(dir) if remove
    end

    # Rperf::Children holds folded parts (its state: what it took from the
    # directory and deleted).
    def __children_folded?
      return false unless defined?(Children)

      Children.instance_variable_get(:@state) ? true : false
    end

    # `data` with the children's profiles `parts` ([[pid, an object whose
    # #data is the part's result Hash]], oldest first) added (ruby/merge.c:
    # each part's samples labelled pid => its pid, its threads numbered
    # after those of the processes before it, every count summed).
    def __merge_parts(data, parts)
      _c_merge_parts(data, parts.map { |pid, prof| [pid, prof.data] }, nil)
    end

    private

    # Every variable the env auto-start reads, set or cleared for spawned
    # children (inherit: true).
    SPAWN_KEYS = %w[RPERF_ENABLED RPERF_MODE RPERF_FREQUENCY RPERF_OUTPUT RPERF_FORMAT RPERF_SIGNAL
                    RPERF_ALLOW_SIGNAL RPERF_BACKEND RPERF_AGGREGATE RPERF_STAT RPERF_VERBOSE
                    RPERF_STAT_COMMAND RPERF_STAT_REPORT RPERF_CHILD_DIR RPERF_INHERIT RPERF_DEFER RPERF_CHILD_WINDOWS
                    RPERF_ALLOCATIONS RPERF_ALLOC_INTERVAL
                    RPERF_SERVE RPERF_SERVE_TOKEN RPERF_SERVE_START RUBYOPT RUBYLIB].freeze

    # Loaded once, outside any signal handler (see __make_inherit_dir); a
    # later call requires nothing.
    def __load_merge_libraries
      return if defined?(Rperf::Report::Profile) && defined?(Rperf::Children) && defined?(::FileUtils) && defined?(::JSON)

      require "rperf/report"
      require "rperf/children"
      require "fileutils"
      require "json"
    end

    # The run's directory goes (ruby/merge.c; a file a child is still
    # writing meanwhile is retried, failures are one line on stderr).
    def __remove_inherit_dir(dir)
      _c_run_dir_remove(dir)
    end
  end
end
