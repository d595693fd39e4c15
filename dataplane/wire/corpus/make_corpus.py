#!/usr/bin/python3
"""Writes the checked-in seed corpora of the libFuzzer targets.

Seeds come from two encoders: the project's golden frames (the pcap that
//dataplane/wire:golden_frames writes), and frames built here with scapy's
RoCE layers (scapy.contrib.roce: BTH and AETH, with scapy's own ICRC and
IPv4 checksum; RETH, DETH, ImmDt, AtomicETH, AtomicAckETH and IETH packed by
hand), so the parsers also see frames no code of this project encoded.

Usage (from the repository root):
  bazel run //dataplane/wire:golden_frames -- /tmp/g.pcap /tmp/g.json
  dataplane/wire/corpus/make_corpus.py /tmp/g.pcap

Writes dataplane/wire/corpus/{roce,cm}, dataplane/rc/corpus/responder and
api/shm/corpus/{ring,setup} and control/corpus/control_message; files of the same name are replaced, others
(regression inputs of fixed crashes) are left alone. Needs Debian's
python3-scapy.
"""

import os
import struct
import sys

from scapy.all import ARP, IP, UDP, Ether, Raw, rdpcap
from scapy.contrib.roce import AETH, BTH

ROCE_PORT = 4791
REQ_MAC, RESP_MAC = "02:00:00:00:00:01", "02:00:00:00:00:02"
REQ_IP, RESP_IP = "10.0.0.1", "10.0.0.2"
# The golden conversation's responder (dataplane/rc/responder_fuzzer.cc).
RESP_QPN, REQ_QPN = 0x123, 0x11
WRITE_VA, WRITE_RKEY = 0x00007F3A12340000, 0x00012A05
READ_VA, READ_RKEY = 0x00007F3A56780010, 0x80003B07
PMTU = 1024

OP = {
    "SEND_ONLY": 0x04, "SEND_FIRST": 0x00, "SEND_LAST": 0x02,
    "SEND_ONLY_IMM": 0x05,
    "WRITE_FIRST": 0x06, "WRITE_MIDDLE": 0x07, "WRITE_LAST": 0x08,
    "WRITE_ONLY": 0x0A, "WRITE_ONLY_IMM": 0x0B, "READ_REQUEST": 0x0C,
    "READ_RESPONSE_FIRST": 0x0D, "READ_RESPONSE_LAST": 0x0F,
    "READ_RESPONSE_ONLY": 0x10, "ACK": 0x11,
    "ATOMIC_ACK": 0x12, "COMPARE_SWAP": 0x13, "FETCH_ADD": 0x14,
    "SEND_LAST_INV": 0x16, "SEND_ONLY_INV": 0x17,
    "UC_SEND_FIRST": 0x20, "UC_SEND_LAST_IMM": 0x23, "UC_SEND_ONLY_IMM": 0x25,
    "UC_WRITE_FIRST": 0x26, "UC_WRITE_MIDDLE": 0x27, "UC_WRITE_ONLY": 0x2A,
    "UC_WRITE_ONLY_IMM": 0x2B,
    "UD_SEND_ONLY": 0x64, "UD_SEND_ONLY_IMM": 0x65,
}
# Queue pairs of the other peers of the golden frames, which serve atomics,
# invalidation, UC and UD.
ATOMIC_QPN, UC_QPN, UD_QPN = 0x126, 0x127, 0x128
ATOMIC_VA, ATOMIC_RKEY, UD_QKEY = 0x00007F3A9ABC0040, 0x00045A11, 0x0000C0DE


def reth(va, rkey, length):
    return struct.pack("!QII", va, rkey, length)


def deth(qkey, src_qp):
    """Q_Key, a reserved byte, the 24-bit source QP."""
    return struct.pack("!II", qkey, src_qp & 0xFFFFFF)


def atomic_eth(va, rkey, swap_add, compare):
    return struct.pack("!QIQQ", va, rkey, swap_add, compare)


