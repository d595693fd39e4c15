// IpCm between two daemons whose CM frames travel encoded and parsed
// (wire::EncodeCmFrame, ParseCmFrame), and inside one daemon: the events
// each side's application sees, the messages on the wire, time-outs on a
// clock the test moves, and what bad requests get.
#include "control/ip_cm.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "api/shm/layout.h"
#include "control/sessions.h"
#include "control/testing/fake_session.h"
#include "dataplane/wire/cm.h"

namespace rdmaplane::control {
namespace {

using shm::CmEvent;
using shm::CmParams;
using shm::ControlRequest;
using shm::ControlResponse;

constexpr uint32_t kIpA = 0xC6336401;  // 198.51.100.1
constexpr uint32_t kIpB = 0xC6336402;
constexpr uint32_t kIpNobody = 0xC6336409;
constexpr wire::MacAddr kMacA{{0x02, 0, 0, 0, 0, 0x0A}};
constexpr wire::MacAddr kMacB{{0x02, 0, 0, 0, 0, 0x0B}};

// Two daemons' IpCm on one wire. Each message is encoded as a frame, kept
// (so tests can look at it), and parsed again by the receiver when the
// test delivers; ARP is answered for the two addresses only.
class Wire {
 public:
  class End : public IpCm::Link {
   public:
    End(Wire* w, uint32_t ip, wire::MacAddr mac) : w_(w), ip_(ip), mac_(mac) {}
    std::optional<wire::MacAddr> Neighbor(uint32_t ip) const override {
      if (known_.contains(ip)) return ip == kIpA ? kMacA : kMacB;
      return std::nullopt;
    }
    void AskNeighbor(uint32_t ip) override { ++w_->arp_requests[ip]; }
    void SendCm(const wire::CmMessage& m, uint32_t ip,
                const wire::MacAddr& mac) override {
      wire::Path path;
      path.src_mac = mac_;
      path.dst_mac = mac;
      path.src_ip = ip_;
      path.dst_ip = ip;
      path.udp_src_port = 0xC001;
      std::vector<uint8_t> frame(wire::kCmFrameLen);
      ASSERT_EQ(wire::EncodeCmFrame(path, m, frame), wire::kCmFrameLen)
          << wire::CmTypeName(m.type);
      w_->frames.push_back(frame);
    }
    std::set<uint32_t> known_;

   private:
    Wire* w_;
    uint32_t ip_;
    wire::MacAddr mac_;
  };

  // Delivers every frame sent so far (and those the answers send), unless
  // `drop` says otherwise; returns how many went.
  int Deliver(IpCm* a, IpCm* b,
              bool (*drop)(const wire::CmMessage&) = nullptr) {
    int n = 0;
    while (!frames.empty() && n < 1000) {
      const std::vector<uint8_t> f = frames.front();
      frames.pop_front();
      wire::CmMessage m;
      wire::Path from;
      EXPECT_TRUE(wire::ParseCmFrame(f, &m, &from));
      seen.push_back(m);
      ++n;
      if (drop != nullptr && drop(m)) continue;
      if (!IpCm::Owns(m)) {
        ++not_ours;
        continue;
      }
      (from.dst_ip == kIpA ? a : b)->OnMessage(m, from.src_ip, from.src_mac);
    }
    return n;
  }
  std::deque<std::vector<uint8_t>> frames;
  std::vector<wire::CmMessage> seen;
  std::map<uint32_t, int> arp_requests;
  int not_ours = 0;
};

class IpCmTest : public ::testing::Test {
 protected:
  IpCmTest()
      : end_a_(&wire_, kIpA, kMacA),
        end_b_(&wire_, kIpB, kMacB),
        a_(Options(kIpA, 1), &end_a_, [this] { return now_; }),
        b_(Options(kIpB, 7), &end_b_, [this] { return now_; }) {
    end_a_.known_ = {kIpB};
    end_b_.known_ = {kIpA};
  }
  static IpCm::Options Options(uint32_t ip, uint32_t seed) {
    IpCm::Options o;
    o.ip = ip;
    o.path_mtu = 4096;
    o.comm_id_seed = seed;
    o.max_ids_per_session = 64;
    return o;
  }

