// The connection manager towards other daemons: ARP for our data-port
// address and our peers', and InfiniBand CM (REQ, MRA, REP, RTU, REJ, DREQ,
// DREP) over RoCEv2 to QP 1, the way RoCE NICs speak it. It negotiates
// connections to other daemons and creates, starts and ends them in the
// ConnectionTable; the table tells it (PeerLink) when our end accepts,
// closes or refuses one.
//
// Active side:  Connect -> (ARP) -> REQ ... MRA: the client's Connect
//               returns, its requests wait in the ring ... REP: the endpoint
//               starts, RTU.
// Passive side: REQ -> queued for the listener, MRA ... Accept: the endpoint
//               starts, REP ... RTU (or REJ of the REP: our end is reset).
// Either side:  close -> DREQ (repeated until DREP); the peer's side of the
//               connection completes its work as reset. A transport error
//               (retries exhausted: the peer vanished) closes ours and sends
//               DREQ in case the peer is still there.
//
// On the wire the native connections are a consumer of the RDMA IP CM
// Service, as rdma_cm ids are (ip_cm.h): REQs go to wire::kNativeServiceId
// with the IP CM header and the service's name, REPs carry the passive
// side's MTU (dataplane/wire/cm.h). A REQ in the format daemons sent before
// (service id 0x02...) gets a REJ whose words say to upgrade; a REJ without
// words to our REQ means the peer serves no native connections.
//
// Frames reach it from the port's engine (control frames passed up, and
// broken connections), and leave through the same engine.
//
// Thread-compatible: the control thread only.
#ifndef RDMAPLANE_CONTROL_CONNECTION_MANAGER_H_
#define RDMAPLANE_CONTROL_CONNECTION_MANAGER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>

#include "api/shm/layout.h"
#include "control/connections.h"
#include "control/counters.h"
#include "control/ip_cm.h"
#include "control/sessions.h"
#include "dataplane/engine/engine.h"
#include "dataplane/wire/cm.h"
#include "dataplane/wire/roce.h"

namespace rdmaplane::control {

struct PeerAddress {
  uint32_t ip = 0;  // host order
  wire::MacAddr mac;
};

class ConnectionManager : public PeerLink, public IpCm::Link {
 public:
  // `port_engine` owns the data port; `us` is the port's address; new
  // connections propose `path_mtu`; `comm_id_seed` varies communication
  // ids from one daemon run to the next.
  ConnectionManager(ConnectionTable* connections, engine::Engine* port_engine,
                    ControlCounters* counters, const PeerAddress& us,
                    uint32_t path_mtu, uint32_t comm_id_seed);

  // The client's Connect to `service` at the daemon with IPv4 address
  // r.address: answered now (an error) or, nullopt, once the peer answers
  // (Session::Answer with `request_id`).
  std::optional<shm::ControlResponse> Connect(Session* s,
                                              const shm::ControlRequest& r);
  // A queue pair connected out of band moves to RTR (its peer set by
  // ConnectionTable::SetQueuePairPeer): it starts once the peer's MAC is
  // known. Answered now, or, nullopt, once ARP answers or gives up
  // (kStatusTimeout; the queue pair stays as it was before RTR).
  std::optional<shm::ControlResponse> StartQueuePair(Session* s, Connection* c,
                                                     uint64_t request_id);
  // The MAC of `ip` when known (ours for our own address), else nullopt.
  std::optional<wire::MacAddr> Neighbor(uint32_t ip) const override;
  // Asks for the MAC of `ip` (an ARP request); Neighbor knows it once the
  // answer came.
  void AskNeighbor(uint32_t ip) override { SendArpRequest(ip); }
  void SendCm(const wire::CmMessage& m, uint32_t peer_ip,
              const wire::MacAddr& peer_mac) override;
  // Where messages of rdma_cm ids go (IpCm::Owns), and who hears of ARP
  // answers; none: they are refused as unknown services.
  void SetIpCm(IpCm* ip_cm) { ip_cm_ = ip_cm; }
  // ARP requests are repeated this often, this many times, before a
  // destination counts as unreachable.
  static constexpr uint64_t kArpIntervalNs = 200'000'000;
  static constexpr uint32_t kArpTries = 10;
  // Everything the engine passed up: ARP, CM, broken connections.
  void DrainControlFrames();
  // One of them (the daemon drains the ring when it also carries other
  // kinds).
  void HandleControlFrame(const engine::ControlFrame& f);
  // Retransmissions and time-outs.
  void Tick();
  // DREQs not answered yet (repeated by Tick until the peer's DREP).
  size_t farewells() const { return farewells_.size(); }

