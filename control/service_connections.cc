// ConnectionTable, by service name: listeners, their accept queues, and
// connections between two clients of this daemon (ConnectionKind::kLocal).
// Connections to and from other daemons by service name are the connection
// manager's (connection_manager.cc).
#include <cstring>

#include "control/connections.h"
#include "control/reply.h"

namespace rdmaplane::control {
namespace {

using shm::ControlRequest;
using shm::ControlResponse;

bool ValidService(const ControlRequest& r) {
  const void* nul = std::memchr(r.service, '\0', sizeof(r.service));
  return nul != nullptr && r.service[0] != '\0';
}

}  // namespace

// --- Listeners
// ----------------------------------------------------------------

ControlResponse ConnectionTable::Listen(Session* s, const ControlRequest& r) {
  if (!ValidService(r)) return Reply(shm::kStatusInvalid, "bad service name");
  const std::string service(r.service);
  if (auto it = listeners_.find(service); it != listeners_.end()) {
    return it->second == s ? Reply(shm::kStatusOk)
                           : Reply(shm::kStatusInvalid,
                                   "another client listens on this service");
  }
  listeners_[service] = s;
  s->listening.insert(service);
  return Reply(shm::kStatusOk);
}

ControlResponse ConnectionTable::Unlisten(Session* s, const ControlRequest& r) {
  if (!ValidService(r)) return Reply(shm::kStatusInvalid, "bad service name");
  const std::string service(r.service);
  auto it = listeners_.find(service);
  if (it == listeners_.end() || it->second != s) {
    return Reply(shm::kStatusInvalid, "not listening on this service");
  }
  listeners_.erase(it);
  s->listening.erase(service);
  if (auto p = pending_.find(service); p != pending_.end()) {
    auto queue = std::move(p->second);
    pending_.erase(p);
    Refuse(std::move(queue));
  }
  return Reply(shm::kStatusOk);
}

Session* ConnectionTable::Listener(const std::string& service) const {
  auto it = listeners_.find(service);
  return it == listeners_.end() ? nullptr : it->second;
}

std::string ConnectionTable::ListenedService(
    std::string_view prefix,
    const std::function<bool(std::string_view)>& is_it) const {
  for (auto it = listeners_.lower_bound(std::string(prefix));
       it != listeners_.end() && it->first.starts_with(prefix); ++it) {
    if (is_it(it->first)) return it->first;
  }
  return {};
}

bool ConnectionTable::AcceptQueueFull(const std::string& service) const {
  auto it = pending_.find(service);
  return it != pending_.end() && it->second.size() >= options_.accept_backlog;
}

void ConnectionTable::QueueForAccept(const std::string& service,
                                     Connection* c) {
  pending_[service].push_back(c);
}

void ConnectionTable::Unqueue(Connection* c) {
  for (auto& [service, queue] : pending_) {
    std::erase(queue, c);
  }
}

void ConnectionTable::Refuse(std::deque<Connection*> queue) {
  for (Connection* c : queue) RefusePending(c);
}

// --- Connections inside the daemon
// ----------------------------------------------

ControlResponse ConnectionTable::Connect(Session* s, const ControlRequest& r) {
  if (!ValidService(r)) return Reply(shm::kStatusInvalid, "bad service name");
  Session* listener = Listener(r.service);
  if (listener == nullptr) {
    return Reply(shm::kStatusRefused, "no listener for this service");
  }
  // The listener's slots are taken only when it accepts, and the queue of
  // connections waiting for that is bounded.
  if (AcceptQueueFull(r.service)) {
    return Reply(shm::kStatusRefused, "the listener's accept queue is full");
  }
  const int cslot = s->FreeSlot();
  if (cslot < 0) return Reply(shm::kStatusNoBuffers, "no free connection slot");
  ControlResponse refusal;
  std::optional<UserAccounts::Charge> charge = ChargeEnd(*s, &refusal);
  if (!charge) return refusal;
  Connection* c = Create();
  c->charge[0] = std::move(*charge);
  c->side[0] = s;
  c->slot[0] = cslot;
  c->side[1] = listener;
  c->slot[1] = shm::kMaxConnections;  // none until accepted
  c->service = r.service;
  s->ResetSlot(cslot);
  c->endpoint[0] = MakeEndpoint(s, cslot, c, 0);
  c->open[0] = true;
  c->pending = true;
  s->connections[cslot] = c;
  QueueForAccept(r.service, c);
  ControlResponse resp = Reply(shm::kStatusOk);
  resp.connection = cslot;
  return resp;
}

ControlResponse ConnectionTable::Accept(Session* s, const ControlRequest& r) {
  if (!ValidService(r)) return Reply(shm::kStatusInvalid, "bad service name");
  if (Listener(r.service) != s) {
    return Reply(shm::kStatusInvalid, "not listening on this service");
  }
  auto& queue = pending_[r.service];
  if (queue.empty()) return Reply(shm::kStatusAgain, "no connection yet");
  const int sslot = s->FreeSlot();
  if (sslot < 0) return Reply(shm::kStatusNoBuffers, "no free connection slot");
  ControlResponse refusal;
  std::optional<UserAccounts::Charge> charge = ChargeEnd(*s, &refusal);
  if (!charge) return refusal;
  Connection* c = queue.front();
  queue.pop_front();
  // The side the listener takes: 0 towards another daemon, else 1.
  c->charge[c->remote() ? 0 : 1] = std::move(*charge);
  ControlResponse resp = Reply(shm::kStatusOk);
  resp.connection = sslot;
  s->ResetSlot(sslot);
  if (c->remote()) {
    c->side[0] = s;
    c->slot[0] = sslot;
    c->open[0] = true;
    s->connections[sslot] = c;
    StartRemote(c);
    link_->Accepted(c);
    return resp;
  }
  c->slot[1] = sslot;
  c->endpoint[1] = MakeEndpoint(s, sslot, c, 1);
  c->open[1] = true;
  c->pending = false;
  s->connections[sslot] = c;
  c->engine = LeastLoadedEngine();
  engines_[c->engine]->AddPair(c->endpoint[0].get(), c->endpoint[1].get());
  c->running = true;
  ++running_;
  return resp;
}

}  // namespace rdmaplane::control
