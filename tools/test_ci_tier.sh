#!/usr/bin/env bash
# `make test`, CI's tier: the fast tests beside the lab's tests, in two pytest runs at once. The lab's first
# provision spends its first minutes on downloads and package installs (from an empty lab cache: mmdebstrap, about
# 4 GB of .debs, the vLLM wheels), where one of the two cores waits; the fast tests (one core, 3-5 minutes) fit
# there instead of running before it. Both runs' results are printed; the exit status is the first failing one's.
# Extra arguments go to both pytest runs.
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p build
log=build/fast-tests.log
# a background job of a non-interactive shell ignores SIGINT (Python then installs no handler), so .ci/run's INT
# before CI's limit reaches the fast tests as TERM
.venv/bin/python -m pytest -rfEs --durations=10 -m "not lab and not full" "$@" > "$log" 2>&1 &
fast=$!
trap 'kill -TERM "$fast" 2>/dev/null' INT TERM
.venv/bin/python -m pytest -rfEs --durations=20 -m "lab and not full" "$@"
lab=$?
wait "$fast"
fast_rc=$?
echo
echo "== the fast tests (run beside the lab tests above; their whole output: $log)"
tail -n 25 "$log"
grep -E "^(FAILED|ERROR) " "$log" || true  # every failure named, however long the summary
echo "== CI's tier: lab tests exit $lab, fast tests exit $fast_rc"
[ "$lab" = 0 ] || exit "$lab"
exit "$fast_rc"