  // PeerLink
  void Accepted(Connection* c) override;
  void Closed(Connection* c) override;
  void Refused(Connection* c) override;

 private:
  // A DREQ we keep repeating until the peer's DREP (the connection itself
  // may be gone).
  struct Farewell {
    uint32_t peer_comm_id = 0;
    uint32_t peer_ip = 0;
    wire::MacAddr peer_mac;
    uint32_t peer_qpn = 0;
    uint64_t deadline_ns = 0;
    uint32_t tries = 0;
  };

  void HandleArp(std::span<const uint8_t> frame);
  void HandleCm(std::span<const uint8_t> frame);
  void OnTransportError(uint32_t scope);
  void OnRequest(const wire::CmMessage& m, const wire::Path& from);
  void OnMra(Connection* c, const wire::CmMessage& m);
  void OnReply(Connection* c, const wire::CmMessage& m, const wire::Path& from);
  void OnReject(Connection* c, const wire::CmMessage& m);
  void OnDisconnectRequest(const wire::CmMessage& m, const wire::Path& from);
  void SendArpRequest(uint32_t ip);
  void SendReq(Connection* c);
  void SendRep(Connection* c);
  void SendSimple(Connection* c, wire::CmType type);  // MRA, RTU
  // Rejects the REQ (or, with refers_to kRep, the REP) of the transaction
  // `transaction_id`; `local_comm_id` is ours, 0 when we gave it none.
  void SendReject(uint32_t peer_comm_id, uint32_t peer_ip,
                  const wire::MacAddr& mac, uint16_t reason,
                  const std::string& text, uint64_t transaction_id,
                  wire::CmRefersTo refers_to = wire::CmRefersTo::kReq,
                  uint32_t local_comm_id = 0);
  // Sends (or repeats) the DREQ of `f` and schedules the next try.
  void SendDreq(uint32_t comm_id, Farewell* f, uint64_t now);
  // Answers a Connect the client still waits for; on failure the slot is
  // released and the connection forgotten (c is then gone).
  void AnswerConnect(Connection* c, int32_t status, const std::string& text);
  void AnswerQueuePair(Connection* c, int32_t status, const std::string& text);
  Connection* FindByCommId(uint32_t comm_id);
  uint64_t NowNs() const { return port_engine_->clock()->NowNs(); }
  // Without IpCm::kCommIdBit, which marks the rdma_cm ids' own.
  uint32_t NextCommId() {
    uint32_t id;
    do {
      id = next_comm_id_++ & ~IpCm::kCommIdBit;
    } while (id == 0);  // 0 means "none"
    return id;
  }

  ConnectionTable* connections_;
  engine::Engine* port_engine_;
  ControlCounters* counters_;
  PeerAddress us_;
  uint32_t path_mtu_;
  std::map<uint32_t, wire::MacAddr> neighbors_;  // ARP cache, by IPv4
  std::map<uint32_t, Farewell> farewells_;       // by our comm id
  uint32_t next_comm_id_;
  IpCm* ip_cm_ = nullptr;
};

}  // namespace rdmaplane::control

#endif  // RDMAPLANE_CONTROL_CONNECTION_MANAGER_H_
