#!/usr/bin/env bash
# Checks the deployment files without installing anything on this machine:
#
# - the systemd unit: installed by install.sh into a scratch folder with fake
#   binaries, then `systemd-analyze verify` (when it exists; otherwise the
#   required keys, by grep) and the settings it must and must not have;
# - install.sh: --dry-run changes nothing, a real run into a scratch prefix
#   installs every file with the right mode (the manual pages compressed
#   with gzip -9n, the documentation), keeps an existing config, and bad
#   options fail; into a DESTDIR with --prefix=/usr the files land where
#   Debian has them (the libraries in /usr/lib/<multiarch triplet>, pages
#   in /usr/share/man, documentation in /usr/share/doc/rdmaplane), and
#   --libdir, --mandir and --docdir move them;
# - rdmaplane-run: the installed copy preloads the installed
#   librdmaplane-verbs.so wherever --libdir put it (also through a link to
#   it, from a staged tree, and, copied elsewhere, by the absolute path
#   written in), keeps LD_PRELOAD, sets RDMAPLANE_SOCKET from --socket and
#   warns about a missing socket; a copy in a source tree finds bazel-bin's
#   library; its usage errors;
# - reserve-hugepages.sh: raises a count, never lowers it, and exits 0 when
#   the file cannot be read or written (sysfs path overridden);
# - the container entry point: --port and --ip from the environment;
# - the Kubernetes manifest: parsed with PyYAML when Debian's python3-yaml is
#   there (else a structural check), and the settings it must have;
# - the flagfiles (the two examples and the ConfigMap's): Abseil syntax,
#   every flag name known to rdmaplaned (--helpfull; a format it cannot read
#   fails), every flag it has documented in docs/operations.md, and all
#   three accepted by --check_config;
# - bad flag values: exit status 2 and a one-line reason (what the systemd
#   unit's RestartPreventExitStatus=2 relies on); what Abseil's parser
#   refuses: exit status 1.
#
#   deploy_files_test.sh INSTALL_SH OPERATIONS_MD RDMAPLANED
#
# Prints one line per check and "deploy_files_test: ok" at the end; exits 1
# when any check failed.

# pass() always succeeds, so "CONDITION && pass ... || fail ..." is an if/else.
# shellcheck disable=SC2015
set -uo pipefail

install_sh="$1"
operations_md="$2"
daemon="$3"
deploy="$(dirname "$install_sh")"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
PYTHON=/usr/bin/python3

failures=0
fail() {
  printf 'FAIL: %s\n' "$*"
  failures=$((failures + 1))
}
pass() { printf 'ok: %s\n' "$*"; }
note() { printf 'note: %s\n' "$*"; }
# expect_grep FILE REGEX WHAT: FILE has a line matching REGEX.
expect_grep() {
  if grep -Eq -- "$2" "$1"; then pass "$3"; else fail "$3 ($(basename "$1") has no line matching /$2/)"; fi
}
expect_no_grep() {
  if grep -Eq -- "$2" "$1"; then fail "$3 ($(basename "$1"): $(grep -Em1 -- "$2" "$1"))"; else pass "$3"; fi
}

unit="$deploy/rdmaplaned.service"
conf="$deploy/rdmaplaned.conf"
memif_conf="$deploy/rdmaplaned-memif.conf"
hugepages="$deploy/reserve-hugepages.sh"
entrypoint="$deploy/rdmaplaned-container.sh"
run_sh="$deploy/rdmaplane-run"
manifest="$deploy/kubernetes/rdmaplaned-daemonset.yaml"
containerfile="$deploy/Containerfile"
for f in "$unit" "$conf" "$memif_conf" "$hugepages" "$entrypoint" "$manifest" \
  "$containerfile" "$operations_md" "$run_sh"; do
  [[ -f $f ]] || fail "missing $f"
done

# Fake binaries for installs: they only print their arguments.
fakebin="$tmp/fakebin"
mkdir -p "$fakebin"
for b in rdmaplaned rdmaplanectl; do
  printf '#!/bin/sh\necho %s "$@"\n' "$b" >"$fakebin/$b"
  chmod 0755 "$fakebin/$b"
done
printf 'not a real library\n' >"$fakebin/librdmaplane.so.1"
printf 'not a real library either\n' >"$fakebin/librdmaplane-verbs.so"

# --- install.sh -----------------------------------------------------------------
echo "== install.sh"
etc_existed=false
[[ -e /etc/rdmaplane ]] && etc_existed=true
dry="$tmp/dry"
if out="$("$install_sh" --dry-run --prefix="$dry" 2>&1)"; then
  pass "install.sh --dry-run --prefix exits 0"
else
  fail "install.sh --dry-run --prefix failed: $out"
fi
[[ ! -e $dry ]] && pass "--dry-run created nothing under the prefix" \
  || fail "--dry-run created $(find "$dry" | head -n 3 | tr '\n' ' ')"
if ! $etc_existed && [[ -e /etc/rdmaplane ]]; then
  fail "--dry-run created /etc/rdmaplane"
fi
grep -q 'would run: bazel build -c opt //control:rdmaplaned //control:rdmaplanectl //api:librdmaplane.so.1 //api/verbs:librdmaplane-verbs.so$' <<<"$out" \
  && pass "--dry-run shows the Bazel build" || fail "--dry-run does not show the Bazel build: $out"
grep -q "would run: install -m 0755 .*/rdmaplaned $dry/sbin/rdmaplaned" <<<"$out" \
  && pass "--dry-run shows rdmaplaned going to PREFIX/sbin" || fail "--dry-run: no rdmaplaned install to $dry/sbin"
grep -q "would run: install -m 0755 .*/deploy/rdmaplane-run $dry/bin/rdmaplane-run\$" <<<"$out" \
  && pass "--dry-run shows rdmaplane-run going to PREFIX/bin" || fail "--dry-run: no rdmaplane-run install to $dry/bin"
grep -q "would run: install -m 0755 .*/bazel-bin/api/verbs/librdmaplane-verbs.so $dry/lib/librdmaplane-verbs.so\$" <<<"$out" \
  && pass "--dry-run shows librdmaplane-verbs.so going to PREFIX/lib" || fail "--dry-run: no librdmaplane-verbs.so install to $dry/lib"
grep -qF "installed_libdir=\\\"$dry/lib\\\"# $dry/bin/rdmaplane-run" <<<"$out" \
  && pass "--dry-run shows PREFIX/lib written into rdmaplane-run" || fail "--dry-run: no libdir written into rdmaplane-run: $out"
grep -q "would write $dry/share/man/man8/rdmaplaned.8.gz with gzip -9n of .*/man/man8/rdmaplaned.8\$" <<<"$out" \
  && pass "--dry-run shows rdmaplaned.8 going to PREFIX/share/man/man8, compressed" || fail "--dry-run: no rdmaplaned.8.gz in $dry/share/man/man8"
grep -q "would run: install -m 0644 .*/docs/operations.md $dry/share/doc/rdmaplane/docs/operations.md\$" <<<"$out" \
  && pass "--dry-run shows docs/operations.md going to PREFIX/share/doc/rdmaplane/docs" || fail "--dry-run: no docs/operations.md install"
