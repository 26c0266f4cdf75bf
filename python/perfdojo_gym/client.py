"""The bridge protocol (docs/bridge.md): framing, requests, and a local `perfdojo serve`.

A frame is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON. Every request
carries an "id"; every reply echoes it with {"ok": true, "result": ...} or
{"ok": false, "error": {"type": ..., "message": ...}}.
"""

from __future__ import annotations

import atexit
import json
import os
import secrets
import select
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional

PROTOCOL_VERSION = 1
_yield = getattr(os, "sched_yield", lambda: None)  # not on every platform
_HEADER = struct.Struct(">I")
_READ_BYTES = 1 << 16  # the receive buffer; grows for a larger reply
_KEEP_BYTES = 1 << 20  # beyond this it goes back to _READ_BYTES once emptied


class BridgeError(RuntimeError):
    """The server answered a request with an error reply."""

    def __init__(self, type_: str, message: str):
        super().__init__(f"{type_}: {message}")
        self.type = type_
        self.message = message


class BridgeConnectionError(ConnectionError):
    """The connection to the server failed or was closed."""


def parse_address(address) -> tuple[str, int]:
    """"host:port", "[v6]:port" or a (host, port) pair."""
    if isinstance(address, (tuple, list)):
        host, port = address
        return str(host), int(port)
    text = str(address)
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        return host, int(rest.lstrip(":"))
    host, sep, port = text.rpartition(":")
    if not sep:
        raise ValueError(f"address {text!r} must look like HOST:PORT")
    return host, int(port)


