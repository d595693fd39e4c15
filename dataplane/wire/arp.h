// ARP for IPv4 over Ethernet (RFC 826): what the connection manager needs to
// learn a peer's MAC address and to answer for its own address.
//
// Encoding writes a whole Ethernet frame padded to the 60-byte minimum;
// parsing accepts only Ethernet/IPv4 ARP requests and replies. Neither
// allocates and neither reads outside the span it is given.
// Thread-safe (pure functions).
#ifndef RDMAPLANE_DATAPLANE_WIRE_ARP_H_
#define RDMAPLANE_DATAPLANE_WIRE_ARP_H_

#include <cstddef>
#include <cstdint>
#include <span>

#include "dataplane/wire/roce.h"

namespace rdmaplane::wire {

inline constexpr uint16_t kEtherTypeArp = 0x0806;
inline constexpr uint16_t kArpOpRequest = 1;
inline constexpr uint16_t kArpOpReply = 2;
// Ethernet header plus the 28-byte Ethernet/IPv4 ARP packet.
inline constexpr size_t kArpPacketEnd = kEthHeaderLen + 28;
// The Ethernet minimum without FCS; EncodeArp pads to it with zeros.
inline constexpr size_t kArpFrameLen = 60;
inline constexpr MacAddr kBroadcastMac{{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}};

struct ArpMessage {
  uint16_t op = kArpOpRequest;  // kArpOpRequest or kArpOpReply
  MacAddr sender_mac;
  uint32_t sender_ip = 0;  // host order, like Path
  MacAddr target_mac;      // all zeros in a request
  uint32_t target_ip = 0;
  friend bool operator==(const ArpMessage&, const ArpMessage&) = default;
};

// Writes the frame: to the broadcast address for a request, to target_mac for
// a reply, from sender_mac. Returns kArpFrameLen, or 0 when `out` is shorter
// than that or `m.op` is neither request nor reply.
size_t EncodeArp(const ArpMessage& m, std::span<uint8_t> out);

// Accepts an Ethernet/IPv4 ARP request or reply (hardware type 1, protocol
// 0x0800, address lengths 6 and 4) whose sender MAC is a unicast address; a
// neighbour table must never learn a group address. Ethernet padding after
// the packet is ignored. Fills `out` only on success.
bool ParseArp(std::span<const uint8_t> frame, ArpMessage* out);

// The reply to `request` from the owner of request.target_ip.
ArpMessage MakeArpReply(const ArpMessage& request, const MacAddr& my_mac);

}  // namespace rdmaplane::wire

#endif  // RDMAPLANE_DATAPLANE_WIRE_ARP_H_
