#include "control/status.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "api/shm/layout.h"

namespace rdmaplane::control {
namespace {

// Length of the well-formed UTF-8 sequence at text[i], or 0 if there is
// none (overlong forms, surrogates and code points past U+10FFFF included).
size_t Utf8SequenceLength(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
  const uint8_t b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t n;
  uint32_t lower = 0x80, upper = 0xBF;  // bounds of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lower = 0xA0;
    if (b0 == 0xED) upper = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lower = 0x90;
    if (b0 == 0xF4) upper = 0x8F;
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  if (byte(i + 1) < lower || byte(i + 1) > upper) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return n;
}

void AppendJsonString(std::string* out, std::string_view text) {
  out->push_back('"');
  out->append(JsonEscape(text));
  out->push_back('"');
}

void AppendJsonNumber(std::string* out, uint64_t value) {
  absl::StrAppend(out, value);
}

// A JSON object built field by field.
class JsonObject {
 public:
  explicit JsonObject(std::string* out) : out_(out) { out_->push_back('{'); }
  ~JsonObject() { out_->push_back('}'); }

  void Field(std::string_view name, std::string_view value) {
    Key(name);
    AppendJsonString(out_, value);
  }
  void Field(std::string_view name, const std::string& value) {
    Field(name, std::string_view(value));
  }
  void Field(std::string_view name, const char* value) {
    Field(name, std::string_view(value));
  }
  void Field(std::string_view name, uint64_t value) {
    Key(name);
    AppendJsonNumber(out_, value);
  }
  void Field(std::string_view name, uint32_t value) {
    Field(name, static_cast<uint64_t>(value));
  }
  void Field(std::string_view name, int value) {
    Key(name);
    absl::StrAppend(out_, value);
  }

 private:
  void Key(std::string_view name) {
    if (!first_) out_->push_back(',');
    first_ = false;
    AppendJsonString(out_, name);
    out_->push_back(':');
  }

  std::string* out_;
  bool first_ = true;
};

template <typename T, typename Fn>
void AppendJsonArray(std::string* out, const std::vector<T>& items, Fn fields) {
  out->push_back('[');
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out->push_back(',');
    JsonObject object(out);
    fields(object, items[i]);
  }
  out->push_back(']');
}

void ClientFields(JsonObject& o, const ClientStatus& c) {
  o.Field("session_id", c.session_id);
  o.Field("pid", c.pid);
  o.Field("uid", c.uid);
  o.Field("connections", c.connections);
  o.Field("registrations", c.registrations);
  o.Field("arenas", c.arenas);
  o.Field("arena_bytes", c.arena_bytes);
}

void ConnectionFields(JsonObject& o, const ConnectionStatus& c) {
  o.Field("id", c.id);
  o.Field("session_id", c.session_id);
  o.Field("slot", c.slot);
  o.Field("service", c.service);
  o.Field("peer", c.peer);
  o.Field("state", c.state);
  o.Field("engine", c.engine);
  o.Field("local_qpn", c.local_qpn);
  o.Field("remote_qpn", c.remote_qpn);
  o.Field("posted", c.posted);
  o.Field("completed", c.completed);
  o.Field("tx_packets", c.tx_packets);
  o.Field("rx_packets", c.rx_packets);
  o.Field("retransmitted_packets", c.retransmitted_packets);
  o.Field("timeouts", c.timeouts);
  o.Field("naks_sent", c.naks_sent);
  o.Field("naks_received", c.naks_received);
  o.Field("access_errors", c.access_errors);
  o.Field("invalid_requests", c.invalid_requests);
  o.Field("pkey_violations", c.pkey_violations);
  o.Field("bad_responses", c.bad_responses);
}

void RegistrationFields(JsonObject& o, const RegistrationStatus& r) {
  o.Field("key", r.key);
  o.Field("session_id", r.session_id);
  o.Field("connection", r.connection);
  o.Field("address", r.address);
  o.Field("length", r.length);
  o.Field("access", r.access);
  o.Field("refs", r.refs);
}

// --- Text --------------------------------------------------------------------

// `text` with control characters, backslashes and invalid UTF-8 shown as C
// escapes, so that a value never breaks a row; "-" when empty.
std::string Printable(std::string_view text) {
  if (text.empty()) return "-";
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const auto b = static_cast<uint8_t>(text[i]);
    const size_t n = Utf8SequenceLength(text, i);
    if (n > 1) {
      out.append(text.substr(i, n));
      i += n;
      continue;
    }
    ++i;
    switch (b) {
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (b < 0x20 || b >= 0x7F) {
          absl::StrAppendFormat(&out, "\\x%02x", b);
        } else {
          out.push_back(static_cast<char>(b));
        }
    }
  }
  return out;
}

