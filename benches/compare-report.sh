#!/usr/bin/env bash
# Times `memperf report --folded` beside `perf script | inferno-collapse-perf` on the
# page-fault workload (no-frame-pointer build): memperf on its own recording, memperf on
# perf's --call-graph dwarf recording (offline unwinding), and perf + inferno on perf's
# recording; and `memperf script | inferno-collapse-perf` on perf's recording, the same
# pipeline with memperf's script in perf's place. Prints the ratios against the goals, and
# how many samples of the workload's chain each output holds.
#
# Usage: benches/compare-report.sh [PAGES] [RUNS]      (defaults: 200000 pages, 3 runs)
# Installs inferno's collapser with cargo when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PAGES=${1:-200000}
RUNS=${2:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if ! command -v inferno-collapse-perf >/dev/null 2>&1; then
    echo "compare-report: installing inferno (cargo install inferno)" >&2
    cargo install --quiet --locked inferno
fi
cc -O2 -g -fomit-frame-pointer -fno-optimize-sibling-calls -o "$work/pagefault" fixtures/pagefault.c
cargo build --release --quiet
MEMPERF=$PWD/target/release/memperf

"$MEMPERF" record -q -e page-faults -o "$work/m.data" -- "$work/pagefault" "$PAGES"
perf record -q -e page-faults -c 1 --call-graph dwarf -o "$work/p.data" -- "$work/pagefault" "$PAGES" 2>/dev/null

python3 - "$work" "$RUNS" "$MEMPERF" <<'PY'
import os, re, statistics, subprocess, sys, time
work, runs, memperf = sys.argv[1], int(sys.argv[2]), sys.argv[3]
m, p = os.path.join(work, "m.data"), os.path.join(work, "p.data")
CHAIN = "main;pf_level1;pf_level2;pf_level3;touch_pages"

def samples(path):
    out = subprocess.run(["perf", "report", "--stats", "-i", path], capture_output=True, text=True).stdout
    found = re.search(r"SAMPLE events:\s+(\d+)", out)
    return int(found.group(1)) if found else 0

configs = {
    "memperf report (memperf file)": f"'{memperf}' report -q --folded -i '{m}'",
    "memperf report (perf dwarf file)": f"'{memperf}' report -q --folded -i '{p}'",
    "perf script | inferno (perf file)": f"perf script -i '{p}' 2>/dev/null | inferno-collapse-perf",
    "memperf script | inferno (perf file)": f"'{memperf}' script -q -i '{p}' | inferno-collapse-perf",
}
times, chains = {}, {}
for name, cmd in configs.items():
    walls = []
    for _ in range(runs):
        t0 = time.perf_counter()
        r = subprocess.run(["bash", "-c", "set -o pipefail; " + cmd], capture_output=True, text=True)
        walls.append(time.perf_counter() - t0)
        if r.returncode != 0:
            sys.exit(f"failed: {cmd}\n{r.stderr}")
    times[name] = statistics.median(walls)
    n = 0
    for line in r.stdout.splitlines():
        stack, _, count = line.rpartition(" ")
        if CHAIN in stack:
            n += int(count)
    chains[name] = n

print(f"files: memperf {os.path.getsize(m)/1e6:.1f} MB, {samples(m)} samples; "
      f"perf {os.path.getsize(p)/1e6:.1f} MB, {samples(p)} samples")
print(f"{'':36} {'wall s':>8} {'chain samples':>14}")
for name in configs:
    print(f"{name:36} {times[name]:8.3f} {chains[name]:>14}")
a, b, c, d = (times[k] for k in configs)
print()
print(f"perf+inferno / memperf on its own file:   {c/a:6.1f}x   (goal >= 10)")
print(f"perf+inferno / memperf on perf's file:    {c/b:6.1f}x   (goal >= 3)")
print(f"perf script / memperf script, each through inferno:   {c/d:6.1f}x")
PY
