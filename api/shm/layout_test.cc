// Pins the shared-memory ABI. librdmaplane and rdmaplaned may be built from
// different revisions; every number below is part of the contract between
// them. If one of these expectations fails, the change broke the ABI: either
// undo it or bump kSessionVersion / kRingVersion and update the numbers here
// in the same change.
#include "api/shm/layout.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <type_traits>

#include "api/shm/ring.h"
#include "api/shm/test_util.h"

namespace rdmaplane::shm {
namespace {

using testing::GuardedRegion;

// --- Ring ABI (ring.h) ---------------------------------------------------

TEST(RingAbi, Constants) {
  EXPECT_EQ(kRingMagic, 0x52474E52u);
  EXPECT_EQ(kRingVersion, 1u);
  EXPECT_EQ(kCacheLine, 64u);
  EXPECT_EQ(kRingProducerOffset, 64u);
  EXPECT_EQ(kRingConsumerOffset, 128u);
  EXPECT_EQ(kRingEntriesOffset, 192u);
}

TEST(RingAbi, RingHeader) {
  EXPECT_EQ(offsetof(RingHeader, magic), 0u);
  EXPECT_EQ(offsetof(RingHeader, version), 4u);
  EXPECT_EQ(offsetof(RingHeader, entry_size), 6u);
  EXPECT_EQ(offsetof(RingHeader, capacity), 8u);
  EXPECT_EQ(offsetof(RingHeader, reserved), 12u);
  EXPECT_EQ(sizeof(RingHeader::reserved), 52u);
  EXPECT_EQ(sizeof(RingHeader), 64u);
  EXPECT_EQ(alignof(RingHeader), 64u);
}

TEST(RingAbi, RingIndex) {
  EXPECT_EQ(offsetof(RingIndex, value), 0u);
  EXPECT_EQ(sizeof(RingIndex::value), 4u);
  EXPECT_EQ(sizeof(RingIndex), 64u);
  EXPECT_EQ(alignof(RingIndex), 64u);
  EXPECT_TRUE(std::atomic<uint32_t>{}.is_lock_free());
}

TEST(RingAbi, BytesFor) {
  EXPECT_EQ(SpscRing<ControlRequest>::BytesFor(kControlRingEntries), 26816u);
  EXPECT_EQ(SpscRing<ControlResponse>::BytesFor(kControlRingEntries), 7872u);
  EXPECT_EQ(SpscRing<SendEntry>::BytesFor(kSendRingEntries), 82112u);
  EXPECT_EQ(SpscRing<CompletionEntry>::BytesFor(kCompletionRingEntries),
            32960u);
  EXPECT_EQ(SpscRing<RecvEntry>::BytesFor(kRecvRingEntries), 139456u);
  EXPECT_EQ(SpscRing<CmEvent>::BytesFor(kCmEventRingEntries), 18624u);
}

// --- Session layout (layout.h) -------------------------------------------

TEST(LayoutAbi, Constants) {
  EXPECT_EQ(kSessionMagic, 0x53504452u);
  EXPECT_EQ(kSessionVersion, 14u);
  EXPECT_EQ(kQpRemoteAccessSet, 0x80u);
  EXPECT_EQ(kQpMinRnrTimerSet, 0x80u);
  EXPECT_EQ(kMaxConnections, 1056u);
  EXPECT_EQ(kDeepSlotsAt, 1024u);
  EXPECT_EQ(kDeepSlots, 32u);
  EXPECT_EQ(kMaxSge, 16u);
  EXPECT_EQ(kControlRingEntries, 64u);
  EXPECT_EQ(kSendRingEntries, 256u);
  EXPECT_EQ(kCompletionRingEntries, 1024u);
  EXPECT_EQ(kRecvRingEntries, 512u);
  EXPECT_EQ(kSlotSendRingEntries, 4096u);
  EXPECT_EQ(kSlotRecvRingEntries, 4096u);
  EXPECT_EQ(kSlotCompletionRingEntries, 8192u);
  EXPECT_EQ(kMaxSendRingEntries, 16384u);
  EXPECT_EQ(kMaxRecvRingEntries, 16384u);
  EXPECT_EQ(kMaxCompletionRingEntries, 32768u);
  EXPECT_EQ(kDescriptorBytes, 32u);
  EXPECT_EQ(kServiceNameBytes, 64u);
  EXPECT_EQ(kDescriptorMagic, 0x44504452u);
}

TEST(LayoutAbi, EnumValuesAndFlags) {
  EXPECT_EQ(sizeof(ControlOp), 4u);
  EXPECT_EQ(kOpRegisterLocal, 1u);
  EXPECT_EQ(kOpDeregisterLocal, 2u);
  EXPECT_EQ(kOpRegisterRdma, 3u);
  EXPECT_EQ(kOpDeregisterRdma, 4u);
  EXPECT_EQ(kOpListen, 5u);
  EXPECT_EQ(kOpConnect, 6u);
  EXPECT_EQ(kOpAccept, 7u);
  EXPECT_EQ(kOpDisconnect, 8u);
  EXPECT_EQ(kOpUnlisten, 9u);

  EXPECT_EQ(kAccessRead, 1u);
  EXPECT_EQ(kAccessWrite, 2u);
  EXPECT_EQ(kAccessReadWrite, 3u);

  EXPECT_EQ(sizeof(SendOp), 1u);
  EXPECT_EQ(kSendWrite, 1u);
  EXPECT_EQ(kSendRead, 2u);
  EXPECT_EQ(kSendFlush, 3u);

  EXPECT_EQ(sizeof(ConnectionState), 4u);
  EXPECT_EQ(kConnFree, 0u);
  EXPECT_EQ(kConnUp, 1u);
  EXPECT_EQ(kConnReset, 2u);
  EXPECT_EQ(kConnAborted, 3u);
  EXPECT_EQ(kConnDaemonGone, 4u);
  EXPECT_EQ(kConnRequestRefused, 5u);
  EXPECT_EQ(kConnAccessRefused, 6u);

  EXPECT_EQ(sizeof(StatusCode), 4u);
  EXPECT_EQ(kStatusOk, 0);
  EXPECT_EQ(kStatusPending, 1);
  EXPECT_EQ(kStatusInvalid, -1);
  EXPECT_EQ(kStatusFault, -2);
  EXPECT_EQ(kStatusNoBuffers, -3);
  EXPECT_EQ(kStatusNotConnected, -4);
  EXPECT_EQ(kStatusConnReset, -5);
  EXPECT_EQ(kStatusConnAborted, -6);
  EXPECT_EQ(kStatusAborted, -7);
  EXPECT_EQ(kStatusRemoteResources, -8);
  EXPECT_EQ(kStatusNetDown, -9);
  EXPECT_EQ(kStatusRefused, -10);
  EXPECT_EQ(kStatusPermission, -11);
  EXPECT_EQ(kStatusTimeout, -12);
  EXPECT_EQ(kStatusAgain, -13);

  EXPECT_EQ(kFlagSilentSuccess, 0x001u);
  EXPECT_EQ(kFlagReadFence, 0x002u);
  EXPECT_EQ(kFlagDefer, 0x200u);
  EXPECT_EQ(kFlagReadLocalInvalidate, 0x100u);
  EXPECT_EQ(kKnownSendFlags, 0x303u);
}

TEST(LayoutAbi, Doorbell) {
  EXPECT_EQ(offsetof(Doorbell, sequence), 0u);
  EXPECT_EQ(offsetof(Doorbell, sleeping), 4u);
  EXPECT_EQ(sizeof(Doorbell::sequence), 4u);  // futex words are 32-bit
  EXPECT_EQ(sizeof(Doorbell), 64u);
  EXPECT_EQ(alignof(Doorbell), 64u);
}

TEST(LayoutAbi, RingRef) {
  EXPECT_EQ(offsetof(RingRef, offset), 0u);
  EXPECT_EQ(offsetof(RingRef, capacity), 8u);
  EXPECT_EQ(offsetof(RingRef, bytes), 12u);
  EXPECT_EQ(sizeof(RingRef), 16u);
  EXPECT_EQ(alignof(RingRef), 8u);
}

TEST(LayoutAbi, ConnectionSlotRef) {
  EXPECT_EQ(offsetof(ConnectionSlotRef, send), 0u);
  EXPECT_EQ(offsetof(ConnectionSlotRef, completion), 16u);
  EXPECT_EQ(sizeof(ConnectionSlotRef), 32u);
  EXPECT_EQ(alignof(ConnectionSlotRef), 8u);
}

TEST(LayoutAbi, SessionHeader) {
  static_assert(kMaxConnections == 1056u);
  EXPECT_EQ(offsetof(SessionHeader, magic), 0u);
  EXPECT_EQ(offsetof(SessionHeader, version), 4u);
  EXPECT_EQ(offsetof(SessionHeader, header_pages), 6u);
  EXPECT_EQ(offsetof(SessionHeader, region_bytes), 8u);
  EXPECT_EQ(offsetof(SessionHeader, max_connections), 16u);
  EXPECT_EQ(offsetof(SessionHeader, port_state), 20u);
  EXPECT_EQ(offsetof(SessionHeader, control_requests), 24u);
  EXPECT_EQ(offsetof(SessionHeader, control_responses), 40u);
  EXPECT_EQ(offsetof(SessionHeader, connections), 56u);
  EXPECT_EQ(sizeof(SessionHeader::connections), 1056u * 32u);
  EXPECT_EQ(offsetof(SessionHeader, control_response_bell), 33856u);
  EXPECT_EQ(offsetof(SessionHeader, completion_bell), 33920u);
  EXPECT_EQ(sizeof(SessionHeader::completion_bell), 1056u * 64u);
  EXPECT_EQ(offsetof(SessionHeader, engine_idle), 101504u);
  EXPECT_EQ(sizeof(SessionHeader::engine_idle), 1056u * 64u);
  EXPECT_EQ(offsetof(SessionHeader, connection_state), 169088u);
  EXPECT_EQ(sizeof(SessionHeader::connection_state), 1056u * 4u);
  EXPECT_EQ(offsetof(SessionHeader, final_status), 173312u);
  EXPECT_EQ(sizeof(SessionHeader::final_status), 1056u * 4u);
  EXPECT_EQ(offsetof(SessionHeader, retired), 177536u);
  EXPECT_EQ(sizeof(SessionHeader::retired), 1056u * 4u);
  EXPECT_EQ(offsetof(SessionHeader, established), 181760u);
  EXPECT_EQ(sizeof(SessionHeader::established), 1056u * 4u);
  EXPECT_EQ(offsetof(SessionHeader, receive), 185984u);
  EXPECT_EQ(sizeof(SessionHeader::receive), 1056u * 16u);
  EXPECT_EQ(offsetof(SessionHeader, cm_events), 202880u);
  EXPECT_EQ(offsetof(SessionHeader, cm_event_bell), 202944u);
  EXPECT_EQ(offsetof(SessionHeader, liveness), 203008u);
  EXPECT_EQ(sizeof(SessionHeader::liveness), 64u);
  EXPECT_EQ(sizeof(SessionHeader), 50u * 4096u);
  EXPECT_EQ(alignof(SessionHeader), 4096u);
  // header_pages must be able to record the header's size.
  EXPECT_LE(sizeof(SessionHeader) / 4096, std::numeric_limits<uint16_t>::max());
}

TEST(LayoutAbi, ControlRequest) {
  EXPECT_EQ(offsetof(ControlRequest, request_id), 0u);
  EXPECT_EQ(offsetof(ControlRequest, op), 8u);
  EXPECT_EQ(offsetof(ControlRequest, connection), 12u);
  EXPECT_EQ(offsetof(ControlRequest, address), 16u);
  EXPECT_EQ(offsetof(ControlRequest, length), 24u);
  EXPECT_EQ(offsetof(ControlRequest, flags), 32u);
  EXPECT_EQ(offsetof(ControlRequest, key), 36u);
  EXPECT_EQ(offsetof(ControlRequest, descriptor), 40u);
  EXPECT_EQ(offsetof(ControlRequest, descriptor_length), 72u);
  EXPECT_EQ(offsetof(ControlRequest, reserved), 76u);
  EXPECT_EQ(offsetof(ControlRequest, service), 80u);
  EXPECT_EQ(sizeof(ControlRequest::service), 64u);
  EXPECT_EQ(offsetof(ControlRequest, cm), 144u);
  EXPECT_EQ(sizeof(ControlRequest), 416u);
  EXPECT_EQ(alignof(ControlRequest), 8u);
}

TEST(LayoutAbi, CmParamsAndEvent) {
  EXPECT_EQ(offsetof(CmParams, id), 0u);
  EXPECT_EQ(offsetof(CmParams, local_ip), 4u);
  EXPECT_EQ(offsetof(CmParams, remote_ip), 8u);
  EXPECT_EQ(offsetof(CmParams, local_port), 12u);
  EXPECT_EQ(offsetof(CmParams, remote_port), 14u);
  EXPECT_EQ(offsetof(CmParams, port_space), 16u);
  EXPECT_EQ(offsetof(CmParams, responder_resources), 18u);
  EXPECT_EQ(offsetof(CmParams, initiator_depth), 19u);
  EXPECT_EQ(offsetof(CmParams, flow_control), 20u);
  EXPECT_EQ(offsetof(CmParams, retry_count), 21u);
  EXPECT_EQ(offsetof(CmParams, rnr_retry_count), 22u);
  EXPECT_EQ(offsetof(CmParams, srq), 23u);
  EXPECT_EQ(offsetof(CmParams, qpn), 24u);
  EXPECT_EQ(offsetof(CmParams, psn), 28u);
  EXPECT_EQ(offsetof(CmParams, qkey), 32u);
  EXPECT_EQ(offsetof(CmParams, timeout_ms), 36u);
  EXPECT_EQ(offsetof(CmParams, backlog), 40u);
  EXPECT_EQ(offsetof(CmParams, reason), 44u);
  EXPECT_EQ(offsetof(CmParams, path_mtu), 46u);
  EXPECT_EQ(offsetof(CmParams, private_data_len), 47u);
  EXPECT_EQ(offsetof(CmParams, private_data), 48u);
  EXPECT_EQ(sizeof(CmParams), 272u);
  EXPECT_EQ(offsetof(CmEvent, type), 0u);
  EXPECT_EQ(offsetof(CmEvent, status), 4u);
  EXPECT_EQ(offsetof(CmEvent, listener), 8u);
  EXPECT_EQ(offsetof(CmEvent, params), 16u);
  EXPECT_EQ(sizeof(CmEvent), 288u);
  // Enough for the largest private data a CM message carries (an RTU's or
  // DREP's).
  EXPECT_EQ(kCmPrivateDataBytes, 224u);
}

TEST(LayoutAbi, ControlResponse) {
  EXPECT_EQ(offsetof(ControlResponse, request_id), 0u);
  EXPECT_EQ(offsetof(ControlResponse, status), 8u);
  EXPECT_EQ(offsetof(ControlResponse, connection), 12u);
  EXPECT_EQ(offsetof(ControlResponse, key), 16u);
  EXPECT_EQ(offsetof(ControlResponse, descriptor_length), 20u);
  EXPECT_EQ(offsetof(ControlResponse, descriptor), 24u);
  EXPECT_EQ(offsetof(ControlResponse, message), 56u);
  EXPECT_EQ(sizeof(ControlResponse::message), 64u);
  EXPECT_EQ(sizeof(ControlResponse), 120u);
  EXPECT_EQ(alignof(ControlResponse), 8u);
}

TEST(LayoutAbi, RdmaDescriptor) {
  EXPECT_EQ(offsetof(RdmaDescriptor, magic), 0u);
  EXPECT_EQ(offsetof(RdmaDescriptor, rkey), 4u);
  EXPECT_EQ(offsetof(RdmaDescriptor, address), 8u);
  EXPECT_EQ(offsetof(RdmaDescriptor, length), 16u);
  EXPECT_EQ(offsetof(RdmaDescriptor, access), 24u);
  EXPECT_EQ(offsetof(RdmaDescriptor, reserved), 28u);
  EXPECT_EQ(sizeof(RdmaDescriptor), 32u);
  EXPECT_EQ(sizeof(RdmaDescriptor), sizeof(ControlRequest::descriptor));
  EXPECT_EQ(sizeof(RdmaDescriptor), sizeof(ControlResponse::descriptor));
}

TEST(LayoutAbi, SgeEntry) {
  EXPECT_EQ(offsetof(SgeEntry, address), 0u);
  EXPECT_EQ(offsetof(SgeEntry, length), 8u);
  EXPECT_EQ(offsetof(SgeEntry, lkey), 12u);
  EXPECT_EQ(sizeof(SgeEntry), 16u);
  EXPECT_EQ(alignof(SgeEntry), 8u);
}

TEST(LayoutAbi, SendEntry) {
  EXPECT_EQ(offsetof(SendEntry, wr_id), 0u);
  EXPECT_EQ(offsetof(SendEntry, op), 8u);
  EXPECT_EQ(offsetof(SendEntry, num_sge), 9u);
  EXPECT_EQ(offsetof(SendEntry, reserved0), 10u);
  EXPECT_EQ(offsetof(SendEntry, flags), 12u);
  EXPECT_EQ(offsetof(SendEntry, sge), 16u);
  EXPECT_EQ(sizeof(SendEntry::sge), 16u * 16u);
  EXPECT_EQ(offsetof(SendEntry, remote_address), 272u);
  EXPECT_EQ(offsetof(SendEntry, rkey), 280u);
  EXPECT_EQ(offsetof(SendEntry, imm), 284u);
  EXPECT_EQ(offsetof(SendEntry, compare), 288u);
  EXPECT_EQ(offsetof(SendEntry, swap_add), 296u);
  EXPECT_EQ(offsetof(SendEntry, ah), 304u);
  EXPECT_EQ(offsetof(SendEntry, remote_qpn), 308u);
  EXPECT_EQ(offsetof(SendEntry, remote_qkey), 312u);
  EXPECT_EQ(sizeof(SendEntry), 320u);
  EXPECT_EQ(alignof(SendEntry), 8u);
}

TEST(LayoutAbi, CompletionEntry) {
  EXPECT_EQ(offsetof(CompletionEntry, wr_id), 0u);
  EXPECT_EQ(offsetof(CompletionEntry, status), 8u);
  EXPECT_EQ(offsetof(CompletionEntry, op), 12u);
  EXPECT_EQ(offsetof(CompletionEntry, flags), 13u);
  EXPECT_EQ(offsetof(CompletionEntry, detail), 14u);
  EXPECT_EQ(offsetof(CompletionEntry, reserved0), 15u);
  EXPECT_EQ(offsetof(CompletionEntry, byte_len), 16u);
  EXPECT_EQ(offsetof(CompletionEntry, retired), 20u);
  EXPECT_EQ(offsetof(CompletionEntry, imm), 24u);
  EXPECT_EQ(offsetof(CompletionEntry, src_qp), 28u);
  EXPECT_EQ(sizeof(CompletionEntry), 32u);
  EXPECT_EQ(alignof(CompletionEntry), 8u);
}

TEST(LayoutAbi, RecvEntry) {
  EXPECT_EQ(offsetof(RecvEntry, wr_id), 0u);
  EXPECT_EQ(offsetof(RecvEntry, num_sge), 8u);
  EXPECT_EQ(offsetof(RecvEntry, reserved0), 9u);
  EXPECT_EQ(offsetof(RecvEntry, sge), 16u);
  EXPECT_EQ(sizeof(RecvEntry), 272u);
  EXPECT_EQ(alignof(RecvEntry), 8u);
}

TEST(LayoutAbi, VerbsMessages) {
  EXPECT_EQ(offsetof(QpPeer, peer_ip), 0u);
  EXPECT_EQ(offsetof(QpPeer, peer_qpn), 4u);
  EXPECT_EQ(offsetof(QpPeer, rq_psn), 8u);
  EXPECT_EQ(offsetof(QpPeer, sq_psn), 12u);
  EXPECT_EQ(offsetof(QpPeer, path_mtu), 16u);
  EXPECT_EQ(offsetof(QpPeer, max_rd_atomic), 20u);
  EXPECT_EQ(offsetof(QpPeer, max_dest_rd_atomic), 21u);
  EXPECT_EQ(offsetof(QpPeer, retry_count), 22u);
  EXPECT_EQ(offsetof(QpPeer, timeout), 23u);
  EXPECT_EQ(offsetof(QpPeer, rnr_retry), 24u);
  EXPECT_EQ(offsetof(QpPeer, min_rnr_timer), 25u);
  EXPECT_EQ(sizeof(QpPeer), kDescriptorBytes);
  EXPECT_EQ(offsetof(DeviceInfo, ip), 0u);
  EXPECT_EQ(offsetof(DeviceInfo, mac), 4u);
  EXPECT_EQ(offsetof(DeviceInfo, path_mtu), 10u);
  EXPECT_EQ(offsetof(DeviceInfo, max_qps), 12u);
  EXPECT_EQ(offsetof(DeviceInfo, max_mrs), 16u);
  EXPECT_EQ(offsetof(DeviceInfo, max_qp_wr), 20u);
  EXPECT_EQ(offsetof(DeviceInfo, max_cqe), 24u);
  EXPECT_EQ(offsetof(DeviceInfo, max_sge), 28u);
  EXPECT_EQ(offsetof(DeviceInfo, max_rd_atomic), 29u);
  EXPECT_EQ(offsetof(DeviceInfo, link_up), 30u);
  EXPECT_EQ(sizeof(DeviceInfo), kDescriptorBytes);
  EXPECT_EQ(kOpAllocPd, 10u);
  EXPECT_EQ(kOpDeallocPd, 11u);
  EXPECT_EQ(kOpCreateQp, 12u);
  EXPECT_EQ(kQpServiceRc, 2u);  // IBV_QPT_RC
  EXPECT_EQ(kQpServiceUc, 3u);  // IBV_QPT_UC
  EXPECT_EQ(kQpServiceUd, 4u);  // IBV_QPT_UD
  EXPECT_EQ(kOpCreateAh, 15u);
  EXPECT_EQ(kOpDestroyAh, 16u);
  EXPECT_EQ(offsetof(QpPeer, qkey), 28u);
  EXPECT_EQ(kOpModifyQp, 13u);
  EXPECT_EQ(kOpQueryDevice, 14u);
  EXPECT_EQ(kQpToRtr, 1u);
  EXPECT_EQ(kQpToRts, 2u);
  EXPECT_EQ(kPdScopeSlot, 0xFFFFFFFFu);
  EXPECT_EQ(kSendSend, 4u);
  EXPECT_EQ(kRecv, 5u);
  EXPECT_EQ(kRecvWriteImm, 6u);
  EXPECT_EQ(kAccessAtomic, 4u);
  EXPECT_EQ(kSendCompareSwap, 7u);
  EXPECT_EQ(kSendFetchAdd, 8u);
  EXPECT_EQ(kFlagImmediate, 0x10000u);
  EXPECT_EQ(kFlagSolicited, 0x20000u);
  EXPECT_EQ(kVerbsSendFlags & kKnownSendFlags, kKnownSendFlags);
  EXPECT_EQ(kCompletionImm, 1u);
  EXPECT_EQ(kDetailLocalLength, 7u);
  EXPECT_EQ(kOpAllocMw, 19u);
  EXPECT_EQ(kOpDeallocMw, 20u);
  EXPECT_EQ(kSendBindMw, 9u);
  EXPECT_EQ(kSendLocalInvalidate, 10u);
  EXPECT_EQ(kFlagInvalidate, 0x40000u);
  EXPECT_EQ(kCompletionInvalidated, 8u);
  EXPECT_EQ(kDetailMwBind, 8u);
  EXPECT_EQ(kDetailLocalOperation, 9u);
  EXPECT_EQ(kDetailInvalidateRefused, 10u);
  EXPECT_EQ(kBindKnownBits, 0x1Fu);
}

// Every message is copied byte for byte between processes: no hidden
// members, no padding whose contents leak, nothing with a constructor.
template <typename T>
constexpr bool IsWireType() {
  return std::is_trivially_copyable_v<T> && std::is_standard_layout_v<T> &&
         std::has_unique_object_representations_v<T>;
}
static_assert(IsWireType<RingRef>());
static_assert(IsWireType<ConnectionSlotRef>());
static_assert(IsWireType<ControlRequest>());
static_assert(IsWireType<ControlResponse>());
static_assert(IsWireType<CmParams>());
static_assert(IsWireType<CmEvent>());
static_assert(IsWireType<RdmaDescriptor>());
static_assert(IsWireType<SgeEntry>());
static_assert(IsWireType<SendEntry>());
static_assert(IsWireType<CompletionEntry>());
static_assert(std::is_standard_layout_v<SessionHeader>);
static_assert(std::is_standard_layout_v<RingHeader>);

// --- Session region size -------------------------------------------------

// Places one ring as a creator would: at the next cache-line-aligned offset
// after the previous ring (SpscRing::Create needs cache-line alignment).
template <typename T>
RingRef Place(uint64_t* cursor, uint32_t capacity) {
  *cursor = testing::RoundUp(*cursor, kCacheLine);
  const size_t bytes = SpscRing<T>::BytesFor(capacity);
  EXPECT_LE(bytes, std::numeric_limits<uint32_t>::max());
  const RingRef ref{*cursor, capacity, static_cast<uint32_t>(bytes)};
  *cursor += bytes;
  return ref;
}

// The session header with every ring placed in the order the layout diagram
// lists them, starting right after the header, written to `header` (which a
// creator would place at the start of the region). Returns the end of the
// last ring.
uint64_t PlanSession(SessionHeader& header) {
  header.magic = kSessionMagic;
  header.version = kSessionVersion;
  header.header_pages = sizeof(SessionHeader) / 4096;
  header.region_bytes = SessionRegionBytes();
  header.max_connections = kMaxConnections;
  uint64_t cursor = sizeof(SessionHeader);
  header.control_requests = Place<ControlRequest>(&cursor, kControlRingEntries);
  header.control_responses =
      Place<ControlResponse>(&cursor, kControlRingEntries);
  header.cm_events = Place<CmEvent>(&cursor, kCmEventRingEntries);
  // The ordinary slots' send and completion rings, the deep slots', then
  // the receive rings in the same order.
  for (uint32_t i = 0; i < kMaxConnections; ++i) {
    const bool deep = i >= kDeepSlotsAt;
    header.connections[i].send = Place<SendEntry>(
        &cursor, deep ? kMaxSendRingEntries : kSlotSendRingEntries);
    header.connections[i].completion = Place<CompletionEntry>(
        &cursor, deep ? kMaxCompletionRingEntries : kSlotCompletionRingEntries);
  }
  for (uint32_t i = 0; i < kMaxConnections; ++i) {
    header.receive[i] = Place<RecvEntry>(
        &cursor, i >= kDeepSlotsAt ? kMaxRecvRingEntries : kSlotRecvRingEntries);
  }
  return cursor;
}

TEST(SessionRegionBytes, IsPageRoundedAndHoldsEveryRing) {
  constexpr uint64_t kPage = 4096;
  constexpr uint64_t region = SessionRegionBytes();
  static_assert(region % kPage == 0);
  // 755924 pages of address space, each slot's room for its deepest rings
  // (the deep slots' four times an ordinary slot's); touched only as used.
  EXPECT_EQ(region, 3096264704u);
  SessionHeader header{};
  const uint64_t end = PlanSession(header);
  EXPECT_LE(end, region);
  EXPECT_LT(region - end, kPage) << "more than a page of slack";
}

TEST(SlotDepths, DecodeRoundsUpToPowersOfTwoWithinTheMaxima) {
  // 0: a native connection's depths.
  std::optional<SlotDepths> d = SlotDepths::Decode(0);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->send, kSendRingEntries);
  EXPECT_EQ(d->receive, kRecvRingEntries);
  EXPECT_EQ(d->completion, kCompletionRingEntries);
  // At least what was asked, a power of two, at least 16; the completion
  // ring one entry for each of theirs.
  d = SlotDepths::Decode(SlotDepths::Encode(1, 100));
  ASSERT_TRUE(d);
  EXPECT_EQ(d->send, 16u);
  EXPECT_EQ(d->receive, 128u);
  EXPECT_EQ(d->completion, 256u);
  d = SlotDepths::Decode(SlotDepths::Encode(4096, 4095));
  ASSERT_TRUE(d);
  EXPECT_EQ(d->send, 4096u);
  EXPECT_EQ(d->receive, 4096u);
  EXPECT_EQ(d->completion, kSlotCompletionRingEntries);
  EXPECT_FALSE(d->Deep());
  d = SlotDepths::Decode(SlotDepths::Encode(16384, 16000));
  ASSERT_TRUE(d);
  EXPECT_EQ(d->send, 16384u);
  EXPECT_EQ(d->receive, 16384u);
  EXPECT_EQ(d->completion, kMaxCompletionRingEntries);
  EXPECT_TRUE(d->Deep());
  // Deeper than an ordinary slot in any ring: a deep slot's.
  EXPECT_TRUE(SlotDepths::Decode(SlotDepths::Encode(4097, 1))->Deep());
  EXPECT_TRUE(SlotDepths::Decode(SlotDepths::Encode(1, 4097))->Deep());
  EXPECT_TRUE(SlotDepths::Decode(SlotDepths::Encode(4096, 4097))->Deep());
  // Above a maximum: refused, whatever the other half says.
  EXPECT_FALSE(SlotDepths::Decode(SlotDepths::Encode(16385, 1)));
  EXPECT_FALSE(SlotDepths::Decode(SlotDepths::Encode(1, 16385)));
  EXPECT_FALSE(SlotDepths::Decode(~uint64_t{0}));
  // Every depth Decode gives fits the room the layout reserves: an
  // ordinary slot's unless Deep, a deep slot's always.
  for (uint32_t send : {1u, 16u, 17u, 1000u, 4096u, 4097u, 16384u}) {
    for (uint32_t receive : {0u, 1u, 513u, 4096u, 8000u, 16384u}) {
      d = SlotDepths::Decode(SlotDepths::Encode(send, receive));
      ASSERT_TRUE(d);
      for (uint32_t slot : {0u, kDeepSlotsAt - 1, kDeepSlotsAt,
                            kMaxConnections - 1}) {
        const bool holds = SessionRings::Holds(slot, *d);
        EXPECT_EQ(holds, slot >= kDeepSlotsAt || !d->Deep())
            << send << " " << receive << " slot " << slot;
        if (!holds) continue;
        EXPECT_LE(SpscRing<SendEntry>::BytesFor(d->send),
                  SessionRings::Send(slot).bytes);
        EXPECT_LE(SpscRing<RecvEntry>::BytesFor(d->receive),
                  SessionRings::Receive(slot).bytes);
        EXPECT_LE(SpscRing<CompletionEntry>::BytesFor(d->completion),
                  SessionRings::Completion(slot).bytes);
      }
    }
  }
}

// Each ring's first entry byte pattern, distinct per ring and per entry so
// that overlapping rings would read each other's data.
template <typename T>
T Pattern(uint32_t ring_id, uint32_t index) {
  uint8_t bytes[sizeof(T)];
  for (size_t i = 0; i < sizeof(T); ++i) {
    bytes[i] = static_cast<uint8_t>(ring_id * 131 + index * 7 + i);
  }
  T value;
  std::memcpy(&value, bytes, sizeof(T));
  return value;
}

template <typename T>
void CreateAndFill(uint8_t* region, const RingRef& ref, uint32_t ring_id) {
  ASSERT_EQ(ref.offset % kCacheLine, 0u);
  absl::StatusOr<SpscRing<T>> ring =
      SpscRing<T>::Create(region + ref.offset, ref.bytes, ref.capacity);
  ASSERT_TRUE(ring.ok()) << ring.status();
  for (uint32_t i = 0; i < ref.capacity; ++i) {
    ASSERT_TRUE(ring->TryPush(Pattern<T>(ring_id, i)));
  }
  ASSERT_FALSE(ring->TryPush(Pattern<T>(ring_id, 0)));
}

template <typename T>
void AttachAndDrain(uint8_t* region, const RingRef& ref, uint32_t ring_id) {
  absl::StatusOr<SpscRing<T>> ring =
      SpscRing<T>::Attach(region + ref.offset, ref.bytes);
  ASSERT_TRUE(ring.ok()) << "ring " << ring_id << ": " << ring.status();
  ASSERT_EQ(ring->capacity(), ref.capacity);
  ASSERT_EQ(ring->Size(), ref.capacity);
  for (uint32_t i = 0; i < ref.capacity; ++i) {
    T out;
    ASSERT_EQ(ring->TryPop(&out), PopResult::kOk);
    const T expected = Pattern<T>(ring_id, i);
    ASSERT_EQ(std::memcmp(&out, &expected, sizeof(T)), 0)
        << "ring " << ring_id << " entry " << i;
  }
}

// Builds a whole session region of exactly SessionRegionBytes() (followed by
// a guard page), fills every ring, then attaches to each through the offsets
// recorded in the header and reads everything back: rings that overlapped
// each other or the header, or ran past the region, would fail here.
TEST(SessionRegionBytes, EveryRingFitsWithoutOverlap) {
  GuardedRegion memory(SessionRegionBytes());
  ASSERT_EQ(memory.size(), SessionRegionBytes());
  uint8_t* region = memory.data();
  auto* header = new (region) SessionHeader{};
  EXPECT_LE(PlanSession(*header), SessionRegionBytes());
  uint8_t planned[sizeof(SessionHeader)];
  std::memcpy(planned, header, sizeof(planned));

  CreateAndFill<ControlRequest>(region, header->control_requests, 0);
  CreateAndFill<ControlResponse>(region, header->control_responses, 1);
  for (uint32_t c = 0; c < kMaxConnections; ++c) {
    CreateAndFill<SendEntry>(region, header->connections[c].send, 2 + 2 * c);
    CreateAndFill<CompletionEntry>(region, header->connections[c].completion,
                                   3 + 2 * c);
  }

  EXPECT_EQ(std::memcmp(header, planned, sizeof(planned)), 0)
      << "a ring overwrote the session header";
  AttachAndDrain<ControlRequest>(region, header->control_requests, 0);
  AttachAndDrain<ControlResponse>(region, header->control_responses, 1);
  for (uint32_t c = 0; c < kMaxConnections; ++c) {
    AttachAndDrain<SendEntry>(region, header->connections[c].send, 2 + 2 * c);
    AttachAndDrain<CompletionEntry>(region, header->connections[c].completion,
                                    3 + 2 * c);
  }
}

}  // namespace
}  // namespace rdmaplane::shm
