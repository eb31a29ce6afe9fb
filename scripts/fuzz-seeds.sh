#!/bin/sh
# Makes the fuzz targets' seed corpora (fuzz/README.md): real recordings, small ones, of
# every memory tool's `-w` and of `memperf record` (frame-pointer, DWARF and no call graph) and `perf record` (file and pipe mode), made by running them briefly on the
# fixtures. The reclaim and OOM tools record a hog in a memory cgroup (v1 or v2) that
# limits it to 24 MiB, the hog alone (-a would add every process's maps: 700 KiB); swapin
# records a swapper given a swap file for the time it runs.
# System-wide runs take /tmp/memperf-machine.lock. Run as root from the repository:
#   scripts/fuzz-seeds.sh [OUT]        (default fuzz/corpus; MEMPERF=path/to/memperf)
# Writes OUT/perfdata, OUT/report (the same recordings: what `record` makes) and OUT/tools
# (each tool's recording behind one byte: the index of its command line in
# fuzz/fuzz_targets/tools.rs's COMMANDS).
set -u
MEMPERF=${MEMPERF:-${CARGO_TARGET_DIR:-target}/debug/memperf}
out=${1:-fuzz/corpus}
lock=/tmp/memperf-machine.lock
mkdir -p "$out/perfdata" "$out/report" "$out/tools"
tmp=$(mktemp -d)
trap 'swapoff "$tmp/swap" 2>/dev/null; rmdir "$cg" 2>/dev/null; rm -rf "$tmp"' EXIT
for f in pagefault brk mmap filefaults openclose mapper shmer hog swapper rss; do
    cc -O2 -g -fno-optimize-sibling-calls -fno-omit-frame-pointer -o "$tmp/$f" \
        "fixtures/$f.c" -lpthread -lrt || exit 1
done

