#!/usr/bin/env bash
# memperf's memory over a long system-wide recording on a host that keeps running new
# binaries (a build or CI host): RATE distinct copies of a binary with large unwind tables
# (perf's own, a new inode each) are started per minute, each faulting its pages in, while
# `memperf record -e page-faults -a` runs for SECONDS. Prints memperf's RSS every 10 s and
# its peak. Goal: flat, at most 64 MiB.
#
# Usage: benches/rss-churn.sh [SECONDS] [RATE_PER_MINUTE] [MEMPERF]
#        (defaults: 600 s, 1000 per minute, target/release/memperf)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TOTAL=${1:-600}
RATE=${2:-1000}
MEMPERF=${3:-}
if [ -z "$MEMPERF" ]; then
    cargo build --release --quiet
    MEMPERF=$PWD/target/release/memperf
fi
# A binary with large unwind tables (~1 MiB of .eh_frame): memperf itself, unless BIN says.
BIN=${BIN:-$MEMPERF}
work=$(mktemp -d)
trap 'kill "$rec" "$churn" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

"$MEMPERF" record -q -e page-faults -a -o "$work/churn.data" --duration "$SECONDS_TOTAL" &
rec=$!
sleep 1

# The churn: a new copy (a new inode: new unwind data to load) every 60/RATE seconds.
pause=$(python3 -c "print(60 / $RATE)")
(
    i=0
    while :; do
        i=$((i + 1))
        cp "$BIN" "$work/bin$i"
        "$work/bin$i" --version >/dev/null 2>&1 || true
        rm -f "$work/bin$i"
        sleep "$pause"
    done
) &
churn=$!

echo "seconds  rss_mib  anon_mib  (memperf pid $rec, $RATE copies of $(basename "$BIN") a minute; rss counts the ring buffers, anon does not)"
peak=0
start=$(date +%s)
while kill -0 "$rec" 2>/dev/null; do
    rss=$(awk '/^VmRSS/ {print int($2 / 1024)}' "/proc/$rec/status" 2>/dev/null || echo 0)
    anon=$(awk '/^RssAnon/ {print int($2 / 1024)}' "/proc/$rec/status" 2>/dev/null || echo 0)
    hwm=$(awk '/^VmHWM/ {print int($2 / 1024)}' "/proc/$rec/status" 2>/dev/null || echo 0)
    [ "${hwm:-0}" -gt "$peak" ] && peak=$hwm
    printf '%7d  %7s  %8s\n' $(($(date +%s) - start)) "$rss" "$anon"
    sleep 10
done
kill "$churn" 2>/dev/null || true
echo "peak RSS: $peak MiB"
