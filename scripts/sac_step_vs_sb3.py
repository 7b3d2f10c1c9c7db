"""SAC HalfCheetah-v5 time per env step: pytorchrl against Stable-Baselines3, alternating in one run.

    python scripts/sac_step_vs_sb3.py [--repeats 3] [--precision float32 bfloat16] [--sb3-python PYTHON]

Both sides take 1,000 random steps, make 500 updates, then time 1,500 env steps with one
gradient step each (no evaluation): pytorchrl through ``pytorchrl benchmark sac_halfcheetah_step``
(``configs/sac/halfcheetah.yaml``), once per ``--precision`` (its ``actor.mlp_precision``:
``sac_halfcheetah_step_bf16`` for bfloat16), SB3 with its SAC defaults, the rl-zoo MuJoCo
settings, on as many threads as the config's ``run.torch_threads``. The pytorchrl side also
prints the floor under its step: the update's matrix
products replayed alone. ``--sb3-python``: an interpreter with stable-baselines3 (default: this one).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SB3_STEP = """
import sys, time, gymnasium as gym, torch
from stable_baselines3 import SAC
steps = int(sys.argv[1])
torch.set_num_threads(int(sys.argv[2]))  # the threads pytorchrl's side runs on (its config's run.torch_threads)
model = SAC("MlpPolicy", gym.make("HalfCheetah-v5"), learning_starts=1000, seed=0, device="cpu", verbose=0)
model.learn(1500)
start = time.perf_counter()
model.learn(steps, reset_num_timesteps=False)
print(1e3 * (time.perf_counter() - start) / steps)
"""


BENCHMARK = {"float32": "sac_halfcheetah_step", "bfloat16": "sac_halfcheetah_step_bf16"}


def _config_threads() -> int:
    """``run.torch_threads`` of the config pytorchrl's side runs, which its process sets whatever
    OMP_NUM_THREADS says: SB3's side gets as many (torch's default could be another count)."""
    import yaml

    config = yaml.safe_load((Path(__file__).resolve().parents[1] / "configs" / "sac" / "halfcheetah.yaml").read_text())
    return int(config.get("run", {}).get("torch_threads", 1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--precision", nargs="+", choices=list(BENCHMARK), default=["float32"], help="pytorchrl's actor.mlp_precision, each measured per round")
    ap.add_argument("--sb3-python", default=sys.executable)
    args = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="sac-step-"))
    ours: dict[str, list[float]] = {p: [] for p in args.precision}
    floors: dict[str, list[float]] = {p: [] for p in args.precision}
    theirs: list[float] = []
    steps = 0

    def sb3() -> None:
        done = subprocess.run([args.sb3_python, "-c", SB3_STEP, str(steps), str(_config_threads())], check=True, capture_output=True, text=True)
        theirs.append(float(done.stdout.strip().splitlines()[-1]))

    for i in range(args.repeats):
        if i % 2:  # the sides take turns going first (the order alone once moved a figure 17%); round 0 gave the steps
            sb3()
        for precision in args.precision:
            name, path = BENCHMARK[precision], out / f"ours_{precision}_{i}.json"
            subprocess.run([sys.executable, "-m", "pytorchrl.cli", "benchmark", name, "--seeds", "0", "--json", str(path)], check=True)
            result = json.loads(path.read_text())[name]
            ours[precision].append(result["runs"][0]["ms_per_step"])
            floors[precision].append(result["runs"][0]["gemm_ms_per_update"])
            steps = result["steps"]
        if not i % 2:
            sb3()
        mine = "; ".join(f"pytorchrl {p} {ours[p][-1]:.2f} ms per step (matrix products alone {floors[p][-1]:.2f})" for p in args.precision)
        print(f"round {i}: {mine}; SB3 {theirs[-1]:.2f} ms", flush=True)
    theirs_ms = statistics.median(theirs)
    summary: dict[str, object] = {"sb3_ms_per_step": theirs_ms, "sb3_rounds": theirs}
    for precision in args.precision:
        ours_ms, floor_ms = statistics.median(ours[precision]), statistics.median(floors[precision])
        summary[precision] = {
            "pytorchrl_ms_per_step": ours_ms, "ratio": round(ours_ms / theirs_ms, 3), "gemm_floor_ms": floor_ms,
            "gemm_floor_ratio": round(floor_ms / theirs_ms, 3), "rounds": ours[precision], "gemm_rounds": floors[precision],
        }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
