# frozen_string_literal: true
# What is at the output path is never replaced (RPERF_OUTPUT=/dev/null must not
# turn /dev/null into a regular file): a device node, a symlink, a chain of
# symlinks, a FIFO, /dev/stdout (a symlink to /proc/self/fd/1 made like the
# system's, and /dev/fd/1), an existing regular file (owner and mode kept) — each checked afterwards with File.lstat and the data where it should
# be, for every built-in exporter and a Ruby one, through output: and through
# the RPERF_OUTPUT auto-start. Also the checks at start (a directory, a
# missing directory, a directory where no file can be created → ArgumentError,
# nothing started; a start refused later keeps no descriptor), descriptor exhaustion before stop (the profile is still
# written) and the order at stop (the output before a failing stat report).
# Never writes the real /dev/null or /dev/stdout (a broken writer would
# replace them for the whole machine): device nodes are made with mknod, and
# the stdout link, in a temporary directory.
require "zlib"
require "fileutils"
require_relative "helper"

class TestOutputTargets < Test::Unit::TestCase
  include RperfTestHelper

  C_EXPORTERS = %i[pprof collapsed json text].freeze

  # A Ruby exporter: its bytes go through Rperf._c_write_file.
  class RubyCollapsed
    def encode(data) = Rperf::Collapsed.encode(data)
  end

  def setup
    Rperf.register_exporter(:rb_collapsed, RubyCollapsed.new)
  end

  def teardown
    Rperf.unregister_exporter(:rb_collapsed)
  end

  def exporters = C_EXPORTERS + [:rb_collapsed]

  def profile_to(path, exporter, **opts)
    Rperf.start(frequency: 1000, output: path, exporter: exporter, **opts) { rperf_work_a(0.02) }
  end

  # The bytes are a real profile of `exporter` naming the workload.
  def assert_profile(bytes, exporter, msg = nil)
    bytes = bytes.b
    assert_not_empty(bytes, "no profile data #{msg}")
    if exporter == :pprof
      assert_equal("\x1f\x8b".b, bytes[0, 2], "pprof is gzip #{msg}")
      bytes = Zlib.gunzip(bytes)
      assert_equal(0x0a, bytes.getbyte(0), "decompressed pprof starts with field 1 #{msg}")
    end
    ::JSON.parse(bytes) if exporter == :json
    assert_include(bytes, "rperf_work_a", "the profile names the workload #{msg}")
  end

  def with_dir
    Dir.mktmpdir("rperf-targets") { |d| yield d }
  end

  def root? = Process.euid.zero?

  # Runs the block while a thread reads `fifo` to its end; returns the bytes.
  # (A watchdog, not a timing assertion: a writer that never opens the FIFO
  # must fail the test, not hang it.)
  def read_fifo_while(fifo)
    reader = Thread.new { File.binread(fifo) } # blocks until the writer opens
    yield
    return reader.value if reader.join(60)

    reader.kill
    flunk("nobody wrote to the FIFO #{fifo} (it is now a #{File.lstat(fifo).ftype})")
  end

  # ---- what is at the path stays ---------------------------------------------

  def test_device_node_stays_a_device
    omit("mknod needs root (running as uid #{Process.euid})") unless root?
    with_dir do |dir|
      dev = File.join(dir, "mynull")
      unless system("mknod", "-m", "666", dev, "c", "1", "3", err: File::NULL)
        omit("mknod c 1 3 is not permitted here")
      end
      before = File.lstat(dev)
      exporters.each do |ex|
        assert_kind_of(Hash, profile_to(dev, ex), ex)
        st = File.lstat(dev)
        assert_equal("characterSpecial", st.ftype, "#{ex}: still a character device")
        assert_equal([1, 3], [st.rdev_major, st.rdev_minor], ex)
        assert_equal(before.mode, st.mode, ex)
        assert_equal(before.ino, st.ino, ex)
      end
      assert_equal(["mynull"], Dir.children(dir), "no temporary file left")
    end
  end

  def test_symlink_to_file_is_written_through
    with_dir do |dir|
      real = File.join(dir, "real.txt")
      link = File.join(dir, "link.txt")
      exporters.each do |ex|
        File.write(real, "")
        File.symlink("real.txt", link)
        profile_to(link, ex)
        assert_equal("link", File.lstat(link).ftype, "#{ex}: the link stays a link")
        assert_equal("real.txt", File.readlink(link), ex)
        assert_equal("file", File.lstat(real).ftype, ex)
        assert_profile(File.binread(real), ex, ex)
        File.unlink(link)
      end
    end
  end

  def test_symlink_to_symlink_is_written_through
    with_dir do |dir|
      real = File.join(dir, "real.out")
      l1 = File.join(dir, "l1")
      l2 = File.join(dir, "l2")
      File.write(real, "old")
      File.symlink(real, l1)
      File.symlink("l1", l2)
      exporters.each do |ex|
        profile_to(l2, ex)
        assert_equal(%w[link link], [File.lstat(l2).ftype, File.lstat(l1).ftype], ex)
        assert_equal("file", File.lstat(real).ftype, ex)
        assert_profile(File.binread(real), ex, ex)
      end
      assert_equal(%w[l1 l2 real.out], Dir.children(dir).sort, "no temporary file left")
    end
  end

  def test_fifo_with_a_reader_thread
    with_dir do |dir|
      fifo = File.join(dir, "fifo")
      File.mkfifo(fifo)
      exporters.each do |ex|
        bytes = read_fifo_while(fifo) { profile_to(fifo, ex) }
        assert_profile(bytes, ex, ex)
        assert_equal("fifo", File.lstat(fifo).ftype, "#{ex}: still a FIFO")
      end
      assert_equal(["fifo"], Dir.children(dir))
    end
  end

  def test_existing_regular_file_keeps_mode_and_owner
    with_dir do |dir|
      path = File.join(dir, "out.prof")
      exporters.each do |ex|
        File.write(path, "old")
        File.chmod(0o640, path)
        File.chown(4242, 4243, path) if root? # root must give it back to 4242
        before = File.lstat(path)
        profile_to(path, ex)
        st = File.lstat(path)
        assert_equal("file", st.ftype, ex)
        assert_equal(0o640, st.mode & 0o7777, "#{ex}: mode kept")
        assert_equal([before.uid, before.gid], [st.uid, st.gid], "#{ex}: owner kept")
        assert_profile(File.binread(path), ex, ex)
      end
      assert_equal(["out.prof"], Dir.children(dir), "no temporary file left")
    end
  end

  # /dev/stdout of a child whose stdout is a pipe: the profile arrives on the
  # pipe after what the child printed before (Ruby's buffer is flushed
  # first). The path is a symlink in a temporary directory made as the
  # system's /dev/stdout is (-> /proc/self/fd/1), so that a broken writer
  # could only replace that one, never the machine's; and /dev/fd/1, which
  # nothing can replace (procfs).
  def stdout_paths(dir)
    link = File.join(dir, "stdout")
    File.symlink("/proc/self/fd/1", link) unless File.symlink?(link)
    [link, "/dev/fd/1"]
  end

  def test_dev_stdout_through_a_pipe_api
    with_dir do |dir|
      stdout_paths(dir).each do |out|
        exporters.each do |ex|
          script = <<~RUBY
            Rperf.register_exporter(:rb_collapsed, Class.new { def encode(d) = Rperf::Collapsed.encode(d) }.new)
            $stdout.sync = false
            Rperf.start(frequency: 1000, output: #{out.inspect}, exporter: :#{ex}) do
              rperf_work_a(0.02)
              $stdout.print "before\n"
            end
            $stderr.puts "stdout is \#{File.stat(#{out.inspect}).ftype}"
          RUBY
          run = run_child(script)
          assert_child_ok(run, "#{ex} #{out}")
          assert_match(/stdout is fifo/, run.stderr, "#{ex}: the child's stdout is the pipe")
          bytes = run.stdout.b
          assert_equal("before\n", bytes[0, 7], "#{ex} #{out}: the child's own output comes first")
          assert_profile(bytes[7..], ex, "#{ex} #{out}")
        end
        assert_equal("link", File.lstat(out).ftype) if out.start_with?(dir)
      end
    end
  end

  def test_dev_stdout_through_a_pipe_env
    with_dir do |dir|
      stdout_paths(dir).each do |out|
        C_EXPORTERS.each do |ex|
          run = run_child("rperf_work_a(0.02)",
                          env: { "RPERF_ENABLED" => "1", "RPERF_OUTPUT" => out, "RPERF_FORMAT" => ex.to_s })
          assert_child_ok(run, ex)
          assert_profile(run.stdout, ex, "#{ex} #{out} (env)")
        end
        assert_equal("link", File.lstat(out).ftype) if out.start_with?(dir)
      end
    end
  end

  def test_env_auto_start_targets
    with_dir do |dir|
      real = File.join(dir, "real")
      link = File.join(dir, "link")
      fifo = File.join(dir, "fifo")
      File.symlink("real", link)
      File.mkfifo(fifo)
      C_EXPORTERS.each do |ex|
        File.write(real, "")
        File.chmod(0o640, real)
        env = { "RPERF_ENABLED" => "1", "RPERF_FORMAT" => ex.to_s }
        assert_child_ok(run_child("rperf_work_a(0.02)", env: env.merge("RPERF_OUTPUT" => link)), ex)
        assert_equal("link", File.lstat(link).ftype, ex)
        assert_equal(0o640, File.lstat(real).mode & 0o7777, ex)
        assert_profile(File.binread(real), ex, "#{ex} (env, symlink)")

        bytes = read_fifo_while(fifo) do
          assert_child_ok(run_child("rperf_work_a(0.02)", env: env.merge("RPERF_OUTPUT" => fifo)), ex)
        end
        assert_profile(bytes, ex, "#{ex} (env, FIFO)")
        assert_equal("fifo", File.lstat(fifo).ftype, ex)
      end
    end
  end

  # ---- checked at start --------------------------------------------------------

  def assert_rejected_at_start(path, reason)
    exporters.each do |ex|
      e = assert_raise(ArgumentError, ex.to_s) { Rperf.start(frequency: 1000, output: path, exporter: ex) }
      assert_match(/\Aoutput: /, e.message, ex)
      assert_match(reason, e.message, ex)
      assert_false(Rperf.running?, "#{ex}: nothing started")
    end
  end

  def test_directory_rejected_at_start
    with_dir do |dir|
      assert_rejected_at_start(dir, /is a directory/)
      File.symlink(dir, File.join(dir, "to-dir"))
      assert_rejected_at_start(File.join(dir, "to-dir"), /is a directory/)
      assert_equal("directory", File.lstat(dir).ftype)
    end
  end

  def test_missing_directory_rejected_at_start
    with_dir do |dir|
      missing = File.join(dir, "no-such-dir", "out.pb.gz")
      assert_rejected_at_start(missing, /directory .*no-such-dir does not exist/)
      assert_false(File.exist?(File.dirname(missing)))
    end
  end

  def test_env_auto_start_rejects_a_directory
    with_dir do |dir|
      run = run_child("child_report(ran: true)", env: { "RPERF_ENABLED" => "1", "RPERF_OUTPUT" => dir })
      assert_false(run.success?, run.describe)
      assert_match(/output: .*is a directory \(accepted:/, run.stderr)
      assert_nil(run.report, "the program did not run with a bad RPERF_OUTPUT")
      assert_empty(Dir.children(dir))
    end
  end

  # A directory where no file can be created. Root may write a 0555 directory,
  # so as root the attempt runs in a forked child that became `nobody`.
  def test_unwritable_directory_rejected_at_start
    with_dir do |dir|
      ro = File.join(dir, "ro")
      Dir.mkdir(ro, 0o555)
      File.chmod(0o755, dir)
      path = File.join(ro, "out.txt")
      unless root?
        assert_rejected_at_start(path, /cannot create files in .*ro: Permission denied/)
        return
      end
      rd, wr = IO.pipe
      pid = fork do
        rd.close
        Process::Sys.setgid(65_534)
        Process::Sys.setuid(65_534)
        begin
          Rperf.start(frequency: 1000, output: path)
          wr.write("started")
        rescue ArgumentError => e
          wr.write("#{e.message}|running=#{Rperf.running?}")
        end
        wr.close
        exit!(0)
      end
      wr.close
      msg = rd.read
      Process.wait(pid)
      assert_match(/\Aoutput: .*cannot create files in .*ro: Permission denied/, msg)
      assert_match(/\|running=false\z/, msg)
      assert_empty(Dir.children(ro))
    end
  end

  # A start refused after the output check (here: the tick signal is in use,
  # found in C) keeps nothing: no descriptor reserved for the output, no run
  # half set up; the next start with an output works and writes it.
  def test_refused_start_keeps_no_output_descriptor
    with_dir do |dir|
      path = File.join(dir, "p.txt")
      fds = -> { Dir.children("/proc/self/fd").size }
      sig = Rperf::DEFAULT_SIGNAL
      before = fds.call
      Signal.trap(sig) {}
      begin
        3.times do
          err = assert_raise(ArgumentError) { Rperf.start(output: path, format: :collapsed) }
          assert_match(/is in use/, err.message)
        end
      ensure
        Signal.trap(sig, "DEFAULT")
      end
      assert_false(Rperf.running?)
      assert_equal(before, fds.call, "no descriptor left open by the refused starts")
      assert_false(File.exist?(path), "nothing written for a start that never ran")
      profile_to(path, :collapsed)
      assert_profile(File.binread(path), :collapsed, "the next start writes its output")
      assert_equal(before, fds.call, "the spare descriptor is closed after the write")
    end
  end

  # ---- out of descriptors, order at stop ------------------------------------

  EXHAUST = <<~RUBY
    Process.setrlimit(:NOFILE, 128)
    $hold = []
    begin
      loop { $hold << File.open(File::NULL) }
    rescue Errno::EMFILE, Errno::ENFILE
      nil
    end
    begin
      File.open(File::NULL)
      child_report(exhausted: false)
    rescue Errno::EMFILE, Errno::ENFILE
      child_report(exhausted: true)
    end
  RUBY

  def test_descriptors_exhausted_before_stop
    with_dir do |dir|
      C_EXPORTERS.each do |ex|
        path = File.join(dir, "out.#{ex}")
        script = <<~RUBY
          Rperf.start(frequency: 1000, output: #{path.inspect}, exporter: :#{ex})
          rperf_work_a(0.02)
          #{EXHAUST}
          Rperf.stop
        RUBY
        run = run_child(script)
        assert_child_ok(run, ex)
        assert_equal(true, run.report["exhausted"], "#{ex}: no descriptor left before stop")
        assert_profile(File.binread(path), ex, "#{ex}: written with no descriptor left")
      end
    end
  end

  def test_descriptors_exhausted_before_exit_env
    with_dir do |dir|
      path = File.join(dir, "out.collapsed")
      run = run_child("rperf_work_a(0.02)\n#{EXHAUST}", env: { "RPERF_ENABLED" => "1", "RPERF_OUTPUT" => path })
      assert_child_ok(run)
      assert_equal(true, run.report["exhausted"])
      assert_profile(File.binread(path), :collapsed, "written by at_exit with no descriptor left")
    end
  end

  # A report that fails (here: $stderr raises) comes after the output, and
  # does not take the profile from the caller: stop returns the result and
  # says on the process's stderr (fd 2, written from C) that the report
  # failed.
  def test_output_written_before_a_failing_report
    with_dir do |dir|
      path = File.join(dir, "out.txt")
      script = <<~RUBY
        Rperf.start(frequency: 1000, output: #{path.inspect}, verbose: true, stat: true)
        rperf_work_a(0.02)
        $stderr = Class.new { def write(*) = raise(IOError, "report broken") }.new
        begin
          data = Rperf.stop
          child_report(stop: data[:sampling_count].positive? ? "result" : "empty")
        rescue IOError => e
          child_report(stop: e.message)
        end
      RUBY
      run = run_child(script)
      assert_child_ok(run)
      assert_equal("result", run.report["stop"], "stop returns the profile\n#{run.describe}")
      assert_match(/^rperf: the report at the stop failed: report broken \(IOError\)$/, run.stderr, run.describe)
      assert_profile(File.binread(path), :text, "written before the failing report")
    end
  end
end