// Columns a (Printable, hence valid UTF-8) string takes on a terminal,
// counting each code point as one.
size_t DisplayWidth(std::string_view text) {
  size_t width = 0;
  for (char c : text) {
    if ((static_cast<uint8_t>(c) & 0xC0) != 0x80) ++width;
  }
  return width;
}

std::string Bytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B",   "KiB", "MiB", "GiB",
                                           "TiB", "PiB", "EiB"};
  int unit = 0;
  double value = static_cast<double>(bytes);
  while (value >= 1024 && unit < 6) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0) return absl::StrCat(bytes, " B");
  std::string text = absl::StrFormat("%.1f", value);
  if (text.size() > 2 && text.substr(text.size() - 2) == ".0") {
    text.resize(text.size() - 2);
  }
  return absl::StrCat(text, " ", kUnits[unit]);
}

std::string Uptime(uint64_t seconds) {
  const uint64_t days = seconds / 86400;
  const uint64_t hours = seconds / 3600 % 24;
  const uint64_t minutes = seconds / 60 % 60;
  const uint64_t secs = seconds % 60;
  std::string text;
  if (days > 0) absl::StrAppend(&text, days, "d ");
  if (days > 0 || hours > 0) absl::StrAppend(&text, hours, "h ");
  if (days > 0 || hours > 0 || minutes > 0) {
    absl::StrAppend(&text, minutes, "m ");
  }
  absl::StrAppend(&text, secs, "s");
  return text;
}

std::string Hex(uint64_t value) { return absl::StrFormat("0x%x", value); }

std::string Access(uint32_t access) {
  constexpr uint32_t kRead = shm::kAccessRead;
  constexpr uint32_t kWrite = shm::kAccessWrite;
  std::string text;
  text.push_back(access & kRead ? 'r' : '-');
  text.push_back(access & kWrite ? 'w' : '-');
  if (const uint32_t other = access & ~(kRead | kWrite); other != 0) {
    absl::StrAppend(&text, "+", Hex(other));
  }
  return text;
}

// Columns padded to their widest cell, two spaces apart; numbers (and
// columns marked so) right-aligned.
class Table {
 public:
  struct Column {
    std::string_view title;
    bool right = false;
  };
  explicit Table(std::vector<Column> columns) : columns_(std::move(columns)) {
    std::vector<std::string> titles;
    for (const Column& c : columns_) titles.emplace_back(c.title);
    rows_.push_back(std::move(titles));
  }
  void Row(std::vector<std::string> cells) {
    rows_.push_back(std::move(cells));
  }

