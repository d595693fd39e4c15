#!/usr/bin/python3
"""Checks what an operator sees of a live rdmaplaned that has a data port and
one client holding a connection to a peer daemon (observe_test.sh):
rdmaplanectl's status, clients, connections, registrations and counters
(JSON and tables), and the same through DPDK telemetry, read over the
daemon's dpdk_telemetry.v2 socket (SOCK_SEQPACKET: a hello, then one JSON
reply per command), with DPDK's own /ethdev/stats beside them.

  observe_check.py --ctl=RDMAPLANECTL --socket=SOCK --telemetry=TSOCK
      --daemon_pid=N --client_pid=N --desc=DIR/NAME.desc --ip=A.B.C.D
      --peer_ip=A.B.C.D --mtu=N --service=NAME --data_port=SPEC

DESC is the file in which the client (kill_client) published the address
and length of the buffer it registered. Prints one line per check; the last
line is "observe_check: qpns LOCAL REMOTE" (the connection's queue pair
numbers, for the caller to compare with the peer's). Exits 1 when a check
failed.
"""
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time

FAILURES = []


def check(condition, what):
    print(("ok: " if condition else "FAIL: ") + what)
    if not condition:
        FAILURES.append(what)
    return condition


def ctl(args, topic, as_json=True):
    command = [args.ctl, f"--socket={args.socket}", "--timeout=5s"]
    if as_json:
        command.append("--json")
    out = subprocess.run(command + [topic], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, timeout=15, check=False)
    text = out.stdout.decode()
    if out.returncode != 0:
        sys.exit(f"FAIL: rdmaplanectl {topic}: exit status {out.returncode}: {text}")
    return json.loads(text) if as_json else text