# The environment's DESTDIR stages as --destdir does.
if out="$(DESTDIR="$tmp/envstage" "$install_sh" --dry-run --prefix=/usr 2>&1)" \
  && grep -q "would run: install -m 0755 .*/rdmaplaned $tmp/envstage/usr/sbin/rdmaplaned\$" <<<"$out"; then
  pass "DESTDIR in the environment stages the install"
else
  fail "DESTDIR=$tmp/envstage install.sh --dry-run: $out"
fi
[[ ! -e $tmp/envstage ]] || fail "--dry-run with DESTDIR created $tmp/envstage"

root="$tmp/root"
args=(--prefix="$root/usr" --sysconfdir="$root/etc" --binaries="$fakebin")
if out="$("$install_sh" "${args[@]}" 2>&1)"; then
  pass "install.sh into a scratch prefix exits 0"
else
  fail "install.sh into a scratch prefix failed: $out"
fi
check_mode() { # FILE MODE
  local got
  got="$(stat -c '%a' "$1" 2>/dev/null)" || {
    fail "not installed: $1"
    return
  }
  [[ $got == "$2" ]] && pass "installed $(basename "$1") mode $2" || fail "$1 has mode $got, not $2"
}
check_mode "$root/usr/sbin/rdmaplaned" 755
check_mode "$root/usr/bin/rdmaplanectl" 755
check_mode "$root/usr/libexec/rdmaplane/reserve-hugepages.sh" 755
check_mode "$root/etc/systemd/system/rdmaplaned.service" 644
check_mode "$root/etc/rdmaplane/rdmaplaned.conf" 644
check_mode "$root/usr/lib/librdmaplane.so.1" 755
check_mode "$root/usr/lib/librdmaplane-verbs.so" 755
check_mode "$root/usr/bin/rdmaplane-run" 755
cmp -s "$fakebin/librdmaplane-verbs.so" "$root/usr/lib/librdmaplane-verbs.so" \
  && pass "librdmaplane-verbs.so is the one --binaries named" || fail "the installed librdmaplane-verbs.so is not --binaries' copy"
check_mode "$root/usr/include/rdmaplane.h" 644
check_mode "$root/usr/lib/pkgconfig/rdmaplane.pc" 644
[[ $(readlink "$root/usr/lib/librdmaplane.so") == librdmaplane.so.1 ]] \
  && pass "librdmaplane.so links to librdmaplane.so.1" || fail "no librdmaplane.so -> librdmaplane.so.1 link"
