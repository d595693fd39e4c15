// A daemon with several engines: where connections go, that each engine
// carries their traffic, that a client's kick reaches the engine it was
// meant for whichever engine drains it, and where engine threads run.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/client.h"
#include "api/shm/layout.h"
#include "control/admin.h"
#include "control/json_reader.h"
#include "tests/testing/counters.h"
#include "tests/testing/hang_limit.h"
#include "tests/testing/test_util.h"

namespace rdmaplane {
namespace {

using control::Json;
using testing::kHangLimit;
using testing::TestDaemon;
using testing::WaitFor;

// One listener and one connecting client joined by `n` connections.
struct Fan {
  Fan(TestDaemon& d, int n) {
    server = d.NewClient();
    client = d.NewClient();
    if (server == nullptr || client == nullptr) return;
    if (!server->Listen("fan").ok()) return;
    for (int i = 0; i < n; ++i) {
      auto c = client->Connect("fan");
      if (!c.ok()) return;
      auto s = server->Accept("fan", kHangLimit);
      if (!s.ok()) return;
      client_conns.push_back(*c);
      server_conns.push_back(*s);
    }
    ok = true;
  }
  std::unique_ptr<Client> server;
  std::unique_ptr<Client> client;
  std::vector<rdp_conn> client_conns;
  std::vector<rdp_conn> server_conns;
  bool ok = false;
};

Json Query(TestDaemon& d, const std::string& topic) {
  auto text = control::QueryDaemon(d.daemon->socket_path(), topic,
                                   /*json=*/true, kHangLimit);
  EXPECT_TRUE(text.ok()) << text.status();
  return control::ParseOrDie(text.ok() ? *text : "null");
}

// Engine of each connection id (both of its ends must agree).
std::map<uint64_t, uint64_t> EngineByConnection(TestDaemon& d) {
  std::map<uint64_t, uint64_t> engine;
  const Json list = Query(d, "connections");
  for (const Json& c : list.Array()) {
    const uint64_t id = c["id"].U64();
    auto [it, fresh] = engine.emplace(id, c["engine"].U64());
    EXPECT_TRUE(fresh || it->second == c["engine"].U64())
        << "the two ends of connection " << id << " are on different engines";
  }
  return engine;
}

uint64_t Counter(TestDaemon& d, const std::string& name) {
  return Query(d, "counters")[name].U64();
}

// Waits for `ov` without ever blocking for long: true when it completed
// within `limit` (a bound that only a hang exceeds).
bool AwaitCompletion(Client& c, rdp_conn conn, rdp_overlapped* ov,
                     absl::Duration limit, int* status) {
  const absl::Time deadline = absl::Now() + limit;
  uint32_t bytes = 0;
  while (absl::Now() < deadline) {
    const int r = c.GetOverlappedResult(conn, ov, /*wait=*/false, &bytes);
    if (r != RDP_PENDING) {
      *status = r;
      return true;
    }
    usleep(20);
  }
  return false;
}

TEST(EnginesTest, ConnectionsSpreadEvenlyAndEveryEngineCarriesTraffic) {
  control::DaemonOptions options;
  options.engines = 3;
  TestDaemon d("engines-spread", options);
  ASSERT_TRUE(d.start_status.ok()) << d.start_status;
  EXPECT_EQ(Query(d, "status")["engines"].U64(), 3u);
  constexpr int kConnections = 6;
  Fan fan(d, kConnections);
  ASSERT_TRUE(fan.ok);

  const std::map<uint64_t, uint64_t> engine = EngineByConnection(d);
  ASSERT_EQ(engine.size(), static_cast<size_t>(kConnections));
  std::map<uint64_t, int> per_engine;
  for (const auto& [id, e] : engine) ++per_engine[e];
  EXPECT_EQ(per_engine, (std::map<uint64_t, int>{{0, 2}, {1, 2}, {2, 2}}));

  // Every connection moves 256 KiB each way, every byte checked.
  constexpr uint32_t n = 256 << 10;
  for (int i = 0; i < kConnections; ++i) {
    SCOPED_TRACE(i);
    auto* target = static_cast<uint8_t*>(fan.server->Alloc(n));
    auto* source = static_cast<uint8_t*>(fan.client->Alloc(n));
    auto* back = static_cast<uint8_t*>(fan.client->Alloc(n));
    ASSERT_TRUE(target && source && back);
    for (uint32_t b = 0; b < n; ++b) {
      source[b] = static_cast<uint8_t>(b * 13 + i);
    }
    std::memset(target, 0, n);
    std::memset(back, 0, n);
    alignas(8) uint8_t desc[RDP_DESCRIPTOR_BYTES];
    uint32_t desc_len = sizeof(desc);
    ASSERT_EQ(
        fan.server->RegisterRdmaMemory(fan.server_conns[i], target, n,
                                       RDP_MEM_READWRITE, desc, &desc_len),
        RDP_OK);
    auto src_key = fan.client->RegisterMemory(source, n, RDP_MEM_READ);
    auto back_key = fan.client->RegisterMemory(back, n, RDP_MEM_WRITE);
    ASSERT_TRUE(src_key.ok() && back_key.ok());
    const rdp_conn conn = fan.client_conns[i];
    rdp_sge sge{source, n, *src_key};
    rdp_overlapped ov{};
    ASSERT_EQ(fan.client->Write(conn, &sge, 1, desc, desc_len, 0, 0, &ov),
              RDP_PENDING);
    int status = 1;
    ASSERT_TRUE(
        AwaitCompletion(*fan.client, conn, &ov, kHangLimit, &status));
    ASSERT_EQ(status, RDP_OK);
    EXPECT_EQ(std::memcmp(source, target, n), 0);
    rdp_sge rsge{back, n, *back_key};
    rdp_overlapped rov{};
    const auto* token = reinterpret_cast<const shm::RdmaDescriptor*>(desc);
    ASSERT_EQ(fan.client->Read(conn, &rsge, 1, token->address, desc, desc_len,
                               0, &rov),
              RDP_PENDING);
    ASSERT_TRUE(
        AwaitCompletion(*fan.client, conn, &rov, kHangLimit, &status));
    ASSERT_EQ(status, RDP_OK);
    EXPECT_EQ(std::memcmp(source, back, n), 0);
  }
  // The counts are kept by the engine serving each connection: every
  // connection's client side completed its WRITE and READ there, so each
  // engine carried four requests (its two connections').
  const Json connections = Query(d, "connections");
  std::map<uint64_t, uint64_t> completed_per_engine;
  for (const Json& c : connections.Array()) {
    EXPECT_EQ(c["posted"].U64(), c["completed"].U64());
    completed_per_engine[c["engine"].U64()] += c["completed"].U64();
  }
  EXPECT_EQ(completed_per_engine,
            (std::map<uint64_t, uint64_t>{{0, 4}, {1, 4}, {2, 4}}));
  // Each engine's own counters say the same, with the bytes of its four
  // requests and the cycles it spent on them.
  const Json counters = Query(d, "counters");
  EXPECT_GT(counters["tsc_hz"].U64(), 0u);
  for (int e = 0; e < 3; ++e) {
    const std::string prefix = "engine" + std::to_string(e) + "_";
    SCOPED_TRACE(prefix);
    EXPECT_EQ(counters[prefix + "requests"].U64(), 4u);
    EXPECT_EQ(counters[prefix + "request_bytes"].U64(), 4u * n);
    EXPECT_GT(counters[prefix + "busy_cycles"].U64(), 0u);
    EXPECT_GT(counters[prefix + "loops"].U64(), 0u);
  }
  EXPECT_FALSE(counters.Has("engine3_requests")) << "only three engines";
}

// A session with connections on two engines has one doorbell socket, which
// both engines watch while they sleep. When the client rings it for the
// engine serving one connection, the other engine may drain it first; it
// must pass the kick on. Idle engines here sleep for up to a minute unless
// woken, so a lost kick shows as a request that never completes.
TEST(EnginesTest, AKickDrainedByAnotherEngineStillWakesTheRightOne) {
  control::DaemonOptions options;
  options.engines = 2;
  options.engine_max_sleep_ns = 60'000'000'000;
  TestDaemon d("engines-kick", options);
  ASSERT_TRUE(d.start_status.ok()) << d.start_status;
  Fan fan(d, 2);
  ASSERT_TRUE(fan.ok);
  const std::map<uint64_t, uint64_t> engine = EngineByConnection(d);
  ASSERT_EQ(engine.size(), 2u);
  std::set<uint64_t> engines_used;
  for (const auto& [id, e] : engine) engines_used.insert(e);
  ASSERT_EQ(engines_used.size(), 2u) << "one connection on each engine";

  constexpr uint32_t n = 64;
  auto* target = static_cast<uint8_t*>(fan.server->Alloc(2 * n));
  auto* source = static_cast<uint8_t*>(fan.client->Alloc(n));
  ASSERT_TRUE(target && source);
  alignas(8) uint8_t desc[2][RDP_DESCRIPTOR_BYTES];
  uint32_t desc_len[2] = {sizeof(desc[0]), sizeof(desc[1])};
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(fan.server->RegisterRdmaMemory(
                  fan.server_conns[i], target + i * n, n, RDP_MEM_READWRITE,
                  desc[i], &desc_len[i]),
              RDP_OK);
  }
  auto key = fan.client->RegisterMemory(source, n, RDP_MEM_READ);
  ASSERT_TRUE(key.ok());

