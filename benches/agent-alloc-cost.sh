#!/usr/bin/env bash
# memperf agent's cost beside memperf record of the same events on allocation-heavy
# workloads (issue 31's Cost: agent-cost.sh is the fault-heavy half, this the allocation
# half), interleaved round by round after a warm-up round:
#   pairs    a loop of PAIRS calloc/free pairs, sampled by uprobes on libc's calloc and free
#            (-e u:libc:calloc,u:libc:free: every call, a DWARF stack each, as both tools
#            take them by default)
#   otelmem  fixtures/otelmem.c making 2*N allocations through OpenTelemetry's memory
#            contract (USDT otel_memory:alloc and :free, 3 in 4 blocks freed): the agent
#            with --otel-memory, record with the same two probes given by -e (the agent copies
#            no stack at free, record does: the contract's free needs none)
# Tools per workload: alone, memperf record (into a file), memperf agent (pprof files
# every second). Prints per tool the median of the workload's own timed phase, its slowdown
# against alone, the tracer's own CPU (the run's CPU, the workload's children included, less
# the CPU the workload counted itself) per event, and the events the tool said it lost. Then,
# for SECS, the agent's and record's RSS every 5 s over a run of the pairs loop repeated
# (the agent's must stay flat; record's holds no samples either, it writes them).
#
# Usage: benches/agent-alloc-cost.sh [PAIRS] [N] [ROUNDS] [SECS]   (100000 20000 5 60)
#        MEMPERF=path to bench a given binary (else a release build is made).
# Run it alone on the machine: it takes the lock itself where /tmp/memperf-machine.lock
# exists. Needs root (uprobes).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -e /tmp/memperf-machine.lock ] && [ -z "${MEMPERF_LOCKED:-}" ]; then
    exec env MEMPERF_LOCKED=1 flock /tmp/memperf-machine.lock "$0" "$@"
