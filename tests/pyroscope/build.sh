#!/bin/sh
# Builds the Pyroscope push endpoint memperf's agent tests push to (main.go: Pyroscope's
# own connect handler and pprof message, at the module versions go.mod and go.sum pin),
# once: the binary is cached under ~/.cache/memperf/ by the hash of those files and the Go
# version, and its path is printed. A build from an empty module cache takes about 30-40 s
# on a 2-core machine; a cached one returns at once.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
command -v go >/dev/null || { echo "build.sh: go is not installed (scripts/test.sh installs it)" >&2; exit 1; }
key=$( (cat "$here/main.go" "$here/go.mod" "$here/go.sum"; go version) | sha256sum | cut -c1-16)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/memperf/pyroscope-$key"
bin="$cache/memperf-pyroscope"
mkdir -p "$cache"
# One build at a time: tests running beside each other wait for the first.
exec 9>"$cache/.lock"
flock 9
if [ ! -x "$bin" ]; then
    # Built in a copy so that the work tree gets no build files; -trimpath keeps the
    # binary the same wherever the work tree is.
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    cp "$here/main.go" "$here/go.mod" "$here/go.sum" "$work/"
    (cd "$work" && GOFLAGS=-mod=mod go build -trimpath -o "$bin.tmp" . >&2)
    mv "$bin.tmp" "$bin"
fi
echo "$bin"