expect_grep "$root/usr/lib/pkgconfig/rdmaplane.pc" "^prefix=$root/usr\$" "rdmaplane.pc names the prefix"
expect_grep "$root/usr/lib/pkgconfig/rdmaplane.pc" '^libdir=\$\{prefix\}/lib$' "rdmaplane.pc names the libdir"
expect_no_grep "$root/usr/lib/pkgconfig/rdmaplane.pc" '@' "rdmaplane.pc has nothing left to fill in"
# The manual pages: every page of man/, gzip -9n, mode 0644.
man_src="$deploy/../man"
n=0
for page in "$man_src"/man[1378]/*.[1378]; do
  section="${page##*.}"
  dst="$root/usr/share/man/man$section/$(basename "$page").gz"
  if [[ ! -f $dst ]]; then
    fail "not installed: $dst"
  elif ! gzip -dc "$dst" | cmp -s - "$page"; then
    fail "$dst is not $page compressed"
  elif ! cmp -s "$dst" <(gzip -9n -c "$page"); then
    fail "$dst is not what gzip -9n makes of $page"
  elif [[ $(stat -c '%a' "$dst") != 644 ]]; then
    fail "$dst has mode $(stat -c '%a' "$dst"), not 644"
  else
    n=$((n + 1))
  fi
done
[[ $n -ge 25 ]] && pass "the $n manual pages are installed in PREFIX/share/man, gzip -9n, mode 644" \
  || fail "only $n manual pages were installed"
# The documentation, as it is.
for doc in README.md docs/operations.md docs/api.md docs/verbs.md; do
  cmp -s "$deploy/../$doc" "$root/usr/share/doc/rdmaplane/$doc" \
    && pass "$doc is installed in PREFIX/share/doc/rdmaplane" || fail "$doc is not in $root/usr/share/doc/rdmaplane"
done
check_mode "$root/usr/share/doc/rdmaplane/docs/operations.md" 644
installed_unit="$root/etc/systemd/system/rdmaplaned.service"
expect_grep "$installed_unit" "^ExecStart=$root/usr/sbin/rdmaplaned --flagfile=$root/etc/rdmaplane/rdmaplaned.conf\$" \
  "the installed unit names the installed daemon and config"
expect_grep "$installed_unit" "^ExecStartPre=-\\+$root/usr/libexec/rdmaplane/reserve-hugepages.sh " \
  "the installed unit names the installed hugepage script"
expect_no_grep "$installed_unit" '^Exec.*[-+= ]/(usr/local|etc/rdmaplane)/' "no default path is left in the relocated unit"

echo "--local-change" >>"$root/etc/rdmaplane/rdmaplaned.conf"
if "$install_sh" "${args[@]}" >/dev/null 2>&1 \
  && grep -q -- '--local-change' "$root/etc/rdmaplane/rdmaplaned.conf" \
  && cmp -s "$conf" "$root/etc/rdmaplane/rdmaplaned.conf.new"; then
  pass "a second install keeps the edited config and leaves the example as .new"
else
  fail "a second install overwrote the config or left no .new"
fi

for bad in --bogus "--prefix=relative/dir" "--prefix=/a b" "--prefix" "--libdir=lib" \
  "--mandir=/" "--docdir=/a#b" "--libdir"; do
  if "$install_sh" --dry-run "$bad" >/dev/null 2>&1; then
    fail "install.sh accepted $bad"
  else
    pass "install.sh refuses $bad"
  fi
done
if "$install_sh" --prefix="$tmp/nobin" --sysconfdir="$tmp/nobin/etc" --binaries="$tmp/missing" >/dev/null 2>&1; then
  fail "install.sh succeeded without binaries"
else
  pass "install.sh fails when the binaries are missing"
fi
# Bazel's layout: --binaries=bazel-bin/control, the libraries in ../api and
# ../api/verbs.
bazel_bin="$tmp/bazel-bin"
mkdir -p "$bazel_bin/control" "$bazel_bin/api/verbs"
cp "$fakebin/rdmaplaned" "$fakebin/rdmaplanectl" "$bazel_bin/control/"
cp "$fakebin/librdmaplane.so.1" "$bazel_bin/api/"
cp "$fakebin/librdmaplane-verbs.so" "$bazel_bin/api/verbs/"
if out="$("$install_sh" --prefix="$tmp/layout/usr" --sysconfdir="$tmp/layout/etc" \
  --binaries="$bazel_bin/control" 2>&1)" && [[ -f $tmp/layout/usr/lib/librdmaplane-verbs.so ]]; then
  pass "--binaries=bazel-bin/control finds ../api/verbs/librdmaplane-verbs.so"
else
  fail "--binaries in Bazel's layout: $out"
fi
rm "$bazel_bin/api/verbs/librdmaplane-verbs.so"
if out="$("$install_sh" --prefix="$tmp/layout2/usr" --sysconfdir="$tmp/layout2/etc" \
  --binaries="$bazel_bin/control" 2>&1)"; then
  fail "install.sh succeeded without librdmaplane-verbs.so"
elif grep -q 'librdmaplane-verbs.so is missing' <<<"$out"; then
  pass "install.sh names a missing librdmaplane-verbs.so"
else
  fail "install.sh without librdmaplane-verbs.so said: $out"
fi

# --- install.sh as Debian lays files out ------------------------------------------
echo "== install.sh into a DESTDIR with --prefix=/usr"
# The multiarch triplet install.sh should find, as it finds it.
triplet="$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch 2>/dev/null || true)"
if [[ $(uname -m) == x86_64 && -d /usr/lib/x86_64-linux-gnu ]]; then
  [[ $triplet == x86_64-linux-gnu ]] || fail "this x86_64 Debian machine's multiarch triplet reads as '$triplet'"
fi
usrlib="/usr/lib${triplet:+/$triplet}"
stage="$tmp/stage"
if out="$(DESTDIR="$stage" "$install_sh" --prefix=/usr --binaries="$fakebin" 2>&1)"; then
  pass "DESTDIR=... install.sh --prefix=/usr exits 0"
else
  fail "DESTDIR=... install.sh --prefix=/usr failed: $out"
fi
for f in "$usrlib/librdmaplane.so.1" "$usrlib/librdmaplane-verbs.so" "$usrlib/pkgconfig/rdmaplane.pc" \
  /usr/sbin/rdmaplaned /usr/bin/rdmaplanectl /usr/bin/rdmaplane-run /usr/include/rdmaplane.h \
  /usr/share/man/man8/rdmaplaned.8.gz /usr/share/man/man8/rdmaplanectl.8.gz \
  /usr/share/man/man1/rdmaplane-run.1.gz /usr/share/man/man7/rdmaplane.7.gz \
  /usr/share/man/man3/rdmaplane.h.3.gz /usr/share/man/man3/rdp_open.3.gz \
  /usr/share/doc/rdmaplane/README.md /usr/share/doc/rdmaplane/docs/operations.md \
  /etc/systemd/system/rdmaplaned.service /etc/rdmaplane/rdmaplaned.conf; do
  [[ -f $stage$f ]] && pass "DESTDIR$f" || fail "not installed: DESTDIR$f"
done
[[ ! -e $stage/usr/lib/librdmaplane.so.1 || $usrlib == /usr/lib ]] \
  || fail "librdmaplane.so.1 went to /usr/lib, not $usrlib"
[[ $(gzip -dc "$stage/usr/share/man/man3/rdp_open.3.gz" 2>/dev/null) == ".so man3/rdmaplane.h.3" ]] \
  && pass "man3/rdp_open.3.gz links to rdmaplane.h.3" || fail "man3/rdp_open.3.gz is not the link page"
if command -v man >/dev/null 2>&1; then
  page="$(man -M "$stage/usr/share/man" -w 3 rdp_open 2>&1)"
  [[ $page == "$stage/usr/share/man/man3/rdmaplane.h.3.gz" ]] \
    && pass "man 3 rdp_open finds rdmaplane.h.3.gz" || fail "man -M ... -w 3 rdp_open: $page"
fi
pc="$stage$usrlib/pkgconfig/rdmaplane.pc"
expect_grep "$pc" '^prefix=/usr$' "rdmaplane.pc names /usr, not the DESTDIR"
expect_grep "$pc" "^libdir=\\\$\{prefix\}/lib${triplet:+/$triplet}\$" "rdmaplane.pc names the multiarch libdir"
staged_unit="$stage/etc/systemd/system/rdmaplaned.service"
expect_grep "$staged_unit" '^ExecStart=/usr/sbin/rdmaplaned --flagfile=/etc/rdmaplane/rdmaplaned\.conf$' \
  "the staged unit names /usr/sbin/rdmaplaned and /etc"
staged_run="$stage/usr/bin/rdmaplane-run"
expect_grep "$staged_run" "^installed_libdir=\"$usrlib\"\$" "rdmaplane-run names $usrlib"
expect_grep "$staged_run" "^installed_libdir_relative=\"\.\./lib${triplet:+/$triplet}\"\$" \
  "rdmaplane-run names $usrlib relative to /usr/bin"
out="$(LD_PRELOAD='' "$staged_run" --socket="$tmp/none.sock" printenv LD_PRELOAD 2>/dev/null)"
[[ $out == "$stage$usrlib/librdmaplane-verbs.so" ]] \
  && pass "the staged rdmaplane-run preloads the staged $usrlib/librdmaplane-verbs.so" \
  || fail "the staged rdmaplane-run preloads: $out"
# --libdir, --mandir and --docdir of one's own; rdmaplane-run copied away
# from its tree falls back on the absolute path written in.
own="$tmp/own"
if out="$("$install_sh" --prefix="$own/usr" --sysconfdir="$own/etc" --libdir="$own/lib64/" \
  --mandir="$own/man" --docdir="$own/doc" --binaries="$fakebin" 2>&1)"; then
  pass "install.sh --libdir --mandir --docdir exits 0"
else
  fail "install.sh --libdir --mandir --docdir failed: $out"
fi
for f in lib64/librdmaplane.so.1 lib64/librdmaplane-verbs.so lib64/pkgconfig/rdmaplane.pc \
  man/man8/rdmaplaned.8.gz man/man3/rdp_write.3.gz doc/README.md doc/docs/verbs.md; do
  [[ -f $own/$f ]] && pass "--libdir, --mandir, --docdir: $f" || fail "not installed: $own/$f"
done
[[ ! -e $own/usr/lib && ! -e $own/usr/share ]] || fail "--libdir, --mandir or --docdir left files under PREFIX/lib or PREFIX/share"
expect_grep "$own/lib64/pkgconfig/rdmaplane.pc" "^libdir=$own/lib64\$" "rdmaplane.pc names a libdir outside the prefix as it is"
mkdir -p "$tmp/away"
cp "$own/usr/bin/rdmaplane-run" "$tmp/away/rdmaplane-run"
out="$(LD_PRELOAD='' "$tmp/away/rdmaplane-run" --socket="$tmp/none.sock" printenv LD_PRELOAD 2>/dev/null)"
[[ $out == "$own/lib64/librdmaplane-verbs.so" ]] \
  && pass "rdmaplane-run copied elsewhere preloads --libdir's library by its absolute path" \
  || fail "rdmaplane-run copied elsewhere preloads: $out"
# --pkglibdir: the verbs front end alone in a folder of its own (the Debian
# package's LIBDIR/rdmaplane), which rdmaplane-run preloads from.
pkg="$tmp/pkglib"
if out="$("$install_sh" --prefix="$pkg/usr" --sysconfdir="$pkg/etc" --libdir="$pkg/usr/lib/x" \
  --pkglibdir="$pkg/usr/lib/x/rdmaplane" --binaries="$fakebin" 2>&1)"; then
  pass "install.sh --pkglibdir exits 0"
else
  fail "install.sh --pkglibdir failed: $out"
fi
[[ -f $pkg/usr/lib/x/rdmaplane/librdmaplane-verbs.so && ! -e $pkg/usr/lib/x/librdmaplane-verbs.so \
  && -f $pkg/usr/lib/x/librdmaplane.so.1 ]] \
  && pass "--pkglibdir takes the verbs front end, --libdir keeps the client library" \
  || fail "--pkglibdir: $(cd "$pkg" && find . -name 'librdmaplane*' | tr '\n' ' ')"
out="$(LD_PRELOAD='' "$pkg/usr/bin/rdmaplane-run" --socket="$tmp/none.sock" printenv LD_PRELOAD 2>/dev/null)"
[[ $out == "$pkg/usr/lib/x/rdmaplane/librdmaplane-verbs.so" ]] \
  && pass "rdmaplane-run preloads the front end from --pkglibdir" \
  || fail "rdmaplane-run with --pkglibdir preloads: $out"

# --- rdmaplane-run --------------------------------------------------------------
echo "== rdmaplane-run"
installed_run="$root/usr/bin/rdmaplane-run"
installed_verbs="$root/usr/lib/librdmaplane-verbs.so"
# run_wrapper SCRIPT ARGS...: stdout and the exit status; stderr in
# $tmp/run.err. ld.so complains on stderr that the fake library is not one
# and runs the command all the same.
run_wrapper() { "$@" 2>"$tmp/run.err"; }
out="$(run_wrapper "$installed_run" --help)" && grep -q 'rdmaplane-run \[--socket=PATH\] COMMAND' <<<"$out" \
  && pass "rdmaplane-run --help" || fail "rdmaplane-run --help: $out $(<"$tmp/run.err")"
out="$(LD_PRELOAD='' run_wrapper "$installed_run" --socket="$tmp/none.sock" printenv LD_PRELOAD RDMAPLANE_SOCKET)"
[[ $out == "$installed_verbs"$'\n'"$tmp/none.sock" ]] \
  && pass "rdmaplane-run preloads PREFIX/lib/librdmaplane-verbs.so and sets RDMAPLANE_SOCKET" \
  || fail "rdmaplane-run --socket=... printenv gave: $out"
grep -q "warning: no daemon socket at $tmp/none.sock" "$tmp/run.err" \
  && pass "rdmaplane-run warns about a missing socket and runs the command" \
  || fail "rdmaplane-run gave no warning for a missing socket: $(<"$tmp/run.err")"
out="$(LD_PRELOAD=/nonexistent/other.so RDMAPLANE_SOCKET="$tmp/env.sock" run_wrapper "$installed_run" printenv LD_PRELOAD RDMAPLANE_SOCKET)"
[[ $out == "$installed_verbs:/nonexistent/other.so"$'\n'"$tmp/env.sock" ]] \
  && pass "rdmaplane-run keeps LD_PRELOAD after its library and RDMAPLANE_SOCKET as it is" \
  || fail "rdmaplane-run with LD_PRELOAD and RDMAPLANE_SOCKET set gave: $out"
ln -sfn "$installed_run" "$tmp/linked-run"
out="$(LD_PRELOAD='' run_wrapper "$tmp/linked-run" --socket="$tmp/none.sock" printenv LD_PRELOAD)"
[[ $out == "$installed_verbs" ]] && pass "rdmaplane-run through a link finds the library beside its real location" \
  || fail "rdmaplane-run through a link preloads: $out"
# A copy in a source tree uses the tree's bazel-bin.
mkdir -p "$tmp/tree/deploy" "$tmp/tree/bazel-bin/api/verbs"
cp "$run_sh" "$tmp/tree/deploy/rdmaplane-run"
cp "$fakebin/librdmaplane-verbs.so" "$tmp/tree/bazel-bin/api/verbs/"
out="$(LD_PRELOAD='' run_wrapper "$tmp/tree/deploy/rdmaplane-run" --socket="$tmp/none.sock" printenv LD_PRELOAD)"
[[ $out == "$tmp/tree/bazel-bin/api/verbs/librdmaplane-verbs.so" ]] \
  && pass "rdmaplane-run in a source tree preloads bazel-bin/api/verbs/librdmaplane-verbs.so" \
  || fail "rdmaplane-run in a source tree preloads: $out"
out="$(LD_PRELOAD='' RDMAPLANE_VERBS_LIBRARY="$fakebin/librdmaplane-verbs.so" \
  run_wrapper "$installed_run" --socket="$tmp/none.sock" printenv LD_PRELOAD)"
[[ $out == "$fakebin/librdmaplane-verbs.so" ]] && pass "RDMAPLANE_VERBS_LIBRARY comes first" \
  || fail "rdmaplane-run with RDMAPLANE_VERBS_LIBRARY preloads: $out"
rm "$tmp/tree/bazel-bin/api/verbs/librdmaplane-verbs.so"
# expect_exit STATUS MESSAGE ARGS...: the wrapper exits STATUS and its
# stderr has MESSAGE.
expect_exit() {
  local want="$1" message="$2" rc=0
  shift 2
  run_wrapper "$@" >/dev/null || rc=$?
  [[ $rc -eq $want ]] && grep -qF -- "$message" "$tmp/run.err" \
    && pass "rdmaplane-run ${*:2}: exit $want, '$message'" \
    || fail "rdmaplane-run ${*:2}: exit $rc ($want expected), said $(<"$tmp/run.err")"
}
expect_exit 2 "error: no command to run" "$installed_run"
expect_exit 2 "error: no command to run" "$installed_run" --socket="$tmp/none.sock"
expect_exit 2 "error: unknown option '--bogus'" "$installed_run" --bogus true
expect_exit 2 "error: --socket needs a path" "$installed_run" --socket= true
expect_exit 127 "error: command not found: no-such-command-here" "$installed_run" --socket="$tmp/none.sock" no-such-command-here
expect_exit 1 "error: librdmaplane-verbs.so not found" "$tmp/tree/deploy/rdmaplane-run" true
RDMAPLANE_VERBS_LIBRARY="$tmp/missing.so" expect_exit 1 "RDMAPLANE_VERBS_LIBRARY names $tmp/missing.so" "$installed_run" true

# --- The systemd unit -------------------------------------------------------------
echo "== rdmaplaned.service"
expect_grep "$unit" '^Type=simple$' "Type=simple"
expect_grep "$unit" '^ExecStartPre=-\+/usr/local/libexec/rdmaplane/reserve-hugepages\.sh \$\{RDMAPLANE_RESERVE_HUGEPAGES\}$' \
  "hugepages reserved before the start, never failing it"
expect_grep "$unit" '^Environment=RDMAPLANE_RESERVE_HUGEPAGES=[0-9]+$' "the hugepage count has a default"
expect_grep "$unit" '^ExecStart=/usr/local/sbin/rdmaplaned --flagfile=/etc/rdmaplane/rdmaplaned\.conf$' "ExecStart with the flagfile"
expect_grep "$unit" '^RuntimeDirectory=rdmaplane$' "RuntimeDirectory=rdmaplane"
expect_grep "$unit" '^RuntimeDirectoryMode=0750$' "RuntimeDirectoryMode=0750"
expect_grep "$unit" '^Group=rdmaplane$' "group rdmaplane owns the runtime directory"
expect_grep "$unit" '^Restart=on-failure$' "Restart=on-failure"
expect_grep "$unit" '^RestartSec=[0-9]+' "RestartSec"
expect_grep "$unit" '^KillSignal=SIGTERM$' "KillSignal=SIGTERM"
expect_grep "$unit" '^TimeoutStopSec=[0-9]+' "TimeoutStopSec"
expect_grep "$unit" '^LimitMEMLOCK=infinity$' "LimitMEMLOCK=infinity"
expect_grep "$unit" '^WantedBy=multi-user\.target$' "WantedBy=multi-user.target"
expect_grep "$unit" '^CapabilityBoundingSet=.*CAP_NET_RAW.*CAP_IPC_LOCK' "a capability bounding set with what DPDK needs"
expect_grep "$unit" '^RestrictAddressFamilies=.*AF_PACKET.*AF_XDP' "af_packet and af_xdp sockets allowed"
for breaks in '^PrivateDevices=yes' '^ProtectKernelTunables=yes' '^SystemCallFilter=' \
  '^PrivateNetwork=yes' '^DevicePolicy=' '^ProtectClock=yes' '^Type=notify' '^MemoryDenyWriteExecute=no'; do
  expect_no_grep "$unit" "$breaks" "no ${breaks#^} (it would break DPDK or is not supported)"
done
if command -v systemd-analyze >/dev/null 2>&1; then
  # The installed copy: every path it names exists, as verify requires.
  : >"$root/etc/rdmaplane/rdmaplaned.conf"
  # Its Documentation= pages too, where install.sh put them (man looks
  # them up; without man-db, verify is told not to).
  man_check=(--man=no)
  if command -v man >/dev/null 2>&1; then man_check=(); fi
  verify_out="$(MANPATH="$root/usr/share/man" systemd-analyze verify "${man_check[@]}" "$installed_unit" 2>&1)"
  verify_rc=$?
  if [[ $verify_rc -eq 0 && -z $verify_out ]]; then
    pass "systemd-analyze verify: no complaint"
  else
    fail "systemd-analyze verify (exit $verify_rc): $verify_out"
  fi
else
  note "systemd-analyze is not installed (Debian package systemd): the unit was checked by grep only"
fi

# --- reserve-hugepages.sh -----------------------------------------------------------
echo "== reserve-hugepages.sh"
sysfs="$tmp/nr_hugepages"
run_hp() { RDMAPLANE_HUGEPAGES_SYSFS="$1" "$hugepages" "${@:2}" 2>&1; }
echo 0 >"$sysfs"
out="$(run_hp "$sysfs" 64)" && [[ $(<"$sysfs") == 64 ]] && grep -q 'reserved 64 pages' <<<"$out" \
  && pass "raises 0 to 64 and says so" || fail "raising 0 to 64: $out; file has $(<"$sysfs")"
out="$(run_hp "$sysfs" 8)" && [[ $(<"$sysfs") == 64 ]] && grep -q 'left as they are' <<<"$out" \
  && pass "never lowers the count" || fail "asking for fewer: $out; file has $(<"$sysfs")"
out="$(run_hp "$tmp/no/such/dir/nr_hugepages" 8)" && grep -q 'cannot read' <<<"$out" \
  && pass "a missing sysfs file: exit 0 with a reason" || fail "a missing sysfs file: $out"
out="$(run_hp "$tmp" 8)" && pass "a folder as the sysfs path: exit 0 ($out)" || fail "a folder as the sysfs path: $out"
# A file the kernel refuses to write even to root, if this machine has one;
# otherwise (not root) a read-only copy.
ro=/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages
if [[ -r $ro ]] && ! { : >>"$ro"; } 2>/dev/null; then
  before="$(<"$ro")"
  if out="$(run_hp "$ro" "$((before + 1))")" && grep -q 'cannot write' <<<"$out"; then
    pass "a read-only sysfs file: exit 0 with a reason"
  else
    fail "a read-only sysfs file: $out"
  fi
elif [[ $EUID -ne 0 ]]; then
  echo 0 >"$tmp/ro_nr"
  chmod 0444 "$tmp/ro_nr"
  out="$(run_hp "$tmp/ro_nr" 8)" && grep -q 'cannot write' <<<"$out" \
    && pass "a read-only file: exit 0 with a reason" || fail "a read-only file: $out"
else
  note "no read-only sysfs file here to try a refused write with"
fi
for bad in "" x -1 1234567890 "1 2"; do
  # Unquoted on purpose: "" is no argument at all, "1 2" two of them.
  # shellcheck disable=SC2086
  if run_hp "$sysfs" $bad >/dev/null; then
    fail "reserve-hugepages.sh accepted '$bad'"
  elif [[ $? -eq 2 ]]; then
    pass "reserve-hugepages.sh '$bad': usage error"
  else
    fail "reserve-hugepages.sh '$bad': exit code other than 2"
  fi
done

# --- Container entry point ------------------------------------------------------------
echo "== rdmaplaned-container.sh"
fakeip="$tmp/fakeip"
mkdir -p "$fakeip"
cat >"$fakeip/ip" <<'EOF'
#!/bin/sh
[ "$6" = eth9 ] || exit 1  # ip -4 -o addr show dev IFACE scope global
echo "3: eth9    inet 198.51.100.9/24 brd 198.51.100.255 scope global eth9\       valid_lft forever preferred_lft forever"
EOF
chmod 0755 "$fakeip/ip"
printf -- '--mtu=1024\n' >"$tmp/container.conf"
entry() { PATH="$fakeip:$PATH" RDMAPLANED="$fakebin/rdmaplaned" RDMAPLANE_CONF="$tmp/container.conf" "$entrypoint" "$@" 2>/dev/null; }
out="$(RDMAPLANE_IFACE=eth9 entry --log_level=debug)"
[[ $out == "rdmaplaned --flagfile=$tmp/container.conf --port=net_af_packet0,iface=eth9 --ip=198.51.100.9 --log_level=debug" ]] \
  && pass "entry point: af_packet port and the interface's address" || fail "entry point gave: $out"
out="$(RDMAPLANE_IFACE=eth9 RDMAPLANE_DRIVER=af_xdp RDMAPLANE_IP=203.0.113.5 entry)"
[[ $out == *"--port=net_af_xdp0,iface=eth9 --ip=203.0.113.5" ]] \
  && pass "entry point: af_xdp and an explicit address" || fail "entry point gave: $out"
for env in "RDMAPLANE_IFACE=" "RDMAPLANE_IFACE=eth8" "RDMAPLANE_IFACE=eth9 RDMAPLANE_DRIVER=pcap" "RDMAPLANE_IFACE=a;b"; do
  # shellcheck disable=SC2086 # $env is a list of assignments
  if env $env PATH="$fakeip:$PATH" RDMAPLANED="$fakebin/rdmaplaned" "$entrypoint" >/dev/null 2>&1; then
    fail "entry point accepted $env"
  else
    pass "entry point refuses $env"
  fi
done

# --- Kubernetes manifest ---------------------------------------------------------------
echo "== rdmaplaned-daemonset.yaml"
if "$PYTHON" -c 'import yaml' 2>/dev/null; then
  if out="$("$PYTHON" - "$manifest" "$tmp/configmap.conf" 2>&1 <<'PY'
import sys
import yaml

docs = [d for d in yaml.safe_load_all(open(sys.argv[1], encoding="utf-8")) if d]
problems = []
def need(cond, what):
    if not cond:
        problems.append(what)

kinds = {d["kind"]: d for d in docs}
need(set(kinds) == {"Namespace", "ConfigMap", "DaemonSet"},
     f"kinds are {sorted(kinds)}")
ns = kinds["Namespace"]["metadata"]["name"]
cm = kinds["ConfigMap"]
ds = kinds["DaemonSet"]
for d in (cm, ds):
    need(d["metadata"].get("namespace") == ns, f"{d['kind']} not in namespace {ns}")
spec = ds["spec"]
pod = spec["template"]["spec"]
labels = spec["template"]["metadata"]["labels"]
need(all(labels.get(k) == v for k, v in spec["selector"]["matchLabels"].items()),
     "selector does not match the pod labels")
need(pod.get("hostNetwork") is True, "hostNetwork is not true")
(c,) = pod["containers"]
sc = c["securityContext"]
need(sc.get("privileged") is False, "container is privileged")
caps = set(sc["capabilities"]["add"])
need({"NET_RAW", "NET_ADMIN", "IPC_LOCK"} <= caps, f"capabilities {sorted(caps)}")
need(sc["capabilities"].get("drop") == ["ALL"], "capabilities are not dropped first")
res = c["resources"]
need(res["requests"].get("hugepages-2Mi") == res["limits"].get("hugepages-2Mi") is not None,
     "hugepages-2Mi requests and limits must be set and equal")
need("memory" in res["limits"] and "memory" in res["requests"], "memory requests/limits")
cmd = c["livenessProbe"]["exec"]["command"]
need(any("rdmaplanectl" in x for x in cmd) and cmd[-1] == "status",
     f"liveness probe runs {cmd}")
vols = {v["name"]: v for v in pod["volumes"]}
for m in c["volumeMounts"]:
    need(m["name"] in vols, f"mount {m['name']} has no volume")
need(any(v.get("emptyDir", {}).get("medium") == "HugePages" for v in vols.values()),
     "no emptyDir of medium HugePages")
need(any(v.get("hostPath", {}).get("path") == "/run/rdmaplane"
         and v["hostPath"].get("type") == "DirectoryOrCreate" for v in vols.values()),
     "no hostPath /run/rdmaplane (DirectoryOrCreate)")
mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
need(mounts.get("/run/rdmaplane") and vols[mounts["/run/rdmaplane"]].get("hostPath"),
     "/run/rdmaplane is not the host path")
need(mounts.get("/dev/hugepages") and "emptyDir" in vols[mounts["/dev/hugepages"]],
     "/dev/hugepages is not the hugepage volume")
data = cm["data"]
for v in vols.values():
    if "configMap" in v:
        need(v["configMap"]["name"] == cm["metadata"]["name"], "configMap volume names another map")
        for item in v["configMap"].get("items", []):
            need(item["key"] in data, f"configMap key {item['key']} missing")
env = {e["name"]: e for e in c["env"]}
need("RDMAPLANE_IFACE" in env, "no RDMAPLANE_IFACE in the environment")
for e in env.values():
    ref = e.get("valueFrom", {}).get("configMapKeyRef")
    if ref:
        need(ref["name"] == cm["metadata"]["name"] and ref["key"] in data,
             f"env {e['name']} refers to a missing ConfigMap key")
with open(sys.argv[2], "w", encoding="utf-8") as f:
    f.write(data.get("rdmaplaned.conf", ""))
for p in problems:
    print(p)
sys.exit(1 if problems else 0)
PY
)"; then
    pass "the manifest parses (PyYAML) and has what the daemon needs"
  else
    fail "the manifest: $out"
  fi
else
  note "python3-yaml is not installed (Debian package python3-yaml): structural check only"
  if grep -q $'\t' "$manifest"; then fail "the manifest contains tabs"; fi
  [[ $(grep -c '^---$' "$manifest") -eq 2 ]] && pass "three YAML documents" || fail "expected three YAML documents"
  for key in '^kind: Namespace$' '^kind: ConfigMap$' '^kind: DaemonSet$' 'hostNetwork: true$' \
    'medium: HugePages$' 'path: /run/rdmaplane$' 'type: DirectoryOrCreate$' 'hugepages-2Mi:' \
    '- status$' '"NET_RAW"' '"IPC_LOCK"' 'privileged: false$'; do
    expect_grep "$manifest" "$key" "manifest has $key"
  done
  # The ConfigMap's flagfile: the block under "rdmaplaned.conf: |".
  awk '/^  rdmaplaned.conf: \|$/ { on = 1; next } on && /^    / { sub(/^    /, ""); print; next } on { exit }' \
    "$manifest" >"$tmp/configmap.conf"
fi

# --- Flagfiles -------------------------------------------------------------------------
echo "== flagfiles"
# check_flagfile FILE: Abseil's syntax (blank lines, whole-line '#' comments,
# --flag or --flag=value) without the traps: quotes and trailing blanks
# become part of values.
# shellcheck disable=SC2094 # $file is only named in messages, never written
check_flagfile() {
  local file="$1" n=0 line bad=0
  while IFS= read -r line || [[ -n $line ]]; do
    n=$((n + 1))
    [[ $line =~ ^[[:space:]]*(#.*)?$ ]] && continue
    if [[ ! $line =~ ^--[a-z][a-z0-9_]*(=[^[:space:]\"\']([^\"\']*[^[:space:]\"\'])?)?$ ]]; then
      fail "$(basename "$file"):$n is not a plain --flag=value line: '$line'"
      bad=1
    fi
  done <"$file"
  [[ $bad -eq 0 ]] && pass "$(basename "$file"): flagfile syntax"
}
flag_names() { # the flags set in a flagfile
  sed -n 's/^--\([a-z][a-z0-9_]*\).*/\1/p' "$1" | sort -u
}
check_flagfile "$conf"
check_flagfile "$memif_conf"
check_flagfile "$tmp/configmap.conf"
[[ -n $(flag_names "$tmp/configmap.conf") ]] || fail "the ConfigMap's flagfile sets no flag"
# Flags the entry point passes itself must not be in the ConfigMap.
if grep -Eq '^--(port|ip)=' "$tmp/configmap.conf"; then
  fail "the ConfigMap's flagfile sets --port or --ip (the entry point does)"
