"""Write scripted demonstrations of ``pytorchrl/Chain-v0`` for PPO from demonstrations (PPOD).

    python scripts/record_chain_demos.py configs/ppo/demos/chain --num 5 --length 20 --max-episode-steps 40

Demonstration ``k`` walks the chain to its goal with one step back to the start at cell ``k``
(:func:`pytorchrl.envs.chain.write_chain_demos`); ``configs/ppo/ppod_chain.yaml`` replays the
five this command writes.
"""

from __future__ import annotations

import argparse

from pytorchrl.envs.chain import write_chain_demos


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("--num", type=int, default=5)
    parser.add_argument("--length", type=int, default=15)
    parser.add_argument("--max-episode-steps", type=int, default=None)
    args = parser.parse_args()
    for path in write_chain_demos(args.directory, args.num, length=args.length, max_episode_steps=args.max_episode_steps):
        print(path)


if __name__ == "__main__":
    main()
