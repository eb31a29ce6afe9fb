#!/usr/bin/env bash
# A uprobe on malloc at full speed with DWARF stacks: what each recorder keeps and loses, and
# the CPU it spends. fixtures/deepmalloc.c: 6 threads x N mallocs from 22 KiB stacks
# (-O2 -fomit-frame-pointer), every hit copying 24 KiB of stack. In each round, in turn:
#   memperf before   MEMPERF_READER_NICE=0 -m 4096: the reader at the default priority and
#                    16 MiB rings, as before live::priority (or the binary OLD, if given)
#   memperf          the defaults: the reader at nice -15, 64 MiB rings (2 to 4 CPUs)
#   memperf auto     the default call graph, dwarf,auto (8 KiB copies until it is resized)
#   memperf fp       --call-graph fp, for scale (no stack copy)
#   perf             perf record -e probe_libc:malloc, perf's default rings (512 KiB)
#   perf -m 16384    perf record with rings as large as memperf's
# All with --call-graph dwarf,24576 (the copy that holds the stacks) unless said.
# Figures: hits recorded (the summary's samples), events lost (the tool's own count), the
# recorder's CPU (task-clock of its own process, not the workload's: perf stat --no-inherit)
# and the wall time of the run; medians and ranges over RUNS rounds.
#
# Usage: benches/probe-burst.sh [N] [RUNS] [OLD]   (defaults 8000 5; takes the machine lock)
# MEMPERF names the binary (default target/debug/memperf, which is built optimized).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${MEMPERF_LOCKED:-}" ]; then
    exec env MEMPERF_LOCKED=1 flock /tmp/memperf-machine.lock "$0" "$@"
fi
N=${1:-8000}
RUNS=${2:-5}
OLD=${3:-}
work=$(mktemp -d)
trap 'perf probe -q -d "probe_libc:malloc" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

cc -O2 -g -fno-optimize-sibling-calls -fomit-frame-pointer -pthread -o "$work/deepmalloc" \
    fixtures/deepmalloc.c
MEMPERF=${MEMPERF:-$PWD/target/debug/memperf}
[ -x "$MEMPERF" ] || cargo build --quiet
libc=$(ldd "$work/deepmalloc" | awk '/libc.so/ {print $3}')
perf probe -q -d "probe_libc:malloc" >/dev/null 2>&1 || true
perf probe -q -x "$libc" malloc

python3 - "$work" "$N" "$RUNS" "$MEMPERF" "$OLD" <<'PY'
import os, re, statistics, subprocess, sys, time
work, n, runs, memperf, old = sys.argv[1:6]
runs = int(runs)
prog = os.path.join(work, "deepmalloc")
out = os.path.join(work, "out.data")
stat = os.path.join(work, "stat.txt")
load = [prog, "6", n]
dwarf = ["--call-graph", "dwarf,24576"]

def memperf_case(binary, opts, env=None):
    return ("memperf", [binary, "record", "-e", "u:libc:malloc", *opts, "-o", out, "--", *load], env)

def perf_case(opts):
    return ("perf", ["perf", "record", "-e", "probe_libc:malloc", *opts, "-o", out, "--", *load], None)

before = (memperf_case(old, dwarf) if old else
          memperf_case(memperf, ["-m", "4096", *dwarf], {"MEMPERF_READER_NICE": "0"}))
cases = {
    "memperf before": before,
    "memperf": memperf_case(memperf, dwarf),
    "memperf auto": memperf_case(memperf, []),
    "memperf fp": memperf_case(memperf, ["--call-graph", "fp"]),
    "perf": perf_case(dwarf),
    "perf -m 16384": perf_case(["-m", "16384", *dwarf]),
}

def memperf_counts(err):
    kept = int(re.search(r"wrote (\d+) samples", err).group(1))
    lost = int(re.search(r"lost (\d+) events in", err).group(1))
    return kept, lost

def perf_counts(err):
    r = subprocess.run(["perf", "report", "-i", out, "--stats"], capture_output=True, text=True)
    m = re.search(r"^\s*SAMPLE events:\s+(\d+)", r.stdout, re.M)
    kept = int(m.group(1)) if m else 0
    # perf record's own count: "Processed N samples and lost P%!" (absent when none was).
    m = re.search(r"Processed (\d+) samples and lost ([\d.]+)%", err)
    lost = round(int(m.group(1)) * float(m.group(2)) / 100) if m else 0
    return kept, lost

def run(kind, cmd, env):
    full = ["perf", "stat", "--no-inherit", "-x,", "-e", "task-clock", "-o", stat, "--", *cmd]
    t = time.perf_counter()
    r = subprocess.run(full, capture_output=True, text=True, env={**os.environ, **(env or {})})
    wall = time.perf_counter() - t
    if r.returncode != 0:
        sys.exit(f"{cmd} failed:\n{r.stderr}")
    cpu_ms = next(float(l.split(",")[0]) for l in open(stat) if "task-clock" in l)
    kept, lost = memperf_counts(r.stderr) if kind == "memperf" else perf_counts(r.stderr)
    os.unlink(out)
    return kept, lost, cpu_ms, wall

subprocess.run(load, capture_output=True)  # warm up
res = {}
for _ in range(runs):
    for name, (kind, cmd, env) in cases.items():
        res.setdefault(name, []).append(run(kind, cmd, env))

hits = 6 * int(n)
print(f"6 threads x {n} mallocs (22 KiB stacks): {hits} hits; {runs} rounds, interleaved")
print(f"medians [min-max]")
print(f"{'':<16}{'recorded':>22}{'lost':>22}{'recorder CPU ms':>20}{'wall s':>20}")
def col(xs, fmt):
    return f"{fmt(statistics.median(xs))} [{fmt(min(xs))}-{fmt(max(xs))}]"
for name, rs in res.items():
    kept, lost, cpu, wall = zip(*rs)
    i = lambda x: f"{x:.0f}"
    f = lambda x: f"{x:.2f}"
    print(f"{name:<16}{col(kept, i):>22}{col(lost, i):>22}{col(cpu, i):>20}{col(wall, f):>20}")
PY
