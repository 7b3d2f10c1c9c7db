"""pytorchrl's PPO update against Stable-Baselines3's, minibatch for minibatch: the same initial
weights (SB3's copied into pytorchrl's actor), the same rollout (synthetic observations of the
config's env, actions sampled by the policy, their log-probabilities and values, random
advantages and returns), the same minibatches in the same order, for the config's epochs.
Prints how far SB3's policy and value networks moved and how far apart the two are after each
epoch.

    python scripts/ppo_sb3_update.py [--config configs/ppo/halfcheetah.yaml] [--rounds 3]

The config's settings reach SB3 through ``scripts/sb3_reference.py``'s mapping (``sb3_settings``),
the one its reference runs use. Only the update is compared: the advantages and returns are given,
not computed (the two lay rollouts out differently around episode ends). What it showed:
BENCHMARKS.md, "PPO's update against SB3's".

Needs stable-baselines3 (and MuJoCo for the MuJoCo configs: ``pip install -e ".[mujoco]" stable-baselines3``).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout
    sys.path.insert(0, str(ROOT))

from pytorchrl.agent.algorithms import ALGORITHMS, wire  # noqa: E402
from pytorchrl.config import load_config  # noqa: E402
from scripts.sb3_reference import _build, sb3_settings  # noqa: E402
from scripts.td3_sb3_update import _linears, config_env, copied_weights  # noqa: E402


class Pair:
    """An SB3 PPO and a pytorchrl PPO with the same weights, on a memoryless Box-action config."""

    def __init__(self, config_path: str, overrides: list[str]) -> None:
        from stable_baselines3.common.logger import configure

        config = load_config(config_path, overrides)
        settings = sb3_settings(config)
        if settings["anneal"] or settings["target_kl"] is not None:
            raise SystemExit("ppo_sb3_update: compare without schedules or target_kl (they move with the run's progress)")
        env = config_env(config)
        if not isinstance(env.action_space, gym.spaces.Box):
            raise SystemExit(f"ppo_sb3_update: {config.env.env_id} has {env.action_space}; this script compares Gaussian policies")
        self.sb3 = _build(settings, env, seed=0)  # one env, unnormalised: the rollout is made here
        self.sb3.set_logger(configure(None, []))
        wiring = wire(ALGORITHMS["ppo"], config, env.observation_space, env.action_space)
        self.actor = wiring.actor(torch.device("cpu"))
        self.algo = wiring.algorithm(self.actor, "cpu")
        self.batch_size, self.epochs = settings["batch_size"], settings["n_epochs"]
        self._copy_weights()

    def _layers(self, side: str) -> dict[str, list[torch.nn.Linear]]:
        if side == "sb3":
            policy = self.sb3.policy
            extractor = policy.mlp_extractor
            return {"policy": [*_linears(extractor.policy_net), policy.action_net], "value": [*_linears(extractor.value_net), policy.value_net]}
        actor = self.actor
        return {"policy": [*_linears(actor.policy_net), actor.action_head.linear], "value": [*_linears(actor.value_net), actor.value_head]}

    def _log_std(self, side: str) -> torch.Tensor:
        return self.sb3.policy.log_std if side == "sb3" else self.actor.action_head.log_std

    def _copy_weights(self) -> None:
        ours = self._layers("ours")
        with torch.no_grad():
            for part, layers in self._layers("sb3").items():
                for src, dst in zip(layers, ours[part], strict=True):
                    dst.weight.copy_(src.weight)
                    dst.bias.copy_(src.bias)
            self._log_std("ours").copy_(self._log_std("sb3"))

    def flat(self, side: str, part: str) -> torch.Tensor:
        """One side's policy (with the log std) or value parameters, flat."""
        tensors = [p for m in self._layers(side)[part] for p in (m.weight, m.bias)]
        if part == "policy":
            tensors.append(self._log_std(side))
        return torch.cat([t.detach().flatten() for t in tensors])

    def rollout(self, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        """One rollout's worth of transitions: actions, log-probabilities and values from SB3's policy."""
        size = self.sb3.n_steps
        obs = torch.as_tensor(rng.normal(size=(size, *self.sb3.observation_space.shape)), dtype=torch.float32)
        with torch.no_grad():
            actions, values, log_probs = self.sb3.policy(obs)
        advantages = torch.as_tensor(rng.normal(size=size), dtype=torch.float32)
        return {
            "obs": obs, "actions": actions, "log_probs": log_probs, "values": values.flatten(),
            "advantages": advantages, "returns": values.flatten() + advantages,
        }

    def epoch(self, data: dict[str, torch.Tensor], rng: np.random.Generator) -> None:
        """One pass of both over ``data`` in the same shuffled minibatches."""
        from stable_baselines3.common.type_aliases import RolloutBufferSamples

        order = torch.as_tensor(rng.permutation(len(data["obs"])))
        batches = [{k: v[idx] for k, v in data.items()} for idx in order.split(self.batch_size)]

        def minibatches(batch_size: int) -> Any:
            for b in batches:
                yield RolloutBufferSamples(b["obs"], b["actions"], b["values"], b["log_probs"], b["advantages"], b["returns"])

        self.sb3.rollout_buffer.get = minibatches  # type: ignore[method-assign]
        self.sb3.n_epochs = 1
        self.sb3.train()
        for b in batches:
            self.algo.compute_gradients(b)
            self.algo.apply_gradients()


def compare(config: str, overrides: list[str], rounds: int) -> list[tuple[int, int, str, float, float]]:
    """``(round, epoch, part, SB3's movement, |SB3 - pytorchrl|)`` after each epoch."""
    pair = Pair(config, overrides)
    start = copied_weights(pair, ("policy", "value"))
    rng = np.random.default_rng(0)
    rows = []
    for r in range(1, rounds + 1):
        data = pair.rollout(rng)
        for e in range(1, pair.epochs + 1):
            pair.epoch(data, rng)
            for part in ("policy", "value"):
                sb3 = pair.flat("sb3", part)
                rows.append((r, e, part, float((sb3 - start[part]).norm()), float((sb3 - pair.flat("ours", part)).norm())))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(ROOT / "configs/ppo/halfcheetah.yaml"))
    parser.add_argument("--rounds", type=int, default=3, help="rollouts, each trained on for the config's epochs")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    for r, e, part, moved, apart in compare(args.config, args.overrides, args.rounds):
        print(f"round {r} epoch {e:3d} {part:6s}: SB3 moved {moved:.4e}, |SB3 - pytorchrl| {apart:.4e} ({apart / max(moved, 1e-12):8.4%} of the move)")


if __name__ == "__main__":
    main()
