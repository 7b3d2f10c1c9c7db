"""Starting and ending real ``ray start`` clusters beside the test session's own Ray."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_cluster(marks: tuple[str, ...]) -> None:
    """End the processes whose command line holds one of ``marks``, and their children: ``ray
    stop`` would also end any other Ray on the machine, such as the test session's."""
    procs = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            procs[int(entry.name)] = (cmd, ppid)
    doomed = {pid for pid, (cmd, _) in procs.items() if any(m in cmd for m in marks)}
    while True:
        children = {pid for pid, (_, ppid) in procs.items() if ppid in doomed} - doomed
        if not children:
            break
        doomed |= children
    for pid in doomed:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


#: where ``ray start`` records the newest cluster, which ``ray.init()`` without an address joins
CURRENT_CLUSTER = Path("/tmp/ray/ray_current_cluster")


@contextmanager
def ray_start_cluster(*node_args: list[str], env: dict[str, str] | None = None, own_temp_dir: bool = True) -> Iterator[str]:
    """A head node started with ``ray start --head`` (1 CPU, no dashboard) plus one more node per
    entry of ``node_args`` (the extra ``ray start`` flags of each); yields the head's address and
    ends exactly these processes afterwards.

    :param own_temp_dir: give the cluster its own ``--temp-dir``; without one it is what a user's
        plain ``ray start --head`` makes: the newest cluster in ``/tmp/ray/ray_current_cluster``.
    """
    port = free_port()
    temp_dir = f"/tmp/prl-{secrets.token_hex(3)}"  # short: Ray's socket paths live under it
    head = ["ray", "start", "--head", f"--port={port}", "--num-cpus=1", "--include-dashboard=false", "--disable-usage-stats"]
    head += [f"--temp-dir={temp_dir}"] if own_temp_dir else []
    nodes = [["ray", "start", f"--address=127.0.0.1:{port}", "--disable-usage-stats", *args] for args in node_args]
    try:
        for cmd in (head, *nodes):
            subprocess.run(cmd, check=True, capture_output=True, timeout=180, env=env)
        yield f"127.0.0.1:{port}"
    finally:
        # the head's GCS names its port without a host (--gcs_server_port=PORT), and its parent,
        # `ray start`, is gone: without its own mark it outlived every test run (one per CI run)
        kill_cluster((temp_dir, f":{port}", f"--gcs_server_port={port}"))
        if not own_temp_dir and CURRENT_CLUSTER.is_file() and CURRENT_CLUSTER.read_text().strip().endswith(f":{port}"):
            CURRENT_CLUSTER.unlink()  # as `ray stop` would: nothing may try to join the dead cluster
