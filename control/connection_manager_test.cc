// The connection manager against a peer daemon played frame by frame: our
// data port is a DPDK net_ring port served by a running engine, joined back
// to back to the test's own port, from which the test sends ARP and CM
// frames and reads what the connection manager answers. The control
// thread's loop (frames passed up, then timers) runs on the test thread.
// An answer is awaited with the timers stopped, so that a repetition is
// never taken for it; repetitions follow the engine's clock, so waits for
// them are bounded polls.
#include "control/connection_manager.h"

#include <gtest/gtest.h>
#include <rte_ethdev.h>

#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "api/shm/layout.h"
#include "control/connections.h"
#include "control/counters.h"
#include "control/memory_service.h"
#include "control/sessions.h"
#include "control/testing/fake_session.h"
#include "control/user_accounts.h"
#include "dataplane/engine/engine.h"
#include "dataplane/mr/registration_table.h"
#include "dataplane/port/dpdk_env.h"
#include "dataplane/port/eth_port.h"
#include "dataplane/port/testing/ring_pair.h"
#include "dataplane/wire/arp.h"
#include "dataplane/wire/cm.h"
#include "dataplane/wire/roce.h"

namespace rdmaplane::control {
namespace {

constexpr uint32_t kOurIp = 0x0A000001;   // 10.0.0.1
constexpr uint32_t kPeerIp = 0x0A000002;  // 10.0.0.2
constexpr wire::MacAddr kOurMac{{0x02, 0, 0, 0, 0, 0x01}};
constexpr wire::MacAddr kPeerMac{{0x02, 0, 0, 0, 0, 0x02}};
constexpr uint32_t kCommIdSeed = 0x5000;
constexpr uint32_t kPeerCommId = 0x7777;
constexpr uint32_t kPeerQpn = 0x321;
// A transaction id no rdmaplaned makes (its high word is neither 1 nor 2),
// as another CM may choose one.
constexpr uint64_t kForeignTid = 0x0000ABCD00000007;
// How long the test waits for a frame before it takes it as never sent:
// many times the longest retransmission interval (the REQ's 250 ms).
constexpr uint64_t kPatienceNs = 5'000'000'000;
// Retransmission intervals of connection_manager.cc, for windows in which
// a repetition would have come.
constexpr uint64_t kRepIntervalNs = 250'000'000;
constexpr uint64_t kDreqIntervalNs = 100'000'000;

// Two DPDK ports joined back to back: `a` for the engine, `b` for the
// test, playing the peer daemon.
port::PortConfig PlainPorts() {
  port::PortConfig c;
  c.mbufs = 2047;
  c.zero_copy_min_payload = 0;
  return c;
}

std::string UniqueName() {
  static int n = 0;
  return "cm" + std::to_string(n++);
}

// The path of the peer's frames to us.
wire::Path PeerPath() {
  wire::Path p;
  p.src_mac = kPeerMac;
  p.dst_mac = kOurMac;
  p.src_ip = kPeerIp;
  p.dst_ip = kOurIp;
  p.udp_src_port = 0xC123;
  return p;
}

// A REQ of the peer for `service`.
wire::CmMessage PeerReq(uint64_t tid, const char* service) {
  wire::CmMessage m{};
  m.type = wire::CmType::kReq;
  m.transaction_id = tid;
  m.local_comm_id = kPeerCommId;
  m.qpn = wire::Qpn(kPeerQpn);
  m.start_psn = wire::Psn(0x123456);
  m.path_mtu = wire::kIbMtu1024;
  m.responder_resources = 4;
  m.initiator_depth = 2;
  m.local_ip = kPeerIp;
  m.remote_ip = kOurIp;
  EXPECT_TRUE(wire::SetNativeRequest(
      service, {.src_port = 0, .src_ip = kPeerIp, .dst_ip = kOurIp}, &m));
  return m;
}

// The peer's answer of `type` (REP, RTU, DREP, ...) within the transaction
// `tid` to our connection `our_comm_id`.
wire::CmMessage PeerAnswer(wire::CmType type, uint64_t tid,
                           uint32_t our_comm_id) {
  wire::CmMessage m{};
  m.type = type;
  m.transaction_id = tid;
  m.local_comm_id = kPeerCommId;
  m.remote_comm_id = our_comm_id;
  m.local_ip = kPeerIp;
  m.remote_ip = kOurIp;
  return m;
}

class ConnectionManagerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(port::InitDpdk(port::EalOptions{}).ok());
  }
  static void TearDownTestSuite() { port::ShutdownDpdk(); }

