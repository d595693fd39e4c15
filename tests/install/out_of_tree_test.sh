#!/usr/bin/env bash
# A program written outside this tree builds against an installed
# librdmaplane with pkg-config alone, and runs against a daemon:
#   1. deploy/install.sh installs the daemon, librdmaplane.so.1, rdmaplane.h
#      and rdmaplane.pc into a scratch prefix (--binaries: the ones Bazel
#      built for this test);
#   2. the library exports the C API and nothing of its insides: every
#      rdp_* function of the installed rdmaplane.h, versioned RDMAPLANE_1.0,
#      and no other symbol of its own;
#   3. api/example/rdmaplane_example.c, copied out of the tree, compiles
#      with `cc -std=c11 app.c $(pkg-config --cflags --libs rdmaplane)` and
#      loads the installed library;
#   4. example_test.sh runs it against the installed daemon ("example: ok").
#
#   out_of_tree_test.sh INSTALL_SH RDMAPLANED RDMAPLANECTL LIBRDMAPLANE EXAMPLE_C EXAMPLE_TEST_SH
set -euo pipefail

install_sh="$1"
daemon="$2"
ctl="$3"
lib="$4"
example_c="$5"
example_test="$6"
tmp="$(mktemp -d "${TEST_TMPDIR:-/tmp}/oot.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

for tool in cc pkg-config nm; do
  command -v "$tool" >/dev/null || fail "$tool not found (deploy/setup.sh installs it)"
done

# --- 1. install -------------------------------------------------------------
mkdir "$tmp/built"
cp "$daemon" "$ctl" "$lib" "$tmp/built/"
prefix="$tmp/prefix"
"$install_sh" --prefix="$prefix" --sysconfdir="$tmp/etc" --binaries="$tmp/built" >"$tmp/install.log" 2>&1 ||
  fail "install.sh failed: $(cat "$tmp/install.log")"
installed="$prefix/lib/librdmaplane.so.1"
[[ -f $installed && -f $prefix/include/rdmaplane.h && -f $prefix/lib/pkgconfig/rdmaplane.pc ]] ||
  fail "install.sh left out the library, the header or rdmaplane.pc"

# --- 2. what the library exports --------------------------------------------
# Every function the header names ("rdp_name(", declared or mentioned).
declared="$(grep -oE '\brdp_[a-z_]+\(' "$prefix/include/rdmaplane.h" | tr -d '(' | sort -u)"
[[ $(wc -l <<<"$declared") -ge 20 ]] || fail "found only $(wc -l <<<"$declared") rdp_* functions in rdmaplane.h"
# Defined dynamic symbols, as NAME@@VERSION (nm -D shows the version).
exported="$(nm -D --defined-only --with-symbol-versions "$installed" | awk '{print $3}')"
for f in $declared; do
  grep -qx "$f@@RDMAPLANE_1.0" <<<"$exported" || fail "$f is not exported as $f@@RDMAPLANE_1.0"
done
while read -r sym; do
  case "$sym" in
    rdp_*@@RDMAPLANE_1.0 | RDMAPLANE_1.0) ;; # and the version node itself
    # Out-of-line members of std::string that C++20 instantiates in every
    # object: the system's Abseil libraries reference them, and GNU ld keeps
    # a definition visible to those references whatever the version script
    # says. They are the standard library's code, in no version node.
    _ZNSt7__cxx1112basic_string*) ;;
    *) fail "librdmaplane.so.1 exports $sym" ;;
  esac
done <<<"$exported"
echo "exports: $(grep -c '^rdp_' <<<"$exported") rdp_* functions, RDMAPLANE_1.0"

# --- 3. build the example out of tree ---------------------------------------
mkdir "$tmp/app"
cp "$example_c" "$tmp/app/app.c"
flags="$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs rdmaplane)" ||
  fail "pkg-config does not find rdmaplane"
# shellcheck disable=SC2086 # pkg-config's output is a list of words
(cd "$tmp/app" && cc -std=c11 -Wall -Wextra -Werror -o app app.c $flags) ||
  fail "the example does not build with: cc -std=c11 app.c $flags"
ldd "$tmp/app/app" | grep -q "librdmaplane.so.1 => $installed" ||
  fail "the example does not load the installed library: $(ldd "$tmp/app/app" | grep rdmaplane)"

# --- 4. run it against the installed daemon ---------------------------------
"$example_test" "$prefix/sbin/rdmaplaned" "$tmp/app/app" "$tmp/app/app.c"
echo "out_of_tree_test: ok"