  ControlResponse Do(IpCm& cm, FakeSession& f, uint32_t op, CmParams p) {
    ControlRequest r{};
    r.op = op;
    r.cm = p;
    return cm.Handle(&f.s, r);
  }
  // Binds a new id; its daemon id.
  uint32_t Bind(IpCm& cm, FakeSession& f, uint16_t port,
                uint16_t ps = wire::kPortSpaceTcp) {
    CmParams p{};
    p.port_space = ps;
    p.local_port = port;
    const ControlResponse r = Do(cm, f, shm::kOpCmBind, p);
    EXPECT_EQ(r.status, shm::kStatusOk) << r.message;
    if (port != 0) {
      EXPECT_EQ(r.connection, port);
    }
    return r.key;
  }
  void Listen(IpCm& cm, FakeSession& f, uint32_t id, uint32_t backlog = 0) {
    CmParams p{};
    p.id = id;
    p.backlog = backlog;
    ASSERT_EQ(Do(cm, f, shm::kOpCmListen, p).status, shm::kStatusOk);
  }
  void Resolve(IpCm& cm, FakeSession& f, uint32_t id, uint32_t ip) {
    CmParams p{};
    p.id = id;
    p.remote_ip = ip;
    p.timeout_ms = 2000;
    ASSERT_EQ(Do(cm, f, shm::kOpCmResolve, p).status, shm::kStatusOk);
    std::optional<CmEvent> e = f.TakeCmEvent();
    ASSERT_TRUE(e);
    EXPECT_EQ(e->type, shm::kCmAddrResolved);
    EXPECT_EQ(e->params.id, id);
  }
  static CmParams ConnectParams(uint32_t id, uint32_t ip, uint16_t port,
                                const std::string& data) {
    CmParams p{};
    p.id = id;
    p.remote_ip = ip;
    p.remote_port = port;
    p.qpn = 0x123456;
    p.psn = 0xABCDEF;
    p.responder_resources = 4;
    p.initiator_depth = 2;
    p.retry_count = 7;
    p.rnr_retry_count = 6;
    p.private_data_len = static_cast<uint8_t>(data.size());
    std::memcpy(p.private_data, data.data(), data.size());
    return p;
  }
  static std::string DataOf(const CmParams& p, size_t n) {
    return std::string(reinterpret_cast<const char*>(p.private_data),
                       std::min<size_t>(n, p.private_data_len));
  }

  Wire wire_;
  Wire::End end_a_, end_b_;
  uint64_t now_ = 1'000'000'000;
  IpCm a_, b_;
  FakeSession client_a_{1, 1000};
  FakeSession server_b_{2, 1000};
};

// A whole RC connection across two daemons, as rdma_cm's applications see
// it, and the IP CM format on the wire.
TEST_F(IpCmTest, ConnectAcceptEstablishDisconnect) {
  const uint32_t listener = Bind(b_, server_b_, 7471);
  Listen(b_, server_b_, listener);
  const uint32_t active = Bind(a_, client_a_, 0);
  Resolve(a_, client_a_, active, kIpB);
  ASSERT_EQ(Do(a_, client_a_, shm::kOpCmConnect,
               ConnectParams(active, kIpB, 7471, "hello from A"))
                .status,
            shm::kStatusOk);
  wire_.Deliver(&a_, &b_);

  // The REQ as Linux's rdma_cm writes it.
  ASSERT_GE(wire_.seen.size(), 2u);
  const wire::CmMessage& req = wire_.seen[0];
  EXPECT_EQ(req.type, wire::CmType::kReq);
  EXPECT_EQ(req.service_id, 0x0000000001061D2Fu);
  EXPECT_EQ(req.qpn.value(), 0x123456u);
  EXPECT_EQ(req.start_psn.value(), 0xABCDEFu);
  EXPECT_EQ(req.responder_resources, 4);
  EXPECT_EQ(req.initiator_depth, 2);
  wire::IpCmHeader h;
  ASSERT_TRUE(wire::ParseIpCmHeader(req, &h));
  EXPECT_EQ(h.src_ip, kIpA);
  EXPECT_EQ(h.dst_ip, kIpB);
  EXPECT_GE(h.src_port, IpCm::kFirstEphemeralPort);
  EXPECT_EQ(std::memcmp(req.private_data.data() + 36, "hello from A", 12), 0);
  EXPECT_EQ(wire_.seen[1].type, wire::CmType::kMra);

  // The listener's application gets the request on a new id.
  std::optional<CmEvent> e = server_b_.TakeCmEvent();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->type, shm::kCmConnectRequest);
  EXPECT_EQ(e->listener, listener);
  const uint32_t passive = e->params.id;
  EXPECT_NE(passive, listener);
  EXPECT_EQ(e->params.remote_ip, kIpA);
  EXPECT_EQ(e->params.remote_port, h.src_port);
  EXPECT_EQ(e->params.local_port, 7471);
  EXPECT_EQ(e->params.port_space, wire::kPortSpaceTcp);
  EXPECT_EQ(e->params.qpn, 0x123456u);
  EXPECT_EQ(e->params.psn, 0xABCDEFu);
  // From B's side: A's initiator depth is what B serves.
  EXPECT_EQ(e->params.responder_resources, 2);
  EXPECT_EQ(e->params.initiator_depth, 4);
  EXPECT_EQ(e->params.rnr_retry_count, 6);
  EXPECT_EQ(e->params.path_mtu, wire::kIbMtu4096);
  EXPECT_EQ(e->params.private_data_len, 56);  // 92 - the 36-byte header
  EXPECT_EQ(DataOf(e->params, 12), "hello from A");
  EXPECT_FALSE(server_b_.TakeCmEvent());