  ConnectionManagerTest()
      : ports_(UniqueName(), PlainPorts()),
        table_(64, 1),
        accounts_(UserLimits{}),
        memory_(&table_, 64, &accounts_),
        engine_(&table_, engine::EngineOptions{}),
        connections_(ConnectionOptions{}, {&engine_}, &memory_, &accounts_, 42),
        cm_(&connections_, &engine_, &counters_, Us(), 4096, kCommIdSeed),
        client_(1, 1000),
        listener_(2, 1000) {}

  void SetUp() override {
    ASSERT_TRUE(ports_.a && ports_.b);
    engine_.AttachPort(ports_.a.get());
    connections_.AttachPort(ports_.a.get(), kOurMac, kOurIp, &cm_);
    engine_.Start();
  }

  void TearDown() override {
    // Our ends leave the engine before the session's memory goes.
    connections_.CloseSession(&client_.s, false);
    connections_.CloseSession(&listener_.s, false);
    engine_.Stop();
  }

  static PeerAddress Us() {
    PeerAddress us;
    us.ip = kOurIp;
    us.mac = kOurMac;
    return us;
  }

  uint64_t Now() const { return engine_.clock()->NowNs(); }

  // What drives the connection manager while the test waits for a frame:
  // only the frames the engine passes up (so what arrives is an answer to
  // them, or to a call the test made), or also its timers (repetitions).
  enum class Drive { kFramesOnly, kWithTimers };

  // One turn of the daemon's control loop, then the peer's port.
  void Turn(Drive drive) {
    cm_.DrainControlFrames();
    if (drive == Drive::kWithTimers) cm_.Tick();
    ports_.b->Flush();
    ports_.b->Receive([this](std::span<const uint8_t> f) {
      inbox_.emplace_back(f.begin(), f.end());
    });
    std::this_thread::yield();
  }

  // The next frame the peer receives, which must come within kPatienceNs
  // (else a failure, and nothing).
  std::optional<std::vector<uint8_t>> ExpectFrame(Drive drive) {
    const uint64_t end = Now() + kPatienceNs;
    while (inbox_.empty() && Now() < end) Turn(drive);
    if (inbox_.empty()) {
      ADD_FAILURE() << "no frame";
      return std::nullopt;
    }
    std::vector<uint8_t> f = std::move(inbox_.front());
    inbox_.pop_front();
    return f;
  }

  // Every frame the peer receives in the next `ns` (at least), timers
  // running.
  std::vector<std::vector<uint8_t>> FramesWithin(uint64_t ns) {
    const uint64_t end = Now() + ns;
    while (Now() < end) Turn(Drive::kWithTimers);
    std::vector<std::vector<uint8_t>> got(inbox_.begin(), inbox_.end());
    inbox_.clear();
    return got;
  }

  // The next frame, which must be a CM message (its path in `path`).
  std::optional<wire::CmMessage> NextCm(Drive drive = Drive::kFramesOnly,
                                        wire::Path* path = nullptr) {
    std::optional<std::vector<uint8_t>> f = ExpectFrame(drive);
    if (!f) return std::nullopt;
    wire::CmMessage m;
    wire::Path p;
    if (!wire::ParseCmFrame(*f, &m, &p)) {
      ADD_FAILURE() << "not a CM frame";
      return std::nullopt;
    }
    // From us to the peer.
    EXPECT_EQ(p.src_ip, kOurIp);
    EXPECT_EQ(p.dst_ip, kPeerIp);
    EXPECT_EQ(p.src_mac, kOurMac);
    EXPECT_EQ(p.dst_mac, kPeerMac);
    if (path != nullptr) *path = p;
    return m;
  }

