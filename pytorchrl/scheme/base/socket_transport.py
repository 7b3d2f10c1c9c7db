"""A side door to an inference server: method calls over a plain socket, a Unix socket on the
server's node and TCP from other nodes (ARCHITECTURE.md, decisions 50 and 51).

A Ray actor call costs each side a fixed amount of CPU (serialising, Ray's executor and gRPC
threads, the GIL handed between them): on a 2-core machine ~2 ms a side per call, paid on every
env step of every central-inference worker. A torch-free collection worker can skip it:
:class:`SocketListener` (in the server's process) answers length-prefixed pickled
``(method, args)`` messages in one event loop over all client connections, and :class:`SocketCall` (in the
worker) sends them.

* **Where.** The listener binds a Unix socket (on Linux in the abstract namespace: no file to clean
  up, it goes with the process) and, given a host, a TCP port on it. :meth:`SocketListener.endpoint`
  says where; the client asks the server for it through Ray and picks the Unix socket when it
  runs on the server's Ray node, TCP otherwise (``scheme.inference_server.transport``).
* **Who.** Each listener has a random key (:data:`KEY_BYTES`), which clients get through Ray. A
  connection begins with a challenge each way (:func:`_handshake`): the client proves it holds the
  key by an HMAC of the listener's nonce, the listener by an HMAC of the client's, so the key
  itself never crosses the socket, a recorded handshake cannot be replayed, and a process that took
  over a dead server's address gets no call. The listener unpickles nothing before it.
* **Faults.** A refused or broken connection (the server died, or was restarted elsewhere) sends
  that call through the fallback (the Ray transport, which waits for a restarted server). The
  client asks for the endpoint again before its next connection, after a pause that doubles while
  connecting fails (:data:`RETRY_S` up to :data:`MAX_RETRY_S`), so an unreachable port costs a
  3 s connection attempt every few minutes, not one per call, and says so once. TCP connections
  probe an idle peer (keepalive), so a server whose node vanished breaks the connection (and the
  call falls back) instead of leaving it waiting. No reply within ``timeout_s`` raises as a Ray
  call's timeout would.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import secrets
import selectors
import socket
import struct
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

#: a message's length, ahead of its pickled bytes
_HEADER = struct.Struct("<Q")

#: the length of a listener's key, and of each side's nonce in the handshake
KEY_BYTES = NONCE_BYTES = 16

#: the first pause before connecting again after a connection failed, and the longest
RETRY_S, MAX_RETRY_S = 0.5, 300.0

#: how long connecting, the handshake included, may take
CONNECT_TIMEOUT_S = 3.0

#: how long the listener waits for the whole of a call whose first bytes came: longer, the
#: connection is dropped (the client falls back). The loop reads one call at a time, so this
#: bounds how long a client stalled mid-call (or trickling its bytes) holds up the others.
READ_TIMEOUT_S = 10.0

#: TCP keepalive: probe a connection idle this many seconds, then every interval, this many times
_KEEPALIVE = (10, 5, 3)


def socket_address(name: str) -> str:
    """The Unix socket address of the server named ``name``."""
    if sys.platform == "linux":
        return "\0pytorchrl-" + name
    return os.path.join(tempfile.gettempdir(), f"pytorchrl-{name}.sock")


class Endpoint(NamedTuple):
    """Where a listener answers: its Unix socket, its TCP ``(host, port)`` if it has one, and the
    key of its handshake."""

    unix: str
    tcp: tuple[str, int] | None
    key: bytes


class SocketListener:
    """Answers ``handler(method, args)`` for clients connecting to ``address`` (and to ``tcp_host``,
    when given, on a port the system picks).

    One thread, an event loop over every client's connection (``selectors``), reads and answers
    the calls; a connection's handshake runs in a short-lived thread of its own before the loop
    takes it, so a slow or hostile client never stalls the others. Calls of the ``batched``
    method are answered together: the loop keeps reading them until every connected client has
    one waiting or ``max_wait_s`` has passed since the first, then answers them with one
    ``run_many`` call, in its own thread. A batch thus costs no hand-over between threads, where
    a thread per client would wake the batching thread and be woken by it for every call (on
    2 cores, a fifth of the server's CPU; BENCHMARKS.md, "Central inference at scale").

    :param handler: runs a call; what it returns (or raises) is sent back.
    :param address: the Unix socket, from :func:`socket_address`.
    :param tcp_host: the address to listen on for other nodes' clients (the Ray node's IP), or None;
        one that cannot be bound (not an address of this machine) leaves the listener Unix-only,
        with a warning.
    :param batched: ``(method, run_many)``: ``run_many(list of args, list of arrival times) -> list
        of (ok, value)``, one pair per call in order (``ok`` False: ``value`` is the error to raise in
        that client); a call's arrival is the ``time.monotonic()`` at which the loop read it, so the
        wait this loop adds for company is counted as the call's queueing wait.
    :param max_wait_s: the longest the first waiting call of ``batched`` waits for others.
    """

    def __init__(
        self, handler: Callable[[str, tuple[Any, ...]], Any], address: str, tcp_host: str | None = None, *,
        batched: tuple[str, Callable[[list[tuple[Any, ...]], list[float]], list[tuple[bool, Any]]]] | None = None, max_wait_s: float = 0.0,
    ) -> None:
        self.handler, self.address = handler, address
        self.batched, self.max_wait_s = batched, max_wait_s
        self.calls = {"unix": 0, "tcp": 0}  # calls answered
        self.key = secrets.token_bytes(KEY_BYTES)
        self._lock = threading.Lock()
        self._closed = False
        self._selector = selectors.DefaultSelector()
        self._wake_loop, self._waker = socket.socketpair()  # a byte on it: new connections, or closing
        self._waker.setblocking(False)
        self._selector.register(self._wake_loop, selectors.EVENT_READ, None)
        self._joining: list[tuple[socket.socket, str]] = []  # handshaken, for the loop to take
        if not address.startswith("\0") and os.path.exists(address):
            os.unlink(address)  # left by a server process that died
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        unix.bind(address)
        self._sockets = {"unix": unix}
        self.tcp: tuple[str, int] | None = None
        if tcp_host is not None:
            tcp = socket.socket(_inet_family(tcp_host), socket.SOCK_STREAM)
            try:
                tcp.bind((tcp_host, 0))
            except OSError as error:  # the node's address is not this machine's (NAT): Ray calls serve other nodes
                tcp.close()
                warnings.warn(f"inference server: cannot listen on TCP at {tcp_host} ({error}); workers on other nodes call it by Ray", stacklevel=2)
            else:
                self.tcp = (tcp_host, tcp.getsockname()[1])
                self._sockets["tcp"] = tcp
        threading.Thread(target=self._loop, daemon=True, name="pytorchrl-socket-loop").start()
        for family, listening in self._sockets.items():
            listening.listen(256)
            threading.Thread(target=self._accept, args=(listening, family), daemon=True, name=f"pytorchrl-{family}-accept").start()

    def endpoint(self) -> Endpoint:
        return Endpoint(self.address, self.tcp, self.key)

    def _accept(self, listening: socket.socket, family: str) -> None:
        while not self._closed:
            try:
                conn, _ = listening.accept()
            except OSError:  # closed, or out of descriptors for now (EMFILE): not a reason to stop serving
                if not self._closed:
                    time.sleep(0.1)
                continue
            try:
                threading.Thread(target=self._admit, args=(conn, family), daemon=True, name="pytorchrl-socket-handshake").start()
            except RuntimeError:  # no thread to be had: the client falls back
                conn.close()

    def _admit(self, conn: socket.socket, family: str) -> None:
        """A new connection's handshake, then hand it to the loop (or close it)."""
        try:
            if family == "tcp":
                _tune_tcp(conn)
            proven = _handshake(conn, self.key, listener=True)
        except OSError:  # the client went away or was too slow to say who it is
            proven = False
        if not proven:  # not one of ours: nothing it sent is unpickled
            conn.close()
            return
        conn.settimeout(READ_TIMEOUT_S)  # a call's bytes follow its first at once; a stalled one is dropped
        with self._lock:
            if self._closed:
                conn.close()
                return
            self._joining.append((conn, family))
        self._wake()

    def _wake(self) -> None:
        try:
            self._waker.send(b"x")
        except OSError:  # its buffer is full of wake-ups already, or closed
            pass

    def _loop(self) -> None:
        waiting: list[tuple[socket.socket, str, tuple[Any, ...], float]] = []  # calls of the batched method, and when each was read
        try:
            while not self._closed:
                timeout = None if not waiting else max(0.0, waiting[0][3] + self.max_wait_s - time.monotonic())
                for key, _ in self._selector.select(timeout):
                    if key.data is None:
                        self._take_joining()
                        continue
                    conn, family = key.fileobj, key.data
                    assert isinstance(conn, socket.socket)
                    call = _read_call(conn)
                    if call is None:
                        self._hang_up(conn)
                        continue
                    method, args = call
                    if self.batched is not None and method == self.batched[0]:
                        waiting.append((conn, family, args, time.monotonic()))
                    else:
                        self._answer(conn, family, method, self._run(method, args))
                if waiting and (len(waiting) >= len(self._selector.get_map()) - 1 or time.monotonic() >= waiting[0][3] + self.max_wait_s):
                    assert self.batched is not None
                    try:
                        replies = self.batched[1]([args for _, _, args, _ in waiting], [arrival for *_, arrival in waiting])
                    except Exception as error:  # each caller gets it
                        replies = [(False, error)] * len(waiting)
                    for (conn, family, _, _), reply in zip(waiting, replies):
                        self._answer(conn, family, self.batched[0], reply)
                    waiting = []
        finally:
            for key in list(self._selector.get_map().values()):
                if key.data is not None:
                    key.fileobj.close()  # type: ignore[union-attr]
            self._selector.close()
            self._wake_loop.close()
            self._waker.close()

    def _take_joining(self) -> None:
        try:
            while self._wake_loop.recv(4096, socket.MSG_DONTWAIT):
                pass
        except BlockingIOError:
            pass
        with self._lock:
            joining, self._joining = self._joining, []
        for conn, family in joining:
            self._selector.register(conn, selectors.EVENT_READ, family)

    def _run(self, method: str, args: tuple[Any, ...]) -> tuple[bool, Any]:
        try:
            return True, self.handler(method, args)
        except Exception as error:  # the client raises it
            return False, error

    def _answer(self, conn: socket.socket, family: str, method: str, reply: tuple[bool, Any]) -> None:
        try:
            data = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as error:  # an error that does not pickle: the client still gets one
            data = pickle.dumps((False, RuntimeError(f"{method}: the server's reply does not pickle: {error!r}")))
        with self._lock:  # before the reply: a client that has it sees the count
            self.calls[family] += 1
        try:
            _send_bytes(conn, data)
        except OSError:  # the client went away: its call falls back
            self._hang_up(conn)

    def _hang_up(self, conn: socket.socket) -> None:
        if conn.fileno() >= 0 and conn in self._selector.get_map():
            self._selector.unregister(conn)
        conn.close()

    def close(self) -> None:
        """Stop listening and hang up on every client (they fall back, as when the process dies)."""
        with self._lock:
            self._closed = True
            joining, self._joining = self._joining, []
        for conn, _ in joining:
            conn.close()
        for listening in self._sockets.values():
            try:  # wakes the accepting thread; a bare close would leave its accept() listening
                listening.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            listening.close()
        self._wake()  # the loop closes its connections as it ends
        if not self.address.startswith("\0") and os.path.exists(self.address):
            os.unlink(self.address)


