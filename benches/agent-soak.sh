#!/usr/bin/env bash
# memperf agent's memory over a long run ("memory stays flat for days", issue 31): the agent
# profiles a command (not the whole system) that never stops making what its bounds are for:
#   - new processes: a shell loop starts a few short programs every second (new pids, and so
#     new `pid` labels every window; session::reap and the EXIT records let them go);
#   - new stacks: `soakstack` walks a random chain of 1 to 10 of 16 functions before each of
#     its faults (16^10 chains, so nearly every window's stacks are new; the window's bound,
#     --max-stacks, is set low enough that it is reached and folds);
#   - new binaries: every few seconds `soakstack` runs from a fresh copy (a new file, the old
#     one deleted while the agent may still know it), so the symbolizer kept across windows
#     passes its bound on files (128) and starts afresh, again and again;
#   - heap blocks: fixtures/otelmem.c's otel_memory probes (--otel-memory), blocks kept
#     until each process exits, so the in-use table fills and is let go of per process.
# Every 30 s it writes a row to the CSV: seconds since the start, the agent's VmRSS and
# VmHWM (KiB), its CPU seconds, open fds, and the last window line's figures. At the end it
# prints start, after warm-up (the first row past WARMUP seconds), max and end RSS and the
# slope of RSS over the second half of the run (a least-squares fit, MiB per hour), where
# the bounds have long been reached.
#
# Usage: benches/agent-soak.sh [SECS] [CSV]       (defaults: 3600, agent-soak.csv)
#   MEMPERF=path to the binary (else target/release/memperf, built if missing);
#   INTERVAL=window seconds (10), MAX_STACKS=the window's bound (10000),
#   PERIOD=sample one fault in PERIOD (1), SLEEP=seconds between the loop's rounds (0.2),
#   COPY_EVERY=rounds between fresh copies of soakstack (10; 0: never, one binary only),
#   WARMUP=seconds after which the RSS is reported as past the warm-up (600).
# It profiles its own command only: the agent at nice 10 (its reader too), the workload at
# nice 19, light
# enough to run beside other work; it is not a timing measurement and needs no lock.
# SIGINT or SIGTERM stops it cleanly (the agent ships its last window, the summary is
# printed for what was sampled so far).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-3600}
CSV=${2:-agent-soak.csv}
INTERVAL=${INTERVAL:-10}
MAX_STACKS=${MAX_STACKS:-10000}
PERIOD=${PERIOD:-1}
SLEEP=${SLEEP:-0.2}
COPY_EVERY=${COPY_EVERY:-10}
WARMUP=${WARMUP:-600}
if [ -z "${MEMPERF:-}" ]; then
    [ -x target/release/memperf ] || cargo build --release --quiet
    MEMPERF=$PWD/target/release/memperf
fi
work=$(mktemp -d)
agent=
cleanup() {
    if [ -n "$agent" ] && kill -0 "$agent" 2>/dev/null; then
        kill -INT "$agent" 2>/dev/null || true
        wait "$agent" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
# Stopped early: the agent ships its last window and the summary covers what was sampled.
trap '[ -n "$agent" ] && kill -INT "$agent" 2>/dev/null' INT TERM

# soakstack: 16 functions, each calling a random one of them until the chain's depth is
# reached, the last touching one fresh page. Frame pointers and DWARF both walk it.
{
    echo '#include <stdlib.h>'
    echo '#include <sys/mman.h>'
    echo '#include <unistd.h>'
    echo 'typedef void fn(int, unsigned *, volatile char *);'
    echo 'static fn *table[16];'
    for i in $(seq 0 15); do
        echo "__attribute__((noinline, noclone)) void soak_f$i(int d, unsigned *s, volatile char *p) {"
        echo "    if (d == 0) { p[$i] = 1; return; }"
        echo "    table[rand_r(s) % 16](d - 1, s, p);"
        echo '    __asm__ volatile("" ::: "memory");'
        echo '}'
    done
    echo 'int main(int argc, char **argv) {'
    for i in $(seq 0 15); do echo "    table[$i] = soak_f$i;"; done
    cat <<'C'
    unsigned s = (unsigned)getpid() ^ (unsigned)(argc > 1 ? atoi(argv[1]) : 0);
    long pg = sysconf(_SC_PAGESIZE), n = 200;
    volatile char *buf = mmap(NULL, n * pg, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED)
        return 1;
    for (long i = 0; i < n; i++)
        table[rand_r(&s) % 16](rand_r(&s) % 10, &s, buf + i * pg);
    return 0;
}
C
} >"$work/soakstack.c"
cc -O1 -g -fno-omit-frame-pointer -fno-optimize-sibling-calls -o "$work/soakstack" "$work/soakstack.c"
cc -O1 -g -o "$work/otelmem" fixtures/otelmem.c

