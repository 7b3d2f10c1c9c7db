"""What one central-inference call costs a worker whose env sleeps between calls.

A collection worker of ``configs/ppo/latency_scaling.yaml`` sleeps 20 ms in its env, then sends
one 4x84x84 uint8 observation to the inference server and waits for the reply. This script
times that call over the shipped socket transport
(:class:`~pytorchrl.scheme.base.socket_transport.SocketCall` to a
:class:`~pytorchrl.scheme.base.socket_transport.SocketListener` in another process, whose
handler returns a canned reply at once, so no policy runs). It times each call twice: back to
back, and after the 20 ms pause a worker's env takes. It prints, per call, the client's CPU time,
the round trip, and three parts of the round trip:

* pickling the request;
* sending it: the system call that wakes the server;
* waiting for the reply and reading it.

It uses no Ray and no torch (BENCHMARKS.md, "Central inference at scale").

    python scripts/wake_cost.py [--gap-ms 20] [--calls 300]
"""

from __future__ import annotations

import argparse
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytorchrl.scheme.base.socket_transport import SocketCall, SocketListener, receive, socket_address

REPLY = (np.zeros(1, np.int64), np.zeros(1, np.float32), np.zeros(1, np.float32), 3)


def _serve() -> None:
    """The server process: answers every call with :data:`REPLY`; prints its address and key."""
    listener = SocketListener(lambda method, args: REPLY, socket_address(f"wake-cost-{os.getpid()}"))
    print(listener.address.encode().hex(), listener.key.hex(), flush=True)
    time.sleep(3600)


def measure(call: SocketCall, obs: np.ndarray, calls: int, gap_s: float) -> dict[str, float]:
    """Microseconds per call: client CPU, round trip, and its pickling, sending and waiting parts."""
    conn = call._conn
    assert conn is not None, "connect first"
    parts = np.zeros(4)
    cpu = 0.0
    for i in range(calls):
        if gap_s:
            time.sleep(gap_s)
        c0, t0 = time.process_time(), time.perf_counter()
        blob = pickle.dumps(("act_arrays", (1, obs, i, True, i + 1)), protocol=pickle.HIGHEST_PROTOCOL)
        t1 = time.perf_counter()
        conn.sendall(len(blob).to_bytes(8, "little") + blob)
        t2 = time.perf_counter()
        receive(conn)
        t3 = time.perf_counter()
        cpu += time.process_time() - c0
        parts += (t1 - t0, t2 - t1, t3 - t2, t3 - t0)
    pickling, sending, waiting, round_trip = parts / calls * 1e6
    return {"client_cpu_us": cpu / calls * 1e6, "round_trip_us": round_trip, "pickle_us": pickling, "send_us": sending, "wait_recv_us": waiting}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gap-ms", type=float, default=20.0, help="the pause before each call (the latency env's step)")
    parser.add_argument("--calls", type=int, default=300, help="calls timed with the pause (ten times as many back to back)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the server process
    args = parser.parse_args(argv)
    if args.serve:
        _serve()
        return
    server = subprocess.Popen([sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        address, key = (bytes.fromhex(part) for part in server.stdout.readline().split())
        call = SocketCall(lambda *a: None, lambda: ("unix", address.decode(), key))
        obs = np.random.default_rng(0).integers(0, 256, (1, 4, 84, 84), dtype=np.uint8)
        call("act_arrays", 1, obs, 0, True, 1)  # connects (and warms up)
        for gap_ms, calls in ((0.0, 10 * args.calls), (args.gap_ms, args.calls)):
            row = measure(call, obs, calls, gap_ms / 1000)
            print(f"pause {gap_ms:g} ms: " + ", ".join(f"{name} {value:.0f}" for name, value in row.items()))
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()
