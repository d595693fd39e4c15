#!/usr/bin/env bash
# Builds rdmaplaned, rdmaplanectl, the client library and the verbs front
# end, installs the daemon as a systemd service, the library for programs
# built elsewhere, rdmaplane-run for unmodified RDMA applications, the
# manual pages and the documentation.
#
#   deploy/install.sh                    # build, install under /usr/local, /etc
#   deploy/install.sh --dry-run          # print every step, change nothing
#   deploy/install.sh --prefix=/opt/rdmaplane
#   DESTDIR=/tmp/stage deploy/install.sh --prefix=/usr   # stage a package
#
# Options (all also accept "--option VALUE"):
#   --prefix=DIR      binaries in DIR/sbin (rdmaplaned), DIR/bin (rdmaplanectl,
#                     rdmaplane-run) and DIR/libexec/rdmaplane
#                     (reserve-hugepages.sh); the header in DIR/include
#                     (rdmaplane.h); default /usr/local
#   --libdir=DIR      the client library (librdmaplane.so.1, and
#                     librdmaplane.so for the linker), DIR/pkgconfig/
#                     rdmaplane.pc, so that
#                       cc app.c $(pkg-config --cflags --libs rdmaplane)
#                     builds a client, and the verbs front end
#                     (librdmaplane-verbs.so, which the installed
#                     rdmaplane-run preloads: docs/verbs.md); default
#                     PREFIX/lib, and /usr/lib/<multiarch triplet> (such as
#                     /usr/lib/x86_64-linux-gnu, from dpkg-architecture or
#                     gcc -print-multiarch) when PREFIX is /usr
#   --pkglibdir=DIR   the verbs front end alone (librdmaplane-verbs.so:
#                     nothing links it, rdmaplane-run preloads it), e.g.
#                     LIBDIR/rdmaplane as the Debian package has it;
#                     default LIBDIR
#   --mandir=DIR      the manual pages, compressed with gzip -9n as Debian
#                     does, in DIR/man1, man3, man7 and man8; default
#                     PREFIX/share/man
#   --docdir=DIR      README.md and docs/*.md (as DIR/docs/*.md); default
#                     PREFIX/share/doc/rdmaplane
#   --sysconfdir=DIR  DIR/rdmaplane/rdmaplaned.conf and
#                     DIR/systemd/system/rdmaplaned.service; default /etc
#   --destdir=DIR     stage everything under DIR (for packaging); the unit,
#                     rdmaplane.pc and rdmaplane-run still name the final
#                     paths. The environment's DESTDIR does the same;
#                     --destdir wins
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
libdir=""
pkglibdir=""
mandir=""
docdir=""
sysconfdir=/etc
destdir="${DESTDIR:-}"
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
    --prefix=* | --libdir=* | --pkglibdir=* | --mandir=* | --docdir=* | --sysconfdir=* | --destdir=* | --binaries=*)
      value="${opt#*=}"
      opt="${opt%%=*}"
      ;;
    --prefix | --libdir | --pkglibdir | --mandir | --docdir | --sysconfdir | --destdir | --binaries)
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
    --libdir) libdir="$value" ;;
    --pkglibdir) pkglibdir="$value" ;;
    --mandir) mandir="$value" ;;
    --docdir) docdir="$value" ;;
    --sysconfdir) sysconfdir="$value" ;;
    --destdir) destdir="$value" ;;
    --binaries) binaries="$value" ;;
  esac
done

# Debian's multiarch triplet (x86_64-linux-gnu), or nothing.
multiarch() {
  local triplet=""
  if command -v dpkg-architecture >/dev/null 2>&1; then
    triplet="$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null)" || triplet=""
  fi
  if [[ -z $triplet ]] && command -v gcc >/dev/null 2>&1; then
    triplet="$(gcc -print-multiarch 2>/dev/null)" || triplet=""
  fi
  [[ $triplet =~ ^[A-Za-z0-9._+-]+$ ]] && printf '%s' "$triplet"
  return 0
}

