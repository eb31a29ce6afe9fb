#!/usr/bin/env bash
# memperf heap beside memray on one CPython program (benches/heap-memray.py: 10 x 100000 B
# kept, 30 x 100000 B at once then freed, 1000 x 50000 B temporaries): the peak, and the
# temporary allocations by memray's rule (freed with at most N other allocations of the
# thread between: memray's --temporary-allocation-threshold N, memperf's
# --temporary-threshold N). memray is installed from PyPI into a venv under the bench's
# cache dir; both run with PYTHONMALLOC=malloc, so that memray sees what the allocator sees
# (with pymalloc, memray reports pymalloc's objects, memperf the arenas pymalloc maps).
#
# memperf runs twice: from exec (`heap -- python`, which counts CPython's start-up too, about
# 1.5 MB live at the peak) and attached to the running interpreter once it is up (`heap -p`,
# which starts where memray starts: the script's first line). The second is the one to
# compare.
#
# Usage: benches/heap-memray.sh [THRESHOLD]     (default 1)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/memperf-bench/heap-memray
mkdir -p "$cache"
if [ ! -x "$cache/venv/bin/memray" ]; then
    python3 -m venv "$cache/venv"
    "$cache/venv/bin/pip" install -q memray
fi
PY=$cache/venv/bin/python
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cargo build --quiet
MEMPERF=${CARGO_TARGET_DIR:-target}/debug/memperf
script=benches/heap-memray.py

echo "== memray (PYTHONMALLOC=malloc, --native off, threshold $N)"
PYTHONMALLOC=malloc "$PY" -m memray run -q -o "$work/m.bin" "$script"
"$PY" - "$work/m.bin" "$N" <<'PYEOF'
import sys
from memray import FileReader
r = FileReader(sys.argv[1])
n = int(sys.argv[2])
print(f"peak            {r.metadata.peak_memory} B")
print(f"allocations     {r.metadata.total_allocations}")
temps = list(r.get_temporary_allocation_records(threshold=n, merge_threads=False))
print(f"temporary (N={n}) {sum(t.n_allocations for t in temps)} allocations, "
      f"{sum(t.size for t in temps)} B")
big = [t for t in temps if any(f[0] == 'temp' for f in t.stack_trace())]
print(f"  in temp()     {sum(t.n_allocations for t in big)} allocations")
PYEOF

echo "== memperf heap from exec (PYTHONMALLOC=malloc, --temporary-threshold $N)"
PYTHONMALLOC=malloc flock /tmp/memperf-machine.lock "$MEMPERF" heap -m 4096 --call-graph fp \
    --temporary-threshold "$N" -- "$PY" "$script" 2>/dev/null |
    grep -E '^HEAP|^  (peak|leaked|temporary) |^             [0-9]+ freed'

echo "== memperf heap -p after start-up (PYTHONMALLOC=malloc, --temporary-threshold $N)"
go=$work/go
PYTHONMALLOC=malloc HEAP_MEMRAY_GO=$go "$PY" "$script" &
py=$!
# The interpreter is up when it waits for the go file (its script is running).
for _ in $(seq 500); do
    grep -q "$script" "/proc/$py/cmdline" 2>/dev/null && [ -e "/proc/$py/fd/0" ] && break
    sleep 0.01
done
sleep 0.5
exec 3< <(flock /tmp/memperf-machine.lock "$MEMPERF" heap -m 4096 --call-graph fp \
    --temporary-threshold "$N" -p "$py" 2>"$work/err")
# The probes are placed when memperf says it is tracing.
for _ in $(seq 3000); do
    grep -q '^Tracing the heap' "$work/err" 2>/dev/null && break
    sleep 0.01
done
touch "$go"
grep -E '^HEAP|^  (peak|leaked|temporary) |^             [0-9]+ freed' <&3 || true
wait "$py"