  // The next frame, which must be ARP (its Ethernet destination in `dst`).
  std::optional<wire::ArpMessage> NextArp(Drive drive = Drive::kFramesOnly,
                                          wire::MacAddr* dst = nullptr) {
    std::optional<std::vector<uint8_t>> f = ExpectFrame(drive);
    if (!f) return std::nullopt;
    wire::ArpMessage m;
    if (!wire::ParseArp(*f, &m)) {
      ADD_FAILURE() << "not an ARP frame";
      return std::nullopt;
    }
    if (dst != nullptr) std::memcpy(dst->bytes.data(), f->data(), 6);
    return m;
  }

  void Inject(std::span<const uint8_t> frame) {
    ASSERT_TRUE(ports_.b->Send(frame));
    ports_.b->Flush();
  }
  void InjectCm(const wire::CmMessage& m) {
    uint8_t out[wire::kCmFrameLen];
    const size_t n = wire::EncodeCmFrame(PeerPath(), m, std::span(out));
    ASSERT_EQ(n, wire::kCmFrameLen);
    Inject({out, n});
  }
  void InjectArp(const wire::ArpMessage& m) {
    uint8_t out[wire::kArpFrameLen];
    const size_t n = wire::EncodeArp(m, std::span(out));
    ASSERT_EQ(n, wire::kArpFrameLen);
    Inject({out, n});
  }

  // The client connects to "svc" at the peer, whose MAC the daemon does
  // not know yet: its ARP request is answered, and the REQ that follows is
  // returned.
  std::optional<wire::CmMessage> ConnectAndTakeReq() {
    shm::ControlRequest r = Op(shm::kOpConnect);
    r.request_id = 77;
    r.address = kPeerIp;
    if (std::optional<shm::ControlResponse> now = cm_.Connect(&client_.s, r)) {
      ADD_FAILURE() << "answered at once: " << now->status << " "
                    << now->message;
      return std::nullopt;
    }
    std::optional<wire::ArpMessage> request = NextArp();
    if (!request) return std::nullopt;
    InjectArp(wire::MakeArpReply(*request, kPeerMac));
    return NextCm();
  }

  // Our connection to the peer, made from our side and established.
  struct Established {
    uint32_t slot = 0;
    uint32_t our_comm_id = 0;
    uint64_t tid = 0;
  };
  std::optional<Established> EstablishActive() {
    std::optional<wire::CmMessage> req = ConnectAndTakeReq();
    if (!req || req->type != wire::CmType::kReq) {
      ADD_FAILURE() << "no REQ";
      return std::nullopt;
    }
    wire::CmMessage rep =
        PeerAnswer(wire::CmType::kRep, req->transaction_id, req->local_comm_id);
    rep.qpn = wire::Qpn(kPeerQpn);
    rep.start_psn = wire::Psn(0x654321);
    rep.responder_resources = 16;
    rep.initiator_depth = 16;
    InjectCm(rep);
    std::optional<wire::CmMessage> rtu = NextCm();
    if (!rtu || rtu->type != wire::CmType::kRtu) {
      ADD_FAILURE() << "no RTU";
      return std::nullopt;
    }
    std::optional<shm::ControlResponse> answer = client_.TakeAnswer();
    if (!answer || answer->status != shm::kStatusOk) {
      ADD_FAILURE() << "the client's Connect failed";
      return std::nullopt;
    }
    return Established{answer->connection, req->local_comm_id,
                       req->transaction_id};
  }

  port::RingPair ports_;
  mr::RegistrationTable table_;
  UserAccounts accounts_;
  MemoryService memory_;
  engine::Engine engine_;
  ControlCounters counters_;
  ConnectionTable connections_;
  ConnectionManager cm_;
  FakeSession client_;
  FakeSession listener_;
  std::deque<std::vector<uint8_t>> inbox_;
};