# These paths are written into the unit file (which splits on blanks and
# expands '%' and '$'), rdmaplane.pc and rdmaplane-run, so they are kept to
# plain characters.
[[ -z $destdir || $destdir == /* ]] || die "--destdir (or DESTDIR) must be an absolute path, got '$destdir'"
for dir in "$prefix" "$sysconfdir"; do
  [[ $dir =~ ^/[A-Za-z0-9._/+-]*$ ]] \
    || die "--prefix and --sysconfdir must be absolute paths of letters, digits and ._+-/, got '$dir'"
done
prefix="${prefix%/}"
sysconfdir="${sysconfdir%/}"
[[ -n $prefix ]] || prefix=/
[[ -n $sysconfdir ]] || sysconfdir=/
if [[ -z $libdir ]]; then
  libdir="${prefix%/}/lib"
  if [[ $prefix == /usr ]] && triplet="$(multiarch)" && [[ -n $triplet ]]; then
    libdir="/usr/lib/$triplet"
  fi
fi
[[ -n $pkglibdir ]] || pkglibdir="$libdir"
[[ -n $mandir ]] || mandir="${prefix%/}/share/man"
[[ -n $docdir ]] || docdir="${prefix%/}/share/doc/rdmaplane"
for dir in "$libdir" "$pkglibdir" "$mandir" "$docdir"; do
  [[ $dir =~ ^/[A-Za-z0-9._/+-]*[A-Za-z0-9._+-]/*$ ]] \
    || die "--libdir, --pkglibdir, --mandir and --docdir must be absolute paths of letters, digits and ._+-/ (not /), got '$dir'"
done
# ... without the slashes they may end in.
trim() {
  local dir="$1"
  while [[ $dir == */ ]]; do dir="${dir%/}"; done
  printf '%s' "$dir"
}
libdir="$(trim "$libdir")"
pkglibdir="$(trim "$pkglibdir")"
mandir="$(trim "$mandir")"
docdir="$(trim "$docdir")"

# Final locations (as the unit, rdmaplane.pc and rdmaplane-run name them) ...
sbindir="${prefix%/}/sbin"
bindir="${prefix%/}/bin"
libexecdir="${prefix%/}/libexec/rdmaplane"
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

# install_gzip SRC DEST: DEST is SRC compressed with gzip -9n (no name or
# time stamp in it, so the same page gives the same bytes), mode 0644.
install_gzip() {
  if $dry_run; then
    printf 'install: would write %s with gzip -9n of %s\n' "$2" "$1"
  else
    gzip -9n -c -- "$1" >"$2"
    chmod 0644 "$2"
  fi
}