fi

# The daemon's own flags, from --helpfull (Abseil exits 1 after help). If
# its format ever changes so that nothing is found, the checks below must
# fail, not pass on nothing.
helpfull="$("$daemon" --helpfull 2>&1)"
daemon_flags="$(sed -n '/^  Flags from .*rdmaplaned\.cc:$/,/^$/p' <<<"$helpfull" \
  | sed -n 's/^    --\([a-z][a-z0-9_]*\) .*/\1/p; s/^    --\([a-z][a-z0-9_]*\)$/\1/p' | sort -u)"
all_flags="$(sed -n 's/^    --\([a-z][a-z0-9_]*\)\( .*\)\{0,1\}$/\1/p' <<<"$helpfull" | sort -u)"
# The flag tables: rows starting with "| `--name" in the section "### Every flag".
documented="$(sed -n '/^### Every flag$/,/^### /p' "$operations_md" \
  | grep -o '^| `--[a-z][a-z0-9_]*' | sed 's/^| `--//' | sort -u)"
[[ -n $documented ]] || fail "docs/operations.md has no flag table rows ('| \`--flag...') under '### Every flag'"
if grep -qx port <<<"$daemon_flags" && grep -qx check_config <<<"$daemon_flags" \
  && grep -qx flagfile <<<"$all_flags"; then
  pass "rdmaplaned --helpfull lists its flags ($(wc -l <<<"$daemon_flags") of its own)"