#: where a client connects: ``("unix", address, key)`` or ``("tcp", (host, port), key)``
Route = tuple[str, Any, bytes]


class SocketCall:
    """``call(method, *args)`` over the socket that ``locate()`` names, else through ``fallback``.

    :param fallback: the transport a call takes when there is no socket to use or it breaks
        (:class:`~.inference_servers.ServerCall`).
    :param locate: ``locate() -> Route | None``, asked before each connection (a restarted server
        listens elsewhere); None: call through the fallback for now.
    :param timeout_s: the longest one call waits for its reply (None: no limit).
    :param retry_s: the first pause before connecting again once a connection failed.
    """

    def __init__(
        self, fallback: Callable[..., Any], locate: Callable[[], Route | None], timeout_s: float | None = None, retry_s: float = RETRY_S,
    ) -> None:
        self.fallback, self.locate, self.timeout_s = fallback, locate, timeout_s
        self.retry_s = self._pause = retry_s
        self._conn: socket.socket | None = None
        self._retry_at = 0.0  # no connection attempt before this (time.monotonic)
        self._warned = False

    def __call__(self, method: str, *args: Any) -> Any:
        conn = self._conn or self._connect()
        if conn is not None:
            try:
                send(conn, (method, args))
                reply = receive(conn)
            except BaseException as error:  # never reuse a connection a call was cut short on: its reply would answer the next
                self._drop()
                if isinstance(error, TimeoutError) and error.errno is None:  # our timeout_s (ETIMEDOUT: keepalive found the peer gone)
                    raise TimeoutError(f"no reply from the inference server to {method} within {self.timeout_s:g} s") from None
                if not isinstance(error, OSError):
                    raise
                reply = None  # a broken connection: the fallback takes the call
            if reply is not None:
                ok, value = reply
                if not ok:
                    raise value
                return value
            self._drop()
        return self.fallback(method, *args)

    def _connect(self) -> socket.socket | None:
        if time.monotonic() < self._retry_at:
            return None
        route = self.locate()
        if route is not None:
            family, address, key = route
            conn = socket.socket(socket.AF_UNIX if family == "unix" else _inet_family(address[0]), socket.SOCK_STREAM)
            conn.settimeout(CONNECT_TIMEOUT_S)
            try:
                conn.connect(address)
                if family == "tcp":
                    _tune_tcp(conn)
                proven = _handshake(conn, key, listener=False)
            except OSError as error:  # not listening (yet), or not reachable from here: the fallback finds it
                proven, reason = False, repr(error)
            else:
                reason = "the handshake failed"
            if proven:
                conn.settimeout(self.timeout_s)
                self._conn, self._pause = conn, self.retry_s
                return conn
            conn.close()
            if family == "tcp" and not self._warned:
                self._warned = True
                warnings.warn(
                    f"inference server at {address[0]}:{address[1]}: {reason}; this worker calls it by Ray and tries again now and then "
                    "(scheme.inference_server.transport: same_node stops the tries)", stacklevel=2,
                )
        self._retry_at = time.monotonic() + self._pause
        self._pause = min(2 * self._pause, MAX_RETRY_S)
        return None

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _read_call(conn: socket.socket) -> tuple[str, tuple[Any, ...]] | None:
    """The next ``(method, args)`` sent on ``conn``; None once the client has closed, or when it
    is reset, stalls mid-call past :data:`READ_TIMEOUT_S` or sends something else (that client
    alone is then hung up on)."""
    try:
        message = receive(conn, time.monotonic() + READ_TIMEOUT_S)
        conn.settimeout(READ_TIMEOUT_S)  # as _admit left it (the deadline's reads changed it)
    except Exception:
        return None
    if not (isinstance(message, tuple) and len(message) == 2 and isinstance(message[0], str) and isinstance(message[1], tuple)):
        return None
    return message


