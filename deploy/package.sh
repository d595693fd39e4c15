#!/usr/bin/env bash
# Builds the Debian package rdmaplane_<version>_<arch>.deb with Debian's own
# tools (dpkg-deb, dpkg-shlibdeps; lintian checks it when installed):
#
#   deploy/package.sh                          # build with Bazel, write dist/
#   sudo apt-get install ./dist/rdmaplane_*.deb
#
# Options (all also accept "--option VALUE"):
#   --out=DIR         where the .deb goes (default: dist/ in the source tree)
#   --binaries=DIR    package DIR/rdmaplaned, DIR/rdmaplanectl,
#                     DIR/librdmaplane.so.1 and DIR/librdmaplane-verbs.so (or
#                     Bazel's layout, as deploy/install.sh --binaries takes
#                     it) instead of building them
#   --no-lintian      do not run lintian
#   -h, --help        this text
#
# The package is staged by deploy/install.sh (--prefix=/usr, so the
# libraries land in /usr/lib/<multiarch triplet>) and holds:
#   /usr/sbin/rdmaplaned, /usr/bin/rdmaplanectl, /usr/bin/rdmaplane-run,
#   /usr/libexec/rdmaplane/reserve-hugepages.sh;
#   librdmaplane.so.1 (and the link librdmaplane.so) and
#   pkgconfig/rdmaplane.pc in /usr/lib/<triplet>, the verbs front end in
#   /usr/lib/<triplet>/rdmaplane/librdmaplane-verbs.so (a preloaded plugin,
#   not a library to link), /usr/include/rdmaplane.h;
#   the unit /lib/systemd/system/rdmaplaned.service, the conffile
#   /etc/rdmaplane/rdmaplaned.conf (local clients only until a data port is
#   set), /usr/lib/sysusers.d/rdmaplane.conf (the group rdmaplane) and
#   /usr/lib/tmpfiles.d/rdmaplane.conf (/run/rdmaplane);
#   the manual pages, README.md and docs/ in /usr/share/doc/rdmaplane, with
#   copyright and changelog.gz.
# Binaries are stripped (their symbols are not shipped). Depends is what
# dpkg-shlibdeps finds the binaries need. The maintainer scripts
# (deploy/debian/) create the group and the folder, enable the unit and,
# where systemd runs, start it, in the way debhelper's dh_installsystemd
# does; the packaged unit reserves no hugepages.
#
# The code is built for -march=x86-64-v2 (.bazelrc), so the package runs on
# any x86-64 CPU since about 2009. The version is `rdmaplaned --version`'s
# followed by +git<commit date>.<commit> (dpkg sorts later builds higher);
# the dates in the package are the commit's (SOURCE_DATE_EPOCH when set), so
# the same tree gives the same package.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEBIAN_SRC="$REPO_ROOT/deploy/debian"

out="$REPO_ROOT/dist"
binaries=""
lintian=true

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }
die() {
  printf 'package: error: %s\n' "$*" >&2
  exit 2
}
log() { printf 'package: %s\n' "$*"; }

while [[ $# -gt 0 ]]; do
  opt="$1"
  shift
  case "$opt" in
    --out=* | --binaries=*)
      value="${opt#*=}"
      opt="${opt%%=*}"
      ;;
    --out | --binaries)
      [[ $# -gt 0 ]] || die "$opt needs a value"
      value="$1"
      shift
      ;;
    --no-lintian)
      lintian=false
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
    --out) out="$value" ;;
    --binaries) binaries="$value" ;;
  esac
done

for tool in dpkg-deb dpkg-shlibdeps dpkg-architecture strip gzip; do
  command -v "$tool" >/dev/null 2>&1 \
    || die "$tool not found: run deploy/setup.sh (it installs dpkg-dev and binutils)"
done
arch="$(dpkg-architecture -qDEB_HOST_ARCH)"
triplet="$(dpkg-architecture -qDEB_HOST_MULTIARCH)"

