#include "control/telemetry.h"

#include <rte_telemetry.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "control/log.h"

namespace rdmaplane::control {
namespace {

constexpr std::string_view kPrefix = "/rdmaplane/";

// DPDK's limit on one reply (its hello says max_output_len), less room for
// the {"<command>": ...} around it and an "omitted" entry.
constexpr size_t kReplyBudget = 16384 - 160;

struct State {
  std::mutex mu;
  std::function<DaemonStatus()> source ABSL_GUARDED_BY(mu);
};

// Never destroyed: a telemetry thread may answer while the process exits.
State& GetState() {
  static State* state = new State();
  return *state;
}

size_t Digits(uint64_t v) {
  size_t n = 1;
  while (v >= 10) {
    v /= 10;
    ++n;
  }
  return n;
}

// A telemetry dict that also counts the JSON bytes DPDK will write for it:
// {"name":value,...}.
class Dict {
 public:
  explicit Dict(rte_tel_data* d) : d_(d) { rte_tel_data_start_dict(d_); }

  void U64(const char* name, uint64_t value) {
    if (rte_tel_data_add_dict_u64(d_, name, value) == 0) {
      Count(name, Digits(value));
    }
  }
  void Int(const char* name, int value) {
    if (rte_tel_data_add_dict_int(d_, name, value) == 0) {
      const uint64_t magnitude =
          value < 0 ? 0 - static_cast<uint64_t>(value) : value;
      Count(name, Digits(magnitude) + (value < 0));
    }
  }
  void Str(const char* name, std::string_view value) {
    const std::string text = TelemetryString(value);
    if (rte_tel_data_add_dict_string(d_, name, text.c_str()) == 0) {
      size_t escaped = 0;  // DPDK escapes quotes and backslashes
      for (char c : text) escaped += c == '"' || c == '\\';
      Count(name, text.size() + escaped + 2);
    }
  }
  // Adds `inner` (a started dict) under `name` if the reply stays within
  // `budget`; takes ownership of `inner` either way.
  bool Container(const std::string& name, rte_tel_data* inner,
                 size_t inner_bytes, size_t budget) {
    if (bytes_ + name.size() + 4 + inner_bytes > budget ||
        rte_tel_data_add_dict_container(d_, name.c_str(), inner, 0) != 0) {
      rte_tel_data_free(inner);
      return false;
    }
    Count(name.c_str(), inner_bytes);
    return true;
  }
  size_t bytes() const { return bytes_; }

 private:
  void Count(const char* name, size_t value_bytes) {
    bytes_ += std::strlen(name) + 4 + value_bytes;  // "name":value,
  }

