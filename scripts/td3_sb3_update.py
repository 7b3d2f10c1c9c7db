"""pytorchrl's TD3 update against Stable-Baselines3's, step for step: the same initial weights,
the same minibatches (synthetic, Walker2d-shaped), no target smoothing noise (the one random
draw in the update). Prints how far each side's critics and policy moved and how far apart
they are, for SB3's own TD3 and for SB3 reordered as pytorchrl orders the update (the policy's
gradient taken at the critics before their step, in one backward pass), and SB3's own against
pytorchrl's ``algorithm.policy_update: after_critics`` (the reference's order).

    python scripts/td3_sb3_update.py [--steps 40] [--config configs/td3/walker2d.yaml]

What it showed (BENCHMARKS.md, "TD3's update against SB3's"): reordered, the two match to float
precision (critics within 4e-6, policies within 1e-6 over 20 steps; past that, float rounding
differences grow as training on these random targets amplifies them, the critics' to 1% of
their movement by 100 steps, the policies staying within 1e-4); in SB3's own order the
policies part from the first policy step on (25-70% of their movement).

Needs stable-baselines3 and MuJoCo (``pip install -e ".[mujoco]" stable-baselines3``).
"""

from __future__ import annotations

import argparse
import types
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F

from pytorchrl.agent.algorithms import ALGORITHMS, wire
from pytorchrl.config import Config, load_config

#: the checkout: the scripts' default configs are found from any working directory
ROOT = Path(__file__).resolve().parent.parent


def config_env(config: Config) -> gym.Env:
    """One env of ``config``, made with its ``env.env_kwargs`` (LunarLander-v3's continuous
    actions are a keyword, not an id)."""
    return gym.make(config.env.env_id, **config.env.env_kwargs)


def _linears(module: torch.nn.Module) -> list[torch.nn.Linear]:
    return [m for m in module.modules() if isinstance(m, torch.nn.Linear)]


def flat_linears(layers: list[torch.nn.Linear]) -> torch.Tensor:
    """The weights and biases of ``layers``, flat, in order."""
    return torch.cat([p.detach().flatten() for m in layers for p in (m.weight, m.bias)])


def copy_critics(policy: Any, actor: Any) -> None:
    """SB3's critics and target critics (``policy.critic``, ``policy.critic_target``) into
    pytorchrl's critic ensembles (``actor.critics``, ``actor.target_critics``)."""
    with torch.no_grad():
        for critic, ensemble in ((policy.critic, actor.critics), (policy.critic_target, actor.target_critics)):
            for k, q in enumerate(critic.q_networks):
                for i, layer in enumerate(_linears(q)):
                    ensemble.weights[i][k].copy_(layer.weight.T)
                    ensemble.biases[i][k, 0].copy_(layer.bias)


def unit_box(env: gym.Env, script: str) -> None:
    """Refuse an env whose actions are not bounded by [-1, 1]: the minibatches' actions are drawn
    there, which SB3's critics read as they are and pytorchrl's rescale from the env's bounds."""
    space = env.action_space
    if not (isinstance(space, gym.spaces.Box) and np.all(space.low == -1) and np.all(space.high == 1)):
        raise SystemExit(f"{script}: {env.spec.id if env.spec else env} has actions {space}; compare on an env whose actions are bounded by [-1, 1]")


def flat_critics(critics: Any) -> torch.Tensor:
    """A pytorchrl critic ensemble's parameters, flat, in SB3's layout (critic by critic, layer by layer)."""
    return torch.cat([
        p.detach().flatten() for k in range(len(critics.weights[0])) for i in range(len(critics.weights))
        for p in (critics.weights[i][k].T, critics.biases[i][k, 0])
    ])


