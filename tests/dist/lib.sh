# lib.sh - shared by the multi-process tests (tests/dist/test_*.sh): TAP lines,
# a scratch directory, and `ldist launch` with a wall-clock limit.
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
LDIST=${LDIST_BIN:-./ldist}
T=$(mktemp -d "${TMPDIR:-/tmp}/ldist-dist.XXXXXX")
[ -n "${KEEP:-}" ] && echo "# scratch directory: $T" || trap 'rm -rf "$T"' EXIT
failures=0
ok() { echo "ok - $1"; }
not_ok() { echo "not ok - $1"; failures=$((failures + 1)); }
check() {  # check NAME CONDITION-COMMAND... : ok when the command succeeds
  local name=$1; shift
  if "$@"; then ok "$name"; else not_ok "$name"; fi
}
note() { echo "# $*"; }
show() { sed 's/^/#   /' "$1" | tail -n "${2:-30}"; }   # a log, as TAP comments
# maxdiff A B: the largest |a - b| over the tensors of two safetensors files
maxdiff() { "$LDIST" tests/dist/maxdiff.lua "$1" "$2" 2>&1 | awk '{print $1}'; }
# le X Y: X <= Y as numbers (false when X is not a number, e.g. an error message)
le() { [[ $1 =~ ^[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$ ]] && awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 <= b + 0) }'; }
finish() { exit $((failures > 0)); }
