#!/usr/bin/python3
"""Reads the daemon status JSON back with Python's json module: every topic
must be strict JSON in UTF-8, and every odd service name must come back
byte for byte."""
import json
import subprocess
import sys


def main():
    out = subprocess.run([sys.argv[1]], check=True, stdout=subprocess.PIPE).stdout
    lines = out.split(b"\n")
    assert lines[-1] == b"", "output must end in a newline"
    fields = dict(line.split(b"\t", 1) for line in lines[:-1])
    names = [bytes.fromhex(h.decode()) for h in fields.pop(b"names").split(b",")]
    topics = {}
    for topic, text in fields.items():
        # Strict: no NaN, no duplicate keys, UTF-8 only.
        def no_duplicates(pairs):
            keys = [k for k, _ in pairs]
            assert len(keys) == len(set(keys)), f"duplicate keys in {topic}"
            return dict(pairs)

        topics[topic.decode()] = json.loads(
            text.decode("utf-8", errors="strict"),
            object_pairs_hook=no_duplicates,
            parse_constant=lambda c: sys.exit(f"non-JSON constant {c}"))
    assert sorted(topics) == sorted(
        ["status", "clients", "connections", "registrations", "counters"]), topics

    connections = topics["connections"]
    assert len(connections) == len(names), (len(connections), len(names))
    for conn, name in zip(connections, names):
        got = conn["service"].encode("utf-8")
        assert got == name, f"service {got!r} != {name!r}"
        assert conn["tx_packets"] == 2**64 - 1
    status = topics["status"]
    assert status["version"] == '0.3.1 "dev"', status
    assert status["connections"] == len(names)
    assert status["pid"] == 4242
    assert topics["counters"]["sessions_reclaimed"] == 2**64 - 1
    assert list(topics["counters"]) == [
        "port_rx_frames", "engine_sleeps", "sessions_reclaimed"]
    assert topics["clients"][0]["arena_bytes"] == 64 << 20
    assert topics["registrations"][1]["address"] == 0x7F0000002000
    print("ok:", ", ".join(sorted(topics)))


if __name__ == "__main__":
    main()