# The workload: until the deadline, one soakstack (from a copy made afresh every
# COPY_EVERY rounds), one otelmem (400 blocks, 100 of them held until it exits), a pause.
cat >"$work/loop.sh" <<SH
end=\$((\$(date +%s) + $SECS))
i=0
cp "$work/soakstack" "$work/bin.0"
while [ \$(date +%s) -lt \$end ]; do
    i=\$((i + 1))
    if [ $COPY_EVERY -gt 0 ] && [ \$((i % $COPY_EVERY)) -eq 0 ]; then
        cp "$work/soakstack" "$work/bin.\$i" && rm -f "$work/bin.\${last:-0}"
        last=\$i
    fi
    "$work/bin.\${last:-0}" \$i
    "$work/otelmem" 200 0 >/dev/null
    sleep $SLEEP
done
SH

mkdir -p "$work/out"
# The agent raises its reader to nice -15 for events copying stacks at every hit, so that
# the traced threads go at its pace (live::priority); here it stays at 10, above the
# workload's 19, below everyone else's work.
MEMPERF_READER_NICE=10 nice -n 10 "$MEMPERF" agent -e "page-faults/period=$PERIOD/" --otel-memory "$work/otelmem" \
    --interval "$INTERVAL" --max-stacks "$MAX_STACKS" --output "$work/out" \
    -- nice -n 9 sh "$work/loop.sh" 2>"$work/agent.log" &
agent=$!

echo "secs,rss_kib,hwm_kib,cpu_s,fds,window,samples,profiles,lost,folded" >"$CSV"
status() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status" 2>/dev/null; }
cpu() { awk -v t="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / t }' "/proc/$1/stat" 2>/dev/null; }
t0=$(date +%s)
while kill -0 "$agent" 2>/dev/null; do
    now=$(( $(date +%s) - t0 ))
    rss=$(status "$agent" VmRSS)
    [ -n "$rss" ] || break
    line=$(grep 'samples,' "$work/agent.log" | tail -1 || true)
    fig=$(sed -nE 's/.*window ([0-9]+): ([0-9]+) samples, ([0-9]+) profiles, ([0-9]+) lost, ([0-9]+) folded.*/\1,\2,\3,\4,\5/p' <<<"$line")
    echo "$now,$rss,$(status "$agent" VmHWM),$(cpu "$agent"),$(ls "/proc/$agent/fd" | wc -l),${fig:-,,,,}" >>"$CSV"
    # The profiles themselves are not what is measured: keep the disk free.
    find "$work/out" -name '*.pb.gz' -mmin +1 -delete 2>/dev/null || true
    sleep 30 &
    wait $! || true
done
wait "$agent" || echo "agent exited with $?" >&2
agent=
echo "last window lines:"
grep 'memperf agent' "$work/agent.log" | tail -3
awk -F, -v warm="$WARMUP" 'NR > 1 && $2 != "" { n++; t[n] = $1; r[n] = $2; if ($2 > max) max = $2
    if (w == "" && $1 >= warm) { w = $2; wt = $1 } }
END {
    if (n < 2) { print "too few samples"; exit }
    h = int(n / 2) + 1; m = n - h + 1; st = sr = stt = str = 0
    for (i = h; i <= n; i++) { st += t[i]; sr += r[i]; stt += t[i] * t[i]; str += t[i] * r[i] }
    d = m * stt - st * st
    slope = d > 0 ? (m * str - st * sr) / d * 3600 : 0
    printf "RSS KiB: start %d (at %d s), after warm-up %s (at %s s), max %d, end %d (at %d s); slope over the second half (from %d s) %.0f KiB/hour (%.2f MiB/hour)\n",
        r[1], t[1], w == "" ? "-" : w, w == "" ? "-" : wt, max, r[n], t[n], t[h], slope, slope / 1024
}' "$CSV"
