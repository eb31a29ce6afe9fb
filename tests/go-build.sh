#!/bin/sh
# Builds a Go test server once: `go-build.sh NAME DIR` builds DIR's main.go at the module
# versions its go.mod and go.sum pin, caches the binary under ~/.cache/memperf/NAME-KEY/
# (KEY: the hash of those files and the Go version) and prints its path. The servers'
# own build.sh scripts call it; a cached build returns at once.
set -eu
name=$1
here=$(cd "$2" && pwd)
command -v go >/dev/null || { echo "build.sh: go is not installed (scripts/test.sh installs it)" >&2; exit 1; }
key=$( (cat "$here/main.go" "$here/go.mod" "$here/go.sum"; go version) | sha256sum | cut -c1-16)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/memperf/$name-$key"
bin="$cache/memperf-$name"
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
