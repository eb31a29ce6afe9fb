#!/usr/bin/env bash
# mmapsnoop's cost on a process doing nothing but mmap/munmap pairs (fixtures/mmapchurn.c),
# at RATE pairs a second (0: as fast as it can), beside perf recording the same syscall tracepoints without stacks, interleaved round by
# round after a warm-up: the workload's own loop time alone, under `memperf mmapsnoop`,
# and under `perf record -e syscalls:sys_{enter,exit}_{mmap,munmap}`. Prints the pairs per
# second alone, each tracer's slowdown (median and minimum) and what each lost.
#
# Usage: benches/mmapsnoop.sh [PAIRS] [ROUNDS] [RATE]   (defaults: 200000, 5, 100000)
set -euo pipefail
cd "$(dirname "$0")/.."
PAIRS=${1:-200000}
ROUNDS=${2:-5}
RATE=${3:-100000}
cargo build --release --quiet
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -o "$work/mmapchurn" fixtures/mmapchurn.c
MEMPERF=$PWD/target/release/memperf

python3 - "$work" "$PAIRS" "$ROUNDS" "$MEMPERF" "$RATE" <<'PY'
import os, re, statistics, subprocess, sys
work, pairs, rounds, memperf, rate = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
prog = os.path.join(work, "mmapchurn")
events = "syscalls:sys_enter_mmap,syscalls:sys_exit_mmap,syscalls:sys_enter_munmap,syscalls:sys_exit_munmap"
tools = {
    "alone": [prog, pairs, rate],
    "memperf mmapsnoop": [memperf, "mmapsnoop", "--", prog, pairs, rate],
    "perf record": ["perf", "record", "-q", "-e", events, "-o", os.path.join(work, "p.data"), "--", prog, pairs, rate],
}

def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr}")
    us = int(re.search(r"churned \d+ pairs in (\d+) us", p.stderr).group(1))
    lost = re.search(r"lost (\d+)", p.stderr)
    if cmd[0] == "perf":
        out = subprocess.run(["perf", "report", "--stats", "-i", os.path.join(work, "p.data")],
                             capture_output=True, text=True).stdout
        lost = re.search(r"LOST events:\s+(\d+)", out)
    return us / 1e6, int(lost.group(1)) if lost else 0

walls = {k: [] for k in tools}
lost = {k: 0 for k in tools}
for r in range(rounds + 1):
    for name in (tools if r % 2 == 0 else reversed(list(tools))):
        w, l = run(tools[name])
        if r > 0:
            walls[name].append(w)
            lost[name] += l
alone = walls["alone"]
print(f"{pairs} mmap/munmap pairs at {rate}/s (0: flat out), {rounds} rounds after a warm-up; alone: "
      f"{int(pairs) / statistics.median(alone):,.0f} pairs/s")
print(f"{'':18} {'median s':>9} {'slowdown med':>13} {'min':>6} {'lost':>8}")
for name, ws in walls.items():
    slow = [w / a for w, a in zip(ws, alone)]
    print(f"{name:18} {statistics.median(ws):9.3f} {statistics.median(slow):12.2f}x {min(slow):5.2f}x {lost[name]:8d}")
print("(perf's lost column counts its LOST records, not events)")
PY