# The files this script installs from the source tree.
unit_src="$REPO_ROOT/deploy/rdmaplaned.service"
conf_src="$REPO_ROOT/deploy/rdmaplaned.conf"
hugepages_src="$REPO_ROOT/deploy/reserve-hugepages.sh"
header_src="$REPO_ROOT/api/rdmaplane.h"
pc_src="$REPO_ROOT/api/rdmaplane.pc.in"
run_src="$REPO_ROOT/deploy/rdmaplane-run"
# The manual pages (man/manN/*.N) and the documentation.
man_srcs=()
for section in 1 3 7 8; do
  for f in "$REPO_ROOT/man/man$section"/*."$section"; do
    [[ -f $f ]] && man_srcs+=("$f")
  done
done
doc_srcs=("$REPO_ROOT/README.md" "$REPO_ROOT"/docs/*.md)
for f in "$unit_src" "$conf_src" "$hugepages_src" "$header_src" "$pc_src" "$run_src" \
  "$REPO_ROOT/man/man8/rdmaplaned.8" "$REPO_ROOT/man/man3/rdmaplane.h.3" \
  "$REPO_ROOT/docs/operations.md" "${doc_srcs[@]}"; do
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
  for dir in "$sbindir" "$libdir" "$pkglibdir" "$mandir" "$docdir" "$unitdir"; do
    parent="$dir"
    while [[ ! -e $parent ]]; do parent="$(dirname "$parent")"; done
    [[ -w $parent ]] || die "cannot write to $dir: run as root (sudo $0 ...), or use --prefix/--libdir/--mandir/--docdir/--sysconfdir/--destdir"
  done
fi

log "installing binaries to $(stage "$sbindir") and $(stage "$bindir")"
run install -d -m 0755 "$(stage "$sbindir")" "$(stage "$bindir")" "$(stage "$libexecdir")"
run install -m 0755 "$bin_src/rdmaplaned" "$(stage "$sbindir")/rdmaplaned"
run install -m 0755 "$bin_src/rdmaplanectl" "$(stage "$bindir")/rdmaplanectl"
run install -m 0755 "$run_src" "$(stage "$bindir")/rdmaplane-run"
# rdmaplane-run finds the verbs front end where --pkglibdir (by default
# --libdir) puts it: its folder relative to bindir (so that a staged or
# moved tree finds its own copy) and the absolute one are written into the
# installed script.
libdir_from_bindir="$(realpath -m -s --relative-to="$bindir" "$pkglibdir")"
run sed -i -e "s#^installed_libdir_relative=\"\"\$#installed_libdir_relative=\"$libdir_from_bindir\"#" \
  -e "s#^installed_libdir=\"\"\$#installed_libdir=\"$pkglibdir\"#" "$(stage "$bindir")/rdmaplane-run"
if ! $dry_run && ! {
  grep -qxF "installed_libdir=\"$pkglibdir\"" "$(stage "$bindir")/rdmaplane-run" \
    && grep -qxF "installed_libdir_relative=\"$libdir_from_bindir\"" "$(stage "$bindir")/rdmaplane-run"
}; then
  die "could not write the library folder into $(stage "$bindir")/rdmaplane-run (its installed_libdir lines changed?)"
fi
run install -m 0755 "$hugepages_src" "$(stage "$libexecdir")/reserve-hugepages.sh"

log "installing the client library to $(stage "$libdir"), rdmaplane.h to $(stage "$includedir")"
run install -d -m 0755 "$(stage "$libdir")" "$(stage "$includedir")" "$(stage "$pkgconfigdir")"
run install -m 0755 "$lib_src/librdmaplane.so.1" "$(stage "$libdir")/librdmaplane.so.1"
run ln -sfn librdmaplane.so.1 "$(stage "$libdir")/librdmaplane.so"
run install -m 0644 "$header_src" "$(stage "$includedir")/rdmaplane.h"
# The verbs front end: no soname version and no link; only preloaded, by
# $bindir/rdmaplane-run, which has $pkglibdir written in (above).
log "installing the verbs front end to $(stage "$pkglibdir")/librdmaplane-verbs.so"
run install -d -m 0755 "$(stage "$pkglibdir")"
run install -m 0755 "$verbs_src/librdmaplane-verbs.so" "$(stage "$pkglibdir")/librdmaplane-verbs.so"
# The .pc file names the final prefix and libdir (not the staging
# directory); a libdir under the prefix as ${prefix}/....
pc_libdir="$libdir"
if [[ $prefix != / && $libdir == "$prefix"/* ]]; then
  pc_libdir="\${prefix}${libdir#"$prefix"}"
fi
write_file "$(stage "$pkgconfigdir")/rdmaplane.pc" \
  "$(sed -e "s#@prefix@#${prefix}#g" -e "s#@libdir@#${pc_libdir}#g" "$pc_src")" \
  "prefix=$prefix, libdir=$pc_libdir"

# The manual pages, as Debian ships them: gzip -9n. The link pages of
# man3 (".so man3/rdmaplane.h.3") are compressed too; man finds the page
# they name whether it is compressed or not.
log "installing the manual pages to $(stage "$mandir")"
for section in 1 3 7 8; do
  run install -d -m 0755 "$(stage "$mandir")/man$section"
done
for f in "${man_srcs[@]}"; do
  section="${f##*.}"
  install_gzip "$f" "$(stage "$mandir")/man$section/$(basename "$f").gz"
done

log "installing the documentation to $(stage "$docdir")"
run install -d -m 0755 "$(stage "$docdir")" "$(stage "$docdir")/docs"
run install -m 0644 "$REPO_ROOT/README.md" "$(stage "$docdir")/README.md"
for f in "$REPO_ROOT"/docs/*.md; do
  run install -m 0644 "$f" "$(stage "$docdir")/docs/$(basename "$f")"
done

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
  Manual pages: man rdmaplaned (and rdmaplanectl, rdmaplane-run,
  rdmaplane.h, rdmaplane), in $mandir (add it to MANPATH
  if man does not look there); the guides are in $docdir.
EOF
