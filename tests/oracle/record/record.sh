#!/usr/bin/env bash
# Record upstream's allocator test table at a k8s.io/dynamic-resource-allocation version: the table's
# own subtests run against the real experimental allocator (a superset of the others) with a recording
# factory (record_test.go.txt), one JSON file per subtest, then tests/oracle/record/convert.py writes the
# conformance files (the format of /work/shared/conformance/README.md).
#
# Usage: tests/oracle/record/record.sh VERSION OUT_DIR      e.g.  v0.37.2 tests/allocator/conformance/v1.37
# Modules come from the Go module proxy (cached in ~/.cache/kdra/gomod, shared with hack/k8s/build.sh).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="${1:?usage: record.sh VERSION OUT_DIR}"
out="${2:?usage: record.sh VERSION OUT_DIR}"
mkdir -p "$out" && out="$(cd "$out" && pwd)"
cache_base="${XDG_CACHE_HOME:-$HOME/.cache}/kdra"
export GOMODCACHE="${KDRA_GOMODCACHE:-$cache_base/gomod}" GOCACHE="${KDRA_GOCACHE:-$cache_base/gocache}"
# GOTOOLCHAIN=auto: the local Go where it is as new as the library's go directive, else that Go from the
# Go module proxy (1.38's library needs Go 1.27).
export GOTOOLCHAIN=auto GOFLAGS="-mod=mod" CGO_ENABLED=0
work="$(mktemp -d)"
trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
mkdir -p "$work/scratch" && cd "$work/scratch"
printf 'module scratch\ngo 1.26.0\n' > go.mod
# The library's go.mod first (any Go fetches it), so the scratch module asks for the Go it needs.
gomod="$( (go mod download -json "k8s.io/dynamic-resource-allocation@$version" || true) | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
printf 'module scratch\n%s\n' "$(grep -m1 '^go ' "$gomod")" > go.mod
src="$(go mod download -json "k8s.io/dynamic-resource-allocation@$version" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
cp -r "$src" "$work/dra" && chmod -R u+w "$work/dra"
cp "$here/record_test.go.txt" "$work/dra/structured/internal/experimental/zz_kdra_record_test.go"
minor="$(sed -E 's/^v0\.([0-9]+)\..*/\1/' <<<"$version")"
if (( minor >= 38 )); then compat=v1.38; else compat=v1.36; fi
cp "$here/record_compat_$compat.go.txt" "$work/dra/structured/internal/experimental/zz_kdra_record_compat_test.go"
mkdir -p "$work/json"
cd "$work/dra"
echo "[record.sh] running the table of k8s.io/dynamic-resource-allocation@$version" >&2
KDRA_RECORD_DIR="$work/json" nice -n 10 go test -v ./structured/internal/experimental/ -run 'TestRecordAllocatorTable' -count=1 \
    > "$work/test.log" 2>&1 || { tail -50 "$work/test.log" >&2; echo "[record.sh] upstream's own assertions failed" >&2; exit 1; }
echo "[record.sh] subtests passed: $(grep -c -- '--- PASS' "$work/test.log"), skipped: $(grep -c -- '--- SKIP' "$work/test.log")" >&2
grep -- "--- SKIP" "$work/test.log" | sed 's/^/[record.sh] /' >&2 || true
python3 "$here/convert.py" "$work/json" "$out" "$version"
