// An endpoint towards another daemon (frames through a port) closes its
// connection as for any transport error once its queue pair enters the
// error state, whatever put it there: the client sees the connection
// aborted, queued and posted requests complete as aborted, and the engine
// is told to report the break to the control plane.
#include "dataplane/engine/endpoint.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

#include "api/shm/layout.h"
#include "api/shm/ring.h"
#include "dataplane/mr/registration_table.h"
#include "dataplane/wire/roce.h"

namespace rdmaplane::engine {
namespace {

using wire::Opcode;

constexpr uint32_t kSession = 7;
constexpr uint32_t kConnection = 3;
constexpr uint32_t kPeerIp = 0x0A000002;
constexpr uint32_t kOurIp = 0x0A000001;

// Frames the endpoint sends, kept for inspection.
class CaptureSink : public rc::FrameSink {
 public:
  std::span<uint8_t> Reserve(size_t max_len) override {
    buf_.assign(max_len, 0);
    return buf_;
  }
  void Commit(size_t len) override {
    wire::ParsedPacket pkt;
    frames_.emplace_back(buf_.begin(), buf_.begin() + len);
    EXPECT_EQ(wire::ParseFrame(frames_.back(), &pkt), wire::ParseError::kOk);
    sent.push_back(pkt);
  }
  std::vector<wire::ParsedPacket> sent;  // payloads point into frames_

 private:
  std::vector<uint8_t> buf_;
  std::vector<std::vector<uint8_t>> frames_;
};

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

class EndpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    header_.reset(new (std::aligned_alloc(4096, sizeof(shm::SessionHeader)))
                      shm::SessionHeader());
    const size_t send_bytes =
        shm::SpscRing<shm::SendEntry>::BytesFor(shm::kSendRingEntries);
    const size_t completion_bytes =
        shm::SpscRing<shm::CompletionEntry>::BytesFor(
            shm::kCompletionRingEntries);
    send_mem_.reset(std::aligned_alloc(4096, (send_bytes + 4095) & ~4095ul));
    completion_mem_.reset(
        std::aligned_alloc(4096, (completion_bytes + 4095) & ~4095ul));
    EndpointInfo info;
    info.connection_id = kConnection;
    info.session_id = kSession;
    info.header = header_.get();
    info.slot = 0;
    auto send = shm::SpscRing<shm::SendEntry>::Create(
        send_mem_.get(), send_bytes, shm::kSendRingEntries);
    auto completion = shm::SpscRing<shm::CompletionEntry>::Create(
        completion_mem_.get(), completion_bytes, shm::kCompletionRingEntries);
    ASSERT_TRUE(send.ok() && completion.ok());
    info.send = *send;
    info.completion = *completion;
    info.qp.local_qpn = wire::Qpn(0x10);
    info.qp.remote_qpn = wire::Qpn(0x20);
    info.qp.send_psn = wire::Psn(1000);
    info.qp.recv_psn = wire::Psn(5000);
    info.qp.path.src_ip = kOurIp;
    info.qp.path.dst_ip = kPeerIp;
    info.qp.pmtu = 256;
    header_->connection_state[0].store(shm::kConnUp);
    client_send_ = *send;
    client_completion_ = *completion;
    endpoint_ = std::make_unique<Endpoint>(info, &table_, &clock_,
                                           fault::FaultSpec{}, &sink_);
    // Local memory the client may write from and read into.
    mr::Registration r;
    r.owner = kSession;
    r.address = reinterpret_cast<uint64_t>(local_.data());
    r.length = local_.size();
    r.host = local_.data();
    r.access = mr::kAccessLocal | mr::kAccessLocalWrite;
    const std::optional<uint32_t> key = table_.Insert(r);
    ASSERT_TRUE(key.has_value());
    lkey_ = *key;
  }

  void Post(uint64_t wr_id, uint8_t op, uint32_t len) {
    shm::SendEntry e{};
    e.wr_id = wr_id;
    e.op = op;
    e.num_sge = 1;
    e.sge[0] = {reinterpret_cast<uint64_t>(local_.data()), len, lkey_};
    e.remote_address = 0x7F0000000000;
    e.rkey = 0x1234;
    ASSERT_TRUE(client_send_.TryPush(e));
  }

  // A frame from the peer to our QP.
  void Receive(Opcode op, wire::Psn psn, uint32_t payload_len,
               uint16_t pkey = wire::kDefaultPkey) {
    wire::PacketHeaders h;
    h.path.src_ip = kPeerIp;
    h.path.dst_ip = kOurIp;
    h.bth.opcode = op;
    h.bth.pkey = pkey;
    h.bth.dest_qp = wire::Qpn(0x10);
    h.bth.psn = psn;
    h.bth.ack_req = true;
    h.reth = {0x7F0000000000, wire::Rkey(0x99), payload_len};
    std::vector<uint8_t> payload(payload_len, 0x42);
    std::vector<uint8_t> frame(wire::FrameLength(op, payload_len));
    ASSERT_GT(wire::EncodeFrame(h, payload, frame), 0u);
    wire::ParsedPacket pkt;
    ASSERT_EQ(wire::ParseFrame(frame, &pkt), wire::ParseError::kOk);
    endpoint_->HandleFrame(pkt);
  }

