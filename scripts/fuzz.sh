#!/usr/bin/env bash
# Runs every fuzz target in the module briefly: 10000 inputs each by
# default. A count, not a duration: with a duration, Go's fuzz coordinator
# (go1.26; golang/go#75804, fixed in go1.27) can fail a clean run with
# "context deadline exceeded" when a worker is mid-input at the deadline,
# as it did here on a loaded 2-core machine.
# Usage: scripts/fuzz.sh [fuzztime]   (-fuzztime's forms: 10000x, 10s)
set -euo pipefail
cd "$(dirname "$0")/.."
t=${1:-10000x}
found=0
while IFS= read -r line; do
  file=${line%%:*}
  name=$(sed -E 's/^.*func (Fuzz[A-Za-z0-9_]*)\(.*/\1/' <<<"${line#*:}")
  dir=./$(dirname "$file")
  found=$((found+1))
  echo "fuzz: $dir $name ($t)"
  # -fuzzminimizetime: Go minimizes each new interesting input for up to
  # 60 s by default; FuzzStateMachine spent 30 s of a 34 s run in it.
  go test -run='^$' -fuzz="^${name}\$" -fuzztime="$t" -fuzzminimizetime=300x "$dir"
done < <(git ls-files '*_test.go' | xargs -r grep -n '^func Fuzz' /dev/null | sed -E 's/^([^:]*):[0-9]+:/\1:/')
echo "fuzz: $found targets ran clean"
