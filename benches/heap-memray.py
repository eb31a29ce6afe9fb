# The workload of benches/heap-memray.sh: a known peak and known temporaries, in buffers
# large enough that CPython asks malloc for each (bytearray(n) mallocs n + 1 bytes).
#   keep   10 x 100000 B kept to the end
#   spike  30 x 100000 B, then all freed: the peak is keep + spike, 4000000 B above start
#   temp   1000 x 50000 B, each freed before the next allocation: temporaries
import os
import time

# Under `memperf heap -p`, the bench starts the interpreter, attaches once it is up, then
# creates this file: the work below starts after the attach, as memray's starts at the
# script's first line, so that neither counts CPython's start-up.
go = os.environ.get("HEAP_MEMRAY_GO")
if go:
    while not os.path.exists(go):
        time.sleep(0.01)

def keep():
    return [bytearray(100_000) for _ in range(10)]

def spike():
    s = [bytearray(100_000) for _ in range(30)]
    del s

def temp():
    for _ in range(1000):
        b = bytearray(50_000)
        del b

kept = keep()
spike()
temp()
time.sleep(0.3)
