# frozen_string_literal: true

# Rperf::Children — the root's side of its forked children's profiles
# (Rperf.start(inherit:), ruby/lib/rperf/inherit.rb), and the rperf
# command's side of its processes' (ruby/lib/rperf/cli.rb: it folds every
# CHILD_WINDOW_SECONDS while the command runs, and takes every part at
# its end, final_parts). A running child
# writes a window into the run's directory every CHILD_WINDOW_SECONDS and
# its last part when it ends (ruby/child_windows.c, RunDir). The root
# *folds* them: it reads each part once (ruby/merge.c, _c_run_dir_parts:
# its profiles and its counters file: each part's counts are those of its
# own span, so they add up), hands it to every
# open Rperf::Window it belongs to (written while the window was open),
# adds it to one aggregate per process, and deletes its files. So the
# directory holds only what nobody has folded yet, and a snapshot, a
# window's close or the stop merges one aggregate per process and those few
# files: what a cluster left profiled for days costs the root grows with
# the stacks its workers run, not with the time it ran. A last part is
# folded once its counters file is there (written after its profiles) or
# its process is gone.
#
# Who folds: every snapshot, window close and stop (they read the children
# anyway, so a scraped root folds at each scrape); and a root that nobody
# reads folds with a thread of its own (rperf-children, labelled
# rperf=children), made once its directory holds FOLD_AT part files: the
# aggregation worker counts them (child_windows.c, fold_poll) and a
# postponed job makes the thread, which then looks every
# CHILD_WINDOW_SECONDS and folds whenever there are FOLD_AT again. A root
# whose children write little never has that thread.
#
# A fold is one step under LOCK: read the new files, hand them out, publish
# the new state (one assignment of an object built beforehand), delete the
# files. A signal handler (a server's TERM trap calling Rperf.stop or
# snapshot) cannot lock a Mutex: it waits for another thread's fold to end;
# a fold of its own thread that it interrupted is abandoned when it
# resumes (the epoch moved: its files were folded by the handler, each
# window took them once, by name).
#
# A process whose windows came but whose last part never did, and which
# is gone at the stop (SIGKILLed, ended with exit!), is named on stderr
# there (the rperf command's end too); its windows, and their counts, are
# in the result.
#
# Context: the main Ractor (snapshot, stop, windows), any of its threads.

require "rperf/run_dir"

