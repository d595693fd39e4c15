#!/usr/bin/env bash
# The Debian package, built, installed, used and purged on this machine:
#   1. deploy/package.sh builds rdmaplane_<version>_amd64.deb from the
#      binaries under test; lintian finds no error or warning (when
#      lintian is installed; deploy/setup.sh installs it).
#   2. `apt-get install ./rdmaplane_*.deb`: the files are where Debian
#      keeps them, the group rdmaplane and /run/rdmaplane (0750,
#      root:rdmaplane) exist, the unit is enabled.
#   3. The daemon runs as the unit runs it: by systemd where systemd runs,
#      else by hand from the unit's own ExecStart, Group and UMask, with
#      RUNTIME_DIRECTORY set. The installed rdmaplanectl answers; the example
#      client, built with the installed header, library and pkg-config file
#      alone, and `rdmaplane-run ibv_devinfo` run against it.
#   4. `apt-get purge rdmaplane`: nothing is left under /etc, /usr, /lib,
#      /var/lib/systemd and /run/rdmaplane but what was there before (the group
#      rdmaplane stays, as Debian leaves system groups; the backups of the
#      group files it was added to may appear: /etc/group- and
#      /etc/gshadow-).
# Needs root. Skipped where dpkg knows rdmaplane in any state, where a file
# the package installs already exists (deploy/install.sh's, say), where a
# unit of that name is in /etc/systemd/system or a daemon serves
# /run/rdmaplane: the test would take them over or purge them. Fails when
# installing would bring in any other package (deploy/setup.sh installs
# what the package depends on). Cleans up after itself on any exit: stops
# its daemon and purges the package.
#
#   package_test.sh PACKAGE_SH RDMAPLANED RDMAPLANECTL LIBRDMAPLANE LIBVERBS EXAMPLE_C
set -euo pipefail

