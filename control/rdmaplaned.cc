// rdmaplaned: the rdmaplane daemon. Serves client sessions on a Unix socket
// and runs their RDMA traffic on its engine, between its own clients and,
// through a DPDK data port, with clients of other daemons.
//
//   rdmaplaned --socket=/run/rdmaplane/rdmaplane.sock --poll_mode=adaptive
//       --port=net_af_packet0,iface=eth1 --ip=10.0.0.1
//
// Options may also come from a file: --flagfile=/etc/rdmaplane/rdmaplaned.conf
// (one --flag=value per line).
#include <arpa/inet.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>
#include <signal.h>

#include <algorithm>

#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "control/daemon.h"
#include "control/log.h"

ABSL_FLAG(std::string, socket, "",
          "Unix socket clients connect to (default: /run/rdmaplane/"
          "rdmaplane.sock as root, else $XDG_RUNTIME_DIR or /tmp)");
ABSL_FLAG(std::string, allow_uids, "",
          "comma-separated uids allowed besides root and the daemon's own");
ABSL_FLAG(std::string, allow_gids, "",
          "comma-separated gids whose members (primary or supplementary) "
          "are allowed");
ABSL_FLAG(std::string, admin_gids, "",
          "comma-separated gids whose members (primary or supplementary) "
          "see every user's clients, connections and registrations in "
          "rdmaplanectl; others see their own (root and the daemon's own "
          "uid always see all)");
ABSL_FLAG(std::string, poll_mode, "adaptive",
          "busy: engines spin on their core; adaptive: they sleep when idle");
ABSL_FLAG(std::string, link_faults, "",
          "faults injected on in-process links, e.g. loss=0.01,seed=3");
ABSL_FLAG(uint32_t, max_registrations, 65536, "registration table size");
ABSL_FLAG(uint32_t, max_registrations_per_session, 4096,
          "distinct registrations one client session may hold");
ABSL_FLAG(uint32_t, max_arenas_per_session, 64,
          "memory arenas one client session may hand over (1..4096)");
ABSL_FLAG(uint32_t, max_connections, 8192,
          "connections the daemon serves at once");
ABSL_FLAG(uint64_t, max_sessions_per_user, 256,
          "client sessions one uid may hold at once (0: unlimited)");
ABSL_FLAG(uint64_t, max_arenas_per_user, 4096,
          "memory arenas one uid's sessions may hand over in all (0: "
          "unlimited)");
ABSL_FLAG(uint64_t, max_arena_bytes_per_user, 0,
          "bytes of arena memory one uid's sessions may hand over in all "
          "(default 0: this host's physical memory)");
ABSL_FLAG(uint64_t, max_registrations_per_user, 16384,
          "distinct registrations one uid's sessions may hold in all (0: "
          "unlimited)");
ABSL_FLAG(uint64_t, max_connections_per_user, 2048,
          "connection ends one uid's sessions may hold in all (0: "
          "unlimited)");
ABSL_FLAG(uint32_t, mtu, 0,
          "RoCE path MTU towards other daemons: 256, 512, 1024, 2048 or "
          "4096; 0 (default): the largest the data port carries as it is "
          "(4096 over memif; over af_packet, af_xdp and tap what the "
          "interface's MTU carries, e.g. 1024 at 1500 and 4096 at 4156 or "
          "more, at most 2048 over af_xdp and 1024 over tap); an explicit "
          "value raises the interface's MTU where needed");
ABSL_FLAG(std::string, port, "",
          "data port: a DPDK vdev (net_memif0,role=server,socket=PATH; "
          "net_af_packet0,iface=IF; net_af_xdp0,iface=IF; net_tap0,iface=IF) "
          "or a PCI address; empty: connections between this daemon's "
          "clients only");
ABSL_FLAG(std::string, ip, "", "IPv4 address of the data port");
ABSL_FLAG(std::string, mac, "", "MAC of the data port (default: its own)");
ABSL_FLAG(bool, hugepages, false,
          "give DPDK hugepages (default: --no-huge, plain memory)");