# tool_seed IDX... FILE: FILE behind each index byte, into OUT/tools.
tool_seed() {
    file=$(eval echo "\${$#}")
    [ -s "$file" ] || { echo "no recording $file" >&2; return; }
    while [ $# -gt 1 ]; do
        { printf "\\$(printf %03o "$1")"; cat "$file"; } > "$out/tools/$(basename "$file").$1"
        shift
    done
}
# record_seed FILE: a recording `report` reads.
record_seed() {
    [ -s "$1" ] || { echo "no recording $1" >&2; return; }
    cp "$1" "$out/report/"; cp "$1" "$out/perfdata/"
}
# The exit code is the workload's (mapper's mmap fails on purpose): the seeds are checked.
m() { "$MEMPERF" "$@" > /dev/null 2>> "$tmp/log"; }

# A memory cgroup, \$cg, limiting what runs in it to 24 MiB (no swap unless $1 is "swap").
cgroup() {
    cg=/sys/fs/cgroup/memory/memperf-fuzz-seeds
    if [ -e /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then
        mkdir -p "$cg"
        echo 25165824 > "$cg/memory.limit_in_bytes"
        [ "${1-}" = swap ] || echo 25165824 > "$cg/memory.memsw.limit_in_bytes" 2>/dev/null
    else
        cg=/sys/fs/cgroup/memperf-fuzz-seeds
        mkdir -p "$cg"
        echo 25165824 > "$cg/memory.max"
        [ "${1-}" = swap ] && echo max > "$cg/memory.swap.max" || echo 0 > "$cg/memory.swap.max"
    fi
}
in_cg() { echo "sh -c 'echo \$\$ > $cg/cgroup.procs && exec $*'"; }

# The tools on their own workloads.
m faults -w "$tmp/faults.data" -- "$tmp/pagefault" 16
tool_seed 0 1 "$tmp/faults.data"
m brkstack -w "$tmp/brkstack.data" -- "$tmp/brk" 4
tool_seed 2 "$tmp/brkstack.data"
for t in ffaults fmapfault hfaults; do
    m "$t" -w "$tmp/$t.data" -- "$tmp/filefaults" "$tmp/ff.file" 4 4 0
done
tool_seed 3 "$tmp/ffaults.data"; tool_seed 4 "$tmp/fmapfault.data"; tool_seed 5 "$tmp/hfaults.data"
m slabratetop -w "$tmp/slabratetop.data" -- "$tmp/openclose" 50 /etc/hostname
tool_seed 11 12 "$tmp/slabratetop.data"
m mmapsnoop -w "$tmp/mmapsnoop.data" --stack -- "$tmp/mapper"
tool_seed 13 "$tmp/mmapsnoop.data"
m shmsnoop -w "$tmp/shmsnoop.data" --stack -- "$tmp/shmer"
tool_seed 14 "$tmp/shmsnoop.data"
m rss -w "$tmp/rss.data" -c "$tmp/rss three 8"
tool_seed 16 17 "$tmp/rss.data"

# Reclaim and the OOM killer: a hog in a 24 MiB cgroup.
cgroup
for t in drsnoop vmscan oomkill; do
    flags=; [ $t = drsnoop ] && flags=--stack
    eval flock "$lock" "$MEMPERF" $t $flags -w "$tmp/$t.data" -- "$(in_cg "$tmp/hog" 64)" \
        > /dev/null 2>> "$tmp/log"
done
tool_seed 8 "$tmp/drsnoop.data"; tool_seed 9 10 "$tmp/vmscan.data"; tool_seed 15 "$tmp/oomkill.data"
rmdir "$cg"

# Swap-ins: a swapper over the limit with a swap file on.
dd if=/dev/zero of="$tmp/swap" bs=1M count=64 status=none && chmod 600 "$tmp/swap" &&
    mkswap "$tmp/swap" > /dev/null && swapon "$tmp/swap" && cgroup swap &&
    eval flock "$lock" "$MEMPERF" swapin -w "$tmp/swapin.data" -- "$(in_cg "$tmp/swapper" 40)" \
        > /dev/null 2>> "$tmp/log"
swapoff "$tmp/swap" 2>/dev/null; rmdir "$cg" 2>/dev/null
tool_seed 6 7 "$tmp/swapin.data"

# record and perf record: what report, script and mem report read.
ev=page-faults,syscalls:sys_enter_brk
m record -q -e $ev --call-graph dwarf,512 --unwind offline -o "$tmp/dwarf.data" -- "$tmp/brk" 2
m record -q -e $ev --call-graph dwarf,512 -o "$tmp/dwarf-online.data" -- "$tmp/pagefault" 8
m record -q -e $ev --call-graph fp -o "$tmp/fp.data" -- "$tmp/brk" 2
m record -q -e page-faults -o "$tmp/nostack.data" -- "$tmp/mmap" 4
m record -q -e syscalls:sys_enter_mmap,syscalls:sys_enter_munmap,kmem:kmalloc \
    --call-graph fp -o "$tmp/tracepoints.data" -- "$tmp/mapper"
perf record -q -c 1 -e page-faults,syscalls:sys_enter_brk -g -o "$tmp/perf-fp.data" \
    -- "$tmp/brk" 2 > /dev/null 2>&1
perf record -q -c 1 -e page-faults --call-graph dwarf,512 -o - -- "$tmp/pagefault" 4 \
    > "$tmp/perf-pipe.data" 2>/dev/null
perf record -q -c 1 -e page-faults -d -o - -- "$tmp/pagefault" 4 \
    > "$tmp/perf-pipe-addr.data" 2>/dev/null
for f in dwarf dwarf-online fp nostack tracepoints perf-fp perf-pipe perf-pipe-addr; do
    record_seed "$tmp/$f.data"
done
# Every tool's recording is one record reads too.
for f in faults brkstack slabratetop mmapsnoop oomkill; do record_seed "$tmp/$f.data"; done
[ -s "$tmp/log" ] && grep -i "error" "$tmp/log" | sort -u >&2
du -sh "$out"/* >&2