class Pair:
    """An SB3 TD3 and a pytorchrl TD3 with the same weights (SB3's copied into pytorchrl's)."""

    def __init__(self, config_path: str, reorder: bool, policy_update: str = "fused") -> None:
        from stable_baselines3 import TD3
        from stable_baselines3.common.logger import configure

        torch.manual_seed(0)  # SB3's initial weights, the same for both orders
        config = load_config(config_path, ["algorithm.target_policy_noise=0", f"algorithm.policy_update={policy_update}"])
        algo_config = config.algorithm
        env = config_env(config)
        unit_box(env, "td3_sb3_update")
        wiring = wire(ALGORITHMS["td3"], config, env.observation_space, env.action_space)
        self.actor = wiring.actor(torch.device("cpu"))
        self.algo = wiring.algorithm(self.actor, "cpu")
        self.sb3 = TD3(
            "MlpPolicy", env, learning_rate=algo_config.lr, buffer_size=1_000, learning_starts=0, batch_size=algo_config.minibatch_size,
            tau=algo_config.tau, gamma=algo_config.gamma, policy_delay=algo_config.policy_delay, target_policy_noise=0.0,
            policy_kwargs={"net_arch": list(config.actor.hidden_sizes)}, device="cpu",
        )
        self.sb3.set_logger(configure(None, []))
        if reorder:
            self.sb3.train = types.MethodType(_train_policy_gradient_first, self.sb3)
        self.gamma = algo_config.gamma
        self._copy_weights()

    def _copy_weights(self) -> None:
        policy, actor = self.sb3.policy, self.actor
        with torch.no_grad():
            for source, (torso, head) in ((policy.actor.mu, (actor.policy_torso, actor.policy_head)), (policy.actor_target.mu, tuple(actor.target_policy))):
                for src, dst in zip(_linears(source), [*_linears(torso), head], strict=True):
                    dst.weight.copy_(src.weight)
                    dst.bias.copy_(src.bias)
            copy_critics(policy, actor)

    def flat(self, side: str, part: str) -> torch.Tensor:
        """One side's (``sb3`` or ``ours``) policy or critic parameters, flat, in SB3's layout."""
        if side == "sb3":
            policy = self.sb3.policy
            return flat_linears(_linears(policy.actor.mu)) if part == "policy" else flat_linears([m for q in policy.critic.q_networks for m in _linears(q)])
        actor = self.actor
        return flat_linears([*_linears(actor.policy_torso), actor.policy_head]) if part == "policy" else flat_critics(actor.critics)

    def step(self, batch: dict[str, np.ndarray], rng: np.random.Generator) -> None:
        """One gradient step of each on the same minibatch (``rng``: unused, TD3's update draws nothing here)."""
        sb3_samples(self.sb3, batch)
        self.sb3.train(gradient_steps=1, batch_size=len(batch["obs"]))
        self.algo.compute_gradients(our_batch(batch, self.gamma))
        self.algo.apply_gradients()


def random_minibatch(rng: np.random.Generator, size: int, obs_dim: int, action_dim: int) -> dict[str, np.ndarray]:
    """``size`` random transitions: observations, nearby next observations, actions in [-1, 1],
    rewards around 1 and 5% of episode ends."""
    obs = rng.normal(size=(size, obs_dim)).astype(np.float32)
    return {
        "obs": obs, "next_obs": (obs + 0.1 * rng.normal(size=obs.shape)).astype(np.float32),
        "actions": rng.uniform(-1, 1, size=(size, action_dim)).astype(np.float32),
        "rewards": (rng.normal(size=size) + 1.0).astype(np.float32), "dones": (rng.uniform(size=size) < 0.05).astype(np.float32),
    }


def sb3_samples(sb3: Any, batch: dict[str, np.ndarray]) -> None:
    """Make ``batch`` what ``sb3``'s replay buffer samples next."""
    from stable_baselines3.common.type_aliases import ReplayBufferSamples

    t = torch.as_tensor
    sample = ReplayBufferSamples(t(batch["obs"]), t(batch["actions"]), t(batch["next_obs"]), t(batch["dones"])[:, None], t(batch["rewards"])[:, None])
    sb3.replay_buffer.sample = lambda batch_size, env=None: sample


def our_batch(batch: dict[str, np.ndarray], gamma: float) -> dict[str, torch.Tensor]:
    """``batch`` as pytorchrl's replay minibatch (discounts in place of episode ends)."""
    t = torch.as_tensor
    return {"obs": t(batch["obs"]), "actions": t(batch["actions"]), "next_obs": t(batch["next_obs"]), "rewards": t(batch["rewards"]), "discounts": gamma * (1 - t(batch["dones"]))}


