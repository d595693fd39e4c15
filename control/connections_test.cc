// The connection table over sessions whose regions are plain memory and an
// engine that is not started (commands apply on the calling thread): how a
// connection inside the daemon is made, accepted, refused and ended, what
// each end's slot says then (state, final status, retired count), the
// first close winning, slots readied for reuse, and the limits on
// connections.
#include "control/connections.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "api/shm/layout.h"
#include "control/testing/fake_session.h"

namespace rdmaplane::control {
namespace {

class ConnectionsTest : public ::testing::Test {
 protected:
  explicit ConnectionsTest(uint32_t max_connections = 512,
                           uint64_t per_user = 256,
                           uint32_t max_endpoints = 1024)
      : table_(64, 1),
        accounts_(Limits(per_user)),
        memory_(&table_, 64, &accounts_),
        engine_(&table_, EngineOptions(max_endpoints)),
        connections_(Options(max_connections), {&engine_}, &memory_, &accounts_,
                     42),
        listener_(1, 1000),
        connector_(2, 1000) {}
  static UserLimits Limits(uint64_t per_user) {
    UserLimits l;
    l.connections = per_user;
    return l;
  }
  static engine::EngineOptions EngineOptions(uint32_t max_endpoints) {
    engine::EngineOptions o;
    o.max_endpoints = max_endpoints;
    return o;
  }
  static ConnectionOptions Options(uint32_t max_connections) {
    ConnectionOptions o;
    o.max_connections = max_connections;
    return o;
  }
  // Connects connector_ to listener_ on `service`; the two slots.
  std::pair<uint32_t, uint32_t> Pair(const char* service = "svc") {
    EXPECT_EQ(
        connections_.Listen(&listener_.s, Op(shm::kOpListen, service)).status,
        shm::kStatusOk);
    const shm::ControlResponse c =
        connections_.Connect(&connector_.s, Op(shm::kOpConnect, service));
    EXPECT_EQ(c.status, shm::kStatusOk) << c.message;
    const shm::ControlResponse a =
        connections_.Accept(&listener_.s, Op(shm::kOpAccept, service));
    EXPECT_EQ(a.status, shm::kStatusOk) << a.message;
    return {c.connection, a.connection};
  }

