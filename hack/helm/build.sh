#!/usr/bin/env bash
# Build (or reuse) the helm CLI that kdra's chart tests run (helm lint, helm template): helm.sh/helm/v3 at
# the version hack/helm/go.mod requires, from the Go module proxy.
#
# The binary lands OUTSIDE the repository, in $KDRA_HELM_CACHE/<version>/helm (default
# ~/.cache/kdra/helm), so only the first run on a machine pays for the build; the Go module and build
# caches are hack/k8s/build.sh's (~/.cache/kdra/{gomod,gocache}). Idempotent: a second run with the same
# inputs only prints the path.
#
# Usage: hack/helm/build.sh
#   prints the helm binary's path as the last line of stdout; progress goes to stderr.
# Environment:
#   KDRA_HELM_CACHE  cache root (default: ${XDG_CACHE_HOME:-~/.cache}/kdra/helm)
#   KDRA_BUILD_JOBS  go build -p (default 2)
#   KDRA_BUILD_NICE  nice level for the build (default 10)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_base="${XDG_CACHE_HOME:-$HOME/.cache}/kdra"
cache_root="${KDRA_HELM_CACHE:-$cache_base/helm}"
jobs="${KDRA_BUILD_JOBS:-2}"
nicelvl="${KDRA_BUILD_NICE:-10}"

log() { printf '[hack/helm/build.sh] %s\n' "$*" >&2; }
die() { printf '[hack/helm/build.sh] ERROR: %s\n' "$*" >&2; exit 1; }

version="$(awk '$1 == "helm.sh/helm/v3" && $2 ~ /^v/ {print $2; exit}' "$here/go.mod")"
[[ -n "$version" ]] || die "cannot read the helm.sh/helm/v3 version from $here/go.mod"
out="$cache_root/$version"

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then PATH="/usr/local/go/bin:$PATH"; fi
command -v go >/dev/null 2>&1 || die "Go is not installed (need go >= 1.26 on PATH to build helm for the chart tests)"
go_version="$(go env GOVERSION)"
# The stamp ties the cached binary to the exact inputs: module graph, this script, the Go version.
stamp="$(cat "$here/go.mod" "$here/go.sum" "$here/build.sh" <(echo "$go_version") | sha256sum | cut -c1-16)"

current() { [[ -f "$out/.stamp" && "$(cat "$out/.stamp")" == "$stamp" && -x "$out/helm" ]]; }

if current; then
    log "reusing $out/helm (helm $version, stamp $stamp)"
    echo "$out/helm"
    exit 0
fi

mkdir -p "$cache_root"
exec 9>"$cache_root/.build.lock"  # one build per machine; concurrent runs wait here
if ! flock -n 9; then
    log "another build is running; waiting for $cache_root/.build.lock"
    flock 9
fi
if current; then
    log "reusing $out/helm (built by a concurrent run)"
    echo "$out/helm"
    exit 0
fi

export GOMODCACHE="${KDRA_GOMODCACHE:-$cache_base/gomod}"
export GOCACHE="${KDRA_GOCACHE:-$cache_base/gocache}"
export GOTOOLCHAIN=local
export GOFLAGS="-mod=readonly -buildvcs=false"
export CGO_ENABLED=0

tmp="$cache_root/.tmp-$version-$$"
rm -rf "$tmp"; mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT

log "building helm $version with $go_version, -p $jobs, nice $nicelvl into $out"
start=$SECONDS
cd "$here"
go mod download || die "go mod download failed (is the Go module proxy reachable? GOPROXY=$(go env GOPROXY))"
nice -n "$nicelvl" go build -p "$jobs" -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$version -X helm.sh/helm/v3/internal/version.gitTreeState=clean" \
    -o "$tmp/helm" helm.sh/helm/v3/cmd/helm \
    || die "go build failed (see the compiler output above)"
"$tmp/helm" version --short >&2 || die "the built helm does not run"

rm -rf "$out"
mv "$tmp" "$out"
echo "$stamp" > "$out/.stamp"
log "built in $(( SECONDS - start ))s: $out/helm"
echo "$out/helm"