ABSL_FLAG(uint32_t, memory_mb, 256, "DPDK memory without hugepages, MiB");
ABSL_FLAG(uint32_t, mbufs, 8191, "packet buffers of the data port");
ABSL_FLAG(uint32_t, burst, 32,
          "frames or requests an engine moves per connection and turn, and "
          "frames per data-port burst (1..256)");
ABSL_FLAG(uint32_t, engines, 0,
          "engine threads, 1..32 (default: one per CPU of --engine_lcores, "
          "else 1)");
ABSL_FLAG(std::string, engine_lcores, "",
          "comma-separated CPUs the engines run on, one engine each (EAL "
          "lcores with a data port); empty: not pinned");
ABSL_FLAG(int32_t, control_lcore, 0,
          "CPU of the control thread when the engines are pinned and there "
          "is a data port (the EAL main lcore)");
ABSL_FLAG(std::string, eal_args, "",
          "extra DPDK EAL arguments, separated by spaces");
ABSL_FLAG(std::string, file_prefix, "rdmaplane",
          "DPDK runtime folder name (two daemons on a host need two); the "
          "telemetry socket lives there");
ABSL_FLAG(std::string, zero_copy, "auto",
          "auto: send payload from client memory in place where the data "
          "port allows it; off: always copy it into packet buffers");
ABSL_FLAG(std::string, port_faults, "",
          "faults injected on the data port's transmit side, e.g. "
          "loss=0.05,seed=7");
ABSL_FLAG(uint32_t, retransmit_timeout_us, 10000,
          "first retransmission timeout towards another daemon, doubled "
          "after each timeout without progress (7 retries)");
ABSL_FLAG(std::string, log_level, "info", "debug, info, warning or error");
ABSL_FLAG(bool, check_config, false,
          "validate the options, print the configuration and exit");