  // Accept: REP with B's queue pair and data.
  CmParams accept{};
  accept.id = passive;
  accept.qpn = 0x000777;
  accept.psn = 0x111111;
  accept.responder_resources = 2;
  accept.initiator_depth = 4;
  accept.private_data_len = 196;
  std::memset(accept.private_data, 'b', 196);
  ASSERT_EQ(Do(b_, server_b_, shm::kOpCmAccept, accept).status, shm::kStatusOk);
  wire_.Deliver(&a_, &b_);
  e = client_a_.TakeCmEvent();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->type, shm::kCmConnectResponse);
  EXPECT_EQ(e->params.id, active);
  EXPECT_EQ(e->params.qpn, 0x000777u);
  EXPECT_EQ(e->params.psn, 0x111111u);
  EXPECT_EQ(e->params.responder_resources, 4);
  EXPECT_EQ(e->params.initiator_depth, 2);
  EXPECT_EQ(e->params.private_data_len, 196);
  EXPECT_EQ(DataOf(e->params, 196), std::string(196, 'b'));

  // The active application's accept sends the RTU: ESTABLISHED at B.
  CmParams rtu{};
  rtu.id = active;
  ASSERT_EQ(Do(a_, client_a_, shm::kOpCmAccept, rtu).status, shm::kStatusOk);
  wire_.Deliver(&a_, &b_);
  e = server_b_.TakeCmEvent();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->type, shm::kCmEstablished);
  EXPECT_EQ(e->params.id, passive);

  // A disconnects: DREQ, DREP; both see DISCONNECTED, then, after the
  // time-wait, TIMEWAIT_EXIT.
  CmParams id{};
  id.id = active;
  ASSERT_EQ(Do(a_, client_a_, shm::kOpCmDisconnect, id).status, shm::kStatusOk);
  wire_.Deliver(&a_, &b_);
  for (FakeSession* f : {&client_a_, &server_b_}) {
    e = f->TakeCmEvent();
    ASSERT_TRUE(e);
    EXPECT_EQ(e->type, shm::kCmDisconnected);
    EXPECT_FALSE(f->TakeCmEvent());
  }
  // B's own disconnect after the peer's is no error.
  id.id = passive;
  EXPECT_EQ(Do(b_, server_b_, shm::kOpCmDisconnect, id).status, shm::kStatusOk);
  now_ += IpCm::kTimewaitNs;
  a_.Tick();
  b_.Tick();
  for (FakeSession* f : {&client_a_, &server_b_}) {
    e = f->TakeCmEvent();
    ASSERT_TRUE(e);
    EXPECT_EQ(e->type, shm::kCmTimewaitExit);
  }
  EXPECT_EQ(wire_.not_ours, 0);
}

// Both ends on one daemon: messages to its own address never leave it.
// As Linux's CM: the queue pair numbers in REQ and REP are the consumers'
// own, whatever they are; one without a queue pair of the id's names its
// own, or none (0), and the peer's application sees exactly that.
TEST_F(IpCmTest, QueuePairNumbersPassAsTheConsumersGiveThem) {
  const uint32_t listener = Bind(b_, server_b_, 7471);
  Listen(b_, server_b_, listener);
  const uint32_t active = Bind(a_, client_a_, 0);
  Resolve(a_, client_a_, active, kIpB);
  CmParams c = ConnectParams(active, kIpB, 7471, "");
  c.qpn = 0;
  ASSERT_EQ(Do(a_, client_a_, shm::kOpCmConnect, c).status, shm::kStatusOk);
  wire_.Deliver(&a_, &b_);
  ASSERT_FALSE(wire_.seen.empty());
  EXPECT_EQ(wire_.seen[0].qpn.value(), 0u);
  std::optional<CmEvent> e = server_b_.TakeCmEvent();
  ASSERT_TRUE(e);
  ASSERT_EQ(e->type, shm::kCmConnectRequest);
  EXPECT_EQ(e->params.qpn, 0u);
  CmParams accept{};
  accept.id = e->params.id;
  accept.qpn = 1;
  ASSERT_EQ(Do(b_, server_b_, shm::kOpCmAccept, accept).status, shm::kStatusOk);
  wire_.Deliver(&a_, &b_);
  e = client_a_.TakeCmEvent();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->type, shm::kCmConnectResponse);
  EXPECT_EQ(e->params.qpn, 1u);
}

