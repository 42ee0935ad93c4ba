# frozen_string_literal: true

# bench/exec_stress.rb — does the program a profiled Ruby process execs ever
# die of the tick signal? A tick sent to the exec'ing thread between execve
# and the new image's start stays pending across execve (only POSIX-timer
# signals are flushed there), and the new program has the default action
# for it: death by "Real-time signal 8".
#
# Shape: a child Ruby with the env auto-start (RPERF_ENABLED=1, 10 kHz, wall
# mode) counts to 20,000 and execs `sh -c "exit 6"`, with every exec form
# (Kernel#exec, Process.exec, exec from a Ractor other than the main one).
# A run is good when the exit status is 6. Runs are interleaved (backend
# after backend, form after form).
#
# Run:
#   script/ruby bench/exec_stress.rb                  # 400 runs per backend
#   script/ruby bench/exec_stress.rb --runs=50        # fewer
#   script/ruby bench/exec_stress.rb --backend=holder # one backend
# Prints, per backend, good runs / runs and the statuses of the others.
# tests/ruby/test_exec.rb runs it with --runs=50.
require "rbconfig"

module ExecStress
  FORMS = {
    "Kernel#exec" => 'exec "/bin/sh", "-c", "exit 6"',
    "Process.exec" => 'Process.exec("/bin/sh", "-c", "exit 6")',
    "Ractor" => 'Warning[:experimental] = false; r = Ractor.new { exec "/bin/sh", "-c", "exit 6" }; ' \
                'r.respond_to?(:value) ? r.value : r.take'
  }.freeze

  module_function

  def program(form) = "x = 0; 20_000.times { x += 1 }; #{FORMS.fetch(form)}"

  # -> [Process::Status, stderr]
  def run_once(backend, form, lib, frequency: 10_000, mode: "wall")
    env = { "RPERF_ENABLED" => "1", "RPERF_FREQUENCY" => frequency.to_s, "RPERF_MODE" => mode,
            "RPERF_BACKEND" => backend, "RPERF_OUTPUT" => File::NULL, "RPERF_FORMAT" => "collapsed" }
    r, w = IO.pipe
    pid = Process.spawn(env, RbConfig.ruby, "-I", lib, "-rrperf", "-e", program(form), err: w, out: File::NULL)
    w.close
    err = r.read
    r.close
    _, status = Process.wait2(pid)
    [status, err]
  end

  def describe(status) = status.signaled? ? "signal #{status.termsig}" : "exit #{status.exitstatus}"

  # -> { backend => [good, runs, { description => count }] }
  def run(backends, runs, lib)
    tally = backends.to_h { |b| [b, [0, 0, Hash.new(0)]] }
    forms = FORMS.keys
    runs.times do |i|
      backends.each do |b|
        status, err = run_once(b, forms[i % forms.size], lib)
        t = tally[b]
        t[1] += 1
        if status.exited? && status.exitstatus == 6 && err.empty?
          t[0] += 1
        else
          t[2]["#{forms[i % forms.size]}: #{describe(status)}#{err.empty? ? '' : " (stderr: #{err.lines.first&.chomp})"}"] += 1
        end
      end
    end
    tally
  end
end

if $PROGRAM_NAME == __FILE__
  runs = Integer(ARGV.find { |a| a.start_with?("--runs=") }&.split("=", 2)&.last || 400)
  lib = File.expand_path("../build/lib", __dir__)
  lib = File.join(ENV["RPERF_BUILD_DIR"], "lib") if ENV["RPERF_BUILD_DIR"]
  require File.join(lib, "rperf")
  backends = (b = ARGV.find { |a| a.start_with?("--backend=") }) ? [b.split("=", 2).last] : Rperf.backends.map(&:to_s)
  ExecStress.run(backends, runs, lib).each do |b, (good, n, bad)|
    puts format("%-10s %4d / %d exited 6%s", b, good, n, bad.empty? ? "" : ": #{bad.map { |k, v| "#{v}× #{k}" }.join(', ')}")
  end
end
