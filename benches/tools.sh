#!/usr/bin/env bash
# The memory tools' cost beside `memperf record` on the same workload, interleaved round by
# round (a noisy VM: compare ratios taken in the same minute):
#   alone                     the page-fault workload (no-frame-pointer build), untraced
#   memperf record            -e page-faults, DWARF stacks unwound online
#   memperf faults            the same events and stacks, counted by stack
#   memperf ffaults           page faults with their address only (no stacks)
# The workload prints its own wall time of the touching phase, so start-up and tracer
# set-up are not counted. Prints per tool the median and minimum slowdown against alone,
# and the median of the tool's own time over record's, per round.
#
# Usage: benches/tools.sh [PAGES] [ROUNDS]      (defaults: 200000, 5)
set -euo pipefail
cd "$(dirname "$0")/.."
PAGES=${1:-200000}
ROUNDS=${2:-5}
cargo build --release --quiet
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -g -fomit-frame-pointer -fno-optimize-sibling-calls -o "$work/pagefault" fixtures/pagefault.c
MEMPERF=$PWD/target/release/memperf

python3 - "$work" "$PAGES" "$ROUNDS" "$MEMPERF" <<'PY'
import os, re, statistics, subprocess, sys
work, pages, rounds, memperf = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
prog = os.path.join(work, "pagefault")
env = dict(os.environ, PAGEFAULT_TIMING="1")
out = os.path.join(work, "r.data")
tools = {
    "alone": [prog, pages],
    "memperf record": [memperf, "record", "-q", "-e", "page-faults", "-o", out, "--", prog, pages],
    "memperf faults": [memperf, "faults", "-f", "--", prog, pages],
    "memperf ffaults": [memperf, "ffaults", "--", prog, pages],
}

def run(cmd):
    p = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr}")
    m = re.search(r"touched \d+ pages in (\d+) us wall", p.stderr)
    lost = re.search(r"lost (\d+)", p.stderr)
    return int(m.group(1)) / 1e6, int(lost.group(1)) if lost else 0

walls = {k: [] for k in tools}
lost = {k: 0 for k in tools}
for r in range(rounds + 1):
    order = list(tools) if r % 2 == 0 else list(reversed(tools))
    for name in order:
        w, l = run(tools[name])
        if r > 0:  # round 0 warms the caches and the fresh memory
            walls[name].append(w)
            lost[name] += l
alone = walls["alone"]
print(f"{pages} pages, {rounds} rounds after a warm-up")
print(f"{'':16} {'median s':>9} {'slowdown med':>13} {'min':>6} {'/record med':>12} {'lost':>6}")
for name, ws in walls.items():
    slow = [w / a for w, a in zip(ws, alone)]
    rec = [w / x for w, x in zip(ws, walls["memperf record"])]
    print(f"{name:16} {statistics.median(ws):9.3f} {statistics.median(slow):12.2f}x "
          f"{min(slow):5.2f}x {statistics.median(rec):11.2f}x {lost[name]:6d}")
PY
