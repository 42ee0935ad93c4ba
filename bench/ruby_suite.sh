#!/usr/bin/env bash
# bench/ruby_suite.sh [SERIES] [TESTS…] — Ruby's own test suite run twice
# side by side: plain, and with rperf started from the environment at
# 10 kHz wall for every Ruby process it starts (RUBYOPT=-rrperf
# RPERF_ENABLED=1). Prints the failures and errors of each run and those of
# the profiled run the plain run does not have: what the profiler shows the
# program. A measurement, not a test (it takes 15–30 minutes per run here).
#
# SERIES: 3.3 (default) or 3.4, the Ruby script/setup built (its source
# package is in the cache). TESTS: paths under the source tree, default
# test/ruby. RPERF_SUITE_JOBS: parallel workers (default 2).
# Expected difference: YJIT's "no side exits" checks (every sample is an
# interrupt), when YJIT is built in.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$ROOT/script/env.sh"
CACHE=${RPERF_CACHE:-$HOME/.cache/rperf}
SERIES=${1:-3.3}
shift || true
case "$SERIES" in
  3.3) BUILD_DIR=${RPERF_BUILD_DIR:-$ROOT/build} ;;
  3.4) BUILD_DIR=${RPERF_BUILD_DIR:-$ROOT/build-3.4} ;;
  *) echo "bench/ruby_suite.sh: SERIES must be 3.3 or 3.4 (got '$SERIES')" >&2; exit 2 ;;
esac
RUBY=$(cat "$CACHE/ruby-$SERIES-path")
TARBALL=$(ls "$CACHE"/ruby-src/"$SERIES"/*.orig.tar.xz 2>/dev/null | head -n1 || true)
[ -n "$TARBALL" ] || TARBALL=$(ls "$CACHE"/ruby-src/ruby"$SERIES"_*.orig.tar.xz | head -n1)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/rperf-ruby-suite.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
tar -xJf "$TARBALL" -C "$WORK"
SRC=$(ls -d "$WORK"/ruby-*/)
TESTS=("$@")
[ ${#TESTS[@]} -gt 0 ] || TESTS=(test/ruby)
JOBS=${RPERF_SUITE_JOBS:-2}

run() { # name, env…
  local name=$1; shift
  (cd "$SRC" && env "$@" "$RUBY" -I tool/lib tool/test/runner.rb --ruby="$RUBY" -j"$JOBS" \
     --no-retry "${TESTS[@]}" > "$WORK/$name.log" 2>&1) || true
  # "  1) Failure:" then "TestClass#test_name [file:line]:"
  grep -E '^ *[0-9]+\) (Failure|Error):' -A1 "$WORK/$name.log" |
    grep -oE '^[A-Z][A-Za-z0-9_:]*#[^ :]+' | sort -u > "$WORK/$name.fails" || true
  echo "== $name: $(tail -n 5 "$WORK/$name.log" | grep -E 'tests,' || echo '(no summary)')"
}

run plain
run profiled RUBYOPT="-I$BUILD_DIR/lib -rrperf" RPERF_ENABLED=1 RPERF_FREQUENCY=10000 \
  RPERF_MODE=wall RPERF_OUTPUT="$WORK/profile.pb.gz"
echo "== failing only when profiled:"
comm -13 "$WORK/plain.fails" "$WORK/profiled.fails" | sed 's/^/  /'
echo "== failing only when plain:"
comm -23 "$WORK/plain.fails" "$WORK/profiled.fails" | sed 's/^/  /'
