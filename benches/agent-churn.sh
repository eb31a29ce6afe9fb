#!/usr/bin/env bash
# memperf agent's memory on a command that starts many short processes quickly (issue 31):
# a shell loop runs PROCS short programs back to back (fixtures/pagefault.c touching PAGES
# pages, through its named stack), then stays still for HOLD seconds, while the agent writes
# a pprof file per process group every INTERVAL seconds. The agent's VmRSS and VmHWM are read
# every half second; per run it prints the RSS when the loop ends, at the end of the still
# time (what the agent kept of the processes gone), the largest RSS and VmHWM, and the most
# VmHWM was above the RSS read beside it (a flush's transient allocations show there).
#
# Usage: benches/agent-churn.sh [ROUNDS] [PROCS]   (defaults: 3, 20000)
#        MEMPERF=path to the binary (else a release build is made);
#        MEMPERF_BEFORE=path to another build, whose agent runs at the same time on a loop
#        of its own in each round (a change's figures before and after, in the same minutes);
#        INTERVAL=window seconds (2), PAGES (20), HOLD=seconds still after the loop (12),
#        EVENT=what the agent samples (page-faults/period=10/).
# Run it alone on the machine: flock /tmp/memperf-machine.lock benches/agent-churn.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
PROCS=${2:-20000}
INTERVAL=${INTERVAL:-2}
PAGES=${PAGES:-20}
HOLD=${HOLD:-12}
EVENT=${EVENT:-page-faults/period=10/}
if [ -z "${MEMPERF:-}" ]; then
    cargo build --release --quiet
    MEMPERF=${CARGO_TARGET_DIR:-$PWD/target}/release/memperf
fi
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
cc -O2 -g -fno-omit-frame-pointer -fno-optimize-sibling-calls -o "$work/pagefault" fixtures/pagefault.c

# Starts build $2 as run $1 in the background: its agent's pid in $work/$1.pid.
start() {
    local label=$1 bin=$2
    rm -rf "$work/$label.out"
    "$bin" agent -e "$EVENT" --interval "$INTERVAL" --output "$work/$label.out" -- \
        sh -c "i=0; while [ \$i -lt $PROCS ]; do $work/pagefault $PAGES; i=\$((i + 1)); done;
               echo loop-done >&2; sleep $HOLD" 2>"$work/$label.log" &
    echo $! >"$work/$label.pid"
    pids+=("$!")
}

# Reads run $1's agent every half second until it exits; prints its figures (KiB).
watch() {
    local label=$1 pid
    pid=$(cat "$work/$label.pid")
    local rss hwm loop_rss=- max_rss=0 max_hwm=0 over=0 last=0
    while kill -0 "$pid" 2>/dev/null; do
        # One read of the status for both, so that they are of the same moment.
        read -r hwm rss < <(awk '$1 == "VmHWM:" { h = $2 } $1 == "VmRSS:" { r = $2 }
            END { print h, r }' "/proc/$pid/status" 2>/dev/null || true)
        if [ -n "$rss" ] && [ -n "$hwm" ]; then
            last=$rss
            [ "$rss" -gt "$max_rss" ] && max_rss=$rss
            [ "$hwm" -gt "$max_hwm" ] && max_hwm=$hwm
            [ $((hwm - rss)) -gt "$over" ] && over=$((hwm - rss))
            if [ "$loop_rss" = - ] && grep -q loop-done "$work/$label.log"; then loop_rss=$rss; fi
        fi
        sleep 0.5
    done
    wait "$pid" 2>/dev/null || true
    local windows
    windows=$(grep -c '^memperf agent: window' "$work/$label.log" || true)
    echo "$label: rss at loop end $loop_rss, at end $last, max $max_rss, max hwm $max_hwm, hwm over rss at most $over (KiB); $windows windows"
    find "$work/$label.out" -name '*.pb.gz' -delete 2>/dev/null || true
}

echo "$PROCS processes of $PAGES pages each, then $HOLD s still; windows of $INTERVAL s"
for r in $(seq "$ROUNDS"); do
    pids=()
    start "round $r memperf" "$MEMPERF"
    [ -n "${MEMPERF_BEFORE:-}" ] && start "round $r before " "$MEMPERF_BEFORE"
    if [ -n "${MEMPERF_BEFORE:-}" ]; then
        watch "round $r before " >"$work/before.txt" &
        watch "round $r memperf"
        wait
        cat "$work/before.txt"
    else
        watch "round $r memperf"
    fi
done