TEST_F(IpCmTest, LoopbackInsideOneDaemon) {
  FakeSession server{3, 1000};
  const uint32_t listener = Bind(a_, server, 5000);
  Listen(a_, server, listener);
  const uint32_t active = Bind(a_, client_a_, 0);
  Resolve(a_, client_a_, active, kIpA);
  ASSERT_EQ(Do(a_, client_a_, shm::kOpCmConnect,
               ConnectParams(active, kIpA, 5000, "self"))
                .status,
            shm::kStatusOk);
  std::optional<CmEvent> e = server.TakeCmEvent();
  ASSERT_TRUE(e);
  ASSERT_EQ(e->type, shm::kCmConnectRequest);
  EXPECT_EQ(DataOf(e->params, 4), "self");
  CmParams accept{};
  accept.id = e->params.id;
  accept.qpn = 99;
  ASSERT_EQ(Do(a_, server, shm::kOpCmAccept, accept).status, shm::kStatusOk);
  e = client_a_.TakeCmEvent();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->type, shm::kCmConnectResponse);
  EXPECT_EQ(e->params.qpn, 99u);
  EXPECT_TRUE(wire_.frames.empty());
}

TEST_F(IpCmTest, RejectCarriesReasonAndPrivateData) {
  const uint32_t listener = Bind(b_, server_b_, 7471);
  Listen(b_, server_b_, listener);
  const uint32_t active = Bind(a_, client_a_, 0);
  Resolve(a_, client_a_, active, kIpB);
  Do(a_, client_a_, shm::kOpCmConnect, ConnectParams(active, kIpB, 7471, ""));
  wire_.Deliver(&a_, &b_);
  std::optional<CmEvent> e = server_b_.TakeCmEvent();
  ASSERT_TRUE(e);
  CmParams no{};
  no.id = e->params.id;
  no.private_data_len = 148;
  std::memset(no.private_data, 'n', 148);
  ASSERT_EQ(Do(b_, server_b_, shm::kOpCmReject, no).status, shm::kStatusOk);
  wire_.Deliver(&a_, &b_);
  e = client_a_.TakeCmEvent();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->type, shm::kCmRejected);
  EXPECT_EQ(e->params.reason, wire::kRejConsumer);
  EXPECT_EQ(DataOf(e->params, 148), std::string(148, 'n'));
  // Too late to accept what was rejected.
  EXPECT_EQ(Do(b_, server_b_, shm::kOpCmAccept, no).status,
            shm::kStatusInvalid);
  // Private data longer than a REJ holds is refused.
  no.private_data_len = 149;
  EXPECT_EQ(Do(b_, server_b_, shm::kOpCmReject, no).status,
            shm::kStatusInvalid);
}

TEST_F(IpCmTest, NoListenerIsRejectedAsAnInvalidServiceId) {
  const uint32_t active = Bind(a_, client_a_, 0);
  Resolve(a_, client_a_, active, kIpB);
  Do(a_, client_a_, shm::kOpCmConnect, ConnectParams(active, kIpB, 1, ""));
  wire_.Deliver(&a_, &b_);
  std::optional<CmEvent> e = client_a_.TakeCmEvent();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->type, shm::kCmRejected);
  EXPECT_EQ(e->params.reason, wire::kRejInvalidServiceId);
}

// A peer that never answers: the REQ is repeated, then UNREACHABLE.
TEST_F(IpCmTest, UnansweredRequestEndsUnreachable) {
  const uint32_t active = Bind(a_, client_a_, 0);
  Resolve(a_, client_a_, active, kIpB);
  Do(a_, client_a_, shm::kOpCmConnect, ConnectParams(active, kIpB, 1, ""));
  auto drop_all = [](const wire::CmMessage&) { return true; };
  int reqs = 0;
  for (uint32_t i = 0; i < IpCm::kReqTries + 2; ++i) {
    wire_.Deliver(&a_, &b_, drop_all);
    now_ += IpCm::kReqIntervalNs;
    a_.Tick();
  }
  for (const wire::CmMessage& m : wire_.seen) {
    reqs += m.type == wire::CmType::kReq;
  }
  EXPECT_EQ(reqs, static_cast<int>(IpCm::kReqTries));
  std::optional<CmEvent> e = client_a_.TakeCmEvent();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->type, shm::kCmUnreachable);
  EXPECT_EQ(e->status, -ETIMEDOUT);
  EXPECT_FALSE(client_a_.TakeCmEvent());
}

