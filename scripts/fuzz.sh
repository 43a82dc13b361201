#!/usr/bin/env bash
# Runs every fuzz target of a package for FUZZTIME each (make fuzz).
#
# Go's fuzzing coordinator sometimes ends a run that found nothing with
# "context deadline exceeded" when -fuzztime expires while a worker is
# busy (seen under load on 2 cores). Such a run, which wrote no failing
# input, is tried once more; a run that found a failing input fails at once.
set -uo pipefail
pkg=${1:?package directory}
fuzztime=${FUZZTIME:-3s}
targets=$(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$pkg"/*_test.go | cut -c6-)
for f in $targets; do
  for attempt in 1 2; do
    echo "== fuzz $f ($fuzztime)"
    out=$(cd "$pkg" && go test -run='^$' -fuzz="^$f\$" -fuzztime="$fuzztime" . 2>&1)
    rc=$?
    if [ $rc = 0 ]; then
      echo "$out" | tail -3
      break
    fi
    if grep -q "Failing input written" <<<"$out" || ! grep -q "context deadline exceeded" <<<"$out" || [ $attempt = 2 ]; then
      echo "$out"
      exit 1
    fi
    # Not printed: the retried run's lines would read as a failure.
    echo "fuzz: $f ended with Go's 'context deadline exceeded' and wrote no failing input; trying once more"
  done
done
