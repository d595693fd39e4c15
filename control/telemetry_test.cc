#include "control/telemetry.h"

#include <gtest/gtest.h>
#include <rte_eal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "control/json_reader.h"
#include "control/status_sample.h"
#include "dataplane/port/dpdk_env.h"

namespace rdmaplane::control {
namespace {

using Clock = std::chrono::steady_clock;

std::string& SocketPath() {
  static std::string path;
  return path;
}

// The EAL for the whole test binary: up before the first test, and shut
// down (its runtime folder removed) after the last.
class DpdkEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    port::EalOptions options;
    options.file_prefix = "rdp-telemetry-" + std::to_string(getpid());
    options.memory_mb = 64;
    const absl::Status s = port::InitDpdk(options);
    ASSERT_TRUE(s.ok()) << s;
    runtime_dir_ = rte_eal_get_runtime_dir();
    SocketPath() = runtime_dir_ + "/dpdk_telemetry.v2";
  }
  void TearDown() override {
    UnregisterTelemetrySource();
    port::ShutdownDpdk();
    std::error_code ec;
    EXPECT_FALSE(std::filesystem::exists(runtime_dir_, ec))
        << runtime_dir_ << " left behind";
  }

 private:
  std::string runtime_dir_;
};

const ::testing::Environment* const kDpdk =
    ::testing::AddGlobalTestEnvironment(new DpdkEnvironment);

// One telemetry exchange: the hello, then `command`'s reply.
struct Exchange {
  std::string hello;
  std::string reply;
};

Exchange Ask(const std::string& command) {
  Exchange out;
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  EXPECT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s",
                SocketPath().c_str());
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
      << SocketPath() << ": " << std::strerror(errno);
  std::string buf(64 << 10, '\0');
  ssize_t n = read(fd, buf.data(), buf.size());
  EXPECT_GT(n, 0);
  out.hello.assign(buf.data(), n > 0 ? n : 0);
  EXPECT_EQ(write(fd, command.data(), command.size()),
            static_cast<ssize_t>(command.size()));
  n = read(fd, buf.data(), buf.size());
  EXPECT_GT(n, 0);
  out.reply.assign(buf.data(), n > 0 ? n : 0);
  close(fd);
  return out;
}

// The value of `command` in its reply, {"<command>": value}.
Json Query(const std::string& command) {
  const Json reply = ParseOrDie(Ask(command).reply);
  EXPECT_EQ(reply.Object().size(), 1u);
  return reply[command];
}

