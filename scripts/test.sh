#!/usr/bin/env bash
# Installs what the tests need (when root and missing) and runs every test.
# This is the project's test command: README.md names it and .ci/run calls it.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v cc >/dev/null 2>&1 || need+=(gcc libc6-dev)
# libc.a, for the leak test that a statically linked program is refused clearly.
command -v cc >/dev/null 2>&1 && [ "$(cc -print-file-name=libc.a)" = libc.a ] && need+=(libc6-dev)
command -v perf >/dev/null 2>&1 || need+=(linux-perf)
command -v go >/dev/null 2>&1 || need+=(golang-go)
command -v python3 >/dev/null 2>&1 || need+=(python3)
# Node, for the --perf-basic-prof test (tests/names.rs). CPython 3.12+ (-X perf) is not a
# Debian 12 package: that test finds python3.12 on PATH or under ~/.pyenv, else skips.
command -v node >/dev/null 2>&1 || need+=(nodejs)
# npm, to install the Parca test server's packages (tests/parca/build.sh); Debian packages
# it apart from nodejs.
command -v npm >/dev/null 2>&1 || need+=(npm)
# openssl, to make the CA and certificate the agent's TLS tests use (tests/agent_otlp.rs),
# and the system's CA certificates, which the agent trusts without --ca-file.
command -v openssl >/dev/null 2>&1 || need+=(openssl)
[ -s /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
# Another package's debug files can create /usr/lib/debug/.build-id: ask dpkg for glibc's.
dpkg -s libc6-dbg >/dev/null 2>&1 || need+=(libc6-dbg)
# <sys/sdt.h>, for the USDT probes of fixtures/probes.c.
echo '#include <sys/sdt.h>' | cc -E - >/dev/null 2>&1 || need+=(systemtap-sdt-dev)
# heaptrack, the anchor memperf heap's figures are checked against (tests/heap.rs).
command -v heaptrack_print >/dev/null 2>&1 || need+=(heaptrack)
# chromium, to render memperf heap's timeline SVG headless and read its pixels
# (tests/heap_timeline.rs).
command -v chromium >/dev/null 2>&1 || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        echo "test.sh: installing ${need[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
    else
        echo "test.sh: missing ${need[*]}; the tests that need them will skip (run as root to install)" >&2
    fi
fi

# inferno's perf collapser, for the memperf script round trip, and inferno-diff-folded, for
# memperf diff --folded.
if ! command -v inferno-collapse-perf >/dev/null 2>&1; then
    echo "test.sh: installing inferno (cargo install --locked inferno)"
    cargo install --quiet --locked inferno
fi

# The OpenTelemetry Collector memperf agent's tests push to (tests/agent_otlp.rs): built
# from its Go modules once (3-4 minutes on 2 cores), then cached under ~/.cache/memperf.
if command -v go >/dev/null 2>&1; then
    echo "test.sh: OpenTelemetry Collector at $(tests/otelcol/build.sh)"
    # Pyroscope's push handler and pprof decoder (tests/agent_pyroscope.rs): about 30 s.
    echo "test.sh: Pyroscope push endpoint at $(tests/pyroscope/build.sh)"
fi

# The Parca ProfileStoreService memperf agent's tests push to (tests/agent_parca.rs): Parca's
# generated code from npm (@parca/client) with grpc-js, installed once (about 10 s) under
# ~/.cache/memperf.
if command -v npm >/dev/null 2>&1; then
    echo "test.sh: Parca test server at $(tests/parca/build.sh)"
fi

cargo fmt --check
cargo clippy --all-targets --quiet -- -D warnings
cargo test --all-targets
