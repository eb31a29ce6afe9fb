#!/bin/sh
# Builds the OpenTelemetry Collector memperf's agent tests push to (main.go: the OTLP
# receiver and the file exporter, at the module versions go.mod and go.sum pin), once, and
# prints its path (tests/go-build.sh caches it). A build from an empty module cache takes
# about 3-4 minutes on a 2-core machine; a cached one returns at once.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/../go-build.sh" otelcol "$here"