def ieth(rkey):
    return struct.pack("!I", rkey)


def roce(op, psn, dqpn=RESP_QPN, ext=b"", payload=b"", ackreq=False,
         to_requester=False, pkey=0xFFFF):
    """One RoCEv2 frame as scapy encodes it (ICRC and IPv4 checksum)."""
    pad = (4 - len(payload) % 4) % 4
    src_mac, dst_mac = (RESP_MAC, REQ_MAC) if to_requester else (REQ_MAC,
                                                                 RESP_MAC)
    src_ip, dst_ip = (RESP_IP, REQ_IP) if to_requester else (REQ_IP, RESP_IP)
    pkt = (Ether(src=src_mac, dst=dst_mac) /
           IP(src=src_ip, dst=dst_ip, tos=26 << 2 | 2, ttl=64, flags="DF",
              id=0) /
           UDP(sport=0xC000 | (dqpn & 0x3FFF), dport=ROCE_PORT, chksum=0) /
           BTH(opcode=op, padcount=pad, pkey=pkey, dqpn=dqpn,
               ackreq=int(ackreq), psn=psn & 0xFFFFFF))
    body = ext + payload + b"\0" * pad
    if body:
        pkt = pkt / Raw(body)
    return bytes(pkt)


def aeth_frame(op, psn, syndrome, msn, payload=b""):
    """A response to our requester, with scapy's AETH layer."""
    pad = (4 - len(payload) % 4) % 4
    pkt = (Ether(src=REQ_MAC, dst=RESP_MAC) /
           IP(src=REQ_IP, dst=RESP_IP, tos=26 << 2 | 2, ttl=64, flags="DF",
              id=0) /
           UDP(sport=0xC011, dport=ROCE_PORT, chksum=0) /
           BTH(opcode=op, padcount=pad, dqpn=RESP_QPN, psn=psn) /
           AETH(syndrome=syndrome, msn=msn))
    if payload:
        pkt = pkt / Raw(payload + b"\0" * pad)
    return bytes(pkt)


def atomic_ack_frame(psn, msn, orig_data, syndrome=0x1F):
    """An ATOMIC ACKNOWLEDGE: scapy's AETH, then the AtomicAckETH."""
    return bytes(Ether(src=RESP_MAC, dst=REQ_MAC) /
                 IP(src=RESP_IP, dst=REQ_IP, tos=26 << 2 | 2, ttl=64,
                    flags="DF", id=0) /
                 UDP(sport=0xC126, dport=ROCE_PORT, chksum=0) /
                 BTH(opcode=OP["ATOMIC_ACK"], dqpn=0x14, psn=psn) /
                 AETH(syndrome=syndrome, msn=msn) /
                 Raw(struct.pack("!Q", orig_data)))


def pattern(n, seed):
    return bytes((i * 131 + seed * 17) & 0xFF for i in range(n))


