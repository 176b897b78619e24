#!/usr/bin/env bash
# Runs the integration tier: the tests that only build with the
# integration tag, against the running components, in one `go test` over
# every module so both cores stay busy to the end.
#
#   deploy/local/integration.sh list MODULE...          package and test names
#   deploy/local/integration.sh run MODULE... -- FLAGS  go test them (FLAGS: -count=1 -p 2 ...)
#
# The unit tests (the files without the tag) already ran in make test-unit,
# with the race detector; building with -tags integration would run them a
# second time. So the tier is derived from the files: a package takes part
# when `go list -tags integration` gives it test files that plain `go list`
# does not, and `go test -run` names exactly the Test, Fuzz and Example
# functions of those files. A new integration test joins the tier by being
# in such a file; nothing else to keep in step. The one regular expression
# covers every package, so a unit test that shares its name with an
# integration test of another package runs here too (three did when this
# was written: a few seconds).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

mode=${1:-}
shift || true
modules=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do modules+=("$1"); shift; done
[ $# -gt 0 ] && shift
if [ "$mode" != list ] && [ "$mode" != run ] || [ ${#modules[@]} -eq 0 ]; then
  echo "usage: $0 list|run MODULE... [-- go test flags]" >&2
  exit 2
fi

patterns=()
for m in "${modules[@]}"; do patterns+=("./$m/..."); done
format='{{.ImportPath}} {{.Dir}}{{range .TestGoFiles}} {{.}}{{end}}{{range .XTestGoFiles}} {{.}}{{end}}'
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go list -tags integration -f "$format" "${patterns[@]}" | sort >"$tmp/tagged"
go list -f "$format" "${patterns[@]}" | sort >"$tmp/plain"

# One line per package with integration-only test files:
# import path, then the test functions those files declare (TestMain
# always runs and is not named).
pkgs=()
names=()
while read -r path dir files; do
  plain=$(awk -v p="$path" '$1 == p { $1 = ""; $2 = ""; print }' "$tmp/plain")
  own=()
  for f in $files; do
    case " $plain " in *" $f "*) ;; *) own+=("$dir/$f") ;; esac
  done
  [ ${#own[@]} -eq 0 ] && continue
  found=$(sed -nE 's/^func ((Test|Fuzz|Example)[A-Za-z0-9_]*)\(.*/\1/p' "${own[@]}" | grep -vx TestMain || true)
  # A package whose integration files hold only helpers or benchmarks has
  # no test to run here (make lint still compiles it with the tag).
  [ -z "$found" ] && continue
  pkgs+=("$path")
  names+=($found)
  if [ "$mode" = list ]; then echo "$path" $found; fi
done <"$tmp/tagged"

[ "$mode" = list ] && exit 0
if [ ${#pkgs[@]} -eq 0 ]; then
  echo "integration: no integration-tagged tests found in ${modules[*]}" >&2
  exit 1
fi

# go test starts packages in the order it is given them, -p at a time. A
# package of many minutes started late runs on alone after the rest are
# done (services/worker, 13 minutes, used to start 11 minutes in), so the
# packages measured slowest go first and the short ones fill the other
# lane. This is only an order: a package not named here still runs, in
# its sorted place, and a name no longer found is passed over. Measured
# per package: docs/integration-tier.md.
slowest_first=(
  services/worker
  services/api/internal/console
  pkg/store/rangeleader
  services/prefetcher
  pkg/store/ledger
  cmd/schedctl
  services/api/internal/app
  pkg/store/lease
  services/relay/internal/relay
  services/api/internal/server
  services/api/internal/apitest
  services/api/internal/store
)
ordered=()
for rel in "${slowest_first[@]}"; do
  for p in "${pkgs[@]}"; do
    [[ "$p" == */"$rel" ]] && ordered+=("$p")
  done
done
for p in "${pkgs[@]}"; do
  case " ${ordered[*]} " in *" $p "*) ;; *) ordered+=("$p") ;; esac
done
pkgs=("${ordered[@]}")
run=$(printf '%s\n' "${names[@]}" | sort -u | paste -sd '|')
echo "integration: ${#names[@]} tests in ${#pkgs[@]} packages"
go test -tags integration -run "^($run)\$" "$@" "${pkgs[@]}"