TEST_F(ConnectionManagerTest, AnArpRequestForOurAddressIsAnsweredWithOurMac) {
  wire::ArpMessage request;
  request.op = wire::kArpOpRequest;
  request.sender_mac = kPeerMac;
  request.sender_ip = kPeerIp;
  request.target_ip = kOurIp;
  InjectArp(request);
  wire::MacAddr dst;
  std::optional<wire::ArpMessage> reply = NextArp(Drive::kFramesOnly, &dst);
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->op, wire::kArpOpReply);
  EXPECT_EQ(reply->sender_mac, kOurMac);
  EXPECT_EQ(reply->sender_ip, kOurIp);
  EXPECT_EQ(reply->target_mac, kPeerMac);
  EXPECT_EQ(reply->target_ip, kPeerIp);
  EXPECT_EQ(dst, kPeerMac) << "sent to the asker";
  EXPECT_EQ(counters_.Snapshot().arp_replies_sent, 1u);
}

TEST_F(ConnectionManagerTest, AConnectToAnUnknownPeerAsksArpFirst) {
  shm::ControlRequest r = Op(shm::kOpConnect);
  r.address = kPeerIp;
  ASSERT_FALSE(cm_.Connect(&client_.s, r));
  wire::MacAddr dst;
  std::optional<wire::ArpMessage> request = NextArp(Drive::kFramesOnly, &dst);
  ASSERT_TRUE(request);
  EXPECT_EQ(request->op, wire::kArpOpRequest);
  EXPECT_EQ(request->sender_mac, kOurMac);
  EXPECT_EQ(request->sender_ip, kOurIp);
  EXPECT_EQ(request->target_ip, kPeerIp);
  EXPECT_EQ(dst, wire::kBroadcastMac);
  // Unanswered, it is asked again; answered, the REQ follows to the MAC
  // the answer named.
  std::optional<wire::ArpMessage> again = NextArp(Drive::kWithTimers);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->target_ip, kPeerIp);
  InjectArp(wire::MakeArpReply(*request, kPeerMac));
  wire::Path path;
  std::optional<wire::CmMessage> req = NextCm(Drive::kFramesOnly, &path);
  ASSERT_TRUE(req);
  EXPECT_EQ(req->type, wire::CmType::kReq);
  EXPECT_EQ(path.dst_mac, kPeerMac);
  EXPECT_EQ(req->remote_ip, kPeerIp);
}

TEST_F(ConnectionManagerTest, ARequestForAServiceNobodyListensOnIsRejected) {
  InjectCm(PeerReq(kForeignTid, "nobody"));
  std::optional<wire::CmMessage> rej = NextCm();
  ASSERT_TRUE(rej);
  ASSERT_EQ(rej->type, wire::CmType::kRej);
  EXPECT_EQ(rej->transaction_id, kForeignTid) << "the REQ's transaction";
  EXPECT_EQ(rej->reject_reason, wire::kRejInvalidServiceId);
  EXPECT_EQ(rej->refers_to, wire::CmRefersTo::kReq);
  EXPECT_EQ(rej->remote_comm_id, kPeerCommId);
  EXPECT_EQ(rej->local_comm_id, 0u) << "we gave the request no id";
  const std::string text(
      reinterpret_cast<const char*>(rej->private_data.data()));
  EXPECT_EQ(text, "no listener for service 'nobody'");
  EXPECT_EQ(counters_.Snapshot().remote_refused, 1u);
  EXPECT_EQ(connections_.size(), 0u);
}

// A name longer than a REQ carries whole reaches its listener by length,
// hash and first bytes, and not a listener whose name shares those bytes.
TEST_F(ConnectionManagerTest, ALongServiceNameFindsItsListener) {
  const std::string common(50, 'n');
  const std::string name = common + "/mine";
  ASSERT_EQ(connections_
                .Listen(&listener_.s, Op(shm::kOpListen, (common + "/else").c_str()))
                .status,
            shm::kStatusOk);
  InjectCm(PeerReq(kForeignTid, name.c_str()));
  std::optional<wire::CmMessage> rej = NextCm();
  ASSERT_TRUE(rej);
  ASSERT_EQ(rej->type, wire::CmType::kRej);
  EXPECT_EQ(rej->reject_reason, wire::kRejInvalidServiceId);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(rej->private_data.data())),
            "no listener for service '" + common.substr(0, 42) + "...'");

  ASSERT_EQ(connections_.Listen(&listener_.s, Op(shm::kOpListen, name.c_str()))
                .status,
            shm::kStatusOk);
  InjectCm(PeerReq(kForeignTid + 1, name.c_str()));
  std::optional<wire::CmMessage> mra = NextCm();
  ASSERT_TRUE(mra);
  EXPECT_EQ(mra->type, wire::CmType::kMra);
  const shm::ControlResponse accepted =
      connections_.Accept(&listener_.s, Op(shm::kOpAccept, name.c_str()));
  EXPECT_EQ(accepted.status, shm::kStatusOk) << accepted.message;
}