def scapy_rc_frames():
    """Named single frames covering the RC opcodes."""
    base = 0x000100
    out = {
        "write-first": roce(OP["WRITE_FIRST"], base,
                            ext=reth(WRITE_VA, WRITE_RKEY, 2 * PMTU + 5),
                            payload=pattern(PMTU, 1)),
        "write-middle": roce(OP["WRITE_MIDDLE"], base + 1,
                             payload=pattern(PMTU, 2)),
        "write-last": roce(OP["WRITE_LAST"], base + 2, payload=pattern(5, 3),
                           ackreq=True),
        "write-only-7": roce(OP["WRITE_ONLY"], base,
                             ext=reth(WRITE_VA + 64, WRITE_RKEY, 7),
                             payload=pattern(7, 4), ackreq=True),
        "write-only-0": roce(OP["WRITE_ONLY"], base,
                             ext=reth(WRITE_VA, WRITE_RKEY, 0)),
        "write-only-imm": roce(OP["WRITE_ONLY_IMM"], base,
                               ext=reth(WRITE_VA, WRITE_RKEY, 6) +
                               struct.pack("!I", 0xCAFE),
                               payload=pattern(6, 5)),
        "read-request": roce(OP["READ_REQUEST"], base,
                             ext=reth(READ_VA, READ_RKEY, 2500), ackreq=True),
        "send-only": roce(OP["SEND_ONLY"], base, payload=pattern(33, 6)),
        "send-only-imm": roce(OP["SEND_ONLY_IMM"], base,
                              ext=struct.pack("!I", 7),
                              payload=pattern(2, 7)),
        "ack": aeth_frame(OP["ACK"], 0x000200, 0x1F, 1),
        "nak-seq": aeth_frame(OP["ACK"], 0x000200, 0x60, 1),
        "rnr-nak": aeth_frame(OP["ACK"], 0x000200, 0x21, 1),
        "read-response-only": aeth_frame(OP["READ_RESPONSE_ONLY"], 0x000200,
                                         0x1F, 2, pattern(10, 8)),
        "read-response-first": aeth_frame(OP["READ_RESPONSE_FIRST"],
                                          0x000200, 0x1F, 2,
                                          pattern(PMTU, 9)),
        "other-pkey": roce(OP["WRITE_ONLY"], base,
                           ext=reth(WRITE_VA, WRITE_RKEY, 4),
                           payload=pattern(4, 10), pkey=0x8001),
    }
    return out


def scapy_other_frames():
    """Named single frames of the opcodes rdmaplane's queue pairs do not
    serve but its codec reads: atomics (one at a misaligned address, which
    is the responder's to refuse), invalidation, UC and UD."""
    base = 0x000300
    a, u, d = ATOMIC_QPN, UC_QPN, UD_QPN
    return {
        "compare-swap": roce(OP["COMPARE_SWAP"], base, dqpn=a,
                             ext=atomic_eth(ATOMIC_VA, ATOMIC_RKEY,
                                            0xFFFFFFFFFFFFFFFF, 5),
                             ackreq=True),
        "fetch-add-misaligned": roce(OP["FETCH_ADD"], base + 1, dqpn=a,
                                     ext=atomic_eth(ATOMIC_VA + 3,
                                                    ATOMIC_RKEY, 1, 0),
                                     ackreq=True),
        "atomic-ack": atomic_ack_frame(base, 1, 0x0123456789ABCDEF),
        "atomic-ack-nak": atomic_ack_frame(base + 1, 1, 0, syndrome=0x61),
        "send-only-inv": roce(OP["SEND_ONLY_INV"], base + 2, dqpn=a,
                              ext=ieth(ATOMIC_RKEY), payload=pattern(20, 11),
                              ackreq=True),
        "send-last-inv": roce(OP["SEND_LAST_INV"], base + 3, dqpn=a,
                              ext=ieth(0xFFFFFFFF), payload=pattern(3, 12),
                              ackreq=True),
        "uc-send-first": roce(OP["UC_SEND_FIRST"], base, dqpn=u,
                              payload=pattern(64, 13)),
        "uc-send-last-imm": roce(OP["UC_SEND_LAST_IMM"], base + 1, dqpn=u,
                                 ext=struct.pack("!I", 0xA1B2C3D4),
                                 payload=pattern(5, 14)),
        "uc-send-only-imm": roce(OP["UC_SEND_ONLY_IMM"], base, dqpn=u,
                                 ext=struct.pack("!I", 3),
                                 payload=pattern(22, 15)),
        "uc-write-first": roce(OP["UC_WRITE_FIRST"], base, dqpn=u,
                               ext=reth(WRITE_VA, WRITE_RKEY, 2 * PMTU),
                               payload=pattern(PMTU, 16)),
        "uc-write-middle": roce(OP["UC_WRITE_MIDDLE"], base + 1, dqpn=u,
                                payload=pattern(PMTU, 17)),
        "uc-write-only": roce(OP["UC_WRITE_ONLY"], base, dqpn=u,
                              ext=reth(WRITE_VA, WRITE_RKEY, 9),
                              payload=pattern(9, 18)),
        "uc-write-only-imm": roce(OP["UC_WRITE_ONLY_IMM"], base, dqpn=u,
                                  ext=reth(WRITE_VA, WRITE_RKEY, 2) +
                                  struct.pack("!I", 0xFFFFFFFF),
                                  payload=pattern(2, 19)),
        "ud-send-only": roce(OP["UD_SEND_ONLY"], base, dqpn=d,
                             ext=deth(UD_QKEY, 0x16),
                             payload=pattern(40, 20)),
        "ud-send-only-imm": roce(OP["UD_SEND_ONLY_IMM"], base, dqpn=d,
                                 ext=deth(0xFFFFFFFF, 0xFFFFFF) +
                                 struct.pack("!I", 0x12345678),
                                 payload=pattern(13, 21)),
    }


