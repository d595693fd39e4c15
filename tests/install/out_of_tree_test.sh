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
#   4. example_test.sh runs it against the installed daemon ("example: ok");
#   5. the verbs front end: PREFIX/bin/rdmaplane-run is there and runs
#      (--help); the installed librdmaplane-verbs.so exports libibverbs'
#      entry points (ibv_*, _ibv_*) and libc's shmdt, access, stat, and
#      open, fstat, write, close and socket, nothing of its insides; and,
#      when
#      ibverbs-utils is installed, `rdmaplane-run ibv_devinfo -v` shows the
#      installed daemon as rdmaplane0;
#   6. the manual pages and the guides are installed (PREFIX/share/man,
#      compressed; PREFIX/share/doc/rdmaplane), and, where man-db is,
#      `man 3 rdp_open` finds rdmaplane.h(3) and renders it.
#
#   out_of_tree_test.sh INSTALL_SH RDMAPLANED RDMAPLANECTL LIBRDMAPLANE EXAMPLE_C EXAMPLE_TEST_SH LIBRDMAPLANE_VERBS
set -euo pipefail

install_sh="$1"
daemon="$2"
ctl="$3"
lib="$4"
example_c="$5"
example_test="$6"
verbs_lib="$7"
tmp="$(mktemp -d "${TEST_TMPDIR:-/tmp}/oot.XXXXXX")"
daemon_pid=""
sock="/tmp/rdp-oot-$$.sock" # TEST_TMPDIR can exceed a socket path's 108 bytes
cleanup() {
  if [[ -n $daemon_pid ]]; then
    kill -KILL "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
  fi
  rm -f "$sock"
  rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

for tool in cc pkg-config nm; do
  command -v "$tool" >/dev/null || fail "$tool not found (deploy/setup.sh installs it)"
done

# --- 1. install -------------------------------------------------------------
mkdir "$tmp/built"
cp "$daemon" "$ctl" "$lib" "$verbs_lib" "$tmp/built/"
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
# ldd's whole output first: `ldd | grep -q` under pipefail fails whenever
# grep, having matched, exits before ldd has written everything (SIGPIPE).
loaded="$(ldd "$tmp/app/app")" || fail "ldd $tmp/app/app failed"
grep -qF "librdmaplane.so.1 => $installed " <<<"$loaded" ||
  fail "the example does not load the installed library: $(grep rdmaplane <<<"$loaded")"

# --- 4. run it against the installed daemon ---------------------------------
"$example_test" "$prefix/sbin/rdmaplaned" "$tmp/app/app" "$tmp/app/app.c"

# --- 5. the verbs front end -------------------------------------------------
run="$prefix/bin/rdmaplane-run"
verbs="$prefix/lib/librdmaplane-verbs.so"
[[ -f $run && -x $run ]] || fail "install.sh left out $run, or it is not executable"
[[ -f $verbs ]] || fail "install.sh left out $verbs"
"$run" --help >"$tmp/run-help.txt" 2>&1 || fail "rdmaplane-run --help failed: $(cat "$tmp/run-help.txt")"
grep -q 'rdmaplane-run \[--socket=PATH\] COMMAND' "$tmp/run-help.txt" ||
  fail "rdmaplane-run --help shows no usage: $(cat "$tmp/run-help.txt")"
# Under libibverbs' own versions: an application's versioned references
# (ibv_reg_mr@IBVERBS_1.1) bind to them ahead of libibverbs
# (//tests/verbs:exports_test compares every symbol).
verbs_exported="$(nm -D --defined-only "$verbs" | awk '$2 != "A" { print $3 }')"
for f in ibv_open_device@@IBVERBS_1.1 ibv_reg_mr_iova2@@IBVERBS_1.8 \
  _ibv_query_gid_ex@@IBVERBS_1.11 ibv_get_device_list@IBVERBS_1.0; do
  grep -qx "$f" <<<"$verbs_exported" || fail "librdmaplane-verbs.so does not export $f"
done
# Nothing of its own: libibverbs' names only (its functions, its helpers
# and its providers' interface), and the libc functions it stands in for:
# shmdt, access and stat (api/verbs/shared_segments.cc,
# api/verbs/device_files.cc), and open, fstat, write, close and socket for
# the rdma_cm device (api/verbs/rdma_cm.cc).
while read -r sym; do
  case "$sym" in
    ibv_*@*IBVERBS_* | _ibv_*@*IBVERBS_* | *_ibv_rate@*IBVERBS_*) ;;
    verbs_*@*IBVERBS_PRIVATE_* | _verbs_*@*IBVERBS_PRIVATE_*) ;;
    __verbs_log@*IBVERBS_PRIVATE_* | execute_ioctl@*IBVERBS_PRIVATE_*) ;;
    __ioctl_final_num_attrs@*IBVERBS_PRIVATE_*) ;;
    shmdt@@GLIBC_2.2.5 | access@@GLIBC_2.2.5 | stat@@GLIBC_2.33) ;;
    open@@GLIBC_2.2.5 | write@@GLIBC_2.2.5 | close@@GLIBC_2.2.5) ;;
    socket@@GLIBC_2.2.5 | fstat@@GLIBC_2.33) ;;
    _ZNSt7__cxx1112basic_string*) ;; # as for librdmaplane.so.1 above
    *) fail "librdmaplane-verbs.so exports $sym" ;;
  esac