// A daemon from before the native connections spoke the IP CM Service sent
// its REQ to a service id of its own (0x02 and the name's hash) with the
// name's length and the name as private data. It gets a REJ whose words,
// which it shows its client with " at IP", say what to do.
TEST_F(ConnectionManagerTest, AnOldDaemonsRequestIsRefusedInWords) {
  ASSERT_EQ(connections_.Listen(&listener_.s, Op(shm::kOpListen)).status,
            shm::kStatusOk);
  wire::CmMessage old = PeerReq(kForeignTid, "svc");
  old.service_id = 0x0267AC195D0687ED;  // what it sent for "svc"
  old.private_data.fill(0);
  old.private_data[0] = 3;
  std::memcpy(old.private_data.data() + 1, "svc", 3);
  old.private_data_len = 4;
  InjectCm(old);
  std::optional<wire::CmMessage> rej = NextCm();
  ASSERT_TRUE(rej);
  ASSERT_EQ(rej->type, wire::CmType::kRej);
  EXPECT_EQ(rej->transaction_id, kForeignTid);
  EXPECT_EQ(rej->remote_comm_id, kPeerCommId);
  EXPECT_EQ(rej->reject_reason, wire::kRejInvalidServiceId);
  const std::string text(
      reinterpret_cast<const char*>(rej->private_data.data()));
  EXPECT_EQ(text, "peer rdmaplaned is newer: upgrade this one");
  EXPECT_LE(text.size() + std::string(" at 255.255.255.255").size(), 63u);
  EXPECT_EQ(connections_.size(), 0u) << "nothing queued for the listener";
  // A REQ to another service id with a name record is not one either.
  wire::CmMessage foreign = PeerReq(kForeignTid + 1, "svc");
  foreign.service_id = wire::IpCmServiceId(wire::kPortSpaceIb, 4791);
  InjectCm(foreign);
  rej = NextCm();
  ASSERT_TRUE(rej);
  ASSERT_EQ(rej->type, wire::CmType::kRej);
  EXPECT_EQ(rej->reject_reason, wire::kRejInvalidServiceId);
  EXPECT_EQ(connections_.size(), 0u);
}

// The other way: a daemon that takes our REQ for an rdma_cm port nobody
// listens on (an old rdmaplaned, another host's rdma_cm) rejects it with
// reason 8 and no words; our client hears why in words of ours, at once.
TEST_F(ConnectionManagerTest, ARefusalWithoutWordsSaysThePeerServesNoNativeConnections) {
  std::optional<wire::CmMessage> req = ConnectAndTakeReq();
  ASSERT_TRUE(req);
  ASSERT_EQ(req->type, wire::CmType::kReq);
  wire::CmMessage rej =
      PeerAnswer(wire::CmType::kRej, req->transaction_id, req->local_comm_id);
  rej.local_comm_id = 0;
  rej.reject_reason = wire::kRejInvalidServiceId;
  InjectCm(rej);
  // No more REQs.
  EXPECT_EQ(FramesWithin(3 * kRepIntervalNs).size(), 0u);
  std::optional<shm::ControlResponse> answer = client_.TakeAnswer();
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, shm::kStatusRefused);
  EXPECT_STREQ(answer->message,
               "peer serves no native connections (too old?) at 10.0.0.2");
  EXPECT_EQ(connections_.size(), 0u);
}

