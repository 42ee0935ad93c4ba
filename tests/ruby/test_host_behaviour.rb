# frozen_string_literal: true

# tests/ruby/test_host_behaviour.rb — profiling changes nothing a program
# can observe besides time. Real programs run once as they are and once per
# backend × mode under the environment auto-start (RPERF_ENABLED=1,
# RUBYOPT=-rrperf, 10 kHz, output to a file; stopped by the extension's end
# proc after the program's at_exit blocks), and their exit status, fatal
# signal, stdout and stderr must be identical: exit codes, an uncaught
# exception, abort, exit!, at_exit order, thread statuses, $? of children,
# fork, a Ractor, stdin, signal traps, and the signal dispositions after
# the profiler stopped (printed from a finalizer, which Ruby runs after
# the end procs).

require_relative "helper"
require "rperf/report"

class TestHostBehaviour < Test::Unit::TestCase
  # Printed by programs: the process's signal dispositions as the OS and
  # Ruby see them (tick signal, the real-time range, common signals).
  DISPOSITIONS = <<~'RUBY'
    # While the program runs it may be profiled: rperf's tick signal
    # (SIGRTMIN+8 = 42 here) is then caught, so its bit is left out of the
    # masks, and the real-time traps are queried only after stop (querying
    # a trap means setting it, and setting the tick signal to its default
    # action while rperf runs would let the next tick kill the process).
    def host_dispositions(running: false)
      st = File.read("/proc/self/status")
      masks = %w[SigBlk SigIgn SigCgt].map do |k|
        bits = st[/^#{k}:\s*(\h+)/, 1].to_i(16)
        bits &= ~(1 << 41) if running
        format("%s=%016x", k, bits)
      end
      traps = %w[INT TERM HUP USR1 USR2 PIPE CHLD QUIT ALRM PROF].map do |s|
        old = Signal.trap(s, "SYSTEM_DEFAULT")
        Signal.trap(s, old)
        "#{s}=#{old.is_a?(Proc) ? 'proc' : old.inspect}"
      end
      rt = !running && (34..64).map do |s|
        old = Signal.trap(s, "SYSTEM_DEFAULT")
        Signal.trap(s, old)
        old.is_a?(Proc) ? "P" : old.nil? ? "n" : old[0]
      end
      "#{masks.join(' ')} #{traps.join(' ')}#{rt ? " rt=#{rt.join}" : ''}"
    end
    def host_finalizer = proc { $stdout.puts "after stop: #{host_dispositions}"; $stdout.flush }
    HOST_KEEP = Object.new
    ObjectSpace.define_finalizer(HOST_KEEP, host_finalizer)
  RUBY

  PROGRAMS = {
    "output_and_exit_3" => <<~'RUBY',
      $stdout.sync = false
      2000.times { |i| puts "line #{i}" }
      warn "to stderr"
      $stderr.print "partial"
      exit 3
    RUBY
    "uncaught_exception" => <<~'RUBY',
      def fail_here = raise(ArgumentError, "boom in the host")
      puts "before"
      fail_here
    RUBY
    "abort" => <<~'RUBY',
      puts "before"
      abort "fatal: giving up"
    RUBY
    "exit_bang" => <<~'RUBY',
      at_exit { puts "never printed" }
      puts "before"
      $stdout.flush
      exit!(5)
    RUBY
    "at_exit_order" => <<~'RUBY',
      at_exit { puts "registered first, runs last"; exit 7 }
      at_exit do
        puts "second"
        at_exit { puts "nested, runs right after second" }
      end
      END { puts "END block" }
      at_exit { puts "third"; raise "error in at_exit" }
      at_exit { puts "last registered, runs first" }
      puts "main done"
    RUBY
    "thread_statuses" => <<~'RUBY',
      Thread.report_on_exception = false
      q = Queue.new
      sleeper = Thread.new { q.pop }
      done = Thread.new { :ok }
      failed = Thread.new { raise "thread error" }
      killed = Thread.new { sleep }
      Thread.pass until sleeper.status == "sleep" && killed.status == "sleep"
      killed.kill
      killed.join
      done.join
      failed.join rescue puts "join: #{$!.message}"
      puts [sleeper, done, failed, killed, Thread.main].map(&:status).inspect
      puts [done.value, Thread.list.size, Thread.main.alive?].inspect
      q << :go
      puts sleeper.value.inspect
      puts Thread.list.size
    RUBY
    "child_status" => <<~'RUBY',
      system("sh", "-c", "exit 4")
      puts [$?.exitstatus, $?.success?, $?.signaled?].inspect
      puts `echo from a child`
      puts [$?.exitstatus, $?.success?].inspect
      pid = spawn("sh", "-c", "kill -TERM $$")
      _, st = Process.wait2(pid)
      puts [st.exitstatus, st.termsig, st.signaled?].inspect
      puts system("sh", "-c", "exit 0").inspect
    RUBY
    "fork" => <<~'RUBY',
      puts "parent before fork"
      pid = fork do
        at_exit { puts "child at_exit" }
        puts "child runs"
        exit 2
      end
      Process.wait(pid)
      puts "child status #{$?.exitstatus}"
      pid = fork { raise "child error" }
      Process.wait(pid)
      puts "failed child status #{$?.exitstatus}"
      pid = fork { exit!(9) }
      Process.wait(pid)
      puts "exit! child status #{$?.exitstatus}"
    RUBY
    "ractor" => <<~'RUBY',
      def ractor_value(r) = r.respond_to?(:value) ? r.value : r.take
      r = Ractor.new { Ractor.receive * 6 }
      r.send(7)
      puts ractor_value(r)
      rs = 3.times.map { |i| Ractor.new(i) { |x| (1..10_000).sum * x } }
      puts rs.map { |x| ractor_value(x) }.inspect
    RUBY
    "stdin" => <<~'RUBY',
      first = $stdin.gets
      rest = $stdin.read
      puts [first, rest.bytesize, rest.lines.size, rest.sum].inspect
      puts $stdin.eof?
    RUBY
    "signal_traps" => <<~'RUBY',
      puts "at start: #{host_dispositions(running: true)}"
      got = Queue.new
      Signal.trap("USR1") { got << :usr1 }
      Signal.trap("TERM") { got << :term }
      Process.kill("USR1", Process.pid)
      Process.kill("TERM", Process.pid)
      puts [got.pop, got.pop].sort.inspect
      puts Signal.trap("USR1", "DEFAULT").class
      puts Signal.trap("TERM", "IGNORE").class
      puts "running: #{host_dispositions(running: true)}"
    RUBY
    "killed_by_sigterm" => <<~'RUBY',
      at_exit { puts "at_exit runs" }
      puts "before"
      $stdout.flush
      Process.kill("TERM", Process.pid)
      sleep 10
    RUBY
    "interrupt" => <<~'RUBY',
      at_exit { puts "at_exit runs" }
      raise Interrupt
    RUBY
    "blocking_calls" => <<~'RUBY',
      t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      sleep 0.05
      puts Process.clock_gettime(Process::CLOCK_MONOTONIC) - t >= 0.05
      r, w = IO.pipe
      Thread.new { sleep 0.02; w.write("x" * 10); w.close }
      puts r.read.inspect
      puts Queue.new.pop(timeout: 0.03).inspect
      puts IO.select([r], nil, nil, 0.01).nil?.inspect
    RUBY
  }.freeze

  STDIN_DATA = "first line\n" + ("payload " * 20 + "\n") * 2000

  def setup
    @dir = Dir.mktmpdir("rperf-host")
  end

  def teardown
    FileUtils.remove_entry(@dir)
  end

  # -> [exitstatus, termsig, stdout, stderr]
  def run_program(name, env)
    path = File.join(@dir, "#{name}.rb")
    File.write(path, DISPOSITIONS + PROGRAMS.fetch(name)) unless File.exist?(path)
    clean = { "RUBYOPT" => nil, "RUBYLIB" => nil }
    ENV.each_key { |k| clean[k] = nil if k.start_with?("RPERF_") }
    out, err, st = Open3.capture3(clean.merge(env), RbConfig.ruby, "#{name}.rb",
                                  stdin_data: name == "stdin" ? STDIN_DATA : "", chdir: @dir)
    [st.exitstatus, st.termsig, out, err]
  end

  def profiled_env(backend, mode, output)
    { "RPERF_ENABLED" => "1", "RUBYOPT" => "-rrperf", "RUBYLIB" => RPERF_BUILD_LIB,
      "RPERF_FREQUENCY" => "10000", "RPERF_BACKEND" => backend.to_s, "RPERF_MODE" => mode.to_s,
      "RPERF_OUTPUT" => output, "RPERF_FORMAT" => "collapsed" }
  end

  def assert_same_behaviour(name)
    plain = run_program(name, {})
    RPERF_BACKENDS.each do |backend|
      RPERF_MODES.each do |mode|
        output = File.join(@dir, "#{name}-#{backend}-#{mode}.collapsed")
        profiled = run_program(name, profiled_env(backend, mode, output))
        %w[exit\ status termsig stdout stderr].each_with_index do |what, i|
          assert_equal(plain[i], profiled[i], "#{name}: #{what} under #{backend}/#{mode}\n" \
                                              "plain: #{plain.inspect}\nprofiled: #{profiled.inspect}")
        end
        # the profiler did run (and wrote at exit) unless the program ended by exit!
        assert_equal(name != "exit_bang", File.exist?(output), "#{name}: output under #{backend}/#{mode}")
      end
    end
    plain
  end

  PROGRAMS.each_key do |name|
    define_method(:"test_#{name}") { assert_same_behaviour(name) }
  end

  # The baselines themselves: what the comparisons above rely on.
  def test_baselines_are_what_the_programs_mean
    assert_equal([3, nil], run_program("output_and_exit_3", {})[0, 2])
    st, _, out, err = run_program("uncaught_exception", {})
    assert_equal([1, "before\n"], [st, out.lines.first])
    assert_match(/boom in the host \(ArgumentError\)/, err)
    assert_equal([nil, Signal.list["TERM"]], run_program("killed_by_sigterm", {})[0, 2])
    assert_equal([nil, Signal.list["INT"]], run_program("interrupt", {})[0, 2])
    st, _, out, = run_program("at_exit_order", {})
    assert_equal(7, st)
    assert_equal(["last registered, runs first", "third", "END block", "second",
                  "nested, runs right after second", "registered first, runs last"],
                 out.lines.map(&:chomp).grep_v(/\A(main done|after stop)/))
    assert_match(/^after stop: SigBlk=\h+ SigIgn=\h+ SigCgt=\h+ INT=/, out)
    assert_equal([5, "before\n"], run_program("exit_bang", {}).values_at(0, 2), "no at_exit, no finalizer")
  end

  # Under GC.stress a GC runs at every allocation, so at every step of
  # loading the extension too: the profiler's mark function must work from
  # the moment its object exists (a GC key it reads but made after it would
  # be 0 there, and the read would raise inside GC: "[BUG] object
  # allocation during garbage collection phase").
  def test_require_under_gc_stress
    script = 'GC.stress = true; require "rperf"; GC.stress = false; print Rperf::VERSION'
    run = run_command([RbConfig.ruby, "-I", RPERF_BUILD_LIB, "-e", script], timeout: 300)
    assert(run.status.success?, "#{run.status.inspect}\n#{run.stderr}")
    assert_equal(Rperf::VERSION, run.stdout)
  end

  # `require "rperf"`, and a start under it, define no top-level constant
  # and load no library the program did not ask for, besides the Zlib and
  # StringIO that rperf 0.6 loaded too: a program may define its own
  # constant of such a name, or look at what is loaded.
  def test_require_and_start_add_only_rperf_zlib_and_stringio
    script = <<~'RUBY'
      consts = Object.constants
      feats = $LOADED_FEATURES.dup
      require "rperf"
      Rperf.start(frequency: 100)
      Rperf.stop
      new_feats = ($LOADED_FEATURES - feats).map { |f| File.basename(f).sub(/\.(rb|so)\z/, "") }
      puts (Object.constants - consts).sort.inspect
      puts (new_feats - %w[rperf zlib stringio run_dir inherit exporters]).inspect
    RUBY
    run = run_command([RbConfig.ruby, "-I", RPERF_BUILD_LIB, "-e", script])
    assert(run.status.success?, "#{run.status.inspect}\n#{run.stderr}")
    consts, feats = run.stdout.lines
    assert_equal("[:Rperf, :StringIO, :Zlib]", consts.chomp)
    assert_equal("[]", feats.chomp, "libraries loaded by rperf besides its own")
  end

  # Every entry point under GC.stress, from loading to exit: start, label,
  # snapshot and stop with every backend in both modes, then a run left
  # going at exit writes its output.
  def test_the_whole_lifecycle_under_gc_stress
    Dir.mktmpdir("rperf-gcstress") do |dir|
      out = File.join(dir, "exit.collapsed")
      script = <<~RUBY
        GC.stress = true
        require "rperf"
        %i[#{RPERF_BACKENDS.join(' ')}].each do |b|
          %i[cpu wall].each do |m|
            Rperf.start(backend: b, mode: m, frequency: 1000)
            Rperf.label(req: "a") { x = 0; 2000.times { x += 1 } }
            s = Rperf.snapshot
            d = Rperf.stop
            print "\#{b}/\#{m}:\#{s.class}/\#{d.class} "
          end
        end
        Rperf.start(frequency: 10_000, mode: :wall, output: #{out.dump}, format: :collapsed)
        def rperf_stressed_work = (x = 0; 200_000.times { x += 1 })
        rperf_stressed_work
      RUBY
      run = run_command([RbConfig.ruby, "-I", RPERF_BUILD_LIB, "-e", script], timeout: 300)
      assert(run.status.success?, "#{run.status.inspect}\n#{run.stderr}")
      want = RPERF_BACKENDS.flat_map { |b| %w[cpu wall].map { |m| "#{b}/#{m}:Hash/Hash " } }.join
      assert_equal(want, run.stdout)
      assert_include(File.read(out), "Object#rperf_stressed_work")
    end
  end

  # A program that redefines core methods (as Ruby's own optimisation
  # tests do) still gets its profile at exit and at exec: the way from the
  # stop to the file calls none of them.
  REDEFINE = <<~'RUBY'
    class Symbol; def to_s = 1; end
    class String; def to_s = :x; end
    class Hash; def [](_key) = nil; end
    class Integer; def to_s(*) = nil; end
    class Array; def pack(*) = nil; end
  RUBY

  def test_redefined_core_methods_do_not_lose_the_profile
    Dir.mktmpdir("rperf-redefine") do |dir|
      { "exit" => "nil", "exec" => 'exec("/bin/sh", "-c", "exit 0")' }.each do |how, ending|
        %w[pb.gz collapsed].each do |suffix|
          out = File.join(dir, "#{how}.#{suffix}")
          script = "def rperf_redefining_work = (x = 0; 300_000.times { x += 1 })\n" \
                   "rperf_redefining_work\n#{REDEFINE}#{ending}\n"
          run = run_command([RbConfig.ruby, "-I", RPERF_BUILD_LIB, "-rrperf", "-e", script],
                            env: { "RPERF_ENABLED" => "1", "RPERF_OUTPUT" => out, "RPERF_MODE" => "wall" })
          assert(run.status.success?, "#{how}/#{suffix}: #{run.status.inspect}\n#{run.stderr}")
          assert_equal("", run.stderr, "#{how}/#{suffix}")
          if suffix == "pb.gz" # a valid pprof file
            profile = Rperf::Report.load(out)
            names = profile.data[:aggregated_samples].flat_map { |frames, *| frames.map { |f| f[1] } }
            assert_include(names, "Object#rperf_redefining_work", "#{how}/#{suffix}")
          else
            assert_match(/;Object#rperf_redefining_work(;\S+)* \d+$/, File.read(out), "#{how}/#{suffix}")
          end
        end
      end
    end
  end

  # Core methods redefined as Ruby's own optimisation tests do (their
  # assert_redefine_method makes a method return its first argument), and
  # redefined to raise: every path that runs at exit, exec and fork under
  # the environment auto-start, the rperf command and inherit must call
  # none of them (docs/reliability.md).
  REDEFINITIONS = {
    "raising" => <<~'RUBY',
      class Hash; def [](*) = raise(TypeError, "no implicit conversion of Symbol into Hash"); def fetch(*) = raise(KeyError, "redefined Hash#fetch"); end
      class Array; def each(*) = raise(TypeError, "redefined Array#each"); def map(*) = raise(TypeError, "redefined Array#map"); end
      class Integer; def +(*) = raise(TypeError, "redefined Integer#+"); def to_s(*) = raise(TypeError, "redefined Integer#to_s"); end
      class String; def +(*) = raise(TypeError, "redefined String#+"); def %(*) = raise(TypeError, "redefined String#%"); end
      module Kernel; def format(*) = raise(TypeError, "redefined Kernel#format"); end
      def Kernel.format(*) = raise(TypeError, "redefined Kernel.format")
      def File.write(*) = raise(TypeError, "redefined File.write")
    RUBY
    "garbage" => <<~'RUBY',
      class Hash; def [](key) = key; def fetch(key, *) = key; end
      class Array; def each(*) = nil; def map(*) = [:garbage]; end
      class Integer; def +(other) = other; def to_s(*) = "garbage"; end
      class String; def +(other) = other; def %(*) = "garbage"; end
      module Kernel; def format(*) = "garbage"; end
      def Kernel.format(*) = "garbage"
      def File.write(*) = 0
    RUBY
  }.freeze

  # Work that needs none of the methods redefined (Float arithmetic), so
  # that it runs before and after the redefinitions alike.
  REDEFINED_PRELUDE = <<~'RUBY'
    def rperf_burn(s) = (t = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID); nil while Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - t < s)
    def rperf_redefining_parent = rperf_burn(0.05)
    def rperf_redefining_child = rperf_burn(0.05)
    rperf_redefining_parent
  RUBY

  # The program `body` after the prelude and the redefinitions of `kind`,
  # run with `env` in @dir -> [stdout, stderr, Process::Status].
  def run_redefining(kind, body, env, argv: nil)
    File.write(File.join(@dir, "prog.rb"), REDEFINED_PRELUDE + REDEFINITIONS.fetch(kind) + body)
    tmp = File.join(@dir, "tmp")
    FileUtils.mkdir_p(tmp)
    clean = { "RUBYOPT" => nil, "RUBYLIB" => nil, "TMPDIR" => tmp }
    # (the build the rperf command uses stays)
    ENV.each_key { |k| clean[k] = nil if k.start_with?("RPERF_") && !%w[RPERF_BUILD_DIR RPERF_RUBY].include?(k) }
    Open3.capture3(clean.merge(env), *(argv || [RbConfig.ruby, "prog.rb"]), chdir: @dir)
  end

  # pid label (nil: the root's samples) => function names in the profile
  def functions_by_pid(path)
    data = Rperf::Report.load(path).data
    out = Hash.new { |h, k| h[k] = [] }
    data[:aggregated_samples].each do |frames, _w, _seq, set|
      out[(data[:label_sets][set] || {})[:pid]].concat(frames.map { |f| f[1] })
    end
    out
  end

  ENV_START = { "RPERF_ENABLED" => "1", "RUBYOPT" => "-rrperf", "RUBYLIB" => RPERF_BUILD_LIB,
                "RPERF_FREQUENCY" => "10000", "RPERF_MODE" => "wall" }.freeze

  # The environment auto-start: the profile is written at exit and at exec
  # and reads back, and nothing is said on stderr.
  def test_redefined_core_methods_at_exit_and_exec_under_the_environment_auto_start
    REDEFINITIONS.each_key do |kind|
      { "exit" => "", "exec" => "exec('/bin/sh', '-c', 'exit 0')\n" }.each do |how, ending|
        out = File.join(@dir, "#{kind}-#{how}.pb.gz")
        _, err, st = run_redefining(kind, ending, ENV_START.merge("RPERF_OUTPUT" => out))
        assert(st.success?, "#{kind}/#{how}: #{st.inspect}\n#{err}")
        assert_equal("", err, "#{kind}/#{how}")
        assert_include(functions_by_pid(out)[nil], "Object#rperf_redefining_parent", "#{kind}/#{how}")
      end
    end
  end

  # A child forked after the redefinitions joins the root's profile
  # (inherit: :fork, the env auto-start's default): the fork hook, the
  # child's restart and exit, and the root's merge at exit.
  def test_redefined_core_methods_with_a_forked_child_merged_at_exit
    body = "pid = fork { rperf_redefining_child }\nProcess.wait(pid)\n$stdout.write([pid].pack('N'))\n"
    REDEFINITIONS.each_key do |kind|
      out = File.join(@dir, "#{kind}.pb.gz")
      pid, err, st = run_redefining(kind, body, ENV_START.merge("RPERF_OUTPUT" => out))
      assert(st.success?, "#{kind}: #{st.inspect}\n#{err}")
      assert_equal("", err, kind)
      by_pid = functions_by_pid(out)
      pid = pid.unpack1("N")
      assert_equal([nil, pid], by_pid.keys, "#{kind}: the root and its child")
      assert_include(by_pid[pid], "Object#rperf_redefining_child", kind)
      assert_include(by_pid[nil], "Object#rperf_redefining_parent", kind)
      assert_empty(Dir.children(File.join(@dir, "tmp")), "#{kind}: the run's directory is removed")
    end
  end

  # `rperf stat`: each process's part and counters are written at its
  # exit whatever it redefined, and the command's block adds them up.
  def test_redefined_core_methods_under_rperf_stat
    exe = File.expand_path("../../exe/rperf", __dir__)
    body = "pid = fork { rperf_redefining_child }\nProcess.wait(pid)\n"
    REDEFINITIONS.each_key do |kind|
      _, err, st = run_redefining(kind, body, {}, argv: [RbConfig.ruby, exe, "stat", "--report", "ruby", "prog.rb"])
      assert(st.success?, "#{kind}: #{st.inspect}\n#{err}")
      assert_not_match(/^rperf:/, err, kind)
      assert_equal(1, err.scan("Performance stats for 'ruby prog.rb'").size, "#{kind}:\n#{err}")
      assert_match(/^ +2     \[Rperf\] Ruby processes profiled$/, err, kind)
      assert_match(/^ +2     \[Ruby\] detected threads$/, err, kind)
      assert_match(/^ +\d+     \[OS\] context switches \(\d+ voluntary, \d+ involuntary\)$/, err, kind)
      %w[rperf_redefining_parent rperf_redefining_child].each do |fn|
        assert_match(/^ Cumulative:.*Object##{fn} /m, err, kind)
      end
      assert_operator(err[%r{^  (\d+) samples / \d+ triggers}, 1].to_i, :>=, 2, kind)
      assert_empty(Dir.children(File.join(@dir, "tmp")), "#{kind}: the run's directory is removed")
    end
  end

  # Libraries the host loads after rperf still load: the extension's
  # thread-local block (all of it in glibc's static TLS area, shared with
  # every later dlopen, because some of it is initial-exec) stays small.
  # A 3 KiB memo there once made rperf itself fail to load ("cannot
  # allocate memory in static TLS block"); docs/architecture.md.
  def test_static_tls_block_stays_small
    require "rperf"
    so = $LOADED_FEATURES.find { |f| File.basename(f) == "rperf.so" }
    assert_not_nil(so)
    assert_operator(elf_tls_size(so), :<=, 256, "bytes of static TLS taken by #{so}")
  end

  # PT_TLS's p_memsz of a 64-bit little-endian ELF file (0: none).
  def elf_tls_size(path)
    File.open(path, "rb") do |f|
      h = f.read(64)
      assert_equal(["\x7FELF".b, 2, 1], [h[0, 4], h.getbyte(4), h.getbyte(5)], "64-bit little-endian ELF")
      phoff = h[32, 8].unpack1("Q<")
      phentsize, phnum = h[54, 4].unpack("S<S<")
      phnum.times do |i|
        f.seek(phoff + (i * phentsize))
        ph = f.read(phentsize)
        return ph[40, 8].unpack1("Q<") if ph[0, 4].unpack1("L<") == 7 # PT_TLS
      end
      0
    end
  end
end