module Rperf
  module Children
    # Part files in the directory that make a root nobody reads fold them
    # (child_windows.c counts them the same way: a name starting with a
    # digit and ending in .pb.gz).
    FOLD_AT = 8
    # How long a folded file is kept for a window whose mark was opened
    # before the fold but handed to Ruby after it (the listener's), while
    # such marks exist.
    RECENT_SECONDS = 60
    # A part's counts that add up over a process's parts: each part (a
    # window, the last part) counts its own span (ruby/stat.c; ruby/merge.c
    # sums them over processes too).
    COUNTS = %i[sampling_count trigger_count sampling_time_ns dropped_samples timer_overruns
                label_sets_overflowed].freeze
    ALLOC_COUNTS = %i[sampled dropped].freeze
    # The process counters of a part's counters file (ruby/stat.c) that add
    # up over its parts (each the growth over its span); maxrss_kb is a
    # peak. A counter one part could not read is unknown (nil) for the
    # process, as ruby/merge.c does over processes.
    PROCESS_COUNTERS = %w[gc_time_ms gc_count minor_gc_count major_gc_count allocated freed
                          voluntary involuntary].freeze
    LOCK = Mutex.new

    # What a fold read of a part: its file names (time profile first), its
    # name, the pid, its order in its process ([program exec'd into, window
    # or last]), when its first file was written, and its result Hash
    # (`data`, as Rperf.__merge_parts takes it).
    Piece = Struct.new(:names, :part, :pid, :order, :mtime, :data)

    # The folds of one directory: `procs` {pid => Aggregate}, `names` {file
    # name => true} of files folded that may still be there, `open` {pid =>
    # program} of processes whose newest program has sent windows but no
    # last part.
    State = Struct.new(:dir, :procs, :names, :open)

    # A process's parts added up: time samples by stack, thread and labels;
    # allocations summed, the objects in use of its newest part that has
    # allocations (each holds its process's live heap at its end); the
    # counts summed, the threads detected the most a part saw (as
    # ruby/merge.c), the allocations' live count its newest part's; its
    # process counters summed (the stats block).
    # Copied, not changed, by a fold that adds to it (the state it replaces
    # may still be read by a signal handler's fold).
    class Aggregate
      def initialize
        @samples = {}
        @allocs = {}
        @inuse = nil
        @alloc_meta = nil
        @threads = {}
        @counts = {}
        @threads_seen = nil # detected_thread_count: the largest of its parts'
        @live = nil # the allocations' live count: [order, value] of its newest part with one
        @meta = {}
        @counters = nil # the process counters of its parts, summed
        @first = @last = nil
      end

      def initialize_copy(other)
        super
        @samples = @samples.dup
        @allocs = @allocs.dup
        @threads = @threads.dup
        @counts = @counts.dup
        @alloc_meta = @alloc_meta&.dup
        @counters = @counters&.dup
      end

      def add(data, order)
        sets = data[:label_sets]
        sets = [{}] if sets.nil? || sets.empty?
        data[:aggregated_samples].each do |frames, w, seq, set|
          key = [frames, seq || 0, sets[set || 0] || {}]
          @samples[key] = (@samples[key] || 0) + w
        end
        add_allocations(data[:allocations], sets, order) if data[:allocations]
        @meta = data.slice(:mode, :frequency) if @meta.empty? || data[:mode] != :alloc
        # a window's threads have no names (pprof carries none); its last
        # part's have (its counters file)
        data[:threads]&.each do |t|
          was = @threads[t[:thread_seq]]
          @threads[t[:thread_seq]] = was && was[:name] && !t[:name] ? t.merge(name: was[:name]) : t
        end
        COUNTS.each { |k| @counts[k] = @counts.fetch(k, 0) + data[k] if data[k].is_a?(Integer) }
        if (n = data[:detected_thread_count]).is_a?(Integer) && (@threads_seen.nil? || n > @threads_seen)
          @threads_seen = n
        end
        add_counters(data[:part_counters]) if data[:part_counters].is_a?(Hash)
        return unless (st = data[:start_time_ns])

        @first = [@first, st].compact.min
        @last = [@last, st + data[:duration_ns].to_i].compact.max
      end

      # [the process's result Hash, shaped as a part's]
      def parts
        d = data
        d[:part_counters] = @counters if @counters
        [d]
      end

      private

      def add_counters(c)
        sum = @counters ? @counters.dup : {}
        PROCESS_COUNTERS.each do |k|
          v = c[k]
          sum[k] = v.is_a?(Integer) && (!sum.key?(k) || sum[k]) ? v + sum.fetch(k, 0) : nil
        end
        rss = c["maxrss_kb"]
        sum["maxrss_kb"] = rss if rss.is_a?(Integer) && (!sum["maxrss_kb"] || rss > sum["maxrss_kb"])
        @counters = sum
      end

      def data
        sets = { {} => 0 }
        samples = @samples.map { |(frames, seq, labels), w| [frames, w, seq, sets[labels] ||= sets.size] }
        d = @meta.merge(aggregated_samples: samples, threads: @threads.values.sort_by { |t| t[:thread_seq] })
        d.merge!(@counts)
        d[:detected_thread_count] = @threads_seen if @threads_seen
        if @alloc_meta
          entries = @allocs.transform_values { |ao, ab| [ao, ab, 0, 0] }
          @inuse&.last&.each do |key, (io, ib)|
            ao, ab, = entries[key]
            entries[key] = [ao || 0, ab || 0, io, ib]
          end
          d[:allocations] = @alloc_meta.merge(samples: entries.map do |(frames, cls, seq, labels), values|
            [frames, cls, *values, seq, sets[labels] ||= sets.size]
          end)
          d[:allocations][:live] = @live[1] if @live
        end
        d[:label_sets] = sets.keys
        if @first
          d[:start_time_ns] = @first
          d[:duration_ns] = @last - @first
        end
        d
      end

      def add_allocations(allocations, sets, order)
        inuse = {} if @inuse.nil? || (order <=> @inuse[0]) >= 0
        allocations[:samples].each do |frames, cls, ao, ab, io, ib, seq, set|
          key = [frames, cls, seq || 0, sets[set || 0] || {}]
          if ao.positive? || ab.positive?
            was = @allocs[key]
            @allocs[key] = was ? [was[0] + ao, was[1] + ab] : [ao, ab]
          end
          inuse[key] = [io, ib] if inuse && (io.positive? || ib.positive?)
        end
        @inuse = [order, inuse] if inuse
        live = allocations[:live]
        @live = [order, live] if live.is_a?(Integer) && (@live.nil? || (order <=> @live[0]) >= 0)
        was = @alloc_meta || {}
        @alloc_meta = allocations.except(:samples, :live, *ALLOC_COUNTS)
        ALLOC_COUNTS.each do |k|
          n = was[k].to_i + allocations[k].to_i
          @alloc_meta[k] = n if was.key?(k) || allocations.key?(k)
        end
      end
    end

    @state = nil
    @epoch = 0
    @recent = [] # [[folded at (monotonic s), Piece]]

    class << self
      # The run just made `dir` for its children: the aggregation worker
      # looks at it from now on (child_windows.c).
      def watch(dir)
        Rperf._c_children_watch(dir, CHILD_WINDOW_SECONDS, FOLD_AT)
      end

      # Fold what the children wrote into `dir` since the last fold.
      def fold(dir)
        locked { fold_locked(dir) if File.directory?(dir) }
        nil
      end

      # `data` (this process's result) with the children's profiles added
      # (ruby/merge.c, _c_merge_parts; `stats`, a Hash or nil, gets their
      # process counters). clear: they are consumed (a clearing snapshot).
      # final: the run's stop; the processes that ended without their last
      # part are named on stderr.
      def merge(data, dir, clear: false, final: false, stats: nil)
        parts, ended = collect(dir, clear: clear, final: final)
        warn ended_line(ended) unless ended.empty?
        Rperf._c_merge_parts(data, parts, stats)
      end

      # The end of a run whose root is the rperf command (ruby/lib/rperf/cli.rb,
      # which folds while the command runs): every part in `dir` folded ->
      # [[[pid, result Hash], ...] oldest first, one per process, [pid] of
      # the processes gone without their last part].
      def final_parts(dir)
        collect(dir, final: true)
      end

      # The line naming processes that ended without their last part.
      def ended_line(pids)
        one = pids.size == 1
        "rperf: #{pids.size} #{one ? 'process' : 'processes'} ended without #{one ? 'its' : 'their'} last part: " \
          "#{pids.sort.map { |p| "pid #{p}" }.join(', ')} " \
          "(#{one ? 'its' : 'their'} samples up to #{one ? 'its' : 'their'} last window are included)"
      end

      # Runs the block holding LOCK (Rperf::Window: a window is made and
      # listed, or leaves the list, with no fold in between).
      def synchronize(&block)
        locked(&block)
      end

      # Rperf::Window's close: the window takes the files written while it
      # was open (a fold) and leaves the list, under the lock.
      def close_window(window, dir)
        locked do
          fold_locked(dir) if dir && File.directory?(dir)
          Window.__forget_locked(window)
        end
      end

      # [{file name => true} of the files a window opened `age` seconds ago
      # leaves out (written before it), [Piece] already folded that are
      # its]. Under the lock (Window.__adopt).
      def seen_before(dir, age)
        seen = {}
        mine = []
        if age <= 0
          list(dir).each { |name, *| seen[name] = true }
          @recent.each { |_, piece| piece.names.each { |n| seen[n] = true } }
          return [seen, mine]
        end
        opened = Time.now - age
        list(dir).each do |name, *|
          seen[name] = true if File.mtime(File.join(dir, name)) < opened
        rescue SystemCallError
          seen[name] = true # gone: folded meanwhile
        end
        @recent.each do |_, piece|
          piece.names.each { |n| seen[n] = true }
          mine << piece unless piece.mtime < opened
        end
        [seen, mine]
      end

      # The body of the thread child_windows.c makes (Rperf.__fold_children):
      # folds whenever the directory holds FOLD_AT part files, until the run
      # that made `dir` ends.
      def fold_loop(dir)
        Thread.current.name = "rperf-children"
        Thread.current.report_on_exception = false
        Rperf.label(rperf: "children") do
          while Rperf.__children_dir == dir
            # the run may end while this thread waits for the lock
            locked { fold_locked(dir) if Rperf.__children_dir == dir } if list(dir).size >= FOLD_AT
            sleep CHILD_WINDOW_SECONDS
          end
        end
      rescue StandardError => e
        warn "rperf: folding the forked children's profiles stopped: #{e.class}: #{e.message}"
      end

      private

      # [[[pid, result Hash]] oldest first, [pid] ended without their last
      # part (final only)] after a fold; clear: the aggregates are
      # consumed; final: the run's end (every part, the state dropped).
      def collect(dir, clear: false, final: false)
        parts, ended = locked do
          st, epoch = fold_locked(dir, all: final)
          procs = st.procs.flat_map { |pid, agg| agg.parts.map { |d| [pid, d] } }
          if final
            @state = nil
            @recent = []
            @epoch += 1
          elsif clear
            publish(State.new(dir, {}, st.names, st.open), epoch)
          end
          [procs, final ? st.open.keys.select { |pid| gone?(pid) } : []]
        end
        [parts.sort_by { |pid, d| [d[:start_time_ns] || 0, pid] }, ended]
      end

      # Runs the block holding LOCK, and in a signal handler too (where
      # Mutex#lock raises): it waits for another thread's fold to end. A
      # handler that interrupted this thread's own fold runs without the
      # lock; the interrupted fold is abandoned when it resumes (publish).
      def locked
        return yield if LOCK.owned?

        begin
          LOCK.lock
        rescue ThreadError # a trap handler
          until LOCK.try_lock
            Thread.pass
            sleep 0.001
          end
        end
        begin
          yield
        ensure
          LOCK.unlock
        end
      end

      # -> [state, epoch] after folding the new parts of `dir` (all: a last
      # part whose process still runs without its counters file too; the
      # stop's).
      def fold_locked(dir, all: false)
        epoch = @epoch
        st = @state&.dir == dir ? @state : State.new(dir, {}, {}, {})
        listed = list(dir)
        names = listed.to_h { |name, *| [name, true] }
        fresh = listed.reject { |name, *| st.names[name] }.group_by { |_, part, *| part }
        unless all # a last part's counters file comes after its profiles
          fresh.reject! do |part, ((_, _, pid, order))|
            order[1].infinite? && !File.exist?(File.join(dir, "#{part}.stat.json")) && !gone?(pid)
          end
        end
        return [st, epoch] if fresh.empty? && st.names.all? { |name, _| names.key?(name) }

        pieces = fresh.sort_by { |_, ((_, _, pid, order))| [pid, order] }.filter_map do |part, files|
          read(dir, part, files.map(&:first).sort_by { |n| n.end_with?(RunDir::HEAP_SUFFIX) ? 1 : 0 },
               files[0][2], files[0][3])
        end
        offer(pieces)
        procs = st.procs.dup
        open = st.open.dup
        copied = {}
        pieces.each do |piece|
          agg = copied[piece.pid] ||= procs[piece.pid] = (procs[piece.pid] || Aggregate.new).dup
          agg.add(piece.data, piece.order)
          # a program's windows are on disk before its last part (sorted
          # after them), and a program exec'd into writes after both
          program, window = piece.order
          if window.infinite?
            open.delete(piece.pid) if (open[piece.pid] || program) <= program
          elsif (open[piece.pid] || program) <= program
            open[piece.pid] = program
          end
        end
        done = st.names.select { |name, _| names.key?(name) }
        fresh.each_value { |files| files.each { |name, *| done[name] = true } }
        state = State.new(dir, procs, done, open)
        return [state, epoch] unless publish(state, epoch)

        fresh.each do |part, files|
          files.each { |name, *| remove(File.join(dir, name)) }
          remove(File.join(dir, "#{part}.stat.json"))
        end
        keep_recent(pieces)
        [state, epoch + 1]
      end

      # Publishes `state` unless a signal handler folded since `epoch` was
      # read. No interrupt check lies between the test and the assignments
      # (CRuby checks at calls, returns and branches taken; the test of two
      # Integers is no call), so a handler runs before or after them.
      def publish(state, epoch)
        if @epoch == epoch
          @state = state
          @epoch = epoch + 1
          return true
        end
        false
      end

      # [[file name, part name, pid, order]] of the part files in `dir`.
      def list(dir)
        Dir.children(dir).filter_map do |name|
          m = RunDir::PART.match(name) or next
          part = m[1]
          [name, part, m[2].to_i, [part[/\A\d+\.(\d+)/, 1].to_i, part[/\.w(\d+)\z/, 1]&.to_i || Float::INFINITY]]
        end
      rescue SystemCallError
        []
      end

      # A part read (ruby/merge.c: its profiles `names`, and its counters
      # file when there), or nil (gone meanwhile, or unreadable: said on
      # stderr; its files are deleted by the fold with the others).
      def read(dir, part, names, pid, order)
        mtime = File.mtime(File.join(dir, names[0]))
        data = Rperf._c_run_dir_parts(dir, names, nil)&.first&.last or return nil
        Piece.new(names, part, pid, order, mtime, data)
      rescue SystemCallError
        nil
      end

      def offer(pieces)
        return if pieces.empty? || !defined?(Rperf::Window)

        Rperf::Window.__open_locked.each { |w| pieces.each { |piece| w.__offer(piece) } }
      end

      # The parts just folded stay readable for the windows whose marks
      # are open but not handed to Ruby yet (the listener's).
      def keep_recent(pieces)
        now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        open = defined?(Rperf::Window) ? Rperf::Window.__open_locked.size : 0
        if Rperf._c_window_marks_open > open
          @recent.reject! { |at, _| at < now - RECENT_SECONDS }
          pieces.each { |piece| @recent << [now, piece] }
        else
          @recent = []
        end
      end

      def remove(path)
        File.delete(path)
      rescue SystemCallError
        nil
      end

      # A process that no longer runs (a zombie not reaped yet included).
      def gone?(pid)
        Process.kill(0, pid)
        File.read("/proc/#{pid}/stat")[/\) (\S)/, 1] == "Z"
      rescue Errno::ESRCH
        true
      rescue SystemCallError
        false # another user's process, or no /proc: taken as running
      end
    end
  end

  class << self
    # The thread child_windows.c makes once the children's directory needs
    # folding and nobody reads it (Children.fold_loop).
    def __fold_children
      dir = __children_dir
      Children.fold_loop(dir) if dir
    end
  end
end