fi
PAIRS=${1:-100000}
N=${2:-20000}
ROUNDS=${3:-5}
SECS=${4:-60}
if [ -z "${MEMPERF:-}" ]; then
    cargo build --release --quiet
    MEMPERF=${CARGO_TARGET_DIR:-$PWD/target}/release/memperf
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/pairs.c" <<'EOF'
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
/* PAIRS calloc/free pairs, timed by the program itself (wall and its own CPU). */
__attribute__((noinline)) void pairs(long n) {
    for (long i = 0; i < n; i++) {
        void *p = calloc(1, 16 + (i & 63));
        if (!p)
            abort();
        free(p);
    }
}
int main(int argc, char **argv) {
    long n = atol(argv[1]);
    struct timespec a, b;
    struct rusage r0, r1;
    clock_gettime(CLOCK_MONOTONIC, &a);
    getrusage(RUSAGE_SELF, &r0);
    pairs(n);
    clock_gettime(CLOCK_MONOTONIC, &b);
    getrusage(RUSAGE_SELF, &r1);
    fprintf(stderr, "workload_ms=%.3f cpu_ms=%.3f\n",
            (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6,
            (r1.ru_utime.tv_sec - r0.ru_utime.tv_sec + r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) * 1e3 +
                (r1.ru_utime.tv_usec - r0.ru_utime.tv_usec + r1.ru_stime.tv_usec - r0.ru_stime.tv_usec) / 1e3);
    return 0;
}
EOF
cc -O2 -g -fno-omit-frame-pointer -o "$work/pairs" "$work/pairs.c"
cc -O2 -g -fno-omit-frame-pointer -o "$work/otelmem" fixtures/otelmem.c

python3 - "$work" "$PAIRS" "$N" "$ROUNDS" "$SECS" "$MEMPERF" <<'PY'
import os, re, shutil, statistics, subprocess, sys, time
work, pairs, n, rounds, secs, memperf = sys.argv[1:]
rounds, secs = int(rounds), int(secs)
out = os.path.join(work, "r.data")
adir = os.path.join(work, "agent")
env = dict(os.environ, OTELMEM_TIMING="1")
pairs_cmd = [os.path.join(work, "pairs"), pairs]
otel = os.path.join(work, "otelmem")
otel_cmd = [otel, n, "0"]
# otelmem frees 3 blocks in 4 of each function's N, and one block it never reported.
kept = (int(n) + 3) // 4
workloads = {
    "pairs": (pairs_cmd, "u:libc:calloc,u:libc:free", [], 2 * int(pairs)),
    "otelmem": (otel_cmd, f"sdt:{otel}:otel_memory:alloc,sdt:{otel}:otel_memory:free",
                ["--otel-memory", otel], 2 * int(n) + 2 * (int(n) - kept) + 1),
}

def tools(cmd, events, agent_flags):
    agent_events = [] if agent_flags else ["-e", events]
    return {
        "alone": cmd,
        "memperf record": [memperf, "record", "-e", events, "-o", out, "--"] + cmd,
        "memperf agent": [memperf, "agent"] + agent_events + agent_flags
                         + ["--interval", "1", "--output", adir, "--"] + cmd,
    }

def lost(err):
    m = re.search(r"lost (\d+) events in \d+ LOST records, (\d+) lost samples", err)
    if m:
        return int(m.group(1)) + int(m.group(2))
    return sum(int(x) for x in re.findall(r"samples, \d+ profiles, (\d+) lost", err))

def run(cmd):
    shutil.rmtree(adir, ignore_errors=True)
    if os.path.exists(out):
        os.remove(out)
    p = subprocess.Popen(cmd, env=env, cwd=work, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    if status != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{err[-3000:]}")
    m = re.search(r"workload_ms=([0-9.]+) cpu_ms=([0-9.]+)", err)
    wall, own = float(m.group(1)) / 1e3, float(m.group(2)) / 1e3
    return wall, ru.ru_utime + ru.ru_stime - own, lost(err)

for wname, (cmd, events, agent_flags, nevents) in workloads.items():
    ts = tools(cmd, events, agent_flags)
    for t in ts.values():
        run(t)  # warm up
    res = {k: [] for k in ts}
    for r in range(rounds):
        for name, t in ts.items():
            res[name].append(run(t))
    alone = statistics.median(w for w, _, _ in res["alone"])
    print(f"{wname}: {nevents} events a run ({events.replace(work, '$work')}), {rounds} rounds")
    print(f"  {'tool':16} {'wall s':>9} {'slowdown':>9} {'tracer cpu s':>13} {'us/event':>9} {'lost':>6}")
    for name, rs in res.items():
        wall = statistics.median(w for w, _, _ in rs)
        cpu = statistics.median(c for _, c, _ in rs)
        nlost = max(l for _, _, l in rs)
        per = cpu / nevents * 1e6 if name != "alone" else 0.0
        print(f"  {name:16} {wall:9.3f} {wall / alone:9.1f} {cpu:13.3f} {per:9.2f} {nlost:6}")

if secs <= 0:
    sys.exit(0)

def rss(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for l in f:
                if l.startswith("VmRSS:"):
                    return int(l.split()[1])
    except OSError:
        pass
    return 0

loop = f"end=$(($(date +%s) + {secs})); while [ $(date +%s) -lt $end ]; do {pairs_cmd[0]} 20000; done"
for name, cmd in [
    ("memperf agent", [memperf, "agent", "-q", "-e", "u:libc:calloc,u:libc:free", "--interval", "5",
                       "--output", adir, "--", "sh", "-c", loop]),
    ("memperf record", [memperf, "record", "-q", "-e", "u:libc:calloc,u:libc:free", "-o", out,
                        "--", "sh", "-c", loop]),
]:
    shutil.rmtree(adir, ignore_errors=True)
    p = subprocess.Popen(cmd, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    series = []
    while p.poll() is None:
        time.sleep(5)
        series.append(rss(p.pid) // 1024)
    print(f"{name} RSS MiB every 5 s over {secs} s of calloc/free: {' '.join(str(s) for s in series if s)}")
PY
