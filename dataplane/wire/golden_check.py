#!/usr/bin/python3
"""Checks rdmaplane's golden RoCEv2 frames with decoders written by others.

The frames come from the C++ codecs (golden_frames writes a pcap file and a
JSON file with the field values each frame was built from): RC, UC and UD
frames ("kind": "roce"), CM MADs in UD datagrams to QP1 ("kind": "cm"; of
rdmaplane's native connections or, "service": "ip_cm", of the RDMA IP CM
Service of IBA Annex A11 as Linux's rdma_cm speaks it) and ARP ("kind":
"arp"); or from a conversation two queue pairs really had
(dataplane/rc's conversation_frames, the same format, RC frames only). Two
modes:

  golden_check.py scapy  FRAMES.pcap FRAMES.json [--set=golden|conversation]
      Decodes every frame with scapy (scapy.contrib.roce for RoCE, with RETH
      and DETH layers defined here) and compares the fields; the extension
      headers scapy has no layer for (AtomicETH, AtomicAckETH, IETH, ImmDt)
      are packed here with struct from the expected fields and compared byte
      for byte, never taken from the C++ encoder; recomputes the ICRC with
      scapy, and once more the way Linux rxe does (raw CRC register,
      seed 0xdebb20e3), and compares both with the frame's last four bytes;
      rebuilds each frame from the expected fields with scapy (which computes
      the IPv4 checksum and the ICRC itself) and requires the result to equal
      our frame byte for byte. The MAD of a CM frame is rebuilt here from the
      expected fields at the offsets of IBA vol. 1 tables 106-115, the IP CM
      header of a REQ or SIDR REQ as Linux's struct cma_hdr lays it out.

  golden_check.py tshark FRAMES.pcap FRAMES.json [--set=golden|conversation]
      Decodes the pcap with tshark, requires every RoCE frame to be dissected
      as InfiniBand with the expected BTH, RETH, AETH, DETH, ImmDt, AtomicETH,
      AtomicAckETH and IETH fields (tshark -V's lines for them too; an opcode
      Wireshark 4.0 does not know, with its BTH and the bytes after it as
      unknown data), every
      CM frame with the expected DETH, MAD header and CM message fields
      (an IP CM REQ's header and consumer data as tshark's IP CM fields;
      tshark 4.0 has no SIDR dissector, so a SIDR message's MAD header and
      undissected data only),
      every ARP frame with the expected ARP fields, no frame to be malformed
      or to have an expert-info warning, and checks that the expert-info
      check does flag a deliberately truncated frame. Then checks, from
      tshark's decoding alone, the rules a hardware peer expects of the
      conversation (check_rc_rules, check_cm_rules): AckReq on READ
      requests, MSNs that never go back, read responses in order, NAK
      "invalid request" for opcodes rdmaplane does not serve and silence
      after it (other peers, which serve them, answer atomics with ATOMIC
      ACKNOWLEDGE), no answer to another partition, CM transaction ids
      and REQ values as Linux's CM gives them, IP CM headers that name the
      frame's own addresses and SIDR answers as librdmacm expects them.

The golden set (the default) must hold every opcode with an extension
header that rdmaplane's codec reads (RC, one UC WRITE, both UD opcodes),
every CM message of the native connections and of the IP CM Service (SIDR
REQ and SIDR REP included, and REJs both for a port nobody listens on and
from the application) and both ARP operations; a conversation need not.
Exits non-zero with a message on the first kind of failure found; prints
every mismatch. Run with Debian's /usr/bin/python3 (python3-scapy).
"""

import ipaddress
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

TSHARK = "/usr/bin/tshark"
ROCE_UDP_PORT = 4791
ETH_LEN, IP_LEN, UDP_LEN, BTH_LEN, RETH_LEN, AETH_LEN, ICRC_LEN = (
    14, 20, 8, 12, 16, 4, 4)
OUTER_LEN = ETH_LEN + IP_LEN + UDP_LEN

# RC opcodes whose packets carry a RETH or an AETH (IBTA vol. 1, 9.3).
RETH_OPCODES = (0x06, 0x0A, 0x0C)
AETH_OPCODES = (0x0D, 0x0F, 0x10, 0x11, 0x12)
# The other extension headers: AtomicETH (28 bytes: VA, R_Key, swap or add
# data, compare data), AtomicAckETH after the AETH (8 bytes: the original
# remote data), IETH (4 bytes: the R_Key to invalidate), ImmDt (4 bytes).
ATOMIC_ETH_LEN, ATOMIC_ACK_ETH_LEN, IETH_LEN, IMMDT_LEN = 28, 8, 4, 4
ATOMIC_ACKNOWLEDGE = 0x12
IETH_OPCODES = (0x16, 0x17)
# UC (transport bits 001) has RC's SENDs and WRITEs; UD (011) SEND ONLY with
# and without immediate data, after a DETH.
UC_WRITE_ONLY = 0x2A
UD_OPCODES = (0x64, 0x65)
# How tshark names each transport in the opcode line, by the opcode's top
# three bits.
TRANSPORT_LABELS = {0: "Reliable Connection (RC)",
                    1: "Unreliable Connection (UC)",
                    3: "Unreliable Datagram (UD)"}
# The RC opcodes rdmaplane serves (SEND, WRITE, READ, ACKNOWLEDGE, the
# atomics, ATOMIC ACKNOWLEDGE and SEND with Invalidate); a request with any
# other opcode must be refused with NAK "invalid request".
SUPPORTED_OPCODES = (0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
                     0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F, 0x10, 0x11,
                     0x12, 0x13, 0x14, 0x16, 0x17)
# RC opcodes Wireshark 4.0's InfiniBand dissector does not know: the
# reserved ones, and FLUSH and ATOMIC WRITE (IBA 1.5). It dissects their BTH
# and shows every byte after it, the ICRC included, as "Unknown/Vendor
# Specific Data".
TSHARK_UNKNOWN_OPCODES = (0x15, 0x18, 0x19, 0x1A, 0x1B, 0x1C, 0x1D, 0x1E,
                          0x1F)
READ_REQUEST, ACKNOWLEDGE = 0x0C, 0x11
ATOMIC_OPCODES = (0x13, 0x14)
READ_RESPONSE_FIRST, READ_RESPONSE_MIDDLE = 0x0D, 0x0E
READ_RESPONSE_LAST, READ_RESPONSE_ONLY = 0x0F, 0x10
RESPONSE_OPCODES = (0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x12)
NAK_INVALID_REQUEST = 0x61
# Defined static rate codes (IBA PathRecord Rate): 2 (2.5 Gb/s) .. 22.
DEFINED_RATES = range(2, 23)

# CM over RoCEv2: UD SEND ONLY from QP1 to QP1 with the GSI Q_Key, carrying
# a 256-byte MAD (IBA vol. 1, chapters 12 and 13).
UD_SEND_ONLY = 0x64
GSI_QPN = 1
GSI_QKEY = 0x80010000
DETH_LEN, MAD_LEN, MAD_HDR_LEN = 8, 256, 24
CM_FRAME_LEN = OUTER_LEN + BTH_LEN + DETH_LEN + MAD_LEN + ICRC_LEN
(CM_REQ, CM_MRA, CM_REJ, CM_REP, CM_RTU, CM_DREQ, CM_DREP, CM_SIDR_REQ,
 CM_SIDR_REP) = range(0x10, 0x19)
# Where each message's private data starts in the MAD data (tables 106-115).
CM_PRIVATE_DATA_AT = {CM_REQ: 140, CM_MRA: 10, CM_REJ: 84, CM_REP: 36,
                      CM_RTU: 8, CM_DREQ: 12, CM_DREP: 8, CM_SIDR_REQ: 16,
                      CM_SIDR_REP: 96}
PERMISSIVE_LID = 0xFFFF
DEFAULT_PKEY = 0xFFFF
# How tshark 4.0 labels each CM message. It has no dissector for MRA, nor
# for SIDR REQ and SIDR REP: it names them and shows their MAD header.
CM_LABELS = {CM_REQ: "ConnectRequest",
             CM_MRA: "MsgRcptAck (Dissector Not Implemented)",
             CM_REJ: "ConnectReject", CM_REP: "ConnectReply",
             CM_RTU: "ReadyToUse", CM_DREQ: "DisconnectRequest",
             CM_DREP: "DisconnectReply",
             CM_SIDR_REQ: "ServiceIDResReq (Dissector Not Implemented)",
             CM_SIDR_REP: "ServiceIDResReqResp (Dissector Not Implemented)"}
SIDR_TYPES = (CM_SIDR_REQ, CM_SIDR_REP)
# The messages each CM of the golden set must send: rdmaplane's native
# connections have no SIDR.
NATIVE_CM_TYPES = set(range(CM_REQ, CM_DREP + 1))
IP_CM_TYPES = set(CM_LABELS)
# REJ reasons (IBA 12.6.7) the IP CM Service's golden REJs must show:
# invalid service id (nobody listens on the port) and consumer reject
# (rdma_reject).
REJ_INVALID_SERVICE_ID, REJ_CONSUMER = 8, 28

# The RDMA IP CM Service (IBA Annex A11), as Linux's rdma_cm speaks it:
# service ids 0x0000000001000000 | port space << 16 | port
# (cma_get_service_id; RDMA_PS_TCP 0x0106 for RC, RDMA_PS_UDP 0x0111 for UD
# by SIDR, RDMA_PS_IB 0x013F); a REQ's and SIDR REQ's private data begins
# with a 36-byte header (struct cma_hdr): version 0.0, IP version 4 or 6 in
# the high nibble, the source port, the source and destination addresses.
IP_CM_SERVICE_PREFIX_MASK = 0xFFFFFFFFFF000000
IP_CM_SERVICE_PREFIX = 0x0000000001000000
PS_TCP, PS_UDP, PS_IB = 0x0106, 0x0111, 0x013F
IP_CM_HEADER_LEN = 36
IP_CM_VERSION = (0, 0)  # major, minor: Linux's CMA_VERSION 0x00
IP_CM_IPV4 = 4
# rdmaplane's native connections are a consumer of the IP CM Service: their
# REQs go to RDMA_PS_TCP port 4791, and the consumer data names the service
# ("RDPN", version 1, the name's length, its 64-bit FNV-1a hash, its first
# 42 bytes); a REP's private data is "RDPN", version 1 and the passive
# side's MTU code (docs/transport.md, "Connection manager").
NATIVE_SERVICE_ID = IP_CM_SERVICE_PREFIX | PS_TCP << 16 | 4791
NATIVE_MAGIC, NATIVE_VERSION, NATIVE_NAME_BYTES = b"RDPN", 1, 42
# The Q_Key of librdmacm's UD queue pairs, which a SIDR REP for an
# RDMA_PS_UDP port announces.
RDMA_UDP_QKEY = 0x01234567

