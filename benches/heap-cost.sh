#!/usr/bin/env bash
# What allocation tracing costs the traced program, as ratios to the floor, side by side on
# two workloads (issue 30's):
#   pairs    a thread doing PAIRS calloc/free pairs (it times its own loop)
#   sqlite3  Debian's sqlite3 inserting ROWS rows, one INSERT each, in one transaction (it
#            times itself: julianday('now') before the first insert and after the commit)
# Tools, interleaved in every round (ROUNDS rounds after a warm-up round that is not kept):
#   alone              the workload untraced
#   floor              the probes memperf places, at the very sites it places them (free past
#                      its first instruction, which the kernel would single-step), counted in
#                      the kernel by perf stat: the traps alone
#   bpftrace           bpftrace counting the same functions (its probes sit at the functions'
#                      first instruction: free's is single-stepped, which costs tens of us a
#                      call on some VMs, so this column can lie far above the floor)
#   memleak-bpfcc      BCC's memleak, attached with -p (kernel headers: linux-headers-amd64),
#                      stopped with SIGINT and waited for: BCC gives each probe a random
#                      reference counter offset (iovisor/bcc#5236), and while its probe on
#                      malloc remains the kernel refuses memperf's there (EINVAL)
#   heaptrack          heaptrack, LD_PRELOAD, writing its file (started on the workload's
#                      program itself: it does not follow the script's exec)
#   memperf leak/heap/rss, exact and with -s SAMPLE
# The figure is the workload's own time (the median over the rounds) over the floor's, and
# the cost (time above alone) over the floor's cost; lost events are counted from memperf's
# summary and printed beside.
#
# Usage: benches/heap-cost.sh [PAIRS] [ROWS] [ROUNDS] [SAMPLE]   (100000 20000 5 100)
# MEMPERF=path uses that binary instead of building the release one; MEMPERF_BEFORE=path
# adds that binary's exact runs beside, in the same rounds (a change's before and after);
# PEERS=0 leaves bpftrace, memleak-bpfcc and heaptrack out; SAMPLED=0 the -s runs;
# WORKLOADS=sqlite3 runs that workload alone;
# SIZES="2048 4096" adds exact runs of each memperf command with --call-graph dwarf,SIZE
# (the allocation stacks' copy) in the same rounds; MPAGES="4096 8192" adds exact runs with
# -m PAGES (the ring's pages per CPU) likewise; ENVS="NAME=VALUE ..." with that variable set
# in memperf's environment (MEMPERF_BEHIND_BYTES=0: every allocation stack left out, the
# reader's unwinding taken away), and options after commas (NAME=VALUE,-m,8192). The
# trunc% column is the share of allocation stacks the summary says were truncated (the
# median over the rounds).
# Needs root (probes).
# Runs under `flock /tmp/memperf-machine.lock` when that file exists (shared machines).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -e /tmp/memperf-machine.lock ] && [ -z "${MEMPERF_LOCKED:-}" ]; then
    exec env MEMPERF_LOCKED=1 flock /tmp/memperf-machine.lock "$0" "$@"
fi
PAIRS=${1:-100000}
ROWS=${2:-20000}
ROUNDS=${3:-5}
SAMPLE=${4:-100}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

need() {
    command -v "$1" >/dev/null 2>&1 && return 0
    echo "installing $2 (for $1)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >/dev/null 2>&1 || true
}
need sqlite3 sqlite3
need bpftrace bpftrace
need heaptrack heaptrack
need memleak-bpfcc bpfcc-tools
need perf linux-perf
# BCC compiles against the running kernel's headers (/lib/modules/$(uname -r)/build and
# source). Where it has none, Debian's own (linux-headers-amd64: a -amd64 tree of generated
# files beside a -common one) serve; the links are removed at the end.
made_links=
kmod=/lib/modules/$(uname -r)
if [ ! -e "$kmod/build" ]; then
    ls -d /usr/src/linux-headers-*-amd64 >/dev/null 2>&1 ||
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q linux-headers-amd64 >/dev/null 2>&1 || true
    arch=$(ls -d /usr/src/linux-headers-*-amd64 2>/dev/null | sort -V | tail -1 || true)
    if [ -n "$arch" ] && [ -d "${arch%-amd64}-common" ]; then
        mkdir -p "$kmod"
        ln -sfn "$arch" "$kmod/build"
        ln -sfn "${arch%-amd64}-common" "$kmod/source"
        made_links=1
    fi
fi
trap 'rm -rf "$work"; [ -n "$made_links" ] && rm -f "$kmod/build" "$kmod/source"' EXIT