  constexpr int kRounds = 200;
  for (int round = 0; round < kRounds; ++round) {
    // Both engines go to sleep after 0.5 ms without work: the request goes
    // to a sleeping engine.
    ASSERT_TRUE(WaitFor([&] { return Counter(d, "engines_asleep") == 2; }))
        << "round " << round << ": the engines never went to sleep";
    const int i = round % 2;
    std::memset(source, round & 0xff, n);
    rdp_sge sge{source, n, *key};
    rdp_overlapped ov{};
    ASSERT_EQ(fan.client->Write(fan.client_conns[i], &sge, 1, desc[i],
                                desc_len[i], 0, 0, &ov),
              RDP_PENDING);
    int status = 1;
    ASSERT_TRUE(AwaitCompletion(*fan.client, fan.client_conns[i], &ov,
                                kHangLimit, &status))
        << "round " << round << ": the engine serving connection " << i
        << " never woke up";
    ASSERT_EQ(status, RDP_OK);
    ASSERT_EQ(std::memcmp(source, target + i * n, n), 0) << round;
  }
  // Kicks were passed on to the sleeping engines.
  EXPECT_GT(Counter(d, "engine_kicks_passed_on"), 0u);
}

// Threads of this process named `name` (/proc/self/task/*/comm), with the
// CPUs each may run on (Cpus_allowed_list).
std::vector<std::string> CpusOfThreads(const std::string& name) {
  std::vector<std::string> cpus;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return cpus;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const std::string task = std::string("/proc/self/task/") + e->d_name;
    std::string comm;
    std::getline(std::ifstream(task + "/comm"), comm);
    if (comm != name) continue;
    std::ifstream status(task + "/status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("Cpus_allowed_list:", 0) == 0) {
        cpus.push_back(line.substr(line.find_first_not_of(" \t", 18)));
      }
    }
  }
  closedir(dir);
  return cpus;
}

