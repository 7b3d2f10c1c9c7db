"""Process-wide settings of worker processes (pytorchrl/utils/runtime.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# In a fresh interpreter: raising niceness is always allowed, and it must reach every thread,
# those running before (a thread's own on Linux) and those started after (they inherit it).
RENICE = """
import json, os, threading
from pytorchrl.utils.runtime import renice_threads
stop = threading.Event()
before = threading.Thread(target=stop.wait); before.start()
start = os.getpriority(os.PRIO_PROCESS, 0)
done = renice_threads(start + 3)
after = threading.Thread(target=stop.wait); after.start()
tids = sorted(int(t) for t in os.listdir("/proc/self/task"))
print(json.dumps({"start": start, "done": done, "threads": len(tids), "niceness": sorted({os.getpriority(os.PRIO_PROCESS, t) for t in tids}),
                  "lower": renice_threads(start) if os.geteuid() != 0 else None}))
stop.set()
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="niceness per thread is Linux's")
def test_renice_threads_reaches_every_thread_and_says_when_it_may_not():
    out = json.loads(subprocess.run([sys.executable, "-c", RENICE], capture_output=True, text=True, check=True, timeout=60).stdout)
    assert out["done"] is True and out["threads"] == 3
    assert out["niceness"] == [min(out["start"] + 3, 19)]
    assert out["lower"] in (None, False)  # back down needs CAP_SYS_NICE: refused, and said so
