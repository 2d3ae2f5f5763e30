#!/usr/bin/env bash
# `make e2e`: every e2e-marked test against real control planes, in lanes that run side by side
# (docs/kubernetes-mode.md, "Parallel e2e"):
#   lanes on ONE plane of KDRA_K8S_VERSION (default 1.37), started once by python -m support.shared_plane
#   and attached to by every lane's pytest process:
#     kube-scheduler  tests marked e2e_lane(name="kube-scheduler"), one after another (the differential
#                     corpus, the harness, tests that create well-known cluster-scoped names)
#     kdra-scheduler  tests marked e2e_lane(name="kdra-scheduler"), one after another
#     free            every other e2e test (not e2e_serial), on E2E_FREE_WORKERS pytest-xdist workers
#   corpus-<v>        at the same time, the differential corpus against each release in E2E_CORPUS_VERSIONS
#                     (default 1.36; "" turns it off), each on a plane of its own;
#   serial            then the e2e_serial tests (they restart the API server), on a plane of their own.
# The binaries of every release are built (or reused) first, one after another. Each lane's output goes to
# a log that is printed when the lane ends.
# Environment: KDRA_K8S_VERSION, E2E_CORPUS_VERSIONS, E2E_FREE_WORKERS (default 1), PYTEST_ARGS (extra
# arguments for every pytest run), BIN (the virtualenv's bin directory, default .venv/bin).
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
bin="${BIN:-.venv/bin}"
main="${KDRA_K8S_VERSION:-1.37}"
free_workers="${E2E_FREE_WORKERS:-1}"
extra_versions="${E2E_CORPUS_VERSIONS-1.36}"
read -r -a pytest_args <<<"${PYTEST_ARGS:-}"
export KDRA_K8S_VERSION="$main"
# the test support (tests/support) is imported as `support`, by the plane and by every lane
export PYTHONPATH="$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"

log() { printf '[hack/e2e.sh %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

# run_lanes LOGDIR NAME:CMD... : start every lane in the background, print each log as its lane ends,
# return non-zero if any lane failed (exit 5, "no tests collected", counts as success).
run_lanes() {
    local dir="$1"; shift
    local -A pid_of=() start_of=()
    local spec name
    for spec in "$@"; do
        name="${spec%%:*}"
        bash -c "${spec#*:}" >"$dir/$name.log" 2>&1 &
        pid_of[$name]=$!
        start_of[$name]=$SECONDS
        log "lane $name started"
    done
    local failed=0 rc
    while (( ${#pid_of[@]} )); do
        wait -n "${pid_of[@]}" 2>/dev/null || true
        for name in "${!pid_of[@]}"; do
            kill -0 "${pid_of[$name]}" 2>/dev/null && continue
            wait "${pid_of[$name]}"; rc=$?
            [[ $rc == 5 ]] && rc=0
            log "lane $name done in $(( SECONDS - start_of[$name] ))s (exit $rc)"
            cat "$dir/$name.log" >&2
            (( rc != 0 )) && failed=1
            unset "pid_of[$name]"
        done
    done
    return $failed
}

q() { printf '%q ' "$@"; }

if [[ "${1:-}" == "--shared-lanes" ]]; then  # inside shared_plane: the lanes that attach to its plane
    pt="$(q "$bin/pytest" -p no:xdist "${pytest_args[@]}")"
    free="$(q "$bin/pytest" "${pytest_args[@]}")"
    (( free_workers > 1 )) && free+="-n $free_workers " || free+="-p no:xdist "
    run_lanes "$2" \
        "kube-scheduler:$pt -m \"e2e and e2e_lane(name='kube-scheduler') and not e2e_serial\"" \
        "kdra-scheduler:$pt -m \"e2e and e2e_lane(name='kdra-scheduler') and not e2e_serial\"" \
        "free:$free -m \"e2e and not e2e_lane and not e2e_serial\""
    exit $?
fi

if [[ -n "${KDRA_K8S_BIN_DIR:-}" && -n "$extra_versions" ]]; then
    log "KDRA_K8S_BIN_DIR is set: one set of binaries, so E2E_CORPUS_VERSIONS is ignored"
    extra_versions=""
fi
versions=()
for v in $extra_versions; do [[ "$v" != "$main" ]] && versions+=("$v"); done

start=$SECONDS
if [[ -z "${KDRA_K8S_BIN_DIR:-}" ]]; then
    for v in "$main" "${versions[@]}"; do
        KDRA_K8S_VERSION="$v" bash hack/k8s/build.sh >/dev/null || { log "building Kubernetes $v failed"; exit 1; }
    done
fi
log "binaries ready after $(( SECONDS - start ))s"

logs="$(mktemp -d "${TMPDIR:-/tmp}/kdra-e2e-XXXXXX")"
lanes=("shared-$main:$(q "$bin/python" -m support.shared_plane --version "$main" -- \
    bash hack/e2e.sh --shared-lanes "$logs")")
for v in "${versions[@]}"; do
    lanes+=("corpus-$v:KDRA_K8S_VERSION=$v $(q "$bin/pytest" -p no:xdist "${pytest_args[@]}") -m e2e \
tests/e2e/test_corpus_upstream.py")
done
run_lanes "$logs" "${lanes[@]}"
rc=$?
serial="$(q "$bin/pytest" -p no:xdist "${pytest_args[@]}") -m \"e2e and e2e_serial\""
run_lanes "$logs" "serial:$serial" || rc=1
log "make e2e done in $(( SECONDS - start ))s"
rm -rf "$logs"
exit $rc
