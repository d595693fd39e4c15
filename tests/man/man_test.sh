#!/usr/bin/env bash
# Checks the manual pages of man/ (troff man(7) source):
#
# - every page renders without a warning: `groff -ww -z -man` prints nothing
#   and exits 0, for groff's default device and for a terminal (-Tutf8),
#   and so does `man -l` where man-db is installed; the link pages
#   (".so man3/rdmaplane.h.3") are rendered from the man folder, as man(1)
#   reads them, so a link that does not resolve fails;
# - rdmaplane.h.3 has, in its SYNOPSIS, every rdp_* function that
#   api/rdmaplane.h declares, with the prototype as the header writes it
#   (blanks aside), names each in NAME, and each has a link page
#   man3/NAME.3 holding ".so man3/rdmaplane.h.3"; no link page names a
#   function the header lacks; its EXAMPLE compiles against the header;
# - rdmaplaned.8 has an OPTIONS entry for every flag of
#   control/rdmaplaned.cc (its ABSL_FLAGs, as `rdmaplaned --helpfull` lists
#   them under that file), under the group `rdmaplaned --help` shows it in,
#   and no entry for a flag the daemon lacks; rdmaplanectl.8 likewise for
#   the flags `rdmaplanectl --help` lists;
# - every page has NAME, DESCRIPTION and SEE ALSO.
#
#   man_test.sh RDMAPLANED RDMAPLANECTL RDMAPLANE_H PAGE...
#
# The pages are those of //man:pages; the man folder is the grandparent of
# the first. Prints one line per check and "man_test: ok" at the end; exits
# 1 when any check failed.

# pass() always succeeds, so "CONDITION && pass ... || fail ..." is an if/else.
# shellcheck disable=SC2015
set -uo pipefail

daemon="$(readlink -f "$1")"
ctl="$(readlink -f "$2")"
header="$(readlink -f "$3")"
man_dir="$(cd "$(dirname "$4")/.." && pwd)"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"

failures=0
fail() {
  printf 'FAIL: %s\n' "$*"
  failures=$((failures + 1))
}
pass() { printf 'ok: %s\n' "$*"; }
note() { printf 'note: %s\n' "$*"; }

command -v groff >/dev/null 2>&1 || {
  echo "FAIL: groff not found (Debian package groff; deploy/setup.sh installs it)"
  exit 1
}