// An address nobody answers for: ADDR_ERROR once the caller's time is up,
// not before; one that answers late still resolves.
TEST_F(IpCmTest, ResolveWaitsForArpWithinTheCallersTime) {
  const uint32_t id = Bind(a_, client_a_, 0);
  CmParams p{};
  p.id = id;
  p.remote_ip = kIpNobody;
  p.timeout_ms = 1000;
  ASSERT_EQ(Do(a_, client_a_, shm::kOpCmResolve, p).status, shm::kStatusOk);
  EXPECT_EQ(wire_.arp_requests[kIpNobody], 1);
  for (int i = 0; i < 4; ++i) {
    now_ += IpCm::kArpIntervalNs;
    a_.Tick();
    EXPECT_FALSE(client_a_.TakeCmEvent()) << i;
  }
  now_ += IpCm::kArpIntervalNs;
  a_.Tick();
  std::optional<CmEvent> e = client_a_.TakeCmEvent();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->type, shm::kCmAddrError);
  EXPECT_EQ(e->status, -ETIMEDOUT);
  EXPECT_EQ(wire_.arp_requests[kIpNobody], 5);

  // Again; this time the neighbour answers on the second try.
  ASSERT_EQ(Do(a_, client_a_, shm::kOpCmResolve, p).status, shm::kStatusOk);
  now_ += IpCm::kArpIntervalNs;
  a_.Tick();
  end_a_.known_.insert(kIpNobody);
  a_.OnNeighbor(kIpNobody);
  e = client_a_.TakeCmEvent();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->type, shm::kCmAddrResolved);
  // Connecting before resolving, or to another address, is refused.
  const uint32_t fresh = Bind(a_, client_a_, 0);
  EXPECT_EQ(
      Do(a_, client_a_, shm::kOpCmConnect, ConnectParams(fresh, kIpB, 1, ""))
          .status,
      shm::kStatusInvalid);
  EXPECT_EQ(Do(a_, client_a_, shm::kOpCmConnect, ConnectParams(id, kIpB, 1, ""))
                .status,
            shm::kStatusInvalid);
}

TEST_F(IpCmTest, SidrResolvesAUdQueuePair) {
  const uint32_t listener = Bind(b_, server_b_, 9000, wire::kPortSpaceUdp);
  Listen(b_, server_b_, listener);
  const uint32_t active = Bind(a_, client_a_, 0, wire::kPortSpaceUdp);
  Resolve(a_, client_a_, active, kIpB);
  CmParams p = ConnectParams(active, kIpB, 9000, std::string(180, 'u'));
  p.qpn = 0;  // UD: no queue pair travels in a SIDR REQ
  ASSERT_EQ(Do(a_, client_a_, shm::kOpCmConnect, p).status, shm::kStatusOk);
  wire_.Deliver(&a_, &b_);
  ASSERT_EQ(wire_.seen.size(), 1u);
  EXPECT_EQ(wire_.seen[0].type, wire::CmType::kSidrReq);
  EXPECT_EQ(wire_.seen[0].service_id, wire::IpCmServiceId(0x0111, 9000));
  std::optional<CmEvent> e = server_b_.TakeCmEvent();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->type, shm::kCmConnectRequest);
  EXPECT_EQ(e->params.port_space, wire::kPortSpaceUdp);
  EXPECT_EQ(e->params.private_data_len, 180);
  EXPECT_EQ(DataOf(e->params, 180), std::string(180, 'u'));
  CmParams accept{};
  accept.id = e->params.id;
  accept.qpn = 0x4242;
  accept.qkey = 0x01234567;
  accept.private_data_len = 3;
  std::memcpy(accept.private_data, "udp", 3);
  ASSERT_EQ(Do(b_, server_b_, shm::kOpCmAccept, accept).status, shm::kStatusOk);
  wire_.Deliver(&a_, &b_);
  e = client_a_.TakeCmEvent();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->type, shm::kCmEstablished);
  EXPECT_EQ(e->params.qpn, 0x4242u);
  EXPECT_EQ(e->params.qkey, 0x01234567u);
  EXPECT_EQ(DataOf(e->params, 3), "udp");

  // A second resolution the listener refuses: UNREACHABLE with the SIDR
  // status (2, rejected), as Linux reports it.
  const uint32_t second = Bind(a_, client_a_, 0, wire::kPortSpaceUdp);
  Resolve(a_, client_a_, second, kIpB);
  p.id = second;
  Do(a_, client_a_, shm::kOpCmConnect, p);
  wire_.Deliver(&a_, &b_);
  e = server_b_.TakeCmEvent();
  ASSERT_TRUE(e);
  CmParams no{};
  no.id = e->params.id;
  ASSERT_EQ(Do(b_, server_b_, shm::kOpCmReject, no).status, shm::kStatusOk);
  wire_.Deliver(&a_, &b_);
  e = client_a_.TakeCmEvent();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->type, shm::kCmUnreachable);
  EXPECT_EQ(e->status, wire::kSidrRejected);

  // No listener on the port: status 1.
  const uint32_t third = Bind(a_, client_a_, 0, wire::kPortSpaceUdp);
  Resolve(a_, client_a_, third, kIpB);
  p = ConnectParams(third, kIpB, 9001, "");
  Do(a_, client_a_, shm::kOpCmConnect, p);
  wire_.Deliver(&a_, &b_);
  e = client_a_.TakeCmEvent();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->type, shm::kCmUnreachable);
  EXPECT_EQ(e->status, wire::kSidrServiceIdNotSupported);
}