  std::string Render() const {
    std::vector<size_t> widths(columns_.size(), 0);
    for (const auto& row : rows_) {
      for (size_t i = 0; i < row.size(); ++i) {
        widths[i] = std::max(widths[i], DisplayWidth(row[i]));
      }
    }
    std::string out;
    for (const auto& row : rows_) {
      std::string line;
      for (size_t i = 0; i < row.size(); ++i) {
        if (i > 0) line += "  ";
        const std::string pad(widths[i] - DisplayWidth(row[i]), ' ');
        if (columns_[i].right) {
          line += pad + row[i];
        } else {
          line += row[i] + pad;
        }
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + "\n";
    }
    return out;
  }

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

// A count in "status": the daemon's total, and how many of them the asker
// may not see, if any.
std::string Shown(uint64_t total, uint32_t hidden) {
  if (hidden == 0) return absl::StrCat(total);
  return absl::StrCat(total, " (", hidden, " of other users, not shown)");
}

// The line under a list that left out other users' rows, if it did.
std::string HiddenNote(uint32_t hidden, const char* what) {
  if (hidden == 0) return "";
  return absl::StrCat("(", hidden, " ", what,
                      " of other users not shown: ask as root or as a "
                      "member of the daemon's --admin_gids)\n");
}

std::string StatusText(const DaemonStatus& s) {
  std::string out;
  const std::pair<std::string_view, std::string> lines[] = {
      {"version", Printable(s.version)},
      {"pid", absl::StrCat(s.pid)},
      {"uptime", Uptime(s.uptime_s)},
      {"socket", Printable(s.socket)},
      {"data port", Printable(s.data_port)},
      {"ip", Printable(s.ip)},
      {"mac", Printable(s.mac)},
      {"mtu", absl::StrCat(s.mtu)},
      {"link", absl::StrCat(Printable(s.link), " for ", Uptime(s.link_since_s),
                            " (", s.link_changes, " changes)")},
      {"poll mode", Printable(s.poll_mode)},
      {"engines", absl::StrCat(s.engines)},
      {"clients", Shown(s.total_clients(), s.hidden_clients)},
      {"connections", Shown(s.total_connections(), s.hidden_connections)},
      {"registrations",
       Shown(s.total_registrations(), s.hidden_registrations)},
  };
  size_t width = 0;
  for (const auto& [name, value] : lines) width = std::max(width, name.size());
  for (const auto& [name, value] : lines) {
    out.append(name);
    out.append(width - name.size() + 2, ' ');
    out += value + "\n";
  }
  return out;
}

std::string ClientsText(const DaemonStatus& s) {
  Table t({{"SESSION", true},
           {"PID", true},
           {"UID", true},
           {"CONNECTIONS", true},
           {"REGISTRATIONS", true},
           {"ARENAS", true},
           {"ARENA_SIZE", true}});
  for (const ClientStatus& c : s.clients) {
    t.Row({absl::StrCat(c.session_id), absl::StrCat(c.pid), absl::StrCat(c.uid),
           absl::StrCat(c.connections), absl::StrCat(c.registrations),
           absl::StrCat(c.arenas), Bytes(c.arena_bytes)});
  }
  return t.Render() + HiddenNote(s.hidden_clients, "clients");
}

std::string ConnectionsText(const DaemonStatus& s) {
  Table t({{"ID", true},        {"SESSION", true},    {"SLOT", true},
           {"SERVICE", false},  {"PEER", false},      {"STATE", false},
           {"ENGINE", true},    {"LOCAL_QPN", true},  {"REMOTE_QPN", true},
           {"POSTED", true},    {"COMPLETED", true},  {"TX_PKTS", true},
           {"RX_PKTS", true},   {"RETX_PKTS", true},  {"TIMEOUTS", true},
           {"NAKS_SENT", true}, {"NAKS_RCVD", true},  {"ACC_ERRS", true},
           {"INV_REQS", true},  {"PKEY_DROPS", true}, {"BAD_RESPS", true}});
  for (const ConnectionStatus& c : s.connections) {
    t.Row({absl::StrCat(c.id),
           absl::StrCat(c.session_id),
           absl::StrCat(c.slot),
           Printable(c.service),
           Printable(c.peer),
           Printable(c.state),
           absl::StrCat(c.engine),
           Hex(c.local_qpn),
           Hex(c.remote_qpn),
           absl::StrCat(c.posted),
           absl::StrCat(c.completed),
           absl::StrCat(c.tx_packets),
           absl::StrCat(c.rx_packets),
           absl::StrCat(c.retransmitted_packets),
           absl::StrCat(c.timeouts),
           absl::StrCat(c.naks_sent),
           absl::StrCat(c.naks_received),
           absl::StrCat(c.access_errors),
           absl::StrCat(c.invalid_requests),
           absl::StrCat(c.pkey_violations),
           absl::StrCat(c.bad_responses)});
  }
  return t.Render() + HiddenNote(s.hidden_connections, "connections");
}

std::string RegistrationsText(const DaemonStatus& s) {
  Table t({{"KEY", true},
           {"SESSION", true},
           {"CONNECTION", true},
           {"ADDRESS", true},
           {"LENGTH", true},
           {"ACCESS", false},
           {"REFS", true}});
  for (const RegistrationStatus& r : s.registrations) {
    t.Row({absl::StrFormat("0x%08x", r.key), absl::StrCat(r.session_id),
           r.connection == 0 ? "local" : absl::StrCat(r.connection),
           Hex(r.address), absl::StrCat(r.length), Access(r.access),
           absl::StrCat(r.refs)});
  }
  return t.Render() + HiddenNote(s.hidden_registrations, "registrations");
}

std::string CountersText(const DaemonStatus& s) {
  Table t({{"COUNTER", false}, {"VALUE", true}});
  for (const auto& [name, value] : s.counters) {
    t.Row({Printable(name), absl::StrCat(value)});
  }
  return t.Render();
}

}  // namespace

bool ValidTopic(std::string_view topic) {
  return std::find(kStatusTopics.begin(), kStatusTopics.end(), topic) !=
         kStatusTopics.end();
}

void KeepOnlyOwn(DaemonStatus* status, uint32_t uid) {
  absl::flat_hash_set<uint32_t> own_sessions;
  for (const ClientStatus& c : status->clients) {
    if (c.uid == uid) own_sessions.insert(c.session_id);
  }
  // Moves the rows of other users' sessions out of `rows`, counting them.
  auto keep = [&own_sessions](auto* rows, uint32_t* hidden) {
    const auto others = std::remove_if(
        rows->begin(), rows->end(), [&own_sessions](const auto& row) {
          return !own_sessions.contains(row.session_id);
        });
    *hidden += static_cast<uint32_t>(rows->end() - others);
    rows->erase(others, rows->end());
  };
  keep(&status->clients, &status->hidden_clients);
  keep(&status->connections, &status->hidden_connections);
  keep(&status->registrations, &status->hidden_registrations);
  status->view = "own";
}

std::string JsonEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8SequenceLength(text, i);
    if (n == 0) {
      out += "\\ufffd";
      ++i;
      continue;
    }
    if (n > 1) {
      out.append(text.substr(i, n));
      i += n;
      continue;
    }
    const auto b = static_cast<uint8_t>(text[i++]);
    switch (b) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (b < 0x20 || b == 0x7F) {
          absl::StrAppendFormat(&out, "\\u%04x", b);
        } else {
          out.push_back(static_cast<char>(b));
        }
    }
  }
  return out;
}