  mr::RegistrationTable table_;
  UserAccounts accounts_;
  MemoryService memory_;
  engine::Engine engine_;
  ConnectionTable connections_;
  FakeSession listener_, connector_;
};

TEST_F(ConnectionsTest, ADisconnectEndsBothEndsWithTheirStatus) {
  const auto [c, l] = Pair();
  EXPECT_EQ(connector_.state(c), shm::kConnUp);
  EXPECT_EQ(listener_.state(l), shm::kConnUp);
  EXPECT_EQ(engine_.endpoint_count(), 2u);
  EXPECT_EQ(accounts_.Used(1000, Resource::kConnections), 2u);
  EXPECT_EQ(
      connections_.Disconnect(&connector_.s, Op(shm::kOpDisconnect, "", c))
          .status,
      shm::kStatusOk);
  EXPECT_EQ(engine_.endpoint_count(), 0u) << "still served";
  EXPECT_EQ(connector_.final_status(c), shm::kStatusAborted);
  EXPECT_EQ(connector_.state(c), shm::kConnFree);
  EXPECT_EQ(listener_.final_status(l), shm::kStatusConnReset);
  EXPECT_EQ(listener_.state(l), shm::kConnReset);
  EXPECT_EQ(accounts_.Used(1000, Resource::kConnections), 1u);
  EXPECT_EQ(connections_.size(), 1u) << "the listener still holds its end";
  // The listener's own disconnect changes nothing of its final status.
  EXPECT_EQ(connections_.Disconnect(&listener_.s, Op(shm::kOpDisconnect, "", l))
                .status,
            shm::kStatusOk);
  EXPECT_EQ(listener_.final_status(l), shm::kStatusConnReset);
  EXPECT_EQ(connections_.size(), 0u);
  EXPECT_EQ(accounts_.Used(1000, Resource::kConnections), 0u);
  EXPECT_EQ(connections_.Disconnect(&listener_.s, Op(shm::kOpDisconnect, "", l))
                .status,
            shm::kStatusNotConnected);
}

// An engine with no room for a connection's endpoints ends them rather than
// showing them up and never serving them (the daemon's limits keep this
// from happening: it gives each engine room for every connection).
class FullEngineTest : public ConnectionsTest {
 protected:
  FullEngineTest() : ConnectionsTest(512, 256, /*max_endpoints=*/3) {}
};

TEST_F(FullEngineTest, AConnectionTheEngineHasNoRoomForEnds) {
  const auto [c, l] = Pair("first");
  EXPECT_EQ(connector_.state(c), shm::kConnUp);
  EXPECT_EQ(engine_.endpoint_count(), 2u);
  const auto [c2, l2] = Pair("second");
  EXPECT_EQ(engine_.endpoint_count(), 2u);
  EXPECT_EQ(connector_.state(c2), shm::kConnAborted);
  EXPECT_EQ(listener_.state(l2), shm::kConnAborted);
  EXPECT_EQ(connector_.final_status(c2), shm::kStatusConnAborted);
  // The first is untouched, and both close as usual.
  EXPECT_EQ(connector_.state(c), shm::kConnUp);
  connections_.CloseSession(&connector_.s, false);
  connections_.CloseSession(&listener_.s, false);
  EXPECT_EQ(engine_.endpoint_count(), 0u);
  EXPECT_EQ(connections_.size(), 0u);
}

TEST_F(ConnectionsTest, AConnectorTheListenerNeverAcceptsIsReset) {
  ASSERT_EQ(connections_.Listen(&listener_.s, Op(shm::kOpListen)).status,
            shm::kStatusOk);
  const shm::ControlResponse c =
      connections_.Connect(&connector_.s, Op(shm::kOpConnect));
  ASSERT_EQ(c.status, shm::kStatusOk);
  // Requests wait in the ring while the connection is pending.
  shm::SendEntry e{};
  ASSERT_TRUE(connector_.s.slots[c.connection].send.TryPush(e));
  EXPECT_EQ(connector_.final_status(c.connection), 0);
  ASSERT_EQ(connections_.Unlisten(&listener_.s, Op(shm::kOpUnlisten)).status,
            shm::kStatusOk);
  EXPECT_EQ(connector_.final_status(c.connection), shm::kStatusConnReset);
  EXPECT_EQ(connector_.state(c.connection), shm::kConnReset);
  EXPECT_EQ(connector_.s.header->retired[c.connection].load(), 0u);
}

TEST_F(ConnectionsTest, TheDaemonStoppingAbortsBothEnds) {
  const auto [c, l] = Pair();
  connections_.CloseSession(&connector_.s, /*daemon_stopping=*/true);
  EXPECT_EQ(connector_.final_status(c), shm::kStatusConnAborted);
  EXPECT_EQ(connector_.state(c), shm::kConnDaemonGone);
  EXPECT_EQ(listener_.final_status(l), shm::kStatusConnAborted);
  EXPECT_EQ(listener_.state(l), shm::kConnDaemonGone);
  EXPECT_EQ(connector_.s.connections[c], nullptr);
}

TEST_F(ConnectionsTest, AReusedSlotStartsAfresh) {
  const auto [c, l] = Pair();
  ASSERT_EQ(
      connections_.Disconnect(&connector_.s, Op(shm::kOpDisconnect, "", c))
          .status,
      shm::kStatusOk);
  // A request the client posted after the end, left in the ring.
  shm::SendEntry stale{};
  ASSERT_TRUE(connector_.s.slots[c].send.TryPush(stale));
  const shm::ControlResponse again =
      connections_.Connect(&connector_.s, Op(shm::kOpConnect));
  ASSERT_EQ(again.status, shm::kStatusOk);
  EXPECT_EQ(again.connection, c);
  EXPECT_EQ(connector_.final_status(c), 0);
  EXPECT_EQ(connector_.s.header->retired[c].load(), 0u);
  EXPECT_EQ(connector_.state(c), shm::kConnUp);
  EXPECT_EQ(connector_.s.slots[c].send.Size(), 0u)
      << "the stale request is still there";
  connections_.CloseSession(&connector_.s, false);
  connections_.CloseSession(&listener_.s, false);
}

TEST_F(ConnectionsTest, RegistrationScopesFollowTheConnection) {
  const auto [c, l] = Pair();
  const std::optional<uint32_t> cs =
      connections_.RegistrationScope(connector_.s, c);
  const std::optional<uint32_t> ls =
      connections_.RegistrationScope(listener_.s, l);
  ASSERT_TRUE(cs && ls);
  EXPECT_NE(*cs, *ls);
  EXPECT_EQ(ConnectionOfScope(*cs), ConnectionOfScope(*ls));
  EXPECT_FALSE(connections_.RegistrationScope(connector_.s, c + 1));
  EXPECT_FALSE(connections_.RegistrationScope(connector_.s, 99));
  // Ended by the peer: no new registration, but a deregistration still
  // names the end.
  connections_.CloseSession(&listener_.s, false);
  EXPECT_FALSE(connections_.RegistrationScope(connector_.s, c));
  EXPECT_EQ(connections_.DeregistrationScope(connector_.s, c), cs);
}

// A session that went while its peer still holds the connection is not
// reached again (the status listing read a freed session before).
TEST_F(ConnectionsTest, AClosedSessionIsNeverReachedThroughItsConnections) {
  auto gone = std::make_unique<FakeSession>(7, 1000);
  ASSERT_EQ(connections_.Listen(&listener_.s, Op(shm::kOpListen)).status,
            shm::kStatusOk);
  ASSERT_EQ(connections_.Connect(&gone->s, Op(shm::kOpConnect)).status,
            shm::kStatusOk);
  const shm::ControlResponse a =
      connections_.Accept(&listener_.s, Op(shm::kOpAccept));
  ASSERT_EQ(a.status, shm::kStatusOk);
  connections_.CloseSession(&gone->s, false);
  gone.reset();
  DaemonStatus st;
  connections_.AppendStatus(&st);
  ASSERT_EQ(st.connections.size(), 1u);
  EXPECT_EQ(st.connections[0].session_id, 1u);
  EXPECT_EQ(st.connections[0].state, "closing");
  connections_.CloseSession(&listener_.s, false);
  EXPECT_EQ(connections_.size(), 0u);
}

class ConnectionLimitsTest : public ConnectionsTest {
 protected:
  ConnectionLimitsTest()
      : ConnectionsTest(/*max_connections=*/1,
                        /*per_user=*/3) {}
};

TEST_F(ConnectionLimitsTest, TheDaemonsAndTheUsersLimitsAreNamed) {
  Pair("one");
  // The daemon serves one connection: another is refused at once.
  ASSERT_EQ(connections_.Listen(&listener_.s, Op(shm::kOpListen, "two")).status,
            shm::kStatusOk);
  const shm::ControlResponse full =
      connections_.Connect(&connector_.s, Op(shm::kOpConnect, "two"));
  EXPECT_EQ(full.status, shm::kStatusLimit);
  EXPECT_NE(std::strstr(full.message, "--max_connections"), nullptr)
      << full.message;
  // The connector's end goes; the listener keeps its end (one of uid
  // 1000's three).
  connections_.CloseSession(&connector_.s, false);
  EXPECT_EQ(accounts_.Used(1000, Resource::kConnections), 1u);
  FakeSession other(3, 1000);
  EXPECT_EQ(connections_.Connect(&other.s, Op(shm::kOpConnect, "two")).status,
            shm::kStatusOk);
  EXPECT_EQ(connections_.Connect(&other.s, Op(shm::kOpConnect, "two")).status,
            shm::kStatusOk);
  const shm::ControlResponse fourth =
      connections_.Connect(&other.s, Op(shm::kOpConnect, "two"));
  EXPECT_EQ(fourth.status, shm::kStatusLimit);
  EXPECT_NE(std::strstr(fourth.message, "--max_connections_per_user"), nullptr)
      << fourth.message;
  // Another user has an allowance of its own.
  FakeSession stranger(4, 2000);
  EXPECT_EQ(
      connections_.Connect(&stranger.s, Op(shm::kOpConnect, "two")).status,
      shm::kStatusOk);
  connections_.CloseSession(&stranger.s, false);
  connections_.CloseSession(&other.s, false);
  connections_.CloseSession(&listener_.s, false);
  EXPECT_EQ(accounts_.Used(1000, Resource::kConnections), 0u);
  EXPECT_EQ(accounts_.Used(2000, Resource::kConnections), 0u);
  EXPECT_EQ(connections_.size(), 0u);
}

}  // namespace
}  // namespace rdmaplane::control
