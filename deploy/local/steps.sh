#!/usr/bin/env bash
# Runs make targets one after the other, each against its budget, and
# prints how long each took — what `make test` is made of.
#
#   deploy/local/steps.sh target:budget-seconds ...
#
# A step that fails stops the run with its exit status. A step still
# running at its budget is stopped and fails the run, naming the step and
# its budget: a tier that grew past what was stated is a finding, not a
# slower CI. The summary (each step's time, its budget, and the total) is
# printed at the end whatever happened, and kept in .run/steps.tsv.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

summary=()
total_start=$(date +%s)
mkdir -p .run
out=.run/steps.tsv
printf 'step\tseconds\tbudget\tresult\n' >"$out"

report() {
  local rc=$?
  local total=$(($(date +%s) - total_start))
  echo
  echo "--- make test: time per step"
  printf '  %-18s %8s %8s  %s\n' step took budget result
  for line in "${summary[@]}"; do
    IFS=$'\t' read -r name took budget result <<<"$line"
    printf '  %-18s %7ss %7ss  %s\n' "$name" "$took" "$budget" "$result"
  done
  printf '  %-18s %7ss\n' total "$total"
  exit "$rc"
}
trap report EXIT

for spec in "$@"; do
  name=${spec%%:*}
  budget=${spec##*:}
  echo "=== step $name (budget ${budget}s) started $(date -u +%H:%M:%S)"
  start=$(date +%s)
  rc=0
  # timeout signals the step's whole process group (make and the tests it
  # started); -k: what does not stop within 30 s of the budget is killed.
  timeout -k 30 "$budget" make --no-print-directory "$name" || rc=$?
  took=$(($(date +%s) - start))
  result=ok
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    result="over budget (stopped at ${budget}s)"
  elif [ "$rc" -ne 0 ]; then
    result="failed (exit $rc)"
  fi
  summary+=("$name"$'\t'"$took"$'\t'"$budget"$'\t'"$result")
  printf '%s\t%s\t%s\t%s\n' "$name" "$took" "$budget" "$result" >>"$out"
  echo "=== step $name: $result in ${took}s (budget ${budget}s)"
  if [ "$rc" -ne 0 ]; then
    echo "make test: step $name $result" >&2
    exit "$rc"
  fi
done