else
  fail "cannot read rdmaplaned's flags from --helpfull (no '--port' and '--check_config' under 'Flags from ...rdmaplaned.cc:', or no '--flagfile'); has its format changed? It printed: $(head -c 600 <<<"$helpfull")"
fi
# --help: what the daemon is, how to start it, and every one of its own
# flags under a group; exit status 0.
help_status=0
help="$("$daemon" --help 2>&1)" || help_status=$?
[[ $help_status -eq 0 ]] || fail "rdmaplaned --help exited with status $help_status"
for want in '^rdmaplaned: the rdmaplane daemon' '^Common ways to start it:$' \
  'role=server' 'net_af_xdp0' '^Clients:$' '^Data port:$' '^Engines:$' \
  '^Limits:$' '^Diagnostics:$' '^--helpfull lists every flag'; do
  grep -qE "$want" <<<"$help" || fail "rdmaplaned --help has no line matching '$want'"
done
help_flags="$(sed -n 's/^  --\([a-z][a-z0-9_]*\).*/\1/p' <<<"$help" | sort -u)"
missing="$(comm -23 <(printf '%s\n' "$daemon_flags") <(printf '%s\n' "$help_flags"))"
[[ -z $missing ]] && pass "rdmaplaned --help shows all $(wc -l <<<"$help_flags") of its flags by group" \
  || fail "rdmaplaned --help leaves out flags: $missing"