def scapy_cm_frames(golden_cm):
    """The golden CM MADs re-wrapped by scapy (BTH, DETH, ICRC), and ARP."""
    out = {}
    for i, frame in enumerate(golden_cm):
        eth = Ether(frame)
        bth = eth[BTH]
        # UD SEND ONLY to QP1: DETH (Q_Key, source QP) then the 256-byte MAD.
        body = bytes(bth.payload)[:-4]
        out["cm-%02d" % i] = bytes(
            Ether(src=eth.src, dst=eth.dst) /
            IP(src=eth[IP].src, dst=eth[IP].dst, ttl=64, flags="DF", id=0) /
            UDP(sport=eth[UDP].sport, dport=ROCE_PORT, chksum=0) /
            BTH(opcode=bth.opcode, pkey=bth.pkey, dqpn=bth.dqpn,
                psn=bth.psn) / Raw(body))
    out["arp-request"] = bytes(
        Ether(src=REQ_MAC, dst="ff:ff:ff:ff:ff:ff") /
        ARP(op=1, hwsrc=REQ_MAC, psrc=REQ_IP, pdst=RESP_IP))
    out["arp-reply"] = bytes(
        Ether(src=RESP_MAC, dst=REQ_MAC) /
        ARP(op=2, hwsrc=RESP_MAC, psrc=RESP_IP, hwdst=REQ_MAC, pdst=REQ_IP))
    return out


# --- responder_fuzzer records (see responder_fuzzer.cc) ---------------------


def prologue(recv_psn, send_psn):
    return struct.pack("!I", recv_psn)[1:] + struct.pack("!I", send_psn)[1:]


def frame_rec(frame, addressed=False):
    return bytes([1 if addressed else 0]) + struct.pack("!H",
                                                        len(frame)) + frame


def poll(budget=16):
    return bytes([2, budget])


def tick(us):
    return bytes([3]) + struct.pack("!H", us)


def post(op, length, offset, flags=0):
    return bytes([4, op]) + struct.pack("!HH", length, offset) + bytes(
        [flags])


def post_recv(length):
    return bytes([5]) + struct.pack("!H", length)


