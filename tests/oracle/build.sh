#!/usr/bin/env bash
# Build (or reuse) kdra-oracle, the real Kubernetes structured allocator behind `kdra allocate`'s
# contract (main.go), once per supported Kubernetes version (v1.XX/: go.mod pins
# k8s.io/dynamic-resource-allocation, features.go maps gates as that kube-scheduler does).
#
# Binaries land OUTSIDE the repository: $KDRA_ORACLE_CACHE/<version>-<stamp>/kdra-oracle (default
# ~/.cache/kdra/oracle); the Go module and build caches are shared with hack/k8s/build.sh under
# ~/.cache/kdra. Modules come from the Go module proxy on first use. Idempotent and safe to run from
# several processes at once (one build at a time per machine).
#
# Usage: tests/oracle/build.sh [VERSION...]   (default: every v*/ directory)
#   prints one line per version on stdout: "<version> <path to binary>"; progress goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_base="${XDG_CACHE_HOME:-$HOME/.cache}/kdra"
cache_root="${KDRA_ORACLE_CACHE:-$cache_base/oracle}"
nicelvl="${KDRA_BUILD_NICE:-10}"

log() { printf '[tests/oracle/build.sh] %s\n' "$*" >&2; }
die() { printf '[tests/oracle/build.sh] ERROR: %s\n' "$*" >&2; exit 1; }

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then PATH="/usr/local/go/bin:$PATH"; fi
command -v go >/dev/null 2>&1 || die "Go is not installed (need go >= 1.26 on PATH to build the allocator oracle)"

export GOMODCACHE="${KDRA_GOMODCACHE:-$cache_base/gomod}"
export GOCACHE="${KDRA_GOCACHE:-$cache_base/gocache}"
# The local Go where it is as new as a version's go directive, else that Go from the Go module proxy
# (as hack/k8s/build.sh: 1.38's library needs Go 1.27).
export GOTOOLCHAIN=auto
export GOFLAGS="-mod=readonly -buildvcs=false"
export CGO_ENABLED=0

versions=("$@")
if [[ ${#versions[@]} -eq 0 ]]; then
    for d in "$here"/v*/; do d="${d%/}"; versions+=("${d##*/v}"); done
fi

mkdir -p "$cache_root"
for version in "${versions[@]}"; do
    src="$here/v$version"
    [[ -f "$src/go.mod" ]] || die "no oracle module for Kubernetes $version ($src/go.mod)"
    go_version="$(cd "$src" && go env GOVERSION)" || die "no Go toolchain for $src/go.mod (is the Go module proxy reachable?)"
    stamp="$(cat "$here/main.go" "$here/marshal.go" "$src"/*.go "$src/go.mod" "$src/go.sum" "$here/build.sh" \
        <(echo "$go_version") | sha256sum | cut -c1-16)"
    out="$cache_root/$version-$stamp"
    if [[ ! -x "$out/kdra-oracle" ]]; then
        exec 9>"$cache_root/.build.lock"
        flock 9
        if [[ ! -x "$out/kdra-oracle" ]]; then
            start=$SECONDS
            tmp="$cache_root/.tmp-$version-$$"
            rm -rf "$tmp"; mkdir -p "$tmp/src"
            cp "$here/main.go" "$here/marshal.go" "$src"/*.go "$src/go.mod" "$src/go.sum" "$tmp/src/"
            log "building the Kubernetes $version oracle with $go_version into $out (module cache $GOMODCACHE)"
            (cd "$tmp/src" && go mod download) \
                || die "go mod download failed (is the Go module proxy reachable? GOPROXY=$(go env GOPROXY))"
            (cd "$tmp/src" && nice -n "$nicelvl" go build -trimpath -ldflags "-s -w" -o "$tmp/kdra-oracle" .) \
                || die "go build failed for Kubernetes $version (see the compiler output above)"
            "$tmp/kdra-oracle" --version >&2 || die "the built oracle does not run"
            rm -rf "$out"; mkdir -p "$out"
            mv "$tmp/kdra-oracle" "$out/kdra-oracle"
            rm -rf "$tmp"
            log "built in $(( SECONDS - start ))s"
        fi
        exec 9>&-
    fi
    echo "$version $out/kdra-oracle"
done
