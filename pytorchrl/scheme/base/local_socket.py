"""A same-node side door to an inference server: method calls over a Unix socket (ARCHITECTURE.md,
decision 50).

A Ray actor call costs each side a fixed amount of CPU (serialising, Ray's executor and gRPC
threads, the GIL handed between them): on a 2-core machine ~2 ms a side per call, paid on every
env step of every central-inference worker, on cores the learner needs. A collection worker on the
server's node can skip it: :class:`SocketListener` (in the server's process) answers length-prefixed
pickled ``(method, args)`` messages on a Unix socket, one thread per client connection, and
:class:`SocketCall` (in the worker) sends them. A broken or refused connection (the server died, or
was restarted on another node) sends that call through the fallback (the Ray transport, which
waits for a restarted server) and tries the socket again on the next call, so faults are handled
as before; no reply within ``timeout_s`` raises as a Ray call's timeout would.

On Linux the socket lives in the abstract namespace (no file to clean up: it goes with the process);
elsewhere it is a file in the temp directory.
"""

from __future__ import annotations

import os
import pickle
import socket
import struct
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import Any

#: a message's length, ahead of its pickled bytes
_HEADER = struct.Struct("<Q")


def socket_address(name: str) -> str:
    """The Unix socket address of the server named ``name``."""
    if sys.platform == "linux":
        return "\0pytorchrl-" + name
    return os.path.join(tempfile.gettempdir(), f"pytorchrl-{name}.sock")


class SocketListener:
    """Answers ``handler(method, args)`` for clients connecting to ``address``, one thread each.

    :param handler: runs a call; what it returns (or raises) is sent back.
    :param address: from :func:`socket_address`.
    """

    def __init__(self, handler: Callable[[str, tuple[Any, ...]], Any], address: str) -> None:
        self.handler, self.address = handler, address
        self.calls = 0  # calls answered
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        if not address.startswith("\0") and os.path.exists(address):
            os.unlink(address)  # left by a server process that died
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._socket.bind(address)
        self._socket.listen(256)
        threading.Thread(target=self._accept, daemon=True, name="pytorchrl-socket-accept").start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._socket.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True, name="pytorchrl-socket-client").start()

    def _serve(self, conn: socket.socket) -> None:
        with self._lock:
            self._conns.add(conn)
        try:
            while (message := receive(conn)) is not None:
                method, args = message
                try:
                    reply: tuple[bool, Any] = (True, self.handler(method, args))
                except Exception as error:  # the client raises it
                    reply = (False, error)
                try:
                    data = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
                except Exception as error:  # an error that does not pickle: the client still gets one
                    data = pickle.dumps((False, RuntimeError(f"{method}: the server's reply does not pickle: {error!r}")))
                with self._lock:  # before the reply: a client that has it sees the count
                    self.calls += 1
                _send_bytes(conn, data)
        except OSError:  # the client went away, or the listener closed
            pass
        finally:
            with self._lock:
                self._conns.discard(conn)
            conn.close()

    def close(self) -> None:
        """Stop listening and hang up on every client (they fall back, as when the process dies)."""
        try:  # wakes the accepting thread; a bare close would leave its accept() listening
            self._socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._socket.close()
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:  # already gone
                pass
        if not self.address.startswith("\0") and os.path.exists(self.address):
            os.unlink(self.address)


class SocketCall:
    """``call(method, *args)`` over the Unix socket at ``address``, else through ``fallback``.

    :param fallback: the transport a call takes when the socket is not there or breaks
        (:class:`~.inference_servers.ServerCall`).
    :param address: the server's :func:`socket_address`.
    :param timeout_s: the longest one call waits for its reply (None: no limit).
    """

    def __init__(self, fallback: Callable[..., Any], address: str, timeout_s: float | None = None) -> None:
        self.fallback, self.address, self.timeout_s = fallback, address, timeout_s
        self._conn: socket.socket | None = None

    def __call__(self, method: str, *args: Any) -> Any:
        conn = self._conn or self._connect()
        if conn is not None:
            try:
                send(conn, (method, args))
                reply = receive(conn)
            except TimeoutError:
                self._drop()
                raise TimeoutError(f"no reply from the inference server to {method} within {self.timeout_s:g} s") from None
            except OSError:
                reply = None
            if reply is not None:
                ok, value = reply
                if not ok:
                    raise value
                return value
            self._drop()
        return self.fallback(method, *args)

    def _connect(self) -> socket.socket | None:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(self.timeout_s)
        try:
            conn.connect(self.address)
        except OSError:  # no server here (yet): the fallback finds it
            conn.close()
            return None
        self._conn = conn
        return conn

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def send(conn: socket.socket, obj: Any) -> None:
    _send_bytes(conn, pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def _send_bytes(conn: socket.socket, data: bytes) -> None:
    conn.sendall(_HEADER.pack(len(data)) + data)


def receive(conn: socket.socket) -> Any:
    """The next message, or None once the other side has closed."""
    header = _read(conn, _HEADER.size)
    if header is None:
        return None
    body = _read(conn, _HEADER.unpack(header)[0])
    return None if body is None else pickle.loads(body)


def _read(conn: socket.socket, size: int) -> bytearray | None:
    buffer = bytearray(size)
    view, got = memoryview(buffer), 0
    while got < size:
        n = conn.recv_into(view[got:])
        if n == 0:
            return None
        got += n
    return buffer
