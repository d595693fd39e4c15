#!/usr/bin/python3
"""Checks rdmaplane's golden RoCEv2 frames with decoders written by others.

The frames come from the C++ codec (golden_frames writes a pcap file and a
JSON file with the field values each frame was built from). Two modes:

  golden_check.py scapy  FRAMES.pcap FRAMES.json
      Decodes every frame with scapy.contrib.roce and compares the fields;
      recomputes the ICRC with scapy, and once more the way Linux rxe does
      (raw CRC register, seed 0xdebb20e3), and compares both with the frame's
      last four bytes; rebuilds each frame from the expected fields with
      scapy (which computes the IPv4 checksum and the ICRC itself) and
      requires the result to equal our frame byte for byte.

  golden_check.py tshark FRAMES.pcap FRAMES.json
      Decodes the pcap with tshark, requires every frame to be dissected as
      InfiniBand with the expected BTH/RETH/AETH fields and no malformed-packet
      or expert-info warning, and checks that the expert-info check does flag
      a deliberately truncated frame.

Exits non-zero with a message on the first kind of failure found; prints
every mismatch. Run with Debian's /usr/bin/python3 (python3-scapy).
"""

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
AETH_OPCODES = (0x0D, 0x0F, 0x10, 0x11)


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


def load(pcap_path, json_path):
    frames = read_pcap(pcap_path)
    with open(json_path) as f:
        expected = json.load(f)
    if len(frames) != len(expected) or not frames:
        sys.exit(f"{pcap_path} has {len(frames)} frames, "
                 f"{json_path} describes {len(expected)}")
    for i, e in enumerate(expected):
        e["index"] = i + 1  # pcap frame numbers start at 1
        e["payload"] = bytes.fromhex(e["payload_hex"])
        if len(e["payload"]) != e["payload_len"]:
            sys.exit(f"{json_path}: frame {i + 1}: payload_hex has "
                     f"{len(e['payload'])} bytes, payload_len says "
                     f"{e['payload_len']}")
        if len(frames[i]) != e["frame_len"]:
            sys.exit(f"frame {i + 1}: {len(frames[i])} bytes in the pcap, "
                     f"{e['frame_len']} in the JSON")
    opcodes = {e["opcode"] for e in expected}
    missing = set(RETH_OPCODES + AETH_OPCODES + (0x07, 0x08, 0x0E)) - opcodes
    if missing:
        sys.exit(f"no golden frame for opcodes {sorted(missing)}")
    return frames, expected


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
        from scapy.fields import IntField, XIntField, XLongField
        from scapy.layers.inet import IP, UDP
        from scapy.layers.l2 import Ether
        from scapy.packet import Packet, Raw, bind_layers
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

    # scapy binds AETH to ACKNOWLEDGE only; READ responses carry one too.
    for op in RETH_OPCODES:
        bind_layers(BTH, RETH, opcode=op)
    for op in AETH_OPCODES:
        if op != 0x11:
            bind_layers(BTH, AETH, opcode=op)

    m = Mismatches()
    for raw_frame, e in zip(frames, expected):
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
        data = pkt[Raw].load if pkt.haslayer(Raw) else b""
        m.expect(e, "payload + pad", data.hex(),
                 (e["payload"] + bytes(e["pad"])).hex())

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
        if e["reth"] is not None:
            rebuilt /= RETH(va=e["reth"]["va"], rkey=e["reth"]["rkey"],
                            dmalen=e["reth"]["dma_length"])
        if e["aeth"] is not None:
            rebuilt /= AETH(syndrome=e["aeth"]["syndrome"],
                            msn=e["aeth"]["msn"])
        body = e["payload"] + bytes(e["pad"])
        if body:
            rebuilt /= Raw(body)
        rebuilt = bytes(rebuilt)
        if rebuilt != raw_frame:
            diff = [i for i in range(min(len(rebuilt), len(raw_frame)))
                    if rebuilt[i] != raw_frame[i]]
            m.fail(e, f"scapy's rebuild differs: {len(rebuilt)} vs "
                      f"{len(raw_frame)} bytes, first differing offsets "
                      f"{diff[:8]}")
    status = m.exit_status("scapy")
    if status == 0:
        print(f"scapy: {len(frames)} frames decoded and ICRCs recomputed "
              f"(scapy and rxe-style), all match")
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
    "infiniband.invariant.crc",
    "data.len",
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
    fields = TSHARK_FIELDS + status_fields
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

    for row, raw_frame, e in zip(rows, frames, expected):
        got = dict(zip(fields, row))
        m.expect(e, "frame.number", int(got["frame.number"]), e["index"])
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
        reth = e["reth"] or {}
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
        # tshark shows the ICRC as a big-endian number; it must have found
        # it in the last four bytes, right after the payload and pad.
        m.expect(e, "invariant.crc", opt_int(got["infiniband.invariant.crc"]),
                 int.from_bytes(raw_frame[-ICRC_LEN:], "big"))
        body = e["payload_len"] + e["pad"]
        m.expect(e, "data.len", opt_int(got["data.len"]), body or None)
        for f in status_fields:
            # Wireshark's checksum status: 1 means good.
            m.expect(e, f, got[f], "1")

    # The verbose tree: every frame an InfiniBand packet with a BTH.
    verbose = tshark("-r", pcap_path, "-V")
    per_frame = re.split(r"^Frame \d+: ", verbose, flags=re.MULTILINE)[1:]
    if len(per_frame) != len(expected):
        sys.exit(f"tshark -V printed {len(per_frame)} frames")
    for text, e in zip(per_frame, expected):
        for line in (
                "InfiniBand",
                "    Base Transport Header",
                f"        Destination Queue Pair: 0x{e['dest_qp']:06x}",
                f"        Packet Sequence Number: {e['psn']}"):
            if not re.search("^" + re.escape(line) + "$", text, re.MULTILINE):
                m.fail(e, f"tshark -V lacks line {line.strip()!r}")
        if not re.search(r"^        Opcode: Reliable Connection \(RC\) - .* "
                         rf"\({e['opcode']}\)$", text, re.MULTILINE):
            m.fail(e, "tshark -V lacks an RC opcode line for opcode "
                      f"{e['opcode']}")
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
        cut = frames[-1][:-6]
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
        print(f"tshark: {len(frames)} frames dissected as InfiniBand, "
              f"fields match, no expert warnings ({checked})")
    return status


def main(argv):
    if len(argv) != 4 or argv[1] not in ("scapy", "tshark"):
        sys.exit(f"usage: {argv[0]} scapy|tshark FRAMES.pcap FRAMES.json")
    frames, expected = load(argv[2], argv[3])
    if argv[1] == "scapy":
        return check_scapy(frames, expected)
    return check_tshark(argv[2], frames, expected)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
