# frozen_string_literal: true

# examples/demo_profile.rb — the driver behind `script/demo`: profiles
# examples/demo_app.rb (Demo.run) in wall mode, prints the text report and
# writes the profile files into a directory.
#
# Run: script/ruby examples/demo_profile.rb [OUTPUT_DIR]
#      (OUTPUT_DIR defaults to $RPERF_DEMO_DIR, else ./rperf-demo)
#
# Uses the exporters (Rperf::Text, Rperf.save) when they are built; otherwise
# prints a small flat/cumulative report of its own and writes a collapsed-stack
# file by hand, so the demo always shows something real.

require "rperf"
require "fileutils"
require_relative "demo_app"

out_dir = File.expand_path(ARGV[0] || ENV["RPERF_DEMO_DIR"] || "rperf-demo")
FileUtils.mkdir_p(out_dir)

puts "Profiling examples/demo_app.rb (mode: :wall, 1000 Hz)…"
data = Rperf.start(mode: :wall, frequency: 1000) { Demo.run(io: $stdout) }

# --- text report ----------------------------------------------------------
# Fallback used only when the text exporter is not available.
def fallback_report(data, top_n: 15)
  samples = data[:aggregated_samples] || []
  total = samples.sum { |s| s[1] }
  flat = Hash.new(0)
  cum = Hash.new(0)
  samples.each do |frames, weight|
    flat[frames[0]] += weight if frames[0]
    frames.uniq.each { |f| cum[f] += weight } # count each frame once per stack
  end
  pct = ->(w) { total.positive? ? 100.0 * w / total : 0.0 }
  lines = [format("Total: %.1f ms (%s mode, %d samples)", total / 1e6, data[:mode], data[:sampling_count])]
  { "Flat" => flat, "Cumulative" => cum }.each do |title, table|
    lines << "" << format("%s:", title)
    table.sort_by { |_, w| -w }.first(top_n).each do |(path, label), w|
      lines << format("%10.1f ms %5.1f%%  %s (%s)", w / 1e6, pct.(w), label, path)
    end
  end
  lines.join("\n") + "\n"
end

puts
if defined?(Rperf::Text)
  puts Rperf::Text.encode(data, top_n: 20)
else
  puts fallback_report(data)
end

# --- threads and Ractors ----------------------------------------------------
if data[:threads]
  weight = Hash.new(0)
  data[:aggregated_samples].each { |_, w, seq| weight[seq] += w }
  puts "Threads (thread_seq, Ractor, name, weight):"
  data[:threads].each do |t|
    printf("  %3d  Ractor %-3s %-20s %9.1f ms\n", t[:thread_seq], t[:ractor_id].zero? ? "?" : t[:ractor_id],
           t[:name] || "-", weight[t[:thread_seq]] / 1e6)
  end
end

# --- profile files ----------------------------------------------------------
written = []
if Rperf.respond_to?(:save)
  available = Rperf.respond_to?(:exporters) ? Rperf.exporters : %i[pprof collapsed text]
  { pprof: "demo.pb.gz", collapsed: "demo.collapsed", json: "demo.json", text: "demo.txt" }.each do |name, file|
    next unless available.include?(name)
    path = File.join(out_dir, file)
    begin
      Rperf.save(path, data, exporter: name)
      written << path
    rescue StandardError => e
      warn "demo: could not write #{file}: #{e.class}: #{e.message}"
    end
  end
else
  # No exporters built yet: write folded stacks ourselves (root first).
  path = File.join(out_dir, "demo.collapsed")
  folded = Hash.new(0)
  data[:aggregated_samples].each { |frames, w| folded[frames.reverse.map { |f| f[1] }.join(";")] += w }
  File.write(path, folded.sort.map { |stack, w| "#{stack} #{w}\n" }.join)
  written << path
end

puts
puts "Profile files written to #{out_dir}:"
written.each { |path| printf("  %-40s %8d bytes\n", File.basename(path), File.size(path)) }
puts
puts "Open the pprof file with e.g. `go tool pprof -top #{File.join(out_dir, 'demo.pb.gz')}`" if written.any? { |p| p.end_with?(".pb.gz") }
