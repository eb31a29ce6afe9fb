#!/usr/bin/env bash
# The cost of a user probe per hit, memperf beside perf on the same probe, interleaved:
#   alone                  fixtures/probes.c untraced (probe_add runs N times)
#   memperf stat           `memperf stat -e u:BIN:probe_add`: counted (tracefs uprobe_events)
#   perf stat              `perf probe -x BIN probe_add` + `perf stat -e GROUP:add`
#   memperf record         `memperf record --call-graph dwarf -e u:BIN:probe_add`: sampled
#                          on every hit with an 8 KiB user stack, unwound while recording
#   perf record            `perf record --call-graph dwarf -e GROUP:add` on the same probe
# Each figure is (wall time of the run - wall time alone) / hits, in ns; minima and medians
# over RUNS rounds, the tools in turn within each round.
#
# Usage: benches/probes.sh [COUNTED_HITS] [SAMPLED_HITS] [RUNS]  (defaults 1000000 20000 5)
# MEMPERF names the binary (default target/debug/memperf, which is built optimized).
set -euo pipefail
cd "$(dirname "$0")/.."
COUNTED=${1:-1000000}
SAMPLED=${2:-20000}
RUNS=${3:-5}
work=$(mktemp -d)
group="memperfbench$$"
trap 'perf probe -q -d "$group:*" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

cc -O2 -g -fno-optimize-sibling-calls -o "$work/probes" fixtures/probes.c
MEMPERF=${MEMPERF:-$PWD/target/debug/memperf}
[ -x "$MEMPERF" ] || cargo build --quiet
perf probe -q -x "$work/probes" -a "$group:add=probe_add"

python3 - "$work" "$COUNTED" "$SAMPLED" "$RUNS" "$MEMPERF" "$group" <<'PY'
import os, statistics, subprocess, sys, time
work, counted, sampled, runs, memperf, group = sys.argv[1:7]
counted, sampled, runs = int(counted), int(sampled), int(runs)
prog = os.path.join(work, "probes")
probe = f"u:{prog}:probe_add"
out = os.path.join(work, "out.data")

def wall(cmd):
    t = time.perf_counter_ns()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter_ns() - t
    if r.returncode != 0:
        sys.exit(f"{cmd} failed:\n{r.stderr}")
    return dt

def cases(n):
    # probe_alloc (2N calls) and the USDT loop run too: they are the same in every case.
    return {
        "alone": [prog, str(n)],
        "memperf stat": [memperf, "stat", "-e", probe, "--", prog, str(n)],
        "perf stat": ["perf", "stat", "-e", f"{group}:add", "--", prog, str(n)],
        "memperf record": [memperf, "record", "-q", "--call-graph", "dwarf", "-e", probe,
                           "-o", out, "--", prog, str(n)],
        "perf record": ["perf", "record", "-q", "--call-graph", "dwarf", "-e", f"{group}:add",
                        "-o", out, "--", prog, str(n)],
    }

times = {}
for r in range(runs):
    for hits, names in ((counted, ["alone", "memperf stat", "perf stat"]),
                        (sampled, ["alone", "memperf record", "perf record"])):
        c = cases(hits)
        for name in names:
            times.setdefault((hits, name), []).append(wall(c[name]))
            if os.path.exists(out):
                os.unlink(out)

print(f"ns per probe hit above the untraced run ({runs} rounds, interleaved)")
print(f"{'':<16}{'hits':>9}{'min':>10}{'median':>10}")
for hits, names in ((counted, ["memperf stat", "perf stat"]),
                    (sampled, ["memperf record", "perf record"])):
    base = times[(hits, "alone")]
    for name in names:
        t = times[(hits, name)]
        per = [(x - min(base)) / hits for x in t]
        print(f"{name:<16}{hits:>9}{min(per):>10.0f}{statistics.median(per):>10.0f}")
PY
