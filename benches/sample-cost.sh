#!/usr/bin/env bash
# What each allocation sample costs the traced thread itself, and whether memperf's reader
# adds to it: the thread's own CPU time (CLOCK_THREAD_CPUTIME_ID, not its wall time, which
# the reader's CPU on a small machine also stretches) on a thread doing PAIRS calloc/free
# pairs, under:
#   floor              memperf's probes at its very sites (calloc, calloc's return, free past
#                      its first instruction), counted in the kernel by perf stat: the traps
#   kernel, N B copied the same probes sampled as memperf samples them (calloc with its
#                      registers and N bytes of stack, the return and free with none) into
#                      rings large enough to hold every sample, read by nobody until the
#                      workload has exited: what the kernel's writing costs with no reader
#                      at all, for N = 0, 2048, 4096 and 8192 (the sweep gives the cost per
#                      copied byte)
#   memperf leak       memperf leak, online unwinding (the reader unwinds while the program
#                      runs and may read the live process)
#   memperf record --unwind offline   the same events written to a file, unwound later
#   perf record        perf record of the same events with --call-graph dwarf,8192: its
#                      lost samples are counted, and each lost sample copied nothing
# Tools interleave in every round (ROUNDS rounds after a warm-up round that is not kept);
# the figures are medians, with the lost samples (the kernel copies nothing for those, so a
# column that lost samples is cheaper than its work) and the tracer's own CPU beside.
#
# Usage: benches/sample-cost.sh [PAIRS] [ROUNDS]   (50000 5)
# MEMPERF=path uses that binary instead of building the release one; MEMPERF_BEFORE=path
# adds that binary's leak beside, in the same rounds. The rings of the no-reader columns
# hold PAIRS samples of 8 KiB on every CPU (512 MiB per CPU at 50,000). Needs root.
# Runs under `flock /tmp/memperf-machine.lock` when that file exists (shared machines).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -e /tmp/memperf-machine.lock ] && [ -z "${MEMPERF_LOCKED:-}" ]; then
    exec env MEMPERF_LOCKED=1 flock /tmp/memperf-machine.lock "$0" "$@"
fi
PAIRS=${1:-50000}
ROUNDS=${2:-5}
work=$(mktemp -d)
TRACEFS=/sys/kernel/tracing
[ -e $TRACEFS/uprobe_events ] || TRACEFS=/sys/kernel/debug/tracing
# The probes this script places are removed on every exit.
trap 'grep -E "^[pr]:samplecost/" $TRACEFS/uprobe_events 2>/dev/null |
          awk "{print \$1}" | sed -E "s#^[pr]:#-:#" >> $TRACEFS/uprobe_events || true
      rm -rf "$work"' EXIT

command -v perf >/dev/null 2>&1 ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q linux-perf >/dev/null 2>&1 || true