  std::vector<shm::CompletionEntry> Completions() {
    std::vector<shm::CompletionEntry> out;
    shm::CompletionEntry c;
    while (client_completion_.TryPop(&c) == shm::PopResult::kOk) {
      out.push_back(c);
    }
    return out;
  }

  // The connection broke as transport errors break it.
  void ExpectClosedAsTransportError() {
    EXPECT_EQ(header_->connection_state[0].load(), shm::kConnAborted);
    EXPECT_TRUE(endpoint_->TakeTransportError());
    EXPECT_FALSE(endpoint_->TakeTransportError());  // reported once
    // Nothing is taken from the client any more: a request posted now
    // waits for the control plane, which completes it as aborted.
    Post(99, shm::kSendWrite, 8);
    const size_t sent = sink_.sent.size();
    endpoint_->Poll(32);
    EXPECT_EQ(sink_.sent.size(), sent);
    EXPECT_TRUE(Completions().empty());
    endpoint_->AbortQueued(shm::kStatusConnAborted);
    const auto late = Completions();
    ASSERT_EQ(late.size(), 1u);
    EXPECT_EQ(late[0].wr_id, 99u);
    EXPECT_EQ(late[0].status, shm::kStatusConnAborted);
  }

  std::unique_ptr<shm::SessionHeader, FreeDeleter> header_;
  std::unique_ptr<void, FreeDeleter> send_mem_;
  std::unique_ptr<void, FreeDeleter> completion_mem_;
  shm::SpscRing<shm::SendEntry> client_send_;
  shm::SpscRing<shm::CompletionEntry> client_completion_;
  mr::RegistrationTable table_{64, 1};
  MonotonicClock clock_;
  CaptureSink sink_;
  std::unique_ptr<Endpoint> endpoint_;
  std::vector<uint8_t> local_ = std::vector<uint8_t>(4096, 0);
  uint32_t lkey_ = 0;
};

// The peer sends an opcode rdmaplane does not serve: our responder answers
// NAK "invalid request", then the QP is in error and the endpoint closes.
TEST_F(EndpointTest, RefusedRequestClosesTheConnection) {
  Post(1, shm::kSendWrite, 100);
  Receive(Opcode::kSendOnly, wire::Psn(5000), 16);
  endpoint_->Poll(32);
  ASSERT_EQ(sink_.sent.size(), 1u);  // the NAK, and not our WRITE
  EXPECT_EQ(sink_.sent[0].bth.opcode, Opcode::kAcknowledge);
  EXPECT_EQ(sink_.sent[0].aeth.syndrome, wire::kAethNakInvalidRequest);
  EXPECT_EQ(sink_.sent[0].bth.psn, wire::Psn(5000));
  EXPECT_EQ(sink_.sent[0].bth.dest_qp, wire::Qpn(0x20));
  EXPECT_EQ(endpoint_->qp_error(), rc::WcStatus::kPeerInvalidRequest);
  const auto done = Completions();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].wr_id, 1u);
  EXPECT_EQ(done[0].status, shm::kStatusConnAborted);
  ExpectClosedAsTransportError();
}

// A WRITE to a key we never registered: NAK "remote access error", and the
// same close.
TEST_F(EndpointTest, RemoteAccessErrorClosesTheConnection) {
  Receive(Opcode::kWriteOnly, wire::Psn(5000), 16);
  endpoint_->Poll(32);
  ASSERT_EQ(sink_.sent.size(), 1u);
  EXPECT_EQ(sink_.sent[0].aeth.syndrome, wire::kAethNakRemoteAccess);
  EXPECT_EQ(endpoint_->qp_error(), rc::WcStatus::kPeerAccessError);
  ExpectClosedAsTransportError();
}

// A read response out of order fails our READ (the QP enters the error
// state on the frame, before the endpoint polls): a request the client
// posted meanwhile is aborted with the connection, never handed to the
// broken QP.
TEST_F(EndpointTest, BadResponseClosesTheConnection) {
  Post(1, shm::kSendRead, 600);
  endpoint_->Poll(32);
  ASSERT_EQ(sink_.sent.size(), 1u);
  EXPECT_EQ(sink_.sent[0].bth.opcode, Opcode::kReadRequest);
  Receive(Opcode::kReadResponseMiddle, sink_.sent[0].bth.psn, 256);
  Post(2, shm::kSendWrite, 8);
  endpoint_->Poll(32);
  EXPECT_EQ(endpoint_->qp_error(), rc::WcStatus::kBadResponse);
  const auto done = Completions();
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].wr_id, 1u);
  EXPECT_EQ(done[0].status, shm::kStatusConnAborted);
  EXPECT_EQ(done[1].wr_id, 2u);
  EXPECT_EQ(done[1].status, shm::kStatusConnAborted);
  EXPECT_EQ(sink_.sent.size(), 1u);
  ExpectClosedAsTransportError();
}

// Frames of another partition change nothing.
TEST_F(EndpointTest, ForeignPartitionIsIgnored) {
  Receive(Opcode::kSendOnly, wire::Psn(5000), 16, /*pkey=*/0x8001);
  endpoint_->Poll(32);
  EXPECT_TRUE(sink_.sent.empty());
  EXPECT_EQ(endpoint_->qp_stats().pkey_violations, 1u);
  EXPECT_EQ(header_->connection_state[0].load(), shm::kConnUp);
  EXPECT_FALSE(endpoint_->TakeTransportError());
}

}  // namespace
}  // namespace rdmaplane::engine
