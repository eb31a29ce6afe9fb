"""The comparison of benches/accuracy.sh: one workload's two recordings of the same faults,
memperf at its defaults on `page-faults` and the ground truth (the whole stack in the
kernel's copy, unwound offline) on `minor-faults,major-faults`, each printed by `memperf
script -F tid,time,addr,ip,sym,dso`.

    accuracy.py header
    accuracy.py row NAME DEFAULT.script TRUTH.script DEFAULT.err TRUTH.err

The kernel fires `page-faults` when a fault starts and `minor-faults` or `major-faults` when
it is done, on the same thread, with the same address and the same user registers and stack
(the thread is in the kernel between the two). So a default sample pairs with its thread's
next truth sample at the same address, no earlier than it and no later than the thread's
next default sample. The pairs are checked: the kernel frames and the leaf (taken from the
registers, not unwound) must agree; a pair that does not is left out and counted.

Frames compare leaf first, only as deep as both stacks go, by address and module (WRONG) and
by function and module (wrong fn: the same functions, maybe other call sites). A default
stack is wrong when one of its frames differs from the truth's at the same depth, or when it
goes on past the truth's outermost frame where the truth is whole. A stack that stops early
but agrees where it goes is cut, not wrong.
"""

import re
import sys

KERNEL = "[kernel.kallsyms]"
# A stack is whole when its outermost frame is where a process or a thread starts, or the
# frame that called __libc_start_main (a stripped binary's _start has no name).
ROOTS = {"_start", "__clone3", "clone3", "__clone", "clone", "_dl_start_user"}
LIBC_START = {"__libc_start_main", "__libc_start_main_impl"}
HEAD = re.compile(r"^\s*(\d+)\s+(\d+\.\d+):\s+([0-9a-f]+)?\s*$")
FRAME = re.compile(r"^\t\s*([0-9a-f]+) (.*) \((.*)\)$")
RECOVERED = re.compile(r"^# \[recovered\] the last (\d+) frames")
FINISHED = re.compile(r"(\d+) finished from the live process")
LOST = re.compile(r"lost (\d+) events in \d+ LOST records, (\d+) lost samples")

COLUMNS = [
    ("workload", 12), ("samples def/truth", 17), ("lost def/truth", 14), ("paired", 11),
    ("gap us", 7), ("truth whole", 11), ("recovered", 9), ("WRONG", 10), ("wrong fn", 10),
    ("copy-only bad", 13), ("deep", 5), ("deep right/cut/wrong", 20),
]


def samples(path):
    """(tid, time, addr) -> list of (recovered frames, kernel frames, user frames)."""
    out, rec, cur = {}, 0, None
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                cur = None
                continue
            m = RECOVERED.match(line)
            if m:
                rec = int(m.group(1))
                continue
            m = FRAME.match(line)
            if m and cur is not None:
                ip, sym, dso = m.groups()
                (cur[1] if dso == KERNEL else cur[2]).append((ip, dso, sym))
                continue
            m = HEAD.match(line)
            if m:
                cur = (rec, [], [])
                out.setdefault(m.groups(), []).append(cur)
                rec = 0
    return out


def function(frame):
    return frame[2].split("+")[0]


def whole(frames):
    return bool(frames) and (function(frames[-1]) in ROOTS or
                             len(frames) > 1 and function(frames[-2]) in LIBC_START)


def by_address(frame):
    return frame[:2]


def by_function(frame):
    """The function and module; the address where the function has no name."""
    return (function(frame), frame[1]) if not frame[2].startswith("[unknown]") else frame[:2]


def compare(d, t, key=by_address):
    """(wrong, where the first difference is: 'copy' or 'recovered' or None)"""
    rec, _, du = d
    _, _, tu = t
    copied = len(du) - rec
    for i in range(min(len(du), len(tu))):
        if key(du[i]) != key(tu[i]):
            return True, "copy" if i < copied else "recovered"
    if whole(tu) and len(du) > len(tu):
        return True, "copy" if len(tu) < copied else "recovered"
    return False, None


def losses(path):
    lost = 0
    with open(path, errors="replace") as f:
        for line in f:
            m = LOST.search(line)
            if m:
                lost += int(m.group(1)) + int(m.group(2))
                break
    return lost