TEST_F(ConnectionManagerTest, APassiveConnectionIsQueuedAcceptedAndCompleted) {
  ASSERT_EQ(connections_.Listen(&listener_.s, Op(shm::kOpListen)).status,
            shm::kStatusOk);
  InjectCm(PeerReq(kForeignTid, "svc"));
  std::optional<wire::CmMessage> mra = NextCm();
  ASSERT_TRUE(mra);
  ASSERT_EQ(mra->type, wire::CmType::kMra);
  EXPECT_EQ(mra->transaction_id, kForeignTid);
  EXPECT_EQ(mra->refers_to, wire::CmRefersTo::kReq);
  EXPECT_EQ(mra->remote_comm_id, kPeerCommId);
  EXPECT_NE(mra->local_comm_id, 0u);
  // The active side repeats its REQ every second while it waits.
  EXPECT_EQ(mra->service_timeout, wire::IbTimeoutCode(1'000'000'000));
  EXPECT_EQ(mra->service_timeout, 18);
  // A repeated REQ is one connection, answered by another MRA.
  InjectCm(PeerReq(kForeignTid, "svc"));
  std::optional<wire::CmMessage> mra2 = NextCm();
  ASSERT_TRUE(mra2);
  EXPECT_EQ(mra2->type, wire::CmType::kMra);
  EXPECT_EQ(mra2->local_comm_id, mra->local_comm_id);
  EXPECT_EQ(connections_.size(), 1u);

  const shm::ControlResponse accepted =
      connections_.Accept(&listener_.s, Op(shm::kOpAccept));
  ASSERT_EQ(accepted.status, shm::kStatusOk) << accepted.message;
  EXPECT_EQ(engine_.endpoint_count(), 1u);
  std::optional<wire::CmMessage> rep = NextCm();
  ASSERT_TRUE(rep);
  ASSERT_EQ(rep->type, wire::CmType::kRep);
  EXPECT_EQ(rep->transaction_id, kForeignTid);
  EXPECT_EQ(rep->local_comm_id, mra->local_comm_id);
  EXPECT_EQ(rep->remote_comm_id, kPeerCommId);
  EXPECT_GE(rep->qpn.value(), 2u);
  // The smaller MTU (the REQ's), and no more READs than the REQ asked for.
  EXPECT_EQ(wire::NativeReplyMtu(*rep), wire::kIbMtu1024);
  EXPECT_EQ(rep->responder_resources, 2);
  EXPECT_EQ(rep->initiator_depth, 4);
  // Without an RTU the REP is repeated, in the same transaction.
  std::optional<wire::CmMessage> again = NextCm(Drive::kWithTimers);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->type, wire::CmType::kRep);
  EXPECT_EQ(again->transaction_id, kForeignTid);
  InjectCm(PeerAnswer(wire::CmType::kRtu, kForeignTid, rep->local_comm_id));
  // At most one repetition crossed the RTU.
  EXPECT_LE(FramesWithin(3 * kRepIntervalNs).size(), 1u)
      << "the REP is still repeated after the RTU";
}

// The active side may refuse our REP (IBA: REJ with Message REJected =
// REP): the connection the listener accepted ends as reset, and the REP is
// not repeated.
TEST_F(ConnectionManagerTest, ARejectedReplyEndsTheAcceptedConnection) {
  ASSERT_EQ(connections_.Listen(&listener_.s, Op(shm::kOpListen)).status,
            shm::kStatusOk);
  InjectCm(PeerReq(kForeignTid, "svc"));
  std::optional<wire::CmMessage> mra = NextCm();
  ASSERT_TRUE(mra);
  ASSERT_EQ(mra->type, wire::CmType::kMra);
  const shm::ControlResponse accepted =
      connections_.Accept(&listener_.s, Op(shm::kOpAccept));
  ASSERT_EQ(accepted.status, shm::kStatusOk) << accepted.message;
  std::optional<wire::CmMessage> rep = NextCm();
  ASSERT_TRUE(rep);
  ASSERT_EQ(rep->type, wire::CmType::kRep);
  wire::CmMessage rej =
      PeerAnswer(wire::CmType::kRej, kForeignTid, rep->local_comm_id);
  rej.refers_to = wire::CmRefersTo::kRep;
  rej.reject_reason = wire::kRejConsumer;
  InjectCm(rej);
  // At most one repetition crossed the REJ.
  EXPECT_LE(FramesWithin(3 * kRepIntervalNs).size(), 1u)
      << "the REP is still repeated after the REJ";
  EXPECT_EQ(listener_.state(accepted.connection), shm::kConnReset);
  EXPECT_EQ(engine_.endpoint_count(), 0u);
}

TEST_F(ConnectionManagerTest, AnActiveConnectSaysWhatTheDaemonDoes) {
  std::optional<wire::CmMessage> req = ConnectAndTakeReq();
  ASSERT_TRUE(req);
  ASSERT_EQ(req->type, wire::CmType::kReq);
  EXPECT_EQ(
      req->transaction_id,
      wire::CmTransactionId(wire::CmTransaction::kConnect, req->local_comm_id));
  EXPECT_NE(req->local_comm_id, 0u);
  // The IP CM Service: the native connections' service id, the IP CM
  // header with both addresses, the name after it.
  EXPECT_EQ(req->service_id, wire::kNativeServiceId);
  wire::IpCmHeader h;
  ASSERT_TRUE(wire::ParseIpCmHeader(*req, &h));
  EXPECT_EQ(h, (wire::IpCmHeader{.src_port = 0, .src_ip = kOurIp,
                                 .dst_ip = kPeerIp}));
  wire::NativeService named;
  ASSERT_TRUE(wire::ParseNativeRequest(*req, &named));
  EXPECT_TRUE(named.Names("svc"));
  EXPECT_EQ(named.Text(), "svc");
  EXPECT_GE(req->qpn.value(), 2u);
  EXPECT_EQ(req->path_mtu, wire::kIbMtu4096);
  EXPECT_EQ(req->local_ip, kOurIp);
  EXPECT_EQ(req->remote_ip, kPeerIp);
  // docs/transport.md's table: the queue pairs' first retransmission over
  // the port (10 ms), 100 Gb/s, the queue pairs' retries and READ depths,
  // REQ and REP repeated 8 times every 250 ms.
  EXPECT_EQ(req->local_ack_timeout,
            wire::LocalAckTimeoutCode(
                connections_.options().remote_retransmit_timeout_ns));
  EXPECT_EQ(req->local_ack_timeout, 11);
  EXPECT_EQ(req->packet_rate, wire::kIbRate100Gbps);
  EXPECT_EQ(req->retry_count, 7);
  EXPECT_EQ(req->rnr_retry_count, 7);
  EXPECT_EQ(req->max_cm_retries, 7);
  EXPECT_EQ(req->remote_cm_response_timeout, 16);
  EXPECT_EQ(req->local_cm_response_timeout, 16);
  EXPECT_EQ(req->responder_resources, 16);
  EXPECT_EQ(req->initiator_depth, 16);

  wire::CmMessage rep =
      PeerAnswer(wire::CmType::kRep, req->transaction_id, req->local_comm_id);
  rep.qpn = wire::Qpn(kPeerQpn);
  rep.start_psn = wire::Psn(0x654321);
  rep.responder_resources = 8;
  rep.initiator_depth = 8;
  InjectCm(rep);
  std::optional<wire::CmMessage> rtu = NextCm();
  ASSERT_TRUE(rtu);
  ASSERT_EQ(rtu->type, wire::CmType::kRtu);
  EXPECT_EQ(rtu->transaction_id, req->transaction_id);
  EXPECT_EQ(rtu->local_comm_id, req->local_comm_id);
  EXPECT_EQ(rtu->remote_comm_id, kPeerCommId);
  // The client's Connect is answered and its endpoint runs.
  std::optional<shm::ControlResponse> answer = client_.TakeAnswer();
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, shm::kStatusOk) << answer->message;
  EXPECT_EQ(answer->request_id, 77u);
  EXPECT_EQ(client_.state(answer->connection), shm::kConnUp);
  EXPECT_EQ(engine_.endpoint_count(), 1u);
}