std::string PercentDecode(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size()) {
      out.push_back(
          static_cast<char>(std::stoi(text.substr(i + 1, 2), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

class TelemetryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RegisterTelemetry([] { return SampleStatus(); });
  }
  void TearDown() override { UnregisterTelemetrySource(); }
};

TEST_F(TelemetryTest, HelloThenCounters) {
  const Exchange e = Ask("/rdmaplane/counters");
  const Json hello = ParseOrDie(e.hello);
  EXPECT_EQ(hello["version"].Str().substr(0, 5), "DPDK ");
  EXPECT_EQ(hello["pid"].U64(), static_cast<uint64_t>(getpid()));
  EXPECT_EQ(hello["max_output_len"].U64(), 16384u);
  EXPECT_NE(e.reply.find("\"port_rx_frames\":12345"), std::string::npos)
      << e.reply;
  const Json counters = ParseOrDie(e.reply)["/rdmaplane/counters"];
  ASSERT_EQ(counters.Object().size(), 3u);
  EXPECT_EQ(counters.Object()[0].first, "port_rx_frames");
  EXPECT_EQ(counters["port_rx_frames"].U64(), 12345u);
  EXPECT_EQ(counters["engine_sleeps"].U64(), 0u);
  EXPECT_EQ(counters["sessions_reclaimed"].U64(), 18446744073709551615ull);
}

TEST_F(TelemetryTest, Status) {
  const DaemonStatus sample = SampleStatus();
  const Json s = Query("/rdmaplane/status");
  EXPECT_EQ(s["version"].Str(), "0.3.1 \"dev\"");
  EXPECT_EQ(s["pid"].U64(), 4242u);
  EXPECT_EQ(s["uptime_s"].U64(), 93784u);
  EXPECT_EQ(s["socket"].Str(), sample.socket);
  EXPECT_EQ(s["data_port"].Str(), "net_ring0");
  EXPECT_EQ(s["ip"].Str(), "10.0.0.1");
  EXPECT_EQ(s["mac"].Str(), "02:00:00:00:00:01");
  EXPECT_EQ(s["mtu"].U64(), 4096u);
  EXPECT_EQ(s["poll_mode"].Str(), "adaptive");
  EXPECT_EQ(s["engines"].U64(), 2u);
  EXPECT_EQ(s["clients"].U64(), 2u);
  EXPECT_EQ(s["connections"].U64(), sample.connections.size());
  EXPECT_EQ(s["registrations"].U64(), 2u);
  EXPECT_EQ(s["view"].Str(), "all");
  EXPECT_EQ(s["hidden_clients"].U64(), 0u);
  EXPECT_EQ(s["hidden_connections"].U64(), 0u);
  EXPECT_EQ(s["hidden_registrations"].U64(), 0u);
  // The same fields as rdmaplanectl's JSON status, in the same order.
  std::vector<std::string> ours, theirs;
  for (const auto& [k, v] : s.Object()) ours.push_back(k);
  const Json ctl = ParseOrDie(RenderJson(sample, "status"));
  for (const auto& [k, v] : ctl.Object()) theirs.push_back(k);
  EXPECT_EQ(ours, theirs);
}

TEST_F(TelemetryTest, ConnectionsByIdWithOddServiceNames) {
  const DaemonStatus sample = SampleStatus();
  const Json list = Query("/rdmaplane/connections");
  ASSERT_EQ(list.Object().size(), sample.connections.size());
  for (const ConnectionStatus& c : sample.connections) {
    const Json& o = list[std::to_string(c.id)];
    EXPECT_EQ(PercentDecode(o["service"].Str()), c.service) << c.id;
    for (char ch : o["service"].Str()) {
      EXPECT_TRUE(ch >= 0x20 && ch < 0x7F) << c.id;
    }
    EXPECT_EQ(o["id"].U64(), c.id);
    EXPECT_EQ(o["session_id"].U64(), c.session_id);
    EXPECT_EQ(o["slot"].U64(), c.slot);
    EXPECT_EQ(o["peer"].Str(), c.peer);
    EXPECT_EQ(o["state"].Str(), "up");
    EXPECT_EQ(o["engine"].U64(), c.engine);
    EXPECT_EQ(o["local_qpn"].U64(), c.local_qpn);
    EXPECT_EQ(o["remote_qpn"].U64(), c.remote_qpn);
    EXPECT_EQ(o["posted"].U64(), c.posted);
    EXPECT_EQ(o["completed"].U64(), c.completed);
    EXPECT_EQ(o["tx_packets"].U64(), c.tx_packets);
    EXPECT_EQ(o["rx_packets"].U64(), 7u);
    EXPECT_EQ(o["retransmitted_packets"].U64(), 3u);
    EXPECT_EQ(o["timeouts"].U64(), 1u);
    EXPECT_EQ(o["naks_sent"].U64(), 2u);
    EXPECT_EQ(o["naks_received"].U64(), 4u);
    EXPECT_EQ(o["access_errors"].U64(), 5u);
    EXPECT_EQ(o["invalid_requests"].U64(), 6u);
    EXPECT_EQ(o["pkey_violations"].U64(), 8u);
    EXPECT_EQ(o["bad_responses"].U64(), 9u);
    EXPECT_EQ(o.Object().size(), 21u);
  }
}

TEST_F(TelemetryTest, ClientsAndRegistrations) {
  const Json clients = Query("/rdmaplane/clients");
  ASSERT_EQ(clients.Object().size(), 2u);
  const Json& c1 = clients["1"];
  EXPECT_EQ(c1["session_id"].U64(), 1u);
  EXPECT_EQ(c1["pid"].U64(), 100u);
  EXPECT_EQ(c1["uid"].U64(), 1000u);
  EXPECT_EQ(c1["connections"].U64(), 2u);
  EXPECT_EQ(c1["registrations"].U64(), 3u);
  EXPECT_EQ(c1["arenas"].U64(), 1u);
  EXPECT_EQ(c1["arena_bytes"].U64(), 64ull << 20);
  EXPECT_EQ(clients["2"]["arenas"].U64(), 4u);

  const Json regs = Query("/rdmaplane/registrations");
  ASSERT_EQ(regs.Object().size(), 2u);
  const Json& r = regs[std::to_string(0x5678cd)];
  EXPECT_EQ(r["key"].U64(), 0x5678cdu);
  EXPECT_EQ(r["session_id"].U64(), 1u);
  EXPECT_EQ(r["connection"].U64(), 2u);
  EXPECT_EQ(r["address"].U64(), 0x7f0000002000u);
  EXPECT_EQ(r["length"].U64(), 1u << 20);
  EXPECT_EQ(r["access"].U64(), 3u);
  EXPECT_EQ(r["refs"].U64(), 2u);
}

TEST_F(TelemetryTest, LongListsAreCutToOneReplyAndSaySo) {
  DaemonStatus big;
  for (uint32_t i = 1; i <= 400; ++i) {
    ConnectionStatus c;
    c.id = i;
    c.service = std::string(150, 's');  // cut to 127 bytes
    c.peer = "10.0.0.2";
    c.state = "up";
    c.tx_packets = 18446744073709551615ull;
    big.connections.push_back(c);
  }
  RegisterTelemetry([big] { return big; });
  const std::string reply = Ask("/rdmaplane/connections").reply;
  EXPECT_LE(reply.size(), 16384u);
  const Json list = ParseOrDie(reply)["/rdmaplane/connections"];
  const uint64_t shown = list.Object().size() - 1;
  ASSERT_TRUE(list.Has("omitted"));
  EXPECT_EQ(shown + list["omitted"].U64(), 400u);
  // About 540 bytes each: the budget is used, not wasted.
  EXPECT_GE(shown, 25u);
  EXPECT_GE(reply.size(), 14000u);
  for (const auto& [key, entry] : list.Object()) {
    if (key == "omitted") continue;
    EXPECT_EQ(entry.Object().size(), 21u) << key;
    EXPECT_EQ(entry["service"].Str(), std::string(127, 's'));
    EXPECT_EQ(entry["tx_packets"].U64(), 18446744073709551615ull);
  }
}

TEST_F(TelemetryTest, EveryLongListFitsOneReply) {
  DaemonStatus big;
  for (uint32_t i = 1; i <= 600; ++i) {
    big.clients.push_back({i, -1, 4000000000u, 16, 4096, 64, ~0ull});
    big.registrations.push_back({0xffffff00u + (i & 0xff) + (i << 8),
                                 4000000000u, 4000000000u, ~0ull, ~0ull, 3,
                                 4000000000u});
  }
  RegisterTelemetry([big] { return big; });
  for (const char* command :
       {"/rdmaplane/clients", "/rdmaplane/registrations"}) {
    const std::string reply = Ask(command).reply;
    EXPECT_LE(reply.size(), 16384u) << command;
    EXPECT_GE(reply.size(), 14000u) << command;
    const Json list = ParseOrDie(reply)[command];
    ASSERT_TRUE(list.Has("omitted")) << command;
    EXPECT_EQ(list.Object().size() - 1 + list["omitted"].U64(), 600u);
  }
}

// Telemetry holds at most 256 entries in a dict: 255 and "omitted".
TEST_F(TelemetryTest, ManyCountersAreCutAtTheEntryLimit) {
  DaemonStatus s;
  for (int i = 0; i < 300; ++i)
    s.counters.push_back({"c" + std::to_string(i), 1});
  RegisterTelemetry([s] { return s; });
  const Json counters = Query("/rdmaplane/counters");
  ASSERT_EQ(counters.Object().size(), 256u);
  EXPECT_EQ(counters["c254"].U64(), 1u);
  EXPECT_EQ(counters["omitted"].U64(), 45u);
}

TEST_F(TelemetryTest, CounterNamesAreMadeValid) {
  DaemonStatus s;
  s.counters = {{"rx frames-total", 5}, {"ok_name/x", 6}, {"", 7}};
  RegisterTelemetry([s] { return s; });
  const Json counters = Query("/rdmaplane/counters");
  ASSERT_EQ(counters.Object().size(), 3u);
  EXPECT_EQ(counters["rx_frames_total"].U64(), 5u);
  EXPECT_EQ(counters["ok_name/x"].U64(), 6u);
  EXPECT_EQ(counters["_"].U64(), 7u);
}

TEST_F(TelemetryTest, SourceIsReplacedAndForgotten) {
  DaemonStatus a, b;
  a.counters = {{"value", 1}};
  b.counters = {{"value", 2}};
  RegisterTelemetry([a] { return a; });
  EXPECT_EQ(Query("/rdmaplane/counters")["value"].U64(), 1u);
  RegisterTelemetry([b] { return b; });
  EXPECT_EQ(Query("/rdmaplane/counters")["value"].U64(), 2u);
  UnregisterTelemetrySource();
  for (std::string_view topic : kStatusTopics) {
    const std::string command = "/rdmaplane/" + std::string(topic);
    EXPECT_TRUE(Query(command).IsNull()) << command;
  }
  RegisterTelemetry([a] { return a; });
  EXPECT_EQ(Query("/rdmaplane/counters")["value"].U64(), 1u);
}

TEST_F(TelemetryTest, UnregisterWaitsForARunningCallback) {
  std::atomic<bool> entered{false};
  std::atomic<bool> finished{false};
  RegisterTelemetry([&] {
    entered = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    finished = true;
    return SampleStatus();
  });
  std::thread asker([] { Query("/rdmaplane/status"); });
  const auto give_up = Clock::now() + std::chrono::seconds(10);
  while (!entered && Clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(entered);
  UnregisterTelemetrySource();
  EXPECT_TRUE(finished);  // not a moment before the callback was done
  asker.join();
}

TEST(TelemetryStringTest, PrintableAsciiOnly) {
  EXPECT_EQ(TelemetryString("plain text/1.0 \"q\" \\"),
            "plain text/1.0 \"q\" \\");
  EXPECT_EQ(TelemetryString("100%"), "100%25");
  EXPECT_EQ(TelemetryString(std::string("a\0b\n\x7f", 5)), "a%00b%0A%7F");
  EXPECT_EQ(TelemetryString("caf\xc3\xa9"), "caf%C3%A9");
  EXPECT_EQ(TelemetryString(std::string(200, 'x')), std::string(127, 'x'));
  // 125 bytes, then a byte whose %XX would not fit: dropped whole.
  EXPECT_EQ(TelemetryString(std::string(125, 'x') + "\xff"),
            std::string(125, 'x'));
}

TEST(TelemetryStringTest, Names) {
  EXPECT_EQ(TelemetryName("port_rx_frames"), "port_rx_frames");
  EXPECT_EQ(TelemetryName("a b-c.d/e"), "a_b_c_d/e");
  EXPECT_EQ(TelemetryName(""), "_");
  EXPECT_EQ(TelemetryName(std::string(200, 'n')).size(), 127u);
}

}  // namespace
}  // namespace rdmaplane::control
