#!/usr/bin/env bash
# Builds rdmaplaned, rdmaplanectl, the client library and the verbs front
# end, installs the daemon as a systemd service, the library for programs
# built elsewhere, and rdmaplane-run for unmodified RDMA applications.
#
#   deploy/install.sh                    # build, install under /usr/local, /etc
#   deploy/install.sh --dry-run          # print every step, change nothing
#   deploy/install.sh --prefix=/opt/rdmaplane
#
# Options (all also accept "--option VALUE"):
#   --prefix=DIR      binaries in DIR/sbin (rdmaplaned), DIR/bin (rdmaplanectl,
#                     rdmaplane-run) and DIR/libexec/rdmaplane
#                     (reserve-hugepages.sh); the client library in DIR/lib
#                     (librdmaplane.so.1, and librdmaplane.so for the linker),
#                     its header in DIR/include (rdmaplane.h) and
#                     DIR/lib/pkgconfig/rdmaplane.pc, so that
#                       cc app.c $(pkg-config --cflags --libs rdmaplane)
#                     builds a client; the verbs front end in DIR/lib
#                     (librdmaplane-verbs.so, which DIR/bin/rdmaplane-run
#                     preloads: docs/verbs.md); default /usr/local
#   --sysconfdir=DIR  DIR/rdmaplane/rdmaplaned.conf and
#                     DIR/systemd/system/rdmaplaned.service; default /etc
#   --destdir=DIR     stage everything under DIR (for packaging); the unit
#                     still names the final paths
#   --binaries=DIR    install DIR/rdmaplaned, DIR/rdmaplanectl,
#                     DIR/librdmaplane.so.1 and DIR/librdmaplane-verbs.so (or,
#                     in Bazel's layout, DIR/../api/librdmaplane.so.1 and
#                     DIR/../api/verbs/librdmaplane-verbs.so:
#                     --binaries=bazel-bin/control works) as they are instead
#                     of building them with Bazel
#   --dry-run         print what would be done; build and change nothing
#   -h, --help        this text
#
# An existing rdmaplaned.conf is never overwritten; the new example is put
# beside it as rdmaplaned.conf.new. When the unit goes to the running
# system's /etc/systemd/system, the script also creates the "rdmaplane"
# group the unit runs with and reloads systemd; it neither enables nor starts
# the service. Needs root for system paths; never asks anything.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

prefix=/usr/local
sysconfdir=/etc
destdir=""
binaries=""
dry_run=false

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }
die() {
  printf 'install: error: %s\n' "$*" >&2
  exit 2
}

while [[ $# -gt 0 ]]; do
  opt="$1"
  shift
  case "$opt" in
    --prefix=* | --sysconfdir=* | --destdir=* | --binaries=*)
      value="${opt#*=}"
      opt="${opt%%=*}"
      ;;
    --prefix | --sysconfdir | --destdir | --binaries)
      [[ $# -gt 0 ]] || die "$opt needs a value"
      value="$1"
      shift
      ;;
    --dry-run)
      dry_run=true
      continue
      ;;
    -h | --help)
      usage
      exit 0
      ;;
    *) die "unknown argument '$opt' (see --help)" ;;
  esac
  [[ -n $value ]] || die "$opt needs a value"
  case "$opt" in
    --prefix) prefix="$value" ;;
    --sysconfdir) sysconfdir="$value" ;;
    --destdir) destdir="$value" ;;
    --binaries) binaries="$value" ;;
  esac
done

# These paths are written into the unit file (which splits on blanks and
# expands '%' and '$'), so they are kept to plain characters.
for dir in "$prefix" "$sysconfdir"; do
  [[ $dir =~ ^/[A-Za-z0-9._/+-]*$ ]] \
    || die "--prefix and --sysconfdir must be absolute paths of letters, digits and ._+-/, got '$dir'"
