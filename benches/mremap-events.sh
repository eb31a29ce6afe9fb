#!/usr/bin/env bash
# What following mremap moves costs a system-wide recording: `memperf record -a -e
# page-faults` with the two mremap tracepoints it adds (the default) against the same
# recording without them (MEMPERF_FOLLOW_MREMAP=0), interleaved round by round:
#   mremap     a worst case: a thread that grows a one-page mapping to two with mremap,
#              touches the new page and shrinks it back, CALLS times (2 mremap calls and
#              one fault each)
#   pagefault  fixtures/pagefault.c (PAGES faults, no mremap): what the extra per-CPU
#              tracepoint fds cost when nothing calls mremap
# For each: the workload's wall time under the recorder and the recorder's CPU time
# (user+system), medians of each mode and the median of the ratio with/without.
# Run it under the machine lock: flock /tmp/memperf-machine.lock benches/mremap-events.sh
#
# Usage: benches/mremap-events.sh [MEMPERF] [ROUNDS] [CALLS] [PAGES]
#        (defaults: target/release/memperf, 5, 200000, 200000)
set -euo pipefail
cd "$(dirname "$0")/.."
MEMPERF=$(realpath "${1:-target/release/memperf}")
ROUNDS=${2:-5}
CALLS=${3:-200000}
PAGES=${4:-200000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cat >"$work/mremaploop.c" <<'C'
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 200000, page = 4096;
    char *p = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    for (long i = 0; i < n; i++) {
        char *q = mremap(p, page, 2 * page, MREMAP_MAYMOVE);
        q[page] = 1;
        p = mremap(q, 2 * page, page, MREMAP_MAYMOVE);
        if (q == MAP_FAILED || p == MAP_FAILED)
            return 1;
    }
    printf("%ld calls\n", 2 * n);
    return 0;
}
C
cc -O2 -o "$work/mremaploop" "$work/mremaploop.c"
cc -O2 -g -fno-omit-frame-pointer -o "$work/pagefault" fixtures/pagefault.c

python3 - "$MEMPERF" "$ROUNDS" "$work" "$CALLS" "$PAGES" <<'PY'
import os, resource, statistics, subprocess, sys, time
memperf, rounds, work, calls, pages = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
loads = {"mremap": [f"{work}/mremaploop", calls], "pagefault": [f"{work}/pagefault", pages]}
modes = {"with": {}, "without": {"MEMPERF_FOLLOW_MREMAP": "0"}}

def run(load, mode):
    env = dict(os.environ, **modes[mode])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    subprocess.run([memperf, "record", "-q", "-a", "-e", "page-faults", "-o", "/dev/null",
                    "--", *loads[load]], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.monotonic() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu

for load in loads:
    run(load, "with")  # warm up
    res = {m: [] for m in modes}
    for r in range(rounds):
        order = list(modes) if r % 2 == 0 else list(reversed(modes))
        for m in order:
            res[m].append(run(load, m))
    for i, what in ((0, "wall s"), (1, "cpu s (recorder + workload)")):
        w = [x[i] for x in res["with"]]
        wo = [x[i] for x in res["without"]]
        ratios = [a / b for a, b in zip(w, wo)]
        print(f"{load:10} {what:28} with {statistics.median(w):.3f}  without "
              f"{statistics.median(wo):.3f}  ratio median {statistics.median(ratios):.3f} "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f})")
PY