cat > "$work/pairs.c" <<'EOF'
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static long n;
static void *work(void *arg) {
    (void)arg;
    for (long i = 0; i < n; i++) {
        void *p = calloc(1, 16 + (i & 63));
        if (!p) abort();
        free(p);
    }
    return NULL;
}
int main(int argc, char **argv) {
    n = atol(argv[1]);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    pthread_t t;
    pthread_create(&t, NULL, work, NULL);
    pthread_join(t, NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    fprintf(stderr, "workload_ms=%.3f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 1e6);
    return 0;
}
EOF
cc -O2 -g -fno-omit-frame-pointer -o "$work/pairs" "$work/pairs.c" -lpthread
python3 - "$work/ins.sql" "$ROWS" <<'PY'
import sys
with open(sys.argv[1], "w") as f:
    f.write("CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT, c REAL);\n")
    f.write("SELECT 'start_ms=' || CAST((julianday('now') - 2440587.5) * 86400000.0 AS TEXT);\n")
    f.write("BEGIN;\n")
    for i in range(int(sys.argv[2])):
        f.write(f"INSERT INTO t(b, c) VALUES('row {i} {'x' * (i % 50)}', {i * 0.5});\n")
    f.write("COMMIT;\n")
    f.write("SELECT 'end_ms=' || CAST((julianday('now') - 2440587.5) * 86400000.0 AS TEXT);\n")
PY
if [ -z "${MEMPERF:-}" ]; then
    cargo build --release --quiet
    MEMPERF=${CARGO_TARGET_DIR:-$PWD/target}/release/memperf
fi
LIBC=$(ldd "$work/pairs" | awk '/libc.so/ {print $3}')
SQLITE=$(command -v sqlite3)

# The floor's probes are memperf's own, at the very file offsets it places them: read from
# uprobe_events while a memperf leak runs, placed under another group for each floor run
# and removed after it (perf probe's `FUNC%return` may also land on a PLT stub, and a probe
# there beside memperf's made the kernel refuse every new uprobe on libc with EINVAL).
# Only this run's group (memperf_PID): another memperf on the machine may hold probes on
# files that are gone by the time the floor places them.
"$MEMPERF" leak -- sleep 2 >/dev/null 2>&1 &
leak_pid=$!
sleep 1.5
TRACEFS=/sys/kernel/tracing
[ -e $TRACEFS/uprobe_events ] || TRACEFS=/sys/kernel/debug/tracing
grep -E "^[pr]:memperf_${leak_pid}/" $TRACEFS/uprobe_events | awk '{print $1, $2}' |
    sed -E 's#^([pr]):memperf_[0-9]+/#\1:heapcost/#' | sort -u > "$work/floor.probes" || true
wait
floor_ok=0
[ -s "$work/floor.probes" ] && floor_ok=1

python3 - "$work" "$PAIRS" "$ROUNDS" "$SAMPLE" "$MEMPERF" "$LIBC" "$SQLITE" "$floor_ok" "$TRACEFS" <<'PY'
import os, re, shutil, signal, statistics, subprocess, sys, time
work, pairs, rounds, sample, memperf, libc, sqlite, floor_ok, tracefs = sys.argv[1:]
before = os.environ.get("MEMPERF_BEFORE", "")
peers = os.environ.get("PEERS", "1") != "0"
sampled = os.environ.get("SAMPLED", "1") != "0"
# The exact runs' variants beside the defaults: (label, memperf's options).
variants = [(f"dwarf,{s}", ["--call-graph", f"dwarf,{s}"]) for s in os.environ.get("SIZES", "").split()]
variants += [(f"-m {m}", ["-m", m]) for m in os.environ.get("MPAGES", "").split()]
# ENVS="NAME=VALUE[,OPTION,...] ...": exact runs with that variable set, and those options.
variants += [(e, ["env"] + e.split(",")) for e in os.environ.get("ENVS", "").split()]
probes = open(os.path.join(work, "floor.probes")).read().split("\n") if floor_ok == "1" else []
probes = [p for p in probes if p.strip()]

def place(lines):
    """One write per line: uprobe_events takes a command per write."""
    fd = os.open(os.path.join(tracefs, "uprobe_events"), os.O_WRONLY | os.O_APPEND)
    try:
        for line in lines:
            os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)

def floor(argv):
    """The probes counted by perf stat, placed for this run alone."""
    place(probes)
    try:
        return run(["perf", "stat", "-e", "heapcost:*", "--"] + argv)
    finally:
        place(["-:" + p.split()[0].split(":", 1)[1] for p in probes])

rounds = int(rounds)
db = os.path.join(work, "db.sqlite")
sql = os.path.join(work, "ins.sql")
# Each workload is a script that execs it, so that every tool starts (or attaches to) the
# one process the same way.
workloads = {}
for name, line in [("pairs", f"exec {os.path.join(work, 'pairs')} {pairs}"),
                   ("sqlite3", f"rm -f {db}; exec {sqlite} {db} < {sql}")]:
    path = os.path.join(work, f"run-{name}")
    with open(path, "w") as f:
        f.write(f"#!/bin/sh\n{line}\n")
    os.chmod(path, 0o755)
    workloads[name] = [path]
# heaptrack traces only the process it starts, not the program a script execs (through
# run-pairs it recorded 0 allocations): it runs each workload itself, with the script's
# stdin and rm.
direct = {"pairs": ([os.path.join(work, "pairs"), pairs], None),
          "sqlite3": ([sqlite, db], sql)}

def took_ms(out):
    m = re.search(r"workload_ms=([0-9.]+)", out)
    if m:
        return float(m.group(1))
    s, e = re.search(r"start_ms=([0-9.]+)", out), re.search(r"end_ms=([0-9.]+)", out)
    if s and e:
        return float(e.group(1)) - float(s.group(1))
    sys.exit(f"the workload did not time itself:\n{out[-2000:]}")

def lost(out):
    m = re.search(r"lost (\d+) events", out)
    return int(m.group(1)) if m else 0

def truncated(out):
    """The percentage of allocation stacks the summary says were truncated, or None."""
    m = re.search(r"(\d+) of (\d+)\s+allocation\s+stacks\s+truncated", out)
    return 100.0 * int(m.group(1)) / max(int(m.group(2)), 1) if m else None

trunc = {}

def run(cmd, key=None, stdin=None):
    with open(stdin or os.devnull) as inp:
        p = subprocess.run(cmd, stdin=inp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, errors="replace", cwd=work)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stdout[-3000:]}")
    t = truncated(p.stdout)
    if key is not None and t is not None:
        trunc.setdefault(key, []).append(t)
    return took_ms(p.stdout), lost(p.stdout)

