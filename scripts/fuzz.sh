#!/usr/bin/env bash
# Runs every fuzz target in the module for a short time each (default 10s).
# Usage: scripts/fuzz.sh [fuzztime]
set -euo pipefail
cd "$(dirname "$0")/.."
t=${1:-10s}
found=0
while IFS= read -r line; do
  file=${line%%:*}
  name=$(sed -E 's/^.*func (Fuzz[A-Za-z0-9_]*)\(.*/\1/' <<<"${line#*:}")
  dir=./$(dirname "$file")
  found=$((found+1))
  echo "fuzz: $dir $name ($t)"
  go test -run='^$' -fuzz="^${name}\$" -fuzztime="$t" "$dir"
done < <(git ls-files '*_test.go' | xargs -r grep -n '^func Fuzz' /dev/null | sed -E 's/^([^:]*):[0-9]+:/\1:/')
echo "fuzz: $found targets ran clean"
