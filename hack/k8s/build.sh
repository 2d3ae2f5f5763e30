#!/usr/bin/env bash
# Build (or reuse) the upstream control-plane binaries that kdra's Kubernetes-mode tests run against:
# kube-apiserver, kube-controller-manager, kube-scheduler (k8s.io/kubernetes, from the Go module proxy)
# and etcd (go.etcd.io/etcd/server/v3, the version k8s.io/kubernetes itself requires).
#
# One Go module per supported Kubernetes minor: hack/k8s/v1.XX/go.mod (each pins k8s.io/kubernetes and
# replaces its staging modules with the matching v0.x release; hack/pin.py writes them from
# kdra.api.versions.BUILDS). KDRA_K8S_VERSION picks one (default 1.37).
#
# Binaries land OUTSIDE the repository, in $KDRA_K8S_CACHE/<k8s version>/ (default ~/.cache/kdra/k8s),
# so only the first run on a machine pays for the build, and each version has its own directory. The Go
# module and build caches live under ~/.cache/kdra as well (shared by the versions: a second version
# recompiles only what changed). Idempotent: a second run with the same inputs only prints the directory.
#
# Usage: hack/k8s/build.sh
#   prints the binary directory as the last line of stdout; progress goes to stderr.
# Environment:
#   KDRA_K8S_VERSION Kubernetes minor to build: 1.36, 1.37 or 1.38 (default 1.37; "v1.36", "1.36.3" work too)
#   KDRA_K8S_CACHE   cache root (default: ${XDG_CACHE_HOME:-~/.cache}/kdra/k8s)
#   KDRA_BUILD_JOBS  go build -p (default 2)
#   KDRA_BUILD_NICE  nice level for the build (default 10)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_base="${XDG_CACHE_HOME:-$HOME/.cache}/kdra"
cache_root="${KDRA_K8S_CACHE:-$cache_base/k8s}"
jobs="${KDRA_BUILD_JOBS:-2}"
nicelvl="${KDRA_BUILD_NICE:-10}"

log() { printf '[hack/k8s/build.sh] %s\n' "$*" >&2; }
die() { printf '[hack/k8s/build.sh] ERROR: %s\n' "$*" >&2; exit 1; }

requested="${KDRA_K8S_VERSION:-1.37}"
minor_req="$(sed -E 's/^v?(1\.[0-9]+)(\.[0-9]+)?$/\1/' <<<"$requested")"
mod_dir="$here/v$minor_req"
[[ -f "$mod_dir/go.mod" ]] || die "KDRA_K8S_VERSION=$requested: no $mod_dir/go.mod (supported: \
$(cd "$here" && ls -d v1.*/ 2>/dev/null | tr -d / | sed 's/^v//' | tr '\n' ' '))"

modver() { awk -v m="$1" '($1 == m && $2 ~ /^v/) {print $2; exit} ($1 == "require" && $2 == m) {print $3; exit}' "$mod_dir/go.mod"; }
k8s_version="$(modver k8s.io/kubernetes)"
[[ -n "$k8s_version" ]] || die "cannot read the k8s.io/kubernetes version from $mod_dir/go.mod"
etcd_version="$(modver go.etcd.io/etcd/server/v3)"
[[ -n "$etcd_version" ]] || die "cannot read the go.etcd.io/etcd/server/v3 version from $mod_dir/go.mod"

out="$cache_root/$k8s_version"
binaries=(kube-apiserver kube-controller-manager kube-scheduler etcd)

# A Go installed from the upstream tarball may not be on a non-login shell's PATH.
if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then PATH="/usr/local/go/bin:$PATH"; fi
command -v go >/dev/null 2>&1 || die "Go is not installed (need go >= 1.26 on PATH to build the Kubernetes \
control plane for the e2e tests; on Debian/Ubuntu install a Go 1.26+ toolchain)."
export GOMODCACHE="${KDRA_GOMODCACHE:-$cache_base/gomod}"
export GOCACHE="${KDRA_GOCACHE:-$cache_base/gocache}"
# The local Go where it is as new as the module's go directive, else that Go from the Go module proxy
# (golang.org/toolchain, checksum-verified, cached in GOMODCACHE): k8s.io/kubernetes 1.38 needs Go 1.27.
export GOTOOLCHAIN=auto
go_version="$(cd "$mod_dir" && go env GOVERSION)" || die "no Go toolchain for $mod_dir/go.mod (is the Go module proxy reachable?)"
go_minor="$(sed -E 's/^go1\.([0-9]+).*/\1/' <<<"$go_version")"
[[ "$go_minor" =~ ^[0-9]+$ ]] || die "cannot parse the Go version '$go_version'"
(( go_minor >= 26 )) || die "k8s.io/kubernetes $k8s_version needs Go >= 1.26, found $go_version"