def responder_seeds(golden_rc):
    seeds = {}
    to_resp = [f for f in golden_rc if Ether(f)[BTH].dqpn == RESP_QPN]
    if to_resp:
        data = prologue(Ether(to_resp[0])[BTH].psn, 0)
        for f in to_resp:
            data += frame_rec(f) + poll()
        seeds["golden-conversation"] = data
    b = 0x000100
    w = lambda op, psn, **kw: roce(OP[op], psn, **kw)
    seeds["scapy-write-3"] = (
        prologue(b, 0x200) +
        frame_rec(w("WRITE_FIRST", b, ext=reth(WRITE_VA, WRITE_RKEY,
                                                2 * PMTU + 5),
                    payload=pattern(PMTU, 1))) +
        frame_rec(w("WRITE_MIDDLE", b + 1, payload=pattern(PMTU, 2))) +
        frame_rec(w("WRITE_LAST", b + 2, payload=pattern(5, 3),
                    ackreq=True)) + poll())
    seeds["scapy-read-and-duplicate"] = (
        prologue(b, 0x200) +
        frame_rec(w("READ_REQUEST", b, ext=reth(READ_VA, READ_RKEY, 2500))) +
        poll(2) +
        frame_rec(w("READ_REQUEST", b, ext=reth(READ_VA, READ_RKEY, 2500))) +
        poll())
    seeds["scapy-gap-nak"] = (
        prologue(b, 0x200) +
        frame_rec(w("WRITE_ONLY", b + 5, ext=reth(WRITE_VA, WRITE_RKEY, 4),
                    payload=pattern(4, 1))) + poll() +
        frame_rec(w("WRITE_ONLY", b, ext=reth(WRITE_VA, WRITE_RKEY, 4),
                    payload=pattern(4, 1), ackreq=True)) + poll())
    seeds["scapy-write-read-only-key"] = (
        prologue(b, 0x200) +
        frame_rec(w("WRITE_ONLY", b, ext=reth(READ_VA, READ_RKEY, 8),
                    payload=pattern(8, 2))) + poll())
    seeds["scapy-send-with-receive"] = (
        prologue(b, 0x200) + post_recv(64) +
        frame_rec(w("SEND_ONLY", b, payload=pattern(33, 6))) +
        frame_rec(w("WRITE_ONLY_IMM", b + 1,
                    ext=reth(WRITE_VA, WRITE_RKEY, 6) + struct.pack("!I", 9),
                    payload=pattern(6, 5))) + poll())
    seeds["scapy-send-rnr"] = (
        prologue(b, 0x200) +
        frame_rec(w("SEND_ONLY", b, payload=pattern(9, 6))) + poll())
    # SENDs with Invalidate of keys the responder may invalidate (the
    # window's, the write region's), a resend of the first, and a WRITE
    # with the key that is gone.
    seeds["scapy-send-invalidate"] = (
        prologue(b, 0x200) + post_recv(2000) + post_recv(2000) +
        post_recv(64) +
        frame_rec(w("SEND_ONLY_INV", b, ext=ieth(ATOMIC_RKEY),
                    payload=pattern(40, 7), ackreq=True)) + poll() +
        frame_rec(w("SEND_FIRST", b + 1, payload=pattern(PMTU, 8))) +
        frame_rec(w("SEND_LAST_INV", b + 2, ext=ieth(WRITE_RKEY),
                    payload=pattern(12, 9), ackreq=True)) + poll() +
        frame_rec(w("SEND_ONLY_INV", b, ext=ieth(ATOMIC_RKEY),
                    payload=pattern(40, 7), ackreq=True)) + poll() +
        frame_rec(w("WRITE_ONLY", b + 3, ext=reth(WRITE_VA, WRITE_RKEY, 4),
                    payload=pattern(4, 1), ackreq=True)) + poll())
    # One the responder may not invalidate, a WRITE behind it, and a SEND
    # with Invalidate of our own (flags 0x10).
    seeds["scapy-send-invalidate-refused"] = (
        prologue(b, 0x200) + post_recv(64) + post(2, 100, 0x1234, 0x10) +
        frame_rec(w("SEND_ONLY_INV", b, ext=ieth(0x0BADBAD0),
                    payload=pattern(20, 3), ackreq=True)) +
        frame_rec(w("WRITE_ONLY", b + 1, ext=reth(WRITE_VA, WRITE_RKEY, 4),
                    payload=pattern(4, 1), ackreq=True)) + poll() + poll())
    # Our requester: a WRITE and a READ acknowledged and answered by the
    # peer (scapy's AETH), one NAKed, one timed out.
    seeds["scapy-completer"] = (
        prologue(b, 0x200) + post(0, 100, 0) + post(1, 10, 512) + poll() +
        frame_rec(aeth_frame(OP["ACK"], 0x200, 0x1F, 1)) +
        frame_rec(aeth_frame(OP["READ_RESPONSE_ONLY"], 0x201, 0x1F, 2,
                             pattern(10, 8))) + poll())
    seeds["scapy-completer-nak"] = (
        prologue(b, 0x200) + post(0, 2000, 0) + poll() +
        frame_rec(aeth_frame(OP["ACK"], 0x200, 0x60, 0)) + poll() +
        frame_rec(aeth_frame(OP["ACK"], 0x201, 0x62, 0)) + poll())
    seeds["scapy-completer-timeout"] = (
        prologue(b, 0x200) + post(1, 3000, 0) + poll() + tick(60) + poll() +
        tick(200) + poll() + tick(1000) + poll() +
        frame_rec(aeth_frame(OP["READ_RESPONSE_FIRST"], 0x200, 0x1F, 0,
                             pattern(PMTU, 1))) + poll())
    return seeds


