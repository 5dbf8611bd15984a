#!/usr/bin/env bash
# The test command: install (idempotent), start Redis, run the whole suite.
#   1. the README's quick start as a user runs it, then `serve run configs/local.yaml` (their
#      own process, first: each starts its own Ray, and `horizon serve` refuses to start
#      beside another cluster);
#   2. unit tests + e2e tests on ONE shared Ray cluster (real vLLM on the CPU profile, the
#      simulated fleet, real Redis);
#   3. the multi-node placement test, in its own process because it starts its own fake
#      three-node Ray cluster.
# Extra arguments go to both pytest runs (e.g. -x, -k ...).
set -uo pipefail
cd "$(dirname "$0")/.."

bash scripts/install.sh || exit 1
PY=.venv/bin/python
[[ -n "${VIRTUAL_ENV:-}" ]] && PY="$VIRTUAL_ENV/bin/python"

# Stop at exit only the Redis this script started (one already answering belongs to someone).
if ! bash scripts/redis.sh status 6399 2>/dev/null; then
  bash scripts/redis.sh start 6399 && trap 'bash scripts/redis.sh stop 6399 >/dev/null 2>&1 || true' EXIT \
    || echo "test.sh: Redis unavailable; Redis tests will say why they skip"
fi
export HORIZON_TEST_REDIS_PORT=6399
# promtool runs the alert rules' own tests (cluster/monitoring/alerts_test.yml).
bash scripts/promtool.sh || echo "test.sh: promtool unavailable; the alert-rule test will say why it skips"

status=0
run() {
  "$PY" -m pytest "$@"
  local rc=$?
  # Exit code 5 means "no tests collected" for this selection: not a failure.
  if [[ $rc -ne 0 && $rc -ne 5 ]]; then status=$rc; fi
}

# --durations: the slowest tests in the log, for when a CI run nears its time limit.
run -q -s --durations=10 -m "firstrun" tests/e2e/test_first_run.py tests/e2e/test_serve_run.py tests/e2e/test_serve_dashboard.py "$@"
run -q --durations=30 -m "not multinode and not firstrun" "$@"
run -q --durations=5 -m "multinode" tests/e2e "$@"

if [[ $status -eq 0 ]]; then echo "test.sh: all test runs passed"; else echo "test.sh: FAILED (exit $status)"; fi
exit $status
