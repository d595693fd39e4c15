#include "dataplane/wire/cm.h"

#include <algorithm>
#include <cstring>

#include "dataplane/wire/bytes.h"

namespace rdmaplane::wire {
namespace {

constexpr uint8_t kTransportRc = 0;
constexpr uint16_t kPermissiveLid = 0xFFFF;
constexpr uint8_t kMaxAriLen = 72;
constexpr uint8_t kMax3Bits = 7;
constexpr uint8_t kMax4Bits = 15;
constexpr uint8_t kMax5Bits = 31;
constexpr uint8_t kMax6Bits = 63;

// Offsets in the MAD's 232 data bytes (IBA tables 106-113); bit fields are
// named by the bits they take in their byte, most significant first.
namespace req {
constexpr size_t kLocalCommId = 0;
constexpr size_t kServiceId = 8;
constexpr size_t kLocalCaGuid = 16;
constexpr size_t kLocalQkey = 28;
constexpr size_t kLocalQpn = 32;  // 24 bits
constexpr size_t kResponderResources = 35;
constexpr size_t kInitiatorDepth = 39;
// Remote CM response timeout [7:3], transport service type [2:1],
// end-to-end flow control [0].
constexpr size_t kRemoteTimeoutTransport = 43;
constexpr size_t kStartingPsn = 44;  // 24 bits
// Local CM response timeout [7:3], retry count [2:0].
constexpr size_t kLocalTimeoutRetry = 47;
constexpr size_t kPkey = 48;
// Path MTU [7:4], RDC exists [3], RNR retry count [2:0].
constexpr size_t kMtuRnrRetry = 50;
// Max CM retries [7:4], SRQ [3], extended transport type [2:0].
constexpr size_t kCmRetriesSrqXrc = 51;
constexpr size_t kPrimaryLocalLid = 52;
constexpr size_t kPrimaryRemoteLid = 54;
constexpr size_t kPrimaryLocalGid = 56;
constexpr size_t kPrimaryRemoteGid = 72;
// Primary flow label [31:12], reserved [11:6], packet rate [5:0].
constexpr size_t kPrimaryFlowLabelRate = 88;
constexpr size_t kPrimaryTrafficClass = 92;
constexpr size_t kPrimaryHopLimit = 93;
// Local ACK timeout [7:3].
constexpr size_t kPrimaryAckTimeout = 95;
constexpr size_t kPrivateData = 140;
}  // namespace req

namespace mra {
constexpr size_t kMessageMraed = 8;    // [7:6]
constexpr size_t kServiceTimeout = 9;  // [7:3]
constexpr size_t kPrivateData = 10;
}  // namespace mra

namespace rej {
constexpr size_t kMessageRejected = 8;  // [7:6]
constexpr size_t kAriLength = 9;        // [7:1]
constexpr size_t kReason = 10;
constexpr size_t kPrivateData = 84;
}  // namespace rej

namespace rep {
constexpr size_t kLocalQkey = 8;
constexpr size_t kLocalQpn = 12;     // 24 bits
constexpr size_t kStartingPsn = 20;  // 24 bits
constexpr size_t kResponderResources = 24;
constexpr size_t kInitiatorDepth = 25;
// Target ACK delay [7:3], failover accepted [2:1], end-to-end flow control
// [0].
constexpr size_t kAckDelayFailover = 26;
// RNR retry count [7:5], SRQ [4].
constexpr size_t kRnrRetrySrq = 27;
constexpr size_t kLocalCaGuid = 28;
constexpr size_t kPrivateData = 36;
}  // namespace rep

namespace sidr_req {
constexpr size_t kPkey = 4;
constexpr size_t kServiceId = 8;
constexpr size_t kPrivateData = 16;
}  // namespace sidr_req

namespace sidr_rep {
constexpr size_t kStatus = 4;
constexpr size_t kAddInfoLength = 5;
constexpr size_t kQpn = 8;  // 24 bits
constexpr size_t kServiceId = 12;
constexpr size_t kQkey = 20;
constexpr size_t kPrivateData = 96;  // after 72 bytes of additional info
}  // namespace sidr_rep

// Every message starts with both comm ids but REQ, which has no remote one.
constexpr size_t kLocalCommId = 0;
constexpr size_t kRemoteCommId = 4;
constexpr size_t kDreqRemoteQpn = 8;  // 24 bits
constexpr size_t kDreqPrivateData = 12;
constexpr size_t kCommIdsPrivateData = 8;  // RTU and DREP


// ::ffff:a.b.c.d
void PutIpv4MappedGid(uint8_t* p, uint32_t ip) {
  std::memset(p, 0, 10);
  p[10] = p[11] = 0xFF;
  Put32(p + 12, ip);
}
bool GetIpv4MappedGid(const uint8_t* p, uint32_t* ip) {
  static constexpr uint8_t kPrefix[12] = {0, 0, 0, 0, 0,    0,
                                          0, 0, 0, 0, 0xFF, 0xFF};
  if (std::memcmp(p, kPrefix, sizeof(kPrefix)) != 0) return false;
  *ip = Get32(p + 12);
  return true;
}

// The node GUID RoCE devices derive from their MAC address (EUI-64).
uint64_t CaGuidForMac(const MacAddr& mac) {
  const auto& b = mac.bytes;
  return uint64_t{static_cast<uint8_t>(b[0] ^ 0x02)} << 56 |
         uint64_t{b[1]} << 48 | uint64_t{b[2]} << 40 | uint64_t{0xFF} << 32 |
         uint64_t{0xFE} << 24 | uint64_t{b[3]} << 16 | uint64_t{b[4]} << 8 |
         b[5];
}

size_t PrivateDataOffset(CmType type) {
  switch (type) {
    case CmType::kReq:
      return req::kPrivateData;
    case CmType::kMra:
      return mra::kPrivateData;
    case CmType::kRej:
      return rej::kPrivateData;
    case CmType::kRep:
      return rep::kPrivateData;
    case CmType::kRtu:
      return kCommIdsPrivateData;
    case CmType::kDreq:
      return kDreqPrivateData;
    case CmType::kDrep:
      return kCommIdsPrivateData;
    case CmType::kSidrReq:
      return sidr_req::kPrivateData;
    case CmType::kSidrRep:
      return sidr_rep::kPrivateData;
  }
  return 0;
}

bool ValidRefersTo(CmRefersTo r) { return static_cast<uint8_t>(r) <= 2; }

// Checks the fields EncodeMad cannot represent.
bool Encodable(const CmMessage& m) {
  if (!IsKnownCmType(static_cast<uint16_t>(m.type))) return false;
  if (m.private_data_len > CmPrivateDataCapacity(m.type)) return false;
  switch (m.type) {
    case CmType::kReq:
      return m.qpn.value() <= Psn::kMask && IbMtuBytes(m.path_mtu) != 0 &&
             m.local_ack_timeout <= kMax5Bits &&
             m.remote_cm_response_timeout <= kMax5Bits &&
             m.local_cm_response_timeout <= kMax5Bits &&
             m.max_cm_retries <= kMax4Bits && m.retry_count <= kMax3Bits &&
             m.rnr_retry_count <= kMax3Bits && m.packet_rate <= kMax6Bits;
    case CmType::kRep:
      return m.qpn.value() <= Psn::kMask && m.target_ack_delay <= kMax5Bits &&
             m.rnr_retry_count <= kMax3Bits;
    case CmType::kDreq:
      return m.qpn.value() <= Psn::kMask;
    case CmType::kMra:
      return ValidRefersTo(m.refers_to) && m.service_timeout <= kMax5Bits;
    case CmType::kRej:
      return ValidRefersTo(m.refers_to);
    case CmType::kSidrRep:
      return m.qpn.value() <= Psn::kMask && m.sidr_status <= kSidrNoQp;
    case CmType::kRtu:
    case CmType::kDrep:
    case CmType::kSidrReq:
      return true;
  }
  return false;
}

// Writes the 256-byte MAD for an Encodable message.
void EncodeMad(const Path& path, const CmMessage& m, uint8_t* mad) {
  std::memset(mad, 0, kMadLen);
  mad[0] = kMadBaseVersion;
  mad[1] = kMgmtClassCm;
  mad[2] = kCmClassVersion;
  mad[3] = kMadMethodSend;
  Put64(mad + 8, m.transaction_id);
  Put16(mad + 16, static_cast<uint16_t>(m.type));

  uint8_t* d = mad + kMadHeaderLen;
  Put32(d + kLocalCommId, m.local_comm_id);
  switch (m.type) {
    case CmType::kReq:
      Put64(d + req::kServiceId, m.service_id);
      Put64(d + req::kLocalCaGuid, CaGuidForMac(path.src_mac));
      Put32(d + req::kLocalQkey, 0);  // unused by RC
      Put24(d + req::kLocalQpn, m.qpn.value());
      d[req::kResponderResources] = m.responder_resources;
      d[req::kInitiatorDepth] = m.initiator_depth;
      d[req::kRemoteTimeoutTransport] =
          static_cast<uint8_t>(m.remote_cm_response_timeout << 3 |
                               kTransportRc << 1 | (m.flow_control ? 1 : 0));
      Put24(d + req::kStartingPsn, m.start_psn.value());
      d[req::kLocalTimeoutRetry] = static_cast<uint8_t>(
          m.local_cm_response_timeout << 3 | m.retry_count);
      Put16(d + req::kPkey, kDefaultPkey);
      d[req::kMtuRnrRetry] =
          static_cast<uint8_t>(m.path_mtu << 4 | m.rnr_retry_count);
      d[req::kCmRetriesSrqXrc] =
          static_cast<uint8_t>(m.max_cm_retries << 4 | (m.srq ? 8 : 0));
      // RoCE has no LIDs; Linux's CM sends the permissive LID for routed
      // paths, which all RoCEv2 paths are.
      Put16(d + req::kPrimaryLocalLid, kPermissiveLid);
      Put16(d + req::kPrimaryRemoteLid, kPermissiveLid);
      PutIpv4MappedGid(d + req::kPrimaryLocalGid, m.local_ip);
      PutIpv4MappedGid(d + req::kPrimaryRemoteGid, m.remote_ip);
      // No flow label; SL and subnet-local stay 0 (RoCEv2 paths are
      // routed).
      Put32(d + req::kPrimaryFlowLabelRate, m.packet_rate);
      d[req::kPrimaryTrafficClass] = path.dscp_ecn & 0xFC;
      d[req::kPrimaryHopLimit] = path.ttl;
      d[req::kPrimaryAckTimeout] =
          static_cast<uint8_t>(m.local_ack_timeout << 3);
      break;
    case CmType::kMra:
      Put32(d + kRemoteCommId, m.remote_comm_id);
      d[mra::kMessageMraed] =
          static_cast<uint8_t>(static_cast<uint8_t>(m.refers_to) << 6);
      d[mra::kServiceTimeout] = static_cast<uint8_t>(m.service_timeout << 3);
      break;
    case CmType::kRej:
      Put32(d + kRemoteCommId, m.remote_comm_id);
      d[rej::kMessageRejected] =
          static_cast<uint8_t>(static_cast<uint8_t>(m.refers_to) << 6);
      d[rej::kAriLength] = 0;  // no additional reject information
      Put16(d + rej::kReason, m.reject_reason);
      break;
    case CmType::kRep:
      Put32(d + kRemoteCommId, m.remote_comm_id);
      Put32(d + rep::kLocalQkey, 0);
      Put24(d + rep::kLocalQpn, m.qpn.value());
      Put24(d + rep::kStartingPsn, m.start_psn.value());
      d[rep::kResponderResources] = m.responder_resources;
      d[rep::kInitiatorDepth] = m.initiator_depth;
      // Failover accepted 0: the REQ has no alternate path (Linux's CM
      // sends 0 as well).
      d[rep::kAckDelayFailover] = static_cast<uint8_t>(
          m.target_ack_delay << 3 | (m.flow_control ? 1 : 0));
      d[rep::kRnrRetrySrq] = static_cast<uint8_t>(m.rnr_retry_count << 5 |
                                                  (m.srq ? 0x10 : 0));
      Put64(d + rep::kLocalCaGuid, CaGuidForMac(path.src_mac));
      break;
    case CmType::kDreq:
      Put32(d + kRemoteCommId, m.remote_comm_id);
      Put24(d + kDreqRemoteQpn, m.qpn.value());
      break;
    case CmType::kRtu:
    case CmType::kDrep:
      Put32(d + kRemoteCommId, m.remote_comm_id);
      break;
    case CmType::kSidrReq:
      Put16(d + sidr_req::kPkey, kDefaultPkey);
      Put64(d + sidr_req::kServiceId, m.service_id);
      break;
    case CmType::kSidrRep:
      d[sidr_rep::kStatus] = m.sidr_status;
      d[sidr_rep::kAddInfoLength] = 0;
      Put24(d + sidr_rep::kQpn, m.qpn.value());
      Put64(d + sidr_rep::kServiceId, m.service_id);
      Put32(d + sidr_rep::kQkey, m.qkey);
      break;
  }
  std::memcpy(d + PrivateDataOffset(m.type), m.private_data.data(),
              m.private_data_len);
}

// Decodes the MAD of a frame whose transport headers are already checked.
bool ParseMad(std::span<const uint8_t> mad, CmMessage* out) {
  if (mad.size() != kMadLen) return false;
  const uint8_t* h = mad.data();
  if (h[0] != kMadBaseVersion || h[1] != kMgmtClassCm ||
      h[2] != kCmClassVersion || h[3] != kMadMethodSend) {
    return false;
  }
  const uint16_t attribute = Get16(h + 16);
  if (!IsKnownCmType(attribute)) return false;

  CmMessage m;
  m.type = static_cast<CmType>(attribute);
  m.transaction_id = Get64(h + 8);
  const uint8_t* d = h + kMadHeaderLen;
  m.local_comm_id = Get32(d + kLocalCommId);
  switch (m.type) {
    case CmType::kReq: {
      const uint8_t transport = (d[req::kRemoteTimeoutTransport] >> 1) & 3;
      const uint8_t extended_transport = d[req::kCmRetriesSrqXrc] & 7;
      if (transport != kTransportRc || extended_transport != 0) return false;
      m.path_mtu = d[req::kMtuRnrRetry] >> 4;
      if (IbMtuBytes(m.path_mtu) == 0) return false;
      if (!GetIpv4MappedGid(d + req::kPrimaryLocalGid, &m.local_ip) ||
          !GetIpv4MappedGid(d + req::kPrimaryRemoteGid, &m.remote_ip)) {
        return false;
      }
      m.service_id = Get64(d + req::kServiceId);
      m.qpn = Qpn(Get24(d + req::kLocalQpn));
      m.responder_resources = d[req::kResponderResources];
      m.initiator_depth = d[req::kInitiatorDepth];
      m.start_psn = Psn(Get24(d + req::kStartingPsn));
      m.local_ack_timeout = d[req::kPrimaryAckTimeout] >> 3;
      m.remote_cm_response_timeout = d[req::kRemoteTimeoutTransport] >> 3;
      m.local_cm_response_timeout = d[req::kLocalTimeoutRetry] >> 3;
      m.retry_count = d[req::kLocalTimeoutRetry] & kMax3Bits;
      m.rnr_retry_count = d[req::kMtuRnrRetry] & kMax3Bits;
      m.max_cm_retries = d[req::kCmRetriesSrqXrc] >> 4;
      m.packet_rate = d[req::kPrimaryFlowLabelRate + 3] & 0x3F;
      m.flow_control = (d[req::kRemoteTimeoutTransport] & 1) != 0;
      m.srq = (d[req::kCmRetriesSrqXrc] & 8) != 0;
      break;
    }
    case CmType::kMra:
      m.remote_comm_id = Get32(d + kRemoteCommId);
      m.refers_to = static_cast<CmRefersTo>(d[mra::kMessageMraed] >> 6);
      if (!ValidRefersTo(m.refers_to)) return false;
      m.service_timeout = d[mra::kServiceTimeout] >> 3;
      break;
    case CmType::kRej:
      m.remote_comm_id = Get32(d + kRemoteCommId);
      m.refers_to = static_cast<CmRefersTo>(d[rej::kMessageRejected] >> 6);
      if (!ValidRefersTo(m.refers_to)) return false;
      if ((d[rej::kAriLength] >> 1) > kMaxAriLen) return false;
      m.reject_reason = Get16(d + rej::kReason);
      break;
    case CmType::kRep:
      m.remote_comm_id = Get32(d + kRemoteCommId);
      m.qpn = Qpn(Get24(d + rep::kLocalQpn));
      m.start_psn = Psn(Get24(d + rep::kStartingPsn));
      m.responder_resources = d[rep::kResponderResources];
      m.initiator_depth = d[rep::kInitiatorDepth];
      m.target_ack_delay = d[rep::kAckDelayFailover] >> 3;
      m.rnr_retry_count = d[rep::kRnrRetrySrq] >> 5;
      m.flow_control = (d[rep::kAckDelayFailover] & 1) != 0;
      m.srq = (d[rep::kRnrRetrySrq] & 0x10) != 0;
      break;
    case CmType::kDreq:
      m.remote_comm_id = Get32(d + kRemoteCommId);
      m.qpn = Qpn(Get24(d + kDreqRemoteQpn));
      break;
    case CmType::kRtu:
    case CmType::kDrep:
      m.remote_comm_id = Get32(d + kRemoteCommId);
      break;
    case CmType::kSidrReq:
      m.service_id = Get64(d + sidr_req::kServiceId);
      break;
    case CmType::kSidrRep:
      m.sidr_status = d[sidr_rep::kStatus];
      if (m.sidr_status > kSidrNoQp) return false;
      m.qpn = Qpn(Get24(d + sidr_rep::kQpn));
      m.service_id = Get64(d + sidr_rep::kServiceId);
      m.qkey = Get32(d + sidr_rep::kQkey);
      break;
  }
  const size_t capacity = CmPrivateDataCapacity(m.type);
  m.private_data_len = static_cast<uint8_t>(capacity);
  std::memcpy(m.private_data.data(), d + PrivateDataOffset(m.type), capacity);
  *out = m;
  return true;
}

}  // namespace

bool IsKnownCmType(uint16_t attribute_id) {
  return attribute_id >= static_cast<uint16_t>(CmType::kReq) &&
         attribute_id <= static_cast<uint16_t>(CmType::kSidrRep);
}

const char* CmTypeName(CmType type) {
  switch (type) {
    case CmType::kReq:
      return "REQ";
    case CmType::kMra:
      return "MRA";
    case CmType::kRej:
      return "REJ";
    case CmType::kRep:
      return "REP";
    case CmType::kRtu:
      return "RTU";
    case CmType::kDreq:
      return "DREQ";
    case CmType::kDrep:
      return "DREP";
    case CmType::kSidrReq:
      return "SIDR REQ";
    case CmType::kSidrRep:
      return "SIDR REP";
  }
  return "UNKNOWN";
}

size_t CmPrivateDataCapacity(CmType type) {
  if (!IsKnownCmType(static_cast<uint16_t>(type))) return 0;
  return kMadLen - kMadHeaderLen - PrivateDataOffset(type);
}

CmMessage DisconnectReply(const CmMessage& dreq) {
  CmMessage r{};
  r.type = CmType::kDrep;
  r.transaction_id = dreq.transaction_id;
  r.local_comm_id = dreq.remote_comm_id;
  r.remote_comm_id = dreq.local_comm_id;
  return r;
}

bool SetIpCmPrivateData(const IpCmHeader& h, std::span<const uint8_t> consumer,
                        CmMessage* m) {
  if (m->type != CmType::kReq && m->type != CmType::kSidrReq) return false;
  const size_t capacity = CmPrivateDataCapacity(m->type);
  if (consumer.size() > capacity - kIpCmHeaderLen) return false;
  m->private_data.fill(0);
  uint8_t* p = m->private_data.data();
  p[0] = kIpCmMajorVersion << 4 | kIpCmMinorVersion;
  p[1] = kIpCmIpv4 << 4;
  Put16(p + 2, h.src_port);
  Put32(p + 4 + 12, h.src_ip);   // after 12 bytes of zeros
  Put32(p + 20 + 12, h.dst_ip);  // likewise
  if (!consumer.empty()) {
    std::memcpy(p + kIpCmHeaderLen, consumer.data(), consumer.size());
  }
  m->private_data_len = static_cast<uint8_t>(kIpCmHeaderLen + consumer.size());
  return true;
}

bool ParseIpCmHeader(const CmMessage& m, IpCmHeader* h) {
  if ((m.type != CmType::kReq && m.type != CmType::kSidrReq) ||
      m.private_data_len < kIpCmHeaderLen) {
    return false;
  }
  const uint8_t* p = m.private_data.data();
  if (p[0] != (kIpCmMajorVersion << 4 | kIpCmMinorVersion) ||
      (p[1] >> 4) != kIpCmIpv4) {
    return false;
  }
  h->src_port = Get16(p + 2);
  h->src_ip = Get32(p + 4 + 12);
  h->dst_ip = Get32(p + 20 + 12);
  return true;
}

namespace {
constexpr uint8_t kNativeMagic[4] = {'R', 'D', 'P', 'N'};
constexpr uint8_t kNativeVersion = 1;
// Request record: magic, version, length, hash, name bytes.
constexpr size_t kNativeHashAt = 6;
constexpr size_t kNativeNameAt = kNativeHashAt + 8;
static_assert(kNativeNameAt + kNativeNameBytes == 56,
              "the record fills a REQ's consumer data");
constexpr size_t kNativeReplyLen = sizeof(kNativeMagic) + 2;

bool HasNativeMagic(const uint8_t* p) {
  return std::memcmp(p, kNativeMagic, sizeof(kNativeMagic)) == 0 &&
         p[sizeof(kNativeMagic)] == kNativeVersion;
}
}  // namespace

uint64_t NativeServiceHash(std::string_view name) {
  uint64_t h = 0xCBF29CE484222325;  // FNV-1a offset basis
  for (char c : name) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x00000100000001B3;  // FNV prime
  }
  return h;
}