# --- ring_fuzzer and setup_fuzzer inputs ------------------------------------

# Entry sizes of api/shm/layout.h, by ring_fuzzer's type byte.
ENTRY_SIZES = {0: 144, 1: 120, 2: 160, 3: 144, 4: 32}
RING_MAGIC, RING_VERSION = 0x52474E52, 1


def ring_image(kind, capacity, head, tail, entries=b""):
    size = ENTRY_SIZES[kind]
    header = struct.pack("<IHHI", RING_MAGIC, RING_VERSION, size, capacity)
    header += b"\0" * (64 - len(header))
    image = header + struct.pack("<I", head) + b"\0" * 60
    image += struct.pack("<I", tail) + b"\0" * 60
    slots = bytearray(capacity * size)
    slots[:len(entries)] = entries[:len(slots)]
    return image + bytes(slots)


def send_entry(wr_id, op, sges, remote=0, rkey=0, flags=0):
    e = struct.pack("<QBBHI", wr_id, op, len(sges), 0, flags)
    for addr, length, lkey in sges + [(0, 0, 0)] * (8 - len(sges)):
        e += struct.pack("<QII", addr, length, lkey)
    return e + struct.pack("<QII", remote, rkey, 0)


def ring_seeds():
    write = send_entry(1, 1, [(0x7F0000001000, 4096, 3)], 0x7F0000200000,
                       0x1001)
    read = send_entry(2, 2, [(0x7F0000001000, 64, 3), (0x7F0000002000, 64, 3)],
                      0x7F0000200000, 0x1001, 0x2)
    return {
        "send-two": bytes([2, 0]) + ring_image(2, 4, 2, 0, write + read),
        # Indices across the 2^32 wrap, two entries waiting.
        "send-wrapped": bytes([2, 1]) + ring_image(2, 2, 1, 0xFFFFFFFF,
                                                   write + read),
        "send-corrupt": bytes([2, 0]) + ring_image(2, 4, 9, 0, write),
        "control-empty": bytes([0, 2]) + ring_image(0, 8, 5, 5),
        "control-one": bytes([0, 0]) + ring_image(0, 2, 1, 0, b"\x07" * 144),
        "response-full": bytes([1, 3]) + ring_image(1, 2, 2, 0, b"\x01" * 240),
        "recv-one": bytes([3, 0]) + ring_image(3, 1, 1, 0, b"\x02" * 144),
        "completion-four": bytes([4, 4]) + ring_image(4, 4, 4, 0,
                                                      b"\x03" * 128),
    }


SETUP_MAGIC, SETUP_VERSION = 0x53504452, 1


def setup_message(typ, status=0, ident=0, address=0, length=0, text=b""):
    return struct.pack("<IHHiIQQ64s", SETUP_MAGIC, SETUP_VERSION, typ, status,
                       ident, address, length, text)


