#!/bin/sh
# Fuzzes TARGET for SECONDS (fuzz/README.md), at the lowest priority (or $NICE), with libFuzzer's
# -timeout=10 (a hang is a bug too); restarts after a crash until the time is up, so one
# crash does not end the run. Crashes and timeouts land in artifacts/TARGET/, the log in
# logs/TARGET.log. Run from fuzz/ after `cargo +nightly fuzz build -s none` (with the same
# CARGO_TARGET_DIR, if any):
#   ./run.sh tools 3600
# Each input is read afresh, with what names its frames: /proc/kallsyms (5 MiB here) and
# the DWARF of the files its maps name, from /usr/lib/debug (libc6-dbg's compressed
# sections): most of each run's time, and not data the fuzzer mutates. In a private mount
# namespace (root), the run sees a 1-in-40 sample of kallsyms, which still names kernel
# frames, and an empty /usr/lib/debug (user frames are then named from .symtab/.dynsym).
set -u
target=$1
seconds=$2
bin=${CARGO_TARGET_DIR:-target}/x86_64-unknown-linux-gnu/release/$target
mkdir -p "corpus/$target" "artifacts/$target" logs
awk 'NR % 40 == 1' /proc/kallsyms > "logs/kallsyms.$target"
end=$(($(date +%s) + seconds))
while [ "$(date +%s)" -lt "$end" ]; do
    left=$((end - $(date +%s)))
    unshare -m sh -c 'mount --bind "$1" /proc/kallsyms && mount -t tmpfs none /usr/lib/debug &&
        shift && exec "$@"' sh \
        "logs/kallsyms.$target" nice -n "${NICE:-19}" "$bin" -timeout=10 -rss_limit_mb=2048 \
        -max_len=262144 -close_fd_mask=2 -max_total_time="$left" -print_final_stats=1 \
        -artifact_prefix="artifacts/$target/" "corpus/$target" >> "logs/$target.log" 2>&1
    echo "=== exit $? at $(date -u +%T)" >> "logs/$target.log"
done
