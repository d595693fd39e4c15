// Access checks shared by the responder (rkeys) and the send path (lkeys).
// Data path: no allocation, no locks.
#include "dataplane/mr/registration_table.h"

namespace rdmaplane::mr {
namespace {

// Permission and range, common to both key kinds. The range test never
// computes address + length: with offset = address - r.address, the access
// fits iff offset <= r.length and length <= r.length - offset.
AccessResult CheckBitsAndRange(const Registration& r, uint8_t access,
                               uint64_t address, uint64_t length) {
  if (access == 0 || (r.access & access) != access) {
    return {AccessCheck::kNoPermission, nullptr};
  }
  if (address < r.address) return {AccessCheck::kOutOfRange, nullptr};
  const uint64_t offset = address - r.address;
  if (offset > r.length || length > r.length - offset) {
    return {AccessCheck::kOutOfRange, nullptr};
  }
  return {AccessCheck::kOk, r.host + offset, r.memory_owner};
}

}  // namespace

AccessResult CheckAccess(const Registration& r, uint32_t connection,
                         uint8_t access, uint64_t address, uint64_t length,
                         uint32_t queue_pair) {
  if (r.connection == kAnyConnection || r.connection != connection ||
      (r.kind == KeyKind::kWindowType2 && r.queue_pair != queue_pair)) {
    return {AccessCheck::kWrongConnection, nullptr};
  }
  return CheckBitsAndRange(r, access, address, length);
}

AccessResult CheckLocalAccess(const Registration& r, uint32_t owner,
                              uint8_t access, uint64_t address,
                              uint64_t length, uint32_t scope) {
  // A window's key is an rkey only, never an lkey; a key of a protection
  // domain serves that domain's queue pairs only.
  if (r.owner != owner || r.kind != KeyKind::kMemory ||
      (scope != kAnyConnection && r.connection != kAnyConnection &&
       r.connection != scope)) {
    return {AccessCheck::kWrongConnection, nullptr};
  }
  return CheckBitsAndRange(r, access, address, length);
}

AccessResult ResolveRemote(const RegistrationTable& table, uint32_t rkey,
                           uint32_t connection, uint8_t access,
                           uint64_t address, uint64_t length,
                           uint32_t queue_pair) {
  const Registration* r = table.Lookup(rkey);
  if (r == nullptr) return {AccessCheck::kUnknownKey, nullptr};
  return CheckAccess(*r, connection, access, address, length, queue_pair);
}

AccessResult ResolveLocal(const RegistrationTable& table, uint32_t lkey,
                          uint32_t owner, uint8_t access, uint64_t address,
                          uint64_t length, uint32_t scope) {
  const Registration* r = table.Lookup(lkey);
  if (r == nullptr) return {AccessCheck::kUnknownKey, nullptr};
  return CheckLocalAccess(*r, owner, access, address, length, scope);
}

}  // namespace rdmaplane::mr
