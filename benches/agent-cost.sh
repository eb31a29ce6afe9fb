#!/usr/bin/env bash
# memperf agent's cost beside memperf record of the same events, on a fault-heavy workload
# (fixtures/pagefault.c touching PAGES fresh pages; its mmap and brk calls are sampled
# too), interleaved round by round (a noisy VM: compare ratios taken in
# the same minute):
#   alone            the workload, untraced
#   memperf record   -e page-faults,syscalls:sys_enter_mmap,syscalls:sys_enter_brk into a file
#   memperf agent    the same events, aggregated and written as pprof every second
# Prints per tool the median slowdown of the workload's own timed phase against alone, the
# tracer's CPU per event (the run's CPU less the workload's own), and then, for SECS, the
# agent's and record's RSS every 5 s over a system-wide run beside a workload in a loop (the
# agent's must stay flat).
#
# Usage: benches/agent-cost.sh [PAGES] [ROUNDS] [SECS]    (defaults: 200000, 5, 60)
#        MEMPERF=path to bench a given binary (else a release build is made);
#        MEMPERF_BEFORE=path to another build, whose agent runs beside in each round (a change's
#        figures before and after, in the same run).
# Run it alone on the machine: flock /tmp/memperf-machine.lock benches/agent-cost.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PAGES=${1:-200000}
ROUNDS=${2:-5}
SECS=${3:-60}
if [ -z "${MEMPERF:-}" ]; then
    cargo build --release --quiet
    MEMPERF=$PWD/target/release/memperf
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -g -fno-omit-frame-pointer -fno-optimize-sibling-calls -o "$work/pagefault" fixtures/pagefault.c

python3 - "$work" "$PAGES" "$ROUNDS" "$SECS" "$MEMPERF" "${MEMPERF_BEFORE:-}" <<'PY'
import os, re, shutil, statistics, subprocess, sys, time
work, pages, rounds, secs, memperf = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
before = sys.argv[6]
prog = os.path.join(work, "pagefault")
env = dict(os.environ, PAGEFAULT_TIMING="1")
events = "page-faults,syscalls:sys_enter_mmap,syscalls:sys_enter_brk"
out = os.path.join(work, "r.data")
adir = os.path.join(work, "agent")
tools = {
    "alone": [prog, pages],
    "memperf record": [memperf, "record", "-q", "-e", events, "-o", out, "--", prog, pages],
    "memperf agent": [memperf, "agent", "-q", "-e", events, "--interval", "1", "--output", adir, "--", prog, pages],
}
if before:
    tools["agent (before)"] = [before] + tools["memperf agent"][1:]

def run(cmd):
    shutil.rmtree(adir, ignore_errors=True)
    if os.path.exists(out):
        os.remove(out)
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, status, ru = os.wait4(p.pid, 0)
    err = p.stderr.read()
    if status != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{err}")
    m = re.search(r"touched \d+ pages in (\d+) us wall", err)
    return int(m.group(1)) / 1e6, ru.ru_utime + ru.ru_stime

run(tools["alone"])  # warm up
res = {k: [] for k in tools}
for r in range(rounds):
    for name, cmd in tools.items():
        res[name].append(run(cmd))
alone_wall = statistics.median(w for w, _ in res["alone"])
alone_cpu = statistics.median(c for _, c in res["alone"])
print(f"workload: {pages} pages, {rounds} rounds, events {events}")
print(f"{'tool':16} {'wall s (median)':>16} {'slowdown':>9} {'tracer cpu s':>13} {'us/event':>9}")
for name, rs in res.items():
    wall = statistics.median(w for w, _ in rs)
    cpu = statistics.median(c for _, c in rs) - alone_cpu
    per = cpu / int(pages) * 1e6
    print(f"{name:16} {wall:16.3f} {wall / alone_wall:9.2f} {cpu:13.3f} {per:9.2f}")

if secs <= 0:
    sys.exit(0)
# RSS over a long system-wide run, a fault loop beside it.
loop = subprocess.Popen(["sh", "-c", f"while :; do {prog} 20000; done"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                        start_new_session=True)
def rss(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for l in f:
                if l.startswith("VmRSS:"):
                    return int(l.split()[1])
    except OSError:
        return 0
    return 0
try:
    for name, cmd in [
        ("memperf agent -a", [memperf, "agent", "-q", "-e", events, "--interval", "5",
                              "--output", adir, "--duration", str(secs)]),
        ("memperf record -a", [memperf, "record", "-q", "-a", "-e", events, "-o", out,
                               "--duration", str(secs)]),
    ]:
        shutil.rmtree(adir, ignore_errors=True)
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        series = []
        while p.poll() is None:
            time.sleep(5)
            series.append(rss(p.pid) // 1024)
        print(f"{name} RSS MiB every 5 s: {' '.join(str(s) for s in series if s)}")
finally:
    os.killpg(loop.pid, 9)
    loop.wait()
PY