ARP_FRAME_LEN = 60
ARP_END = ETH_LEN + 28

# The extension headers of each opcode with a codec (IBA vol. 1, table 38
# and 9.3), by their JSON names, and their lengths; UC's SENDs and WRITEs
# have the headers of RC's. Written here, not taken from the C++ table.
_SEND_WRITE_HEADERS = {
    0x00: (), 0x01: (), 0x02: (), 0x03: ("imm",), 0x04: (), 0x05: ("imm",),
    0x06: ("reth",), 0x07: (), 0x08: (), 0x09: ("imm",), 0x0A: ("reth",),
    0x0B: ("reth", "imm")}
OPCODE_HEADERS = {
    **_SEND_WRITE_HEADERS,
    **{op + 0x20: h for op, h in _SEND_WRITE_HEADERS.items()},
    0x0C: ("reth",), 0x0D: ("aeth",), 0x0E: (), 0x0F: ("aeth",),
    0x10: ("aeth",), 0x11: ("aeth",), 0x12: ("aeth", "atomic_ack_eth"),
    0x13: ("atomic_eth",), 0x14: ("atomic_eth",), 0x16: ("ieth",),
    0x17: ("ieth",), 0x64: ("deth",), 0x65: ("deth", "imm")}
HEADER_LENS = {"reth": RETH_LEN, "aeth": AETH_LEN, "deth": DETH_LEN,
               "atomic_eth": ATOMIC_ETH_LEN,
               "atomic_ack_eth": ATOMIC_ACK_ETH_LEN, "ieth": IETH_LEN,
               "imm": IMMDT_LEN}


def named_headers(e):
    """The extension headers a RoCE frame's JSON fills in."""
    return {h for h in HEADER_LENS
            if (e.get("imm_hex") if h == "imm" else e.get(h)) is not None}


class Mismatches:
    """Collects mismatches so that one run reports all of them."""

    def __init__(self):
        self.errors = []

    def expect(self, frame, what, got, want):
        if got != want:
            self.errors.append(
                f"frame {frame['index']} ({frame['name']}): {what}: "
                f"got {got!r}, want {want!r}")

    def fail(self, frame, message):
        self.errors.append(
            f"frame {frame['index']} ({frame['name']}): {message}")

    def exit_status(self, checker):
        for e in self.errors:
            print(f"FAIL [{checker}] {e}", file=sys.stderr)
        if self.errors:
            print(f"{checker}: {len(self.errors)} mismatches", file=sys.stderr)
            return 1
        return 0


def read_pcap(path):
    """Returns the frames of a classic little-endian pcap file, linktype 1."""
    with open(path, "rb") as f:
        data = f.read()
    magic, major, minor, _, _, _, linktype = struct.unpack_from(
        "<IHHiIII", data, 0)
    if magic != 0xA1B2C3D4 or (major, minor) != (2, 4) or linktype != 1:
        sys.exit(f"{path}: not a little-endian pcap 2.4 Ethernet capture")
    frames, offset = [], 24
    while offset < len(data):
        _, _, caplen, wirelen = struct.unpack_from("<IIII", data, offset)
        offset += 16
        if caplen != wirelen or offset + caplen > len(data):
            sys.exit(f"{path}: bad record header at offset {offset - 16}")
        frames.append(data[offset:offset + caplen])
        offset += caplen
    return frames


def load(pcap_path, json_path, complete):
    """The frames and what each was built from. `complete`: the set must
    hold every opcode with an extension header, every CM message of both
    CMs (the IP CM Service's SIDR REQ and SIDR REP, and its REJs for a port
    nobody listens on and from the application) and both ARP operations
    (the golden set; a captured conversation need not)."""
    frames = read_pcap(pcap_path)
    with open(json_path) as f:
        expected = json.load(f)
    if len(frames) != len(expected) or not frames:
        sys.exit(f"{pcap_path} has {len(frames)} frames, "
                 f"{json_path} describes {len(expected)}")
    for i, e in enumerate(expected):
        e["index"] = i + 1  # pcap frame numbers start at 1
        if len(frames[i]) != e["frame_len"]:
            sys.exit(f"frame {i + 1}: {len(frames[i])} bytes in the pcap, "
                     f"{e['frame_len']} in the JSON")
        kind = e.get("kind")
        if kind == "roce":
            e["payload"] = bytes.fromhex(e["payload_hex"])
            if len(e["payload"]) != e["payload_len"]:
                sys.exit(f"{json_path}: frame {i + 1}: payload_hex has "
                         f"{len(e['payload'])} bytes, payload_len says "
                         f"{e['payload_len']}")
            named = named_headers(e)
            want = OPCODE_HEADERS.get(e["opcode"])
            if want is not None and (
                    named != set(want) or e["header_len"] !=
                    sum(HEADER_LENS[h] for h in want)):
                sys.exit(f"{json_path}: frame {i + 1}: opcode "
                         f"{e['opcode']:#x} with headers {sorted(named)} "
                         f"({e['header_len']} bytes); the IBA says "
                         f"{sorted(want)}")
        elif kind == "cm":
            e["private_data"] = bytes.fromhex(e["private_data_hex"])
            capacity = (MAD_LEN - MAD_HDR_LEN -
                        CM_PRIVATE_DATA_AT.get(e["type"], MAD_LEN))
            if len(e["private_data"]) != capacity:
                sys.exit(f"{json_path}: frame {i + 1}: private data of "
                         f"{len(e['private_data'])} bytes for CM attribute "
                         f"{e['type']:#x}")
            if e["frame_len"] != CM_FRAME_LEN:
                sys.exit(f"frame {i + 1}: a CM frame of {e['frame_len']} "
                         f"bytes, not {CM_FRAME_LEN}")
            check_cm_json(e, json_path)
        elif kind == "arp":
            if e["frame_len"] != ARP_FRAME_LEN:
                sys.exit(f"frame {i + 1}: an ARP frame of {e['frame_len']} "
                         f"bytes, not {ARP_FRAME_LEN}")
        else:
            sys.exit(f"{json_path}: frame {i + 1}: unknown kind {kind!r}")
    if not complete:
        return frames, expected
    opcodes = {e["opcode"] for e in expected if e["kind"] == "roce"}
    missing = set(RETH_OPCODES + AETH_OPCODES + (0x07, 0x08, 0x0E) +
                  ATOMIC_OPCODES + IETH_OPCODES + UD_OPCODES +
                  (UC_WRITE_ONLY,)) - opcodes
    if missing:
        sys.exit(f"no golden frame for opcodes {sorted(missing)}")
    cm = [e for e in expected if e["kind"] == "cm"]
    for service, types in (("native", NATIVE_CM_TYPES),
                           ("ip_cm", IP_CM_TYPES)):
        missing = types - {e["type"] for e in cm if e["service"] == service}
        if missing:
            sys.exit(f"no golden frame for {service} CM attributes "
                     f"{[hex(t) for t in sorted(missing)]}")
    missing = {REJ_INVALID_SERVICE_ID, REJ_CONSUMER} - {
        e["reject_reason"] for e in cm
        if e["service"] == "ip_cm" and e["type"] == CM_REJ}
    if missing:
        sys.exit(f"no golden IP CM REJ with reason {sorted(missing)}")
    if {e["op"] for e in expected if e["kind"] == "arp"} != {1, 2}:
        sys.exit("the golden frames need an ARP request and an ARP reply")
    return frames, expected


def is_ip_cm_service_id(service_id):
    return service_id & IP_CM_SERVICE_PREFIX_MASK == IP_CM_SERVICE_PREFIX


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def native_request_record(name):
    """The consumer data of a native REQ for service `name`, written here."""
    name = name.encode()
    return (NATIVE_MAGIC + bytes([NATIVE_VERSION, len(name)]) +
            struct.pack(">Q", fnv1a64(name)) + name[:NATIVE_NAME_BYTES])


def cm_capacity(t):
    """Bytes of private data CM attribute `t` carries."""
    return MAD_LEN - MAD_HDR_LEN - CM_PRIVATE_DATA_AT[t]


def ip_cm_private_data(e):
    """The whole private data field of an IP CM REQ or SIDR REQ, written
    here from the JSON's "ip_cm" fields as Linux's rdma_cm lays it out
    (struct cma_hdr, cma_format_hdr; IBA Annex A11): the version (major in
    the high nibble of byte 0, minor in the low one), the IP version in the
    high nibble of byte 1, the source port, the source and the destination
    address in 16 bytes each (an IPv4 address in the last four, zeros
    before it), then the consumer's private data, then zeros."""
    h = e["ip_cm"]
    out = struct.pack(">BBH", h["major_version"] << 4 | h["minor_version"],
                      h["ip_version"] << 4, h["src_port"])
    for ip in (h["src_ip"], h["dst_ip"]):
        out += bytes(12) + ipaddress.IPv4Address(ip).packed
    out += bytes.fromhex(h["consumer_private_data_hex"])
    return out + bytes(cm_capacity(e["type"]) - len(out))


