// Fuzz target for the control requests a client puts on its control ring,
// as the daemon serves the memory ones: registrations (local keys and RDMA
// descriptors), deregistrations and protection domains, against a session
// with two arenas in plain memory (as memory_service_test.cc sets one up).
// The daemon's dispatch is not needed: each request goes to the
// MemoryService call its op names, with the scope the connection field
// picks.
//
// Checked: every answer carries a status the ABI knows, a descriptor no
// longer than its field and a terminated message; a successful RDMA
// registration's descriptor names the request's range; and when the
// session ends (DropOwner) nothing it registered stays, no protection
// domain is left and its user's registration charge is back to zero.
//
// Input: ControlRequest images (api/shm/layout.h), 416 bytes each; a
// shorter tail is ignored.
//
// Runs under libFuzzer (--config=fuzz) or, as control_message_fuzzer under
// gcc, replaying control/corpus/control_message (dataplane/wire/fuzz.bzl).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>
#include <tuple>
#include <vector>

#include "api/shm/layout.h"
#include "control/memory_service.h"
#include "control/sessions.h"
#include "control/user_accounts.h"
#include "dataplane/mr/registration_table.h"
#include "dataplane/wire/fuzz_driver.h"

namespace rdmaplane::control {
namespace {

constexpr uint64_t kBase = 0x7f0000000000ull;
constexpr uint64_t kBytes = 1u << 16;
constexpr uint64_t kSecondBase = kBase + (1u << 20);
constexpr uid_t kUid = 1000;

void CheckAnswer(const shm::ControlRequest& r,
                 const shm::ControlResponse& a) {
  FUZZ_CHECK(a.status >= shm::kStatusLimit && a.status <= shm::kStatusPending);
  FUZZ_CHECK(a.descriptor_length <= shm::kDescriptorBytes);
  FUZZ_CHECK(std::memchr(a.message, '\0', sizeof(a.message)) != nullptr);
  if (r.op == shm::kOpRegisterRdma && a.status == shm::kStatusOk) {
    FUZZ_CHECK(a.descriptor_length == sizeof(shm::RdmaDescriptor));
    shm::RdmaDescriptor d;
    std::memcpy(&d, a.descriptor, sizeof(d));
    FUZZ_CHECK(d.magic == shm::kDescriptorMagic);
    FUZZ_CHECK(d.address == r.address && d.length == r.length);
  }
}

void Run(std::span<const uint8_t> input) {
  mr::RegistrationTable table(256, 1);
  UserLimits limits;
  limits.registrations = 24;
  UserAccounts accounts(limits);
  MemoryService memory(&table, /*max_per_session=*/16, &accounts);
  std::vector<uint8_t> first(kBytes);
  std::vector<uint8_t> second(kBytes);
  Session session;
  session.id = 7;
  session.uid = kUid;
  for (auto [id, base, host] : {std::tuple{1u, kBase, first.data()},
                                std::tuple{2u, kSecondBase, second.data()}}) {
    Arena a;
    a.client_address = base;
    a.bytes = kBytes;
    a.host = host;
    session.arenas[id] = std::move(a);
  }

  for (size_t at = 0; input.size() - at >= sizeof(shm::ControlRequest);
       at += sizeof(shm::ControlRequest)) {
    shm::ControlRequest r;
    std::memcpy(&r, input.data() + at, sizeof(r));
    // Connection slots 0..3 hold a connection (scopes 100..103); the
    // others none.
    const std::optional<uint32_t> scope =
        r.connection < 4 ? std::optional<uint32_t>(100 + r.connection)
                         : std::nullopt;
    shm::ControlResponse a;
    switch (r.op) {
      case shm::kOpRegisterLocal:
        a = memory.RegisterLocal(session, r);
        break;
      case shm::kOpDeregisterLocal:
        a = memory.DeregisterLocal(session, r);
        break;
      case shm::kOpRegisterRdma:
        a = memory.RegisterRdma(session, scope, r);
        break;
      case shm::kOpDeregisterRdma:
        a = memory.DeregisterRdma(session, scope, r);
        break;
      case shm::kOpAllocPd:
        a = memory.AllocPd(session);
        break;
      case shm::kOpDeallocPd:
        a = memory.DeallocPd(session, r);
        break;
      default:
        // A connection ending drops what was registered for it.
        if (scope.has_value() && (r.flags & 1) != 0) memory.DropScope(*scope);
        continue;
    }
    CheckAnswer(r, a);
  }
  memory.DropOwner(session.id);
  FUZZ_CHECK(memory.CountOwner(session.id) == 0);
  FUZZ_CHECK(memory.pd_count() == 0);
  FUZZ_CHECK(accounts.Used(kUid, Resource::kRegistrations) == 0);
}

}  // namespace
}  // namespace rdmaplane::control

namespace rdmaplane::wire {

// For the fuzz_driver's mutation mode: register locally, for RDMA, and
// deregister the RDMA one.
std::vector<std::vector<uint8_t>> FuzzSeedCorpus() {
  shm::ControlRequest local{};
  local.op = shm::kOpRegisterLocal;
  local.address = 0x7f0000000000ull + 4096;
  local.length = 8192;
  local.flags = shm::kAccessReadWrite;
  shm::ControlRequest rdma = local;
  rdma.op = shm::kOpRegisterRdma;
  std::vector<uint8_t> seed(2 * sizeof(shm::ControlRequest));
  std::memcpy(seed.data(), &local, sizeof(local));
  std::memcpy(seed.data() + sizeof(local), &rdma, sizeof(rdma));
  return {seed};
}

}  // namespace rdmaplane::wire

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rdmaplane::control::Run({data, size});
  return 0;
}
