#!/usr/bin/env bash
# memperf on kernels built without BPF, without uprobes, without tracing, and
# under lockdown with perf_event_paranoid=3: each booted under qemu (software
# emulation), each running memperf, perf, bpftrace and BCC on a fixture with a
# known fault count. docs/kernels.md says what each kernel is and what is
# checked.
#
#   benches/kernels.sh                    # every configuration
#   benches/kernels.sh no-bpf lockdown    # just these
#
# Configurations: debian (Debian's own cloud kernel, BPF and all: the
# reference), no-bpf, no-uprobes, no-tracing, lockdown. Kernel images are
# cached under ~/.cache/memperf/kernels/images (keyed by the hash of the
# source package's version and the config fragments), the guests' shared
# root filesystem under ~/.cache/memperf/kernels/rootfs; each run's outputs
# land in ~/.cache/memperf/kernels/out/CONFIG (MEMPERF_KERNELS_OUT to move
# them). Exit status 0 when every check of every configuration passed.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HERE=$ROOT/benches/kernels
CACHE=${MEMPERF_KERNELS_CACHE:-$HOME/.cache/memperf/kernels}
OUT=${MEMPERF_KERNELS_OUT:-$CACHE/out}
PAGES=${MEMPERF_KERNELS_PAGES:-2000}
GUEST_TIMEOUT=${MEMPERF_KERNELS_TIMEOUT:-2400} # seconds for one guest, boot to report
ALL=(debian no-bpf no-uprobes no-tracing lockdown)
CONFIGS=("${@:-${ALL[@]}}")
SRC_TAR=/usr/src/linux-source-6.1.tar.xz

log() { printf '%s kernels: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

install_tools() {
    local need=()
    [[ -f $SRC_TAR ]] || need+=(linux-source-6.1)
    command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
    [[ -x /bin/busybox ]] || need+=(busybox-static)
    command -v flex >/dev/null || need+=(flex)
    command -v bison >/dev/null || need+=(bison)
    command -v bc >/dev/null || need+=(bc)
    command -v cpio >/dev/null || need+=(cpio)
    command -v perf >/dev/null || need+=(linux-perf)
    command -v bpftrace >/dev/null || need+=(bpftrace)
    [[ -x /usr/sbin/memleak-bpfcc ]] || need+=(bpfcc-tools)
    [[ -f /usr/include/libelf.h ]] || need+=(libelf-dev)
    [[ -f /usr/include/openssl/ssl.h ]] || need+=(libssl-dev)
    if ((${#need[@]})); then
        log "installing ${need[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
    fi
}

# The kernel configuration a name stands for: tinyconfig, then these fragments.
fragments() {
    case $1 in
        debian) echo "" ;;
        no-bpf | lockdown) echo "$HERE/base.config" ;;
        no-uprobes) echo "$HERE/base.config $HERE/no-uprobes.config" ;;
        no-tracing) echo "$HERE/base.config $HERE/no-tracing.config" ;;
        *) echo "unknown configuration $1 (one of: ${ALL[*]})" >&2 && exit 2 ;;
    esac
}

# Boot parameters beyond the console's.
cmdline() {
    case $1 in
        lockdown) echo "lockdown=confidentiality memperf.paranoid=3" ;;
        *) echo "" ;;
    esac
}

source_version() { dpkg-query -W -f='${Version}' linux-source-6.1; }

kernel_key() {
    # shellcheck disable=SC2046
    { source_version; cat $(fragments "$1"); } | sha256sum | cut -c1-16
}