def check_cm_json(e, json_path):
    """Exits unless a CM frame's JSON holds together: a known service; SIDR
    only in the IP CM Service and with its fields; an IP CM service id on
    exactly the IP CM Service's REQs and SIDR REQs, in the port space that
    suits them (SIDR resolves RDMA_PS_UDP ports), each with an IP CM header
    of version 0.0 and IPv4 whose consumer data fits; and private data that
    is that header and the consumer's data, as written here."""
    where = f"{json_path}: frame {e['index']} ({e['name']})"
    t, service = e["type"], e.get("service")
    if service not in ("native", "ip_cm"):
        sys.exit(f"{where}: unknown CM service {service!r}")
    if t in SIDR_TYPES and (service != "ip_cm" or e.get("sidr") is None):
        sys.exit(f"{where}: SIDR outside the IP CM Service or without its "
                 f"fields")
    if t == CM_SIDR_REQ and e["sidr"]["pkey"] != DEFAULT_PKEY:
        sys.exit(f"{where}: SIDR REQ for partition "
                 f"{e['sidr']['pkey']:#x}")
    if t in (CM_REQ, CM_SIDR_REQ):
        sid = e["sidr"]["service_id"] if t == CM_SIDR_REQ else e["service_id"]
        if (sid == NATIVE_SERVICE_ID) != (service == "native") or (
                not is_ip_cm_service_id(sid)):
            sys.exit(f"{where}: service id {sid:#018x} in a {service} "
                     f"message")
        port_spaces = (PS_UDP,) if t == CM_SIDR_REQ else (PS_TCP, PS_IB)
        if service == "ip_cm" and (sid >> 16) & 0xFFFF not in port_spaces:
            sys.exit(f"{where}: port space {(sid >> 16) & 0xFFFF:#06x} in "
                     f"a {CM_LABELS[t]}")
    if service == "native" and t == CM_REP:
        if (e["private_data"][:5] != NATIVE_MAGIC + bytes([NATIVE_VERSION])
                or e["private_data"][5] not in range(1, 6)):
            sys.exit(f"{where}: a native REP's private data must be "
                     f"RDPN, version 1 and the MTU code")
    h = e.get("ip_cm")
    if (h is not None) != (t in (CM_REQ, CM_SIDR_REQ)):
        sys.exit(f"{where}: an IP CM header must come with exactly the "
                 f"REQs and SIDR REQs")
    if h is None:
        return
    if service == "native" and (bytes.fromhex(h["consumer_private_data_hex"])
                                != native_request_record(e["service_name"])):
        sys.exit(f"{where}: the consumer data is not the name record of "
                 f"{e['service_name']!r} written here")
    if ((h["major_version"], h["minor_version"]) != IP_CM_VERSION or
            h["ip_version"] != IP_CM_IPV4):
        sys.exit(f"{where}: IP CM header version {h['major_version']}."
                 f"{h['minor_version']}, IP version {h['ip_version']}; "
                 f"Annex A11 and Linux's cma_hdr have 0.0 and 4")
    consumer = bytes.fromhex(h["consumer_private_data_hex"])
    if len(consumer) > cm_capacity(t) - IP_CM_HEADER_LEN:
        sys.exit(f"{where}: {len(consumer)} bytes of consumer private data "
                 f"after the IP CM header")
    ours = ip_cm_private_data(e)
    if ours != e["private_data"]:
        diff = [i for i in range(len(ours)) if ours[i] != e["private_data"][i]]
        sys.exit(f"{where}: the private data differs from the IP CM header "
                 f"and consumer data written here at offsets {diff[:8]}")


def unlayered_header_len(e):
    """Bytes of a RoCE frame's extension headers other than RETH, AETH and
    DETH (the ones with a scapy layer)."""
    return (e["header_len"] - (RETH_LEN if e["reth"] is not None else 0) -
            (AETH_LEN if e["aeth"] is not None else 0) -
            (DETH_LEN if e.get("deth") is not None else 0))


def unlayered_headers(e):
    """Those headers' bytes, packed here from the expected fields as IBA vol.
    1, 9.3 lays them out (big-endian), in their order on the wire: AtomicETH,
    ImmDt, IETH, AtomicAckETH. Every one of them comes after the headers
    with a scapy layer (DETH, RETH, AETH). Zeros for headers rdmaplane's
    codec has no fields for and sends as zeros (FLUSH's FETH and RETH)."""
    out = b""
    if e.get("atomic_eth") is not None:
        a = e["atomic_eth"]
        out += struct.pack(">QIQQ", a["va"], a["rkey"], a["swap_add"],
                           a["compare"])
    if e.get("imm_hex"):
        out += bytes.fromhex(e["imm_hex"])
    if e.get("ieth") is not None:
        out += struct.pack(">I", e["ieth"]["rkey"])
    if e.get("atomic_ack_eth") is not None:
        out += struct.pack(">Q", e["atomic_ack_eth"]["orig_data"])
    rest = unlayered_header_len(e) - len(out)
    if rest < 0:
        sys.exit(f"frame {e['index']}: the JSON names more extension headers "
                 f"than header_len {e['header_len']} holds")
    return out + bytes(rest)


def of_kind(frames, expected, kind):
    return [(f, e) for f, e in zip(frames, expected) if e["kind"] == kind]


# --- CM MADs, written independently of the C++ encoder -------------------------

def eui64(mac):
    """The node GUID a RoCE device derives from its MAC address."""
    b = bytes.fromhex(mac.replace(":", ""))
    return int.from_bytes(bytes([b[0] ^ 0x02]) + b[1:3] + b"\xff\xfe" + b[3:],
                          "big")


def ipv4_mapped_gid(ip):
    return ipaddress.IPv6Address("::ffff:" + ip).packed


def cm_mad(e):
    """The 256-byte MAD for a golden CM frame: the common MAD header, then the
    message at the byte and bit positions of IBA vol. 1 tables 106-115 (bit
    fields counted from the most significant bit of their byte); an IP CM
    REQ's or SIDR REQ's private data from ip_cm_private_data."""
    mad = bytearray(MAD_LEN)
    struct.pack_into(">BBBBHHQHHI", mad, 0, 1, 0x07, 2, 0x03, 0, 0,
                     e["transaction_id"], e["type"], 0, 0)
    d = MAD_HDR_LEN
    t = e["type"]
    if t not in SIDR_TYPES:
        struct.pack_into(">I", mad, d + 0, e["local_comm_id"])
    if t not in SIDR_TYPES + (CM_REQ,):
        struct.pack_into(">I", mad, d + 4, e["remote_comm_id"])
    if t == CM_REQ:
        struct.pack_into(">QQ", mad, d + 8, e["service_id"],
                         eui64(e["src_mac"]))
        # Local Q_Key at 28 stays 0; QPN and responder resources at 32.
        struct.pack_into(">I", mad, d + 32,
                         e["qpn"] << 8 | e["responder_resources"])
        struct.pack_into(">I", mad, d + 36, e["initiator_depth"])
        # Remote EECN 0; remote CM response timeout, transport RC (0),
        # end-to-end flow control in the last bit.
        struct.pack_into(">I", mad, d + 40,
                         e["remote_cm_response_timeout"] << 3 |
                         e["flow_control"])
        struct.pack_into(">I", mad, d + 44, e["start_psn"] << 8 |
                         e["local_cm_response_timeout"] << 3 |
                         e["retry_count"])
        # Max CM retries, SRQ (bit 3), extended transport type 0.
        struct.pack_into(">HBB", mad, d + 48, DEFAULT_PKEY,
                         e["path_mtu"] << 4 | e["rnr_retry_count"],
                         e["max_cm_retries"] << 4 | e["srq"] << 3)
        struct.pack_into(">HH", mad, d + 52, PERMISSIVE_LID, PERMISSIVE_LID)
        mad[d + 56:d + 72] = ipv4_mapped_gid(e["local_ip"])
        mad[d + 72:d + 88] = ipv4_mapped_gid(e["remote_ip"])
        # Flow label 0, then the packet rate in the low six bits.
        struct.pack_into(">I", mad, d + 88, e["packet_rate"])
        mad[d + 92] = e["dscp_ecn"] & 0xFC  # traffic class
        mad[d + 93] = e["ttl"]  # hop limit
        mad[d + 95] = e["local_ack_timeout"] << 3
    elif t == CM_MRA:
        mad[d + 8] = e["refers_to"] << 6
        mad[d + 9] = e["service_timeout"] << 3
    elif t == CM_REJ:
        mad[d + 8] = e["refers_to"] << 6
        struct.pack_into(">H", mad, d + 10, e["reject_reason"])
    elif t == CM_REP:
        struct.pack_into(">I", mad, d + 12, e["qpn"] << 8)
        struct.pack_into(">I", mad, d + 20, e["start_psn"] << 8)
        mad[d + 24] = e["responder_resources"]
        mad[d + 25] = e["initiator_depth"]
        # Failover accepted 0 between the two.
        mad[d + 26] = e["target_ack_delay"] << 3 | e["flow_control"]
        mad[d + 27] = e["rnr_retry_count"] << 5 | e["srq"] << 4
        struct.pack_into(">Q", mad, d + 28, eui64(e["src_mac"]))
    elif t == CM_DREQ:
        struct.pack_into(">I", mad, d + 8, e["qpn"] << 8)
    elif t == CM_SIDR_REQ:
        # Request id, P_Key, 2 reserved bytes, service id (table 114).
        s = e["sidr"]
        struct.pack_into(">IHHQ", mad, d, s["request_id"], s["pkey"], 0,
                         s["service_id"])
    elif t == CM_SIDR_REP:
        # Request id, status, additional information length (0), 2 reserved
        # bytes, QPN and a reserved byte, service id, Q_Key, then 72 bytes
        # of additional information, all zero (table 115).
        s = e["sidr"]
        struct.pack_into(">IBBHIQI", mad, d, s["request_id"], s["status"], 0,
                         0, s["qpn"] << 8, s["service_id"], s["qkey"])
    at = d + CM_PRIVATE_DATA_AT[t]
    mad[at:] = (ip_cm_private_data(e) if e.get("ip_cm") is not None
                else e["private_data"])
    if len(mad) != MAD_LEN:
        sys.exit(f"frame {e['index']}: private data overruns the MAD")
    return bytes(mad)


# --- ICRC as Linux rxe computes it --------------------------------------------

def _crc32_le_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (0xEDB88320 if c & 1 else 0)
        table.append(c)
    return table


_CRC_TABLE = _crc32_le_table()


def rxe_icrc(frame):
    """The ICRC bytes following drivers/infiniband/sw/rxe/rxe_icrc.c: the
    kernel's crc32_le (no pre- or post-inversion) seeded with 0xdebb20e3,
    the state after eight 0xFF bytes of masked LRH, over IPv4 and UDP headers
    and BTH with TOS, TTL, IPv4 checksum, UDP checksum and BTH byte 4 set to
    ones, then the rest; stored inverted as a CPU-order (little-endian)
    32-bit word. Independent of zlib and of scapy."""
    hdr = bytearray(frame[ETH_LEN:OUTER_LEN + BTH_LEN])
    hdr[1] = hdr[8] = hdr[10] = hdr[11] = 0xFF
    hdr[IP_LEN + 6] = hdr[IP_LEN + 7] = 0xFF
    hdr[IP_LEN + UDP_LEN + 4] = 0xFF
    crc = 0xDEBB20E3
    for b in bytes(hdr) + frame[OUTER_LEN + BTH_LEN:-ICRC_LEN]:
        crc = (crc >> 8) ^ _CRC_TABLE[(crc ^ b) & 0xFF]
    return struct.pack("<I", ~crc & 0xFFFFFFFF)


# --- scapy --------------------------------------------------------------------

