"""PPO CartPole time-to-475: pytorchrl vs Stable-Baselines3, alternating per seed in one run.

    python scripts/bench_vs_sb3.py [--seeds 0 1 2] [--sb3-python .venv-sb3/bin/python] [--peers ../shared/peers]

Both sides use the same protocol: deterministic evaluation of 10 episodes every ~4,000 env steps,
wall-clock from the first training step, evaluations included, stop at 475. SB3 runs the
rl-zoo hyper-parameters through the peers script; pytorchrl runs configs/ppo/cartpole.yaml.
Set up SB3 as ../shared/peers/README.md says (its own virtual environment).
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def _ours(seed: int, out: Path, ours: list) -> None:
    path = out / f"ours_{seed}.json"
    subprocess.run([sys.executable, "-m", "pytorchrl.cli", "benchmark", "ppo_cartpole", "--seeds", str(seed), "--json", str(path)], check=True)
    run = json.loads(path.read_text())["ppo_cartpole"]["runs"][0]
    ours.append((run["solved_at_wall_time_s"], run["solved_at_env_steps"]))


def _sb3(args: argparse.Namespace, seed: int, out: Path, theirs: list) -> None:
    subprocess.run(
        [args.sb3_python, "bench_sb3_ppo.py", "--seeds", str(seed), "--stop-at-threshold", "--out", f"sb3_{seed}"],
        # one thread, as pytorchrl's side (configs/ppo/cartpole.yaml: run.torch_threads 1); without it SB3 took all the cores
        check=True, cwd=args.peers, env={"BENCH_RESULTS_DIR": str(out), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
    )
    res = json.loads((out / f"sb3_{seed}.json").read_text())["runs"][0]
    theirs.append((res["time_to_threshold_wall_s"], res["steps_to_threshold"]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--sb3-python", default=str(Path(__file__).resolve().parents[2] / ".venv-sb3" / "bin" / "python"))
    ap.add_argument("--peers", default=str(Path(__file__).resolve().parents[1].parent / "shared" / "peers"))
    args = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="bench-vs-sb3-"))
    ours, theirs = [], []
    for k, seed in enumerate(args.seeds):
        if k % 2:  # the sides take turns going first: the order alone once moved a figure 17%
            _sb3(args, seed, out, theirs)
        _ours(seed, out, ours)
        if not k % 2:
            _sb3(args, seed, out, theirs)
        print(f"seed {seed}: pytorchrl {ours[-1][0]} s / {ours[-1][1]} steps; SB3 {theirs[-1][0]} s / {theirs[-1][1]} steps", flush=True)

    def med(xs):
        vals = [x if x is not None else float("inf") for x in xs]
        return statistics.median(vals)

    o, t = med([w for w, _ in ours]), med([w for w, _ in theirs])
    print("\n| | median time to 475 (s) | median env steps | per seed (s) |")
    print("|---|---|---|---|")
    print(f"| pytorchrl | {o:.2f} | {med([s for _, s in ours]):.0f} | {', '.join(str(w) for w, _ in ours)} |")
    print(f"| Stable-Baselines3 | {t:.2f} | {med([s for _, s in theirs]):.0f} | {', '.join(str(w) for w, _ in theirs)} |")
    print(f"\nratio pytorchrl / SB3 = {o / t:.2f}")


if __name__ == "__main__":
    main()
