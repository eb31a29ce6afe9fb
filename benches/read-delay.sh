#!/usr/bin/env bash
# How soon `memperf record` (default --call-graph dwarf,auto) unwinds a stack that went past
# its copy, which it finishes from the live process, true only while the thread is still in
# the frames sampled. Workloads (fixtures/deepstack.c, no frame pointers, the buffer's stack:
# no copy size holds it):
#   paced:  1000 faults spread over 0.6 s, then the process exits at once (short-lived);
#   buffer: PAGES faults, then 300 ms in touch_pages;
#   idle:   `sleep 2` (what reading the rings every millisecond costs when nothing comes).
# Binaries, interleaved in each of ROUNDS rounds after a warm-up round:
#   alone; new (target/release/memperf: the rings read every ms); new before (the same
#   binary with MEMPERF_PROMPT_READ_MS=0: read at the watermark or the 100 ms poll, as
#   before); old (OLD, a memperf built from main in another directory, if given).
# Prints per workload and binary: wall time (median, min) and slowdown against alone, the
# recorder's CPU time beyond the workload's own (median; from wait4), the stacks reaching
# main, and the summary's delay line (median, p99, longest, of the first round).
#
# Usage: benches/read-delay.sh [OLD] [PAGES] [ROUNDS]   (defaults: none, 20000, 5)
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${1:-}
PAGES=${2:-20000}
ROUNDS=${3:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -g -fno-optimize-sibling-calls -fomit-frame-pointer -fno-stack-clash-protection \
    -o "$work/deepstack" fixtures/deepstack.c
cargo build --release --quiet
MEMPERF=$PWD/target/release/memperf

python3 - "$work" "$PAGES" "$ROUNDS" "$MEMPERF" "$OLD" <<'PY'
import os, re, statistics, subprocess, sys, time
work, pages, rounds, memperf, old = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
prog = os.path.join(work, "deepstack")
data = os.path.join(work, "run.data")

workloads = {
    "paced": [prog, "paced", "1000", "600"],
    "buffer": [prog, "buffer", pages, "300"],
    "idle": ["sleep", "2"],
}
binaries = {"alone": None, "new": (memperf, "1"), "new before": (memperf, "0")}
if old:
    binaries["old (main)"] = (old, None)

def run(name, args):
    """(wall s, CPU s of the process tree, stderr)"""
    b = binaries[name]
    env = dict(os.environ)
    cmd = args
    if b is not None:
        exe, prompt = b
        if prompt is not None:
            env["MEMPERF_PROMPT_READ_MS"] = prompt
        if os.path.exists(data):
            os.remove(data)
        cmd = [exe, "record", "-e", "page-faults", "-o", data, "--"] + args
    t = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    if status != 0:
        sys.exit(f"{name} {args} failed: {err[-2000:]}")
    return wall, ru.ru_utime + ru.ru_stime, err

def whole():
    """(touch_pages stacks, those reaching main)"""
    out = subprocess.run([memperf, "report", "--folded", "-i", data], capture_output=True,
                         text=True, check=True).stdout
    n = m = 0
    for line in out.splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if frames and frames[-1] == "touch_pages":
            n += int(count)
            if "main" in frames:
                m += int(count)
    return n, m

for wl, args in workloads.items():
    walls = {b: [] for b in binaries}
    cpus = {b: [] for b in binaries}
    chains, delays = {b: [] for b in binaries}, {}
    for r in range(rounds + 1):
        for b in binaries:
            w, c, err = run(b, args)
            if r == 0:
                continue  # warm-up
            walls[b].append(w)
            cpus[b].append(c)
            if binaries[b] is not None and wl != "idle":
                chains[b].append(whole())
            m = re.search(r"\n\s+read (\S+) ms after they were sampled \(median; 99% within "
                          r"(\S+) ms, the longest (\S+) ms\)", err)
            if m and b not in delays:
                delays[b] = "{} / {} / {} ms".format(*m.groups())
    print(f"\n{wl}: {' '.join(os.path.basename(a) for a in args)}; {rounds} interleaved rounds")
    print(f"{'':12} {'median s':>9} {'min s':>7} {'slowdown':>9} {'recorder cpu':>13}  "
          f"{'reach main (min..max)':24} delay p50 / p99 / max")
    base, base_cpu = statistics.median(walls["alone"]), statistics.median(cpus["alone"])
    for b in binaries:
        med, mn = statistics.median(walls[b]), min(walls[b])
        extra = statistics.median(cpus[b]) - base_cpu
        ch = chains[b]
        if ch:
            pct = [100 * m / max(n, 1) for n, m in ch]
            chs = f"{min(pct):.1f}%..{max(pct):.1f}% of {ch[0][0]}"
        else:
            chs = ""
        print(f"{b:12} {med:9.3f} {mn:7.3f} {med / base:8.2f}x {extra * 1000:10.0f} ms  "
              f"{chs:24} {delays.get(b, '')}")
PY
