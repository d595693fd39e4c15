#include "dataplane/wire/arp.h"

#include <cstring>

#include "dataplane/wire/bytes.h"

namespace rdmaplane::wire {
namespace {

constexpr uint16_t kArpHardwareEthernet = 1;
constexpr uint8_t kEthernetAddrLen = 6;
constexpr uint8_t kIpv4AddrLen = 4;


void PutMac(uint8_t* p, const MacAddr& mac) {
  std::memcpy(p, mac.bytes.data(), mac.bytes.size());
}
MacAddr GetMac(const uint8_t* p) {
  MacAddr mac;
  std::memcpy(mac.bytes.data(), p, mac.bytes.size());
  return mac;
}

}  // namespace

size_t EncodeArp(const ArpMessage& m, std::span<uint8_t> out) {
  if (out.size() < kArpFrameLen) return 0;
  if (m.op != kArpOpRequest && m.op != kArpOpReply) return 0;
  uint8_t* p = out.data();
  PutMac(p, m.op == kArpOpRequest ? kBroadcastMac : m.target_mac);
  PutMac(p + 6, m.sender_mac);
  Put16(p + 12, kEtherTypeArp);

  uint8_t* arp = p + kEthHeaderLen;
  Put16(arp, kArpHardwareEthernet);
  Put16(arp + 2, kEtherTypeIpv4);
  arp[4] = kEthernetAddrLen;
  arp[5] = kIpv4AddrLen;
  Put16(arp + 6, m.op);
  PutMac(arp + 8, m.sender_mac);
  Put32(arp + 14, m.sender_ip);
  PutMac(arp + 18, m.target_mac);
  Put32(arp + 24, m.target_ip);
  std::memset(p + kArpPacketEnd, 0, kArpFrameLen - kArpPacketEnd);
  return kArpFrameLen;
}

bool ParseArp(std::span<const uint8_t> frame, ArpMessage* out) {
  if (frame.size() < kArpPacketEnd) return false;
  const uint8_t* p = frame.data();
  if (Get16(p + 12) != kEtherTypeArp) return false;
  const uint8_t* arp = p + kEthHeaderLen;
  if (Get16(arp) != kArpHardwareEthernet || Get16(arp + 2) != kEtherTypeIpv4 ||
      arp[4] != kEthernetAddrLen || arp[5] != kIpv4AddrLen) {
    return false;
  }
  const uint16_t op = Get16(arp + 6);
  if (op != kArpOpRequest && op != kArpOpReply) return false;
  // The group bit: set for multicast and broadcast addresses.
  if ((arp[8] & 0x01) != 0) return false;
  out->op = op;
  out->sender_mac = GetMac(arp + 8);
  out->sender_ip = Get32(arp + 14);
  out->target_mac = GetMac(arp + 18);
  out->target_ip = Get32(arp + 24);
  return true;
}

ArpMessage MakeArpReply(const ArpMessage& request, const MacAddr& my_mac) {
  ArpMessage reply;
  reply.op = kArpOpReply;
  reply.sender_mac = my_mac;
  reply.sender_ip = request.target_ip;
  reply.target_mac = request.sender_mac;
  reply.target_ip = request.sender_ip;
  return reply;
}

}  // namespace rdmaplane::wire