# Builds (or finds) the image of configuration $1; prints its path. One
# source tree and one build directory serve every configuration: switching
# configurations rebuilds only what the changed options touch.
kernel_image() {
    if [[ $1 == debian ]]; then
        debian_image
        return
    fi
    local key dir src=$CACHE/linux-source-6.1 build=${MEMPERF_KERNELS_BUILD:-$CACHE/build}
    key=$(kernel_key "$1")
    dir=$CACHE/images/$key
    if [[ -f $dir/bzImage ]]; then
        echo "$dir/bzImage"
        return
    fi
    if [[ ! -f $src/Makefile ]]; then
        log "unpacking $SRC_TAR"
        mkdir -p "$CACHE"
        tar -C "$CACHE" -xf "$SRC_TAR"
    fi
    mkdir -p "$build" "$dir"
    rm -f "$build/.config"
    make -s -C "$src" O="$build" ARCH=x86_64 tinyconfig >/dev/null
    # shellcheck disable=SC2046
    "$src/scripts/kconfig/merge_config.sh" -m -O "$build" "$build/.config" $(fragments "$1") >/dev/null
    make -s -C "$src" O="$build" ARCH=x86_64 olddefconfig
    check_config "$1" "$build/.config"
    log "building the kernel for $1 (key $key; nice ${MEMPERF_KERNELS_NICE:-19}, -j2)"
    local t0=$SECONDS
    nice -n "${MEMPERF_KERNELS_NICE:-19}" make -s -C "$src" O="$build" ARCH=x86_64 -j2 bzImage >"$dir/build.log" 2>&1 ||
        { tail -20 "$dir/build.log" >&2 && exit 1; }
    cp "$build/arch/x86/boot/bzImage" "$dir/bzImage.tmp"
    cp "$build/.config" "$dir/config"
    echo $((SECONDS - t0)) >"$dir/build-seconds"
    mv "$dir/bzImage.tmp" "$dir/bzImage"
    log "built $1 in $((SECONDS - t0)) s"
    echo "$dir/bzImage"
}

# Debian's cloud kernel of the same source version, as the package ships it:
# the reference where every tool, BPF ones included, can run.
debian_image() {
    local pkg dir
    pkg=$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image-6/ {print $2; exit}')
    dir=$CACHE/images/$pkg
    if [[ ! -f $dir/bzImage ]]; then
        log "fetching $pkg"
        mkdir -p "$dir/deb"
        (cd "$dir/deb" && apt-get download -q "$pkg" >/dev/null 2>&1 && dpkg-deb -x ./*.deb x)
        cp "$dir"/deb/x/boot/config-* "$dir/config"
        mv "$dir"/deb/x/boot/vmlinuz-* "$dir/bzImage"
        rm -rf "$dir/deb"
    fi
    echo "$dir/bzImage"
}

# Every option the fragments set (the last fragment's word on each) must have
# survived olddefconfig: a dependency it lacks would silently drop it.
check_config() {
    local want
    # shellcheck disable=SC2046
    while IFS= read -r want; do
        if [[ $want == "# "* ]]; then
            want=${want#\# }
            want=${want% is not set}
            ! grep -q "^$want=" "$2" && continue
        elif grep -qxF "$want" "$2"; then
            continue
        fi
        echo "kernels: $1: '$want' did not survive olddefconfig" >&2
        exit 1
    done < <(cat $(fragments "$1") | awk '
        /^CONFIG_[A-Z0-9_]+=/ { k = $0; sub(/=.*/, "", k); v[k] = $0; if (!(k in seen)) { seen[k] = 1; order[n++] = k } }
        /^# CONFIG_[A-Z0-9_]+ is not set/ { k = $2; v[k] = $0; if (!(k in seen)) { seen[k] = 1; order[n++] = k } }
        END { for (i = 0; i < n; i++) print v[order[i]] }')
}

# Copies each file, and the shared libraries ldd names for it, into $ROOTFS.
copy_with_libs() {
    local f
    for f in "$@"; do
        cp -L --parents "$f" "$ROOTFS"
        copy_libs "$f"
    done
}

copy_libs() {
    local lib
    for lib in $(ldd "$1" 2>/dev/null | grep -o '/[^ ]*' || true); do
        [[ -e $ROOTFS$lib ]] || cp -L --parents "$lib" "$ROOTFS"
    done
}

