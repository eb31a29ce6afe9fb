#!/bin/sh
# /init of the guests benches/kernels.sh boots: runs memperf, perf, bpftrace and
# BCC on this kernel, writes each command's output, error and exit code under
# /out, and sends /out to the host as a base64 tar on the second serial port
# (the first is the console). busybox's `timeout` bounds every command, so a
# hang shows as exit code 124 (or 143) and the guest still reports.
export PATH=/usr/local/bin:/usr/bin:/usr/sbin:/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
mkdir -p /tmp /out
mount -t tmpfs tmp /tmp
chmod 1777 /tmp

CONF=$(sed -n 's/.*memperf\.config=\([^ ]*\).*/\1/p' /proc/cmdline)
PAGES=$(sed -n 's/.*memperf\.pages=\([0-9]*\).*/\1/p' /proc/cmdline)
: "${PAGES:=2000}"
LIMIT=300 # seconds for one command; the emulated CPU is 10-50 times slower
F=/fixtures
echo "MEMPERF-GUEST-START config=$CONF pages=$PAGES"

# run NAME CMD...: CMD's stdout, stderr and exit code in /out/NAME.{out,err,rc}.
run() {
    name=$1
    shift
    echo "MEMPERF-GUEST-RUN $name: $*"
    start=$(date +%s)
    timeout $LIMIT "$@" >"/out/$name.out" 2>"/out/$name.err" </dev/null
    echo $? >"/out/$name.rc"
    echo "MEMPERF-GUEST-RC $name $(cat "/out/$name.rc") $(($(date +%s) - start))s"
}

# The kernel as booted: what memperf finds here is checked against this.
uname -a >/out/uname.txt
cat /proc/cmdline >/out/cmdline.txt
zcat /proc/config.gz >/out/config.txt 2>/dev/null
cat /sys/kernel/security/lockdown >/out/lockdown.txt 2>/dev/null ||
    { mount -t securityfs none /sys/kernel/security 2>/dev/null &&
        cat /sys/kernel/security/lockdown >/out/lockdown.txt 2>/dev/null; }
if grep -q 'memperf.paranoid=3' /proc/cmdline; then
    # Debian's and Ubuntu's patch: 3 forbids perf_event_open to every user
    # without CAP_PERFMON or CAP_SYS_ADMIN.
    sysctl -w kernel.perf_event_paranoid=3 >/out/sysctl.txt 2>&1
fi
cat /proc/sys/kernel/perf_event_paranoid >/out/paranoid.txt

cd /tmp
run check memperf list --check
run record memperf record -e page-faults -o /tmp/pf.data -- $F/pagefault "$PAGES"
run folded memperf report --folded -i /tmp/pf.data
run report memperf report -i /tmp/pf.data
# The truth beside: perf's own count of the same fixture, and the fixture's
# faults when it touches nothing.
run perf-stat perf stat -x, -e page-faults -- $F/pagefault "$PAGES"
run perf-stat0 perf stat -x, -e page-faults -- $F/pagefault 0
run stat memperf stat -x, -e page-faults -- $F/pagefault "$PAGES"
run stat0 memperf stat -x, -e page-faults -- $F/pagefault 0
run perf-record perf record -e page-faults -c 1 --call-graph dwarf -o /tmp/perf.data -- $F/pagefault "$PAGES"
run perf-report perf report -i /tmp/perf.data --stdio --no-children -g none --sort sym -F sample,sym

# Every memory tool, each on a fixture that gives it something to see.
run leak memperf leak -- $F/leak 100 1000
run leak-kernel memperf leak --kernel -- $F/pagefault 100
run rss memperf rss -- $F/leak 100 1000
run heap memperf heap -- $F/leak 100 1000
run faults memperf faults -- $F/pagefault 200
run brkstack memperf brkstack -- $F/leak 100 1000
run ffaults memperf ffaults -- $F/pagefault 200
run fmapfault memperf fmapfault -- $F/pagefault 200
run hfaults memperf hfaults -- $F/pagefault 200
run swapin memperf swapin 1 1 -- $F/pagefault 200
run drsnoop memperf drsnoop -- $F/pagefault 200
run vmscan memperf vmscan 1 1 -- $F/pagefault 200
run slabratetop memperf slabratetop 1 1 -- $F/pagefault 200
run mmapsnoop memperf mmapsnoop -- $F/pagefault 200
run shmsnoop memperf shmsnoop -- $F/pagefault 200
run oomkill memperf oomkill -- $F/pagefault 200
run triage memperf triage
run mem memperf mem record -o /tmp/mem.data -- $F/pagefault 200

# An unprivileged user: what perf_event_paranoid leaves to it.
run user-check su -s /bin/sh user -c "memperf list --check"
run user-record su -s /bin/sh user -c "memperf record -e page-faults -o /tmp/user.data -- $F/pagefault 100"

# The BPF tools beside, on the same kernel.
# Debian's headers of the same source version (the script put them there):
# both compile their programs against kernel headers.
for h in /usr/src/linux-headers-*-common; do
    export BCC_KERNEL_SOURCE=$h BPFTRACE_KERNEL_SOURCE=$h
done
if [ -x /usr/bin/bpftrace ]; then
    run bpftrace bpftrace -e 'tracepoint:exceptions:page_fault_user { @[comm] = count(); }' -c "$F/pagefault 100"
fi
if [ -x /usr/sbin/memleak-bpfcc ]; then
    run memleak-bpfcc /usr/sbin/memleak-bpfcc -c "$F/leak 100 1000"
fi

echo "MEMPERF-GUEST-SENDING"
# The results on the second serial port, between markers the host looks for.
{
    echo "MEMPERF-RESULTS-BEGIN"
    tar -C /out -cf - . | gzip | base64
    echo "MEMPERF-RESULTS-END"
} >/dev/ttyS1
echo "MEMPERF-GUEST-DONE"
sync
reboot -f