# --- The binaries ------------------------------------------------------------
if [[ -z $binaries ]]; then
  command -v bazel >/dev/null 2>&1 || die "bazel not found: run deploy/setup.sh first"
  # The configuration the test suite builds and runs (.bazelrc: -O2,
  # -march=x86-64-v2): the package ships what was tested.
  log "building in $REPO_ROOT"
  (cd "$REPO_ROOT" && bazel build //control:rdmaplaned //control:rdmaplanectl \
    //api:librdmaplane.so.1 //api/verbs:librdmaplane-verbs.so)
  binaries="$REPO_ROOT/bazel-bin/control"
fi
[[ -x $binaries/rdmaplaned ]] || die "no rdmaplaned in $binaries"

version_line="$("$binaries/rdmaplaned" --version)" || die "$binaries/rdmaplaned --version failed"
upstream="${version_line#rdmaplaned }"
[[ $upstream =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] \
  || die "rdmaplaned --version printed '$version_line', not 'rdmaplaned X.Y.Z'"

work="$(mktemp -d)"
trap 'rm -rf -- "$work"' EXIT
stage="$work/root"
mkdir -p "$stage"

# --- Stage -------------------------------------------------------------------
log "staging rdmaplane $upstream ($arch) in $stage"
DESTDIR="$stage" "$REPO_ROOT/deploy/install.sh" --prefix=/usr --sysconfdir=/etc \
  --libdir="/usr/lib/$triplet" --pkglibdir="/usr/lib/$triplet/rdmaplane" \
  --binaries="$binaries" >"$work/install.log" \
  || {
    cat "$work/install.log" >&2
    die "deploy/install.sh could not stage the files"
  }

# Debian keeps packaged units in /lib/systemd/system (bookworm);
# /etc/systemd/system is the administrator's. The package starts the
# service at installation, so its unit reserves no hugepages unasked (the
# reservation would outlive the package): `systemctl edit rdmaplaned` sets
# RDMAPLANE_RESERVE_HUGEPAGES where clients want them.
install -d -m 0755 "$stage/lib/systemd/system"
sed -e 's/^Environment=RDMAPLANE_RESERVE_HUGEPAGES=[0-9]*$/Environment=RDMAPLANE_RESERVE_HUGEPAGES=0/' \
  "$stage/etc/systemd/system/rdmaplaned.service" >"$stage/lib/systemd/system/rdmaplaned.service"
chmod 0644 "$stage/lib/systemd/system/rdmaplaned.service"
grep -qx 'Environment=RDMAPLANE_RESERVE_HUGEPAGES=0' "$stage/lib/systemd/system/rdmaplaned.service" \
  || die "the unit has no Environment=RDMAPLANE_RESERVE_HUGEPAGES= line to set to 0"
rm "$stage/etc/systemd/system/rdmaplaned.service"
rmdir "$stage/etc/systemd/system" "$stage/etc/systemd"

install -d -m 0755 "$stage/usr/lib/sysusers.d" "$stage/usr/lib/tmpfiles.d"
install -m 0644 "$DEBIAN_SRC/rdmaplane.sysusers" "$stage/usr/lib/sysusers.d/rdmaplane.conf"
install -m 0644 "$DEBIAN_SRC/rdmaplane.tmpfiles" "$stage/usr/lib/tmpfiles.d/rdmaplane.conf"
install -d -m 0755 "$stage/usr/share/lintian/overrides"
install -m 0644 "$DEBIAN_SRC/lintian-overrides" "$stage/usr/share/lintian/overrides/rdmaplane"

# Strip as dh_strip does: the debugging symbols are not shipped.
strip --remove-section=.comment --remove-section=.note \
  "$stage/usr/sbin/rdmaplaned" "$stage/usr/bin/rdmaplanectl"
libs=("$stage/usr/lib/$triplet/librdmaplane.so.1" "$stage/usr/lib/$triplet/rdmaplane/librdmaplane-verbs.so")
strip --strip-unneeded --remove-section=.comment --remove-section=.note "${libs[@]}"
# Shared libraries that are not programs are not executable (Debian policy
# 8.1, lintian's shared-library-is-executable).
chmod 0644 "${libs[@]}"

# The package's own documents: copyright and the changelog, dated by the
# last commit.
maintainer="${RDMAPLANE_MAINTAINER:-rdmaplane maintainers <rdmaplane@example.org>}"
homepage="${RDMAPLANE_HOMEPAGE:-https://rdmaplane.example.org/}"
# Both are written into control files by sed: plain characters only.
[[ $maintainer =~ ^[A-Za-z0-9\ ._+@\<\>-]+$ ]] \
  || die "RDMAPLANE_MAINTAINER must be 'Name <address>' of letters, digits, blanks and ._+@-"
[[ $homepage =~ ^https?://[A-Za-z0-9._/~:+-]+$ ]] \
  || die "RDMAPLANE_HOMEPAGE must be an http(s) address of letters, digits and ._/~:+-"
# Every build its own version, later builds sorting higher: the daemon's
# version, then the commit's date and hash (a tree without git: the time of
# the build), so that apt-get installs a new build over an old one.
# Only a tree that is the top of a git checkout of its own: under Bazel
# this script runs from a runfiles tree, where git would answer for
# whatever checkout encloses Bazel's output base.
commit=""
if [[ $(git -C "$REPO_ROOT" rev-parse --show-toplevel 2>/dev/null) == "$REPO_ROOT" ]]; then
  commit="$(git -C "$REPO_ROOT" rev-parse --short=12 HEAD 2>/dev/null)" || commit=""
fi
if [[ -z ${SOURCE_DATE_EPOCH:-} ]]; then
  SOURCE_DATE_EPOCH=""
  if [[ -n $commit ]]; then
    SOURCE_DATE_EPOCH="$(git -C "$REPO_ROOT" log -1 --format=%ct 2>/dev/null)" || SOURCE_DATE_EPOCH=""
  fi
  [[ -n $SOURCE_DATE_EPOCH ]] || SOURCE_DATE_EPOCH="$(date +%s)"
fi
export SOURCE_DATE_EPOCH
stamp="$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y%m%d.%H%M%S)"
if [[ -n $commit ]]; then
  version="$upstream+git$stamp.$commit"
  # Changes not committed yet: the commit alone does not say what is in it.
  if [[ -n $(git -C "$REPO_ROOT" status --porcelain --untracked-files=no 2>/dev/null) ]]; then
    version="$version.dirty"
  fi
else
  version="$upstream+$stamp"
  commit="unknown"
fi
docdir="$stage/usr/share/doc/rdmaplane"
year="$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y)"
sed -e "s|@MAINTAINER@|$maintainer|g" -e "s|@HOMEPAGE@|$homepage|g" -e "s|@YEAR@|$year|g" \
  "$DEBIAN_SRC/copyright.in" >"$docdir/copyright"
chmod 0644 "$docdir/copyright"
{
  printf 'rdmaplane (%s) unstable; urgency=medium\n\n' "$version"
  printf '  * rdmaplane %s, built from commit %s.\n\n' "$upstream" "$commit"
  printf ' -- %s  %s\n' "$maintainer" "$(LC_ALL=C date -u -R -d "@$SOURCE_DATE_EPOCH")"
} | gzip -9n >"$docdir/changelog.gz"
chmod 0644 "$docdir/changelog.gz"

# --- Control files -----------------------------------------------------------
control="$stage/DEBIAN"
install -d -m 0755 "$control"
for script in postinst prerm postrm; do
  install -m 0755 "$DEBIAN_SRC/$script" "$control/$script"
done
printf '/etc/rdmaplane/rdmaplaned.conf\n' >"$control/conffiles"
# Programs linking librdmaplane.so.1 depend on this package.
printf 'librdmaplane 1 rdmaplane (>= %s)\n' "$upstream" >"$control/shlibs"
printf 'activate-noawait ldconfig\n' >"$control/triggers"
chmod 0644 "$control/conffiles" "$control/shlibs" "$control/triggers"

# Depends: the shared libraries the binaries load, as dpkg-shlibdeps finds
# them (it wants a debian/control to read; a minimal one does).
mkdir -p "$work/src/debian"
printf 'Source: rdmaplane\n\nPackage: rdmaplane\nArchitecture: any\n' >"$work/src/debian/control"
shlibs="$(cd "$work/src" && dpkg-shlibdeps -O -l"$stage/usr/lib/$triplet" \
  -e"$stage/usr/sbin/rdmaplaned" -e"$stage/usr/bin/rdmaplanectl" \
  -e"$stage/usr/lib/$triplet/librdmaplane.so.1" \
  -e"$stage/usr/lib/$triplet/rdmaplane/librdmaplane-verbs.so" 2>"$work/shlibdeps.err")" || {
  cat "$work/shlibdeps.err" >&2
  die "dpkg-shlibdeps failed"
}
depends="${shlibs#shlibs:Depends=}"
[[ -n $depends && $depends != "$shlibs" ]] || die "dpkg-shlibdeps printed no Depends: $shlibs"
# DPDK's drivers are plugins its EAL loads at start, unseen by
# dpkg-shlibdeps: the virtual devices docs/operations.md describes (memif,
# af_packet, af_xdp on the vdev bus, with the ring mempool) are depended
# on, the drivers of physical NICs (Debian's librte-net-*, all of them with
# its "dpdk" package) recommended. deb-systemd-helper and
# deb-systemd-invoke run in the maintainer scripts.
dpdk_abi="$(sed -n 's/^librte-eal\([0-9][0-9]*\) .*/\1/p' <<<"${depends//, /$'\n'}")"
[[ -n $dpdk_abi ]] || die "the binaries do not depend on DPDK's EAL (librte-eal<ABI>): $depends"
for driver in bus-vdev mempool-ring net-memif net-af-packet net-af-xdp; do
  depends="$depends, librte-$driver$dpdk_abi"
done
depends="$depends, init-system-helpers (>= 1.54~)"
recommends="librte-bus-pci$dpdk_abi, dpdk"
log "Depends: $depends"

installed_size="$(du -sk --apparent-size --exclude=DEBIAN "$stage" | cut -f1)"
sed -e "s|@VERSION@|$version|" -e "s|@ARCH@|$arch|" -e "s|@MAINTAINER@|$maintainer|" \
  -e "s|@INSTALLED_SIZE@|$installed_size|" -e "s|@DEPENDS@|$depends|" \
  -e "s|@HOMEPAGE@|$homepage|" -e "s|@RECOMMENDS@|$recommends|" \
  "$DEBIAN_SRC/control.in" >"$control/control"
chmod 0644 "$control/control"
(cd "$stage" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z \
  | xargs -0 md5sum) >"$control/md5sums"
chmod 0644 "$control/md5sums"

# Every file and folder's time is the commit's; modes as install.sh made
# them, owners root (dpkg-deb --root-owner-group).
find "$stage" -newermt "@$SOURCE_DATE_EPOCH" -exec touch --no-dereference -d "@$SOURCE_DATE_EPOCH" {} +

# --- Build and check ---------------------------------------------------------
mkdir -p "$out"
deb="$out/rdmaplane_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
log "wrote $deb ($(du -k "$deb" | cut -f1) KiB)"
if $lintian; then
  if command -v lintian >/dev/null 2>&1; then
    log "lintian $deb"
    # Every tag, the overridden ones with their reasons; lintian's exit
    # status counts overridden tags too, so the verdict is a second run's.
    lintian --display-info --show-overrides "$deb" || true
    lintian_status=0
    lintian --fail-on error,warning "$deb" >/dev/null || lintian_status=$?
    ((lintian_status == 0)) || die "lintian found errors or warnings (above)"
    log "lintian: no error or warning (overrides, each with its reason: deploy/debian/lintian-overrides)"
  else
    log "lintian is not installed (deploy/setup.sh installs it): not checked"
  fi
fi