// The peer's DREP never comes: DISCONNECTED all the same after the DREQ's
// tries, then TIMEWAIT_EXIT.
TEST_F(IpCmTest, UnansweredDisconnectStillEnds) {
  const uint32_t listener = Bind(b_, server_b_, 7471);
  Listen(b_, server_b_, listener);
  const uint32_t active = Bind(a_, client_a_, 0);
  Resolve(a_, client_a_, active, kIpB);
  Do(a_, client_a_, shm::kOpCmConnect, ConnectParams(active, kIpB, 7471, ""));
  wire_.Deliver(&a_, &b_);
  std::optional<CmEvent> e = server_b_.TakeCmEvent();
  ASSERT_TRUE(e);
  CmParams accept{};
  accept.id = e->params.id;
  accept.qpn = 5;
  Do(b_, server_b_, shm::kOpCmAccept, accept);
  wire_.Deliver(&a_, &b_);
  ASSERT_TRUE(client_a_.TakeCmEvent());
  CmParams id{};
  id.id = active;
  Do(a_, client_a_, shm::kOpCmAccept, id);
  wire_.Deliver(&a_, &b_);
  ASSERT_TRUE(server_b_.TakeCmEvent());  // ESTABLISHED
  ASSERT_EQ(Do(a_, client_a_, shm::kOpCmDisconnect, id).status, shm::kStatusOk);
  auto drop_all = [](const wire::CmMessage&) { return true; };
  for (uint32_t i = 0; i < IpCm::kDreqTries; ++i) {
    wire_.Deliver(&a_, &b_, drop_all);
    EXPECT_FALSE(client_a_.TakeCmEvent()) << i;
    now_ += IpCm::kDreqIntervalNs;
    a_.Tick();
  }
  e = client_a_.TakeCmEvent();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->type, shm::kCmDisconnected);
  EXPECT_EQ(e->status, -ETIMEDOUT);
  now_ += IpCm::kTimewaitNs;
  a_.Tick();
  e = client_a_.TakeCmEvent();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->type, shm::kCmTimewaitExit);
}

// A session that ends: its connection's peer is told (DREQ), a request it
// had not answered is rejected, and its ports are free again.
TEST_F(IpCmTest, SessionEndTellsPeers) {
  FakeSession other_a{4, 1000};
  const uint32_t listener = Bind(b_, server_b_, 7471);
  Listen(b_, server_b_, listener, 8);
  // Connection 1: established.
  const uint32_t c1 = Bind(a_, client_a_, 0);
  Resolve(a_, client_a_, c1, kIpB);
  Do(a_, client_a_, shm::kOpCmConnect, ConnectParams(c1, kIpB, 7471, ""));
  wire_.Deliver(&a_, &b_);
  std::optional<CmEvent> e = server_b_.TakeCmEvent();
  ASSERT_TRUE(e);
  const uint32_t p1 = e->params.id;
  CmParams accept{};
  accept.id = p1;
  accept.qpn = 5;
  Do(b_, server_b_, shm::kOpCmAccept, accept);
  wire_.Deliver(&a_, &b_);
  ASSERT_TRUE(client_a_.TakeCmEvent());
  CmParams id{};
  id.id = c1;
  Do(a_, client_a_, shm::kOpCmAccept, id);
  wire_.Deliver(&a_, &b_);
  ASSERT_TRUE(server_b_.TakeCmEvent());
  // Connection 2, from another session: waiting for B's answer.
  const uint32_t c2 = Bind(a_, other_a, 0);
  Resolve(a_, other_a, c2, kIpB);
  Do(a_, other_a, shm::kOpCmConnect, ConnectParams(c2, kIpB, 7471, ""));
  wire_.Deliver(&a_, &b_);
  e = server_b_.TakeCmEvent();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->type, shm::kCmConnectRequest);

  // B's application goes.
  b_.DropSession(&server_b_.s);
  wire_.Deliver(&a_, &b_);
  e = client_a_.TakeCmEvent();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->type, shm::kCmDisconnected);
  e = other_a.TakeCmEvent();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->type, shm::kCmRejected);
  EXPECT_EQ(b_.size(), 0u);  // the DREQ's answer came: nothing left
  // The port is free for another listener.
  FakeSession again{5, 1000};
  Bind(b_, again, 7471);
}