namespace {

// --help: what the daemon is, how it is usually started and its flags by
// group (absl's --helpfull keeps the whole dump, Abseil's own flags too).
// A flag of this file left out of every group is listed under "Other", so
// none goes missing.
constexpr const char* kHelpIntro =
    "rdmaplaned: the rdmaplane daemon. It owns a network port through DPDK,\n"
    "speaks RoCEv2 on it and serves RDMA WRITE, READ, SEND and atomics for\n"
    "client processes, which reach it over a Unix socket and shared memory\n"
    "(librdmaplane, or unmodified verbs, rdma_cm, UCX and MPI programs under\n"
    "rdmaplane-run). docs/operations.md says more.\n"
    "\n"
    "Usage: rdmaplaned [--flag=value ...] [--flagfile=FILE]\n"
    "\n"
    "Common ways to start it:\n"
    "  rdmaplaned\n"
    "      no data port: connections between this daemon's clients only\n"
    "  rdmaplaned --port=net_memif0,role=server,socket=/run/rdp/memif.sock \\\n"
    "      --ip=198.51.100.1 --file_prefix=rdmaplane-a\n"
    "      two daemons on one host joined by memif (the other one with\n"
    "      role=client, its own --ip, --socket and --file_prefix)\n"
    "  rdmaplaned --port=net_af_xdp0,iface=eth1 --ip=198.51.100.1\n"
    "      a Linux interface through AF_XDP (net_af_packet0,iface=eth1 works\n"
    "      everywhere, more slowly)\n"
    "  rdmaplaned --port=0000:3b:00.0 --ip=198.51.100.1 --hugepages\n"
    "      a NIC bound to vfio-pci, by its PCI address\n"
    "  rdmaplaned --check_config ...\n"
    "      check the options, print the configuration and exit\n";

struct HelpGroup {
  const char* title;
  std::vector<const char*> flags;
};

void PrintHelp() {
  const std::vector<HelpGroup> groups = {
      {"Clients", {"socket", "allow_uids", "allow_gids", "admin_gids"}},
      {"Data port",
       {"port", "ip", "mac", "mtu", "zero_copy", "hugepages", "memory_mb",
        "mbufs", "file_prefix", "eal_args"}},
      {"Engines",
       {"poll_mode", "engines", "engine_lcores", "control_lcore", "burst",
        "retransmit_timeout_us"}},
      {"Limits",
       {"max_sessions_per_user", "max_arenas_per_session",
        "max_arenas_per_user", "max_arena_bytes_per_user",
        "max_registrations", "max_registrations_per_session",
        "max_registrations_per_user", "max_connections",
        "max_connections_per_user"}},
      {"Diagnostics",
       {"log_level", "check_config", "port_faults", "link_faults"}},
  };
  std::string out = kHelpIntro;
  std::set<std::string> shown;
  auto add = [&out, &shown](const absl::CommandLineFlag& f) {
    shown.insert(std::string(f.Name()));
    const std::string def = f.DefaultValue();
    absl::StrAppend(&out, "  --", f.Name(),
                    def.empty() ? "" : absl::StrCat("=", def), "\n");
    // The help text, wrapped at 72 columns under the flag.
    std::string line = "      ";
    for (absl::string_view word :
         absl::StrSplit(f.Help(), ' ', absl::SkipEmpty())) {
      if (line.size() > 6 && line.size() + 1 + word.size() > 78) {
        absl::StrAppend(&out, line, "\n");
        line = "      ";
      }
      absl::StrAppend(&line, line.size() > 6 ? " " : "", word);
    }
    absl::StrAppend(&out, line, "\n");
  };
  for (const HelpGroup& g : groups) {
    absl::StrAppend(&out, "\n", g.title, ":\n");
    for (const char* name : g.flags) {
      if (const absl::CommandLineFlag* f = absl::FindCommandLineFlag(name)) {
        add(*f);
      }
    }
  }
  std::vector<const absl::CommandLineFlag*> rest;
  for (const auto& [name, f] : absl::GetAllFlags()) {
    if (absl::EndsWith(f->Filename(), "control/rdmaplaned.cc") &&
        !shown.contains(std::string(name))) {
      rest.push_back(f);
    }
  }
  if (!rest.empty()) {
    std::sort(rest.begin(), rest.end(), [](const auto* a, const auto* b) {
      return a->Name() < b->Name();
    });
    absl::StrAppend(&out, "\nOther:\n");
    for (const absl::CommandLineFlag* f : rest) add(*f);
  }
  absl::StrAppend(&out,
                  "\n--helpfull lists every flag, Abseil's own included;\n"
                  "--flagfile=FILE reads flags from FILE; --version prints "
                  "the version.\n");
  std::fputs(out.c_str(), stdout);
}

// True when the command line asks for --help (or -h) as such; absl handles
// --helpfull and the other --help* forms itself.
bool AsksForHelp(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view a = argv[i];
    if (a == "--") return false;
    if (a == "--help" || a == "-help" || a == "-h") return true;
  }
  return false;
}

bool ParseIds(const std::string& text, std::vector<uint32_t>* out) {
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    uint32_t v;
    if (!absl::SimpleAtoi(part, &v)) return false;
    out->push_back(v);
  }
  return true;
}

// --engines (0: not given) and --engine_lcores into options->engines and
// engine_cpus; an error message, or "" when they are valid. `control_cpu`
// is the EAL main lcore (-1 without a data port), which no engine may
// share.
std::string ParseEngineCpus(const std::string& text, uint32_t engines,
                            int control_cpu,
                            rdmaplane::control::DaemonOptions* options) {
  constexpr uint32_t kMaxEngines = rdmaplane::engine::WakeRoute::kMaxEngines;
  std::vector<uint32_t> cpus;
  if (!ParseIds(text, &cpus)) {
    return "--engine_lcores takes CPU numbers separated by commas";
  }
  if (engines > kMaxEngines) {
    return absl::StrCat("--engines must be 1..", kMaxEngines);
  }
  if (cpus.empty()) {
    options->engines = engines == 0 ? 1 : engines;
    return "";
  }
  if (cpus.size() > kMaxEngines) {
    return absl::StrCat("--engine_lcores lists at most ", kMaxEngines,
                        " CPUs");
  }
  if (engines != 0 && engines != cpus.size()) {
    return absl::StrCat("--engines=", engines, " but --engine_lcores lists ",
                        cpus.size(), " CPUs");
  }
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  sched_getaffinity(0, sizeof(allowed), &allowed);
  for (size_t i = 0; i < cpus.size(); ++i) {
    const uint32_t cpu = cpus[i];
    if (cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &allowed)) {
      return absl::StrCat("--engine_lcores: CPU ", cpu,
                          " is not one this process may run on");
    }
    if (std::count(cpus.begin(), cpus.begin() + i, cpu) > 0) {
      return absl::StrCat("--engine_lcores lists CPU ", cpu, " twice");
    }
    if (static_cast<int>(cpu) == control_cpu) {
      return absl::StrCat("--engine_lcores and --control_lcore share CPU ",
                          cpu);
    }
  }
  options->engines = static_cast<uint32_t>(cpus.size());
  options->engine_cpus.assign(cpus.begin(), cpus.end());
  return "";
}

