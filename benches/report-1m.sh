#!/usr/bin/env bash
# Times `memperf report --flamegraph` and `memperf report --pprof` on a recording of
# 1,000,000 samples: the page-fault workload (no-frame-pointer build) touching 1,000,000
# pages, recorded by memperf with dwarf stacks. Goal: under 2 s each. Prints the recording's
# sample count and losses, then the median wall time and peak RSS of each output over RUNS.
#
# Usage: benches/report-1m.sh [PAGES] [RUNS]      (defaults: 1000000 pages, 3 runs)
set -euo pipefail
cd "$(dirname "$0")/.."
PAGES=${1:-1000000}
RUNS=${2:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cc -O2 -g -fomit-frame-pointer -fno-optimize-sibling-calls -o "$work/pagefault" fixtures/pagefault.c
cargo build --release --quiet
MEMPERF=$PWD/target/release/memperf

# Bigger rings than the default, so that a 2-CPU machine loses nothing of the burst.
"$MEMPERF" record -e page-faults -m 8192 -o "$work/m.data" -- "$work/pagefault" "$PAGES" \
    2>"$work/record.txt"
grep -E "^memperf: wrote|lost" "$work/record.txt"

python3 - "$work" "$RUNS" "$MEMPERF" <<'PY'
import os, statistics, subprocess, sys, time
work, runs, memperf = sys.argv[1], int(sys.argv[2]), sys.argv[3]
data = os.path.join(work, "m.data")

def run(args):
    t0 = time.perf_counter()
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        sys.exit(f"failed: {' '.join(args)}\n{p.stderr.read().decode()}")
    return wall, usage.ru_maxrss / 1024

outputs = {
    "--flamegraph": ["--flamegraph", os.path.join(work, "fg.svg")],
    "--pprof": ["--pprof", os.path.join(work, "p.pb.gz")],
    "--folded (reference)": ["--folded"],
}
print(f"file: {os.path.getsize(data) / 1e6:.1f} MB")
print(f"{'memperf report':24} {'median wall s':>14} {'peak RSS MiB':>13}   goal")
for name, extra in outputs.items():
    results = [run([memperf, "report", "-q", "-i", data] + extra) for _ in range(runs)]
    wall = statistics.median(r[0] for r in results)
    rss = max(r[1] for r in results)
    goal = "" if "reference" in name else ("< 2 s: met" if wall < 2 else "< 2 s: MISSED")
    print(f"{name:24} {wall:14.3f} {rss:13.1f}   {goal}")
PY