done <<<"$verbs_exported"
echo "verbs exports: $(grep -c '^_\{0,1\}ibv_' <<<"$verbs_exported") ibv_* and _ibv_* symbols, each under a libibverbs version"

# The installed wrapper, library and daemon together, as an application
# sees them. The daemon has no data port: its port is its link to itself,
# active, GID ::ffff:127.0.0.1.
if command -v ibv_devinfo >/dev/null; then
  rm -f "$sock"
  "$prefix/sbin/rdmaplaned" --socket="$sock" 2>"$tmp/rdmaplaned.log" &
  daemon_pid=$!
  for ((i = 0; i < 50; i++)); do # 5 s
    [[ -S $sock ]] && break
    kill -0 "$daemon_pid" 2>/dev/null || fail "rdmaplaned exited during start-up: $(cat "$tmp/rdmaplaned.log")"
    sleep 0.1
  done
  [[ -S $sock ]] || fail "rdmaplaned made no socket within 5 s"
  RDMAPLANE_VERBS_DEBUG=1 "$run" --socket="$sock" ibv_devinfo -v >"$tmp/devinfo.txt" 2>&1 ||
    fail "rdmaplane-run ibv_devinfo -v failed: $(cat "$tmp/devinfo.txt")"
  for want in $'^hca_id:\trdmaplane0$' 'link_layer:[[:space:]]+Ethernet$' \
    'state:[[:space:]]+PORT_ACTIVE \(4\)$' \
    'GID\[  0\]:[[:space:]]+::ffff:127\.0\.0\.1, RoCE v2$'; do
    grep -Eq -- "$want" "$tmp/devinfo.txt" ||
      fail "rdmaplane-run ibv_devinfo -v has no line matching /$want/: $(cat "$tmp/devinfo.txt")"
  done
  kill -TERM "$daemon_pid"
  status=0
  wait "$daemon_pid" || status=$?
  daemon_pid=""
  [[ $status -eq 0 ]] || fail "rdmaplaned exited with status $status on SIGTERM: $(cat "$tmp/rdmaplaned.log")"
  echo "rdmaplane-run ibv_devinfo -v: rdmaplane0 served by the installed daemon"
else
  echo "note: ibv_devinfo (Debian package ibverbs-utils) is not installed: the installed verbs front end was not run"
fi
# --- 6. the manual pages and the guides --------------------------------------
mandir="$prefix/share/man"
for f in man8/rdmaplaned.8.gz man8/rdmaplanectl.8.gz man1/rdmaplane-run.1.gz \
  man7/rdmaplane.7.gz man3/rdmaplane.h.3.gz man3/rdp_open.3.gz; do
  [[ -f $mandir/$f ]] || fail "install.sh left out $mandir/$f"
done
for f in README.md docs/api.md docs/operations.md docs/verbs.md; do
  [[ -f $prefix/share/doc/rdmaplane/$f ]] || fail "install.sh left out $prefix/share/doc/rdmaplane/$f"
done
if command -v man >/dev/null; then
  page="$(man -M "$mandir" -w 3 rdp_open)" || fail "man -M $mandir -w 3 rdp_open failed"
  [[ $page == "$mandir/man3/rdmaplane.h.3.gz" ]] || fail "man 3 rdp_open finds $page, not rdmaplane.h.3.gz"
  MANWIDTH=80 man -M "$mandir" 3 rdp_open >"$tmp/rdp_open.txt" 2>&1 || fail "man 3 rdp_open: $(cat "$tmp/rdp_open.txt")"
  grep -q 'int rdp_open(const char\* socket_path, rdp_client\*\* client);' "$tmp/rdp_open.txt" \
    || fail "man 3 rdp_open shows no prototype of rdp_open: $(head -c 600 "$tmp/rdp_open.txt")"
  echo "man 3 rdp_open: rdmaplane.h(3), from $mandir"
else
  echo "note: man (Debian package man-db) is not installed: the installed pages were not read with man"
fi
echo "out_of_tree_test: ok"
