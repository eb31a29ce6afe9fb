"""The CPython workloads of benches/accuracy.sh: page faults at the bottom of deep recursions
whose C stacks differ, so that a stack finished later from the live thread can be told apart
from the one the fault had.

    accuracy-work.py phases SECS DEPTH     map() recursion for SECS/2 s, then a class's
                                           __call__ recursion for SECS/2 s (each frame of
                                           either goes through C: map_next, slot_tp_call)
    accuracy-work.py alternate SECS DEPTH  the same two recursions, switching every 20 ms
    accuracy-work.py threads SECS DEPTH    waves of 4 threads, each running both recursions in
                                           turn for 50 ms, then exiting

Each fault is a page of a fresh anonymous mapping written at the bottom of the recursion
(mmap.write: the fault is in memcpy, under the whole Python stack); between faults the
thread keeps recursing.
"""

import mmap
import sys
import threading
import time

PAGES = 4
EVERY = 0.002  # seconds between touches: about 2000 faults a second
next_touch = 0.0
touches = 0


def bottom():
    """At the bottom of a recursion: touch PAGES fresh pages when it is time, else return
    at once, so that the thread keeps recursing (its stack keeps changing) between faults."""
    global next_touch, touches
    now = time.monotonic()
    if now >= next_touch:
        next_touch = now + EVERY
        m = mmap.mmap(-1, PAGES * 4096)
        m.write(bytes(PAGES * 4096))
        m.close()
        touches += 1
    return 0


# Each level of either recursion calls the next through list.sort's key function: list_sort
# keeps its MergeState (about 4 KiB) on the C stack, so a few levels are deeper than memperf's
# 8 KiB copy while the whole stack stays inside the truth's 64 KiB and 127 frames.


def by_map(n):
    if n == 0:
        return bottom()
    return sum(map(sort_by_map, (n - 1,)))


def sort_by_map(n):
    return sorted((n,), key=by_map)[0]


class Walker:
    def __call__(self, n):
        if n == 0:
            return bottom()
        return self.step(n)

    def step(self, n):
        return sorted((n - 1,), key=self)[0]


def run_for(secs, fn, depth):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        fn(depth)


def alternate(secs, depth):
    walker = Walker()
    end = time.monotonic() + secs
    while time.monotonic() < end:
        by_map(depth)
        walker(depth)


def main():
    mode, secs, depth = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    walker = Walker()
    if mode == "phases":
        run_for(secs / 2, by_map, depth)
        run_for(secs / 2, walker, depth)
    elif mode == "alternate":
        end = time.monotonic() + secs
        while time.monotonic() < end:
            run_for(0.02, by_map, depth)
            run_for(0.02, walker, depth)
    elif mode == "threads":
        end = time.monotonic() + secs
        while time.monotonic() < end:
            wave = [threading.Thread(target=alternate, args=(0.05, depth)) for _ in range(4)]
            for t in wave:
                t.start()
            for t in wave:
                t.join()
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