std::string RenderJson(const DaemonStatus& s, std::string_view topic) {
  std::string out;
  if (topic == "status") {
    JsonObject o(&out);
    o.Field("version", s.version);
    o.Field("pid", s.pid);
    o.Field("uptime_s", s.uptime_s);
    o.Field("socket", s.socket);
    o.Field("data_port", s.data_port);
    o.Field("ip", s.ip);
    o.Field("mac", s.mac);
    o.Field("mtu", s.mtu);
    o.Field("link", s.link);
    o.Field("link_since_s", s.link_since_s);
    o.Field("link_changes", s.link_changes);
    o.Field("poll_mode", s.poll_mode);
    o.Field("engines", s.engines);
    o.Field("clients", s.total_clients());
    o.Field("connections", s.total_connections());
    o.Field("registrations", s.total_registrations());
    o.Field("view", s.view);
    o.Field("hidden_clients", s.hidden_clients);
    o.Field("hidden_connections", s.hidden_connections);
    o.Field("hidden_registrations", s.hidden_registrations);
  } else if (topic == "clients") {
    AppendJsonArray(&out, s.clients, ClientFields);
  } else if (topic == "connections") {
    AppendJsonArray(&out, s.connections, ConnectionFields);
  } else if (topic == "registrations") {
    AppendJsonArray(&out, s.registrations, RegistrationFields);
  } else if (topic == "counters") {
    JsonObject o(&out);
    for (const auto& [name, value] : s.counters) o.Field(name, value);
  }
  return out;
}

std::string RenderText(const DaemonStatus& s, std::string_view topic) {
  if (topic == "status") return StatusText(s);
  if (topic == "clients") return ClientsText(s);
  if (topic == "connections") return ConnectionsText(s);
  if (topic == "registrations") return RegistrationsText(s);
  if (topic == "counters") return CountersText(s);
  return "";
}

}  // namespace rdmaplane::control