// Raises the soft limit of `resource` to its hard limit; the soft limit
// then, or nullopt when it cannot be read.
std::optional<rlim_t> RaiseSoftLimit(int resource) {
  rlimit l{};
  if (getrlimit(resource, &l) == 0 && l.rlim_cur < l.rlim_max) {
    l.rlim_cur = l.rlim_max;
    setrlimit(resource, &l);
  }
  if (getrlimit(resource, &l) != 0) return std::nullopt;
  return l.rlim_cur;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "the rdmaplane daemon (rdmaplaned --help for how to start it)");
  if (AsksForHelp(argc, argv)) {
    PrintHelp();
    return 0;
  }
  absl::FlagsUsageConfig usage;
  usage.version_string = [] {
    return absl::StrCat("rdmaplaned ", rdmaplane::control::kVersion, "\n");
  };
  absl::SetFlagsUsageConfig(usage);
  absl::ParseCommandLine(argc, argv);
  rdmaplane::control::DaemonOptions options;
  options.socket_path = absl::GetFlag(FLAGS_socket);
  std::vector<uint32_t> uids, gids, admin_gids;
  if (!ParseIds(absl::GetFlag(FLAGS_allow_uids), &uids) ||
      !ParseIds(absl::GetFlag(FLAGS_allow_gids), &gids) ||
      !ParseIds(absl::GetFlag(FLAGS_admin_gids), &admin_gids)) {
    std::fprintf(stderr,
                 "rdmaplaned: --allow_uids, --allow_gids and --admin_gids "
                 "take numbers\n");
    return 2;
  }
  options.allowed_uids.assign(uids.begin(), uids.end());
  options.allowed_gids.assign(gids.begin(), gids.end());
  options.admin_gids.assign(admin_gids.begin(), admin_gids.end());
  const std::string mode = absl::GetFlag(FLAGS_poll_mode);
  if (mode == "busy") {
    options.poll_mode = rdmaplane::engine::PollMode::kBusy;
  } else if (mode != "adaptive") {
    std::fprintf(stderr, "rdmaplaned: --poll_mode is busy or adaptive\n");
    return 2;
  }
  if (std::string err = rdmaplane::fault::ParseFaultSpec(
          absl::GetFlag(FLAGS_link_faults), &options.link_faults);
      !err.empty()) {
    std::fprintf(stderr, "rdmaplaned: --link_faults: %s\n", err.c_str());
    return 2;
  }
  options.max_registrations = absl::GetFlag(FLAGS_max_registrations);
  options.max_registrations_per_session =
      absl::GetFlag(FLAGS_max_registrations_per_session);
  options.max_arenas_per_session = absl::GetFlag(FLAGS_max_arenas_per_session);
  if (options.max_arenas_per_session == 0 ||
      options.max_arenas_per_session > 4096) {
    std::fprintf(stderr,
                 "rdmaplaned: --max_arenas_per_session must be 1..4096\n");
    return 2;
  }
  options.max_connections = absl::GetFlag(FLAGS_max_connections);
  if (options.max_connections == 0 || options.max_connections > 65536) {
    std::fprintf(stderr, "rdmaplaned: --max_connections must be 1..65536\n");
    return 2;
  }
  rdmaplane::control::UserLimits& limits = options.user_limits;
  limits.sessions = absl::GetFlag(FLAGS_max_sessions_per_user);
  limits.arenas = absl::GetFlag(FLAGS_max_arenas_per_user);
  limits.arena_bytes = absl::GetFlag(FLAGS_max_arena_bytes_per_user);
  if (limits.arena_bytes == 0) {
    limits.arena_bytes = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
                         static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  }
  limits.registrations = absl::GetFlag(FLAGS_max_registrations_per_user);
  limits.connections = absl::GetFlag(FLAGS_max_connections_per_user);
  options.burst = absl::GetFlag(FLAGS_burst);
  if (options.burst == 0 || options.burst > 256) {
    std::fprintf(stderr, "rdmaplaned: --burst must be 1..256\n");
    return 2;
  }
  options.path_mtu = absl::GetFlag(FLAGS_mtu);
  const uint32_t m = options.path_mtu;
  if (m != 0 && m != 256 && m != 512 && m != 1024 && m != 2048 && m != 4096) {
    std::fprintf(stderr,
                 "rdmaplaned: --mtu must be 256..4096, a power of 2, or 0 "
                 "(the largest the data port carries)\n");
    return 2;
  }
  const uint32_t rto_us = absl::GetFlag(FLAGS_retransmit_timeout_us);
  if (rto_us < 100 || rto_us > 10'000'000) {
    std::fprintf(stderr,
                 "rdmaplaned: --retransmit_timeout_us must be 100..10000000\n");
    return 2;
  }
  options.remote_retransmit_timeout_ns = uint64_t{rto_us} * 1000;
  rdmaplane::control::LogLevel level;
  if (!rdmaplane::control::ParseLogLevel(absl::GetFlag(FLAGS_log_level),
                                         &level)) {
    std::fprintf(stderr,
                 "rdmaplaned: --log_level is debug, info, warning or error\n");
    return 2;
  }
  rdmaplane::control::SetLogLevel(level);
  rdmaplane::control::DataPortOptions& port = options.port;
  port.device = absl::GetFlag(FLAGS_port);
  const std::string ip = absl::GetFlag(FLAGS_ip);
  if (!ip.empty()) {
    in_addr a{};
    if (inet_pton(AF_INET, ip.c_str(), &a) != 1 || a.s_addr == 0) {
      std::fprintf(stderr, "rdmaplaned: --ip is an IPv4 address, got '%s'\n",
                   ip.c_str());
      return 2;
    }
    port.ip = ntohl(a.s_addr);
  }
  if (!port.device.empty() && port.ip == 0) {
    std::fprintf(stderr, "rdmaplaned: --port needs --ip\n");
    return 2;
  }
  if (const std::string mac = absl::GetFlag(FLAGS_mac); !mac.empty()) {
    rdmaplane::wire::MacAddr addr;
    unsigned b[6];
    char tail;
    if (std::sscanf(mac.c_str(), "%x:%x:%x:%x:%x:%x%c", &b[0], &b[1], &b[2],
                    &b[3], &b[4], &b[5], &tail) != 6 ||
        std::any_of(b, b + 6, [](unsigned v) { return v > 255; }) ||
        (b[0] & 1) != 0) {
      std::fprintf(stderr,
                   "rdmaplaned: --mac is a unicast MAC like 02:00:00:00:00:01\n");
      return 2;
    }
    for (int i = 0; i < 6; ++i) addr.bytes[i] = static_cast<uint8_t>(b[i]);
    port.mac = addr;
  }
  port.hugepages = absl::GetFlag(FLAGS_hugepages);
  port.memory_mb = absl::GetFlag(FLAGS_memory_mb);
  port.mbufs = absl::GetFlag(FLAGS_mbufs);
  if (port.mbufs < 1023) {
    std::fprintf(stderr, "rdmaplaned: --mbufs must be at least 1023\n");
    return 2;
  }
  port.control_lcore = absl::GetFlag(FLAGS_control_lcore);
  if (std::string err = ParseEngineCpus(absl::GetFlag(FLAGS_engine_lcores),
                                        absl::GetFlag(FLAGS_engines),
                                        port.device.empty()
                                            ? -1
                                            : port.control_lcore,
                                        &options);
      !err.empty()) {
    std::fprintf(stderr, "rdmaplaned: %s\n", err.c_str());
    return 2;
  }
  port.file_prefix = absl::GetFlag(FLAGS_file_prefix);
  if (port.file_prefix.empty() ||
      port.file_prefix.find('/') != std::string::npos) {
    std::fprintf(stderr, "rdmaplaned: --file_prefix is a plain name\n");
    return 2;
  }
  for (absl::string_view a : absl::StrSplit(absl::GetFlag(FLAGS_eal_args), ' ',
                                            absl::SkipEmpty())) {
    port.eal_args.emplace_back(a);
  }
  const std::string zero_copy = absl::GetFlag(FLAGS_zero_copy);
  if (zero_copy != "auto" && zero_copy != "off") {
    std::fprintf(stderr, "rdmaplaned: --zero_copy is auto or off\n");
    return 2;
  }
  port.zero_copy = zero_copy == "auto";
  if (std::string err = rdmaplane::fault::ParseFaultSpec(
          absl::GetFlag(FLAGS_port_faults), &port.faults);
      !err.empty()) {
    std::fprintf(stderr, "rdmaplaned: --port_faults: %s\n", err.c_str());
    return 2;
  }
  if (absl::GetFlag(FLAGS_check_config)) {
    std::printf("socket=%s\npoll_mode=%s\nmtu=%s\nport=%s\nip=%s\n"
                "hugepages=%d\nburst=%u\nengines=%u\nengine_lcores=%s\nfile_prefix=%s\n"
                "max_connections=%u\nmax_registrations=%u\n"
                "max_sessions_per_user=%llu\nmax_arenas_per_user=%llu\n"
                "max_arena_bytes_per_user=%llu\n"
                "max_registrations_per_user=%llu\n"
                "max_connections_per_user=%llu\nconfig: ok\n",
                options.socket_path.empty() ? "(default)"
                                            : options.socket_path.c_str(),
                mode.c_str(),
                options.path_mtu == 0 ? "auto"
                                      : absl::StrCat(options.path_mtu).c_str(),
                port.device.empty() ? "(none)" : port.device.c_str(),
                ip.empty() ? "(none)" : ip.c_str(), port.hugepages ? 1 : 0,
                options.burst, options.engines,
                options.engine_cpus.empty()
                    ? "(not pinned)"
                    : absl::StrJoin(options.engine_cpus, ",").c_str(),
                port.file_prefix.c_str(),
                options.max_connections, options.max_registrations,
                static_cast<unsigned long long>(limits.sessions),
                static_cast<unsigned long long>(limits.arenas),
                static_cast<unsigned long long>(limits.arena_bytes),
                static_cast<unsigned long long>(limits.registrations),
                static_cast<unsigned long long>(limits.connections));
    return 0;
  }

  // SIGTERM and SIGINT end the daemon cleanly; they are taken synchronously.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  // Every session holds a few descriptors and every arena one, and
  // af_packet's rings are locked in memory (about 32 MiB at path MTU 4096):
  // take all the hard limits allow (systemd's LimitNOFILE and LimitMEMLOCK
  // set them).
  if (const auto files = RaiseSoftLimit(RLIMIT_NOFILE)) {
    RDP_LOG(kInfo, "open-file limit %llu",
            static_cast<unsigned long long>(*files));
  }
  if (const auto locked = RaiseSoftLimit(RLIMIT_MEMLOCK)) {
    RDP_LOG(kInfo, "locked-memory limit %llu bytes",
            static_cast<unsigned long long>(*locked));
  }

  rdmaplane::control::Daemon daemon(options);
  if (absl::Status s = daemon.Start(); !s.ok()) {
    std::fprintf(stderr, "rdmaplaned: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  RDP_LOG(kInfo, "serving %s%s%s",
          daemon.socket_path().c_str(),
          port.device.empty() ? "" : ", data port ",
          port.device.empty() ? "" : (port.device + " " + ip).c_str());
  int sig = 0;
  sigwait(&stop_signals, &sig);
  RDP_LOG(kInfo, "signal %d, shutting down",
          sig);
  daemon.Stop();
  return 0;
}
