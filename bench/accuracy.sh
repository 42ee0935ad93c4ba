#!/usr/bin/env bash
# bench/accuracy.sh — how well rperf attributes time to methods, every
# backend, both modes, at 1 kHz and 10 kHz: one table of mean relative
# errors (MRE, per family) from the accuracy harness (a separate checkout of
# known-duration workloads; its README says what each family and column
# means). Not a test: the figures move by a few tenths of a point between
# runs at 1 kHz, so compare a change against a run made in the same hour.
#
#   bench/accuracy.sh                       # 3 backends x 1 kHz, 10 kHz x both modes
#   bench/accuracy.sh --backends holder --frequencies 1000 -- -s 2
#
# Options: --backends LIST (holder,signal,nanosleep), --frequencies LIST
# (1000,10000), --scenarios N (5 per family); after `--`, arguments for the
# harness itself (-s SEED, -f FAMILIES, --bg N, ...).
# Environment: RPERF_ACCURACY_HARNESS, the harness's folder (default: the
# `accuracy` folder of the `shared` folder beside this checkout);
# RPERF_RUBY / RPERF_CACHE as for script/ruby. The harness builds its C
# extension into build/accuracy here, never into its own folder.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$ROOT/script/env.sh"
CACHE=${RPERF_CACHE:-$HOME/.cache/rperf}
BUILD_DIR=${RPERF_BUILD_DIR:-$ROOT/build}
HARNESS=${RPERF_ACCURACY_HARNESS:-$ROOT/../shared/accuracy}
backends=holder,signal,nanosleep
frequencies=1000,10000
scenarios=5
while [ $# -gt 0 ]; do
  case "$1" in
    --backends) backends=$2; shift 2 ;;
    --frequencies) frequencies=$2; shift 2 ;;
    --scenarios) scenarios=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "bench/accuracy.sh: unknown option $1 (--backends, --frequencies, --scenarios, -- harness args)" >&2; exit 2 ;;
  esac
done
[ -f "$HARNESS/accuracy.rb" ] || {
  echo "bench/accuracy.sh: no accuracy harness at $HARNESS (set RPERF_ACCURACY_HARNESS)" >&2; exit 1; }
[ -f "$BUILD_DIR/lib/rperf.so" ] || "$ROOT/script/setup" >&2
RUBY=${RPERF_RUBY:-$(cat "$CACHE/ruby-path" 2>/dev/null || true)}
[ -n "$RUBY" ] && [ -x "$RUBY" ] || { echo "bench/accuracy.sh: no Ruby found; run script/setup" >&2; exit 1; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
IFS=, read -ra bs <<< "$backends"
IFS=, read -ra fs <<< "$frequencies"
for f in "${fs[@]}"; do
  for b in "${bs[@]}"; do
    echo "accuracy: $b at $f Hz" >&2
    ACC_BUILD_DIR="$BUILD_DIR/accuracy" RUBY="$RUBY" RUBYLIB="$BUILD_DIR/lib" RPERF_REQUIRE=rperf \
      "$RUBY" "$HARNESS/accuracy.rb" --retry-noisy 3 -n "$scenarios" -F "$f" \
      --start-opts "backend: :$b" --json "$out/$b-$f.json" "$@" > "$out/$b-$f.log" 2>&1 ||
      echo "accuracy: $b at $f Hz: a scenario failed (see the harness's output)" >&2
  done
done

# One row per mode and family, one column per backend and frequency.
"$RUBY" -rjson -e '
  dir, bs, fs = ARGV[0], ARGV[1].split(","), ARGV[2].split(",")
  cols = fs.product(bs)
  runs = cols.to_h { |f, b| [[f, b], (JSON.parse(File.read("#{dir}/#{b}-#{f}.json")) rescue nil)] }
  rows = runs.values.compact.flat_map { |r| r["summaries"].map { |s| [s["mode"], s["family"]] } }.uniq
  puts "| mode | family | " + cols.map { |f, b| "#{b} #{f.to_i / 1000} kHz" }.join(" | ") + " |"
  puts "|---|---|" + "---|" * cols.size
  rows.each do |mode, fam|
    cells = cols.map do |c|
      s = runs[c]&.fetch("summaries")&.find { |x| x["mode"] == mode && x["family"] == fam }
      s ? format("%.2f %%", s["mre_mean"] * 100) : "-"
    end
    puts "| #{mode} | #{fam} | #{cells.join(" | ")} |"
  end
  seed = runs.values.compact.first&.dig("options", "seed")
  puts "", "MRE, mean over #{ARGV[3]} scenarios per family, seed #{seed}; ruby #{RUBY_VERSION}."
' "$out" "$backends" "$frequencies" "$scenarios"