done
[[ -z $destdir || $destdir == /* ]] || die "--destdir must be an absolute path, got '$destdir'"
prefix="${prefix%/}"
sysconfdir="${sysconfdir%/}"
[[ -n $prefix ]] || prefix=/
[[ -n $sysconfdir ]] || sysconfdir=/

# Final locations (as the unit names them) ...
sbindir="${prefix%/}/sbin"
bindir="${prefix%/}/bin"
libexecdir="${prefix%/}/libexec/rdmaplane"
libdir="${prefix%/}/lib"
includedir="${prefix%/}/include"
pkgconfigdir="$libdir/pkgconfig"
confdir="${sysconfdir%/}/rdmaplane"
unitdir="${sysconfdir%/}/systemd/system"
# ... and where the files are written.
stage() { printf '%s%s' "$destdir" "$1"; }

# The running system gets its group and a daemon-reload; a staged or
# relocated install does not.
system_install=false
if [[ -z $destdir && $unitdir == /etc/systemd/system ]]; then
  system_install=true
fi

log() { printf 'install: %s\n' "$*"; }
# Runs a command, or only prints it with --dry-run.
run() {
  if $dry_run; then
    printf 'install: would run:'
    printf ' %q' "$@"
    printf '\n'
  else
    "$@"
  fi
}

# write_file DEST TEXT NOTE: writes TEXT (and a newline) to DEST, mode 0644,
# or with --dry-run only says it would, with NOTE.
write_file() {
  if $dry_run; then
    printf 'install: would write %s with %s\n' "$1" "$3"
  else
    printf '%s\n' "$2" >"$1"
    chmod 0644 "$1"
  fi
}

# The files this script installs from the source tree.
unit_src="$REPO_ROOT/deploy/rdmaplaned.service"
conf_src="$REPO_ROOT/deploy/rdmaplaned.conf"
hugepages_src="$REPO_ROOT/deploy/reserve-hugepages.sh"
header_src="$REPO_ROOT/api/rdmaplane.h"
pc_src="$REPO_ROOT/api/rdmaplane.pc.in"
run_src="$REPO_ROOT/deploy/rdmaplane-run"
for f in "$unit_src" "$conf_src" "$hugepages_src" "$header_src" "$pc_src" "$run_src"; do
  [[ -f $f ]] || die "missing $f (run this script from a complete source tree)"
done

# --- Build -------------------------------------------------------------------
if [[ -n $binaries ]]; then
  bin_src="$binaries"
  lib_src="$binaries"
  verbs_src="$binaries"
  if [[ ! -e $lib_src/librdmaplane.so.1 && -e $binaries/../api/librdmaplane.so.1 ]]; then
    lib_src="$binaries/../api"
  fi
  if [[ ! -e $verbs_src/librdmaplane-verbs.so && -e $binaries/../api/verbs/librdmaplane-verbs.so ]]; then
    verbs_src="$binaries/../api/verbs"
  fi
else
  bin_src="$REPO_ROOT/bazel-bin/control"
  lib_src="$REPO_ROOT/bazel-bin/api"
  verbs_src="$REPO_ROOT/bazel-bin/api/verbs"
  build=(bazel build -c opt //control:rdmaplaned //control:rdmaplanectl //api:librdmaplane.so.1
    //api/verbs:librdmaplane-verbs.so)
  # Under sudo, build as the invoking user: Bazel's cache and the bazel-*
  # links in the tree stay theirs, not root's.
  if [[ $EUID -eq 0 && -n ${SUDO_USER:-} && $SUDO_USER != root ]] && command -v sudo >/dev/null 2>&1; then
    build=(sudo -u "$SUDO_USER" -H -- "${build[@]}")
  fi
  log "building in $REPO_ROOT"
  if $dry_run; then
    run cd "$REPO_ROOT"
    run "${build[@]}"
  else
    command -v bazel >/dev/null 2>&1 || die "bazel not found: run deploy/setup.sh first"
    (cd "$REPO_ROOT" && "${build[@]}")
  fi
fi
if ! $dry_run; then
  for b in rdmaplaned rdmaplanectl; do
    [[ -x $bin_src/$b ]] || die "$bin_src/$b is missing or not executable"
  done
  [[ -f $lib_src/librdmaplane.so.1 ]] || die "$lib_src/librdmaplane.so.1 is missing"
  [[ -f $verbs_src/librdmaplane-verbs.so ]] || die "$verbs_src/librdmaplane-verbs.so is missing"
fi

# --- Install -----------------------------------------------------------------
if [[ $EUID -ne 0 ]] && ! $dry_run && [[ -z $destdir ]]; then
  for dir in "$sbindir" "$unitdir"; do
    parent="$dir"
    while [[ ! -e $parent ]]; do parent="$(dirname "$parent")"; done
    [[ -w $parent ]] || die "cannot write to $dir: run as root (sudo $0 ...), or use --prefix/--sysconfdir/--destdir"
  done
fi

log "installing binaries to $(stage "$sbindir") and $(stage "$bindir")"
run install -d -m 0755 "$(stage "$sbindir")" "$(stage "$bindir")" "$(stage "$libexecdir")"
run install -m 0755 "$bin_src/rdmaplaned" "$(stage "$sbindir")/rdmaplaned"
run install -m 0755 "$bin_src/rdmaplanectl" "$(stage "$bindir")/rdmaplanectl"
run install -m 0755 "$run_src" "$(stage "$bindir")/rdmaplane-run"
run install -m 0755 "$hugepages_src" "$(stage "$libexecdir")/reserve-hugepages.sh"

log "installing the client library to $(stage "$libdir"), rdmaplane.h to $(stage "$includedir")"
run install -d -m 0755 "$(stage "$libdir")" "$(stage "$includedir")" "$(stage "$pkgconfigdir")"
run install -m 0755 "$lib_src/librdmaplane.so.1" "$(stage "$libdir")/librdmaplane.so.1"
run ln -sfn librdmaplane.so.1 "$(stage "$libdir")/librdmaplane.so"
run install -m 0644 "$header_src" "$(stage "$includedir")/rdmaplane.h"
# The verbs front end: no soname version and no link; only preloaded, by
# $bindir/rdmaplane-run, which finds it as ../lib/librdmaplane-verbs.so.
log "installing the verbs front end to $(stage "$libdir")/librdmaplane-verbs.so"
run install -m 0755 "$verbs_src/librdmaplane-verbs.so" "$(stage "$libdir")/librdmaplane-verbs.so"
# The .pc file names the final prefix (not the staging directory).
write_file "$(stage "$pkgconfigdir")/rdmaplane.pc" \
  "$(sed -e "s#@prefix@#${prefix}#g" "$pc_src")" "prefix=$prefix"

# The unit names /usr/local and /etc; point it at the chosen locations.
log "installing the systemd unit to $(stage "$unitdir")/rdmaplaned.service"
unit_text="$(sed -e "s#/usr/local/sbin/#${sbindir}/#g" \
  -e "s#/usr/local/libexec/rdmaplane/#${libexecdir}/#g" \
  -e "s#/etc/rdmaplane/#${confdir}/#g" "$unit_src")"
run install -d -m 0755 "$(stage "$unitdir")"
write_file "$(stage "$unitdir")/rdmaplaned.service" "$unit_text" \
  "ExecStart=$(grep -m1 '^ExecStart=' <<<"$unit_text" | cut -d= -f2-)"

run install -d -m 0755 "$(stage "$confdir")"
conf_dst="$(stage "$confdir")/rdmaplaned.conf"
if [[ -e $conf_dst ]]; then
  log "keeping the existing $conf_dst; the example goes to $conf_dst.new"
  run install -m 0644 "$conf_src" "$conf_dst.new"
else
  log "installing the example configuration to $conf_dst"
  run install -m 0644 "$conf_src" "$conf_dst"
fi

if $system_install; then
  if command -v ldconfig >/dev/null 2>&1; then
    run ldconfig
  fi
  if ! getent group rdmaplane >/dev/null 2>&1; then
    log "creating the system group rdmaplane (may use the client socket)"
    run groupadd --system rdmaplane
  fi
  if [[ -d /run/systemd/system ]]; then
    run systemctl daemon-reload
  else
    log "systemd is not running here; skipped systemctl daemon-reload"
  fi
fi

if $dry_run; then
  log "dry run: nothing was built or changed; after a real install:"
else
  log "done. Next steps:"
fi
cat <<EOF
  1. Edit $confdir/rdmaplaned.conf: --port (your data interface), --ip,
     --mtu, --allow_uids/--allow_gids. Check it without starting:
       $sbindir/rdmaplaned --flagfile=$confdir/rdmaplaned.conf --check_config
  2. Start the service and start it at boot:
       systemctl enable --now rdmaplaned
  3. Check it:
       systemctl status rdmaplaned
       $bindir/rdmaplanectl status
  Non-root clients: add them to the group "rdmaplane" (it opens the socket
  folder) and to --allow_uids. See docs/operations.md.
  RDMA applications (perftest, ibverbs-utils) run over the daemon with
       $bindir/rdmaplane-run --socket=/run/rdmaplane/rdmaplane.sock ibv_devinfo
  See docs/verbs.md.
EOF
