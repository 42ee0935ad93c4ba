# frozen_string_literal: true

# tests/interop/helper.rb — shared by tests/ruby/test_interop_*.rb: where the
# independent readers live (installed by script/setup-interop), profile
# fixtures shaped like real stop results, and a way to skip loudly.
#
# A missing reader makes the test file print "SKIP: …" and exit 77, which
# CTest reports as skipped when the test has SKIP_RETURN_CODE 77 (and as a
# failure otherwise) — never as a silent pass.

require "rbconfig"
require "tmpdir"
require "open3"

module InteropHelper
  CACHE = ENV.fetch("RPERF_CACHE", File.join(Dir.home, ".cache", "rperf"))
  NPM = File.join(CACHE, "npm")
  NODE_MODULES = File.join(NPM, "node_modules")
  PPROF_STRICT = File.join(CACHE, "interop", "bin", "pprof-strict")
  SPEEDSCOPE_SCHEMA = File.join(NODE_MODULES, "speedscope", "dist", "release", "file-format-schema.json")
  SPEEDSCOPE_CHECK = File.expand_path("speedscope-check.js", __dir__)
  CHROMIUM = ENV.fetch("CHROMIUM", "/usr/bin/chromium")

  module_function

  def which(cmd)
    ENV.fetch("PATH", "").split(File::PATH_SEPARATOR).each do |dir|
      f = File.join(dir, cmd)
      return f if File.executable?(f) && !File.directory?(f)
    end
    nil
  end

  def go
    which("go") || (File.executable?("/usr/lib/go/bin/go") ? "/usr/lib/go/bin/go" : nil)
  end

  def node
    which("node")
  end

  # Exit 77 with a message unless every requirement holds.
  def require_readers!(reqs)
    missing = reqs.reject { |_, ok| ok }.map(&:first)
    return if missing.empty?
    $stderr.puts "SKIP: #{File.basename($PROGRAM_NAME)}: missing #{missing.join(', ')}; run script/setup-interop"
    exit 77
  end

  # The readers print UTF-8 whatever the locale: read bytes, tag them UTF-8
  # (under LANG unset / POSIX, Ruby would tag them US-ASCII and regexps on
  # them would raise).
  def run_cmd(*cmd, env: {})
    out, err, st = Open3.capture3(env, *cmd, binmode: true)
    [out.force_encoding(Encoding::UTF_8), err.force_encoding(Encoding::UTF_8), st]
  end

  # ---- fixtures -----------------------------------------------------------

  MAIN = ["app.rb", "Object#main"].freeze
  FOO = ["app.rb", "Foo#bar"].freeze
  TIMES = ["<internal:numeric>", "Integer#times"].freeze
  BLOCK = ["app.rb", "block (2 levels) in <main>"].freeze
  CMETH = ["<C method>", "Kernel#sleep"].freeze
  GVL_BLOCKED = ["<GVL>", "[GVL blocked]"].freeze
  GVL_WAIT = ["<GVL>", "[GVL wait]"].freeze
  GC_MARK = ["<GC>", "[GC marking]"].freeze
  GC_SWEEP = ["<GC>", "[GC sweeping]"].freeze

  # A profile shaped like a real `stop` result: two threads in two Ractors,
  # labels, GVL and GC frames, a frame without label, invalid UTF-8 in a frame
  # name, a label value and a thread name.
  def rich_profile(mode = :cpu)
    bad = "bad\xFF;na me\nx".b
    samples = [
      [[FOO, MAIN], 20_000_000, 1, 0],
      [[TIMES, FOO, MAIN], 10_000_000, 1, 1],
      [[GC_MARK, FOO, MAIN], 3_000_000, 1, 0],
      [[GC_SWEEP, MAIN], 1_000_000, 2, 0],
      [[CMETH, BLOCK, MAIN], 4_000_000, 2, 2],
      [[["x.rb", bad], ["<C method>", ""], MAIN], 1_000, 2, 2],
      [[FOO, MAIN], 7_000_000, 2, 0],
    ]
    if mode == :wall
      samples << [[GVL_BLOCKED, CMETH, BLOCK, MAIN], 50_000_000, 2, 2]
      samples << [[GVL_WAIT, FOO, MAIN], 2_000_000, 1, 1]
    end
    {
      mode: mode, frequency: 1000, trigger_count: 60, sampling_count: 50,
      start_time_ns: 1_700_000_000_000_000_000, duration_ns: 100_000_000,
      aggregated_samples: samples,
      label_sets: [{}, { endpoint: "GET /users" }, { job: "Mailer", bad: "v\xC3".b }],
      threads: [
        { thread_seq: 1, ractor_id: 1, name: "main", native_tid: 100 },
        { thread_seq: 2, ractor_id: 2, name: "wor\tker\xFF".b, native_tid: 101 },
      ],
    }
  end

  # A result with allocation samples (the :allocations contract of
  # docs/exporters.md): mode :alloc (no time samples), or :cpu / :wall with
  # rich_profile's time samples beside. Two threads, a label set, frames
  # shared with the time samples, a class with odd characters, an entry
  # freed since (inuse 0), one allocated before the window (alloc 0), one
  # without a class, and an all-zero entry (left out everywhere).
  ALLOC_TYPES = %i[alloc_objects alloc_space inuse_objects inuse_space].freeze

  def alloc_profile(mode = :alloc)
    base = mode == :alloc ? { mode: :alloc, frequency: 0, aggregated_samples: [] } : rich_profile(mode)
    base.merge(
      label_sets: [{}, { endpoint: "GET /users" }, { job: "Mailer", bad: "v\xC3".b }],
      threads: [
        { thread_seq: 1, ractor_id: 1, name: "main", native_tid: 100 },
        { thread_seq: 2, ractor_id: 2, name: "wor\tker\xFF".b, native_tid: 101 },
      ],
      start_time_ns: 1_700_000_000_000_000_000, duration_ns: 100_000_000,
      allocations: {
        interval: 1024, sampled: 9, live: 4,
        samples: [
          [[FOO, MAIN], "String", 3072, 122_880, 1024, 40_960, 1, 0],
          [[TIMES, FOO, MAIN], "Array", 2048, 163_840, 0, 0, 1, 1],
          [[BLOCK, MAIN], "MyApp::User", 1024, 81_920, 1024, 81_920, 2, 2],
          [[MAIN], "<T_IMEMO>", 0, 0, 2048, 2_000_000, 1, 0],
          [[CMETH, BLOCK, MAIN], "", 1024, 40_960, 1024, 40_960, 2, 0],
          [[["x.rb", "bad\xFF;na me\nx".b], MAIN], "We;ird\nKlass\xFF".b, 1024, 1_024, 1024, 1_024, 2, 2],
          [[FOO, MAIN], "String", 0, 0, 0, 0, 2, 0],
        ],
      },
    )
  end

  # {type => total} of alloc_profile's allocations.
  def alloc_totals(data)
    ALLOC_TYPES.each_with_index.to_h { |t, i| [t, data[:allocations][:samples].sum { |e| e[2 + i] }] }
  end

  def empty_profile(mode = :wall)
    { mode: mode, frequency: 100, aggregated_samples: [] }
  end

  def deep_profile(depth = 1500)
    frames = (0...depth).map { |i| ["deep.rb", "Deep#m#{i}"] }.reverse # leaf first
    { mode: :cpu, frequency: 1000,
      aggregated_samples: [[frames, 5_000_000, 1, 0], [frames.drop(700), 1_000_000, 1, 0]] }
  end

  # Many distinct stacks with names free of spaces, for cross-checks.
  def many_profile(stacks = 300, seed = 42)
    rng = Random.new(seed)
    names = (0...200).map { |i| ["lib#{i % 7}.rb", "Mod#{i % 13}#meth#{i}"] }
    samples = (0...stacks).map do |i|
      depth = 2 + rng.rand(30)
      [(0...depth).map { names[rng.rand(names.size)] }, 1_000 + rng.rand(10_000_000), 1 + (i % 3), 0]
    end
    { mode: :wall, frequency: 250, aggregated_samples: samples }
  end

  # What real profiles run: two labelled threads (CPU, sleep, GC) and the
  # main thread.
  def real_workload
    fib = ->(n) { n < 2 ? n : fib.(n - 1) + fib.(n - 2) }
    threads = 2.times.map do |i|
      Thread.new do
        work = -> { fib.(18); sleep 0.005; GC.start }
        Rperf.respond_to?(:label) ? Rperf.label(worker: "w#{i}") { 5.times { work.() } } : 5.times { work.() }
      end
    end
    20.times { fib.(18) }
    threads.each(&:join)
  end

  # Real profiles from the engine, when it is available; nil otherwise.
  def real_profiles
    return nil unless Rperf.respond_to?(:start) && Rperf.respond_to?(:stop)
    %i[cpu wall].map do |mode|
      Rperf.start(mode: mode, frequency: 1000)
      begin
        real_workload
      ensure
        data = Rperf.stop
      end
      [mode, data]
    end.to_h
  end

  # Real profiles written by Rperf.stop itself (start(output:)): a C
  # exporter then encodes from the engine's data, not from the result Hash.
  # Returns [path, …] (one per mode), or nil without the engine.
  def real_outputs(dir, suffix, exporter)
    return nil unless Rperf.respond_to?(:start) && Rperf.respond_to?(:stop)
    %i[cpu wall].map do |mode|
      path = File.join(dir, "stop-#{mode}#{suffix}")
      Rperf.start(mode: mode, frequency: 1000, exporter: exporter, output: path) { real_workload }
      path
    end
  end
end
