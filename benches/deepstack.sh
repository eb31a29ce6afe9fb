#!/usr/bin/env bash
# Stacks deeper than the copy (fixtures/deepstack.c, no frame pointers): how many of the
# touch_pages stacks reach main, and the slowdown, under memperf at its defaults (8 KiB copy,
# finished from the live process), perf record --call-graph dwarf (8 KiB) and perf record
# --call-graph dwarf,65528, interleaved in each round; medians and minima over the rounds.
#
# Usage: benches/deepstack.sh [PAGES] [ROUNDS]     (defaults: 20000 pages, 5 rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
PAGES=${1:-20000}
ROUNDS=${2:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -g -fno-optimize-sibling-calls -fomit-frame-pointer -fno-stack-clash-protection \
    -o "$work/deepstack" fixtures/deepstack.c
cargo build --release --quiet
MEMPERF=$PWD/target/release/memperf

python3 - "$work" "$PAGES" "$ROUNDS" "$MEMPERF" <<'PY'
import os, statistics, subprocess, sys, time
work, pages, rounds, memperf = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
prog = os.path.join(work, "deepstack")

def wall(cmd):
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t

def whole(folded):
    """(touch_pages stacks, those reaching main)"""
    n = m = 0
    for line in folded.splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if frames and frames[-1] == "touch_pages":
            n += int(count)
            if "main" in frames:
                m += int(count)
    return n, m

def memperf_folded(f):
    return subprocess.run([memperf, "report", "--folded", "-i", f], capture_output=True,
                          text=True, check=True).stdout

def perf_folded(f):
    s = subprocess.run(["perf", "script", "-i", f], capture_output=True, text=True).stdout
    return subprocess.run(["inferno-collapse-perf"], input=s, capture_output=True,
                          text=True).stdout

for mode in ["buffer", "deep"]:
    args = [prog, mode, pages, "300"]
    tools = {
        "alone": (lambda f: args, None),
        "memperf": (lambda f: [memperf, "record", "-q", "-m", "8192", "-o", f, "--"] + args,
                    memperf_folded),
        "perf dwarf": (lambda f: ["perf", "record", "-q", "-m", "8192", "-e", "page-faults",
                                  "-c", "1", "--call-graph", "dwarf", "-o", f, "--"] + args,
                       perf_folded),
        "perf dwarf,65528": (lambda f: ["perf", "record", "-q", "-m", "8192", "-e",
                                        "page-faults", "-c", "1", "--call-graph",
                                        "dwarf,65528", "-o", f, "--"] + args, perf_folded),
    }
    wall(args)  # warm up
    times = {k: [] for k in tools}
    chains = {}
    for r in range(rounds):
        for name, (mk, fold) in tools.items():
            f = os.path.join(work, f"{name.replace(' ', '_')}.data")
            if os.path.exists(f):
                os.remove(f)
            times[name].append(wall(mk(f)))
            if fold and r == 0:
                chains[name] = whole(fold(f))
    print(f"\n{mode}: {pages} faults in touch_pages, {rounds} interleaved rounds")
    print(f"{'':18} {'median s':>9} {'min s':>7} {'slowdown med':>13} {'min':>6}  whole chains")
    base_med = statistics.median(times["alone"])
    base_min = min(times["alone"])
    for name, ts in times.items():
        med, mn = statistics.median(ts), min(ts)
        ch = chains.get(name)
        chs = "" if ch is None else f"{ch[1]} of {ch[0]} ({100*ch[1]/max(ch[0],1):.1f}%)"
        print(f"{name:18} {med:9.3f} {mn:7.3f} {med/base_med:12.2f}x {mn/base_min:5.2f}x  {chs}")
PY
