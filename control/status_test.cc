#include "control/status.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "control/json_reader.h"
#include "control/status_sample.h"

namespace rdmaplane::control {
namespace {

TEST(JsonReaderTest, RejectsWhatIsNotJson) {
  for (const char* bad :
       {"", "{", "{\"a\":1,}", "[1,]", "\"a\nb\"", "\"\\x41\"", "01", "{a:1}",
        "\"\xff\"", "\"\\ud800\"", "[1] 2", "\"\xc0\x80\""}) {
    Json j;
    EXPECT_FALSE(JsonReader(bad).Parse(&j)) << bad;
  }
  Json j;
  EXPECT_TRUE(
      JsonReader("{\"a\":[1,{\"b\":\"\\u00e9\\ud83d\\ude00\"}]}").Parse(&j));
  EXPECT_EQ(j["a"].Array()[1]["b"].Str(), "\xc3\xa9\xf0\x9f\x98\x80");
}

// --- The renderings ----------------------------------------------------------

const std::vector<std::string>& OddNames() { return OddServiceNames(); }
DaemonStatus Sample() { return SampleStatus(); }

TEST(StatusTest, ValidTopics) {
  for (std::string_view t : kStatusTopics) EXPECT_TRUE(ValidTopic(t)) << t;
  EXPECT_FALSE(ValidTopic(""));
  EXPECT_FALSE(ValidTopic("Status"));
  EXPECT_FALSE(ValidTopic("status "));
  EXPECT_FALSE(ValidTopic("stats"));
  EXPECT_EQ(RenderJson(Sample(), "nope"), "");
  EXPECT_EQ(RenderText(Sample(), "nope"), "");
}

TEST(StatusTest, JsonStatusHasTheHeaderAndCounts) {
  const DaemonStatus s = Sample();
  const Json j = ParseOrDie(RenderJson(s, "status"));
  EXPECT_EQ(j["version"].Str(), s.version);
  EXPECT_EQ(j["pid"].U64(), 4242u);
  EXPECT_EQ(j["uptime_s"].U64(), 93784u);
  EXPECT_EQ(j["socket"].Str(), s.socket);
  EXPECT_EQ(j["data_port"].Str(), "net_ring0");
  EXPECT_EQ(j["ip"].Str(), "10.0.0.1");
  EXPECT_EQ(j["mac"].Str(), "02:00:00:00:00:01");
  EXPECT_EQ(j["mtu"].U64(), 4096u);
  EXPECT_EQ(j["link"].Str(), "up");
  EXPECT_EQ(j["link_since_s"].U64(), 3723u);
  EXPECT_EQ(j["link_changes"].U64(), 3u);
  EXPECT_EQ(j["poll_mode"].Str(), "adaptive");
  EXPECT_EQ(j["engines"].U64(), 2u);
  EXPECT_EQ(j["clients"].U64(), 2u);
  EXPECT_EQ(j["connections"].U64(), OddNames().size());
  EXPECT_EQ(j["registrations"].U64(), 2u);
  EXPECT_EQ(j["view"].Str(), "all");
  EXPECT_EQ(j["hidden_clients"].U64(), 0u);
  EXPECT_EQ(j["hidden_connections"].U64(), 0u);
  EXPECT_EQ(j["hidden_registrations"].U64(), 0u);
  EXPECT_EQ(j.Object().size(), 20u);
}

// --- What a user who may not see all is shown ---------------------------------

TEST(StatusTest, KeepOnlyOwnKeepsTheRowsOfTheAskersSessions) {
  // Session 1 is uid 1000's and holds every connection and registration;
  // session 2 is root's and holds none.
  DaemonStatus s = Sample();
  KeepOnlyOwn(&s, 1000);
  ASSERT_EQ(s.clients.size(), 1u);
  EXPECT_EQ(s.clients[0].session_id, 1u);
  EXPECT_EQ(s.connections.size(), OddNames().size());
  EXPECT_EQ(s.registrations.size(), 2u);
  EXPECT_EQ(s.hidden_clients, 1u);
  EXPECT_EQ(s.hidden_connections, 0u);
  EXPECT_EQ(s.hidden_registrations, 0u);
  EXPECT_EQ(s.view, "own");

  DaemonStatus root = Sample();
  KeepOnlyOwn(&root, 0);
  ASSERT_EQ(root.clients.size(), 1u);
  EXPECT_EQ(root.clients[0].session_id, 2u);
  EXPECT_TRUE(root.connections.empty());
  EXPECT_TRUE(root.registrations.empty());
  EXPECT_EQ(root.hidden_connections, OddNames().size());
  EXPECT_EQ(root.hidden_registrations, 2u);

  DaemonStatus stranger = Sample();
  KeepOnlyOwn(&stranger, 7);
  EXPECT_TRUE(stranger.clients.empty());
  EXPECT_TRUE(stranger.connections.empty());
  EXPECT_TRUE(stranger.registrations.empty());
  // The counters and the header stay.
  EXPECT_EQ(stranger.counters, Sample().counters);
  EXPECT_EQ(stranger.socket, Sample().socket);
}

TEST(StatusTest, KeepOnlyOwnSplitsMixedSessionsRowByRow) {
  // Connections and registrations of both sessions, interleaved.
  DaemonStatus s = Sample();
  for (size_t i = 0; i < s.connections.size(); ++i) {
    s.connections[i].session_id = i % 2 == 0 ? 1 : 2;
  }
  s.registrations[1].session_id = 2;
  const DaemonStatus all = s;
  DaemonStatus mine = s;
  KeepOnlyOwn(&mine, 0);  // session 2's
  ASSERT_EQ(mine.clients.size(), 1u);
  EXPECT_EQ(mine.clients[0].uid, 0u);
  ASSERT_EQ(mine.connections.size(), all.connections.size() / 2);
  for (const ConnectionStatus& c : mine.connections) {
    EXPECT_EQ(c.session_id, 2u) << c.id;
  }
  // The kept rows are the session's, in their order.
  for (size_t i = 0; i < mine.connections.size(); ++i) {
    EXPECT_EQ(mine.connections[i].id, all.connections[2 * i + 1].id);
  }
  ASSERT_EQ(mine.registrations.size(), 1u);
  EXPECT_EQ(mine.registrations[0].key, all.registrations[1].key);
  EXPECT_EQ(mine.hidden_clients, 1u);
  EXPECT_EQ(mine.hidden_connections,
            all.connections.size() - all.connections.size() / 2);
  EXPECT_EQ(mine.hidden_registrations, 1u);
  // Totals stay the daemon's.
  const Json j = ParseOrDie(RenderJson(mine, "status"));
  EXPECT_EQ(j["connections"].U64(), all.connections.size());
  EXPECT_EQ(j["registrations"].U64(), 2u);
}

TEST(StatusTest, WhatWasLeftOutIsSaidInTextAndJson) {
  DaemonStatus s = Sample();
  KeepOnlyOwn(&s, 7);
  EXPECT_EQ(RenderText(s, "clients"),
            "SESSION  PID  UID  CONNECTIONS  REGISTRATIONS  ARENAS  ARENA_SIZE\n"
            "(2 clients of other users not shown: ask as root or as a member "
            "of the daemon's --admin_gids)\n");
  EXPECT_NE(RenderText(s, "registrations").find("\n(2 registrations of other "
                                                "users not shown: "),
            std::string::npos);
  EXPECT_NE(RenderText(s, "connections")
                .find(std::to_string(OddNames().size()) +
                      " connections of other users not shown: "),
            std::string::npos);
  const std::string status = RenderText(s, "status");
  EXPECT_NE(status.find("\nclients        2 (2 of other users, not shown)\n"),
            std::string::npos)
      << status;
  EXPECT_NE(status.find("\nregistrations  2 (2 of other users, not shown)\n"),
            std::string::npos)
      << status;
  // JSON: the lists are what is shown; "status" has the totals, the view
  // and what was left out.
  EXPECT_EQ(RenderJson(s, "clients"), "[]");
  const Json j = ParseOrDie(RenderJson(s, "status"));
  EXPECT_EQ(j["clients"].U64(), 2u);
  EXPECT_EQ(j["connections"].U64(), OddNames().size());
  EXPECT_EQ(j["view"].Str(), "own");
  EXPECT_EQ(j["hidden_clients"].U64(), 2u);
  EXPECT_EQ(j["hidden_connections"].U64(), OddNames().size());
  EXPECT_EQ(j["hidden_registrations"].U64(), 2u);
  // Nothing is said when nothing was left out.
  EXPECT_EQ(RenderText(Sample(), "clients").find("not shown"),
            std::string::npos);
}

TEST(StatusTest, JsonNegativePid) {
  DaemonStatus s;
  s.pid = -1;
  const Json j = ParseOrDie(RenderJson(s, "status"));
  EXPECT_EQ(std::get<std::string>(j["pid"].value), "-1");
}

TEST(StatusTest, JsonConnectionsKeepOddServiceNames) {
  const DaemonStatus s = Sample();
  const std::string text = RenderJson(s, "connections");
  const Json j = ParseOrDie(text);
  const JsonArray& list = j.Array();
  ASSERT_EQ(list.size(), s.connections.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const ConnectionStatus& c = s.connections[i];
    const Json& o = list[i];
    EXPECT_EQ(o["service"].Str(), c.service) << i;
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
    EXPECT_EQ(o["tx_packets"].U64(), 18446744073709551615ull);
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

TEST(StatusTest, JsonReplacesInvalidUtf8) {
  DaemonStatus s;
  ConnectionStatus c;
  c.service =
      "a\xff"
      "b\xc3"
      "c\xed\xa0\x80"
      "d\xe0\x80\x80";         // stray, cut,
  s.connections.push_back(c);  // surrogate, overlong
  const Json j = ParseOrDie(RenderJson(s, "connections"));
  const std::string fffd = "\xef\xbf\xbd";
  EXPECT_EQ(j.Array()[0]["service"].Str(), "a" + fffd + "b" + fffd + "c" +
                                               fffd + fffd + fffd + "d" + fffd +
                                               fffd + fffd);
}

TEST(StatusTest, JsonClientsRegistrationsCounters) {
  const DaemonStatus s = Sample();
  const Json clients = ParseOrDie(RenderJson(s, "clients"));
  ASSERT_EQ(clients.Array().size(), 2u);
  const Json& c0 = clients.Array()[0];
  EXPECT_EQ(c0["session_id"].U64(), 1u);
  EXPECT_EQ(c0["pid"].U64(), 100u);
  EXPECT_EQ(c0["uid"].U64(), 1000u);
  EXPECT_EQ(c0["connections"].U64(), 2u);
  EXPECT_EQ(c0["registrations"].U64(), 3u);
  EXPECT_EQ(c0["arenas"].U64(), 1u);
  EXPECT_EQ(c0["arena_bytes"].U64(), 64ull << 20);

  const Json regs = ParseOrDie(RenderJson(s, "registrations"));
  ASSERT_EQ(regs.Array().size(), 2u);
  const Json& r1 = regs.Array()[1];
  EXPECT_EQ(r1["key"].U64(), 0x5678cdu);
  EXPECT_EQ(r1["session_id"].U64(), 1u);
  EXPECT_EQ(r1["connection"].U64(), 2u);
  EXPECT_EQ(r1["address"].U64(), 0x7f0000002000u);
  EXPECT_EQ(r1["length"].U64(), 1u << 20);
  EXPECT_EQ(r1["access"].U64(), 3u);
  EXPECT_EQ(r1["refs"].U64(), 2u);

  const Json counters = ParseOrDie(RenderJson(s, "counters"));
  ASSERT_EQ(counters.Object().size(), 3u);
  EXPECT_EQ(counters.Object()[0].first, "port_rx_frames");
  EXPECT_EQ(counters["port_rx_frames"].U64(), 12345u);
  EXPECT_EQ(counters["engine_sleeps"].U64(), 0u);
  EXPECT_EQ(counters["sessions_reclaimed"].U64(), 18446744073709551615ull);
}

TEST(StatusTest, JsonOfAnEmptyDaemon) {
  const DaemonStatus empty;
  for (std::string_view topic : kStatusTopics) {
    ParseOrDie(RenderJson(empty, topic));
  }
  EXPECT_EQ(RenderJson(empty, "clients"), "[]");
  EXPECT_EQ(RenderJson(empty, "counters"), "{}");
}

TEST(StatusTest, JsonEscape) {
  EXPECT_EQ(JsonEscape("a\"b\\c/d"), "a\\\"b\\\\c/d");
  EXPECT_EQ(JsonEscape("\b\f\n\r\t"), "\\b\\f\\n\\r\\t");
  EXPECT_EQ(JsonEscape(std::string("\0\x01\x1f\x7f", 4)),
            "\\u0000\\u0001\\u001f\\u007f");
  EXPECT_EQ(JsonEscape("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(JsonEscape("\xff"), "\\ufffd");
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(StatusTest, TextStatus) {
  const std::string text = RenderText(Sample(), "status");
  EXPECT_EQ(text,
            "version        0.3.1 \"dev\"\n"
            "pid            4242\n"
            "uptime         1d 2h 3m 4s\n"
            "socket         /run/rdmaplane/rdmaplane.sock\n"
            "data port      net_ring0\n"
            "ip             10.0.0.1\n"
            "mac            02:00:00:00:00:01\n"
            "mtu            4096\n"
            "link           up for 1h 2m 3s (3 changes)\n"
            "poll mode      adaptive\n"
            "engines        2\n"
            "clients        2\n"
            "connections    8\n"
            "registrations  2\n");
}

TEST(StatusTest, TextClientsAreAligned) {
  EXPECT_EQ(
      RenderText(Sample(), "clients"),
      "SESSION  PID   UID  CONNECTIONS  REGISTRATIONS  ARENAS  ARENA_SIZE\n"
      "      1  100  1000            2              3       1      64 MiB\n"
      "      2  200     0            0              0       4     1.5 KiB\n");
}

TEST(StatusTest, TextRegistrationsAndCounters) {
  EXPECT_EQ(
      RenderText(Sample(), "registrations"),
      "       KEY  SESSION  CONNECTION         ADDRESS   LENGTH  ACCESS  REFS\n"
      "0x001234ab        1       local  0x7f0000001000     4096  r-         1\n"
      "0x005678cd        1           2  0x7f0000002000  1048576  rw         "
      "2\n");
  EXPECT_EQ(RenderText(Sample(), "counters"),
            "COUNTER                            VALUE\n"
            "port_rx_frames                     12345\n"
            "engine_sleeps                          0\n"
            "sessions_reclaimed  18446744073709551615\n");
}

TEST(StatusTest, TextConnectionsOneLineEachWithEscapedNames) {
  const DaemonStatus s = Sample();
  const std::vector<std::string> lines = Lines(RenderText(s, "connections"));
  ASSERT_EQ(lines.size(), s.connections.size() + 1);
  EXPECT_EQ(lines[0].find("ID  SESSION  SLOT  SERVICE"), 0u) << lines[0];
  // Every row has the header's width in code points up to the last column
  // (right-aligned, so all rows end at the same column).
  auto width = [](const std::string& line) {
    size_t w = 0;
    for (char c : line) w += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
    return w;
  };
  for (const std::string& line : lines) {
    EXPECT_EQ(width(line), width(lines[0])) << line;
  }
  EXPECT_NE(lines[2].find("quote\"back\\\\slash"), std::string::npos);
  EXPECT_NE(lines[3].find("new\\nline\\ttab\\rcr"), std::string::npos);
  EXPECT_NE(lines[4].find("nul\\x00byte"), std::string::npos);
  EXPECT_NE(lines[5].find("\\x01\\x1f\\x7f control"), std::string::npos);
  EXPECT_NE(lines[6].find("caf\xc3\xa9"), std::string::npos);
  EXPECT_NE(lines[1].find("0x12"), std::string::npos);  // QPNs in hex
  EXPECT_NE(lines[1].find("local"), std::string::npos);
  EXPECT_NE(lines[2].find("10.0.0.2"), std::string::npos);
}

TEST(StatusTest, TextOfAnEmptyDaemonHasHeaders) {
  const DaemonStatus empty;
  EXPECT_EQ(
      RenderText(empty, "clients"),
      "SESSION  PID  UID  CONNECTIONS  REGISTRATIONS  ARENAS  ARENA_SIZE\n");
  EXPECT_EQ(RenderText(empty, "counters"), "COUNTER  VALUE\n");
  EXPECT_NE(RenderText(empty, "status").find("version        -\n"),
            std::string::npos);
}

}  // namespace
}  // namespace rdmaplane::control