bool NativeService::Names(std::string_view name) const {
  return name.size() == length && NativeServiceHash(name) == hash &&
         name.substr(0, prefix.size()) == prefix;
}

std::string NativeService::Text() const {
  std::string text;
  for (char ch : prefix) text.push_back(ch >= 0x20 && ch < 0x7F ? ch : '?');
  if (prefix.size() < length) text += "...";
  return text;
}

bool SetNativeRequest(std::string_view name, const IpCmHeader& h,
                      CmMessage* req) {
  if (req->type != CmType::kReq || name.empty() ||
      name.size() > kMaxServiceNameLen) {
    return false;
  }
  std::array<uint8_t, kNativeNameAt + kNativeNameBytes> record{};
  std::memcpy(record.data(), kNativeMagic, sizeof(kNativeMagic));
  record[4] = kNativeVersion;
  record[5] = static_cast<uint8_t>(name.size());
  Put64(record.data() + kNativeHashAt, NativeServiceHash(name));
  const size_t n = std::min(name.size(), kNativeNameBytes);
  std::memcpy(record.data() + kNativeNameAt, name.data(), n);
  CmMessage m = *req;
  m.service_id = kNativeServiceId;
  if (!SetIpCmPrivateData(h, std::span(record).first(kNativeNameAt + n), &m)) {
    return false;
  }
  *req = m;
  return true;
}