# The guests' shared part of the initramfs: busybox, perf, bpftrace, BCC's
# memleak with the Python it runs on, and their libraries. Built once per
# set of package versions.
rootfs_base() {
    local key versions
    versions=$(dpkg-query -W busybox-static linux-perf bpftrace bpfcc-tools python3-bpfcc python3.11-minimal libpython3.11-stdlib libc6)
    key=$({ echo "$versions"; declare -f rootfs_base copy_with_libs copy_libs debian_headers; } | sha256sum | cut -c1-16)
    local cpio=$CACHE/rootfs/base-$key.cpio
    if [[ -f $cpio ]]; then
        echo "$cpio"
        return
    fi
    log "building the guests' root filesystem (once per package versions)"
    mkdir -p "$CACHE/rootfs"
    ROOTFS=$(mktemp -d "$CACHE/rootfs/tree.XXXXXX")
    chmod 755 "$ROOTFS"
    mkdir -p "$ROOTFS"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp,etc,out}
    cp /bin/busybox "$ROOTFS/bin/busybox"
    local applet
    for applet in $(/bin/busybox --list); do
        [[ -e $ROOTFS/bin/$applet ]] || ln -s busybox "$ROOTFS/bin/$applet"
    done
    printf 'root:x:0:0:root:/:/bin/sh\nuser:x:1000:1000:user:/tmp:/bin/sh\n' >"$ROOTFS/etc/passwd"
    printf 'root:x:0:\nuser:x:1000:\n' >"$ROOTFS/etc/group"
    # perf: Debian's binary (perf_6.1 or perf) and its libraries.
    local perf
    perf=$(command -v perf_6.1 || command -v perf)
    copy_with_libs "$perf"
    [[ $perf == /usr/bin/perf ]] || ln -sf "$(basename "$perf")" "$ROOTFS/usr/bin/perf"
    # bpftrace, and BCC's memleak: Python, its standard library and
    # extension modules, the bcc package and libbcc (loaded by ctypes).
    copy_with_libs /usr/bin/bpftrace /usr/bin/python3.11 /usr/lib/x86_64-linux-gnu/libbcc.so.0
    ln -sf python3.11 "$ROOTFS/usr/bin/python3"
    cp /usr/sbin/memleak-bpfcc "$ROOTFS/usr/sbin/"
    (cd / && tar -cf - --exclude=__pycache__ --exclude='usr/lib/python3.11/test' \
        --exclude='usr/lib/python3.11/idlelib' --exclude='usr/lib/python3.11/tkinter' \
        usr/lib/python3.11 usr/lib/python3/dist-packages/bcc) | tar -C "$ROOTFS" -xf -
    copy_with_libs /usr/lib/python3.11/lib-dynload/*.so
    # What the bcc package loads by name through ctypes.
    cp -L --parents /lib/x86_64-linux-gnu/librt.so.1 "$ROOTFS"
    debian_headers "$ROOTFS"
    (cd "$ROOTFS" && find . | cpio -o -H newc --quiet) >"$cpio.tmp"
    rm -rf "$ROOTFS"
    mv "$cpio.tmp" "$cpio"
    echo "$cpio"
}

# BCC compiles its programs against kernel headers, which no guest kernel
# carries (Debian's has no CONFIG_IKHEADERS): Debian's headers of the same
# source version, only what a compile reads, so that BCC gets as far as the
# bpf(2) call on every guest.
debian_headers() {
    local image tmp
    image=$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image-6/ {print $2; exit}')
    tmp=$(mktemp -d "$CACHE/rootfs/headers.XXXXXX")
    (cd "$tmp" && apt-get download -q "${image/image/headers}" >/dev/null 2>&1 &&
        apt-get download -q "$(echo "${image/image/headers}" | sed 's/-cloud-amd64$/-common/')" >/dev/null 2>&1 &&
        for deb in ./*.deb; do dpkg-deb -x "$deb" x; done)
    local common
    common=$(cd "$tmp/x/usr/src" && echo linux-headers-*-common)
    mkdir -p "$1/usr/src/$common/arch"
    cp -a "$tmp/x/usr/src/$common"/{Makefile,include} "$1/usr/src/$common/"
    cp -a "$tmp/x/usr/src/$common/arch/x86" "$1/usr/src/$common/arch/"
    # One tree: BCC_KERNEL_SOURCE takes one directory, and the flavour's
    # generated headers (autoconf.h) sit beside the common ones.
    local flavour=$tmp/x/usr/src/${image/image/headers}
    rm -f "$flavour/Makefile" "$flavour/scripts"
    cp -a "$flavour/." "$1/usr/src/$common/"
    rm -rf "$tmp"
}

# This checkout's part: /init, memperf and the fixtures, with their libraries.
rootfs_payload() {
    local cpio=$1
    ROOTFS=$(mktemp -d "$CACHE/rootfs/payload.XXXXXX")
    chmod 755 "$ROOTFS"
    mkdir -p "$ROOTFS/usr/local/bin" "$ROOTFS/fixtures"
    cp "$HERE/init.sh" "$ROOTFS/init"
    chmod +x "$ROOTFS/init"
    strip -o "$ROOTFS/usr/local/bin/memperf" "$MEMPERF"
    copy_libs "$MEMPERF"
    # The fixtures as the tests build them, without frame pointers: the
    # stacks must come from DWARF unwinding.
    local flags=(-O2 -g -fno-optimize-sibling-calls -fomit-frame-pointer)
    cc "${flags[@]}" -o "$ROOTFS/fixtures/pagefault" "$ROOT/fixtures/pagefault.c"
    cc "${flags[@]}" -o "$ROOTFS/fixtures/leak" "$ROOT/fixtures/leak.c" -lpthread
    (cd "$ROOTFS" && find . | cpio -o -H newc --quiet) >"$cpio"
    rm -rf "$ROOTFS"
}

# Boots configuration $1; its console log and results land in $OUT/$1.
boot() {
    local name=$1 image=$2 initrd=$3 dir=$OUT/$1
    rm -rf "$dir"
    mkdir -p "$dir"
    log "booting $name (software emulation; at most $GUEST_TIMEOUT s)"
    local t0=$SECONDS rc=0
    timeout --kill-after=10 "$GUEST_TIMEOUT" qemu-system-x86_64 \
        -machine pc -cpu max -smp 2 -m 3072 -accel tcg \
        -display none -monitor none -no-reboot \
        -kernel "$image" -initrd "$initrd" \
        -append "console=ttyS0 panic=-1 memperf.config=$name memperf.pages=$PAGES $(cmdline "$name")" \
        -serial "file:$dir/console.log" -serial "file:$dir/results.b64" || rc=$?
    echo $((SECONDS - t0)) >"$dir/boot-seconds"
    cp "$(dirname "$image")/config" "$dir/kernel.config"
    echo $rc >"$dir/qemu.rc"
    mkdir -p "$dir/guest"
    sed -n '/MEMPERF-RESULTS-BEGIN/,/MEMPERF-RESULTS-END/p' "$dir/results.b64" |
        grep -v MEMPERF-RESULTS | tr -d '\r' | base64 -d 2>/dev/null | tar -C "$dir/guest" -xzf - 2>/dev/null || true
    log "$name: qemu exited $rc after $((SECONDS - t0)) s"
}

main() {
    local t_all=$SECONDS name
    for name in "${CONFIGS[@]}"; do fragments "$name" >/dev/null; done
    install_tools
    log "building memperf"
    (cd "$ROOT" && cargo build --quiet --bin memperf)
    MEMPERF=${CARGO_TARGET_DIR:-$ROOT/target}/debug/memperf
    local base payload initrd
    base=$(rootfs_base)
    payload=$(mktemp "$CACHE/rootfs/payload.XXXXXX.cpio")
    rootfs_payload "$payload"
    initrd=$CACHE/rootfs/initrd.cpio
    cat "$base" "$payload" >"$initrd"
    rm -f "$payload"
    local images=()
    for name in "${CONFIGS[@]}"; do images+=("$(kernel_image "$name")"); done
    local i
    for i in "${!CONFIGS[@]}"; do boot "${CONFIGS[$i]}" "${images[$i]}" "$initrd"; done
    rm -f "$initrd"
    log "all done in $((SECONDS - t_all)) s"
    python3 "$HERE/check.py" --pages "$PAGES" "$OUT" "${CONFIGS[@]}"
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    main
    exit
fi
