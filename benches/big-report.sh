#!/usr/bin/env bash
# `memperf report` on a large system-wide recording beside `perf report` on the same file:
# wall time, CPU time and peak RSS of each, the tools interleaved in every round.
#
# The recording is memperf's defaults (`record -a -e page-faults -c 1`: dwarf,auto stacks
# unwound while recording) during a compile load (gcc -O2 of generated C files two at a
# time, with short-lived commands beside it) for SECS seconds. It is made once and kept in
# DATA (default /tmp/memperf-big-report): delete it, or pass another DATA, to make it again.
# A second recording of the same load by `perf record -a -e page-faults -c 1 -g` (frame
# pointers) is read by both tools too.
#
# Per file, each round runs, in turn:
#   memperf report (text)          vs  perf report --stdio --no-children
#   memperf report --folded        vs  perf report --stdio --no-children -g folded,0,caller,count
#   memperf report --pprof FILE
# and prints the medians and the ratios perf/memperf of wall and CPU time, and both peak RSS.
# memperf's text report is of self stacks, as perf's --no-children is; perf's default
# (children) adds an entry per caller of every sample: on 1.8 M samples of a 60 s
# recording it took 222 s and 12.8 GB, more than a round here can afford.
#
# Usage: benches/big-report.sh [ROUNDS] [SECS] [DATA]   (defaults: 5 rounds, 60 s, see above)
# ONLY=memperf.data (or perf.data) reads one of the two files.
# Run it alone (it records the whole machine): flock /tmp/memperf-machine.lock benches/...
# MEMPERF=path picks the binary (default: target/release/memperf, built here); OLD=path adds
# an older binary's runs beside it (before/after figures).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
SECS=${2:-60}
DATA=${3:-/tmp/memperf-big-report}
if [ -z "${MEMPERF:-}" ]; then
    cargo build --release --quiet
    MEMPERF=$PWD/target/release/memperf
fi
mkdir -p "$DATA"

make_load() {
    for i in $(seq 1 16); do
        python3 - "$DATA/load/src$i.c" "$i" <<'PY'
import sys
out, n = sys.argv[1], int(sys.argv[2])
with open(out, "w") as f:
    f.write("#include <stdio.h>\n#include <string.h>\n")
    for k in range(300):
        f.write(f"""
struct s{k} {{ int a[{k % 7 + 1}]; double d; char name[32]; }};
static int helper{k}(struct s{k} *p, int x) {{
    int acc = 0;
    for (int i = 0; i < x; i++) acc += p->a[i % {k % 7 + 1}] * (i ^ {n});
    snprintf(p->name, sizeof p->name, "v%d", acc);
    return acc + (int)strlen(p->name);
}}
int f{n}_{k}(int x) {{ struct s{k} v = {{{{0}}}}; v.d = x; return helper{k}(&v, x) + {k}; }}
""")
PY
    done
    cat >"$DATA/load/load.sh" <<'EOF'
#!/bin/sh
# A compile load for $1 seconds: gcc -O2 two at a time, short-lived commands beside it.
end=$(( $(date +%s) + $1 ))
dir=$(dirname "$0")
while [ "$(date +%s)" -lt "$end" ]; do
    ls "$dir"/src*.c | xargs -P 2 -I{} gcc -O2 -c -o /dev/null {} &
    for j in 1 2 3 4 5 6 7 8; do ls /usr/lib >/dev/null; wc -l /etc/passwd >/dev/null; sh -c 'echo $$' >/dev/null; done
    wait
done
EOF
    chmod +x "$DATA/load/load.sh"
}

if [ ! -s "$DATA/memperf.data" ] || [ ! -s "$DATA/perf.data" ]; then
    mkdir -p "$DATA/load"
    make_load
    rm -f "$DATA/memperf.data" "$DATA/perf.data"
    "$DATA/load/load.sh" $((SECS + 2)) &
    "$MEMPERF" record -q -a -e page-faults -c 1 --duration "$SECS" -o "$DATA/memperf.data" \
        2>"$DATA/memperf-record.txt" || true
    wait
    "$DATA/load/load.sh" $((SECS + 2)) &
    perf record -q -a -e page-faults -c 1 -g -o "$DATA/perf.data" -- sleep "$SECS" \
        2>"$DATA/perf-record.txt" || true
    wait
fi

python3 - "$DATA" "$ROUNDS" "$MEMPERF" "${OLD:-}" "${ONLY:-}" <<'PY'
import os, re, statistics, subprocess, sys, time
data, rounds, memperf, old, only = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]

def samples(path):
    out = subprocess.run(["perf", "report", "--stats", "-i", path],
                         capture_output=True, text=True).stdout
    found = re.search(r"SAMPLE events:\s+(\d+)", out)
    return int(found.group(1)) if found else 0

def run(args):
    """Wall s, CPU s (user+system) and peak RSS MiB of one run, as the kernel counts them."""
    t0 = time.perf_counter()
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        sys.exit(f"failed: {' '.join(args)}\n{err.decode(errors='replace')}")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024

def configs(path):
    pp = os.path.join(data, "out.pb.gz")
    c = {
        "memperf report (text)": [memperf, "report", "-q", "-i", path],
        "perf report --no-children": ["perf", "report", "--stdio", "--no-children", "-i", path],
        "memperf report --folded": [memperf, "report", "-q", "--folded", "-i", path],
        "perf report -g folded": ["perf", "report", "--stdio", "--no-children",
                                  "-g", "folded,0,caller,count", "-i", path],
        "memperf report --pprof": [memperf, "report", "-q", "--pprof", pp, "-i", path],
    }
    if old:
        c["OLD memperf report (text)"] = [old, "report", "-q", "-i", path]
        c["OLD memperf report --folded"] = [old, "report", "-q", "--folded", "-i", path]
        c["OLD memperf report --pprof"] = [old, "report", "-q", "--pprof", pp, "-i", path]
    return c

for name in [n for n in ("memperf.data", "perf.data") if only in ("", n)]:
    path = os.path.join(data, name)
    print(f"\n{name}: {os.path.getsize(path) / 1e6:.1f} MB, {samples(path)} samples")
    cfg = configs(path)
    for args in cfg.values():  # warm the page cache and the build-id cache
        run(args)
    res = {k: [] for k in cfg}
    for _ in range(rounds):
        for k, args in cfg.items():
            res[k].append(run(args))
    print(f"{'':30} {'wall s':>8} {'CPU s':>8} {'peak RSS MiB':>13}")
    med = {}
    for k, rs in res.items():
        med[k] = tuple(statistics.median(r[i] for r in rs) for i in range(2)) + (max(r[2] for r in rs),)
        print(f"{k:30} {med[k][0]:8.2f} {med[k][1]:8.2f} {med[k][2]:13.1f}")
    for mine, theirs in (("memperf report (text)", "perf report --no-children"),
                         ("memperf report --folded", "perf report -g folded")):
        m, p = med[mine], med[theirs]
        print(f"{theirs} / {mine}: wall {p[0] / m[0]:.2f}x, CPU {p[1] / m[1]:.2f}x, "
              f"peak RSS {p[2] / m[2]:.2f}x")
    if old:
        for k in [k for k in cfg if k.startswith("OLD ")]:
            m, o = med[k[4:]], med[k]
            print(f"old / new, {k[4:]}: wall {o[0] / m[0]:.2f}x, CPU {o[1] / m[1]:.2f}x, "
                  f"peak RSS {o[2]:.0f} -> {m[2]:.0f} MiB")
PY
