#!/usr/bin/env bash
# How often a stack memperf finished from the live process (`--call-graph dwarf,auto`, the
# default) is a stack the program never had. Each workload is recorded twice at the same
# time, each recording attached with -p while the workload waits on a FIFO: memperf at its
# defaults on `page-faults`, and a ground truth that holds the whole stack in the kernel's
# copy and recovers nothing, `memperf record -e minor-faults,major-faults --call-graph
# dwarf,65528 --unwind offline`, unwound later by `memperf script`. Every fault fires
# `page-faults` as it starts and `minor-faults` or `major-faults` as it ends, with the same
# thread, address, registers and stack, so the samples pair one to one
# (benches/accuracy.py). The truth cannot record `page-faults` too: when two events fire
# in one call, Linux 6.2+ computes the sample once for both (the time, the registers and
# the stack copy of whichever event is first in the CPU's list), so the default would
# unwind the truth's 64 KiB copy, or the truth would get records sized for the other's
# copy, which perf and memperf reject as malformed.
#
# Workloads (a few seconds each):
#   sqlite          sqlite3 inserting 200k rows into a file database (shallow: a control)
#   py-phases       CPython: map() recursion for 1.5 s, then a class's __call__ recursion
#                   (each level through list.sort's key: about 4 KiB of C stack a level)
#   py-alternate    the same two recursions, switching every 20 ms
#   py-threads      waves of 4 threads, each running both recursions in turn for 50 ms, then
#                   exiting (the next wave reuses their stacks)
#   gcc             gcc -O2 -c of a generated C file (cc1 is a child: -p follows it)
#
# Columns, one row per workload:
#   samples def/truth   samples in each recording;  lost def/truth  events the kernel
#                       dropped (a full ring) in each: a dropped sample pairs nothing
#   paired              default samples with their truth sample, and their share of the
#                       larger recording;  gap us  how long after the default's sample
#                       its truth sample came, median/max in microseconds
#   truth whole         paired truth stacks that reach the process's or thread's start
#                       (the rest are cut at 127 frames or at the 64 KiB copy)
#   recovered           paired default stacks with frames read from the live process
#                       (`# [recovered]` in memperf script)
#   WRONG               of those, stacks with a frame that differs from the truth's at the
#                       same depth (by address), or frames past the truth's start: the
#                       number to bring to 0
#   wrong fn            the same by function: wrong even in a report by function
#   copy-only bad       pairs that differ inside the default's copy: must be 0, else the
#                       comparison itself is off
#   deep                pairs whose stack the default's copy did not hold (it recovered
#                       frames, or the truth has more frames than the copy gave)
#   deep right/cut/wrong  of those: whole and equal to the truth / equal as far as it goes
#                       but cut short / wrong
# Under the table, each default recording's own count of the stacks that went past its copy
# (finished, not readable, rejected by validation).
#
# Usage: benches/accuracy.sh [WORKLOAD...]        (default: all five)
#   MEMPERF=path/to/memperf   the binary to measure (default: cargo build --release here)
#   PYTHON=path               the CPython to run (default: python3's sys.executable)
#   KEEP=1                    keep the recordings (the directory is printed)
# Needs root (process_vm_readv and -p on any process), gcc, python3; installs
# sqlite3 with apt-get when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
bench=$PWD/benches
if [[ -z ${MEMPERF:-} ]]; then
    cargo build --release --quiet
    MEMPERF=$PWD/target/release/memperf