cat > "$work/pairs.c" <<'EOF'
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static long n;
static double cpu_ms;
static void *work(void *arg) {
    (void)arg;
    struct timespec a, b;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    for (long i = 0; i < n; i++) {
        void *p = calloc(1, 16 + (i & 63));
        if (!p) abort();
        free(p);
    }
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    cpu_ms = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 1e6;
    return NULL;
}
int main(int argc, char **argv) {
    n = atol(argv[1]);
    pthread_t t;
    pthread_create(&t, NULL, work, NULL);
    pthread_join(t, NULL);
    fprintf(stderr, "thread_cpu_ms=%.3f\n", cpu_ms);
    return 0;
}
EOF
# The no-reader sampler: opens EVENT:STACK_BYTES tracefs events on a command it starts
# (inherit, enable_on_exec, one ring per CPU), reads nothing while the command runs, then
# counts the samples in the rings and the samples the kernel lost (PERF_FORMAT_LOST).
cat > "$work/noreader.c" <<'EOF'
#define _GNU_SOURCE
#include <linux/perf_event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#define MAXEV 8
#define MAXCPU 64
int main(int argc, char **argv) {
    /* noreader TRACEFS_GROUP_DIR DATA_PAGES EVENT:STACK[,EVENT:STACK...] -- CMD... */
    if (argc < 6) return 2;
    long pages = atol(argv[2]), ncpu = sysconf(_SC_NPROCESSORS_ONLN), psz = sysconf(_SC_PAGESIZE);
    if (ncpu > MAXCPU) ncpu = MAXCPU;
    char *names[MAXEV]; int stacks[MAXEV], nev = 0;
    for (char *t = strtok(argv[3], ","); t && nev < MAXEV; t = strtok(NULL, ",")) {
        char *c = strchr(t, ':');
        if (!c) return 2;
        *c = 0; names[nev] = t; stacks[nev++] = atoi(c + 1);
    }
    int go[2];
    if (pipe(go)) return 1;
    pid_t child = fork();
    if (!child) { char c; close(go[1]); if (read(go[0], &c, 1) != 1) _exit(126); execvp(argv[5], argv + 5); _exit(127); }
    static int fds[MAXCPU][MAXEV];
    static char *rings[MAXCPU];
    for (int c = 0; c < ncpu; c++)
        for (int e = 0; e < nev; e++) {
            char path[512]; int id;
            snprintf(path, sizeof path, "%s/%s/id", argv[1], names[e]);
            FILE *f = fopen(path, "r");
            if (!f || fscanf(f, "%d", &id) != 1) { perror(path); return 1; }
            fclose(f);
            struct perf_event_attr a;
            memset(&a, 0, sizeof a);
            a.size = sizeof a; a.type = PERF_TYPE_TRACEPOINT; a.config = id; a.sample_period = 1;
            a.sample_type = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID |
                            PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_REGS_USER;
            /* memperf's registers: the arguments, and what an unwind starts from */
            a.sample_regs_user = (1 << 3) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8);
            if (stacks[e]) { a.sample_type |= PERF_SAMPLE_STACK_USER; a.sample_stack_user = stacks[e]; }
            a.read_format = PERF_FORMAT_ID | PERF_FORMAT_LOST;
            a.disabled = 1; a.inherit = 1; a.enable_on_exec = 1; a.sample_id_all = 1;
            a.watermark = 1; a.wakeup_watermark = pages * psz / 4;
            if (e == 0) { a.mmap = 1; a.comm = 1; a.task = 1; a.mmap2 = 1; }
            int fd = syscall(SYS_perf_event_open, &a, child, c, -1, PERF_FLAG_FD_CLOEXEC);
            if (fd < 0) { perror("perf_event_open"); return 1; }
            fds[c][e] = fd;
            if (e == 0) {
                rings[c] = mmap(NULL, (pages + 1) * psz, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
                if (rings[c] == MAP_FAILED) { perror("mmap"); return 1; }
            } else if (ioctl(fd, PERF_EVENT_IOC_SET_OUTPUT, fds[c][0])) { perror("set_output"); return 1; }
        }
    close(go[0]);
    if (write(go[1], "x", 1) != 1) return 1;
    close(go[1]);
    int status;
    waitpid(child, &status, 0);
    uint64_t samples = 0, lost = 0;
    for (int c = 0; c < ncpu; c++) {
        struct perf_event_mmap_page *m = (void *)rings[c];
        uint64_t head = __atomic_load_n(&m->data_head, __ATOMIC_ACQUIRE), tail = m->data_tail;
        uint64_t size = pages * psz;
        char *data = rings[c] + psz;
        while (tail < head) {
            struct perf_event_header h;
            for (size_t i = 0; i < sizeof h; i++) ((char *)&h)[i] = data[(tail + i) % size];
            if (h.type == PERF_RECORD_SAMPLE) samples++;
            if (h.size == 0) break;
            tail += h.size;
        }
        for (int e = 0; e < nev; e++) {
            uint64_t v[3];
            if (read(fds[c][e], v, sizeof v) == sizeof v) lost += v[2];
        }
    }
    fprintf(stderr, "noreader_samples=%lu noreader_lost=%lu\n", (unsigned long)samples, (unsigned long)lost);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
EOF
cc -O2 -g -fno-omit-frame-pointer -o "$work/pairs" "$work/pairs.c" -lpthread
cc -O2 -o "$work/noreader" "$work/noreader.c"
if [ -z "${MEMPERF:-}" ]; then
    cargo build --release --quiet
    MEMPERF=${CARGO_TARGET_DIR:-$PWD/target}/release/memperf
fi

# memperf's own probe sites, read from uprobe_events while a memperf leak runs (as
# benches/heap-cost.sh reads them), kept for calloc, its return and free.
# (Only this memperf's group, memperf_PID: another memperf may be running beside it.)
"$MEMPERF" leak -- sleep 2 >/dev/null 2>&1 &
leak_pid=$!
sleep 1.5
grep -E "^[pr]:memperf_$leak_pid/(calloc|calloc_ret|free) " $TRACEFS/uprobe_events |
    awk '{print $1, $2}' | sed -E 's#^([pr]):memperf_[0-9]+/#\1:samplecost/#' | sort -u > "$work/probes"
wait
[ "$(wc -l < "$work/probes")" = 3 ] || { echo "did not find memperf's calloc and free probes" >&2; exit 1; }

python3 - "$work" "$PAIRS" "$ROUNDS" "$MEMPERF" "$TRACEFS" <<'PY'
import os, re, statistics, subprocess, sys
work, pairs, rounds, memperf, tracefs = sys.argv[1:]
rounds = int(rounds)
before = os.environ.get("MEMPERF_BEFORE", "")
probes = [l for l in open(os.path.join(work, "probes")).read().splitlines() if l.strip()]
workload = [os.path.join(work, "pairs"), pairs]
page = os.sysconf("SC_PAGESIZE")
# Rings that hold every calloc's sample with 8 KiB of stack, and the return's and free's.
need = int(pairs) * (8192 + 512) + (16 << 20)
ring_pages = 1
while ring_pages * page < need:
    ring_pages *= 2

def place(lines):
    fd = os.open(os.path.join(tracefs, "uprobe_events"), os.O_WRONLY | os.O_APPEND)
    try:
        for line in lines:
            os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)

