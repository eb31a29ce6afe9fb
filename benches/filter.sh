#!/usr/bin/env bash
# What a tracepoint filter in the kernel saves: `kmem:kmalloc` recorded system-wide during a
# kernel-heavy load, unfiltered and with `--filter 'bytes_alloc > 4096'`, by memperf and by
# perf beside it, interleaved round by round (a noisy VM: compare ratios taken in the same
# minute). The load (fixtures/pipesize.c) makes BIG pipes grown to 512 KiB (one 8 KiB
# kmalloc each, what the filter keeps) and SMALL ones grown to 32 KiB (a few kmallocs of
# at most 640 bytes each, what it drops); it prints the wall time of its loops, so start-up
# and tracer set-up are not counted. All recordings take DWARF stacks (8 KiB copies), the
# default of both tools' `--call-graph dwarf`.
#
# Prints per configuration the median and minimum slowdown against the load alone, the
# samples written (counted by perf script) and what was lost (memperf: events and samples;
# perf: its "lost N chunks").
#
# Usage: benches/filter.sh [SMALL] [BIG] [ROUNDS]      (defaults: 100000, 1000, 5)
set -euo pipefail
cd "$(dirname "$0")/.."
SMALL=${1:-100000}
BIG=${2:-1000}
ROUNDS=${3:-5}
cargo build --release --quiet
command -v perf >/dev/null || { echo "filter.sh: perf is needed beside memperf" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -o "$work/pipesize" fixtures/pipesize.c
MEMPERF=$PWD/target/release/memperf

python3 - "$work" "$SMALL" "$BIG" "$ROUNDS" "$MEMPERF" <<'PY'
import os, re, statistics, subprocess, sys
work, small, big, rounds, memperf = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
load = [os.path.join(work, "pipesize"), big, small]
env = dict(os.environ, PIPESIZE_TIMING="1")
out = os.path.join(work, "r.data")
flt = ["--filter", "bytes_alloc > 4096"]
ev = ["-e", "kmem:kmalloc"]
configs = {
    "alone": load,
    "memperf unfiltered": [memperf, "record", "-a", *ev, "--call-graph", "dwarf", "-o", out, "--", *load],
    "memperf filtered": [memperf, "record", "-a", *ev, *flt, "--call-graph", "dwarf", "-o", out, "--", *load],
    "perf unfiltered": ["perf", "record", "-a", *ev, "--call-graph", "dwarf", "-o", out, "--", *load],
    "perf filtered": ["perf", "record", "-a", *ev, *flt, "--call-graph", "dwarf", "-o", out, "--", *load],
}

def samples(name):
    """The kmalloc samples in the file, as perf script counts them."""
    s = subprocess.run(["perf", "script", "-F", "event", "-i", out], capture_output=True, text=True)
    return sum(1 for l in s.stdout.splitlines() if "kmalloc" in l)

def run(name, cmd):
    p = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr}")
    m = re.search(r"ran \d+ rounds in (\d+) us wall", p.stderr)
    # memperf's summary counts lost events and lost samples; perf says "lost N chunks".
    lost = sum(int(a) + int(b) for a, b in
               re.findall(r"^  lost (\d+) events in \d+ LOST records, (\d+) lost samples", p.stderr, re.M))
    lost += sum(int(x) for x in re.findall(r"lost (\d+) chunks", p.stderr))
    n = samples(name) if name != "alone" else 0
    return int(m.group(1)) / 1e6, n, lost

walls = {k: [] for k in configs}
kept = {k: [] for k in configs}
lost = {k: 0 for k in configs}
for r in range(rounds + 1):
    order = list(configs) if r % 2 == 0 else list(reversed(configs))
    for name in order:
        w, n, l = run(name, configs[name])
        if r > 0:  # round 0 warms the caches and the fresh memory
            walls[name].append(w)
            kept[name].append(n)
            lost[name] += l
alone = walls["alone"]
print(f"load: {big} pipes of 512 KiB, {small} of 32 KiB; {rounds} rounds after a warm-up")
print(f"{'':20} {'median s':>9} {'slowdown med':>13} {'min':>6} {'samples med':>12} {'lost':>6}")
for name, ws in walls.items():
    slow = [w / a for w, a in zip(ws, alone)]
    print(f"{name:20} {statistics.median(ws):9.3f} {statistics.median(slow):12.2f}x "
          f"{min(slow):5.2f}x {int(statistics.median(kept[name])):12d} {lost[name]:6d}")
PY