TEST_F(IpCmTest, BacklogBoundsRequestsWaiting) {
  const uint32_t listener = Bind(b_, server_b_, 7471);
  Listen(b_, server_b_, listener, 2);
  int rejected = 0;
  for (int i = 0; i < 3; ++i) {
    const uint32_t active = Bind(a_, client_a_, 0);
    Resolve(a_, client_a_, active, kIpB);
    Do(a_, client_a_, shm::kOpCmConnect, ConnectParams(active, kIpB, 7471, ""));
    wire_.Deliver(&a_, &b_);
    while (std::optional<CmEvent> e = client_a_.TakeCmEvent()) {
      rejected += e->type == shm::kCmRejected;
    }
  }
  EXPECT_EQ(rejected, 1);
  int requests = 0;
  while (std::optional<CmEvent> e = server_b_.TakeCmEvent()) {
    requests += e->type == shm::kCmConnectRequest;
  }
  EXPECT_EQ(requests, 2);
}

// A REQ repeated (its MRA lost) makes one request, not two.
TEST_F(IpCmTest, RepeatedRequestIsOneRequest) {
  const uint32_t listener = Bind(b_, server_b_, 7471);
  Listen(b_, server_b_, listener);
  const uint32_t active = Bind(a_, client_a_, 0);
  Resolve(a_, client_a_, active, kIpB);
  Do(a_, client_a_, shm::kOpCmConnect, ConnectParams(active, kIpB, 7471, ""));
  auto drop_mra = [](const wire::CmMessage& m) {
    return m.type == wire::CmType::kMra;
  };
  wire_.Deliver(&a_, &b_, drop_mra);
  now_ += IpCm::kReqIntervalNs;
  a_.Tick();
  wire_.Deliver(&a_, &b_);
  int requests = 0;
  while (std::optional<CmEvent> e = server_b_.TakeCmEvent()) {
    requests += e->type == shm::kCmConnectRequest;
  }
  EXPECT_EQ(requests, 1);
}

// A REQ to the native connections' service id is theirs, whatever port
// space neighbours it; every other IP CM REQ is the rdma_cm ids'.
TEST(IpCmOwnsTest, NativeRequestsGoToTheNativeConnections) {
  wire::CmMessage req{};
  req.type = wire::CmType::kReq;
  ASSERT_TRUE(wire::SetNativeRequest("svc", {}, &req));
  EXPECT_FALSE(IpCm::Owns(req));
  req.service_id = wire::IpCmServiceId(wire::kPortSpaceTcp, 7471);
  EXPECT_TRUE(IpCm::Owns(req));
  req.service_id = wire::IpCmServiceId(wire::kPortSpaceIb,
                                       wire::kNativeServicePort);
  EXPECT_TRUE(IpCm::Owns(req));
  req.service_id = 0x0267AC195D0687ED;  // an old daemon's
  EXPECT_FALSE(IpCm::Owns(req));
}