# The build recipe. Go 1.27 turns on the jsonv2 experiment, and a kube-apiserver of a release written for
# Go 1.26 built with it serves broken OpenAPI ("failed to download openapi"); Go 1.26 knows the experiment
# too, so switching it off is safe there. Releases whose go directive is 1.27 or later use json v2 (1.38's
# apimachinery imports encoding/json/v2) and are built as upstream builds them.
mod_go_minor="$(awk '$1 == "go" {split($2, v, "."); print v[2]; exit}' "$mod_dir/go.mod")"
if (( mod_go_minor < 27 )); then goexperiment=nojsonv2; else goexperiment=""; fi
packages=(
    k8s.io/kubernetes/cmd/kube-apiserver
    k8s.io/kubernetes/cmd/kube-controller-manager
    k8s.io/kubernetes/cmd/kube-scheduler
    go.etcd.io/etcd/server/v3
)
recipe="GOEXPERIMENT=$goexperiment CGO_ENABLED=0 -trimpath -ldflags=-s,-w,version-X ${packages[*]}"
# The stamp ties the cached binaries to the exact inputs: the module graph, the recipe, the Go version
# (not this script's text, so editing a comment or the version selection rebuilds nothing).
stamp="$(cat "$mod_dir/go.mod" "$mod_dir/go.sum" <(echo "$recipe") <(echo "$go_version") \
    | sha256sum | cut -c1-16)"

have_all() {
    [[ -f "$out/.stamp" && "$(cat "$out/.stamp")" == "$stamp" ]] || return 1
    local b
    for b in "${binaries[@]}"; do [[ -x "$out/$b" ]] || return 1; done
}

if have_all; then
    log "reusing $out (k8s $k8s_version, etcd $etcd_version, stamp $stamp)"
    echo "$out"
    exit 0
fi

mkdir -p "$cache_root"
# One build at a time per machine (pytest-xdist workers, parallel runs): the others wait here.
exec 9>"$cache_root/.build.lock"
if ! flock -n 9; then
    log "another build is running; waiting for $cache_root/.build.lock"
    flock 9
fi
if have_all; then
    log "reusing $out (built by a concurrent run)"
    echo "$out"
    exit 0
fi

export GOFLAGS="-mod=readonly -buildvcs=false"
export CGO_ENABLED=0
export GOEXPERIMENT="$goexperiment"   # see the recipe above

minor="${k8s_version#v1.}"; minor="${minor%%.*}"
build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done

tmp="$cache_root/.tmp-$k8s_version-$$"
rm -rf "$tmp"; mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT

log "building k8s $k8s_version (kube-apiserver, kube-controller-manager, kube-scheduler) and etcd $etcd_version"
log "  with $go_version, GOEXPERIMENT=$GOEXPERIMENT, -p $jobs, nice $nicelvl"
log "  into $out; module cache $GOMODCACHE; build cache $GOCACHE"
log "  a cold build takes tens of minutes on 2 cores; later runs reuse the binaries"
start=$SECONDS
cd "$mod_dir"
log "downloading modules"
go mod download || die "go mod download failed (is the Go module proxy reachable? GOPROXY=$(go env GOPROXY))"
log "compiling"
nice -n "$nicelvl" go build -p "$jobs" -trimpath -ldflags "$ldflags" -o "$tmp/" \
    "${packages[@]}" || die "go build failed (see the compiler output above)"
# go build names a binary after the package path's last element, without a major-version suffix:
# go.etcd.io/etcd/server/v3 -> server.
mv "$tmp/server" "$tmp/etcd"
for b in "${binaries[@]}"; do [[ -x "$tmp/$b" ]] || die "build produced no $b"; done
"$tmp/kube-apiserver" --version >&2 || die "the built kube-apiserver does not run"
"$tmp/etcd" --version >&2 || die "the built etcd does not run"

rm -rf "$out"
mv "$tmp" "$out"
echo "$stamp" > "$out/.stamp"
log "built in $(( SECONDS - start ))s: $out"
echo "$out"