fi
PYTHON=${PYTHON:-$(python3 -c 'import sys; print(sys.executable)')}
# The truth's ring per CPU: 64 KiB a sample, so 2048 samples of slack at 32768 pages.
TRUTH_PAGES=${TRUTH_PAGES:-32768}
workloads=("$@")
[[ ${#workloads[@]} -gt 0 ]] || workloads=(sqlite py-phases py-alternate py-threads gcc)
work=$(mktemp -d "${TMPDIR:-/tmp}/accuracy.XXXXXX")
if [[ -n ${KEEP:-} ]]; then
    echo "recordings in $work"
else
    trap 'rm -rf "$work"' EXIT
fi

# Runs the shell command $2 as workload $1 under both recordings, then prints its row.
pair() {
    local name=$1 cmd=$2 d=$work/$1
    mkdir -p "$d"
    mkfifo "$d/go"
    bash -c "read -r _ < '$d/go'; cd '$d'; exec $cmd" >"$d/out" 2>&1 &
    local w=$!
    "$MEMPERF" record -e page-faults -o "$d/def.data" -p "$w" 2>"$d/def.err" &
    local dp=$!
    "$MEMPERF" record -e minor-faults,major-faults --call-graph dwarf,65528 --unwind offline \
        -m "$TRUTH_PAGES" -o "$d/truth.data" -p "$w" 2>"$d/truth.err" &
    local tp=$!
    local i
    for ((i = 0; i < 300; i++)); do
        grep -q recording "$d/def.err" && grep -q recording "$d/truth.err" && break
        kill -0 "$dp" "$tp" 2>/dev/null || break
        sleep 0.1
    done
    if ! grep -q recording "$d/def.err" || ! grep -q recording "$d/truth.err"; then
        cat "$d/def.err" "$d/truth.err" >&2
        kill "$w" "$dp" "$tp" 2>/dev/null || true
        echo "$name: the recordings did not start" >&2
        return 1
    fi
    echo go >"$d/go"
    wait "$w" || { cat "$d/out" >&2; echo "$name: the workload failed" >&2; }
    wait "$dp" || true
    wait "$tp" || true
    local f=tid,time,addr,ip,sym,dso
    "$MEMPERF" script -q -F "$f" -i "$d/def.data" >"$d/def.script" 2>>"$d/def.err"
    "$MEMPERF" script -q -F "$f" -i "$d/truth.data" >"$d/truth.script" 2>>"$d/truth.err"
    python3 "$bench/accuracy.py" row "$name" "$d/def.script" "$d/truth.script" \
        "$d/def.err" "$d/truth.err"
    # What the default said of its own stacks, printed under the table.
    sed -n "s/^ *\([0-9]* stacks went past.*\)/$name: \1/p" "$d/def.err" >>"$work/notes"
    [[ -n ${KEEP:-} ]] || rm -f "$d/truth.data" "$d/truth.script" "$d/def.script"
}

prepare_sqlite() {
    command -v sqlite3 >/dev/null || apt-get install -y -q sqlite3 >/dev/null
    python3 - "$work/inserts.sql" <<'PY'
import random, sys
random.seed(27)
with open(sys.argv[1], "w") as f:
    f.write("PRAGMA cache_size=-20000;\n")
    f.write("CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, n INTEGER, x REAL);\n")
    f.write("CREATE INDEX t_name ON t(name);\nCREATE INDEX t_n ON t(n);\nBEGIN;\n")
    for i in range(200000):
        f.write(f"INSERT INTO t VALUES({i}, 'name{random.getrandbits(40):x}', "
                f"{random.getrandbits(31)}, {random.random()});\n")
    f.write("COMMIT;\n")
PY
}

# Functions of if-blocks nested 24 deep: cc1's parser recurses through each block (its
# stack goes past 8 KiB), and -O2 has work for a few seconds.
prepare_gcc() {
    python3 - "$work/big.c" <<'PY'
import sys
out = ["int g(int);", "volatile int sink;"]
for f in range(200):
    body = []
    for d in range(24):
        body.append(" " * d + f"if (g(x + {d}) > {d * f % 13}) {{ "
                    f"int y{d} = g(x * {d + 1} + (x >> {d % 5})); sink = y{d};")
    body.append(" " * 24 + "x = g(x);")
    body.extend(" " * d + "}" for d in range(23, -1, -1))
    out.append(f"int f{f}(int x) {{\n" + "\n".join(body) + "\n return x; }")
open(sys.argv[1], "w").write("\n".join(out) + "\n")
PY
}

python3 "$bench/accuracy.py" header
for w in "${workloads[@]}"; do
    case $w in
    sqlite)
        prepare_sqlite
        pair sqlite "sqlite3 '$work/sqlite.db' < '$work/inserts.sql'"
        ;;
    py-phases) pair py-phases "'$PYTHON' '$bench/accuracy-work.py' phases 3 8" ;;
    py-alternate) pair py-alternate "'$PYTHON' '$bench/accuracy-work.py' alternate 3 8" ;;
    py-threads) pair py-threads "'$PYTHON' '$bench/accuracy-work.py' threads 3 8" ;;
    gcc)
        prepare_gcc
        pair gcc "gcc -O2 -c -o '$work/big.o' '$work/big.c'"
        ;;
    *) echo "unknown workload $w (sqlite py-phases py-alternate py-threads gcc)" >&2; exit 2 ;;
    esac
done
if [[ -s $work/notes ]]; then
    echo
    echo "memperf's own summary of the default recordings:"
    cat "$work/notes"
fi
