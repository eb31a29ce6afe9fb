#!/usr/bin/env bash
# memperf's memory over a long system-wide recording while processes churn: a loop compiles,
# runs and deletes distinct programs (a new binary each time, with its own build-id) and runs
# short system commands between them, while `memperf record -a` runs for SECONDS. Prints
# memperf's RSS every 10 s, its RSS at the end of the warm-up and at the end, the slope
# after the warm-up (least squares), how many processes and distinct binaries the loop
# started, and the recorder's summary (the processes and files it held, the processes it
# dropped after their exit records were lost).
# Goal: the RSS flat after the warm-up (within a few MiB), whatever the churn.
#
# Usage: benches/churn.sh [SECONDS] [MEMPERF]
#        (defaults: 600 s, target/release/memperf)
#   WARMUP=60   seconds of warm-up left out of the slope
#   OUT=/dev/null  where the recording goes (a file here grows by ~5 MB/s)
#   COMMANDS=10 system commands per distinct program
# Run it under the machine lock: flock /tmp/memperf-machine.lock benches/churn.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TOTAL=${1:-600}
MEMPERF=${2:-}
WARMUP=${WARMUP:-60}
OUT=${OUT:-/dev/null}
COMMANDS=${COMMANDS:-10}
if [ -z "$MEMPERF" ]; then
    cargo build --release --quiet
    MEMPERF=$PWD/target/release/memperf
fi
work=$(mktemp -d)
rec=
churn=
trap 'kill "$rec" "$churn" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

"$MEMPERF" record -a -o "$OUT" --duration "$SECONDS_TOTAL" >"$work/summary" 2>&1 &
rec=$!
sleep 1

# The churn. Each program is distinct (its own functions and constant, so its own build-id),
# compiled, run and deleted; each round then runs COMMANDS rounds of short system commands.
(
    i=0
    while :; do
        i=$((i + 1))
        cat >"$work/p$i.c" <<EOF
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) static long leaf_$i(long n) {
    char *p = malloc(1 << 16);
    for (long k = 0; k < (1 << 16); k += 4096) p[k] = (char)k;
    long s = p[4096] + n;
    free(p);
    return s;
}
__attribute__((noinline)) static long mid_$i(long n) { return leaf_$i(n) + 1; }
int main(int argc, char **argv) { (void)argv; printf("%ld\n", mid_$i(argc + $i)); return 0; }
EOF
        gcc -O1 -g -o "$work/p$i" "$work/p$i.c" && "$work/p$i" >/dev/null
        rm -f "$work/p$i" "$work/p$i.c"
        echo "$i" >"$work/programs"
        for _ in $(seq "$COMMANDS"); do
            ls / >/dev/null
            date >/dev/null
            cat /proc/loadavg >/dev/null
            id >/dev/null
        done
    done
) &
churn=$!

echo "seconds  rss_mib  anon_mib  (memperf pid $rec; rss counts the ring buffers, anon does not)"
start=$(date +%s)
forks_start=$(awk '/^processes/ {print $2}' /proc/stat)
: >"$work/rss"
while kill -0 "$rec" 2>/dev/null; do
    t=$(($(date +%s) - start))
    rss=$(awk '/^VmRSS/ {print $2}' "/proc/$rec/status" 2>/dev/null || true)
    anon=$(awk '/^RssAnon/ {print $2}' "/proc/$rec/status" 2>/dev/null || true)
    [ -n "$rss" ] || break
    echo "$t $rss $anon" >>"$work/rss"
    awk -v t="$t" -v r="$rss" -v a="$anon" 'BEGIN { printf "%7d  %7.1f  %8.1f\n", t, r / 1024, a / 1024 }'
    sleep 10
done
forks_end=$(awk '/^processes/ {print $2}' /proc/stat)
kill "$churn" 2>/dev/null || true
wait "$rec" || true
programs=$(cat "$work/programs" 2>/dev/null || echo 0)
awk -v w="$WARMUP" -v progs="$programs" -v pids=$((forks_end - forks_start)) '
    { t[NR] = $1; r[NR] = $2; a[NR] = $3 }
    $1 >= w && !at { at = NR }
    $1 >= w { n++; sx += $1; sy += $3; sxx += $1 * $1; sxy += $1 * $3 }
    END {
        if (!at || n < 2) { print "too short for a slope after the warm-up"; exit }
        slope = (n * sxy - sx * sy) / (n * sxx - sx * sx)
        printf "warm-up (%d s): rss %.1f MiB, anon %.1f MiB\n", t[at], r[at] / 1024, a[at] / 1024
        printf "end (%d s):     rss %.1f MiB, anon %.1f MiB\n", t[NR], r[NR] / 1024, a[NR] / 1024
        printf "slope after the warm-up: %.1f KiB/s of anonymous memory (%.1f MiB per 10 minutes)\n", slope, slope * 600 / 1024
        printf "churn: %d distinct programs, %d processes and threads started\n", progs, pids
    }' "$work/rss"
echo "memperf's summary:"
cat "$work/summary"
