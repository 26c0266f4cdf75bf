#!/usr/bin/env python3
"""Flood a `perfdojo serve` with unauthenticated clients and watch its memory.

Usage:
  benchmarks/bridge_flood.py [--connections 1000] [--seconds 10] [--announce BYTES] [--token] [--json]

Starts `perfdojo serve` (build/bin, or $PERFDOJO_BIN_DIR), opens CONNECTIONS sockets that never
finish a handshake: each sends a frame header announcing 8 MiB, then the first bytes of a body,
then nothing (the unfinished frames that grew the server's memory before handshakes had a frame
limit of their own); `--announce 4000` announces a frame just under that limit instead, which
the server must hold until the frame timeout or until it needs the connection's place. While they hold on, a real client connects every half second, shakes hands
(with the token when --token), makes a session, steps and closes. The server's resident memory
(VmRSS) is sampled throughout. Prints the largest RSS, how many real clients were served and how
many flood connections the server closed; exit 1 when the RSS reached 64 MiB or a real client
was not served.
"""
import argparse
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def frame(obj):
    body = json.dumps(obj).encode()
    return struct.pack(">I", len(body)) + body


def recv_frame(sock, timeout=10.0):
    sock.settimeout(timeout)
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    n = struct.unpack(">I", head)[0]
    body = b""
    while len(body) < n:
        chunk = sock.recv(n - len(body))
        if not chunk:
            return None
        body += chunk
    return json.loads(body)


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def real_client(port, token):
    """hello, make, three steps, close: True when every reply is ok."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            hello = {"id": 0, "op": "hello", "version": 1}
            if token:
                hello["token"] = token
            s.sendall(frame(hello))
            if not (recv_frame(s) or {}).get("ok"):
                return False
            s.sendall(frame({"id": 1, "op": "make",
                             "config": {"benchmark": "perfdojo://gen/softmax?seed=1"}}))
            made = recv_frame(s) or {}
            if not made.get("ok"):
                return False
            sid = made["result"]["session"]
            for i in range(3):
                s.sendall(frame({"id": 2 + i, "op": "step", "session": sid, "action": 0}))
                if not (recv_frame(s) or {}).get("ok"):
                    return False
            s.sendall(frame({"id": 9, "op": "close", "session": sid}))
            return bool((recv_frame(s) or {}).get("ok"))
    except OSError:
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--announce", type=int, default=8 << 20, help="frame length each flood header announces")
    ap.add_argument("--token", action="store_true", help="run the server with --token-file")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    bin_dir = Path(os.environ.get("PERFDOJO_BIN_DIR") or ROOT / "build" / "bin")
    cmd = [str(bin_dir / "perfdojo"), "serve", "--port", "0", "--json", "--log-level", "0"]
    token = None
    tmp = tempfile.TemporaryDirectory()
    if args.token:
        token = "flood-test-token"
        tf = Path(tmp.name) / "token"
        tf.write_text(token)
        cmd += ["--token-file", str(tf)]
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        port = json.loads(server.stdout.readline())["port"]
        base = rss_mib(server.pid)
        flood, peak = [], base
        partial = struct.pack(">I", args.announce) + b'{"id":0,"op":"hello","pad":"' + b"x" * 1000
        for _ in range(args.connections):
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                s.setblocking(False)
                try:
                    s.send(partial)
                except OSError:
                    pass
                flood.append(s)
            except OSError:
                break
            peak = max(peak, rss_mib(server.pid))
        served = tried = 0
        deadline = time.time() + args.seconds
        while time.time() < deadline:
            tried += 1
            served += real_client(port, token)
            peak = max(peak, rss_mib(server.pid))
            time.sleep(0.5)
        closed = 0  # answered (frame_too_large, server_busy) or closed outright
        for s in flood:
            try:
                s.recv(1 << 16)
                closed += 1
            except BlockingIOError:
                pass
            except OSError:
                closed += 1
            s.close()
        result = {"connections": len(flood), "announced_bytes": args.announce, "token": bool(token),
                  "rss_start_mib": round(base, 1),
                  "rss_peak_mib": round(peak, 1), "real_clients": tried,
                  "real_clients_served": served, "flood_closed_by_server": closed}
    finally:
        server.terminate()
        server.wait(timeout=30)
    ok = result["rss_peak_mib"] < 64 and served == tried and tried > 0
    if args.json:
        print(json.dumps(dict(result, ok=ok)))
    else:
        print(f"{result['connections']} connections with an unfinished {args.announce}-byte frame "
              f"({'token' if token else 'no token'}): server RSS {result['rss_start_mib']} -> "
              f"peak {result['rss_peak_mib']} MiB; real clients served {served}/{tried}; "
              f"{closed} flood connections closed by the server: "
              + ("ok" if ok else "FAILED (64 MiB and every real client are the bar)"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