def check_scapy(frames, expected):
    try:
        from scapy.contrib.roce import AETH, BTH
        from scapy.fields import (IntField, X3BytesField, XByteField,
                                  XIntField, XLongField)
        from scapy.layers.inet import IP, UDP
        from scapy.layers.l2 import ARP, Ether
        from scapy.packet import Packet, Padding, Raw, bind_layers
    except ImportError as e:
        sys.exit(f"scapy with scapy.contrib.roce is required "
                 f"(Debian python3-scapy, see deploy/setup.sh): {e}")

    class RETH(Packet):
        # scapy.contrib.roce has no RETH layer; IBTA vol. 1, 9.3.3.
        name = "RETH"
        fields_desc = [
            XLongField("va", 0),
            XIntField("rkey", 0),
            IntField("dmalen", 0),
        ]

    class DETH(Packet):
        # scapy.contrib.roce has no DETH layer either; IBTA vol. 1, 9.3.3.
        name = "DETH"
        fields_desc = [
            XIntField("qkey", 0),
            XByteField("reserved", 0),
            X3BytesField("srcqp", 0),
        ]

    # scapy binds AETH to ACKNOWLEDGE only; READ responses carry one too.
    for op in RETH_OPCODES + tuple(
            {e["opcode"] for e in expected
             if e["kind"] == "roce" and e["reth"] is not None}):
        bind_layers(BTH, RETH, opcode=op)
    for op in AETH_OPCODES:
        if op != 0x11:
            bind_layers(BTH, AETH, opcode=op)
    for op in UD_OPCODES:
        bind_layers(BTH, DETH, opcode=op)

    m = Mismatches()
    roce = of_kind(frames, expected, "roce")
    for raw_frame, e in roce:
        pkt = Ether(raw_frame)
        for layer in (IP, UDP, BTH):
            if not pkt.haslayer(layer):
                m.fail(e, f"scapy found no {layer.__name__} layer")
        if not pkt.haslayer(BTH):
            continue
        ip, udp, bth = pkt[IP], pkt[UDP], pkt[BTH]
        m.expect(e, "eth src", pkt.src, e["src_mac"])
        m.expect(e, "eth dst", pkt.dst, e["dst_mac"])
        m.expect(e, "ip src", ip.src, e["src_ip"])
        m.expect(e, "ip dst", ip.dst, e["dst_ip"])
        m.expect(e, "ip tos", ip.tos, e["dscp_ecn"])
        m.expect(e, "ip ttl", ip.ttl, e["ttl"])
        m.expect(e, "ip len", ip.len, e["frame_len"] - ETH_LEN)
        m.expect(e, "udp sport", udp.sport, e["udp_src_port"])
        m.expect(e, "udp dport", udp.dport, ROCE_UDP_PORT)
        m.expect(e, "udp len", udp.len, e["frame_len"] - ETH_LEN - IP_LEN)
        m.expect(e, "bth opcode", bth.opcode, e["opcode"])
        m.expect(e, "bth solicited", bth.solicited, int(e["solicited"]))
        m.expect(e, "bth migreq", bth.migreq, int(e["mig_req"]))
        m.expect(e, "bth padcount", bth.padcount, e["pad"])
        m.expect(e, "bth version", bth.version, 0)
        m.expect(e, "bth pkey", bth.pkey, e["pkey"])
        m.expect(e, "bth fecn", bth.fecn, int(e["fecn"]))
        m.expect(e, "bth becn", bth.becn, int(e["becn"]))
        m.expect(e, "bth resv6", bth.resv6, 0)
        m.expect(e, "bth dqpn", bth.dqpn, e["dest_qp"])
        m.expect(e, "bth ackreq", bth.ackreq, int(e["ack_req"]))
        m.expect(e, "bth resv7", bth.resv7, 0)
        m.expect(e, "bth psn", bth.psn, e["psn"])

        m.expect(e, "has RETH", pkt.haslayer(RETH), e["reth"] is not None)
        if e["reth"] is not None and pkt.haslayer(RETH):
            m.expect(e, "reth va", pkt[RETH].va, e["reth"]["va"])
            m.expect(e, "reth rkey", pkt[RETH].rkey, e["reth"]["rkey"])
            m.expect(e, "reth dma length", pkt[RETH].dmalen,
                     e["reth"]["dma_length"])
        m.expect(e, "has AETH", pkt.haslayer(AETH), e["aeth"] is not None)
        if e["aeth"] is not None and pkt.haslayer(AETH):
            m.expect(e, "aeth syndrome", pkt[AETH].syndrome,
                     e["aeth"]["syndrome"])
            m.expect(e, "aeth msn", pkt[AETH].msn, e["aeth"]["msn"])
        m.expect(e, "has DETH", pkt.haslayer(DETH),
                 e.get("deth") is not None)
        if e.get("deth") is not None and pkt.haslayer(DETH):
            m.expect(e, "deth qkey", pkt[DETH].qkey, e["deth"]["qkey"])
            m.expect(e, "deth reserved", pkt[DETH].reserved, 0)
            m.expect(e, "deth srcqp", pkt[DETH].srcqp, e["deth"]["src_qp"])
        # Extension headers scapy has no layer for precede the payload:
        # AtomicETH, ImmDt, IETH and AtomicAckETH as packed here from the
        # expected fields.
        data = pkt[Raw].load if pkt.haslayer(Raw) else b""
        m.expect(e, "headers without a layer + payload + pad", data.hex(),
                 (unlayered_headers(e) + e["payload"] + bytes(e["pad"])).hex())

        # scapy's ICRC of our frame as it is on the wire.
        ours = raw_frame[-ICRC_LEN:]
        theirs = bytes(bth.compute_icrc(None))
        if theirs != ours:
            hint = (" (same bytes reversed: byte order differs)"
                    if theirs == ours[::-1] else "")
            m.fail(e, f"ICRC: frame has {ours.hex()}, scapy computes "
                      f"{theirs.hex()}{hint}")

        if rxe_icrc(raw_frame) != ours:
            m.fail(e, f"ICRC: frame has {ours.hex()}, the rxe-style "
                      f"computation gives {rxe_icrc(raw_frame).hex()}")

        # The ICRC must cover the payload and must not cover TTL and ECN.
        flipped = bytearray(raw_frame)
        flipped[-ICRC_LEN - 1] ^= 0x01
        if bytes(Ether(bytes(flipped))[BTH].compute_icrc(None)) == theirs:
            m.fail(e, "scapy's ICRC ignores the last byte before it")
        remarked = bytearray(raw_frame)
        remarked[ETH_LEN + 1] ^= 0x03  # ECN
        remarked[ETH_LEN + 8] -= 1  # TTL
        if bytes(Ether(bytes(remarked))[BTH].compute_icrc(None)) != theirs:
            m.fail(e, "scapy's ICRC changes with TTL/ECN")

        # scapy builds the same frame from the expected fields alone.
        rebuilt = (
            Ether(src=e["src_mac"], dst=e["dst_mac"]) /
            IP(tos=e["dscp_ecn"], id=0, flags="DF", ttl=e["ttl"],
               src=e["src_ip"], dst=e["dst_ip"]) /
            UDP(sport=e["udp_src_port"], dport=ROCE_UDP_PORT, chksum=0) /
            BTH(opcode=e["opcode"], solicited=int(e["solicited"]),
                migreq=int(e["mig_req"]), padcount=e["pad"], pkey=e["pkey"],
                fecn=int(e["fecn"]), becn=int(e["becn"]), dqpn=e["dest_qp"],
                ackreq=int(e["ack_req"]), psn=e["psn"]))
        if e.get("deth") is not None:
            rebuilt /= DETH(qkey=e["deth"]["qkey"], srcqp=e["deth"]["src_qp"])
        if e["reth"] is not None:
            rebuilt /= RETH(va=e["reth"]["va"], rkey=e["reth"]["rkey"],
                            dmalen=e["reth"]["dma_length"])
        if e["aeth"] is not None:
            rebuilt /= AETH(syndrome=e["aeth"]["syndrome"],
                            msn=e["aeth"]["msn"])
        body = (unlayered_headers(e) + e["payload"] + bytes(e["pad"]))
        if body:
            rebuilt /= Raw(body)
        rebuilt = bytes(rebuilt)
        if rebuilt != raw_frame:
            diff = [i for i in range(min(len(rebuilt), len(raw_frame)))
                    if rebuilt[i] != raw_frame[i]]
            m.fail(e, f"scapy's rebuild differs: {len(rebuilt)} vs "
                      f"{len(raw_frame)} bytes, first differing offsets "
                      f"{diff[:8]}")
    cm = of_kind(frames, expected, "cm")
    for raw_frame, e in cm:
        pkt = Ether(raw_frame)
        for layer in (IP, UDP, BTH, DETH, Raw):
            if not pkt.haslayer(layer):
                m.fail(e, f"scapy found no {layer.__name__} layer")
        if not pkt.haslayer(DETH) or not pkt.haslayer(Raw):
            continue
        ip, udp, bth, deth = pkt[IP], pkt[UDP], pkt[BTH], pkt[DETH]
        m.expect(e, "eth src", pkt.src, e["src_mac"])
        m.expect(e, "eth dst", pkt.dst, e["dst_mac"])
        m.expect(e, "ip src", ip.src, e["src_ip"])
        m.expect(e, "ip dst", ip.dst, e["dst_ip"])
        m.expect(e, "ip tos", ip.tos, e["dscp_ecn"])
        m.expect(e, "ip ttl", ip.ttl, e["ttl"])
        m.expect(e, "udp sport", udp.sport, e["udp_src_port"])
        m.expect(e, "udp dport", udp.dport, ROCE_UDP_PORT)
        m.expect(e, "bth opcode", bth.opcode, UD_SEND_ONLY)
        m.expect(e, "bth padcount", bth.padcount, 0)
        m.expect(e, "bth version", bth.version, 0)
        m.expect(e, "bth pkey", bth.pkey, DEFAULT_PKEY)
        m.expect(e, "bth dqpn", bth.dqpn, GSI_QPN)
        m.expect(e, "deth qkey", deth.qkey, GSI_QKEY)
        m.expect(e, "deth reserved", deth.reserved, 0)
        m.expect(e, "deth srcqp", deth.srcqp, GSI_QPN)
        mad = cm_mad(e)
        got = pkt[Raw].load
        if got != mad:
            diff = [i for i in range(min(len(got), len(mad)))
                    if got[i] != mad[i]]
            m.fail(e, f"MAD differs from IBA layout: {len(got)} bytes, "
                      f"first differing MAD offsets {diff[:8]}")

        ours = raw_frame[-ICRC_LEN:]
        theirs = bytes(bth.compute_icrc(None))
        if theirs != ours:
            m.fail(e, f"ICRC: frame has {ours.hex()}, scapy computes "
                      f"{theirs.hex()}")
        if rxe_icrc(raw_frame) != ours:
            m.fail(e, f"ICRC: frame has {ours.hex()}, the rxe-style "
                      f"computation gives {rxe_icrc(raw_frame).hex()}")

        rebuilt = bytes(
            Ether(src=e["src_mac"], dst=e["dst_mac"]) /
            IP(tos=e["dscp_ecn"], id=0, flags="DF", ttl=e["ttl"],
               src=e["src_ip"], dst=e["dst_ip"]) /
            UDP(sport=e["udp_src_port"], dport=ROCE_UDP_PORT, chksum=0) /
            BTH(opcode=UD_SEND_ONLY, migreq=1, pkey=DEFAULT_PKEY,
                dqpn=GSI_QPN, psn=0) /
            DETH(qkey=GSI_QKEY, srcqp=GSI_QPN) / Raw(mad))
        if rebuilt != raw_frame:
            diff = [i for i in range(min(len(rebuilt), len(raw_frame)))
                    if rebuilt[i] != raw_frame[i]]
            m.fail(e, f"scapy's rebuild differs: {len(rebuilt)} vs "
                      f"{len(raw_frame)} bytes, first differing offsets "
                      f"{diff[:8]}")

    arp = of_kind(frames, expected, "arp")
    for raw_frame, e in arp:
        pkt = Ether(raw_frame)
        if not pkt.haslayer(ARP):
            m.fail(e, "scapy found no ARP layer")
            continue
        a = pkt[ARP]
        m.expect(e, "eth src", pkt.src, e["sender_mac"])
        m.expect(e, "eth dst", pkt.dst,
                 "ff:ff:ff:ff:ff:ff" if e["op"] == 1 else e["target_mac"])
        m.expect(e, "arp hwtype", a.hwtype, 1)
        m.expect(e, "arp ptype", a.ptype, 0x0800)
        m.expect(e, "arp hwlen", a.hwlen, 6)
        m.expect(e, "arp plen", a.plen, 4)
        m.expect(e, "arp op", a.op, e["op"])
        m.expect(e, "arp hwsrc", a.hwsrc, e["sender_mac"])
        m.expect(e, "arp psrc", a.psrc, e["sender_ip"])
        m.expect(e, "arp hwdst", a.hwdst, e["target_mac"])
        m.expect(e, "arp pdst", a.pdst, e["target_ip"])
        m.expect(e, "padding", raw_frame[ARP_END:],
                 bytes(ARP_FRAME_LEN - ARP_END))
        rebuilt = bytes(
            Ether(src=e["sender_mac"], dst=pkt.dst) /
            ARP(op=e["op"], hwsrc=e["sender_mac"], psrc=e["sender_ip"],
                hwdst=e["target_mac"], pdst=e["target_ip"]) /
            Padding(bytes(ARP_FRAME_LEN - ARP_END)))
        if rebuilt != raw_frame:
            m.fail(e, f"scapy's rebuild differs: {rebuilt.hex()} vs "
                      f"{raw_frame.hex()}")

    status = m.exit_status("scapy")
    if status == 0:
        ip_cm = sum(e["service"] == "ip_cm" for _, e in cm)
        print(f"scapy: {len(roce)} RoCE (RC, UC, UD) and {len(cm)} CM frames "
              f"({ip_cm} of the IP CM Service) decoded and "
              f"ICRCs recomputed (scapy and rxe-style), CM MADs match the "
              f"IBA layout (and IP CM headers Annex A11's), {len(arp)} ARP "
              f"frames decoded, all rebuilt byte for byte")
    return status


