#!/usr/bin/env bash
# The recorder's own CPU per event written during a system-wide compile load: memperf's
# defaults (`record -a -e page-faults`: dwarf,auto, stacks finished from the live process)
# beside `perf record -a -e page-faults -c 1 -m 16M --call-graph dwarf` (every event, rings as
# large as memperf's), the same gcc load under each, the
# tools interleaved in every round. The load compiles FILES generated C files with gcc -O2,
# two at a time (a 2-core machine), for about as long each round.
#
# Prints per round and as medians: the recorder's CPU (user+system, its own: neither
# records a command), events written and lost, and the CPU per 1000 written events; then
# memperf's ratio to perf's per-event CPU in the same round (the issue's goal: at most 0.5).
#
# Usage: benches/system-gcc.sh [ROUNDS] [FILES]      (defaults: 5 rounds, 24 files)
# Needs perf and gcc; run it alone (it records the whole machine). MEMPERF=path picks the
# binary (default: target/release/memperf, built here).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
FILES=${2:-24}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -z "${MEMPERF:-}" ]; then
    cargo build --release --quiet
    MEMPERF=$PWD/target/release/memperf
fi

# The load: FILES C files of 300 functions each, compiled two at a time.
for i in $(seq 1 "$FILES"); do
    python3 - "$work/src$i.c" "$i" <<'PY'
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
cat > "$work/load.sh" <<EOF
#!/bin/sh
ls $work/src*.c | xargs -P 2 -I{} gcc -O2 -c -o /dev/null {}
EOF
chmod +x "$work/load.sh"

python3 - "$work" "$ROUNDS" "$MEMPERF" <<'PY'
import os, re, signal, statistics, subprocess, sys, time
work, rounds, memperf = sys.argv[1], int(sys.argv[2]), sys.argv[3]
load = os.path.join(work, "load.sh")

def cpu_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick

def run(name, argv):
    out = os.path.join(work, f"{name}.data")
    rec = subprocess.Popen(argv + ["-o", out], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    subprocess.run([load], check=True)
    cpu = cpu_of(rec.pid)
    rec.send_signal(signal.SIGINT)
    _, err = rec.communicate()
    if name == "memperf":
        written = int(re.search(r"wrote (\d+) samples", err).group(1))
        m = re.search(r"lost (\d+) events", err)
        lost = int(m.group(1)) if m else 0
    else:
        m = re.search(r"\((\d+) samples\)", err)
        written = int(m.group(1)) if m else 0
        stats = subprocess.run(["perf", "report", "-i", out, "--stats"], capture_output=True,
                               text=True).stdout
        lost = sum(int(x) for x in re.findall(r"LOST(?:_SAMPLES)? events:\s+(\d+)", stats))
    os.unlink(out)
    return cpu, written, lost

tools = {
    "memperf": [memperf, "record", "-a", "-e", "page-faults"],
    # Every event, as memperf records faults (perf samples software events at 4000 Hz
    # unless told), into rings as large as memperf's default (16 MiB per CPU).
    "perf": ["perf", "record", "-a", "-e", "page-faults", "-c", "1", "-m", "16M",
             "--call-graph", "dwarf"],
}
subprocess.run([load], check=True)  # warm-up
rows = {k: [] for k in tools}
ratios = []
for r in range(rounds):
    per = {}
    for name, argv in tools.items():
        cpu, written, lost = run(name, argv)
        per[name] = cpu / max(written, 1) * 1000
        rows[name].append((cpu, written, lost, per[name]))
        print(f"round {r + 1} {name:8} cpu {cpu:6.2f} s  written {written:8}  lost {lost:8}  "
              f"cpu per 1000 written {per[name] * 1000:7.2f} ms", flush=True)
    ratios.append(per["memperf"] / max(per["perf"], 1e-12))
print()
for name, rs in rows.items():
    med = lambda i: statistics.median(x[i] for x in rs)
    print(f"{name:8} median cpu {med(0):6.2f} s  written {med(1):9.0f}  lost {med(2):8.0f}  "
          f"per 1000 written {med(3) * 1000:7.2f} ms")
print(f"memperf/perf CPU per written event, same round: median {statistics.median(ratios):.2f} "
      f"(rounds: {', '.join(f'{x:.2f}' for x in ratios)}; goal <= 0.5)")
PY
