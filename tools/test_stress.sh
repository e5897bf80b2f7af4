#!/usr/bin/env bash
# The test suite N times in a row beside LOAD busy loops, to find tests whose verdict
# depends on timing or scheduling. Not run by CI; anyone can: `make test-stress N=3 LOAD=2`.
#
#   tools/test_stress.sh PYTHON N LOAD [pytest args...]
#
# Prints one line per run (pass/fail, wall time, the load average) and, at the end, every
# test that failed with how many runs it failed in. Exit status: 0 when every run passed.
set -u
py=$1 runs=$2 load=$3
shift 3
log=$(mktemp -d)
loops=()
stop_loops() { [ ${#loops[@]} -gt 0 ] && kill "${loops[@]}" 2>/dev/null; wait 2>/dev/null; }
trap 'stop_loops; rm -rf "$log"' EXIT
trap 'exit 130' INT TERM
for _ in $(seq "$load"); do
  (while :; do :; done) &
  loops+=($!)
done
echo "test-stress: $runs run(s) of the suite beside $load busy loop(s)"
failed_runs=0
for i in $(seq "$runs"); do
  start=$(date +%s)
  "$py" -m pytest -q -p no:cacheprovider -rf "$@" >"$log/run$i.txt" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  tail=$(grep -E "^(=+ )?[0-9]+ (passed|failed)" "$log/run$i.txt" | tail -1)
  [ $rc -ne 0 ] && failed_runs=$((failed_runs + 1))
  printf 'run %d: %s in %dm%02ds (load %s): %s\n' "$i" "$([ $rc -eq 0 ] && echo pass || echo FAIL)" \
    $((secs / 60)) $((secs % 60)) "$(cut -d' ' -f1-3 /proc/loadavg)" "${tail:-no summary (rc $rc)}"
  grep -E "^FAILED " "$log/run$i.txt" | sed 's/ - .*//' >>"$log/failures.txt"
done
if [ -s "$log/failures.txt" ]; then
  echo "tests that failed (runs):"
  sort "$log/failures.txt" | uniq -c | sort -rn | sed 's/^/  /'
fi
echo "test-stress: $((runs - failed_runs)) of $runs run(s) passed"
[ "$failed_runs" -eq 0 ]
