#!/bin/sh
# Installs the Parca ProfileStoreService server memperf's agent tests push to (server.mjs:
# Parca's own generated service and messages from the npm package @parca/client, served by
# @grpc/grpc-js, each pprof decoded by pprof-format, at the versions package-lock.json
# pins), once: it is cached under ~/.cache/memperf/ by the hash of these files and Node's
# version, and the path of server.mjs is printed. An install from an empty npm cache takes
# about 10 s; a cached one returns at once. (Parca's Go modules, which the server's own
# code is, are not served by the Go module proxy this project reaches.)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
for tool in node npm; do
    command -v $tool >/dev/null || { echo "build.sh: $tool is not installed (scripts/test.sh installs it)" >&2; exit 1; }
done
files="server.mjs extensionless.mjs package.json package-lock.json"
key=$( (cd "$here" && cat $files; node --version) | sha256sum | cut -c1-16)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/memperf/parca-$key"
mkdir -p "$cache"
# One install at a time: tests running beside each other wait for the first.
exec 9>"$cache/.lock"
flock 9
if [ ! -f "$cache/.installed" ]; then
    (cd "$here" && cp $files "$cache/")
    # No install scripts: none of these packages needs one to run.
    (cd "$cache" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
    touch "$cache/.installed"
fi
echo "$cache/server.mjs"