// CpusOfThreads, once a thread of that name exists; empty if none appeared
// within kHangLimit, which only turns a hang into a failure.
std::vector<std::string> AwaitThreadCpus(const std::string& name) {
  std::vector<std::string> cpus;
  WaitFor([&] {
    cpus = CpusOfThreads(name);
    return !cpus.empty();
  });
  return cpus;
}

// Waits until no engine thread of an earlier daemon is left in
// /proc/self/task. pthread_join returns once the thread has cleared its tid,
// and the task stays listed a little longer, with its comm and affinity:
// read then, it would count as one of the next daemon's engines.
bool AwaitNoEngineThreads() {
  return WaitFor([] {
    return CpusOfThreads("rdp-engine-0").empty() &&
           CpusOfThreads("rdp-engine-1").empty();
  });
}

std::string ProcessCpus() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("Cpus_allowed_list:", 0) == 0) {
      return line.substr(line.find_first_not_of(" \t", 18));
    }
  }
  return "";
}

TEST(EnginesTest, PinnedEnginesRunOnTheirCpusAndOthersWhereTheProcessMay) {
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE && cpus.size() < 2; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
  }
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs";
  ASSERT_TRUE(AwaitNoEngineThreads());
  {
    control::DaemonOptions options;
    options.engines = 2;
    options.engine_cpus = {cpus[1], cpus[0]};
    TestDaemon d("engines-pinned", options);
    ASSERT_TRUE(d.start_status.ok()) << d.start_status;
    EXPECT_EQ(AwaitThreadCpus("rdp-engine-0"),
              std::vector<std::string>{std::to_string(cpus[1])});
    EXPECT_EQ(AwaitThreadCpus("rdp-engine-1"),
              std::vector<std::string>{std::to_string(cpus[0])});
  }
  ASSERT_TRUE(AwaitNoEngineThreads());
  control::DaemonOptions options;
  options.engines = 2;
  TestDaemon d("engines-free", options);
  ASSERT_TRUE(d.start_status.ok()) << d.start_status;
  EXPECT_EQ(AwaitThreadCpus("rdp-engine-0"),
            std::vector<std::string>{ProcessCpus()});
  EXPECT_EQ(AwaitThreadCpus("rdp-engine-1"),
            std::vector<std::string>{ProcessCpus()});
}

}  // namespace
}  // namespace rdmaplane