# --- tshark -------------------------------------------------------------------

TSHARK_FIELDS = [
    "frame.number",
    "frame.protocols",
    "ip.src",
    "ip.dst",
    "udp.srcport",
    "udp.dstport",
    "infiniband.bth.opcode",
    "infiniband.bth.se",
    "infiniband.bth.m",
    "infiniband.bth.padcnt",
    "infiniband.bth.tver",
    "infiniband.bth.p_key",
    "infiniband.bth.destqp",
    "infiniband.bth.a",
    "infiniband.bth.psn",
    "infiniband.reth.va",
    "infiniband.reth.r_key",
    "infiniband.reth.dmalen",
    "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",
    "infiniband.immdt",
    "infiniband.atomiceth.swapdt",
    "infiniband.atomiceth.cmpdt",
    "infiniband.atomicacketh.origremdt",
    "infiniband.ieth",
    "infiniband.invariant.crc",
    "data.len",
]

# Fields of CM frames: transport, MAD header, then per message type.
TSHARK_CM_FIELDS = [
    "infiniband.deth.q_key",
    "infiniband.deth.srcqp",
    "infiniband.mad.baseversion",
    "infiniband.mad.mgmtclass",
    "infiniband.mad.classversion",
    "infiniband.mad.method",
    "infiniband.mad.status",
    "infiniband.mad.transactionid",
    "infiniband.mad.attributeid",
    "infiniband.mad.attributemodifier",
    "infiniband.mad.data",
]


def cm_expected_fields(e):
    """tshark field -> expected value for the message fields of a CM frame.
    Wireshark 4.0 does not dissect MRA, SIDR REQ and SIDR REP; their bodies
    are checked through infiniband.mad.data like every other message's. It
    dissects the private data of a REQ for an IP CM service id as the IP CM
    header and the consumer's data (and shows that service id's prefix,
    port space and port), the private data of any other REQ as bytes."""
    t = e["type"]
    pd = e["private_data"].hex()
    if t == CM_REQ:
        return {**cm_req_fields(e), **cm_req_private_fields(e)}
    if t == CM_REP:
        return {
            "infiniband.cm.rep": e["local_comm_id"],
            "infiniband.cm.rep.remotecommid": e["remote_comm_id"],
            "infiniband.cm.rep.localqkey": 0,
            "infiniband.cm.rep.localqpn": e["qpn"],
            "infiniband.cm.rep.localeecn": 0,
            "infiniband.cm.rep.startpsn": e["start_psn"],
            "infiniband.cm.rep.respres": e["responder_resources"],
            "infiniband.cm.rep.initdepth": e["initiator_depth"],
            "infiniband.cm.rep.tgtackdelay": e["target_ack_delay"],
            "infiniband.cm.rep.failoveracc": 0,
            "infiniband.cm.rep.e2eflowctrl": e["flow_control"],
            "infiniband.cm.rep.rnrretrcount": e["rnr_retry_count"],
            "infiniband.cm.rep.srq": e["srq"],
            "infiniband.cm.rep.localcaguid": eui64(e["src_mac"]),
            "infiniband.cm.rep.private": pd,
        }
    if t == CM_REJ:
        return {
            "infiniband.cm.rej.localcommid": e["local_comm_id"],
            "infiniband.cm.rej.remotecommid": e["remote_comm_id"],
            "infiniband.cm.rej.msgrej": e["refers_to"],
            "infiniband.cm.rej.rejinfolen": 0,
            "infiniband.cm.rej.reason": e["reject_reason"],
            "infiniband.cm.rej.private": pd,
        }
    if t == CM_RTU:
        return {
            "infiniband.cm.rtu.localcommid": e["local_comm_id"],
            "infiniband.cm.rtu.remotecommid": e["remote_comm_id"],
            "infiniband.cm.rtu.private": pd,
        }
    if t == CM_DREQ:
        return {
            "infiniband.cm.dreq.localcommid": e["local_comm_id"],
            "infiniband.cm.dreq.remotecommid": e["remote_comm_id"],
            # Wireshark files DREQ's remote QPN under this name.
            "infiniband.cm.req.remoteqpneecn": e["qpn"],
            "infiniband.cm.dreq.private": pd,
        }
    if t == CM_DREP:
        return {
            "infiniband.cm.drsp.localcommid": e["local_comm_id"],
            "infiniband.cm.drsp.remotecommid": e["remote_comm_id"],
            "infiniband.cm.drsp.private": pd,
        }
    return {}


def cm_req_private_fields(e):
    """tshark's fields for a REQ's service id and private data: for an IP CM
    service id, its parts and the IP CM header and consumer data as written
    here (ip_cm_private_data), not as the C++ side wrote them."""
    h = e.get("ip_cm")
    if h is None:
        return {"infiniband.cm.req.private": e["private_data"].hex()}
    pd = ip_cm_private_data(e)
    sid = e["service_id"]
    return {
        # The five bytes 00 00 00 00 01, then the port space's low byte
        # (Wireshark's "protocol": 0x06 for RDMA_PS_TCP) and the port.
        "infiniband.cm.req.serviceid.prefix": f"{sid >> 24:010x}",
        "infiniband.cm.req.serviceid.protocol": (sid >> 16) & 0xFF,
        "infiniband.cm.req.serviceid.dport": sid & 0xFFFF,
        "infiniband.cm.req.ip_cm": pd.hex(),
        "infiniband.cm.req.ip_cm.majv": h["major_version"],
        "infiniband.cm.req.ip_cm.minv": h["minor_version"],
        "infiniband.cm.req.ip_cm.ipv": h["ip_version"],
        "infiniband.cm.req.ip_cm.reserved": 0,
        "infiniband.cm.req.ip_cm.sport": h["src_port"],
        "infiniband.cm.req.ip_cm.sip4": h["src_ip"],
        "infiniband.cm.req.ip_cm.dip4": h["dst_ip"],
        "infiniband.cm.req.ip_cm.private": pd[IP_CM_HEADER_LEN:].hex(),
        # An IPv4 header: no IPv6 addresses.
        "infiniband.cm.req.ip_cm.sip6": "",
        "infiniband.cm.req.ip_cm.dip6": "",
    }