  rte_tel_data* d_;
  size_t bytes_ = 2;  // {}
};

void ClientFields(Dict& d, const ClientStatus& c) {
  d.U64("session_id", c.session_id);
  d.Int("pid", c.pid);
  d.U64("uid", c.uid);
  d.U64("connections", c.connections);
  d.U64("registrations", c.registrations);
  d.U64("arenas", c.arenas);
  d.U64("arena_bytes", c.arena_bytes);
}

void ConnectionFields(Dict& d, const ConnectionStatus& c) {
  d.U64("id", c.id);
  d.U64("session_id", c.session_id);
  d.U64("slot", c.slot);
  d.Str("service", c.service);
  d.Str("peer", c.peer);
  d.Str("state", c.state);
  d.U64("engine", c.engine);
  d.U64("local_qpn", c.local_qpn);
  d.U64("remote_qpn", c.remote_qpn);
  d.U64("posted", c.posted);
  d.U64("completed", c.completed);
  d.U64("tx_packets", c.tx_packets);
  d.U64("rx_packets", c.rx_packets);
  d.U64("retransmitted_packets", c.retransmitted_packets);
  d.U64("timeouts", c.timeouts);
  d.U64("naks_sent", c.naks_sent);
  d.U64("naks_received", c.naks_received);
  d.U64("access_errors", c.access_errors);
  d.U64("invalid_requests", c.invalid_requests);
  d.U64("pkey_violations", c.pkey_violations);
  d.U64("bad_responses", c.bad_responses);
}

void RegistrationFields(Dict& d, const RegistrationStatus& r) {
  d.U64("key", r.key);
  d.U64("session_id", r.session_id);
  d.U64("connection", r.connection);
  d.U64("address", r.address);
  d.U64("length", r.length);
  d.U64("access", r.access);
  d.U64("refs", r.refs);
}

// A dict of dicts keyed by each item's id, as many as fit in one reply,
// then "omitted": how many did not.
template <typename T, typename IdFn, typename FieldsFn>
void FillKeyed(rte_tel_data* d, const std::vector<T>& items, IdFn id,
               FieldsFn fields) {
  Dict out(d);
  size_t shown = 0;
  for (const T& item : items) {
    if (shown + 1 >= RTE_TEL_MAX_DICT_ENTRIES) break;  // room for "omitted"
    rte_tel_data* inner = rte_tel_data_alloc();
    if (inner == nullptr) break;
    Dict entry(inner);
    fields(entry, item);
    if (!out.Container(std::to_string(id(item)), inner, entry.bytes(),
                       kReplyBudget)) {
      break;
    }
    ++shown;
  }
  if (shown < items.size()) out.U64("omitted", items.size() - shown);
}

void FillStatus(rte_tel_data* d, const DaemonStatus& s) {
  Dict out(d);
  out.Str("version", s.version);
  out.Int("pid", s.pid);
  out.U64("uptime_s", s.uptime_s);
  out.Str("socket", s.socket);
  out.Str("data_port", s.data_port);
  out.Str("ip", s.ip);
  out.Str("mac", s.mac);
  out.U64("mtu", s.mtu);
  out.Str("link", s.link);
  out.U64("link_since_s", s.link_since_s);
  out.U64("link_changes", s.link_changes);
  out.Str("poll_mode", s.poll_mode);
  out.U64("engines", s.engines);
  // As rdmaplanectl's JSON has them (status.cc): telemetry is root's and
  // shows everything, so its view is "all" with nothing hidden.
  out.U64("clients", s.total_clients());
  out.U64("connections", s.total_connections());
  out.U64("registrations", s.total_registrations());
  out.Str("view", s.view);
  out.U64("hidden_clients", s.hidden_clients);
  out.U64("hidden_connections", s.hidden_connections);
  out.U64("hidden_registrations", s.hidden_registrations);
}

void FillCounters(rte_tel_data* d, const DaemonStatus& s) {
  Dict out(d);
  size_t shown = 0;
  for (const auto& [name, value] : s.counters) {
    if (shown + 1 >= RTE_TEL_MAX_DICT_ENTRIES ||
        out.bytes() + name.size() + 24 > kReplyBudget) {
      break;
    }
    out.U64(TelemetryName(name).c_str(), value);
    ++shown;
  }
  if (shown < s.counters.size()) {
    out.U64("omitted", s.counters.size() - shown);
  }
}

int HandleCommand(const char* command, const char* /*params*/,
                  rte_tel_data* d) {
  std::string_view topic(command);
  if (topic.substr(0, kPrefix.size()) != kPrefix) return -EINVAL;
  topic.remove_prefix(kPrefix.size());
  State& state = GetState();
  std::lock_guard<std::mutex> lock(state.mu);
  if (!state.source) return -ENODEV;  // the daemon is not running
  const DaemonStatus s = state.source();
  if (topic == "status") {
    FillStatus(d, s);
  } else if (topic == "counters") {
    FillCounters(d, s);
  } else if (topic == "clients") {
    FillKeyed(
        d, s.clients, [](const ClientStatus& c) { return c.session_id; },
        ClientFields);
  } else if (topic == "connections") {
    FillKeyed(
        d, s.connections, [](const ConnectionStatus& c) { return c.id; },
        ConnectionFields);
  } else if (topic == "registrations") {
    FillKeyed(
        d, s.registrations, [](const RegistrationStatus& r) { return r.key; },
        RegistrationFields);
  } else {
    return -EINVAL;
  }
  return 0;
}

void RegisterCommands() {
  static constexpr std::pair<const char*, const char*> kCommands[] = {
      {"/rdmaplane/status",
       "rdmaplaned: version, pid, uptime, port and counts. No parameters."},
      {"/rdmaplane/counters", "rdmaplaned: daemon counters. No parameters."},
      {"/rdmaplane/clients",
       "rdmaplaned: client sessions by session id. No parameters."},
      {"/rdmaplane/connections",
       "rdmaplaned: connections by id, with their packet counters. No "
       "parameters."},
      {"/rdmaplane/registrations",
       "rdmaplaned: memory registrations by key. No parameters."},
  };
  for (const auto& [command, help] : kCommands) {
    if (const int rc = rte_telemetry_register_cmd(command, HandleCommand, help);
        rc != 0) {
      RDP_LOG(kWarning, "telemetry: cannot register %s: %s", command,
              std::strerror(-rc));
    }
  }
}

}  // namespace

void RegisterTelemetry(std::function<DaemonStatus()> source) {
  static std::once_flag once;
  std::call_once(once, RegisterCommands);
  State& state = GetState();
  std::lock_guard<std::mutex> lock(state.mu);
  state.source = std::move(source);
}

void UnregisterTelemetrySource() {
  State& state = GetState();
  std::function<DaemonStatus()> old;
  {
    std::lock_guard<std::mutex> lock(state.mu);
    old = std::move(state.source);
    state.source = nullptr;
  }
  // `old` (and whatever it holds) is destroyed outside the lock.
}

std::string TelemetryString(std::string_view text) {
  constexpr size_t kMax = RTE_TEL_MAX_STRING_LEN - 1;
  std::string out;
  for (const char c : text) {
    const auto b = static_cast<uint8_t>(c);
    if (b < 0x20 || b > 0x7E || b == '%') {
      if (out.size() + 3 > kMax) break;
      char hex[4];
      std::snprintf(hex, sizeof(hex), "%%%02X", b);
      out += hex;
    } else {
      if (out.size() + 1 > kMax) break;
      out.push_back(c);
    }
  }
  return out;
}

std::string TelemetryName(std::string_view name) {
  constexpr size_t kMax = RTE_TEL_MAX_STRING_LEN - 1;
  std::string out(name.substr(0, kMax));
  for (char& c : out) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '_' || c == '/';
    if (!ok) c = '_';
  }
  if (out.empty()) out.push_back('_');
  return out;
}

}  // namespace rdmaplane::control