def piece(data, nfds=0):
    return bytes([nfds << 6, len(data)]) + data


def setup_seeds():
    hello = setup_message(1, length=1 << 20)
    arena = setup_message(3, address=0x7F0000000000, length=2 << 20)
    admin = setup_message(7, text=b"status")
    return {
        "hello-with-fd": piece(hello, 1),
        "hello-split": piece(hello[:40], 1) + piece(hello[40:]),
        "arena-after-hello": piece(hello, 1) + piece(arena, 1),
        "arena-free": piece(setup_message(5, ident=1)),
        "admin": piece(admin),
        "two-fds-three": piece(hello, 2) + piece(arena, 3),
        "bad-magic": piece(b"\0" * 96),
    }


# --- control_message_fuzzer inputs: ControlRequest images -------------------

ARENA = 0x7F0000000000


def control_request(op, connection=0, address=0, length=0, flags=0, key=0,
                    descriptor=b""):
    return struct.pack("<QIIQQII32sII64s", 1, op, connection, address, length,
                       flags, key, descriptor, len(descriptor), 0, b"")


def rdma_descriptor(rkey, address, length, access):
    return struct.pack("<IIQQII", 0x44504452, rkey, address, length, access,
                       0)


def control_seeds():
    local = control_request(1, address=ARENA + 4096, length=8192, flags=3)
    rdma = control_request(3, address=ARENA + 4096, length=8192, flags=1)
    return {
        "register-local-twice": local + local,
        "register-local-deregister": local + control_request(2, key=1),
        "register-rdma": rdma,
        "register-rdma-deregister": rdma + control_request(
            4, descriptor=rdma_descriptor(0x101, ARENA + 4096, 8192, 1)),
        "rdma-outside-arena": control_request(3, address=ARENA - 64,
                                              length=128, flags=3),
        "rdma-second-arena-no-connection": control_request(
            3, connection=9, address=ARENA + (1 << 20), length=64, flags=2),
        "pd-alloc-register-dealloc": control_request(10) + control_request(
            1, address=ARENA, length=64, flags=3, key=1) + control_request(
                11, key=1),
        "connection-ends": rdma + control_request(99, flags=1),
    }


def write_all(folder, files):
    os.makedirs(folder, exist_ok=True)
    for name, data in files.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
    print("%s: %d files" % (folder, len(files)))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rc, cm, arp = [], [], []
    for p in rdpcap(sys.argv[1]):
        frame = bytes(p)
        if p.haslayer(ARP):
            arp.append(frame)
        elif p.haslayer(BTH) and p[BTH].dqpn == 1:
            cm.append(frame)
        else:
            rc.append(frame)
    root = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.normpath(os.path.join(root, "..", "..", ".."))
    roce_files = {"golden-%02d" % i: f for i, f in enumerate(rc)}
    roce_files.update(
        {"scapy-" + k: v for k, v in scapy_rc_frames().items()})
    roce_files.update(
        {"scapy-" + k: v for k, v in scapy_other_frames().items()})
    write_all(os.path.join(root, "roce"), roce_files)
    cm_files = {"golden-cm-%02d" % i: f for i, f in enumerate(cm)}
    cm_files.update({"golden-arp-%02d" % i: f for i, f in enumerate(arp)})
    cm_files.update({"scapy-" + k: v for k, v in scapy_cm_frames(cm).items()})
    write_all(os.path.join(root, "cm"), cm_files)
    write_all(os.path.join(repo, "dataplane", "rc", "corpus", "responder"),
              responder_seeds(rc))
    write_all(os.path.join(repo, "api", "shm", "corpus", "ring"),
              ring_seeds())
    write_all(os.path.join(repo, "api", "shm", "corpus", "setup"),
              setup_seeds())
    write_all(os.path.join(repo, "control", "corpus", "control_message"),
              control_seeds())


if __name__ == "__main__":
    main()