if grep -q '^Other:$' <<<"$help"; then
  fail "rdmaplaned --help lists flags under 'Other': give them a group ($(sed -n '/^Other:$/,/^$/p' <<<"$help" | tr '\n' ' '))"
fi
# --version: one line, the version deploy/package.sh numbers the package by.
version_status=0
version="$("$daemon" --version 2>&1)" || version_status=$?
[[ $version_status -eq 0 && $version =~ ^rdmaplaned\ [0-9]+\.[0-9]+\.[0-9]+$ ]] \
  && pass "rdmaplaned --version: $version" \
  || fail "rdmaplaned --version (exit $version_status): $version"

for f in "$conf" "$memif_conf" "$tmp/configmap.conf"; do
  unknown="$(comm -23 <(flag_names "$f") <(printf '%s\n' "$all_flags"))"
  [[ -z $unknown ]] && pass "$(basename "$f"): every flag is rdmaplaned's" \
    || fail "$(basename "$f") sets flags rdmaplaned does not have: $unknown"
done
undocumented="$(comm -23 <(printf '%s\n' "$daemon_flags") <(printf '%s\n' "$documented"))"
[[ -z $undocumented ]] && pass "docs/operations.md documents every rdmaplaned flag" \
  || fail "docs/operations.md does not document: $(tr '\n' ' ' <<<"$undocumented")"