TEST_F(IpCmTest, BadRequestsGetClearAnswers) {
  CmParams p{};
  p.port_space = 0x0999;
  EXPECT_EQ(Do(a_, client_a_, shm::kOpCmBind, p).status, shm::kStatusInvalid);
  p.port_space = wire::kPortSpaceTcp;
  p.local_ip = kIpB;  // not A's
  EXPECT_EQ(Do(a_, client_a_, shm::kOpCmBind, p).status, shm::kStatusInvalid);
  p.local_ip = 0;
  p.local_port = 4000;
  EXPECT_EQ(Do(a_, client_a_, shm::kOpCmBind, p).status, shm::kStatusOk);
  ControlResponse r = Do(a_, client_a_, shm::kOpCmBind, p);
  EXPECT_EQ(r.status, shm::kStatusRefused);
  EXPECT_STREQ(r.message, "port in use");
  // The same port in another port space is another port.
  p.port_space = wire::kPortSpaceUdp;
  EXPECT_EQ(Do(a_, client_a_, shm::kOpCmBind, p).status, shm::kStatusOk);
  // The native connections' service is no rdma_cm id's to take (EADDRINUSE
  // in librdmacm), in RDMA_PS_TCP only.
  p.port_space = wire::kPortSpaceTcp;
  p.local_port = wire::kNativeServicePort;
  r = Do(a_, client_a_, shm::kOpCmBind, p);
  EXPECT_EQ(r.status, shm::kStatusRefused);
  EXPECT_STREQ(r.message,
               "port 4791 of RDMA_PS_TCP is rdmaplane's native service");
  p.port_space = wire::kPortSpaceIb;
  EXPECT_EQ(Do(a_, client_a_, shm::kOpCmBind, p).status, shm::kStatusOk);
  // Another session's id is no id of this one.
  FakeSession other{9, 1000};
  p.id = Bind(a_, other, 0);
  EXPECT_EQ(Do(a_, client_a_, shm::kOpCmListen, p).status, shm::kStatusInvalid);
  EXPECT_EQ(Do(a_, client_a_, shm::kOpCmDestroy, p).status,
            shm::kStatusInvalid);
  // Nothing to accept, reject or disconnect.
  p.id = Bind(a_, client_a_, 0);
  EXPECT_EQ(Do(a_, client_a_, shm::kOpCmAccept, p).status, shm::kStatusInvalid);
  EXPECT_EQ(Do(a_, client_a_, shm::kOpCmReject, p).status, shm::kStatusInvalid);
  EXPECT_EQ(Do(a_, client_a_, shm::kOpCmDisconnect, p).status,
            shm::kStatusInvalid);
  // Once a connection was asked for, disconnecting succeeds whatever
  // became of it.
  {
    const uint32_t asked = Bind(a_, client_a_, 0);
    Resolve(a_, client_a_, asked, kIpB);
    CmParams c = ConnectParams(asked, kIpB, 1, "");
    ASSERT_EQ(Do(a_, client_a_, shm::kOpCmConnect, c).status, shm::kStatusOk);
    EXPECT_EQ(Do(a_, client_a_, shm::kOpCmDisconnect, c).status,
              shm::kStatusOk);
  }
  // Private data longer than its field, or than a REQ holds after the IP
  // CM header.
  Resolve(a_, client_a_, p.id, kIpB);
  CmParams c = ConnectParams(p.id, kIpB, 1, std::string(57, 'x'));
  EXPECT_EQ(Do(a_, client_a_, shm::kOpCmConnect, c).status,
            shm::kStatusInvalid);
  c.private_data_len = 255;
  EXPECT_EQ(Do(a_, client_a_, shm::kOpCmConnect, c).status,
            shm::kStatusInvalid);
  // A session's ids are bounded.
  FakeSession greedy{10, 1000};
  CmParams any{};
  any.port_space = wire::kPortSpaceTcp;
  int made = 0;
  while (Do(a_, greedy, shm::kOpCmBind, any).status == shm::kStatusOk) ++made;
  EXPECT_EQ(made, 64);
  EXPECT_EQ(Do(a_, greedy, shm::kOpCmBind, any).status, shm::kStatusLimit);
  a_.DropSession(&greedy.s);
  EXPECT_EQ(Do(a_, greedy, shm::kOpCmBind, any).status, shm::kStatusOk);
}

// A daemon without a data port reaches only itself.
TEST(IpCmNoPort, OtherAddressesAreUnreachable) {
  IpCm::Options o;
  o.ip = kIpA;
  uint64_t now = 0;
  IpCm cm(o, nullptr, [&now] { return now; });
  FakeSession f{1, 1000};
  ControlRequest r{};
  r.op = shm::kOpCmBind;
  r.cm.port_space = wire::kPortSpaceTcp;
  const ControlResponse bound = cm.Handle(&f.s, r);
  ASSERT_EQ(bound.status, shm::kStatusOk);
  r.op = shm::kOpCmResolve;
  r.cm.id = bound.key;
  r.cm.remote_ip = kIpB;
  ASSERT_EQ(cm.Handle(&f.s, r).status, shm::kStatusOk);
  std::optional<CmEvent> e = f.TakeCmEvent();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->type, shm::kCmAddrError);
  EXPECT_EQ(e->status, -ENETUNREACH);
  r.cm.remote_ip = kIpA;
  ASSERT_EQ(cm.Handle(&f.s, r).status, shm::kStatusOk);
  e = f.TakeCmEvent();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->type, shm::kCmAddrResolved);
}

}  // namespace
}  // namespace rdmaplane::control
