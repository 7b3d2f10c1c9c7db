"""Process-wide settings of a worker process, made when the worker starts."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import subprocess
import sys
from pathlib import Path

# glibc mallopt parameters
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_malloc_tuned = False
#: the most intra-op threads this process may run (a remote worker: the CPUs Ray reserved for it)
_thread_cap: int | None = None


def cpu_model() -> str:
    """This machine's CPU in one line, e.g. ``AMD EPYC, 2 cores, AVX-512 BF16``: results are only
    compared on one CPU model (these VMs differ: AVX2 only, or AVX-512 with bfloat16), so every
    run's summary.json records it."""
    import os
    import platform

    name, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and name in ("", platform.machine(), platform.processor()):
                    name = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
                    break
    except OSError:  # not Linux
        pass
    isa = "AVX-512 BF16" if "avx512_bf16" in flags else "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else None
    return ", ".join(part for part in (name, f"{os.cpu_count()} cores", isa) if part)


@functools.cache
def code_version() -> str:
    """The code this process runs, e.g. ``pytorchrl 0.1.0 (git 6c65fae1b2c3, modified)``: the
    package's version, and where it runs from a git checkout its commit and whether tracked files
    differ from it. Every run's summary.json records it, so that runs of different code are told
    apart (a results-table row should not mix them)."""
    from pytorchrl.version import __version__

    text = f"pytorchrl {__version__}"
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return text
    try:
        def git(*args: str) -> str:
            return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10, check=True).stdout.strip()

        commit = git("rev-parse", "--short=12", "HEAD")
        modified = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):  # no git, or not a repository after all
        return text
    return f"{text} (git {commit}{', modified' if modified else ''})"


def cap_threads(most: int) -> None:
    """Hold this process to at most ``most`` torch threads, now and in every later
    :func:`configure_process` (a remote worker's host calls it before building the worker). In
    a process that has not imported torch (a central-inference collection worker may never),
    through ``OMP_NUM_THREADS``, which torch reads when it is imported."""
    global _thread_cap
    _thread_cap = most
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(min(torch.get_num_threads(), most))
        return
    current = os.environ.get("OMP_NUM_THREADS", "")
    os.environ["OMP_NUM_THREADS"] = str(min(int(current), most) if current.isdigit() and int(current) > 0 else most)


def thread_ids(pid: int | None = None) -> list[int]:
    """The ids of the threads of process ``pid`` (None: this one), from Linux's ``/proc/PID/task``;
    empty where it cannot be read."""
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{'self' if pid is None else pid}/task")]
    except OSError:
        return []


def renice_threads(niceness: int, pid: int | None = None) -> bool:
    """Give every thread of process ``pid`` (None: this one) the scheduling niceness ``niceness``
    (on Linux a thread's own; threads started later inherit their creator's). Ray starts every worker
    process at niceness 15 (its ``worker_niceness``) while the driver runs at 0; an inference
    server calls this with the driver's, so that on cores it shares with collection workers it
    runs first when a batch is waiting (ARCHITECTURE.md, decision 58).

    :return: whether every thread now has it; False where that is not allowed (lowering
        niceness needs ``CAP_SYS_NICE``: the process then keeps Ray's) or not on Linux.
    """
    threads = thread_ids(pid) if sys.platform.startswith("linux") else []
    if not threads:
        return False
    done = True
    for tid in threads:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, niceness)
        except ProcessLookupError:  # the thread ended meanwhile
            continue
        except PermissionError:
            done = False
    return done


def configure_process(torch_threads: int | None = None) -> None:
    """Set up this process for training: ``torch_threads`` intra-op threads (None: as they
    are; never more than :func:`cap_threads` allows), denormal floats flushed to zero, and (glibc) a heap that keeps its freed memory.

    The flush setting is per thread and torch's OpenMP threads copy it when they start, at the
    process's first parallel op: call this before (the CLI does at once, workers when they start).

    - Denormals: gradients that are exactly zero (dead ReLUs) make Adam's first moment decay
      geometrically through the subnormal range, and x86 arithmetic on subnormals is many times
      slower: SAC's Adam step took 3x as long on the 2-core reference machine. Values below
      1.2e-38 carry nothing an update needs (TensorFlow flushes them on CPUs by default).
    - The heap: an update allocates and frees megabytes of activations; by default glibc hands
      freed memory at the top of the heap back to the kernel and takes it again at the next step,
      a few hundred page faults per SAC step (6% of its time). Keeping up to 64 MiB of it, and
      serving blocks up to 16 MiB from the heap, removes them.
    """
    import torch

    torch.set_flush_denormal(True)
    if torch_threads is not None:
        torch.set_num_threads(torch_threads if _thread_cap is None else min(torch_threads, _thread_cap))
    _tune_malloc()


def _tune_malloc() -> None:
    global _malloc_tuned
    if _malloc_tuned or not sys.platform.startswith("linux"):
        return
    _malloc_tuned = True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl, ...): nothing to tune
        return
    mallopt(_M_TRIM_THRESHOLD, 64 << 20)
    mallopt(_M_MMAP_THRESHOLD, 16 << 20)