def telemetry(path, commands):
    """The hello and {command: value} for each command, on one connection."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.settimeout(10)
        s.connect(path)
        hello = json.loads(s.recv(1 << 16))
        replies = {}
        for command in commands:
            s.send(command.encode())
            reply = json.loads(s.recv(1 << 16))
            # The reply names its command without the parameters.
            replies[command] = reply[command.split(",")[0]]
        return hello, replies


def main():
    p = argparse.ArgumentParser()
    for flag in ("ctl", "socket", "telemetry", "desc", "ip", "peer_ip",
                 "service", "data_port"):
        p.add_argument(f"--{flag}", required=True)
    for flag in ("daemon_pid", "client_pid", "mtu"):
        p.add_argument(f"--{flag}", required=True, type=int)
    args = p.parse_args()
    with open(args.desc, encoding="ascii") as f:
        _, address, length = f.read().split()
    address, length = int(address), int(length)

    # --- rdmaplanectl, JSON -------------------------------------------------
    status = ctl(args, "status")
    check(status["pid"] == args.daemon_pid, f"status: pid {status['pid']}")
    check(status["version"] != "", f"status: version {status['version']}")
    check(isinstance(status["uptime_s"], int) and status["uptime_s"] >= 0,
          f"status: uptime {status['uptime_s']} s")
    check(status["socket"] == args.socket, f"status: socket {status['socket']}")
    check(status["data_port"] == args.data_port,
          f"status: data port {status['data_port']}")
    check(status["ip"] == args.ip, f"status: ip {status['ip']}")
    check(re.fullmatch(r"[0-9a-f]{2}(:[0-9a-f]{2}){5}", status["mac"]) is not None
          and int(status["mac"][:2], 16) & 1 == 0, f"status: mac {status['mac']}")
    check(status["mtu"] == args.mtu, f"status: mtu {status['mtu']}")
    check(status["link"] == "up", f"status: link {status['link']}")
    check(status["poll_mode"] == "adaptive", f"status: poll mode {status['poll_mode']}")
    check((status["clients"], status["connections"], status["registrations"]) == (1, 1, 2),
          f"status: {status['clients']} clients, {status['connections']} connections, "
          f"{status['registrations']} registrations (1, 1, 2 expected)")

    clients = ctl(args, "clients")
    check(len(clients) == 1, f"clients: {len(clients)} rows")
    client = clients[0]
    check(client["pid"] == args.client_pid, f"clients: pid {client['pid']} (the client's)")
    check(client["uid"] == os.getuid(), f"clients: uid {client['uid']} (the client's)")
    check((client["connections"], client["registrations"], client["arenas"]) == (1, 2, 1),
          f"clients: {client['connections']} connections, {client['registrations']} "
          f"registrations, {client['arenas']} arenas (1, 2, 1 expected)")
    check(client["arena_bytes"] >= length,
          f"clients: arena of {client['arena_bytes']} bytes holds the {length}-byte buffer")

    connections = ctl(args, "connections")
    check(len(connections) == 1, f"connections: {len(connections)} rows")
    conn = connections[0]
    check(conn["session_id"] == client["session_id"],
          f"connections: session {conn['session_id']} (the client's)")
    check(conn["service"] == args.service, f"connections: service {conn['service']}")
    check(conn["peer"] == args.peer_ip, f"connections: peer {conn['peer']}")
    check(conn["state"] == "up", f"connections: state {conn['state']}")
    check(conn["local_qpn"] >= 2 and conn["remote_qpn"] >= 2,
          f"connections: QPNs {conn['local_qpn']} and {conn['remote_qpn']}")
    check(conn["posted"] == 0 and conn["completed"] == 0,
          "connections: nothing posted yet (an idle client)")

    registrations = ctl(args, "registrations")
    check(len(registrations) == 2, f"registrations: {len(registrations)} rows")
    local = [r for r in registrations if r["connection"] == 0]
    remote = [r for r in registrations if r["connection"] != 0]
    check(len(local) == 1 and len(remote) == 1,
          "registrations: one local key and one for the connection")
    for r in registrations:
        kind = "local key" if r["connection"] == 0 else "connection's"
        check(r["session_id"] == client["session_id"],
              f"registrations: {kind} belongs to session {r['session_id']}")
        check(r["address"] == address and r["length"] == length,
              f"registrations: {kind} covers {r['length']} bytes at {r['address']:#x} "
              f"(the client published {length} at {address:#x})")
        check(r["refs"] == 1, f"registrations: {kind} has {r['refs']} references")
    if remote:
        check(remote[0]["connection"] == conn["id"],
              f"registrations: the connection's names connection {remote[0]['connection']}, "
              f"the id connections shows is {conn['id']}")
        check(remote[0]["access"] == 3,
              f"registrations: the connection's grants access {remote[0]['access']} "
              "(3: read and write)")

    counters = ctl(args, "counters")
    check((counters["sessions"], counters["connections"], counters["registrations"],
           counters["arenas"]) == (1, 1, 2, 1),
          "counters: 1 session, 1 connection, 2 registrations, 1 arena")
    check(counters["port_rx_frames"] > 0 and counters["port_tx_frames"] > 0,
          f"counters: {counters['port_rx_frames']} frames received, "
          f"{counters['port_tx_frames']} sent on the port")

    # --- rdmaplanectl, tables -----------------------------------------------
    text = ctl(args, "status", as_json=False)
    check(re.search(rf"^pid +{args.daemon_pid}$", text, re.M) is not None and
          re.search(rf"^mtu +{args.mtu}$", text, re.M) is not None and
          re.search(rf"^ip +{re.escape(args.ip)}$", text, re.M) is not None,
          "status table: pid, mtu and ip")
    text = ctl(args, "clients", as_json=False)
    check(re.search(rf"^ +{client['session_id']} +{args.client_pid} ", text, re.M)
          is not None, "clients table: the client's session and pid")
    text = ctl(args, "connections", as_json=False)
    check(re.search(rf" {re.escape(args.service)} +{re.escape(args.peer_ip)} +up ", text)
          is not None, "connections table: service, peer and state")

    # --- DPDK telemetry -----------------------------------------------------
    # Telemetry answers from a copy the daemon refreshes every 200 ms or so:
    # poll until it shows the client. The deadline only turns a hang into a
    # failure: generous, for a machine busy with other builds and tests.
    deadline = time.monotonic() + 30
    while True:
        _, t = telemetry(args.telemetry, ["/rdmaplane/status"])
        ts = t["/rdmaplane/status"]
        if (ts["clients"], ts["connections"], ts["registrations"]) == (1, 1, 2):
            break
        if time.monotonic() > deadline:
            check(False, f"telemetry: /rdmaplane/status shows the client within 30 s: {ts}")
            break
        time.sleep(0.1)
    topics = ["status", "clients", "connections", "registrations", "counters"]
    hello, t = telemetry(args.telemetry,
                         ["/"] + [f"/rdmaplane/{x}" for x in topics] + ["/ethdev/stats,0"])
    check(hello["pid"] == args.daemon_pid and hello["version"].startswith("DPDK "),
          f"telemetry: hello from pid {hello['pid']}, {hello['version']}")
    check(all(f"/rdmaplane/{x}" in t["/"] for x in topics),
          "telemetry: / lists the five /rdmaplane commands")
    ts = t["/rdmaplane/status"]
    check(all(ts[k] == status[k] for k in status
              if k not in ("uptime_s", "link_since_s")),
          f"telemetry: /rdmaplane/status matches rdmaplanectl status: {ts}")
    check(list(t["/rdmaplane/clients"].values()) == clients,
          "telemetry: /rdmaplane/clients matches rdmaplanectl clients")
    tc = list(t["/rdmaplane/connections"].values())
    check(len(tc) == 1 and all(tc[0][k] == conn[k] for k in
                               ("id", "session_id", "service", "peer", "state",
                                "local_qpn", "remote_qpn")),
          "telemetry: /rdmaplane/connections matches rdmaplanectl connections")
    check(sorted(t["/rdmaplane/registrations"].values(), key=lambda r: r["key"]) ==
          sorted(registrations, key=lambda r: r["key"]),
          "telemetry: /rdmaplane/registrations matches rdmaplanectl registrations")
    tk = t["/rdmaplane/counters"]
    check(sorted(tk) == sorted(counters), "telemetry: the same counters as rdmaplanectl")
    steady = ("sessions", "connections", "registrations", "arenas", "remote_accepts",
              "remote_connects", "sessions_reclaimed")
    check(all(tk[k] == counters[k] for k in steady),
          "telemetry: sessions, connections, registrations, arenas and the CM counts "
          "as rdmaplanectl shows them")
    # Telemetry's copy is never ahead of a later rdmaplanectl reading. (The
    # counters only grow, so no pause is needed between the readings: the
    # check holds however soon the later one comes.)
    later = ctl(args, "counters")
    moving = ("port_rx_frames", "port_tx_frames", "engine_loops", "control_requests")
    check(all(counters[k] <= later[k] and tk[k] <= later[k] for k in moving) and
          tk["engine_loops"] > 0,
          "telemetry: the moving counters (frames, engine loops, control requests) "
          "lie between two rdmaplanectl readings' ends")
    stats = t["/ethdev/stats,0"]
    check(stats["ipackets"] > 0 and stats["opackets"] > 0,
          f"telemetry: /ethdev/stats,0: {stats['ipackets']} packets in, "
          f"{stats['opackets']} out")

    if FAILURES:
        print(f"observe_check: {len(FAILURES)} check(s) failed")
        return 1
    print(f"observe_check: qpns {conn['local_qpn']} {conn['remote_qpn']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