def default_sigint():
    """In the tracer's child: SIGINT back to its default. Started from a script run in the
    background this bench inherits SIGINT ignored, and memleak-bpfcc with it (Python keeps a
    signal it starts with ignored), which then never stopped until it was killed."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)

def attached(tracer, argv, ready_after):
    """The workload waits on a fifo, the tracer attaches with -p (it says so on its standard
    output, then attaches), then the workload runs; the tracer is stopped with SIGINT and
    waited for."""
    fifo = os.path.join(work, "go")
    if os.path.exists(fifo):
        os.unlink(fifo)
    os.mkfifo(fifo)
    sh = subprocess.Popen(["sh", "-c", f"read x < {fifo}; exec {argv[0]}"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=work)
    log = os.path.join(work, "tracer.log")
    with open(log, "w") as f:
        t = subprocess.Popen(tracer + ["-p", str(sh.pid)], stdout=f, stderr=subprocess.STDOUT,
                             cwd=work, preexec_fn=default_sigint,
                             env=dict(os.environ, PYTHONUNBUFFERED="1"))
    # Compiling its BPF program takes memleak-bpfcc 10 s or more on a busy machine.
    deadline = time.monotonic() + 300
    while "Attaching to pid" not in open(log, errors="replace").read():
        if t.poll() is not None or time.monotonic() > deadline:
            t.kill()
            t.wait()
            sh.kill()
            sys.exit(f"{tracer[0]} did not attach:\n{open(log, errors='replace').read()[-2000:]}")
        time.sleep(0.1)
    time.sleep(ready_after)
    with open(fifo, "w") as f:
        f.write("go\n")
    out, _ = sh.communicate()
    t.send_signal(signal.SIGINT)
    try:
        t.wait(timeout=120)
    except subprocess.TimeoutExpired:
        print(f"{tracer[0]} did not stop within 120 s of SIGINT: killed")
        t.kill()
        # Waited for, as a tracer that stopped: its probes stay until its exit has closed
        # their events (memleak-bpfcc took 2 s after SIGKILL), and BCC gives each probe a
        # random reference counter offset (iovisor/bcc#5236, the 7th argument of
        # bpf_attach_uprobe that its Python binding leaves out), so the kernel refused the
        # next tool's probe at the same instruction, memperf's malloc, with EINVAL.
        t.wait()
    if t.returncode not in (0, -signal.SIGKILL):
        sys.exit(f"{tracer[0]} failed ({t.returncode}):\n{open(log, errors='replace').read()[-2000:]}")
    return took_ms(out), 0

def with_variant(cmd, opts):
    """memperf's command line with a variant's options, or under `env NAME=VALUE`."""
    if opts[:1] == ["env"]:
        return opts[:2] + cmd[:2] + opts[2:] + cmd[2:]
    return cmd[:2] + opts + cmd[2:]

def tools(w):
    argv = workloads[w]
    t = {"alone": lambda: run(argv)}
    if floor_ok == "1":
        t["floor (perf stat, memperf's sites)"] = lambda: floor(argv)
    if shutil.which("bpftrace") and peers:
        prog = " ".join(f"uprobe:{libc}:{f} {{ @{f} = count(); }} uretprobe:{libc}:{f} {{ @{f}_ret = count(); }}"
                        for f in ["malloc", "calloc", "realloc"]) + f" uprobe:{libc}:free {{ @free = count(); }}"
        t["bpftrace (counting)"] = lambda: run(["bpftrace", "-q", "-e", prog, "-c", f"/bin/sh {argv[0]}"])
    if shutil.which("memleak-bpfcc") and memleak_ok and peers:
        t["memleak-bpfcc"] = lambda: attached(["memleak-bpfcc", "3600"], argv, 2)
        t[f"memleak-bpfcc -s {sample}"] = lambda: attached(["memleak-bpfcc", "-s", sample, "3600"], argv, 2)
    if shutil.which("heaptrack") and peers:
        def heaptrack(w=w):
            argv, stdin = direct[w]
            if os.path.exists(db):
                os.unlink(db)
            return run(["heaptrack", "-o", os.path.join(work, "ht")] + argv, stdin=stdin)
        t["heaptrack"] = heaptrack
    for cmd in ["leak", "heap", "rss"]:
        extra = ["3600"] if cmd == "leak" else []
        k = f"memperf {cmd}"
        t[k] = lambda cmd=cmd, extra=extra, k=k: run([memperf, cmd] + extra + ["--"] + argv, (w, k))
        for label, opts in variants:
            k = f"memperf {cmd} {label}"
            t[k] = lambda cmd=cmd, extra=extra, k=k, opts=opts: run(
                with_variant([memperf, cmd] + extra, opts) + ["--"] + argv, (w, k))
        if sampled:
            t[f"memperf {cmd} -s {sample}"] = lambda cmd=cmd, extra=extra: run(
                [memperf, cmd, "-s", sample] + extra + ["--"] + argv)
        if before:
            k = f"memperf {cmd} (before)"
            t[k] = lambda cmd=cmd, extra=extra, k=k: run([before, cmd] + extra + ["--"] + argv, (w, k))
    return t

memleak_ok = False
if shutil.which("memleak-bpfcc") and peers:
    p = subprocess.run(["memleak-bpfcc", "-p", str(os.getpid()), "1", "1"], capture_output=True, text=True, timeout=180)
    memleak_ok = p.returncode == 0
    if not memleak_ok:
        print("memleak-bpfcc does not run here:", (p.stderr.strip().splitlines() or ["?"])[-1])

only = os.environ.get("WORKLOADS", "").split()
for w in workloads:
    if only and w not in only:
        continue
    ts = tools(w)
    times = {k: [] for k in ts}
    losses = {k: 0 for k in ts}
    for r in range(rounds + 1):
        for k, f in ts.items():
            ms, l = f()
            if r > 0:  # round 0 warms caches up
                times[k].append(ms)
                losses[k] += l
        for f in os.listdir(work):
            if f.startswith("ht"):
                os.unlink(os.path.join(work, f))
    med = {k: statistics.median(v) for k, v in times.items()}
    alone = med["alone"]
    floor_key = next((k for k in med if k.startswith("floor")), "alone")
    base = med[floor_key]
    fcost = max(base - alone, 1e-3)
    print(f"\n== {w}: {open(workloads[w][0]).read().splitlines()[-1]}  ({rounds} rounds, medians; floor = {floor_key})")
    print(f"{'':40s} {'ms':>10s} {'x floor':>8s} {'cost/floor cost':>16s} {'lost':>8s} {'trunc%':>7s}   rounds (ms)")
    for k, v in med.items():
        tr = trunc.get((w, k))
        tr = f"{statistics.median(tr):7.1f}" if tr else f"{'-':>7s}"
        print(f"{k:40s} {v:10.1f} {v / base:8.2f} {(v - alone) / fcost:16.2f} {losses[k]:8d} {tr}   "
              + " ".join(f"{x:.0f}" for x in times[k]))
PY