if [[ $# -ne 6 ]]; then
  echo "usage: $0 PACKAGE_SH RDMAPLANED RDMAPLANECTL LIBRDMAPLANE LIBVERBS EXAMPLE_C" >&2
  exit 2
fi
package_sh="$1"
example_src="$6"
tmp="$(mktemp -d /tmp/rdp-package.XXXXXX)"
installed=false
daemon_pid=""

log() { echo "package_test: $*"; }
fail() {
  echo "FAIL: package_test: $*" >&2
  exit 1
}
skip() {
  echo "SKIPPED: $*"
  exit 0
}

apt_get() {
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 -y -q "$@"
}

# Stops the daemon this test started: SIGTERM, then SIGKILL after 20 s (the
# unit's TimeoutStopSec). Returns its exit status.
stop_daemon() {
  local pid="$daemon_pid" status=0 i
  daemon_pid=""
  [[ -n $pid ]] || return 0
  kill -TERM "$pid" 2>/dev/null
  for ((i = 0; i < 200; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "package_test: rdmaplaned ignored SIGTERM for 20 s; killing it" >&2
    kill -KILL "$pid" 2>/dev/null
  fi
  wait "$pid" 2>/dev/null || status=$?
  return "$status"
}

cleanup() {
  local status=$?
  set +e
  stop_daemon
  if $installed; then
    echo "package_test: cleanup: purging rdmaplane" >&2
    if ! apt_get purge rdmaplane >"$tmp/cleanup-purge.log" 2>&1; then
      cat "$tmp/cleanup-purge.log" >&2
      echo "package_test: cleanup: apt-get purge rdmaplane FAILED: remove it by hand" >&2
    fi
  fi
  if [[ -n ${TEST_UNDECLARED_OUTPUTS_DIR:-} ]]; then
    cp -- "$tmp"/*.log "$TEST_UNDECLARED_OUTPUTS_DIR"/ 2>/dev/null
  fi
  rm -rf -- "$tmp"
  exit "$status"
}
trap cleanup EXIT
trap 'echo "package_test: interrupted" >&2; exit 143' TERM INT HUP

[[ $(id -u) -eq 0 ]] || skip "needs root to install a package"
for tool in apt-get dpkg dpkg-query cc pkg-config setpriv; do
  command -v "$tool" >/dev/null || fail "$tool is missing (deploy/setup.sh installs what this test needs)"
done
triplet="$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)"
# What the package installs (checked after the installation, too).
package_files=(/usr/sbin/rdmaplaned /usr/bin/rdmaplanectl /usr/bin/rdmaplane-run
  /usr/libexec/rdmaplane/reserve-hugepages.sh
  "/usr/lib/$triplet/librdmaplane.so.1" "/usr/lib/$triplet/librdmaplane.so"
  "/usr/lib/$triplet/rdmaplane/librdmaplane-verbs.so" "/usr/lib/$triplet/pkgconfig/rdmaplane.pc"
  /usr/include/rdmaplane.h /lib/systemd/system/rdmaplaned.service /etc/rdmaplane/rdmaplaned.conf
  /usr/lib/sysusers.d/rdmaplane.conf /usr/lib/tmpfiles.d/rdmaplane.conf
  /usr/share/man/man8/rdmaplaned.8.gz /usr/share/man/man3/rdp_open.3.gz
  /usr/share/doc/rdmaplane/copyright /usr/share/doc/rdmaplane/changelog.gz)
if dpkg_status="$(dpkg-query -W -f='${Status}' rdmaplane 2>/dev/null)" && [[ -n $dpkg_status ]] \
  && [[ $dpkg_status != "unknown ok not-installed" ]]; then
  skip "dpkg knows rdmaplane here ($dpkg_status); this test installs and purges its own"
fi
for f in "${package_files[@]}" /etc/systemd/system/rdmaplaned.service; do
  [[ ! -e $f ]] || skip "$f exists (another installation?); this test would take it over"
done
[[ ! -e /run/rdmaplane/rdmaplane.sock ]] \
  || skip "a daemon serves /run/rdmaplane/rdmaplane.sock; this test would start its own there"

# --- 1. Build ----------------------------------------------------------------
bin="$tmp/bin"
mkdir -p "$bin"
cp -- "$2" "$3" "$4" "$5" "$bin/"
log "deploy/package.sh --binaries=$bin --out=$tmp/out"
"$package_sh" --binaries="$bin" --out="$tmp/out" >"$tmp/package.log" 2>&1 || {
  cat "$tmp/package.log"
  fail "deploy/package.sh failed"
}
cat "$tmp/package.log"
debs=("$tmp"/out/rdmaplane_*_amd64.deb)
[[ ${#debs[@]} -eq 1 && -f ${debs[0]} ]] || fail "no rdmaplane_*_amd64.deb in $tmp/out"
deb="${debs[0]}"
if command -v lintian >/dev/null; then
  grep -q '^package: lintian: no error or warning' "$tmp/package.log" \
    || fail "package.sh did not report lintian clean"
else
  log "note: lintian is not installed, the package was not checked by it"
fi

# --- 2. Install --------------------------------------------------------------
# What is there before, where a package may leave something.
# (Of /run only the package's folder: other services' files come and go.)
snapshot() {
  {
    find /etc /usr /lib /var/lib/systemd -xdev \
      \( -path /var/lib/systemd/timers -o -path /var/lib/systemd/coredump \) -prune -o -print
    find /run/rdmaplane 2>/dev/null || true
  } | LC_ALL=C sort
}
snapshot >"$tmp/before.txt"

# Nothing but the package itself may come with it: its dependencies are
# deploy/setup.sh's to install, and would stay after the purge.
(cd "$(dirname "$deb")" && apt_get --simulate --no-install-recommends install "./$(basename "$deb")") \
  >"$tmp/simulate.log" 2>&1 || {
  cat "$tmp/simulate.log"
  fail "apt-get install --simulate ./$(basename "$deb") failed"
}
others="$(awk '$1 == "Inst" && $2 != "rdmaplane" { print $2 }' "$tmp/simulate.log" | tr '\n' ' ')"
[[ -z $others ]] || fail "installing the package would also install: $others(deploy/setup.sh should have)"
hugepages_before="$(cat /proc/sys/vm/nr_hugepages)"
log "apt-get install $deb"
installed=true
(cd "$(dirname "$deb")" && apt_get --no-install-recommends install "./$(basename "$deb")") \
  >"$tmp/install.log" 2>&1 || {
  cat "$tmp/install.log"
  fail "apt-get install ./$(basename "$deb") failed"
}
[[ $(dpkg-query -W -f='${Status}' rdmaplane) == "install ok installed" ]] \
  || fail "rdmaplane is not installed after apt-get install"
version="$(dpkg-query -W -f='${Version}' rdmaplane)"
log "installed rdmaplane $version"

for f in "${package_files[@]}"; do
  [[ -e $f ]] || fail "$f is not installed"
  dpkg -S "$f" >/dev/null 2>&1 || fail "$f is not one of the package's files"
done
[[ $version == "$(/usr/sbin/rdmaplaned --version | sed 's/^rdmaplaned //')+"* ]] \
  || fail "the package's version $version does not start with the installed daemon's ($(/usr/sbin/rdmaplaned --version))"
grep -qx 'Environment=RDMAPLANE_RESERVE_HUGEPAGES=0' /lib/systemd/system/rdmaplaned.service \
  || fail "the packaged unit reserves hugepages"
getent group rdmaplane >/dev/null || fail "the group rdmaplane was not created"
[[ $(stat -c '%a %U %G' /run/rdmaplane) == "750 root rdmaplane" ]] \
  || fail "/run/rdmaplane is $(stat -c '%a %U %G' /run/rdmaplane), not 750 root rdmaplane"
wants=/etc/systemd/system/multi-user.target.wants/rdmaplaned.service
[[ $(readlink "$wants") == /lib/systemd/system/rdmaplaned.service ]] \
  || fail "the unit is not enabled ($wants: $(readlink "$wants" || echo missing))"
log "ok: files in place, group and /run/rdmaplane made, unit enabled"

# --- 3. Run ------------------------------------------------------------------
sock=/run/rdmaplane/rdmaplane.sock
unit=/lib/systemd/system/rdmaplaned.service
unit_value() { sed -n "s/^$1=//p" "$unit" | head -n 1; }
if [[ -d /run/systemd/system ]]; then
  log "systemd runs here: systemctl start rdmaplaned"
  systemctl start rdmaplaned || fail "systemctl start rdmaplaned failed: $(systemctl status rdmaplaned 2>&1)"
else
  exec_start="$(unit_value ExecStart)"
  group="$(unit_value Group)"
  umask_value="$(unit_value UMask)"
  [[ -n $exec_start && -n $group && -n $umask_value ]] \
    || fail "the unit has no ExecStart, Group or UMask"
  log "no systemd here: starting the unit's ExecStart by hand: $exec_start (group $group, umask $umask_value)"
  # shellcheck disable=SC2086 # ExecStart is a command line of plain words
  (umask "$umask_value" && RUNTIME_DIRECTORY=/run/rdmaplane exec setpriv --regid="$group" \
    --clear-groups -- $exec_start) >"$tmp/rdmaplaned.log" 2>&1 &
  daemon_pid=$!
fi
for ((i = 0; i < 150; i++)); do # 15 s
  [[ -S $sock ]] && break
  if [[ -n $daemon_pid ]] && ! kill -0 "$daemon_pid" 2>/dev/null; then
    fail "rdmaplaned exited during start-up: $(cat "$tmp/rdmaplaned.log")"
  fi
  sleep 0.1
done
[[ -S $sock ]] || fail "no daemon served $sock within 15 s: $(cat "$tmp/rdmaplaned.log" 2>/dev/null)"
log "the daemon serves $sock"

/usr/bin/rdmaplanectl --socket="$sock" status >"$tmp/status.txt" 2>&1 \
  || fail "rdmaplanectl status: $(cat "$tmp/status.txt")"
sed 's/^/    /' "$tmp/status.txt"
grep -q "^version  *${version%%+*}\$" "$tmp/status.txt" || fail "rdmaplanectl status shows another version"

# The example client, built with what the package installed (the default
# pkg-config path, no PKG_CONFIG_PATH).
mkdir -p "$tmp/app"
cp -- "$example_src" "$tmp/app/app.c"
flags="$(pkg-config --cflags --libs rdmaplane)" || fail "pkg-config does not find rdmaplane"
# shellcheck disable=SC2086 # pkg-config's output is a list of words
(cd "$tmp/app" && cc -std=c11 -Wall -Wextra -Werror -o app app.c $flags) \
  || fail "the example does not build with: cc app.c $flags"
loaded="$(ldd "$tmp/app/app")" || fail "ldd failed"
grep -qF "librdmaplane.so.1 => /usr/lib/$triplet/librdmaplane.so.1 " <<<"$loaded" \
  || fail "the example does not load the packaged library: $(grep rdmaplane <<<"$loaded")"
out="$(timeout 60 "$tmp/app/app" "$sock" 2>&1)" || fail "the example failed: $out"
[[ $(tail -n 1 <<<"$out") == "example: ok" ]] || fail "the example's last line: $(tail -n 1 <<<"$out")"
log "ok: the example client, built against the package, ran: example: ok"

if command -v ibv_devinfo >/dev/null; then
  timeout 60 /usr/bin/rdmaplane-run --socket="$sock" ibv_devinfo >"$tmp/devinfo.txt" 2>&1 \
    || fail "rdmaplane-run ibv_devinfo failed: $(cat "$tmp/devinfo.txt")"
  sed 's/^/    /' "$tmp/devinfo.txt"
  grep -Eq $'^hca_id:\trdmaplane0$' "$tmp/devinfo.txt" || fail "ibv_devinfo shows no rdmaplane0"
  grep -Eq 'state:[[:space:]]+PORT_ACTIVE' "$tmp/devinfo.txt" || fail "rdmaplane0's port is not active"
  log "ok: rdmaplane-run ibv_devinfo shows rdmaplane0, served by the packaged daemon"
else
  fail "ibv_devinfo (ibverbs-utils) is missing: deploy/setup.sh installs it"
fi

# --- 4. Stop and purge -------------------------------------------------------
if [[ -n $daemon_pid ]]; then
  status=0
  stop_daemon || status=$?
  [[ $status -eq 0 ]] || fail "rdmaplaned exited with status $status on SIGTERM: $(cat "$tmp/rdmaplaned.log")"
fi
log "apt-get purge rdmaplane"
apt_get purge rdmaplane >"$tmp/purge.log" 2>&1 || {
  cat "$tmp/purge.log"
  fail "apt-get purge rdmaplane failed"
}
installed=false
if dpkg-query -W -f='${Status}' rdmaplane 2>/dev/null | grep -q 'installed'; then
  fail "rdmaplane is still installed after the purge"
fi
snapshot >"$tmp/after.txt"
left="$(LC_ALL=C comm -13 "$tmp/before.txt" "$tmp/after.txt" | grep -vxE '/etc/(group|gshadow)-' || true)"
[[ -z $left ]] || fail "left behind after the purge: $left"
gone="$(LC_ALL=C comm -23 "$tmp/before.txt" "$tmp/after.txt" || true)"
[[ -z $gone ]] || fail "gone after installing and purging: $gone"
[[ $(cat /proc/sys/vm/nr_hugepages) == "$hugepages_before" ]] \
  || fail "2 MiB hugepages went from $hugepages_before to $(cat /proc/sys/vm/nr_hugepages)"
log "ok: purged; nothing left behind"
log "PASS"
