#!/usr/bin/env bash
# Runs make targets, each against its budget, and prints how long each
# took — what `make test` is made of.
#
#   deploy/local/steps.sh target:budget-seconds ...
#   deploy/local/steps.sh a:budget+b:budget ...          a and b side by side
#   deploy/local/steps.sh a:budget,c:budget+b:budget ... a then c, beside b
#
#   deploy/local/steps.sh a:budget+~b:budget ...         b beside a, at the lowest CPU priority
#
# Steps run one after the other; lanes joined by + start together and the
# run goes on when all of them have ended (each step still against its own
# budget); a lane is one step or several joined by , one after the other.
# Side by side, each step's output goes to .run/steps/<step>.log and is
# printed whole once its group has ended, so the log reads step by step.
#
# A step named with a leading ~ runs under nice 19: it takes only the CPU
# the steps beside it leave idle, so a step that keeps the cores busy
# (fuzzing, a smoke run that asserts nothing about speed) can fill the
# idle time of one that mostly waits on real time and asserts bounds of
# seconds, without stretching those bounds.
#
# A step that fails stops the run with its exit status (its lane at once,
# the lanes beside it when they have ended). A step still running at its budget is stopped and
# fails the run, naming the step and its budget: a tier that grew past
# what was stated is a finding, not a slower CI. The summary (each step's
# time, its budget, and the total) is printed at the end whatever
# happened, and kept in .run/steps.tsv.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

summary=()
total_start=$(date +%s)
mkdir -p .run/steps
out=.run/steps.tsv
printf 'step\tseconds\tbudget\tbusy\tresult\n' >"$out"

report() {
  local rc=$?
  local total=$(($(date +%s) - total_start))
  echo
  echo "--- make test: time per step (steps joined by + ran side by side)"
  printf '  %-18s %8s %8s %5s  %s\n' step took budget busy result
  for line in "${summary[@]}"; do
    IFS=$'\t' read -r name took budget busy result <<<"$line"
    printf '  %-18s %7ss %7ss %5s  %s\n' "$name" "$took" "$budget" "$busy" "$result"
  done
  printf '  %-18s %7ss\n' total "$total"
  exit "$rc"
}
trap report EXIT

# cpu_ticks: the machine's busy and total CPU ticks so far (/proc/stat's
# first line; busy is everything but idle and iowait).
cpu_ticks() {
  local _ user nice system idle iowait rest
  read -r _ user nice system idle iowait rest </proc/stat
  local total=$((user + nice + system + idle + iowait))
  for v in $rest; do total=$((total + v)); done
  echo "$((total - idle - iowait)) $total"
}

# run_step name budget [nice]: make name under its budget (at nice 19 when
# the third argument is "nice"); writes "rc took busy"
# to .run/steps/name.rc, busy being the share of the machine's CPU (every
# core) in use while the step ran, whoever used it: a step with a low
# share mostly waits, and is a candidate to run beside another.
run_step() {
  local start rc=0 busy0 total0 busy1 total1
  read -r busy0 total0 < <(cpu_ticks)
  start=$(date +%s)
  # timeout signals the step's whole process group (make and the tests it
  # started); -k: what does not stop within 30 s of the budget is killed.
  local prio=()
  [ "${3:-}" = nice ] && prio=(nice -n 19)
  "${prio[@]}" timeout -k 30 "$2" make --no-print-directory "$1" || rc=$?
  read -r busy1 total1 < <(cpu_ticks)
  echo "$rc $(($(date +%s) - start)) $(((busy1 - busy0) * 100 / (total1 - total0 + 1)))%" >".run/steps/$1.rc"
}

# record name budget label: adds the step's line to the summary; fails
# (returns its exit status) when the step did.
record() {
  local name=$1 budget=$2 label=$3 rc took busy result=ok
  read -r rc took busy <".run/steps/$name.rc"
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    result="over budget (stopped at ${budget}s)"
  elif [ "$rc" -ne 0 ]; then
    result="failed (exit $rc)"
  fi
  summary+=("$label"$'\t'"$took"$'\t'"$budget"$'\t'"$busy"$'\t'"$result")
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$took" "$budget" "$busy" "$result" >>"$out"
  echo "=== step $name: $result in ${took}s (budget ${budget}s, machine ${busy} busy)"
  if [ "$rc" -ne 0 ]; then
    echo "make test: step $name $result" >&2
  fi
  return "$rc"
}

# parse member: sets name, budget and prio ("nice" for a leading ~) of
# one step of TEST_STEPS.
parse() {
  name=${1%%:*}
  budget=${1##*:}
  prio=
  if [ "${name#\~}" != "$name" ]; then
    name=${name#\~}
    prio=nice
  fi
}

for spec in "$@"; do
  IFS=+ read -ra group <<<"$spec"
  if [ ${#group[@]} -eq 1 ]; then
    parse "$spec"
    echo "=== step $name (budget ${budget}s${prio:+, $prio}) started $(date -u +%H:%M:%S)"
    run_step "$name" "$budget" "$prio"
    record "$name" "$budget" "${prio:+~}$name" || exit $?
    continue
  fi
  pids=()
  for lane in "${group[@]}"; do
    IFS=, read -ra chain <<<"$lane"
    for member in "${chain[@]}"; do
      parse "$member"
      rm -f ".run/steps/$name.rc"
      echo "=== step $name (budget ${budget}s${prio:+, $prio}) in a lane side by side; output in .run/steps/$name.log"
    done
    (
      for member in "${chain[@]}"; do
        parse "$member"
        echo "=== step $name started $(date -u +%H:%M:%S)" >".run/steps/$name.log"
        run_step "$name" "$budget" "$prio" >>".run/steps/$name.log" 2>&1
        read -r rc _ <".run/steps/$name.rc"
        [ "$rc" -eq 0 ] || break
      done
    ) &
    pids+=($!)
  done
  wait "${pids[@]}" || true
  failed=0
  for lane in "${group[@]}"; do
    IFS=, read -ra chain <<<"$lane"
    for member in "${chain[@]}"; do
      parse "$member"
      [ -f ".run/steps/$name.rc" ] || continue # after a failure in its lane
      echo "=== step $name: output"
      cat ".run/steps/$name.log"
      record "$name" "$budget" "+${prio:+~}$name" || failed=$?
    done
  done
  [ "$failed" -eq 0 ] || exit "$failed"
done
