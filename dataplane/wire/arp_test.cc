#include "dataplane/wire/arp.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace rdmaplane::wire {
namespace {

constexpr MacAddr kAskerMac{{0x02, 0x00, 0x00, 0x00, 0x00, 0x01}};
constexpr MacAddr kOwnerMac{{0x02, 0x00, 0x00, 0x00, 0x00, 0x02}};

ArpMessage Request() {
  ArpMessage m;
  m.op = kArpOpRequest;
  m.sender_mac = kAskerMac;
  m.sender_ip = 0x0A000001;
  m.target_ip = 0x0A000002;
  return m;
}

std::vector<uint8_t> Encode(const ArpMessage& m) {
  std::vector<uint8_t> frame(kArpFrameLen);
  EXPECT_EQ(EncodeArp(m, frame), kArpFrameLen);
  return frame;
}

TEST(ArpTest, RequestBytesMatchRfc826) {
  const std::vector<uint8_t> frame = Encode(Request());
  const std::vector<uint8_t> want = {
      0xff, 0xff, 0xff, 0xff, 0xff, 0xff,               // broadcast
      0x02, 0x00, 0x00, 0x00, 0x00, 0x01,               // sender
      0x08, 0x06,                                       // ARP
      0x00, 0x01, 0x08, 0x00, 0x06, 0x04,               // Ethernet, IPv4, 6, 4
      0x00, 0x01,                                       // request
      0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 10, 0, 0, 1,  // sender
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 10, 0, 0, 2,  // target
  };
  ASSERT_EQ(frame.size(), 60u);
  EXPECT_EQ(std::vector<uint8_t>(frame.begin(), frame.begin() + 42), want);
  for (size_t i = 42; i < frame.size(); ++i) EXPECT_EQ(frame[i], 0) << i;
}

TEST(ArpTest, RequestAndReplyRoundTrip) {
  const ArpMessage request = Request();
  ArpMessage parsed;
  ASSERT_TRUE(ParseArp(Encode(request), &parsed));
  EXPECT_EQ(parsed, request);

  const ArpMessage reply = MakeArpReply(parsed, kOwnerMac);
  EXPECT_EQ(reply.op, kArpOpReply);
  EXPECT_EQ(reply.sender_mac, kOwnerMac);
  EXPECT_EQ(reply.sender_ip, 0x0A000002u);
  EXPECT_EQ(reply.target_mac, kAskerMac);
  EXPECT_EQ(reply.target_ip, 0x0A000001u);
  const std::vector<uint8_t> frame = Encode(reply);
  // A reply goes straight to the asker.
  EXPECT_TRUE(
      std::equal(frame.begin(), frame.begin() + 6, kAskerMac.bytes.begin()));
  ASSERT_TRUE(ParseArp(frame, &parsed));
  EXPECT_EQ(parsed, reply);
}

TEST(ArpTest, UnpaddedAndOverlongFramesParse) {
  std::vector<uint8_t> frame = Encode(Request());
  ArpMessage parsed;
  frame.resize(42);
  EXPECT_TRUE(ParseArp(frame, &parsed));
  frame.resize(64, 0xAB);  // trailer bytes after the padding
  EXPECT_TRUE(ParseArp(frame, &parsed));
}

TEST(ArpTest, EncodeRejectsSmallBufferAndUnknownOp) {
  std::vector<uint8_t> out(kArpFrameLen - 1);
  EXPECT_EQ(EncodeArp(Request(), out), 0u);
  out.resize(kArpFrameLen);
  ArpMessage m = Request();
  m.op = 3;  // RARP request
  EXPECT_EQ(EncodeArp(m, out), 0u);
}

TEST(ArpTest, ParseIsStrict) {
  const std::vector<uint8_t> good = Encode(Request());
  struct Case {
    const char* name;
    size_t offset;
    uint8_t value;
  };
  const Case cases[] = {
      {"ethertype IPv4", 13, 0x00},   {"hardware type 6", 15, 0x06},
      {"protocol IPv6", 16, 0x86},    {"hardware length", 18, 8},
      {"protocol length", 19, 16},    {"op 0", 21, 0},
      {"op 3 (RARP)", 21, 3},         {"op 0x0101", 20, 1},
      {"multicast sender", 22, 0x01}, {"broadcast sender", 22, 0xFF},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<uint8_t> frame = good;
    frame[c.offset] = c.value;
    ArpMessage parsed;
    parsed.op = 77;
    EXPECT_FALSE(ParseArp(frame, &parsed));
    EXPECT_EQ(parsed.op, 77);  // untouched
  }
  for (size_t len = 0; len < 42; ++len) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + len);
    ArpMessage parsed;
    EXPECT_FALSE(ParseArp(cut, &parsed)) << len;
  }
}

}  // namespace
}  // namespace rdmaplane::wire
