#!/usr/bin/env bash
# Reserves 2 MiB hugepages for rdmaplane before the daemon starts.
#
#   reserve-hugepages.sh N      # N: pages of 2 MiB, e.g. 512 for 1 GiB
#
# Raises /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages to N when it is
# lower, never lowers it (other programs may be using pages), and prints what
# the kernel actually granted: it gives fewer when memory is fragmented.
#
# Exits 0 whenever N is a number, even when fewer pages were granted or the
# file cannot be read or written (a read-only /sys in a container, no hugetlb
# support, not root): rdmaplaned runs without hugepages (its --hugepages flag
# is off by default) and clients fall back to regular pages. Exits 2 only for
# a usage error.
#
# RDMAPLANE_HUGEPAGES_SYSFS names another file to use instead (for tests).
set -euo pipefail

readonly SYSFS="${RDMAPLANE_HUGEPAGES_SYSFS:-/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages}"

say() { printf 'reserve-hugepages: %s\n' "$*"; }

# At most 9 digits: shell arithmetic stays far from overflow, and 10^9 pages
# (2 PB) is more than any machine has.
if [[ $# -ne 1 || ! $1 =~ ^[0-9]{1,9}$ ]]; then
  echo "usage: reserve-hugepages.sh N   (N: number of 2 MiB pages, 0..999999999)" >&2
  exit 2
fi
want=$((10#$1))

# Prints the page count in $SYSFS; fails when it cannot be read as a number.
# head -c: a wrong path (a device, a huge file) must not hang or flood us.
read_count() {
  local text
  text="$(head -c 32 -- "$SYSFS" 2>/dev/null)" || return 1
  text="${text//[[:space:]]/}"
  [[ $text =~ ^[0-9]+$ ]] || return 1
  printf '%s' "$text"
}

if ! have="$(read_count)"; then
  say "cannot read $SYSFS (no 2 MiB hugepage support here?); nothing reserved, rdmaplaned runs without hugepages"
  exit 0
fi

if ((have >= want)); then
  say "$have pages of 2 MiB reserved already (asked for $want); left as they are"
  exit 0
fi

# Root passes the permission bits of a read-only sysfs file ([[ -w ]] says
# yes), but the kernel still refuses the write: only trying tells.
if ! { printf '%s\n' "$want" >"$SYSFS"; } 2>/dev/null; then
  say "cannot write $SYSFS (read-only /sys or not root); keeping $have pages of 2 MiB"
  exit 0
fi

if ! got="$(read_count)"; then
  say "wrote $want to $SYSFS but cannot read it back"
  exit 0
fi
if ((got >= want)); then
  say "reserved $got pages of 2 MiB ($((got * 2)) MiB)"
else
  say "asked for $want pages of 2 MiB, the kernel gave $got ($((got * 2)) MiB): memory is too fragmented; reserve them at boot instead (hugepages=$want on the kernel command line, or vm.nr_hugepages=$want in /etc/sysctl.d/)"
fi
exit 0