def copied_weights(pair: Any, parts: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """SB3's starting weights of each of ``parts`` (flat), checked to be pytorchrl's too."""
    start = {part: pair.flat("sb3", part).clone() for part in parts}
    for part, weights in start.items():
        if not torch.allclose(weights, pair.flat("ours", part)):
            raise RuntimeError(f"the {part} weights were not copied")
    return start


def step_pair(pair: Any, parts: tuple[str, ...], steps: int, report: tuple[int, ...]) -> list[tuple[int, str, float, float]]:
    """``steps`` gradient steps of ``pair`` (a ``flat(side, part)`` and a ``step(batch, rng)``) on
    random minibatches of SB3's batch size: ``(step, part, SB3's movement, |SB3 - pytorchrl|)`` at
    the ``report`` steps."""
    start = copied_weights(pair, parts)
    rng = np.random.default_rng(0)
    obs_dim, action_dim = int(np.prod(pair.actor.observation_space.shape)), pair.actor.action_dim
    rows = []
    for step in range(1, steps + 1):
        pair.step(random_minibatch(rng, pair.sb3.batch_size, obs_dim, action_dim), rng)
        if step in report:
            for part in parts:
                sb3 = pair.flat("sb3", part)
                rows.append((step, part, float((sb3 - start[part]).norm()), float((sb3 - pair.flat("ours", part)).norm())))
    return rows


def report_steps(steps: int) -> tuple[int, ...]:
    """The steps a comparison of ``steps`` steps reports: 1, 2, 4, 10, 20, ... up to it, and the last."""
    return tuple(sorted({s for s in (1, 2, 4, 10, 20, 40, 100, 200) if s <= steps} | {steps}))


def _train_policy_gradient_first(self: Any, gradient_steps: int, batch_size: int = 100) -> None:
    """SB3's ``TD3.train`` (without target noise) with pytorchrl's order: the policy's loss and
    gradient at the critics before their step, then both optimizers step."""
    from stable_baselines3.common.utils import polyak_update

    self.policy.set_training_mode(True)
    for _ in range(gradient_steps):
        self._n_updates += 1
        data = self.replay_buffer.sample(batch_size)
        with torch.no_grad():
            next_actions = self.actor_target(data.next_observations).clamp(-1, 1)
            next_q = torch.cat(self.critic_target(data.next_observations, next_actions), dim=1).min(dim=1, keepdim=True).values
            target = data.rewards + (1 - data.dones) * self.gamma * next_q
        critic_loss = sum(F.mse_loss(q, target) for q in self.critic(data.observations, data.actions))
        policy_step = self._n_updates % self.policy_delay == 0
        if policy_step:
            self.actor.optimizer.zero_grad()
            (-self.critic.q1_forward(data.observations, self.actor(data.observations)).mean()).backward()
        self.critic.optimizer.zero_grad()
        critic_loss.backward()
        self.critic.optimizer.step()
        if policy_step:
            self.actor.optimizer.step()
            polyak_update(self.critic.parameters(), self.critic_target.parameters(), self.tau)
            polyak_update(self.actor.parameters(), self.actor_target.parameters(), self.tau)


def compare(config: str, steps: int, reorder: bool, report: tuple[int, ...], policy_update: str = "fused") -> list[tuple[int, str, float, float]]:
    """``(step, part, SB3's movement, |SB3 - pytorchrl|)`` at the ``report`` steps."""
    return step_pair(Pair(config, reorder, policy_update), ("critic", "policy"), steps, report)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(ROOT / "configs/td3/walker2d.yaml"))
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    report = report_steps(args.steps)
    for reorder, update, title in (
        (False, "fused", "SB3's TD3 against pytorchrl's (algorithm.policy_update: fused, the default)"),
        (True, "fused", "SB3's TD3 reordered as pytorchrl's default (the policy's gradient before the critics' step) against it"),
        (False, "after_critics", "SB3's TD3 against pytorchrl's with algorithm.policy_update: after_critics"),
    ):
        print(f"--- {title}")
        for step, part, moved, apart in compare(args.config, args.steps, reorder, report, update):
            print(f"step {step:4d} {part:6s}: SB3 moved {moved:.4e}, |SB3 - pytorchrl| {apart:.4e} ({apart / max(moved, 1e-12):6.2%} of the move)")


if __name__ == "__main__":
    main()