def _handshake(conn: socket.socket, key: bytes, *, listener: bool) -> bool:
    """Each side proves it holds ``key`` without sending it: an HMAC of the other side's fresh
    nonce. The listener speaks first; the whole exchange must finish within :data:`CONNECT_TIMEOUT_S`."""
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    mine = secrets.token_bytes(NONCE_BYTES)
    digest = hashlib.sha256().digest_size
    if listener:
        conn.sendall(mine)
        answer = _read(conn, digest + NONCE_BYTES, deadline)
        if answer is None or not hmac.compare_digest(bytes(answer[:digest]), _prove(key, b"client", mine)):
            return False
        conn.sendall(_prove(key, b"listener", bytes(answer[digest:])))
        return True
    theirs = _read(conn, NONCE_BYTES, deadline)
    if theirs is None:
        return False
    conn.sendall(_prove(key, b"client", bytes(theirs)) + mine)
    proof = _read(conn, digest, deadline)
    return proof is not None and hmac.compare_digest(bytes(proof), _prove(key, b"listener", mine))


def _prove(key: bytes, role: bytes, nonce: bytes) -> bytes:
    return hmac.new(key, role + nonce, hashlib.sha256).digest()


def _inet_family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _tune_tcp(conn: socket.socket) -> None:
    """No Nagle delay on small replies, and keepalive probes, so that a peer whose node vanished
    breaks the connection within ~25 s instead of holding it (and a thread) forever."""
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    idle, interval, count = _KEEPALIVE
    # Linux; elsewhere the system's keepalive times apply. TCP_USER_TIMEOUT bounds the wait for an
    # acknowledgement too, which keepalive (idle connections only) does not
    for option, value in (("TCP_KEEPIDLE", idle), ("TCP_KEEPINTVL", interval), ("TCP_KEEPCNT", count), ("TCP_USER_TIMEOUT", 1000 * (idle + interval * count))):
        if hasattr(socket, option):
            conn.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)


def send(conn: socket.socket, obj: Any) -> None:
    _send_bytes(conn, pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def _send_bytes(conn: socket.socket, data: bytes) -> None:
    conn.sendall(_HEADER.pack(len(data)) + data)


def receive(conn: socket.socket, deadline: float | None = None) -> Any:
    """The next message, or None once the other side has closed; with a ``deadline``
    (``time.monotonic``), None once it has passed too, however the bytes trickle in."""
    header = _read(conn, _HEADER.size, deadline)
    if header is None:
        return None
    body = _read(conn, _HEADER.unpack(header)[0], deadline)
    return None if body is None else pickle.loads(body)


def _read(conn: socket.socket, size: int, deadline: float | None = None) -> bytearray | None:
    """``size`` bytes, or None once the other side has closed; with a ``deadline``
    (``time.monotonic``), None once it has passed too."""
    buffer = bytearray(size)
    view, got = memoryview(buffer), 0
    while got < size:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            conn.settimeout(left)
        n = conn.recv_into(view[got:])
        if n == 0:
            return None
        got += n
    return buffer