def cm_req_fields(e):
    """tshark's fields for a REQ but its service id's parts and private
    data."""
    return {
        "infiniband.cm.req": e["local_comm_id"],
        "infiniband.cm.req.serviceid": e["service_id"],
        "infiniband.cm.req.localcaguid": eui64(e["src_mac"]),
        "infiniband.cm.req.localqkey": 0,
        "infiniband.cm.req.localqpn": e["qpn"],
        "infiniband.cm.req.responderres": e["responder_resources"],
        "infiniband.cm.req.initdepth": e["initiator_depth"],
        "infiniband.cm.req.remoteresptout": e["remote_cm_response_timeout"],
        "infiniband.cm.req.transpsvctype": 0,  # RC
        "infiniband.cm.req.e2eflowctrl": e["flow_control"],
        "infiniband.cm.req.startpsn": e["start_psn"],
        "infiniband.cm.req.localresptout": e["local_cm_response_timeout"],
        "infiniband.cm.req.retrcount": e["retry_count"],
        "infiniband.cm.req.pkey": DEFAULT_PKEY,
        "infiniband.cm.req.pppmtu": e["path_mtu"],
        "infiniband.cm.req.rdcexist": 0,
        "infiniband.cm.req.rnrretrcount": e["rnr_retry_count"],
        "infiniband.cm.req.maxcmretr": e["max_cm_retries"],
        "infiniband.cm.req.srq": e["srq"],
        "infiniband.cm.req.ext_transport": 0,
        "infiniband.cm.req.prim_locallid": PERMISSIVE_LID,
        "infiniband.cm.req.prim_remotelid": PERMISSIVE_LID,
        "infiniband.cm.req.prim_localgid_ipv4": e["local_ip"],
        "infiniband.cm.req.prim_remotegid_ipv4": e["remote_ip"],
        # Wireshark 4.0 reads Primary Packet Rate from the flow label's
        # first byte, not from the low six bits of byte 91 where the IBA
        # (and Linux's CM) put it: check_cm_rules reads it from the MAD.
        "infiniband.cm.req.prim_flowlabel": 0,
        "infiniband.cm.req.prim_tfcclass": e["dscp_ecn"] & 0xFC,
        "infiniband.cm.req.prim_sl": 0,
        "infiniband.cm.req.prim_subnetlocal": 0,
        "infiniband.cm.req.prim_hoplim": e["ttl"],
        "infiniband.cm.req.prim_localacktout": e["local_ack_timeout"],
        "infiniband.cm.req.alt_locallid": 0,
    }


def _all_cm_message_fields():
    """Every per-message field above (a REQ's with and without an IP CM
    header), so that one tshark run extracts them all."""
    fields = set()
    for t in CM_LABELS:
        for ip_cm in (None, {"major_version": 0, "minor_version": 0,
                             "ip_version": 4, "src_port": 0,
                             "src_ip": "0.0.0.0", "dst_ip": "0.0.0.0",
                             "consumer_private_data_hex": ""}):
            fields |= set(cm_expected_fields({
                "type": t, "private_data": b"", "src_mac": "00:00:00:00:00:00",
                "ip_cm": ip_cm,
                **{k: 0 for k in (
                    "local_comm_id", "remote_comm_id", "service_id", "qpn",
                    "responder_resources", "initiator_depth", "start_psn",
                    "path_mtu", "local_ip", "remote_ip", "dscp_ecn", "ttl",
                    "local_ack_timeout", "target_ack_delay", "refers_to",
                    "reject_reason", "remote_cm_response_timeout",
                    "local_cm_response_timeout", "retry_count",
                    "rnr_retry_count", "max_cm_retries", "packet_rate",
                    "srq", "flow_control")}}))
    return sorted(fields)


TSHARK_CM_MESSAGE_FIELDS = _all_cm_message_fields()

TSHARK_ARP_FIELDS = [
    "eth.src",
    "eth.dst",
    "eth.padding",
    "arp.hw.type",
    "arp.proto.type",
    "arp.hw.size",
    "arp.proto.size",
    "arp.opcode",
    "arp.src.hw_mac",
    "arp.src.proto_ipv4",
    "arp.dst.hw_mac",
    "arp.dst.proto_ipv4",
]


