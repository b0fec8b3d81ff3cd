#!/usr/bin/env bash
# jaeger.sh builds Jaeger v2 (github.com/jaegertracing/jaeger/cmd/jaeger;
# the module's tags stay v1.x, v1.75.0 is a v2 binary) from the Go module
# proxy into a cache directory outside the repository, keyed by its
# version, for the trace tests' OTLP receiver (internal/testutil
# StartJaeger). A binary already in the cache is never rebuilt. The last
# line printed is the binary's path.
#
# Environment:
#   SPAWNKIT_TOOLS_CACHE  parent of the versioned directory
#                         (default: ${XDG_CACHE_HOME:-$HOME/.cache}/spawnkit/tools)
set -euo pipefail

JAEGER_VERSION=v1.75.0

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# The module must build the version the cache is keyed on.
if ! grep -q "^[[:space:]]*github.com/jaegertracing/jaeger $JAEGER_VERSION\b" "$here/jaeger/go.mod"; then
	echo "jaeger: internal/tools/jaeger/go.mod does not require github.com/jaegertracing/jaeger $JAEGER_VERSION" >&2
	exit 1
fi

home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
cache_root=${SPAWNKIT_TOOLS_CACHE:-${XDG_CACHE_HOME:-$home/.cache}/spawnkit/tools}
dir="$cache_root/jaeger-$JAEGER_VERSION"
bin="$dir/jaeger"

log() { printf 'jaeger: %s\n' "$*" >&2; }

if [[ -x "$bin" ]]; then
	log "cached"
	echo "$bin"
	exit 0
fi

mkdir -p "$dir"
start=$SECONDS
log "building $JAEGER_VERSION (a minute or more on a cold cache)..."
# It writes to stderr (stdout is the path a caller captures) and kills its
# sleep when stopped, so that nothing holds the caller's pipes open.
(
	s=
	trap 'kill "$s" 2>/dev/null; exit 0' TERM
	while :; do
		sleep 30 &
		s=$!
		wait "$s"
		log "still building ($((SECONDS - start))s)"
	done
) >&2 &
ticker=$!
trap 'kill "$ticker" 2>/dev/null || true' EXIT

# Jaeger's go.mod has a replace directive, so go install @version refuses
# it; the module internal/tools/jaeger requires it (with the replace
# copied) and builds it from there, outside the library's module graph.
# The build writes a temporary name first so an interrupted build never
# leaves a half-written binary that a later run would trust.
rc=0
(cd "$here/jaeger" && go build -mod=readonly -trimpath -ldflags "-s -w" \
	-o "$dir/.jaeger.tmp" github.com/jaegertracing/jaeger/cmd/jaeger) || rc=$?
kill "$ticker" 2>/dev/null || true
wait "$ticker" 2>/dev/null || true
if ((rc != 0)); then
	rm -f "$dir/.jaeger.tmp"
	log "build failed (exit $rc)"
	exit "$rc"
fi
mv -f "$dir/.jaeger.tmp" "$bin"
log "built in $((SECONDS - start))s"
echo "$bin"