TEST_F(ConnectionManagerTest, AMalformedReplyIsRejectedAsAReply) {
  std::optional<wire::CmMessage> req = ConnectAndTakeReq();
  ASSERT_TRUE(req);
  ASSERT_EQ(req->type, wire::CmType::kReq);
  wire::CmMessage rep =
      PeerAnswer(wire::CmType::kRep, req->transaction_id, req->local_comm_id);
  rep.qpn = wire::Qpn(1);  // QP 0 and 1 are special: never a connection's
  InjectCm(rep);
  std::optional<wire::CmMessage> rej = NextCm();
  ASSERT_TRUE(rej);
  ASSERT_EQ(rej->type, wire::CmType::kRej);
  EXPECT_EQ(rej->refers_to, wire::CmRefersTo::kRep);
  EXPECT_EQ(rej->local_comm_id, req->local_comm_id);
  EXPECT_EQ(rej->remote_comm_id, kPeerCommId);
  EXPECT_EQ(rej->transaction_id, req->transaction_id);
  EXPECT_EQ(rej->reject_reason, wire::kRejConsumer);
  std::optional<shm::ControlResponse> answer = client_.TakeAnswer();
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, shm::kStatusConnReset) << answer->message;
  EXPECT_EQ(engine_.endpoint_count(), 0u);
  EXPECT_EQ(connections_.size(), 0u);
}