cd "$man_dir" || exit 1
mapfile -t pages < <(find -L man1 man3 man7 man8 -type f -name '*.[1-8]' | sort)
[[ ${#pages[@]} -ge 6 ]] || fail "found only ${#pages[@]} pages under $man_dir"

# --- Rendering -----------------------------------------------------------------
echo "== rendering"
for page in "${pages[@]}"; do
  for device in "" -Tutf8; do
    # shellcheck disable=SC2086 # $device is empty or one word
    if err="$(groff -ww -z -man $device "$page" 2>&1 >/dev/null)" && [[ -z $err ]]; then
      pass "groff -ww -z -man ${device:+$device }$page: no warning"
    else
      fail "groff -ww -z -man ${device:+$device }$page: ${err:-exit status not 0}"
    fi
  done
done
if command -v man >/dev/null 2>&1; then
  for page in "${pages[@]}"; do
    if out="$(MANWIDTH=80 MAN_KEEP_FORMATTING=0 man -l "$page" 2>"$tmp/man.err")" \
      && [[ ! -s $tmp/man.err && -n $out ]]; then
      pass "man -l $page"
    else
      fail "man -l $page: $(cat "$tmp/man.err")"
    fi
  done
else
  note "man (Debian package man-db) is not installed: man -l not tried"
fi

# Plain text of a page (no bold, no underline).
render() { groff -man -Tascii -P-cbou "$1" 2>/dev/null; }
# The lines of section $2 ("SYNOPSIS", ...) of the rendered page $1.
section() { render "$1" | awk -v s="$2" '/^[A-Z]/ { on = ($0 == s); next } on'; }

for page in "${pages[@]}"; do
  [[ $(head -c 4 "$page") == ".so " ]] && continue
  missing=""
  for s in NAME DESCRIPTION "SEE ALSO"; do
    render "$page" | grep -qx "$s" || missing+=" $s"
  done
  [[ -z $missing ]] && pass "$page has NAME, DESCRIPTION and SEE ALSO" \
    || fail "$page lacks the section(s)$missing"
done

# --- The C API -----------------------------------------------------------------
echo "== rdmaplane.h.3"
api_page=man3/rdmaplane.h.3
# The header's prototypes, comments removed, one per line, blanks folded.
prototypes="$(perl -0777 -ne '
  s{/\*.*?\*/}{}gs;
  while (/((?:const\s+)?\w+\s*\**\s+\**rdp_\w+\s*\([^)]*\)\s*;)/g) {
    my $p = $1; $p =~ s/\s+/ /g; $p =~ s/\( /(/g; print "$p\n";
  }' "$header")"
functions="$(sed -E 's/.*[ *](rdp_[a-z0-9_]+)\(.*/\1/' <<<"$prototypes" | sort -u)"
count="$(grep -c . <<<"$functions")"
# rdmaplane.h declared 20 functions when this test was written: finding
# fewer means the extraction broke, not that functions went away.
if [[ $count -ge 20 ]]; then
  pass "api/rdmaplane.h declares $count rdp_* functions"
else
  fail "found only $count rdp_* prototypes in $header (has its style changed?): $functions"
fi
synopsis="$(section "$api_page" SYNOPSIS | tr -s ' \n' '  ')"
name_line="$(section "$api_page" NAME | tr -s ' \n' '  ')"
while IFS= read -r proto; do
  [[ -n $proto ]] || continue
  f="$(sed -E 's/.*[ *](rdp_[a-z0-9_]+)\(.*/\1/' <<<"$proto")"
  if grep -qF -- "$proto" <<<"$synopsis"; then
    pass "SYNOPSIS: $proto"
  else
    fail "$api_page: the SYNOPSIS lacks '$proto' as api/rdmaplane.h declares it"
  fi
  grep -qE "(^|[ ,])$f(,| )" <<<"$name_line" || fail "$api_page: NAME does not list $f"
  link="man3/$f.3"
  if [[ -f $link && $(<"$link") == ".so man3/rdmaplane.h.3" ]]; then
    pass "$link links to rdmaplane.h.3"
  else
    fail "no link page $link holding '.so man3/rdmaplane.h.3' (man 3 $f would find nothing)"
  fi
done <<<"$prototypes"
for link in man3/*.3; do
  [[ $link == "$api_page" ]] && continue
  f="$(basename "$link" .3)"
  grep -qx "$f" <<<"$functions" || fail "$link names no function of api/rdmaplane.h"
done

# The EXAMPLE's program: the first .EX/.EE block after ".SH EXAMPLE",
# rendered by groff (for its escapes), compiled against the header.
awk '/^\.SH EXAMPLE/ { on = 1 } on && /^\.EX/ { code = 1; next } code && /^\.EE/ { exit } code' \
  "$api_page" >"$tmp/example.tr"
{
  echo .nf
  cat "$tmp/example.tr"
} | groff -Tascii -P-cbou >"$tmp/example.c" 2>"$tmp/example.err"
if ! grep -q 'int main' "$tmp/example.c"; then
  fail "$api_page: no program found in the EXAMPLE section"
elif ! command -v cc >/dev/null 2>&1; then
  note "cc is not installed: the EXAMPLE was not compiled"
elif cc -std=c11 -Wall -Wextra -Wpedantic -Werror -fsyntax-only \
  -I "$(dirname "$header")" "$tmp/example.c" >"$tmp/cc.out" 2>&1; then
  pass "the EXAMPLE compiles (cc -std=c11 -Wall -Wextra -Wpedantic -Werror)"
  # Every function the example calls is one of the header's.
  for f in $(grep -oE '\brdp_[a-z0-9_]+\(' "$tmp/example.c" | tr -d '(' | sort -u); do
    grep -qx "$f" <<<"$functions" || fail "the EXAMPLE calls $f, which api/rdmaplane.h lacks"
  done
else
  fail "$api_page: the EXAMPLE does not compile: $(cat "$tmp/cc.out")"
fi

# --- Flags ---------------------------------------------------------------------
# options_of PAGE: "GROUP<TAB>FLAG" for each --flag in the tag of an entry
# (the line after .TP) of the OPTIONS section, GROUP the .SS it is under.
options_of() {
  awk '
    /^\.SH / { on = ($0 == ".SH OPTIONS"); group = ""; next }
    !on { next }
    /^\.SS / { group = substr($0, 5); gsub(/"/, "", group); next }
    /^\.TP/ { tag = 1; next }
    tag {
      tag = 0
      line = $0
      while (match(line, /\\-\\-[a-z0-9_]+/)) {
        printf "%s\t%s\n", group, substr(line, RSTART + 4, RLENGTH - 4)
        line = substr(line, RSTART + RLENGTH)
      }
    }' "$1"
}
# check_flags PAGE WHAT FLAGS EXTRA...: every one of FLAGS (one a line) has
# an entry in PAGE's OPTIONS, and every entry is one of FLAGS or EXTRA.
check_flags() {
  local page="$1" what="$2" flags="$3" documented missing stale
  shift 3
  documented="$(options_of "$page" | cut -f2 | sort -u)"
  missing="$(comm -23 <(printf '%s\n' "$flags") <(printf '%s\n' "$documented"))"
  [[ -z $missing ]] && pass "$page has an entry for each of the $(grep -c . <<<"$flags") flags of $what" \
    || fail "$page has no OPTIONS entry for: $(tr '\n' ' ' <<<"$missing")"
  stale="$(comm -13 <(printf '%s\n' "$flags" "$@" | sort -u) <(printf '%s\n' "$documented"))"
  [[ -z $stale ]] && pass "$page documents no flag $what lacks" \
    || fail "$page documents flags $what does not have: $(tr '\n' ' ' <<<"$stale")"
}

echo "== rdmaplaned.8"
# The ABSL_FLAGs of control/rdmaplaned.cc, as --helpfull lists them under
# that file (Abseil exits 1 after it).
helpfull="$("$daemon" --helpfull 2>&1)"
daemon_flags="$(sed -n '/^  Flags from .*rdmaplaned\.cc:$/,/^$/p' <<<"$helpfull" \
  | sed -n 's/^    --\([a-z][a-z0-9_]*\) .*/\1/p; s/^    --\([a-z][a-z0-9_]*\)$/\1/p' | sort -u)"
if grep -qx port <<<"$daemon_flags" && grep -qx check_config <<<"$daemon_flags"; then
  # Abseil's own flags the page describes under "Other".
  check_flags man8/rdmaplaned.8 "control/rdmaplaned.cc" "$daemon_flags" \
    flagfile fromenv tryfromenv help helpfull version
else
  fail "cannot read rdmaplaned's flags from --helpfull (no --port and --check_config under 'Flags from ...rdmaplaned.cc:'); it printed: $(head -c 600 <<<"$helpfull")"
fi
# The groups of `rdmaplaned --help`: a line "Title:" starts one, its flags
# are the lines "  --flag..." after it.
help_status=0
help="$("$daemon" --help 2>&1)" || help_status=$?
help_groups="$(awk '
  /^[A-Z][A-Za-z ]*:$/ { group = substr($0, 1, length($0) - 1); next }
  /^  --[a-z]/ && group != "" {
    flag = substr($0, 5); sub(/[= ].*/, "", flag); printf "%s\t%s\n", group, flag
  }' <<<"$help" | sort)"
if [[ $help_status -ne 0 || $(grep -c . <<<"$help_groups") -lt 10 ]]; then
  fail "cannot read the flag groups of rdmaplaned --help (exit $help_status): $(head -c 600 <<<"$help")"
else
  page_groups="$(options_of man8/rdmaplaned.8 | sort)"
  wrong="$(comm -23 <(printf '%s\n' "$help_groups") <(printf '%s\n' "$page_groups"))"
  [[ -z $wrong ]] && pass "rdmaplaned.8 groups the flags as rdmaplaned --help does ($(cut -f1 <<<"$help_groups" | sort -u | tr '\n' ',' | sed 's/,$//; s/,/, /g'))" \
    || fail "rdmaplaned.8 does not show these flags under the group rdmaplaned --help shows them in (group<TAB>flag): $wrong"
fi

echo "== rdmaplanectl.8"
# Its flags, as its usage lists them ("  --socket=PATH ...").
ctl_flags="$("$ctl" --help 2>&1 | sed -n 's/^  --\([a-z][a-z0-9_]*\).*/\1/p' | sort -u)"
if grep -qx socket <<<"$ctl_flags" && grep -qx json <<<"$ctl_flags"; then
  check_flags man8/rdmaplanectl.8 "rdmaplanectl" "$ctl_flags" nojson help
else
  fail "cannot read rdmaplanectl's flags from --help: $("$ctl" --help 2>&1 | head -c 600)"
fi

if [[ $failures -ne 0 ]]; then
  echo "man_test: $failures check(s) failed"
  exit 1
fi
echo "man_test: ok"
