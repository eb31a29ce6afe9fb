#!/usr/bin/env bash
# The cost of leak tracing per malloc+free pair, side by side on one workload
# (fixtures/mallocbench.c: a depth-10 chain, malloc(32..95) then free, N times; it prints
# its own ns per iteration of the loop, so start-up and tracer set-up are not counted):
#   alone                      the workload untraced
#   floor                      the same three probes (malloc entry and return, free) counted
#                              by `perf stat` through perf probe: the kernel's trap cost
#   floor (3 probes sampled)   the same probes sampled on every hit by memperf record with a
#                              consumer that only advances the ring: the kernel's cost of
#                              exact accounting, below which no -s can go
#   memperf leak               default: every allocation's stack copied and unwound
#   memperf leak -s 100        exact accounting, one stack in 100
#   memleak-bpfcc -p           BCC's memleak, where it runs (bpfcc-tools and kernel headers,
#                              BCC_KERNEL_SOURCE pointing at them if needed)
#   memleak-bpfcc -s 100
# and the ratios the issue asks for: memperf's cost (time above alone) over memleak's.
#
# Usage: benches/compare-leak.sh [ITERATIONS] [RUNS]     (defaults: 200000, 3)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200000}
RUNS=${2:-3}
work=$(mktemp -d)
trap 'perf probe -q -d "memperfbench:*" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

cc -O2 -g -fno-omit-frame-pointer -fno-optimize-sibling-calls -o "$work/mallocbench" fixtures/mallocbench.c
cargo build --release --quiet
MEMPERF=$PWD/target/release/memperf
LIBC=$(ldd "$work/mallocbench" | awk '/libc.so/ {print $3}')

python3 - "$work" "$N" "$RUNS" "$MEMPERF" "$LIBC" <<'PY'
import os, re, shutil, signal, statistics, subprocess, sys, time
work, n, runs, memperf, libc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
prog = os.path.join(work, "mallocbench")

def ns_per_iter(stderr):
    m = re.search(r"ns_per_iter=(\d+)", stderr)
    if not m:
        sys.exit(f"no ns_per_iter in:\n{stderr}")
    return int(m.group(1))

def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr}")
    return ns_per_iter(p.stderr)

def attached(tracer, ready_after=None):
    """Starts the workload stopped (SIGSTOP before exec is not possible from python, so the
    workload is started by a shell that waits on a fifo), attaches the tracer with -p, and
    lets the workload run once the tracer has had time to attach."""
    fifo = os.path.join(work, "go")
    if os.path.exists(fifo):
        os.unlink(fifo)
    os.mkfifo(fifo)
    sh = subprocess.Popen(["sh", "-c", f'read x < {fifo}; exec {prog} {n}'],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    t = subprocess.Popen(tracer + ["-p", str(sh.pid)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    time.sleep(ready_after or 3.0)
    with open(fifo, "w") as f:
        f.write("go\n")
    _, err = sh.communicate()
    t.send_signal(signal.SIGINT)
    try:
        t.wait(timeout=60)
    except subprocess.TimeoutExpired:
        t.kill()
    return ns_per_iter(err)

configs = {"alone": lambda: run([prog, str(n)])}

# The floor: the probes memperf places, counted without sampling.
add = ["perf", "probe", "-q", "-x", libc]
ok = all(subprocess.run(add + ["-a", p], capture_output=True).returncode == 0 for p in
         ["memperfbench:malloc=malloc", "memperfbench:malloc_ret=malloc%return",
          "memperfbench:free=free+3"])
# perf names return probes after its own fashion (`..._return`): take the names it lists.
names = re.findall(r"(memperfbench:\S+)", subprocess.run(["perf", "probe", "-l"], capture_output=True, text=True).stdout)
if ok and len(names) == 3:
    configs["floor (perf stat, 3 probes)"] = lambda: run(
        ["perf", "stat", "-x,", "-e", ",".join(names), "--", prog, str(n)])
    # The kernel's cost of sampling them (one small sample per hit, nothing done with it):
    # what any tracer that matches every malloc with its free pays at least.
    configs["floor (3 probes sampled)"] = lambda: run(
        [memperf, "record", "-q", "-e", ",".join(names), "--call-graph", "none",
         "--consume", "none", "-o", os.path.join(work, "floor.data"), "--", prog, str(n)])
else:
    print("floor: perf probe could not place the probes; left out")

configs["memperf leak"] = lambda: run([memperf, "leak", "-c", f"{prog} {n}", "3600"])
configs["memperf leak -s 100"] = lambda: run([memperf, "leak", "-s", "100", "-c", f"{prog} {n}", "3600"])

memleak = shutil.which("memleak-bpfcc")
if memleak:
    probe = subprocess.run([memleak, "-p", str(os.getpid()), "1", "1"], capture_output=True, text=True, timeout=120)
    if probe.returncode == 0:
        configs["memleak-bpfcc"] = lambda: attached([memleak, "3600"], 15)
        configs["memleak-bpfcc -s 100"] = lambda: attached([memleak, "-s", "100", "3600"], 15)
    else:
        print("memleak-bpfcc does not run here:", (probe.stderr.strip().splitlines() or ["?"])[-1])
else:
    print("memleak-bpfcc is not installed (apt-get install bpfcc-tools); left out")

results = {}
for name, f in configs.items():
    vals = [f() for _ in range(runs)]
    results[name] = statistics.median(vals)
    print(f"{name:32s} {results[name]:8d} ns per malloc+free   (runs: {vals})")

alone = results["alone"]
cost = {k: max(v - alone, 1) for k, v in results.items() if k != "alone"}
print()
for k, v in cost.items():
    print(f"cost of {k:32s} {v:8d} ns per pair")
if "memleak-bpfcc" in cost:
    print(f"memperf leak / memleak        = {cost['memperf leak'] / cost['memleak-bpfcc']:.2f}   (goal <= 0.5)")
if "memleak-bpfcc -s 100" in cost:
    print(f"memperf -s 100 / memleak -s 100 = {cost['memperf leak -s 100'] / cost['memleak-bpfcc -s 100']:.2f}   (goal <= 0.33)")
if "memleak-bpfcc" in cost:
    print(f"memperf -s 100 / memleak        = {cost['memperf leak -s 100'] / cost['memleak-bpfcc']:.2f}")
PY
