"""Compare the hot paths of two checkouts on process CPU time, alternating subprocesses.

    git worktree add /tmp/before HEAD~1
    python scripts/ab_hot_paths.py /tmp/before . --rounds 10

Each round runs every path once in a fresh process of each tree (which goes first alternates),
timing process CPU time rather than wall-clock: on a shared VM the wall-clock speed drifts by
tens of percent within minutes, CPU time much less. Paths: ``collection_mlp`` and
``collection_gru`` (one collection worker, 64 CartPole envs, 500-step rollouts, 5 timed after a
warm-up: the loops of ``benchmarks.suite.collection`` and ``benchmarks.memory.recurrent_collection``) and
``sac_step`` (2,500 steps of ``configs/sac/pendulum.yaml`` with ``start_steps`` 500, as
``sac_step``). Prints each round and the medians; the target of a refactor is after / before
within 5% (BENCHMARKS.md, "The acting seam").
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

_COLLECTION = r"""
import statistics, time, torch
torch.set_num_threads(1)
try:
    from benchmarks.suite import _collection_worker
except ImportError:  # a tree from before the benchmarks left the package
    from pytorchrl.benchmarks import _collection_worker
from pytorchrl.config import ActorConfig, RecurrentConfig
from pytorchrl.scheme.collection.collection_worker import CollectionWorker
cfg = ActorConfig(recurrent=RecurrentConfig(type="gru", hidden_size=128), shared_network=True) if {gru} else ActorConfig()
worker = _collection_worker(CollectionWorker, cfg, num_envs=64, num_steps=500)
worker.collect_data()
rates = []
for _ in range(5):
    start = time.process_time()
    worker.collect_data()
    rates.append(500 * 64 / (time.process_time() - start))
print("RESULT", statistics.median(rates))
"""

_SAC = r"""
import time
try:
    from benchmarks.suite import _config_path
except ImportError:  # a tree from before the benchmarks left the package
    from pytorchrl.benchmarks import _config_path
from pytorchrl.config import load_config
from pytorchrl.learner import Learner
overrides = ["run.target_steps=2500", "run.eval_every=100000", "run.stop_at_return=null", "algorithm.start_steps=500"]
learner = Learner.from_config(load_config(_config_path("sac/pendulum.yaml"), overrides), progress=False)
start = time.process_time()
learner.train()
print("RESULT", 1e3 * (time.process_time() - start) / 2500)
"""

#: name -> (code, unit, higher is better)
PATHS = {
    "collection_mlp": (_COLLECTION.replace("{gru}", "False"), "env-steps/s", True),
    "collection_gru": (_COLLECTION.replace("{gru}", "True"), "env-steps/s", True),
    "sac_step": (_SAC, "ms per step", False),
}


def run(tree: str, code: str) -> float:
    """One measurement of ``code`` in a fresh process importing pytorchrl from ``tree``."""
    env = {**os.environ, "PYTHONPATH": os.path.abspath(tree), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tree, check=False)
    if "RESULT" not in proc.stdout:
        sys.exit(f"ab_hot_paths: the run in {tree} failed:\n{proc.stderr[-3000:]}")
    return float(proc.stdout.split("RESULT")[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", help="checkout of the commit before (e.g. a git worktree)")
    parser.add_argument("after", help="checkout with the change")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--paths", nargs="+", choices=list(PATHS), default=list(PATHS))
    args = parser.parse_args()
    trees = {"before": args.before, "after": args.after}
    for name in args.paths:
        code, unit, _ = PATHS[name]
        results: dict[str, list[float]] = {"before": [], "after": []}
        for i in range(args.rounds):
            for tag in ("before", "after") if i % 2 == 0 else ("after", "before"):
                results[tag].append(run(trees[tag], code))
            print(f"{name} round {i}: before {results['before'][-1]:.4g}, after {results['after'][-1]:.4g} {unit}", flush=True)
        before, after = statistics.median(results["before"]), statistics.median(results["after"])
        print(f"{name}: median before {before:.4g}, after {after:.4g} {unit}; after / before {after / before:.3f}", flush=True)


if __name__ == "__main__":
    main()
