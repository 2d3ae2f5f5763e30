#!/usr/bin/env bash
# Build (or reuse) KWOK (sigs.k8s.io/kwok, from the Go module proxy): the e2e tests run it beside the
# control plane as the kubelet of their nodes (tests/support/controlplane.py), so bound pods become
# Running, Jobs complete, deleted and evicted pods terminate gracefully and nodes heartbeat.
#
# The binary lands OUTSIDE the repository, in $KDRA_KWOK_CACHE/<version>/kwok (default
# ~/.cache/kdra/kwok); Go's module and build caches are shared with hack/k8s/build.sh under ~/.cache/kdra.
# Idempotent: a second run with the same inputs only prints the directory.
#
# Usage: hack/k8s/kwok/build.sh
#   prints the binary directory as the last line of stdout; progress goes to stderr.
# Environment:
#   KDRA_KWOK_CACHE  cache root (default: ${XDG_CACHE_HOME:-~/.cache}/kdra/kwok)
#   KDRA_BUILD_JOBS  go build -p (default 2)
#   KDRA_BUILD_NICE  nice level for the build (default 10)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_base="${XDG_CACHE_HOME:-$HOME/.cache}/kdra"
cache_root="${KDRA_KWOK_CACHE:-$cache_base/kwok}"
jobs="${KDRA_BUILD_JOBS:-2}"
nicelvl="${KDRA_BUILD_NICE:-10}"

log() { printf '[hack/k8s/kwok/build.sh] %s\n' "$*" >&2; }
die() { printf '[hack/k8s/kwok/build.sh] ERROR: %s\n' "$*" >&2; exit 1; }

version="$(awk '($1 == "require" && $2 == "sigs.k8s.io/kwok") {print $3; exit}' "$here/go.mod")"
[[ -n "$version" ]] || die "cannot read the sigs.k8s.io/kwok version from $here/go.mod"
out="$cache_root/$version"

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then PATH="/usr/local/go/bin:$PATH"; fi
command -v go >/dev/null 2>&1 || die "Go is not installed (need go >= 1.26 on PATH to build KWOK for the e2e tests)"
go_version="$(go env GOVERSION)"
stamp="$(cat "$here/go.mod" "$here/go.sum" "$here/tools.go" "$here/build.sh" <(echo "$go_version") \
    | sha256sum | cut -c1-16)"

have() { [[ -f "$out/.stamp" && "$(cat "$out/.stamp")" == "$stamp" && -x "$out/kwok" ]]; }

if have; then
    log "reusing $out (kwok $version, stamp $stamp)"
    echo "$out"
    exit 0
fi

mkdir -p "$cache_root"
exec 9>"$cache_root/.build.lock"   # one build at a time per machine; the others wait here
if ! flock -n 9; then
    log "another build is running; waiting for $cache_root/.build.lock"
    flock 9
fi
if have; then
    log "reusing $out (built by a concurrent run)"
    echo "$out"
    exit 0
fi

export GOMODCACHE="${KDRA_GOMODCACHE:-$cache_base/gomod}"
export GOCACHE="${KDRA_GOCACHE:-$cache_base/gocache}"
export GOTOOLCHAIN=local
export GOFLAGS="-mod=readonly -buildvcs=false"
export CGO_ENABLED=0
export GOEXPERIMENT=nojsonv2   # as hack/k8s/build.sh: Go 1.27's jsonv2 experiment breaks client-go's OpenAPI

tmp="$cache_root/.tmp-$version-$$"
rm -rf "$tmp"; mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT

log "building kwok $version with $go_version, -p $jobs, nice $nicelvl into $out"
start=$SECONDS
cd "$here"
go mod download || die "go mod download failed (is the Go module proxy reachable? GOPROXY=$(go env GOPROXY))"
nice -n "$nicelvl" go build -p "$jobs" -trimpath \
    -ldflags "-s -w" \
    -o "$tmp/kwok" sigs.k8s.io/kwok/cmd/kwok || die "go build failed (see the compiler output above)"
"$tmp/kwok" --version >&2 || die "the built kwok does not run"
rm -rf "$out"
mv "$tmp" "$out"
echo "$stamp" > "$out/.stamp"
log "built in $(( SECONDS - start ))s: $out"
echo "$out"