def with_probes(cmd):
    place(probes)
    try:
        return run(cmd)
    finally:
        place(["-:" + p.split()[0].split(":", 1)[1] for p in probes])

def run(cmd):
    """The workload thread's CPU, the samples lost, and the tracer's own CPU (the whole
    tree's CPU less the workload process's)."""
    pid = os.fork()
    if pid == 0:
        fd = os.open(os.path.join(work, "out"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.chdir(work)
        os.execvp(cmd[0], cmd)
    _, status, ru = os.wait4(pid, 0)
    out = open(os.path.join(work, "out"), errors="replace").read()
    if status != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{out[-3000:]}")
    for f in ("perf.data", "memperf.data"):
        if os.path.exists(os.path.join(work, f)):
            lost = perf_lost(os.path.join(work, f)) if f == "perf.data" else memperf_lost(out)
            os.unlink(os.path.join(work, f))
            break
    else:
        lost = memperf_lost(out)
    m = re.search(r"thread_cpu_ms=([0-9.]+)", out)
    if not m:
        sys.exit(f"the workload did not time itself:\n{out[-2000:]}")
    return float(m.group(1)), lost, (ru.ru_utime + ru.ru_stime) * 1e3

def memperf_lost(out):
    m = re.search(r"noreader_samples=(\d+) noreader_lost=(\d+)", out)
    if m:
        return int(m.group(2))
    m = re.search(r"(?:lost|dropped) (\d+) events", out)
    return int(m.group(1)) if m else 0

def perf_lost(path):
    """perf's own count: the LOST_SAMPLES records it writes at the end from each event's
    PERF_FORMAT_LOST count, else the ring's LOST records (the same drops)."""
    dump = subprocess.run(["perf", "report", "-D", "-i", path], capture_output=True,
                          text=True, errors="replace").stdout
    per_event = re.findall(r"PERF_RECORD_LOST_SAMPLES:.*lost samples :(\d+)", dump)
    if per_event:
        return sum(int(x) for x in per_event)
    return sum(int(x) for x in re.findall(r"PERF_RECORD_LOST:.*lost:(\d+)", dump))

evdir = os.path.join(tracefs, "events", "samplecost")
perf_events = ["-e", "samplecost:calloc/call-graph=dwarf,stack-size=8192/",
               "-e", "samplecost:calloc_ret/call-graph=no/", "-e", "samplecost:free/call-graph=no/"]
tools = {
    "alone": lambda: run(workload),
    "floor (perf stat, memperf's sites)": lambda: with_probes(["perf", "stat", "-e", "samplecost:*", "--"] + workload),
}
for size in [0, 2048, 4096, 8192]:
    tools[f"kernel, {size} B copied, no reader"] = lambda size=size: with_probes(
        [os.path.join(work, "noreader"), evdir, str(ring_pages),
         f"calloc:{size},calloc_ret:0,free:0", "--"] + workload)
tools["memperf leak (online)"] = lambda: run([memperf, "leak", "3600", "--"] + workload)
if before:
    tools["memperf leak (before)"] = lambda: run([before, "leak", "3600", "--"] + workload)
tools["memperf record --unwind offline"] = lambda: with_probes(
    [memperf, "record", "--unwind", "offline", "-o", "memperf.data"] + perf_events + ["--"] + workload)
tools["perf record dwarf,8192"] = lambda: with_probes(
    ["perf", "record", "-q", "-o", "perf.data"] + perf_events + ["--"] + workload)

times = {k: [] for k in tools}
lost = {k: 0 for k in tools}
cpu = {k: [] for k in tools}
for r in range(rounds + 1):
    for k, f in tools.items():
        ms, l, c = f()
        if r > 0:  # round 0 warms caches up
            times[k].append(ms)
            lost[k] += l
            cpu[k].append(c - ms)
med = {k: statistics.median(v) for k, v in times.items()}
alone = med["alone"]
base = med["floor (perf stat, memperf's sites)"]
print(f"\n== {pairs} calloc/free pairs, the thread's own CPU ({rounds} rounds, medians; "
      f"no-reader rings of {ring_pages * page >> 20} MiB a CPU)")
print(f"{'':36s} {'ms':>8s} {'x floor':>8s} {'us/pair':>8s} {'lost':>8s} {'tracer ms':>10s}   rounds (ms)")
for k, v in med.items():
    above = (v - base) * 1e3 / int(pairs)
    print(f"{k:36s} {v:8.1f} {v / base:8.2f} {above:8.2f} {lost[k]:8d} "
          f"{statistics.median(cpu[k]):10.0f}   " + " ".join(f"{x:.0f}" for x in times[k]))
print("us/pair: the thread's CPU above the floor's, per pair; lost: samples the kernel did not "
      "write (it copied nothing for them), over all rounds; tracer ms: the CPU of all but the "
      "workload's thread")
PY