stale="$(comm -13 <(printf '%s\n' "$all_flags") <(printf '%s\n' "$documented"))"
[[ -z $stale ]] && pass "docs/operations.md documents no flag rdmaplaned lacks" \
  || fail "docs/operations.md documents flags rdmaplaned does not have: $(tr '\n' ' ' <<<"$stale")"

# --check_config of the example flagfiles as they are, the way
# docs/operations.md says to check a configuration: exit 0, "config: ok"
# last, and the file's settings in the printed configuration.
# check_config WHAT EXPECTED_LINES ARGS...: EXPECTED_LINES is a list of
# lines (separated by '|') the printed configuration must contain.
check_config() {
  local what="$1" expected="$2" out rc=0 line missing=""
  shift 2
  out="$(timeout 10 "$daemon" "$@" --check_config 2>&1)" || rc=$?
  if [[ $rc -ne 0 ]]; then
    fail "rdmaplaned $* --check_config refuses $what (exit $rc): $out"
    return
  fi
  IFS='|' read -r -a lines <<<"$expected"
  for line in "${lines[@]}" "config: ok"; do
    grep -qxF -- "$line" <<<"$out" || missing+=" '$line'"
  done
  [[ $(tail -n 1 <<<"$out") == "config: ok" ]] || missing+=" (last line 'config: ok')"
  [[ -z $missing ]] && pass "rdmaplaned --check_config accepts $what" \
    || fail "rdmaplaned --check_config of $what printed no$missing: $out"
}
check_config "deploy/rdmaplaned.conf" \
  "socket=/run/rdmaplane/rdmaplane.sock|port=(none)|ip=(none)|mtu=auto|poll_mode=adaptive|hugepages=0|file_prefix=rdmaplane" \
  --flagfile="$conf"
# ... and with its data port lines taken in, as an operator would.
sed -e 's/^# \(--port=\)/\1/' -e 's/^# \(--ip=\)/\1/' "$conf" >"$tmp/with-port.conf"
check_config "deploy/rdmaplaned.conf with its data port" \
  "port=net_af_packet0,iface=eth1|ip=198.51.100.1|mtu=auto" \
  --flagfile="$tmp/with-port.conf"
check_config "deploy/rdmaplaned-memif.conf" "mtu=4096|poll_mode=adaptive|hugepages=0" \
  --flagfile="$memif_conf"
# The ConfigMap's flagfile leaves --mtu unset: each node's daemon takes
# the largest path MTU its interface carries.
check_config "the ConfigMap's flagfile" \
  "socket=/run/rdmaplane/rdmaplane.sock|mtu=auto|poll_mode=adaptive|hugepages=1|file_prefix=rdmaplane" \
  --flagfile="$tmp/configmap.conf"
d="$tmp/memif"
mkdir -p "$d"
check_config "the memif example with one daemon's own flags (docs/operations.md)" \
  "socket=$d/a.sock|port=net_memif0,role=server,socket=$d/memif.sock,socket-abstract=no|ip=198.51.100.1|file_prefix=rdmaplane-test-a|mtu=4096" \
  --flagfile="$memif_conf" --socket="$d/a.sock" --file_prefix=rdmaplane-test-a \
  --ip=198.51.100.1 --port="net_memif0,role=server,socket=$d/memif.sock,socket-abstract=no"