class Client:
    """One connection to a bridge server. Thread-safe: requests are serialised by a lock."""

    def __init__(self, host: str, port: int, token: Optional[str] = None,
                 connect_timeout: float = 10.0, timeout: Optional[float] = None):
        try:
            self._sock = socket.create_connection((host, port), timeout=connect_timeout)
        except OSError as e:
            raise BridgeConnectionError(f"cannot connect to {host}:{port}: {e}") from e
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock.settimeout(timeout)
        self._lock = threading.Lock()
        self._next_id = 1
        # Received bytes not handed out yet: _rbuf[_rlo:_rhi]. One recv usually brings a whole
        # reply, header and body, where reading them apart took two system calls.
        self._rbuf = bytearray(_READ_BYTES)
        self._rlo = self._rhi = 0
        # Seconds to poll for a reply before blocking: 0.3 ms by default where the process may
        # use two cores or more ($PERFDOJO_POLL_US sets microseconds; 0 turns it off).
        poll_us = os.environ.get("PERFDOJO_POLL_US")
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        self.poll_s = (float(poll_us) if poll_us else (300.0 if cores >= 2 else 0.0)) * 1e-6
        self.closed = False
        self.address = (host, port)
        hello = {"version": PROTOCOL_VERSION, "client": "perfdojo_gym"}
        if token is not None:
            hello["token"] = token
        self.server_info = self.request("hello", **hello)

    def supports(self, extension: str) -> bool:
        """Whether the server's hello names `extension` (an optional request field added within
        this protocol version, e.g. "observation_format"); older servers name none."""
        return extension in (self.server_info.get("extensions") or ())

    def request(self, op: str, **fields: Any) -> Any:
        """Sends one request and returns its result; raises BridgeError on an error reply."""
        with self._lock:
            if self.closed:
                raise BridgeConnectionError("the connection is closed")
            rid = self._next_id
            self._next_id += 1
            msg = {"id": rid, "op": op}
            for k, v in fields.items():
                if v is not None:
                    msg[k] = v
            body = json.dumps(msg, separators=(",", ":")).encode()
            try:
                self._sock.sendall(_HEADER.pack(len(body)) + body)
                while True:
                    reply = json.loads(self._read_frame())
                    if reply.get("id") == rid:
                        break
                    if reply.get("id") is None and not reply.get("ok", True):
                        # A connection-level error (idle timeout, oversized frame): the server closes.
                        self._close_locked()
                        err = reply["error"]
                        raise BridgeError(err["type"], err["message"])
            except (OSError, ValueError) as e:
                self._close_locked()
                raise BridgeConnectionError(f"lost the connection to the server: {e}") from e
        if reply.get("ok"):
            return reply.get("result")
        err = reply.get("error") or {}
        raise BridgeError(err.get("type", "unknown"), err.get("message", ""))

    def request_binary(self, body: bytes) -> bytearray:
        """Sends one binary frame (docs/bridge.md, "Binary frames") and returns the reply body.

        A frame the server refuses as a whole is answered in JSON: that raises BridgeError."""
        with self._lock:
            if self.closed:
                raise BridgeConnectionError("the connection is closed")
            try:
                self._sock.sendall(_HEADER.pack(len(body)) + body)
                reply = self._read_frame()
            except OSError as e:
                self._close_locked()
                raise BridgeConnectionError(f"lost the connection to the server: {e}") from e
        if reply[:1] == b"{":
            doc = json.loads(reply)
            if doc.get("id") is None:
                self.close()
            err = doc.get("error") or {}
            raise BridgeError(err.get("type", "unknown"), err.get("message", ""))
        return reply

    def _recv_some(self, view: memoryview, block: bool) -> int:
        """Bytes received into `view` (0: none ready, when not blocking)."""
        try:
            n = self._sock.recv_into(view, 0, 0 if block else socket.MSG_DONTWAIT)
        except BlockingIOError:
            return 0
        if n == 0:
            raise ConnectionError("the server closed the connection")
        return n

    def _fill(self, need: int) -> None:
        """Receives until at least `need` bytes are buffered."""
        if self._rhi - self._rlo >= need:
            return
        if self._rlo + need > len(self._rbuf):  # make room: move what is held to the front
            held = self._rbuf[self._rlo:self._rhi]
            if need > len(self._rbuf):
                self._rbuf = bytearray(max(need, 2 * len(self._rbuf)))
            self._rbuf[:len(held)] = held
            self._rlo, self._rhi = 0, len(held)
        view = memoryview(self._rbuf)
        if self.poll_s > 0:
            # A reply usually comes within a step's time: ask without sleeping for a while first
            # (waking a sleeping thread costs tens of microseconds on virtual machines).
            deadline = time.perf_counter() + self.poll_s
            while self._rhi - self._rlo < need:
                n = self._recv_some(view[self._rhi:], False)
                if n:
                    self._rhi += n
                elif time.perf_counter() > deadline:
                    break
                else:
                    _yield()  # let other runnable processes have the core meanwhile
        while self._rhi - self._rlo < need:
            self._rhi += self._recv_some(view[self._rhi:], True)

    def _read_frame(self) -> bytearray:
        self._fill(4)
        (n,) = _HEADER.unpack_from(self._rbuf, self._rlo)
        self._fill(4 + n)
        start = self._rlo + 4
        body = self._rbuf[start:start + n]  # a copy: the frame's own, writable memory
        self._rlo = start + n
        if self._rlo == self._rhi:
            self._rlo = self._rhi = 0
            if len(self._rbuf) > _KEEP_BYTES:  # a large reply's buffer is not kept
                self._rbuf = bytearray(_READ_BYTES)
        return body

    def _close_locked(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self._sock.close()
            except OSError:
                pass

    def close(self) -> None:
        with self._lock:
            self._close_locked()


def find_binary(explicit: Optional[str] = None) -> str:
    """The `perfdojo` executable: explicit path, $PERFDOJO_BIN_DIR, the repository's build/bin,
    then PATH."""
    candidates = []
    if explicit:
        candidates.append(Path(explicit))
    if os.environ.get("PERFDOJO_BIN_DIR"):
        candidates.append(Path(os.environ["PERFDOJO_BIN_DIR"]) / "perfdojo")
    # python/perfdojo_gym/client.py -> repository root
    candidates.append(Path(__file__).resolve().parents[2] / "build" / "bin" / "perfdojo")
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    found = shutil.which("perfdojo")
    if found:
        return found
    raise FileNotFoundError(
        "cannot find the perfdojo executable: build it (scripts/bootstrap), set PERFDOJO_BIN_DIR, "
        "or pass address= to connect to a running server; looked at "
        + ", ".join(str(c) for c in candidates))


class LocalServer:
    """A private `perfdojo serve` on 127.0.0.1 with a random port and token.

    The server watches its stdin, so it exits when this process dies however it dies.
    """

    def __init__(self, binary: Optional[str] = None, args: tuple = (), startup_timeout: float = 60.0):
        exe = find_binary(binary)
        self.token = secrets.token_hex(16)
        tmp = tempfile.mkdtemp(prefix="perfdojo-token-")
        token_file = os.path.join(tmp, "token")
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.token)
        cmd = [exe, "serve", "--host", "127.0.0.1", "--port", "0", "--json", "--stdin-watch",
               "--allow-files", "--token-file", token_file, *args]
        # stderr goes to a file: quiet in the user's terminal, yet there to quote if it fails.
        self._stderr = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=self._stderr, close_fds=True)
            line = self._first_line(startup_timeout)
        finally:
            # The server has read the token (or failed); the file is no longer needed.
            shutil.rmtree(tmp, ignore_errors=True)
        try:
            info = json.loads(line)
            self.host, self.port = info["host"], int(info["port"])
        except (ValueError, KeyError) as e:
            self.close()
            raise RuntimeError(f"`{' '.join(cmd)}` did not report its port: {line!r}") from e
        self.pid = os.getpid()  # the process that owns this server

    def _first_line(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        buf = b""
        fd = self.proc.stdout.fileno()
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                raise TimeoutError(f"perfdojo serve did not start within {timeout} s")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                code = self.proc.wait()
                raise RuntimeError(f"perfdojo serve exited with status {code} before listening: "
                                   f"{self.stderr_text().strip()}")
            buf += chunk
        return buf.split(b"\n", 1)[0].decode()

    def stderr_text(self) -> str:
        """What the server wrote on stderr so far (warnings, its closing summary)."""
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()  # --stdin-watch: a clean shutdown
            except OSError:
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self._stderr):
            try:
                if f:
                    f.close()
            except OSError:
                pass