bool ParseNativeRequest(const CmMessage& m, NativeService* s) {
  IpCmHeader h;
  if (m.type != CmType::kReq || m.service_id != kNativeServiceId ||
      !ParseIpCmHeader(m, &h) ||
      m.private_data_len < kIpCmHeaderLen + kNativeNameAt) {
    return false;
  }
  const uint8_t* p = m.private_data.data() + kIpCmHeaderLen;
  const size_t length = p[5];
  const size_t carried = std::min(length, kNativeNameBytes);
  if (!HasNativeMagic(p) || length == 0 || length > kMaxServiceNameLen ||
      m.private_data_len < kIpCmHeaderLen + kNativeNameAt + carried) {
    return false;
  }
  s->length = static_cast<uint8_t>(length);
  s->hash = Get64(p + kNativeHashAt);
  s->prefix = std::string_view(
      reinterpret_cast<const char*>(p + kNativeNameAt), carried);
  // A whole name must hash to what the record says.
  return carried < length || NativeServiceHash(s->prefix) == s->hash;
}

bool SetNativeReply(uint8_t mtu_code, CmMessage* rep) {
  if (rep->type != CmType::kRep || IbMtuBytes(mtu_code) == 0) return false;
  rep->private_data.fill(0);
  std::memcpy(rep->private_data.data(), kNativeMagic, sizeof(kNativeMagic));
  rep->private_data[4] = kNativeVersion;
  rep->private_data[5] = mtu_code;
  rep->private_data_len = kNativeReplyLen;
  return true;
}

