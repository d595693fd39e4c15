#!/usr/bin/env bash
# The verbs front end defines every symbol the installed libibverbs.so.1
# exports, under the same version (NAME@@VERSION for a default, NAME@VERSION
# for a compatibility version): an application's reference that found no
# definition here would bind to libibverbs, whose functions read a
# provider's private data next to the context and crash on ours. Prints the
# comparison's summary, version by version, and fails naming each symbol
# missing. The comparison is first shown to fail on a library with one
# symbol taken away.
#
#   exports_test.sh LIBRDMAPLANE_VERBS_SO [LIBIBVERBS_SO]
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: exports_test.sh LIBRDMAPLANE_VERBS_SO [LIBIBVERBS_SO]" >&2
  exit 2
fi
ours_so="$1"
theirs_so="${2:-}"
if [[ -z $theirs_so ]]; then
  # ldconfig is in /usr/sbin, which a test's PATH may leave out.
  ldconfig="$(PATH="$PATH:/usr/sbin:/sbin" command -v ldconfig)" || {
    echo "FAIL: ldconfig not found" >&2
    exit 1
  }
  theirs_so="$("$ldconfig" -p | awk '$1 == "libibverbs.so.1" && /x86-64/ && !found { print $NF; found = 1 }')"
fi
if [[ -z $theirs_so || ! -e $theirs_so ]]; then
  echo "FAIL: libibverbs.so.1 is not installed (deploy/setup.sh installs ibverbs-utils)" >&2
  exit 1
fi
tmp="$(mktemp -d "${TEST_TMPDIR:-/tmp}/exports_test.XXXXXX")"
# shellcheck disable=SC2317  # the EXIT trap
cleanup() { rm -rf -- "$tmp"; }
trap cleanup EXIT

# exports SO: its defined dynamic symbols with their versions, one a line,
# without the version definitions themselves.
exports() {
  local listing
  listing="$(nm -D --defined-only "$1")" || {
    echo "FAIL: nm -D could not read $1" >&2
    exit 1
  }
  awk '$2 != "A" && NF == 3 { print $3 }' <<<"$listing" | sort -u
}

# missing THEIRS OURS: the lines of THEIRS that OURS lacks.
missing() { comm -23 "$1" "$2"; }

exports "$theirs_so" >"$tmp/theirs"
exports "$ours_so" >"$tmp/ours"
total="$(wc -l <"$tmp/theirs")"
if ((total < 100)); then
  echo "FAIL: only $total exports read from $theirs_so" >&2
  exit 1
fi

# The comparison must be able to fail.
sed 1d "$tmp/ours" >"$tmp/ours_less_one"
if [[ -z "$(missing "$tmp/theirs" "$tmp/ours_less_one")" ]] &&
  grep -qxFf <(head -n 1 "$tmp/ours") "$tmp/theirs"; then
  echo "FAIL: a library without $(head -n 1 "$tmp/ours") was not found short" >&2
  exit 1
fi

gone="$(missing "$tmp/theirs" "$tmp/ours")"
echo "exports: $theirs_so exports $total symbols; by version, defined here:"
while read -r version; do
  want="$(grep -c "@$version\$" "$tmp/theirs" || true)"
  have="$(grep "@$version\$" "$tmp/theirs" | comm -12 - "$tmp/ours" | wc -l)"
  printf '  %-20s %3d of %3d\n' "${version#@}" "$have" "$want"
done < <(sed 's/^[^@]*@@\{0,1\}//' "$tmp/theirs" | sort -uV)
if [[ -n $gone ]]; then
  echo "FAIL: $(wc -l <<<"$gone") symbols of $theirs_so are not defined by $ours_so:" >&2
  awk '{ print "  " $0 }' <<<"$gone" >&2
  exit 1
fi
echo "PASS: all $total defined, each under its version"