TEST_F(ConnectionManagerTest, ACloseSaysDreqUntilTheDrep) {
  std::optional<Established> e = EstablishActive();
  ASSERT_TRUE(e);
  ASSERT_EQ(
      connections_.Disconnect(&client_.s, Op(shm::kOpDisconnect, "", e->slot))
          .status,
      shm::kStatusOk);
  EXPECT_EQ(engine_.endpoint_count(), 0u);
  std::optional<wire::CmMessage> dreq = NextCm();
  ASSERT_TRUE(dreq);
  ASSERT_EQ(dreq->type, wire::CmType::kDreq);
  EXPECT_NE(dreq->transaction_id, 0u);
  EXPECT_NE(dreq->transaction_id, e->tid) << "a transaction of its own";
  EXPECT_EQ(dreq->local_comm_id, e->our_comm_id);
  EXPECT_EQ(dreq->remote_comm_id, kPeerCommId);
  EXPECT_EQ(dreq->qpn.value(), kPeerQpn);
  EXPECT_EQ(cm_.farewells(), 1u);
  // Repeated in the same transaction while unanswered.
  std::optional<wire::CmMessage> again = NextCm(Drive::kWithTimers);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->type, wire::CmType::kDreq);
  EXPECT_EQ(again->transaction_id, dreq->transaction_id);
  InjectCm(
      PeerAnswer(wire::CmType::kDrep, dreq->transaction_id, e->our_comm_id));
  const std::vector<std::vector<uint8_t>> after =
      FramesWithin(3 * kDreqIntervalNs);
  EXPECT_EQ(cm_.farewells(), 0u);
  // At most one repetition crossed the DREP.
  EXPECT_LE(after.size(), 1u) << "DREQ still repeated after the DREP";
}

TEST_F(ConnectionManagerTest, APeersDreqIsAnsweredWithDrep) {
  std::optional<Established> e = EstablishActive();
  ASSERT_TRUE(e);
  constexpr uint64_t kPeerDisconnectTid = 0x0000ABCD00000009;
  InjectCm(PeerAnswer(wire::CmType::kDreq, kPeerDisconnectTid, e->our_comm_id));
  std::optional<wire::CmMessage> drep = NextCm();
  ASSERT_TRUE(drep);
  ASSERT_EQ(drep->type, wire::CmType::kDrep);
  EXPECT_EQ(drep->transaction_id, kPeerDisconnectTid);
  EXPECT_EQ(drep->local_comm_id, e->our_comm_id);
  EXPECT_EQ(drep->remote_comm_id, kPeerCommId);
  // Our end is reset; the peer needs no DREQ from us.
  EXPECT_EQ(client_.state(e->slot), shm::kConnReset);
  EXPECT_EQ(engine_.endpoint_count(), 0u);
  EXPECT_EQ(counters_.Snapshot().peer_disconnects, 1u);
  EXPECT_EQ(cm_.farewells(), 0u);
}

}  // namespace
}  // namespace rdmaplane::control
