#!/usr/bin/env bash
# Checks that two memperf binaries print byte-identical outputs on the same recordings:
# the text report, folded stacks, flame graph, pprof, --by, --timeline, --weight bytes and
# script, on memperf's own recordings (online unwinding, tracepoints, --unwind offline) and
# on perf's (-g and --call-graph dwarf). Run it before and after a change to the pipeline:
#
#   cp target/release/memperf /tmp/memperf-before      # on the commit before the change
#   benches/golden-identical.sh /tmp/memperf-before target/release/memperf
#
# The recordings are made once, by the first binary (and perf); both binaries then read
# the same files. Exits 1 and shows the first differing lines when any output differs.
set -euo pipefail
cd "$(dirname "$0")/.."
A=$(realpath "${1:?usage: golden-identical.sh OLD_MEMPERF NEW_MEMPERF}")
B=$(realpath "${2:?usage: golden-identical.sh OLD_MEMPERF NEW_MEMPERF}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

flags="-O2 -g -fno-optimize-sibling-calls -fomit-frame-pointer"
for f in pagefault brk mmap mappings; do
    cc $flags -o "$work/$f" "fixtures/$f.c"
done
cc -O2 -g -fno-optimize-sibling-calls -fno-omit-frame-pointer -o "$work/pagefault-fp" fixtures/pagefault.c

rec() { "$A" record -q -m 8192 "$@" >/dev/null 2>&1; }
rec -e page-faults -o "$work/faults.data" -- "$work/pagefault" 3000
rec -e syscalls:sys_enter_brk,syscalls:sys_exit_brk,syscalls:sys_enter_mmap -o "$work/tp.data" -- sh -c "$work/brk 50; $work/mmap 40"
rec -e page-faults --unwind offline -o "$work/offline.data" -- "$work/pagefault" 500
rec -e page-faults -o "$work/maps.data" -- "$work/mappings" 20 30 40 "$work/mapped-file"
rec -e page-faults,syscalls:sys_enter_brk -o "$work/two.data" -- "$work/brk" 20
perf record -q -e page-faults -c 1 -g -o "$work/perf-fp.data" -- "$work/pagefault-fp" 2000 >/dev/null 2>&1
perf record -q -e page-faults -c 1 --call-graph dwarf -o "$work/perf-dwarf.data" -- "$work/pagefault" 2000 >/dev/null 2>&1

fail=0
compare() {
    local name=$1
    shift
    local oa="$work/a.$name" ob="$work/b.$name"
    # Outputs written to a file name go to stdout here via `-`.
    "$A" "$@" >"$oa" 2>"$oa.err" || echo "exit $?" >>"$oa.err"
    "$B" "$@" >"$ob" 2>"$ob.err" || echo "exit $?" >>"$ob.err"
    if cmp -s "$oa" "$ob" && cmp -s "$oa.err" "$ob.err"; then
        printf 'same  %-28s %8d bytes\n' "$name" "$(stat -c %s "$oa")"
    else
        printf 'DIFF  %-28s\n' "$name"
        diff <(head -c 200000 "$oa" | cat -v) <(head -c 200000 "$ob" | cat -v) | head -20 || true
        diff "$oa.err" "$ob.err" | head -10 || true
        fail=1
    fi
}

for f in faults offline maps perf-fp perf-dwarf; do
    d="$work/$f.data"
    compare "$f.text" report -q -i "$d"
    compare "$f.folded" report -q -i "$d" --folded
    compare "$f.folded-pid" report -q -i "$d" --folded --per-pid --addrs --reverse
    compare "$f.flame" report -q -i "$d" --flamegraph -
    compare "$f.pprof" report -q -i "$d" --pprof -
    compare "$f.by" report -q -i "$d" --by mapping
    compare "$f.timeline" report -q -i "$d" --timeline 1ms
    compare "$f.script" script -i "$d"
done
compare "maps.by-file" report -q -i "$work/maps.data" --by file
compare "maps.weight" report -q -i "$work/maps.data" --weight bytes --folded
for ev in syscalls:sys_enter_brk syscalls:sys_enter_mmap; do
    compare "tp.$ev.folded" report -q -i "$work/tp.data" --folded --event "$ev"
    compare "tp.$ev.weight" report -q -i "$work/tp.data" --folded --event "$ev" --weight bytes
done
compare "tp.text" report -q -i "$work/tp.data"
compare "tp.script" script -i "$work/tp.data"
compare "tp.pprof" report -q -i "$work/tp.data" --pprof -
compare "tp.timeline" report -q -i "$work/tp.data" --timeline 10ms
compare "two.text" report -q -i "$work/two.data"
compare "two.script" script -i "$work/two.data"
exit $fail
