#!/usr/bin/env bash
# --call-graph dwarf,auto against the fixed 8 KiB copy, frame pointers, perf and bpftrace
# on one workload: the page-fault fixture built without frame pointers touching PAGES pages
# (one fault each), every tool in every round, ROUNDS rounds after a warm-up round.
# Prints each tool's slowdown of the touching phase (the fixture times it itself, so start-up
# and the tools' own set-up do not count) as the minimum and median over rounds, the median
# of its ratio to bpftrace's and to perf -g's in the same round, and how many faults got a
# whole stack (main -> pf_level1 -> pf_level2 -> pf_level3 -> touch_pages).
#
# Usage: benches/auto-stacks.sh [PAGES] [ROUNDS]     (defaults: 200000 pages, 5 rounds)
# Needs perf; bpftrace is optional (its rows are left out without it).
set -euo pipefail
cd "$(dirname "$0")/.."
PAGES=${1:-200000}
ROUNDS=${2:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -g -fomit-frame-pointer -fno-optimize-sibling-calls -o "$work/pagefault" fixtures/pagefault.c
cargo build --release --quiet
MEMPERF=$PWD/target/release/memperf

python3 - "$work" "$PAGES" "$ROUNDS" "$MEMPERF" <<'PY'
import os, re, shutil, statistics, subprocess, sys
work, pages, rounds, memperf = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
prog = os.path.join(work, "pagefault")
env = dict(os.environ, PAGEFAULT_TIMING="1")
data = os.path.join(work, "run.data")
chain = ";main;pf_level1;pf_level2;pf_level3;touch_pages "

def memperf_rec(cg):
    return lambda: [memperf, "record", "-q", "-e", "page-faults", "--call-graph", cg,
                    "-o", data, "--", prog, str(pages)]

tools = {
    "alone": lambda: [prog, str(pages)],
    "memperf dwarf,auto": memperf_rec("dwarf,auto"),
    "memperf dwarf (8192)": memperf_rec("dwarf"),
    "memperf fp": memperf_rec("fp"),
    "perf -g (fp)": lambda: ["perf", "record", "-q", "-e", "page-faults", "-c", "1", "-g",
                             "-o", data, "--", prog, str(pages)],
    "perf dwarf": lambda: ["perf", "record", "-q", "-e", "page-faults", "-c", "1",
                           "--call-graph", "dwarf", "-o", data, "--", prog, str(pages)],
}
if shutil.which("bpftrace"):
    tools["bpftrace ustack (fp)"] = lambda: [
        "bpftrace", "-q", "-e", 'software:page-faults:1 /pid == cpid/ { @[ustack] = count(); }',
        "-c", f"{prog} {pages}"]

def whole(name):
    """Faults whose stack reaches main through the fixture's chain."""
    if name.startswith("memperf"):
        out = subprocess.run([memperf, "report", "--folded", "-i", data],
                             capture_output=True, text=True).stdout
    elif name.startswith("perf") and shutil.which("inferno-collapse-perf"):
        script = subprocess.run(["perf", "script", "-i", data], capture_output=True,
                                text=True).stdout
        out = subprocess.run(["inferno-collapse-perf"], input=script, capture_output=True,
                             text=True).stdout
    else:
        return None  # bpftrace's stacks are addresses; perf's need inferno to fold
    return sum(int(l.rsplit(" ", 1)[1]) for l in out.splitlines() if chain in l + " ")

def run(name):
    p = subprocess.run(tools[name](), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    if p.returncode != 0:
        sys.exit(f"{name} failed: {p.stderr[-2000:]}")
    m = re.search(r"touched \d+ pages in (\d+) us wall", p.stderr)
    return int(m.group(1)) / 1e6

walls = {n: [] for n in tools}
full = {}
for r in range(rounds + 1):
    for name in tools:
        w = run(name)
        if r == 0:
            continue  # warm-up
        walls[name].append(w)
        if r == 1:
            full[name] = whole(name)
        if os.path.exists(data):
            os.remove(data)

alone = walls["alone"]
bpf = walls.get("bpftrace ustack (fp)")
print(f"workload: {pages} page faults, no frame pointers; {rounds} rounds after a warm-up")
pg = walls["perf -g (fp)"]
print(f"{'':22} {'min slowdown':>13} {'median':>8} {'/bpftrace':>10} {'/perf -g':>9} {'whole stacks':>13}")
for name, ws in walls.items():
    if name == "alone":
        continue
    slow = [w / a for w, a in zip(ws, alone)]
    vs = f"{statistics.median(w / b for w, b in zip(ws, bpf)):.2f}" if bpf else "-"
    vg = statistics.median(w / g for w, g in zip(ws, pg))
    f = full.get(name)
    print(f"{name:22} {min(slow):12.2f}x {statistics.median(slow):7.2f}x {vs:>10} {vg:9.2f} "
          f"{'-' if f is None else f:>13}")
PY
