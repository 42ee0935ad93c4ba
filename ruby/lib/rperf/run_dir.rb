# frozen_string_literal: true

module Rperf
  # The private directory of a run whose processes write their profiles
  # for one of them to merge: the rperf command's run, and a run whose
  # forked children inherit it (ruby/lib/rperf/inherit.rb). Named
  # rperf-run-<pid of the process that merges>-<16 hex digits> in the temp
  # directory, mode 0700 whatever the umask; the rperf command removes
  # those whose process is gone. Pure Ruby: the command makes one before it
  # loads the extension. It loads no library (no tmpdir, no securerandom):
  # `require "rperf"` must not define constants or load features the
  # program did not ask for.
  module RunDir
    NAME = /\Arperf-run-(\d+)-\h{16}\z/
    # A process's profile in it (ruby/lib/rperf.rb, __start_child_run;
    # ruby/child_windows.c): <pid>.pb.gz at its end (<pid>.<n>.pb.gz: the
    # n-th program it exec'd into), <pid>[.<n>].w<k>.pb.gz its k-th window
    # while it runs. A run recording allocations beside time writes each
    # part's heap profile beside its time profile, under the same name with
    # HEAP_SUFFIX (time profile first; either may be missing: a window
    # without time samples, a process killed between the two, a reader
    # that took the first already). Captures: the part's name (its
    # .stat.json's too), the pid, the window, the heap suffix.
    PART = /\A((\d+)(?:\.\d+)?(\.w\d+)?)(\.heap)?\.pb\.gz\z/
    HEAP_SUFFIX = ".heap.pb.gz"

    # One part: its name, pid, whether it is a window, and the paths of its
    # time and heap profiles (nil: not there).
    Part = Struct.new(:name, :pid, :window, :time, :heap)

    # The temp directory as Dir.tmpdir finds it (TMPDIR, TMP, TEMP, then
    # /tmp): the first that is a writable directory, and not world-writable
    # unless sticky.
    def self.tmpdir
      [ENV["TMPDIR"], ENV["TMP"], ENV["TEMP"], "/tmp"].each do |dir|
        next if dir.nil? || dir.empty?

        st = File.stat(dir)
        next unless st.directory? && st.writable?
        next if st.world_writable? && !st.sticky?

        return File.expand_path(dir)
      rescue SystemCallError
        next
      end
      "."
    end

    def self.make(tmp = tmpdir)
      begin
        path = File.join(tmp, "rperf-run-#{Process.pid}-#{Random.urandom(8).unpack1('H*')}")
        Dir.mkdir(path, 0o700)
      rescue Errno::EEXIST
        retry
      end
      File.chmod(0o700, path)
      path
    end

    # -> [Part] of the profiles in `dir` (in no order). Raises
    # SystemCallError when the directory cannot be read.
    def self.parts(dir)
      found = {}
      Dir.children(dir).each do |file|
        m = PART.match(file) or next
        part = found[m[1]] ||= Part.new(m[1], m[2].to_i, !m[3].nil?)
        if m[4] then part.heap = File.join(dir, file)
        else part.time = File.join(dir, file)
        end
      end
      found.values
    end
  end
end
