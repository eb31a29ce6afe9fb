#!/usr/bin/env bash
# memperf rss's cost: a fixture that makes ALLOCS live allocations (malloc(64) from
# many_small) and then faults PAGES pages into one buffer (fault_big), run ROUNDS times,
# interleaved: the fixture alone, under `memperf leak` (the probes only), under `memperf rss`
# (the probes, every fault sampled with its address, and the join).
#
# Prints per configuration the minimum and median wall time, memperf's peak RSS (VmHWM,
# polled; it counts the ring buffers) and its peak anonymous RSS (RssAnon: the tables, the
# join), rss's report time (as rss reports it: from the end of tracing to the report
# written, frames named), and the join's own size as rss reports it.
#
# Usage: benches/rss-join.sh [ROUNDS] [ALLOCS] [PAGES] [MEMPERF]
#        (defaults: 5 rounds, 50000 allocations, 200000 pages, target/release/memperf)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
ALLOCS=${2:-50000}
PAGES=${3:-200000}
MEMPERF=${4:-}
if [ -z "$MEMPERF" ]; then
    cargo build --release --quiet
    MEMPERF=$PWD/target/release/memperf
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -g -fno-optimize-sibling-calls -fomit-frame-pointer -o "$work/rss" fixtures/rss.c -lpthread

python3 - "$ROUNDS" "$ALLOCS" "$PAGES" "$MEMPERF" "$work/rss" <<'EOF'
import re, statistics, subprocess, sys, time

rounds, allocs, pages, memperf, fixture = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
workload = f"{fixture} many {allocs} {pages}"
ring = ["-m", "16384"]
configs = {
    "fixture": [fixture, "many", allocs, pages],
    "leak": [memperf, "leak", *ring, "-o", "0", "-T", "1", "-c", workload],
    "rss": [memperf, "rss", *ring, "-T", "5", "-c", workload],
}

def status(pid, key):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0

def once(name, argv):
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    hwm = anon = 0
    import threading
    out = []
    def reader():
        for line in p.stdout:
            out.append(line)
    th = threading.Thread(target=reader)
    th.start()
    while p.poll() is None:
        if name != "fixture":
            hwm = max(hwm, status(p.pid, "VmHWM"))
            anon = max(anon, status(p.pid, "RssAnon"))
        time.sleep(0.02)
    th.join()
    err = p.stderr.read()
    end = time.monotonic()
    if p.returncode != 0:
        sys.exit(f"{name} failed ({p.returncode}): {err}")
    if re.search(r"lost [1-9]", err):
        print(f"warning: {name} lost events: {err.strip()}", file=sys.stderr)
    join = re.search(r"about (\d+) KiB\)", err) if name == "rss" else None
    built = re.search(r"report built and written in (\d+) ms", err) if name == "rss" else None
    report = int(built.group(1)) / 1000 if built else None
    return {"wall": end - t0, "hwm": hwm / 1024, "anon": anon / 1024,
            "report": report, "join_kib": int(join.group(1)) if join else None}

results = {k: [] for k in configs}
for r in range(rounds):
    for name, argv in configs.items():
        results[name].append(once(name, argv))
    print(f"round {r + 1}/{rounds}: " + ", ".join(
        f"{k} {v[-1]['wall']:.2f}s" for k, v in results.items()), file=sys.stderr)

def mm(vals, fmt):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    return f"{fmt.format(min(vals))} / {fmt.format(statistics.median(vals))}"

print(f"{allocs} live allocations, {pages} pages faulted, {rounds} rounds interleaved (min / median)")
print(f"{'':8} {'wall s':>16} {'peak RSS MiB':>16} {'peak anon MiB':>16} {'report s':>14} {'join KiB':>12}")
for name, rs in results.items():
    print(f"{name:8} {mm([x['wall'] for x in rs], '{:.2f}'):>16} "
          f"{mm([x['hwm'] for x in rs] if name != 'fixture' else [], '{:.0f}'):>16} "
          f"{mm([x['anon'] for x in rs] if name != 'fixture' else [], '{:.0f}'):>16} "
          f"{mm([x['report'] for x in rs], '{:.2f}'):>14} "
          f"{mm([x['join_kib'] for x in rs], '{:.0f}'):>12}")
base = statistics.median(x["wall"] for x in results["fixture"])
leak = statistics.median(x["wall"] for x in results["leak"])
rss = statistics.median(x["wall"] for x in results["rss"])
print(f"rss overhead (medians): {rss - base:+.2f} s vs the fixture alone, {rss - leak:+.2f} s vs leak alone")
EOF
