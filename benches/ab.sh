#!/usr/bin/env bash
# Two memperf binaries side by side, interleaved round by round on the same workloads, so a
# change can be judged on a noisy VM (compare ratios taken in the same minute):
#   record     memperf record -e page-faults of the page-fault workload (PAGES pages, dwarf
#              stacks unwound online): the workload's wall time under each recorder
#   report     memperf report --folded on one recording of it (made once, by OLD)
#   report-1m  memperf report --pprof on a recording of 1,000,000 faults: wall, peak RSS
#   script-1m  memperf script on the same file: wall, peak RSS (streaming keeps it flat)
#   leak       memperf leak -c on the malloc benchmark: ns per malloc+free pair
# Prints, per measure, the median of each binary and the median and minimum of NEW/OLD.
#
# Usage: benches/ab.sh OLD_MEMPERF NEW_MEMPERF [ROUNDS] [PAGES]   (defaults: 5, 200000)
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=$(realpath "${1:?usage: ab.sh OLD NEW [ROUNDS] [PAGES]}")
NEW=$(realpath "${2:?usage: ab.sh OLD NEW [ROUNDS] [PAGES]}")
ROUNDS=${3:-5}
PAGES=${4:-200000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cc -O2 -g -fomit-frame-pointer -fno-optimize-sibling-calls -o "$work/pagefault" fixtures/pagefault.c
cc -O2 -g -fno-omit-frame-pointer -fno-optimize-sibling-calls -o "$work/mallocbench" fixtures/mallocbench.c
"$OLD" record -q -e page-faults -m 8192 -o "$work/small.data" -- "$work/pagefault" "$PAGES" >/dev/null 2>&1
"$OLD" record -q -e page-faults -m 8192 -o "$work/big.data" -- "$work/pagefault" 1000000 >/dev/null 2>&1

python3 - "$work" "$ROUNDS" "$PAGES" "$OLD" "$NEW" <<'PY'
import os, re, statistics, subprocess, sys, time
work, rounds, pages, old, new = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]

def run(args, stdin=None):
    t0 = time.perf_counter()
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = p.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        sys.exit(f"failed: {' '.join(args)}\n{err}")
    return wall, usage.ru_maxrss / 1024, err

def record(b):
    out = os.path.join(work, "rec.data")
    return run([b, "record", "-q", "-e", "page-faults", "-o", out, "--", os.path.join(work, "pagefault"), pages])[0]

def leak(b):
    _, _, err = run([b, "leak", "-c", os.path.join(work, "mallocbench") + " 200000", "--folded"])
    m = re.search(r"ns_per_iter=(\d+)", err)
    return int(m.group(1)) if m else float("nan")

measures = {
    "record wall s": record,
    "report --folded wall s": lambda b: run([b, "report", "-q", "-i", os.path.join(work, "small.data"), "--folded"])[0],
    "report-1m --pprof wall s": lambda b: run([b, "report", "-q", "-i", os.path.join(work, "big.data"), "--pprof", os.path.join(work, "p.pb.gz")])[0],
    "report-1m --pprof RSS MiB": lambda b: run([b, "report", "-q", "-i", os.path.join(work, "big.data"), "--pprof", os.path.join(work, "p.pb.gz")])[1],
    "script-1m wall s": lambda b: run([b, "script", "-q", "-i", os.path.join(work, "big.data")])[0],
    "script-1m RSS MiB": lambda b: run([b, "script", "-q", "-i", os.path.join(work, "big.data")])[1],
    "leak ns/malloc+free": leak,
}
results = {k: ([], []) for k in measures}
for r in range(rounds + 1):
    for name, f in measures.items():
        pair = (f(old), f(new)) if r % 2 == 0 else tuple(reversed((f(new), f(old))))
        if r > 0:  # round 0 warms the caches and the fresh memory
            results[name][0].append(pair[0])
            results[name][1].append(pair[1])
print(f"{'measure':28} {'old median':>11} {'new median':>11} {'new/old median':>15} {'min':>6}")
for name, (a, b) in results.items():
    ratios = [y / x for x, y in zip(a, b) if x]
    print(f"{name:28} {statistics.median(a):11.3f} {statistics.median(b):11.3f} "
          f"{statistics.median(ratios):15.2f} {min(ratios):6.2f}")
PY
