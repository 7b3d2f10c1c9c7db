"""Run the Stable-Baselines3 Pong peer (``../shared/peers/bench_sb3_pixels_physics.py --task pong``)
on the same game as pytorchrl: 4 emulator frames per agent step.

The peer builds ``make_atari_env("ALE/Pong-v5")``. A v5 id already repeats each action for 4
frames inside the emulator, and SB3's ``AtariWrapper`` adds its own ``MaxAndSkipEnv(skip=4)``, so
each of its agent steps emulates 16 frames: 4x pytorchrl's emulator work per agent step, and a
coarser game. This script swaps the peer's env builder for one that passes ``frameskip=1`` to the
v5 env (sticky actions 0.25 stay), leaving the skip to ``AtariWrapper`` as SB3 intends, and then
runs the peer unchanged. Arguments are the peer's::

    python scripts/sb3_pong_same_frames.py --peers ../shared/peers --task pong --seed 0 --steps 50000 --eval-every 25000
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any


def main() -> None:
    argv = sys.argv[1:]
    peers = Path(__file__).resolve().parents[2] / "shared" / "peers"
    if argv[:1] == ["--peers"]:
        peers, argv = Path(argv[1]), argv[2:]
    if not (peers / "bench_sb3_pixels_physics.py").is_file():
        sys.exit(f"--peers {peers}: no bench_sb3_pixels_physics.py there")
    sys.path.insert(0, str(peers))
    peer = importlib.import_module("bench_sb3_pixels_physics")

    def make_pong(seed: int, n_envs: int) -> Any:
        import ale_py
        import gymnasium as gym
        from stable_baselines3.common.env_util import make_atari_env
        from stable_baselines3.common.vec_env import VecFrameStack

        gym.register_envs(ale_py)
        return VecFrameStack(make_atari_env("ALE/Pong-v5", n_envs=n_envs, seed=seed, env_kwargs={"frameskip": 1}), n_stack=4)

    setattr(peer, "make_pong", make_pong)  # noqa: B010  (the peer calls its module-level builder)
    sys.argv = [str(peers / "bench_sb3_pixels_physics.py"), *argv]
    peer.main()


if __name__ == "__main__":
    main()
