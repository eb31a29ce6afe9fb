#!/usr/bin/env bash
# Runs the page-fault workload (no-frame-pointer build) alone, under
# `perf record --call-graph dwarf`, under memperf at its defaults, and under
# memperf's floor (same event attributes, a consumer that only advances the ring
# tail), and prints slowdown, samples lost, bytes per sample and profiler CPU time.
#
# Usage: benches/compare-perf.sh [PAGES] [RUNS]      (defaults: 200000 pages, 3 runs)
set -euo pipefail
cd "$(dirname "$0")/.."
PAGES=${1:-200000}
RUNS=${2:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cc -O2 -g -fomit-frame-pointer -fno-optimize-sibling-calls -o "$work/pagefault" fixtures/pagefault.c
cargo build --release --quiet
MEMPERF=$PWD/target/release/memperf

python3 - "$work" "$PAGES" "$RUNS" "$MEMPERF" <<'PY'
import os, re, resource, statistics, subprocess, sys
work, pages, runs, memperf = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
prog = os.path.join(work, "pagefault")
env = dict(os.environ, PAGEFAULT_TIMING="1")

def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime

def run(cmd):
    before = children_cpu()
    p = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    cpu = children_cpu() - before
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr}")
    m = re.search(r"touched \d+ pages in (\d+) us wall, (\d+) us cpu", p.stderr)
    wall, wcpu = int(m.group(1)) / 1e6, int(m.group(2)) / 1e6
    return wall, max(cpu - wcpu, 0.0), p.stderr

def samples_in(path):
    out = subprocess.run(["perf", "report", "--stats", "-i", path], capture_output=True, text=True).stdout
    m = re.search(r"SAMPLE events:\s+(\d+)", out)
    return int(m.group(1)) if m else 0

base = statistics.median(
    int(subprocess.run(["perf", "stat", "-x,", "-e", "page-faults", prog, "0"],
                       capture_output=True, text=True).stderr.split(",")[0]) for _ in range(3))
expected = pages + base

configs = {
    "alone": lambda f: [prog, str(pages)],
    "perf dwarf": lambda f: ["perf", "record", "-q", "-e", "page-faults", "-c", "1",
                             "--call-graph", "dwarf", "-o", f, "--", prog, str(pages)],
    "memperf": lambda f: [memperf, "record", "-q", "-e", "page-faults", "-o", f, "--", prog, str(pages)],
    "memperf floor": lambda f: [memperf, "record", "-q", "-e", "page-faults", "--consume", "none",
                                "-o", f, "--", prog, str(pages)],
}
results = {}
for name, mk in configs.items():
    walls, cpus, sizes, lost = [], [], [], []
    for i in range(runs):
        f = os.path.join(work, f"{name.replace(' ', '_')}.{i}.data")
        wall, cpu, _ = run(mk(f))
        walls.append(wall); cpus.append(cpu)
        if name not in ("alone", "memperf floor"):
            n = samples_in(f)
            sizes.append(os.path.getsize(f) / max(n, 1))
            lost.append(max(expected - n, 0))
            os.remove(f)
    results[name] = dict(wall=statistics.median(walls), cpu=statistics.median(cpus),
                         bps=statistics.median(sizes) if sizes else None,
                         lost=statistics.median(lost) if lost else None)

alone = results["alone"]["wall"]
print(f"workload: {pages} pages, no-frame-pointer build, {runs} runs (medians); baseline faults {base}")
print(f"{'':15} {'wall s':>8} {'slowdown':>9} {'prof cpu s':>11} {'lost':>8} {'B/sample':>9}")
for name, r in results.items():
    lost = "-" if r["lost"] is None else f"{r['lost']:.0f}"
    bps = "-" if r["bps"] is None else f"{r['bps']:.0f}"
    print(f"{name:15} {r['wall']:8.3f} {r['wall']/alone:8.2f}x {r['cpu']:11.3f} {lost:>8} {bps:>9}")
p, m, fl = results["perf dwarf"], results["memperf"], results["memperf floor"]
over = lambda r: r["wall"] / alone - 1
print()
print(f"overhead ratio memperf/perf (slowdown-1):  {over(m)/over(p):.2f}   (goal <= 0.5)")
print(f"bytes per sample memperf/perf:             {m['bps']/p['bps']:.4f}   (goal <= 0.05)")
print(f"profiler CPU memperf/perf:                 {m['cpu']/max(p['cpu'],1e-9):.2f}   (goal < 1)")
print(f"memperf above the floor (slowdown):        {m['wall']/fl['wall']:.2f}x")
PY