def tshark(*args):
    """Runs tshark; returns stdout. stderr is shown only on failure (tshark
    warns there when run as root)."""
    proc = subprocess.run([TSHARK, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"tshark {' '.join(args)} failed ({proc.returncode}):\n"
                 f"{proc.stderr}")
    return proc.stdout


def tshark_flags(pcap_path):
    """Frames tshark marks malformed or with a warning/error expert info."""
    flagged = tshark("-r", pcap_path, "-Y",
                     "_ws.malformed || _ws.expert.severity >= warning")
    summary = tshark("-r", pcap_path, "-q", "-z", "expert,warn")
    # -z expert prints a table only when there are entries.
    has_expert_table = re.search(r"^(Errors|Warnings) \(\d+\)", summary,
                                 re.MULTILINE) is not None
    return flagged.strip(), has_expert_table, summary


def icrc_status_fields():
    """ICRC check-status fields, in case this tshark verifies the ICRC
    (Wireshark 4.0 only shows the value)."""
    fields = tshark("-G", "fields")
    return [line.split("\t")[2] for line in fields.splitlines()
            if line.startswith("F\t") and
            re.match(r"infiniband\.(invariant\.)?crc.*status",
                     line.split("\t")[2])]


def check_tshark(pcap_path, frames, expected):
    if not os.access(TSHARK, os.X_OK):
        sys.exit(f"{TSHARK} is required (Debian tshark, see "
                 f"deploy/setup.sh)")
    m = Mismatches()
    status_fields = icrc_status_fields()
    fields = (TSHARK_FIELDS + TSHARK_CM_FIELDS + TSHARK_CM_MESSAGE_FIELDS +
              TSHARK_ARP_FIELDS + status_fields)
    out = tshark("-r", pcap_path, "-T", "fields", "-E", "separator=\t",
                 "-E", "occurrence=a", "-E", "aggregator=|",
                 *[a for f in fields for a in ("-e", f)])
    rows = [line.split("\t") for line in out.splitlines()]
    if len(rows) != len(expected):
        sys.exit(f"tshark printed {len(rows)} rows for {len(expected)} "
                 f"frames:\n{out}")

    def opt_int(s):
        return int(s, 0) if s else None

    def opt_bool(s):
        # Wireshark 4.0 prints booleans as 0/1, later versions as False/True.
        return {"0": False, "1": True, "False": False, "True": True}.get(s, s)

    def expect_field(e, got, field, want):
        """Compares a tshark field with an int, a dotted IPv4 address or
        hex bytes."""
        value = got[field]
        if isinstance(want, int) and value:
            try:
                value = int(value, 0)
            except ValueError:
                pass
        m.expect(e, field, value, want)

    decoded = []
    for row, raw_frame, e in zip(rows, frames, expected):
        got = dict(zip(fields, row))
        decoded.append(got)
        m.expect(e, "frame.number", int(got["frame.number"]), e["index"])
        if e["kind"] == "cm":
            m.expect(e, "protocols", got["frame.protocols"],
                     "eth:ethertype:ip:udp:infiniband")
            m.expect(e, "ip.src", got["ip.src"], e["src_ip"])
            m.expect(e, "ip.dst", got["ip.dst"], e["dst_ip"])
            m.expect(e, "udp.srcport", opt_int(got["udp.srcport"]),
                     e["udp_src_port"])
            m.expect(e, "udp.dstport", opt_int(got["udp.dstport"]),
                     ROCE_UDP_PORT)
            transport = {
                "infiniband.bth.opcode": UD_SEND_ONLY,
                "infiniband.bth.padcnt": 0,
                "infiniband.bth.tver": 0,
                "infiniband.bth.p_key": DEFAULT_PKEY,
                "infiniband.bth.destqp": GSI_QPN,
                "infiniband.bth.psn": 0,
                "infiniband.deth.q_key": GSI_QKEY,
                "infiniband.deth.srcqp": GSI_QPN,
                "infiniband.mad.baseversion": 1,
                "infiniband.mad.mgmtclass": 0x07,
                "infiniband.mad.classversion": 2,
                "infiniband.mad.method": 0x03,
                "infiniband.mad.status": 0,
                "infiniband.mad.transactionid": e["transaction_id"],
                "infiniband.mad.attributeid": e["type"],
                "infiniband.mad.attributemodifier": 0,
                "infiniband.mad.data": cm_mad(e)[MAD_HDR_LEN:].hex(),
                "infiniband.invariant.crc":
                    int.from_bytes(raw_frame[-ICRC_LEN:], "big"),
            }
            for field, want in transport.items():
                expect_field(e, got, field, want)
            message = cm_expected_fields(e)
            for field in TSHARK_CM_MESSAGE_FIELDS:
                expect_field(e, got, field, message.get(field, ""))
            for field in ("infiniband.reth.va", "infiniband.aeth.syndrome",
                          "data.len"):
                m.expect(e, field, got[field], "")
            continue
        if e["kind"] == "arp":
            m.expect(e, "protocols", got["frame.protocols"],
                     "eth:ethertype:arp")
            want = {
                "eth.src": e["sender_mac"],
                "eth.dst": ("ff:ff:ff:ff:ff:ff" if e["op"] == 1
                            else e["target_mac"]),
                "eth.padding": bytes(ARP_FRAME_LEN - ARP_END).hex(),
                "arp.hw.type": 1,
                "arp.proto.type": 0x0800,
                "arp.hw.size": 6,
                "arp.proto.size": 4,
                "arp.opcode": e["op"],
                "arp.src.hw_mac": e["sender_mac"],
                "arp.src.proto_ipv4": e["sender_ip"],
                "arp.dst.hw_mac": e["target_mac"],
                "arp.dst.proto_ipv4": e["target_ip"],
            }
            for field, value in want.items():
                expect_field(e, got, field, value)
            continue
        m.expect(e, "protocols", got["frame.protocols"].split(":")[:5],
                 ["eth", "ethertype", "ip", "udp", "infiniband"])
        m.expect(e, "ip.src", got["ip.src"], e["src_ip"])
        m.expect(e, "ip.dst", got["ip.dst"], e["dst_ip"])
        m.expect(e, "udp.srcport", opt_int(got["udp.srcport"]),
                 e["udp_src_port"])
        m.expect(e, "udp.dstport", opt_int(got["udp.dstport"]),
                 ROCE_UDP_PORT)
        m.expect(e, "bth.opcode", opt_int(got["infiniband.bth.opcode"]),
                 e["opcode"])
        m.expect(e, "bth.se", opt_bool(got["infiniband.bth.se"]),
                 e["solicited"])
        m.expect(e, "bth.m", opt_bool(got["infiniband.bth.m"]), e["mig_req"])
        m.expect(e, "bth.padcnt", opt_int(got["infiniband.bth.padcnt"]),
                 e["pad"])
        m.expect(e, "bth.tver", opt_int(got["infiniband.bth.tver"]), 0)
        m.expect(e, "bth.p_key", opt_int(got["infiniband.bth.p_key"]),
                 e["pkey"])
        m.expect(e, "bth.destqp", opt_int(got["infiniband.bth.destqp"]),
                 e["dest_qp"])
        m.expect(e, "bth.a", opt_bool(got["infiniband.bth.a"]), e["ack_req"])
        m.expect(e, "bth.psn", opt_int(got["infiniband.bth.psn"]), e["psn"])
        if e["opcode"] in TSHARK_UNKNOWN_OPCODES:
            # Nothing after the BTH is dissected (the -V check below finds
            # those bytes).
            for field in ("infiniband.reth.va", "infiniband.aeth.syndrome",
                          "infiniband.invariant.crc", "data.len"):
                m.expect(e, field, got[field], "")
            continue
        # tshark files an AtomicETH's address and key under the RETH's
        # names.
        reth = e["reth"] or e.get("atomic_eth") or {}
        m.expect(e, "reth.va", opt_int(got["infiniband.reth.va"]),
                 reth.get("va"))
        m.expect(e, "reth.r_key", opt_int(got["infiniband.reth.r_key"]),
                 reth.get("rkey"))
        m.expect(e, "reth.dmalen", opt_int(got["infiniband.reth.dmalen"]),
                 reth.get("dma_length"))
        aeth = e["aeth"] or {}
        m.expect(e, "aeth.syndrome",
                 opt_int(got["infiniband.aeth.syndrome"]),
                 aeth.get("syndrome"))
        m.expect(e, "aeth.msn", opt_int(got["infiniband.aeth.msn"]),
                 aeth.get("msn"))
        atomic = e.get("atomic_eth") or {}
        m.expect(e, "atomiceth.swapdt",
                 opt_int(got["infiniband.atomiceth.swapdt"]),
                 atomic.get("swap_add"))
        m.expect(e, "atomiceth.cmpdt",
                 opt_int(got["infiniband.atomiceth.cmpdt"]),
                 atomic.get("compare"))
        atomic_ack = e.get("atomic_ack_eth") or {}
        m.expect(e, "atomicacketh.origremdt",
                 opt_int(got["infiniband.atomicacketh.origremdt"]),
                 atomic_ack.get("orig_data"))
        # A DETH outside CM: the Q_Key and source QP of a UD frame.
        deth = e.get("deth") or {}
        m.expect(e, "deth.q_key", opt_int(got["infiniband.deth.q_key"]),
                 deth.get("qkey"))
        m.expect(e, "deth.srcqp", opt_int(got["infiniband.deth.srcqp"]),
                 deth.get("src_qp"))
        # tshark shows the IETH's R_Key as bytes in hex, like the ImmDt
        # (twice).
        ieth = e.get("ieth")
        shown = got["infiniband.ieth"].replace(":", "").split("|")
        m.expect(e, "ieth", shown[0] or None,
                 f"{ieth['rkey']:08x}" if ieth is not None else None)
        if len(set(shown)) != 1:
            m.fail(e, f"tshark shows IETH {shown}")
        # tshark shows the ImmDt's bytes in hex (the header and its value:
        # twice).
        imm = e.get("imm_hex")
        shown = got["infiniband.immdt"].replace(":", "").split("|")
        m.expect(e, "immdt", shown[0] or None, imm or None)
        if len(set(shown)) != 1:
            m.fail(e, f"tshark shows ImmDt {shown}")
        # tshark shows the ICRC as a big-endian number; it must have found
        # it in the last four bytes, right after the payload and pad.
        m.expect(e, "invariant.crc", opt_int(got["infiniband.invariant.crc"]),
                 int.from_bytes(raw_frame[-ICRC_LEN:], "big"))
        body = e["payload_len"] + e["pad"]
        m.expect(e, "data.len", opt_int(got["data.len"]), body or None)
        for f in status_fields:
            # Wireshark's checksum status: 1 means good.
            m.expect(e, f, got[f], "1")

    check_rc_rules(m, decoded, expected)
    check_cm_rules(m, decoded, expected)

    # The verbose tree: every frame an InfiniBand packet with a BTH.
    verbose = tshark("-r", pcap_path, "-V")
    per_frame = re.split(r"^Frame \d+: ", verbose, flags=re.MULTILINE)[1:]
    if len(per_frame) != len(expected):
        sys.exit(f"tshark -V printed {len(per_frame)} frames")
    for text, e in zip(per_frame, expected):
        if e["kind"] == "roce":
            lines = [
                "InfiniBand",
                "    Base Transport Header",
                f"        Destination Queue Pair: 0x{e['dest_qp']:06x}",
                f"        Packet Sequence Number: {e['psn']}"]
            transport = TRANSPORT_LABELS.get(e["opcode"] >> 5, "?")
            if e["opcode"] in TSHARK_UNKNOWN_OPCODES:
                # The headers, payload and pad as expected, then the ICRC
                # (which scapy recomputed).
                rest = (unlayered_headers(e) + e["payload"] +
                        bytes(e["pad"]) + bytes.fromhex(
                            raw_frame_icrc_hex(frames, e)))
                lines += [f"        Opcode: Unknown ({e['opcode']})",
                          "        Unknown/Vendor Specific Data: " +
                          rest.hex()]
            else:
                lines += extension_header_lines(e)
                if not re.search(rf"^        Opcode: {re.escape(transport)} "
                                 rf"- .* \({e['opcode']}\)$", text,
                                 re.MULTILINE):
                    m.fail(e, f"tshark -V lacks a {transport} opcode line "
                              f"for opcode {e['opcode']}")
        elif e["kind"] == "cm":
            lines = [
                "InfiniBand",
                "    Base Transport Header",
                "        Opcode: Unreliable Datagram (UD) - SEND only (100)",
                "        Destination Queue Pair: 0x000001",
                "    DETH - Datagram Extended Transport Header",
                f"        Queue Key: 0x{GSI_QKEY:016x}",
                "        Source Queue Pair: 0x00000001",
                "    MAD Header - Common Management Datagram",
                f"        Transaction ID: 0x{e['transaction_id']:016x}",
                f"    CM {CM_LABELS[e['type']]}",
                "    Invariant CRC: 0x" + raw_frame_icrc_hex(frames, e)]
            if e["type"] == CM_REQ:
                lines += [
                    f"        Primary Local Port GID: {e['local_ip']}",
                    f"        Primary Remote Port GID: {e['remote_ip']}"]
                h = e.get("ip_cm")
                sid = e["service_id"]
                if h is None:
                    lines.append(f"        ServiceID: 0x{sid:016x}")
                else:
                    lines += [
                        "        IP CM ServiceID",
                        f"            Prefix: {sid >> 24:010x}",
                        f"            Protocol: 0x{(sid >> 16) & 0xFF:02x}",
                        f"            Destination Port: 0x{sid & 0xFFFF:04x}",
                        "        IP CM Private Data",
                        f"            IP CM Source IP: {h['src_ip']}",
                        f"            IP CM Destination IP: {h['dst_ip']}"]
        else:
            op = {1: "request", 2: "reply"}[e["op"]]
            lines = [
                f"Address Resolution Protocol ({op})",
                f"    Opcode: {op} ({e['op']})",
                f"    Sender IP address: {e['sender_ip']}",
                f"    Target IP address: {e['target_ip']}"]
        for line in lines:
            if not re.search("^" + re.escape(line) + "$", text, re.MULTILINE):
                m.fail(e, f"tshark -V lacks line {line.strip()!r}")
        for bad in ("Malformed", "Expert Info"):
            if bad in text:
                m.fail(e, f"tshark -V says {bad!r}")

    flagged, has_expert_table, summary = tshark_flags(pcap_path)
    if flagged:
        m.errors.append(f"tshark flags frames as malformed or warns:\n"
                        f"{flagged}")
    if has_expert_table:
        m.errors.append(f"tshark -z expert reports:\n{summary}")

    # The same checks must notice a frame cut short by six bytes.
    with tempfile.TemporaryDirectory() as tmp:
        bad_path = os.path.join(tmp, "truncated.pcap")
        with open(pcap_path, "rb") as f:
            header = f.read(24)
        cut = [f for f, e in of_kind(frames, expected, "roce")][-1][:-6]
        with open(bad_path, "wb") as f:
            f.write(header + struct.pack("<IIII", 0, 0, len(cut), len(cut)) +
                    cut)
        flagged, has_expert_table, _ = tshark_flags(bad_path)
        if not flagged or not has_expert_table:
            m.errors.append("tshark's malformed/expert checks did not flag "
                            "a truncated frame; the checks are not working")

    status = m.exit_status("tshark")
    if status == 0:
        checked = ("ICRC status checked" if status_fields else
                   "this tshark shows but does not verify the ICRC")
        counts = {k: len(of_kind(frames, expected, k))
                  for k in ("roce", "cm", "arp")}
        ip_cm = sum(e["service"] == "ip_cm"
                    for _, e in of_kind(frames, expected, "cm"))
        print(f"tshark: {counts['roce']} RoCE (RC, UC, UD) frames and "
              f"{counts['cm']} CM frames ({ip_cm} of the IP CM Service) "
              f"dissected as InfiniBand, {counts['arp']} ARP frames, "
              f"fields match, conversation rules hold, no expert warnings "
              f"({checked})")
    return status


def extension_header_lines(e):
    """The lines tshark -V prints for the extension headers of a RoCE frame
    other than RETH and AETH (whose fields are checked above), with the
    expected values."""
    lines = []
    deth = e.get("deth")
    if deth is not None:
        lines += ["    DETH - Datagram Extended Transport Header",
                  f"        Queue Key: 0x{deth['qkey']:016x}",
                  f"        Source Queue Pair: 0x{deth['src_qp']:08x}"]
    atomic = e.get("atomic_eth")
    if atomic is not None:
        lines += ["    AtomicETH - Atomic Extended Transport Header",
                  f"        Virtual Address: 0x{atomic['va']:016x}",
                  f"        Remote Key: 0x{atomic['rkey']:08x}",
                  f"        Swap (Or Add) Data: {atomic['swap_add']}",
                  f"        Compare Data: {atomic['compare']}"]
    atomic_ack = e.get("atomic_ack_eth")
    if atomic_ack is not None:
        lines += ["    ATOMICACKETH - Atomic ACK Extended Transport Header",
                  f"        Original Remote Data: {atomic_ack['orig_data']}"]
    ieth = e.get("ieth")
    if ieth is not None:
        lines += ["    IETH - Invalidate Extended Transport Header",
                  f"        RKey: {ieth['rkey']:08x}"]
    return lines


# --- Rules of a conversation, from tshark's decoding alone -----------------------

def _int(value):
    return int(value, 0) if value else None


def _bool(value):
    return {"0": False, "1": True, "False": False, "True": True}.get(value)


def check_rc_rules(m, decoded, expected):
    """What a hardware RoCE peer would expect of the RC frames, in capture
    order, from tshark's fields alone:
      - every RDMA READ request asks for an acknowledgement (AckReq);
      - the MSNs each side sends a QP in AETHs never go back (mod 2^24),
        replayed read responses included;
      - read responses form streams FIRST, MIDDLE..., LAST or ONLY with
        consecutive PSNs, each beginning at the PSN of a READ request the
        other side sent;
      - a request with an opcode rdmaplane does not serve is answered, in
        the next acknowledgement from the other side, by NAK "invalid
        request" at its PSN, unless other peers, which serve it, exchange
        it ("other_peers"); then an atomic request is answered, in the next
        response from the other side, by an ATOMIC ACKNOWLEDGE at its PSN;
        after a NAK other than "PSN sequence error" its sender sends
        nothing more to that QP;
      - a frame of another partition than the default one gets no answer:
        the next frame is not from the other side;
      - frames that rdmaplane's queue pairs sent ("from" a or b) carry the
        default P_Key.
    UC and UD frames, which nobody acknowledges, take no part."""
    rc = [(got, e) for got, e in zip(decoded, expected)
          if e["kind"] == "roce" and e["opcode"] >> 5 == 0]
    last_msn = {}     # (sender IP, dest QP) -> last MSN it sent
    read_psns = {}    # requester IP -> PSNs of its READ requests
    stream = {}       # (responder IP, dest QP) -> next PSN of an open stream
    dead = set()      # (sender IP, dest QP) after a fatal NAK
    for i, (got, e) in enumerate(rc):
        op = _int(got["infiniband.bth.opcode"])
        psn = _int(got["infiniband.bth.psn"])
        pkey = _int(got["infiniband.bth.p_key"])
        src, dst = got["ip.src"], got["ip.dst"]
        qp = _int(got["infiniband.bth.destqp"])
        if (src, qp) in dead:
            m.fail(e, "sent after its side refused a request or failed")
        if e.get("from") in ("a", "b") and pkey != DEFAULT_PKEY:
            m.fail(e, f"a queue pair sent P_Key {pkey:#x}")
        if op == READ_REQUEST:
            if not _bool(got["infiniband.bth.a"]):
                m.fail(e, "READ request without AckReq")
            read_psns.setdefault(src, set()).add(psn)
        if got["infiniband.aeth.msn"]:
            msn = _int(got["infiniband.aeth.msn"])
            before = last_msn.get((src, qp))
            if before is not None and ((msn - before) & 0xFFFFFF) >= 1 << 23:
                m.fail(e, f"MSN {msn} after {before}: the MSN went back")
            last_msn[(src, qp)] = msn
        if op in (READ_RESPONSE_FIRST, READ_RESPONSE_ONLY):
            if psn not in read_psns.get(dst, set()):
                m.fail(e, f"read responses begin at PSN {psn}, where no READ "
                          f"request began")
            stream[(src, qp)] = ((psn + 1) & 0xFFFFFF
                                 if op == READ_RESPONSE_FIRST else None)
        elif op in (READ_RESPONSE_MIDDLE, READ_RESPONSE_LAST):
            if stream.get((src, qp)) != psn:
                m.fail(e, f"read response {op:#x} at PSN {psn} continues no "
                          f"stream of read responses")
            stream[(src, qp)] = ((psn + 1) & 0xFFFFFF
                                 if op == READ_RESPONSE_MIDDLE else None)
        if op == ACKNOWLEDGE:
            syndrome = _int(got["infiniband.aeth.syndrome"])
            if syndrome >> 5 == 3 and syndrome != 0x60:
                dead.add((src, qp))
        if op in ATOMIC_OPCODES and e.get("other_peers"):
            answer = next((g for g, _ in rc[i + 1:]
                           if g["ip.src"] == dst and
                           _int(g["infiniband.bth.opcode"]) in
                           RESPONSE_OPCODES), None)
            if (answer is None or
                    _int(answer["infiniband.bth.opcode"]) !=
                    ATOMIC_ACKNOWLEDGE or
                    _int(answer["infiniband.bth.psn"]) != psn):
                m.fail(e, f"atomic opcode {op:#x} was not answered with an "
                          f"ATOMIC ACKNOWLEDGE at PSN {psn}")
        elif op not in RESPONSE_OPCODES and op not in SUPPORTED_OPCODES and \
                not e.get("other_peers"):
            answer = next((g for g, _ in rc[i + 1:]
                           if g["ip.src"] == dst and
                           _int(g["infiniband.bth.opcode"]) == ACKNOWLEDGE),
                          None)
            if (answer is None or
                    _int(answer["infiniband.aeth.syndrome"]) !=
                    NAK_INVALID_REQUEST or
                    _int(answer["infiniband.bth.psn"]) != psn):
                m.fail(e, f"opcode {op:#x} was not answered with NAK "
                          f"invalid request at PSN {psn}")
        if (pkey & 0x7FFF) != (DEFAULT_PKEY & 0x7FFF) and i + 1 < len(rc):
            if rc[i + 1][0]["ip.src"] == dst:
                m.fail(e, f"a frame of partition {pkey:#x} was answered")


def check_cm_rules(m, decoded, expected):
    """Transaction ids as Linux's CM gives them: REQ, MRA, REP, RTU and a
    REJ of the REQ share the REQ's; a DREP repeats its DREQ's; a SIDR REP
    its SIDR REQ's (the one with its request id); none is 0. A REQ's packet
    rate is a defined rate and its local ACK timeout is not 0 ("none"). The
    IP CM header of a REQ names the frame's own source and destination
    addresses (Linux's passive side finds its net device and the listener
    by them: cma_save_ip_info, validate_net_dev). A SIDR REP answers for
    its SIDR REQ's service id; one that resolves (status 0) names a queue
    pair other than QP0 and QP1 and, for an RDMA_PS_UDP port, the Q_Key of
    librdmacm's UD queue pairs (RDMA_UDP_QKEY), without which the two could
    not talk. SIDR, which tshark 4.0 does not dissect, is read at the
    offsets of IBA tables 114 and 115."""
    cm = [(got, e) for got, e in zip(decoded, expected) if e["kind"] == "cm"]
    req_tid = {}   # active comm id -> TID of its REQ
    dreq_tid = {}  # DREQ sender's comm id -> TID
    sidr_req = {}  # request id -> (TID, service id) of its SIDR REQ
    for got, e in cm:
        tid = _int(got["infiniband.mad.transactionid"])
        t = _int(got["infiniband.mad.attributeid"])
        data = bytes.fromhex(got["infiniband.mad.data"].replace(":", ""))
        local_id, remote_id = struct.unpack_from(">II", data, 0)
        if tid == 0:
            m.fail(e, "transaction id 0")
        if t == CM_SIDR_REQ:
            sidr_req[local_id] = (tid, struct.unpack_from(">Q", data, 8)[0])
            continue
        if t == CM_SIDR_REP:
            status = data[4]
            qpn = int.from_bytes(data[8:11], "big")
            sid, qkey = struct.unpack_from(">QI", data, 12)
            asked_tid, asked_sid = sidr_req.get(local_id, (None, None))
            m.expect(e, "SIDR REP transaction id = its SIDR REQ's", tid,
                     asked_tid)
            m.expect(e, "SIDR REP service id = its SIDR REQ's", sid,
                     asked_sid)
            if status == 0 and qpn < 2:
                m.fail(e, f"SIDR REP resolves to QP {qpn}")
            if (status == 0 and is_ip_cm_service_id(sid) and
                    (sid >> 16) & 0xFFFF == PS_UDP and qkey != RDMA_UDP_QKEY):
                m.fail(e, f"SIDR REP for an RDMA_PS_UDP port with Q_Key "
                          f"{qkey:#010x}, not librdmacm's {RDMA_UDP_QKEY:#x}")
            continue
        if t == CM_REQ:
            req_tid[local_id] = tid
            if got["infiniband.cm.req.ip_cm"]:
                m.expect(e, "IP CM header's source address",
                         got["infiniband.cm.req.ip_cm.sip4"], got["ip.src"])
                m.expect(e, "IP CM header's destination address",
                         got["infiniband.cm.req.ip_cm.dip4"], got["ip.dst"])
            rate = data[91] & 0x3F  # low six bits of byte 91 (see above)
            m.expect(e, "REQ packet rate", rate, e["packet_rate"])
            if rate not in DEFINED_RATES:
                m.fail(e, f"REQ packet rate {rate} is not a defined rate")
            if _int(got["infiniband.cm.req.prim_localacktout"]) == 0:
                m.fail(e, "REQ local ACK timeout 0 (none)")
            continue
        if t == CM_MRA:
            # Wireshark 4.0 leaves MRA undissected: read it at IBA offsets.
            m.expect(e, "MRA message MRAed", data[8] >> 6, e["refers_to"])
            m.expect(e, "MRA service timeout", data[9] >> 3,
                     e["service_timeout"])
        if t == CM_DREQ:
            dreq_tid[local_id] = tid
            continue
        if t == CM_DREP:
            m.expect(e, "DREP transaction id = its DREQ's", tid,
                     dreq_tid.get(remote_id))
            continue
        # MRA, REP and REJ come from the passive side (the REQ's sender is
        # their remote), RTU from the active side itself.
        active = local_id if t == CM_RTU else remote_id
        m.expect(e, f"{CM_LABELS[t]} transaction id = the REQ's", tid,
                 req_tid.get(active))


def raw_frame_icrc_hex(frames, e):
    """The ICRC of expected frame `e` as tshark prints it (big-endian)."""
    return frames[e["index"] - 1][-ICRC_LEN:].hex()


def main(argv):
    sets = ("--set=golden", "--set=conversation")
    if (len(argv) not in (4, 5) or argv[1] not in ("scapy", "tshark") or
            (len(argv) == 5 and argv[4] not in sets)):
        sys.exit(f"usage: {argv[0]} scapy|tshark FRAMES.pcap FRAMES.json "
                 f"[{'|'.join(sets)}]")
    complete = len(argv) == 4 or argv[4] == sets[0]
    frames, expected = load(argv[2], argv[3], complete)
    if argv[1] == "scapy":
        return check_scapy(frames, expected)
    return check_tshark(argv[2], frames, expected)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