# Values the daemon rejects: exit status 2 (the unit's
# RestartPreventExitStatus=2: no restarts for a broken configuration) and
# one line naming the flag, before it serves anything. Run without
# --check_config, as systemd starts it, on a socket of its own and bounded,
# so that a value it wrongly took shows as a daemon that started.
bad_sock="$(mktemp -u /tmp/rdp-bad-flag.XXXXXX).sock"
# refused STATUS EXPECTED_MESSAGE FLAGS...: the daemon refuses FLAGS with
# exit STATUS and a message that is (2) or contains (1) EXPECTED_MESSAGE.
refused() {
  local want="$1" expected="$2" out rc=0
  shift 2
  out="$(timeout 10 "$daemon" --socket="$bad_sock" --file_prefix=rdmaplane-bad-flag "$@" 2>&1)" || rc=$?
  if [[ -e $bad_sock ]]; then
    rm -f "$bad_sock"
    fail "rdmaplaned $* started serving (exit $rc): $out"
  elif [[ $rc -eq $want && ($out == "$expected" || ($want -eq 1 && $out == *"$expected"*)) ]]; then
    pass "rdmaplaned $*: exit $want, '$out'"
  else
    fail "rdmaplaned $*: exit $rc ($want expected), said '$out' ('$expected' expected)"
  fi
}
refused 2 "rdmaplaned: --poll_mode is busy or adaptive" --poll_mode=bogus
refused 2 "rdmaplaned: --mtu must be 256..4096, a power of 2, or 0 (the largest the data port carries)" --mtu=1000
refused 2 "rdmaplaned: --mtu must be 256..4096, a power of 2, or 0 (the largest the data port carries)" --mtu=8192
refused 2 "rdmaplaned: --max_connections must be 1..65536" --max_connections=0
refused 2 "rdmaplaned: --port needs --ip" --port=net_memif0
refused 2 "rdmaplaned: --ip is an IPv4 address, got '300.1.1.1'" --ip=300.1.1.1
refused 2 "rdmaplaned: --mac is a unicast MAC like 02:00:00:00:00:01" --mac=01:00:00:00:00:01
refused 2 "rdmaplaned: --log_level is debug, info, warning or error" --log_level=loud
refused 2 "rdmaplaned: --zero_copy is auto or off" --zero_copy=maybe
refused 2 "rdmaplaned: --file_prefix is a plain name" --file_prefix=a/b
refused 2 "rdmaplaned: --mbufs must be at least 1023" --mbufs=10
refused 2 "rdmaplaned: --retransmit_timeout_us must be 100..10000000" --retransmit_timeout_us=5
refused 2 "rdmaplaned: --allow_uids, --allow_gids and --admin_gids take numbers" --allow_uids=root
refused 2 "rdmaplaned: --allow_uids, --allow_gids and --admin_gids take numbers" --admin_gids=adm
refused 2 "rdmaplaned: --port_faults: unknown fault key 'nonsense' (known: loss, dup, reorder, delay_us, jitter_us, reorder_us, drop_after, seed)" \
  --port_faults=nonsense=1
# In a flagfile too.
printf -- '--mtu=1024\n--poll_mode=bogus\n' >"$tmp/bad.conf"
refused 2 "rdmaplaned: --poll_mode is busy or adaptive" --flagfile="$tmp/bad.conf"
# What Abseil's own parser refuses (a value of the wrong type, a flag the
# daemon does not have) ends with exit status 1 instead, as
# docs/operations.md says: the unit restarts it (at most 5 times a minute).
refused 1 "Unknown command line flag 'bogus'" --bogus=1
refused 1 "Illegal value 'abc' specified for flag 'mtu'" --mtu=abc

# --- Containerfile ------------------------------------------------------------------------
echo "== Containerfile"
expect_grep "$containerfile" '^FROM \$\{DEBIAN\} AS build$' "a build stage"
expect_grep "$containerfile" '^ARG DEBIAN=debian:12$' "based on debian:12"
expect_grep "$containerfile" '^RUN bazel build -c opt ' "builds with Bazel"
expect_grep "$containerfile" '^ +//control:rdmaplaned //control:rdmaplanectl' "builds both binaries"
expect_grep "$containerfile" 'librte-net-af-packet23' "installs the af_packet driver"
expect_grep "$containerfile" '^ENTRYPOINT \["/usr/local/sbin/rdmaplaned-container"\]$' "the entry point"
while read -r src; do
  [[ -e $deploy/${src#deploy/} ]] || fail "Containerfile copies $src, which does not exist"
done < <(grep -o '^COPY deploy/[^ ]*' "$containerfile" | cut -d' ' -f2)

# --- package.sh (the package itself: //deploy:package_test) ---------------------
out="$("$deploy/package.sh" --help 2>&1)" && grep -q 'deploy/package.sh' <<<"$out" \
  && pass "package.sh --help" || fail "package.sh --help: $out"
status=0
out="$("$deploy/package.sh" --bogus 2>&1)" || status=$?
[[ $status -eq 2 && $out == "package: error: unknown argument '--bogus' (see --help)" ]] \
  && pass "package.sh refuses an unknown option" || fail "package.sh --bogus (exit $status): $out"
status=0
out="$("$deploy/package.sh" --binaries="$tmp/nowhere" --no-lintian 2>&1)" || status=$?
[[ $status -eq 2 && $out == *"no rdmaplaned in $tmp/nowhere"* ]] \
  && pass "package.sh refuses a folder without binaries" || fail "package.sh --binaries=nowhere (exit $status): $out"
for f in control.in copyright.in lintian-overrides rdmaplane.sysusers rdmaplane.tmpfiles; do
  [[ -f $deploy/debian/$f ]] || fail "missing deploy/debian/$f"
done
expect_grep "$deploy/debian/rdmaplane.sysusers" '^g rdmaplane -$' "sysusers.d: the group rdmaplane"
expect_grep "$deploy/debian/rdmaplane.tmpfiles" '^d /run/rdmaplane 0750 root rdmaplane -$' \
  "tmpfiles.d: /run/rdmaplane as the unit's RuntimeDirectory has it"
expect_grep "$unit" '^RuntimeDirectoryMode=0750$' "the unit's runtime folder mode matches tmpfiles.d"
# Every override in the package carries its reason (a comment above it).
awk '/^#/ { reason = 1; next } /^rdmaplane: / { if (!reason) bad = 1; next } /^$/ { reason = 0 } END { exit bad }' \
  "$deploy/debian/lintian-overrides" && pass "each lintian override has its reason" \
  || fail "a lintian override without a comment giving its reason"

# --- Scripts ------------------------------------------------------------------------------
if command -v shellcheck >/dev/null 2>&1; then
  if out="$(shellcheck "$install_sh" "$hugepages" "$entrypoint" "$run_sh" "$0" \
    "$deploy/setup.sh" "$deploy/test.sh" "$deploy/fuzz.sh" "$deploy/test_sh_test.sh" \
    "$deploy/package.sh" "$deploy/package_test.sh" 2>&1)"; then
    pass "shellcheck: no findings"
  else
    fail "shellcheck: $out"
  fi
  # The package's maintainer scripts run under /bin/sh.
  if out="$(shellcheck -s sh "$deploy/debian/postinst" "$deploy/debian/prerm" \
    "$deploy/debian/postrm" 2>&1)"; then
    pass "shellcheck -s sh: the maintainer scripts"
  else
    fail "shellcheck of the maintainer scripts: $out"
  fi
else
  note "shellcheck is not installed: scripts not linted"
fi

if [[ $failures -ne 0 ]]; then
  echo "deploy_files_test: $failures check(s) failed"
  exit 1
fi
echo "deploy_files_test: ok"
