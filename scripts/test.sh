#!/usr/bin/env bash
# make test: every test, after the set-up (make setup has run).
#
#   1. the set-up scripts' own tests, the Prometheus rules, gofmt and vet,
#      the Python client's types (mypy), and the documents' links, fences and code examples (make check-docs);
#   2. side by side: the unit and integration tests of every module; and
#      the fault suite (faults/, its short cases), then the fuzz targets;
#   3. what the run left behind (scripts/leftovers.sh): every container,
#      volume, network namespace and server process it made is gone, or
#      the run fails (and they are removed); the worker image cache is
#      cut to this run's images.
#      Both spend most of their time waiting on containers, agents and
#      Redis, not on the CPU (docs/testing.md gives the figures).
#
# The fault suite's and the fuzz targets' output is kept in a file and
# printed whole after the Go tests end, so the two never interleave. Each phase's wall time is
# printed at the end. Exit status: 0 only if every phase passed.
set -uo pipefail
cd "$(dirname "$0")/.."
MAKE=${MAKE:-make}
summary=()
failed=0

timed() {
  local name=$1; shift
  local t0=$SECONDS
  "$@"; local rc=$?
  summary+=("$(printf '%-32s %4ds  %s' "$name" $((SECONDS - t0)) "$([ $rc = 0 ] && echo ok || echo "FAILED ($rc)")")")
  [ $rc = 0 ] || failed=1
  return $rc
}

start=$SECONDS
mark=$(mktemp)
bash scripts/leftovers.sh mark "$mark"
timed "set-up scripts" bash scripts/test-setup.sh
timed "prometheus rules" $MAKE --no-print-directory test-rules
timed "gofmt, vet" $MAKE --no-print-directory vet
timed "python types (mypy)" $MAKE --no-print-directory test-types
timed "docs (links, examples)" $MAKE --no-print-directory check-docs
if [ $failed = 0 ]; then
  faults_log=$(mktemp)
  t0=$SECONDS
  # The fault suite, then the fuzz targets, in the background: together
  # they take about half as long as the Go tests, the longest phase.
  (
    t1=$SECONDS
    $MAKE --no-print-directory test-faults; rc=$?
    echo "phase-time faults $((SECONDS - t1)) $rc"
    t1=$SECONDS
    $MAKE --no-print-directory fuzz; rc2=$?
    echo "phase-time fuzz $((SECONDS - t1)) $rc2"
    [ $rc = 0 ] && [ $rc2 = 0 ]
  ) >"$faults_log" 2>&1 &
  faults_pid=$!
  timed "go test (every module)" $MAKE --no-print-directory test-go
  wait $faults_pid; rc=$?
  grep -v '^phase-time ' "$faults_log"
  while read -r _ name secs code; do
    summary+=("$(printf '%-32s %4ds  %s' "$name (beside go test)" "$secs" "$([ "$code" = 0 ] && echo ok || echo "FAILED ($code)")")")
  done < <(grep '^phase-time ' "$faults_log")
  rm -f "$faults_log"
  [ $rc = 0 ] || failed=1
fi
echo "== what the run left behind"
timed "leftovers" bash scripts/leftovers.sh check "$mark"
rm -f "$mark"
echo
echo "== make test: wall time per phase"
printf '%s\n' "${summary[@]}"
printf '%-32s %4ds  %s\n' "total" $((SECONDS - start)) "$([ $failed = 0 ] && echo ok || echo FAILED)"
exit $failed
