#!/usr/bin/env bash
# bench/switch_perf.sh — how much CPU time rperf.so's own code takes per GVL
# switch, for one or more builds side by side in one run.
#
# A switching workload of bench/overhead.rb runs under `perf record`
# (cpu-clock, 10 kHz; no hardware counters needed) with rperf started at
# --hz (default 1 Hz: the ticks cost nothing and what rperf.so's symbols
# get is the thread hooks' own cost per switch; at 1000 Hz wall mode adds
# the long blocks' records, which `io` makes at every few switches).
# Workloads: `switch` (8 threads passing a token through Queues, 120,000
# hand-offs) or `io` (16 threads in pipe ping-pong, 48,000 switches a
# call). The builds' processes alternate round by round and each build's
# medians are printed: rperf.so's share of all samples, its ns per switch
# (samples x 100 us / switches), and the ns per switch of Ruby's stack walk
# (rb_profile_frames) that rperf.so's captures call, and the futex system
# calls per switch (where tracepoints may be counted). It reads the code's own time, cache
# misses included, but not what those add to Ruby's scheduler code around
# it; bench/overhead.rb's "above" columns give the whole cost (wider spread
# on this VM).
#
# Usage: bench/switch_perf.sh [--mode=wall|cpu] [--workload=switch|io]
#                             [--hz=N] [--rounds=N] [LIBDIR...]
#   LIBDIR  a directory holding rperf.so and the Ruby library (a copy of
#           build/lib); default: build/lib
# Needs perf (Debian: linux-perf) and the project's Ruby (script/setup).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$ROOT/script/env.sh"
CACHE=${RPERF_CACHE:-$HOME/.cache/rperf}
RUBY=${RPERF_RUBY:-$(cat "$CACHE/ruby-path" 2>/dev/null || true)}
mode=wall workload=switch hz=1 rounds=5 libs=()
for a in "$@"; do
  case $a in
    --mode=wall|--mode=cpu) mode=${a#--mode=} ;;
    --mode=*) echo "switch_perf.sh: --mode must be wall or cpu, not '${a#--mode=}'" >&2; exit 2 ;;
    --workload=switch|--workload=io) workload=${a#--workload=} ;;
    --workload=*) echo "switch_perf.sh: --workload must be switch or io, not '${a#--workload=}'" >&2; exit 2 ;;
    --hz=*) hz=${a#--hz=}
      [[ $hz =~ ^[1-9][0-9]*$ ]] || { echo "switch_perf.sh: --hz must be a positive integer" >&2; exit 2; } ;;
    --rounds=*) rounds=${a#--rounds=}
      [[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "switch_perf.sh: --rounds must be a positive integer" >&2; exit 2; } ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "switch_perf.sh: unknown option $a (accepted: --mode=wall|cpu, --workload=switch|io, --hz=N, --rounds=N, --help)" >&2; exit 2 ;;
    *) [ -f "$a/rperf.so" ] || { echo "switch_perf.sh: no rperf.so in $a" >&2; exit 2; }; libs+=("$a") ;;
  esac
done
[ ${#libs[@]} -gt 0 ] || libs=("$ROOT/build/lib")
command -v perf > /dev/null || { echo "switch_perf.sh: needs perf" >&2; exit 2; }
[ -n "$RUBY" ] && [ -x "$RUBY" ] || { echo "switch_perf.sh: no Ruby found; run script/setup" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/switch.rb" <<RUBY
require "rperf"
require "$ROOT/bench/overhead"
work = OverheadBench.workload("$workload", 1.0)
Rperf.start(frequency: $hz, mode: :$mode)
n = 0
6.times { n += work.call }
Rperf.stop
File.write("$tmp/handoffs", n.to_s)
RUBY

median() { sort -n | awk '{a[NR] = $1} END {if (NR) print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2)}'; }

for r in $(seq "$rounds"); do
  for i in "${!libs[@]}"; do
    # futex calls counted around the recording (tracepoint; "-" when not
    # permitted): Ruby's scheduler waits on one when a lock or the GVL is
    # contended, so more per switch means hooks that hold its lock longer
    perf stat -x, -o "$tmp/stat" -e syscalls:sys_enter_futex -- \
      perf record -q -F 10000 -o "$tmp/perf.data" -- "$RUBY" -I "${libs[$i]}" "$tmp/switch.rb" > /dev/null 2>&1 ||
      perf record -q -F 10000 -o "$tmp/perf.data" -- "$RUBY" -I "${libs[$i]}" "$tmp/switch.rb" > /dev/null 2>&1
    n=$(cat "$tmp/handoffs")
    futex=$(awk -F, -v n="$n" '/sys_enter_futex/ && $1 ~ /^[0-9]+$/ {printf "%.3f", $1 / n}' "$tmp/stat" 2> /dev/null)
    rm -f "$tmp/stat"
    # rperf.so's samples, and Ruby's stack walk that rperf.so calls
    perf report -i "$tmp/perf.data" --sort dso,sym -q -F sample,dso,sym 2> /dev/null |
      awk -v i="$i" -v n="$n" '/rperf\.so/ {so += $1} /thread_profile_frames|rb_profile_frames/ {cap += $1}
        {all += $1}
        END {printf "%d %.3f %.0f %.0f\n", i, 100 * so / all, so * 100000 / n, cap * 100000 / n}' |
      sed "s/\$/ ${futex:--}/" >> "$tmp/rows"
  done
done

echo "rperf.so per GVL switch, $workload workload, $mode mode, rperf at $hz Hz, $rounds rounds (medians)"
printf "%-40s %10s %14s %14s %14s\n" build "share %" "ns/switch" "capture ns" "futex/switch"
for i in "${!libs[@]}"; do
  share=$(awk -v i="$i" '$1 == i {print $2}' "$tmp/rows" | median)
  ns=$(awk -v i="$i" '$1 == i {print $3}' "$tmp/rows" | median)
  cap=$(awk -v i="$i" '$1 == i {print $4}' "$tmp/rows" | median)
  fx=$(awk -v i="$i" '$1 == i && $5 != "-" {print $5}' "$tmp/rows" | median)
  printf "%-40s %10s %14s %14s %14s\n" "${libs[$i]}" "$share" "$ns" "$cap" "${fx:--}"
done