# One shared local server per process and argument list, reference-counted: many envs in one
# process share it; a forked child (multiprocessing) starts its own.
_servers: dict = {}
_servers_lock = threading.Lock()


def acquire_local_server(args: tuple = (), binary: Optional[str] = None) -> LocalServer:
    key = (tuple(args), binary, os.getpid())
    with _servers_lock:
        entry = _servers.get(key)
        if entry is not None and entry[0].alive():
            entry[1] += 1
            return entry[0]
        server = LocalServer(binary, tuple(args))
        _servers[key] = [server, 1]
        return server


def release_local_server(server: LocalServer) -> None:
    with _servers_lock:
        for key, entry in list(_servers.items()):
            if entry[0] is server:
                entry[1] -= 1
                if entry[1] <= 0:
                    del _servers[key]
                    server.close()
                return
    if server.pid == os.getpid():
        server.close()


@atexit.register
def _close_all_servers() -> None:
    with _servers_lock:
        entries = [e for k, e in _servers.items() if k[2] == os.getpid()]
        _servers.clear()
    for server, _ in entries:
        server.close()


class SharedServer:
    """One local server for this process and every process it starts afterwards.

    Worker processes of SubprocVecEnv (Stable-Baselines3) or AsyncVectorEnv (Gymnasium) would
    each start a private server; inside `with SharedServer():` they inherit
    $PERFDOJO_BRIDGE_ADDRESS and $PERFDOJO_BRIDGE_TOKEN instead and all connect to this one,
    started once. The variables are restored and the server released on exit.
    """

    def __init__(self, server_args: tuple = ()):
        self._args = tuple(server_args)
        self.server: Optional[LocalServer] = None
        self._saved: dict = {}

    @property
    def address(self) -> str:
        return f"{self.server.host}:{self.server.port}"

    def __enter__(self) -> "SharedServer":
        self.server = acquire_local_server(self._args)
        for key in ("PERFDOJO_BRIDGE_ADDRESS", "PERFDOJO_BRIDGE_TOKEN"):
            self._saved[key] = os.environ.get(key)
        os.environ["PERFDOJO_BRIDGE_ADDRESS"] = self.address
        os.environ["PERFDOJO_BRIDGE_TOKEN"] = self.server.token
        return self

    def __exit__(self, *exc) -> None:
        for key, value in self._saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if self.server is not None:
            release_local_server(self.server)
            self.server = None
