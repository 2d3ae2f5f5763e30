#!/usr/bin/env bash
# Flake hunt: run the e2e suite N times in a row on this machine and print how often each test failed.
#
#   hack/e2e-soak.sh [--hog] [--fresh-clone] [--keep-going] N
#
#   --hog          keep one core busy for the whole soak (a loaded CI runner)
#   --fresh-clone  each run is `make test` on a fresh clone of HEAD (lint, types, unit and e2e), as CI does;
#                  without it each run is `make e2e` in this checkout
#   --keep-going   do not stop at the first failed run (default: stop, a failure is a defect to fix first)
#
# Logs of every run go to a folder printed at the start (kept); the table at the end lists each test that
# failed at least once with its count, then every run's exit code and wall time. Exit 0 only if every run
# passed. Environment is passed through (KDRA_E2E_TIMEOUT_FACTOR, PYTEST_ARGS, E2E_CORPUS_VERSIONS, ...).
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
hog=0 fresh=0 keep_going=0 runs=""
for arg in "$@"; do
    case "$arg" in
        --hog) hog=1 ;;
        --fresh-clone) fresh=1 ;;
        --keep-going) keep_going=1 ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        *[!0-9]*|"") echo "e2e-soak: unknown argument '$arg' (usage: hack/e2e-soak.sh [--hog] [--fresh-clone] [--keep-going] N)" >&2; exit 2 ;;
        *) runs="$arg" ;;
    esac
done
[[ -n "$runs" && "$runs" -gt 0 ]] || { echo "e2e-soak: N (the number of runs) is required and must be > 0" >&2; exit 2; }

logs="$(mktemp -d "${TMPDIR:-/tmp}/kdra-soak-XXXXXX")"
log() { printf '[e2e-soak %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
log "$runs run(s), hog=$hog, fresh-clone=$fresh; logs in $logs"

hog_pid=""
if (( hog )); then
    python3 -c 'while True: pass' &
    hog_pid=$!
    log "CPU hog running (pid $hog_pid)"
fi
cleanup() { [[ -n "$hog_pid" ]] && kill "$hog_pid" 2>/dev/null; }
trap cleanup EXIT

head="$(git rev-parse HEAD)"
declare -a summary=()
failed_runs=0
for (( i = 1; i <= runs; i++ )); do
    out="$logs/run-$i.log"
    start=$SECONDS
    if (( fresh )); then
        dir="$logs/clone-$i"
        git clone -q "$PWD" "$dir" && git -C "$dir" checkout -q "$head" \
            && (cd "$dir" && make test) >"$out" 2>&1
        rc=$?
        rm -rf "$dir"
    else
        make e2e >"$out" 2>&1
        rc=$?
    fi
    took=$(( SECONDS - start ))
    summary+=("run $i: exit $rc in ${took}s")
    log "run $i of $runs: exit $rc in ${took}s"
    if (( rc != 0 )); then
        failed_runs=$(( failed_runs + 1 ))
        grep -E '^(FAILED|ERROR) ' "$out" | sed 's/^/    /' >&2
        (( keep_going )) || { log "stopping at the first failed run (--keep-going runs on)"; break; }
    fi
done

echo
echo "failures per test ($failed_runs of ${#summary[@]} run(s) failed; logs: $logs)"
# A failed test appears as "FAILED <id> - <message>" (or ERROR) in its lane's pytest summary.
cat "$logs"/run-*.log 2>/dev/null | grep -E '^(FAILED|ERROR) ' | sed -E 's/^(FAILED|ERROR) ([^ ]+).*/\2/' \
    | sort | uniq -c | sort -rn | awk '{ printf "  %3d  %s\n", $1, $2 }'
(( failed_runs )) || echo "  (none)"
printf '  %s\n' "${summary[@]}"
exit $(( failed_runs > 0 ))
