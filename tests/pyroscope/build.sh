#!/bin/sh
# Builds the Pyroscope push endpoint memperf's agent tests push to (main.go: Pyroscope's
# own connect handler and pprof message, at the module versions go.mod and go.sum pin),
# once, and prints its path (tests/go-build.sh caches it). A build from an empty module
# cache takes about 30-40 s on a 2-core machine; a cached one returns at once.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/../go-build.sh" pyroscope "$here"
