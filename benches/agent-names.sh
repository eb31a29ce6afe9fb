#!/usr/bin/env bash
# Whether memperf agent names every fault of short-lived processes (issue 31): a command runs
# fixtures/pagefault.c touching 250 pages N times back to back, the agent writes pprof files
# every 0.4 s, and go tool pprof counts the faults whose leaf is touch_pages (exactly 250 N
# when every one was named) and those whose leaf is [unknown], per run, with the samples the
# agent's window lines said it lost and could not place in a mapping. A process dropped
# while its last samples were still in the rings (the reaper timed by a clock read behind)
# shows as 250 [unknown] leaves and 250 touch_pages missing, with nothing lost.
#
# Usage: benches/agent-names.sh [RUNS] [N]   (defaults: 10, 400)
#        MEMPERF=path to a given binary (else a debug build is made);
#        MEMPERF_BEFORE=path to another build, run beside in each round.
# Run it alone on the machine: flock /tmp/memperf-machine.lock benches/agent-names.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-10}
N=${2:-400}
if [ -z "${MEMPERF:-}" ]; then
    cargo build --quiet
    MEMPERF=${CARGO_TARGET_DIR:-$PWD/target}/debug/memperf
fi
command -v go >/dev/null || { echo "go is needed (go tool pprof)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -g -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer -fno-optimize-sibling-calls \
    -o "$work/pagefault" fixtures/pagefault.c

# One run of binary $2, labelled $1: "LABEL touch_pages T [unknown] U lost L unmapped M".
one() {
    local label=$1 bin=$2 out="$work/out" log="$work/agent.log"
    rm -rf "$out"
    "$bin" agent --interval 0.4 --output "$out" -- \
        sh -c "for i in \$(seq $N); do $work/pagefault 250; done" >"$log" 2>&1
    local t=0 u=0 f
    for f in "$out"/*pagefault*; do
        read -r ft fu < <(go tool pprof -sample_index=0 -top -nodecount=1000 "$f" 2>/dev/null |
            awk '/ touch_pages$/{t+=$1} /\[unknown\]$/{u+=$1} END{print t+0, u+0}')
        t=$((t + ft)); u=$((u + fu))
    done
    local lost unmapped
    lost=$(awk '/^memperf agent: window/ {for (i = 2; i <= NF; i++) if ($i == "lost,") s += $(i - 1)}
        END {print s + 0}' "$log")
    unmapped=$(awk '/^memperf agent: window/ {for (i = 2; i < NF; i++)
        if ($i == "samples" && $(i + 1) == "at") s += $(i - 1)} END {print s + 0}' "$log")
    echo "$label touch_pages $t [unknown] $u lost $lost unmapped $unmapped"
}

echo "expected touch_pages per run: $((250 * N))"
for r in $(seq "$RUNS"); do
    one "run $r: memperf" "$MEMPERF"
    if [ -n "${MEMPERF_BEFORE:-}" ]; then
        one "run $r: before " "$MEMPERF_BEFORE"
    fi
done