def median(v):
    return sorted(v)[len(v) // 2] if v else "-"


def pct(n, d):
    return f"{100.0 * n / d:.0f}%" if d else "-"


def usec(t):
    sec, _, frac = t.partition(".")
    return int(sec) * 1000000 + int(frac.ljust(6, "0")[:6])


def by_tid(parsed):
    """tid -> [(time in us, addr, sample)] in time order."""
    out = {}
    for (tid, t, addr), lst in parsed.items():
        for s in lst:
            out.setdefault(tid, []).append((usec(t), addr, s))
    for v in out.values():
        v.sort(key=lambda x: x[0])
    return out


def pairs(ds, ts):
    """Each default sample with the truth's sample of the same fault: the thread's next truth
    sample at the same address, no earlier, and no later than the thread's next default
    sample (a thread takes its faults one at a time)."""
    dt, tt = by_tid(ds), by_tid(ts)
    for tid, dl in dt.items():
        tl, p = tt.get(tid, []), 0
        for i, (t, addr, d) in enumerate(dl):
            end = dl[i + 1][0] if i + 1 < len(dl) else float("inf")
            while p < len(tl) and tl[p][0] < t:
                p += 1
            q = p
            while q < len(tl) and tl[q][0] <= end and tl[q][1] != addr:
                q += 1
            if q < len(tl) and tl[q][0] <= end:
                yield d, tl[q][2], tl[q][0] - t
                p = q + 1


def row(name, dpath, tpath, derr, terr):
    ds, ts = samples(dpath), samples(tpath)
    nd = sum(len(v) for v in ds.values())
    nt = sum(len(v) for v in ts.values())
    c = dict(paired=0, check_bad=0, truth_whole=0, rec=0, wrong=0, wrong_fn=0, copy_bad=0,
             deep=0,
             deep_right=0, deep_cut=0, deep_wrong=0)
    gaps = []
    for d, t, gap in pairs(ds, ts):
        c["paired"] += 1
        gaps.append(gap)
        if d[1] != t[1] or d[2][:1] != t[2][:1]:
            c["check_bad"] += 1
            continue
        c["truth_whole"] += whole(t[2])
        wrong, where = compare(d, t)
        rec, du, tu = d[0], d[2], t[2]
        if rec:
            c["rec"] += 1
            c["wrong"] += wrong
            c["wrong_fn"] += compare(d, t, by_function)[0]
        if where == "copy":
            c["copy_bad"] += 1
        if rec or len(tu) > len(du) - rec:
            c["deep"] += 1
            if wrong:
                c["deep_wrong"] += 1
            elif whole(du) and len(du) >= len(tu):
                c["deep_right"] += 1
            else:
                c["deep_cut"] += 1
    checked = c["paired"] - c["check_bad"]
    cells = [
        name,
        f"{nd}/{nt}",
        f"{losses(derr)}/{losses(terr)}",
        f"{c['paired']} {pct(c['paired'], max(nd, nt))}",
        f"{median(gaps)}/{max(gaps, default='-')}",
        pct(c["truth_whole"], checked),
        str(c["rec"]),
        f"{c['wrong']} {pct(c['wrong'], c['rec'])}",
        f"{c['wrong_fn']} {pct(c['wrong_fn'], c['rec'])}",
        str(c["copy_bad"]),
        str(c["deep"]),
        f"{pct(c['deep_right'], c['deep'])}/{pct(c['deep_cut'], c['deep'])}/"
        f"{pct(c['deep_wrong'], c['deep'])}",
    ]
    print_cells(cells)
    with open(derr, errors="replace") as f:
        finished = FINISHED.search(f.read())
    if finished and int(finished.group(1)) and not any(
            s[0] for lst in ds.values() for s in lst):
        print(f"  {name}: the default finished {finished.group(1)} stacks from the live process "
              "but its script marks none `# [recovered]`: has the comment changed?", flush=True)
    truth_rec = sum(s[0] > 0 for lst in ts.values() for s in lst)
    if truth_rec:
        print(f"  {name}: {truth_rec} truth stacks hold recovered frames: the truth is not "
              "only its copy", flush=True)
    if c["check_bad"]:
        print(f"  {name}: {c['check_bad']} pairs whose kernel frames or leaf differ "
              "(not the same fault): left out", flush=True)


def print_cells(cells):
    print("  ".join(f"{v:<{w}}" if i == 0 else f"{v:>{w}}"
                    for i, (v, (_, w)) in enumerate(zip(cells, COLUMNS))), flush=True)


def main():
    if sys.argv[1] == "header":
        print_cells([h for h, _ in COLUMNS])
    elif sys.argv[1] == "row":
        row(*sys.argv[2:7])
    else:
        sys.exit(f"usage: {sys.argv[0]} header | row NAME DEF TRUTH DEF.err TRUTH.err")


if __name__ == "__main__":
    main()
