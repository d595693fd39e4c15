#!/usr/bin/env bash
# Entry point of the rdmaplaned container image (deploy/Containerfile): turns
# the node's data interface, given by environment, into rdmaplaned's --port
# and --ip, so that one configuration (a Kubernetes ConfigMap) serves every
# node although each node has its own address.
#
#   RDMAPLANE_IFACE   the node's data interface, e.g. eth1 (required unless
#                     RDMAPLANE_PORT is set)
#   RDMAPLANE_DRIVER  af_packet (default) or af_xdp
#   RDMAPLANE_PORT    a complete --port value; overrides IFACE and DRIVER
#   RDMAPLANE_IP      the data address; default: the interface's first IPv4
#                     address (the kernel keeps its address: both answer ARP
#                     with the same MAC, and the daemon takes the RoCEv2
#                     traffic, UDP port 4791)
#   RDMAPLANE_CONF    flagfile read first, when it exists
#                     (default /etc/rdmaplane/rdmaplaned.conf)
#   RDMAPLANED        the daemon (default /usr/local/sbin/rdmaplaned)
#
# Arguments are passed to rdmaplaned last, so they override everything.
set -euo pipefail

die() {
  printf 'rdmaplaned-container: %s\n' "$*" >&2
  exit 2
}

daemon="${RDMAPLANED:-/usr/local/sbin/rdmaplaned}"
conf="${RDMAPLANE_CONF:-/etc/rdmaplane/rdmaplaned.conf}"
iface="${RDMAPLANE_IFACE:-}"
driver="${RDMAPLANE_DRIVER:-af_packet}"
port="${RDMAPLANE_PORT:-}"
ip="${RDMAPLANE_IP:-}"

args=()
if [[ -f $conf ]]; then
  args+=("--flagfile=$conf")
fi

if [[ -z $port ]]; then
  [[ -n $iface ]] || die "set RDMAPLANE_IFACE to the node's data interface (or RDMAPLANE_PORT)"
  [[ $iface =~ ^[A-Za-z0-9_.:-]{1,15}$ ]] || die "RDMAPLANE_IFACE '$iface' is not an interface name"
  case "$driver" in
    af_packet | af_xdp) port="net_${driver}0,iface=${iface}" ;;
    *) die "RDMAPLANE_DRIVER must be af_packet or af_xdp, got '$driver'" ;;
  esac
fi
args+=("--port=$port")

if [[ -z $ip ]]; then
  [[ -n $iface ]] || die "set RDMAPLANE_IP (no RDMAPLANE_IFACE to take the address from)"
  # "2: eth1    inet 198.51.100.1/24 brd 198.51.100.255 scope global eth1 ..."
  ip="$(ip -4 -o addr show dev "$iface" scope global 2>/dev/null \
    | awk '$3 == "inet" { sub(/\/.*/, "", $4); print $4; exit }')" || true
  [[ -n $ip ]] || die "interface $iface has no IPv4 address; set RDMAPLANE_IP"
fi
args+=("--ip=$ip")

printf 'rdmaplaned-container: %s' "$daemon" >&2
printf ' %s' "${args[@]}" "$@" >&2
printf '\n' >&2
exec "$daemon" "${args[@]}" "$@"