uint8_t NativeReplyMtu(const CmMessage& m) {
  if (m.type != CmType::kRep || m.private_data_len < kNativeReplyLen ||
      !HasNativeMagic(m.private_data.data()) ||
      IbMtuBytes(m.private_data[5]) == 0) {
    return 0;
  }
  return m.private_data[5];
}

size_t EncodeCmFrame(const Path& path, const CmMessage& m,
                     std::span<uint8_t> out) {
  if (out.size() < kCmFrameLen || !Encodable(m)) return 0;
  PacketHeaders h;
  h.path = path;
  h.bth.opcode = Opcode::kUdSendOnly;
  h.bth.dest_qp = kGsiQpn;
  h.deth.qkey = kGsiQkey;
  h.deth.src_qp = kGsiQpn;
  const size_t mad_at = EncodeHeaders(h, kMadLen, out);
  if (mad_at == 0) return 0;
  EncodeMad(path, m, out.data() + mad_at);
  return FinishFrame(out);
}

bool ParseCmFrame(std::span<const uint8_t> frame, CmMessage* out, Path* from) {
  ParsedPacket pkt;
  if (ParseDatagramFrame(frame, &pkt) != ParseError::kOk) return false;
  // MADs travel in UD SEND ONLY, never with immediate data. Full or limited
  // member of the default partition.
  if (pkt.bth.opcode != Opcode::kUdSendOnly || pkt.bth.dest_qp != kGsiQpn ||
      (pkt.bth.pkey & 0x7FFF) != 0x7FFF || pkt.deth.qkey != kGsiQkey ||
      pkt.deth.src_qp != kGsiQpn) {
    return false;
  }
  if (!ParseMad(pkt.payload, out)) return false;
  if (from != nullptr) {
    from->src_mac = pkt.src_mac;
    from->dst_mac = pkt.dst_mac;
    from->src_ip = pkt.src_ip;
    from->dst_ip = pkt.dst_ip;
    from->udp_src_port = pkt.udp_src_port;
    from->dscp_ecn = frame[kEthHeaderLen + 1];
    from->ttl = frame[kEthHeaderLen + 8];
  }
  return true;
}

Path ReplyPath(const Path& from) {
  Path p;
  p.src_mac = from.dst_mac;
  p.dst_mac = from.src_mac;
  p.src_ip = from.dst_ip;
  p.dst_ip = from.src_ip;
  p.udp_src_port = from.udp_src_port;
  p.dscp_ecn = from.dscp_ecn & 0xFC;
  return p;
}

}  // namespace rdmaplane::wire
