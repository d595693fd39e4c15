#!/usr/bin/env bash
# bench_lib.sh's bench_source_revision: the commit and changed files the
# bench reports name come from the checkout the library's own file lives
# in, symlinks resolved, and from no other. A copy inside someone else's
# checkout with thousands of changed files reports "unknown" and none (the
# runners once passed that whole list on one command line and failed); a
# symlink into a checkout reports that checkout; a checkout with more than
# 20 changed files names 20 and counts the rest; a clean one names none.
#
#   bench_lib_test.sh BENCH_LIB
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: bench_lib_test.sh BENCH_LIB" >&2
  exit 2
fi
lib="$(readlink -f "$1")"
tmp="$(mktemp -d "${TEST_TMPDIR:-/tmp}/bench_lib_test.XXXXXX")"
# shellcheck disable=SC2317  # the EXIT trap
cleanup() { rm -rf -- "$tmp"; }
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
g() { git -c user.name=t -c user.email=t@t -c init.defaultBranch=main "$@"; }

# revision_of LIB: "COMMIT|DIRTY" as the library at LIB reports them.
revision_of() {
  # shellcheck disable=SC1090,SC2154  # the copy under test sets both
  (source "$1" && bench_source_revision && printf '%s|%s\n' "$commit" "$dirty_files")
}

# An enclosing checkout with 3000 tracked files, all changed.
outer="$tmp/outer"
mkdir -p "$outer/many"
g init -q "$outer"
for i in $(seq 3000); do echo a >"$outer/many/file_with_a_long_name_$i"; done
g -C "$outer" add -A
g -C "$outer" commit -q -m outer
for i in $(seq 3000); do echo b >"$outer/many/file_with_a_long_name_$i"; done

mkdir -p "$outer/nested/bench"
cp "$lib" "$outer/nested/bench/bench_lib.sh"
got="$(revision_of "$outer/nested/bench/bench_lib.sh")"
[[ $got == "unknown|" ]] ||
  fail "a copy inside another checkout reported '${got:0:200}', not 'unknown|'"

# A project checkout of its own, clean.
proj="$tmp/proj"
mkdir -p "$proj/bench" "$proj/src"
g init -q "$proj"
cp "$lib" "$proj/bench/bench_lib.sh"
for i in $(seq 25); do echo a >"$proj/src/f$i"; done
g -C "$proj" add -A
g -C "$proj" commit -q -m proj
head_short="$(git -C "$proj" rev-parse --short HEAD)"
got="$(revision_of "$proj/bench/bench_lib.sh")"
[[ $got == "$head_short|" ]] || fail "a clean checkout reported '$got', not '$head_short|'"

# Reached through a symlink from inside the other checkout (a runfiles tree).
mkdir -p "$outer/runfiles/bench"
ln -s "$proj/bench/bench_lib.sh" "$outer/runfiles/bench/bench_lib.sh"
got="$(revision_of "$outer/runfiles/bench/bench_lib.sh")"
[[ $got == "$head_short|" ]] || fail "through a symlink: '${got:0:200}', not '$head_short|'"

# 25 changed files: 20 named, 5 counted.
for i in $(seq 25); do echo b >"$proj/src/f$i"; done
got="$(revision_of "$outer/runfiles/bench/bench_lib.sh")"
dirty="${got#*|}"
[[ ${got%%|*} == "$head_short" ]] || fail "a changed checkout reported commit '${got%%|*}'"
IFS=, read -r -a named <<<"$dirty"
((${#named[@]} == 21)) || fail "expected 20 names and a count, got ${#named[@]} items: $dirty"
[[ ${named[20]} == "and 5 more" ]] || fail "expected 'and 5 more' last, got '${named[20]}'"
[[ ${named[0]} == src/f* ]] || fail "expected changed files under src/, got '${named[0]}'"

echo "PASS"
