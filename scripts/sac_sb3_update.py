"""pytorchrl's SAC update against Stable-Baselines3's, step for step: the same initial weights
(SB3's copied into pytorchrl's actor: policy, critics, target critics, entropy coefficient), the
same minibatches (synthetic, shaped as the config's env) and the same reparameterisation noise
(both sides' Gaussian draws replaced by one shared draw per sample), for SB3's own SAC, for SB3
reordered as pytorchrl orders the update (the policy's gradient taken at the critics before their
step, in one backward pass with theirs and the entropy coefficient's), and for SB3 reordered with
its tanh correction exact: SB3 takes ``log(1 - tanh(u)^2 + 1e-6)`` (a guard against float32's
saturated tanh), pytorchrl the exact ``2 (log 2 - u - softplus(-2u))``.

    python scripts/sac_sb3_update.py [--config configs/sac/walker2d.yaml] [--steps 40] [KEY=VALUE ...]

The config's settings reach SB3 through ``scripts/sb3_reference.py`` (``sb3_settings`` and the
model it builds). What it showed: BENCHMARKS.md, "SAC's update against SB3's".

Needs stable-baselines3 and MuJoCo (``pip install -e ".[mujoco]" stable-baselines3``).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import types
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout
    sys.path.insert(0, str(ROOT))

from pytorchrl.agent.algorithms import ALGORITHMS, wire  # noqa: E402
from pytorchrl.config import load_config  # noqa: E402
from scripts.sb3_reference import _build, sb3_settings  # noqa: E402
from scripts.td3_sb3_update import (  # noqa: E402
    _linears,
    config_env,
    copy_critics,
    flat_critics,
    flat_linears,
    our_batch,
    report_steps,
    sb3_samples,
    step_pair,
    unit_box,
)

PARTS = ("critic", "policy", "ent_coef")


@contextlib.contextmanager
def _noise(draws: list[torch.Tensor], sb3: bool) -> Iterator[None]:
    """Replace one side's standard-normal draws by ``draws``, in order: SB3's ``Normal.rsample``
    (``loc + eps * scale``) or pytorchrl's ``torch.randn_like``."""
    queue = list(draws)
    if sb3:
        original = torch.distributions.Normal.rsample

        def rsample(self: Any, sample_shape: Any = torch.Size()) -> torch.Tensor:  # noqa: B008
            return self.loc + queue.pop(0) * self.scale

        torch.distributions.Normal.rsample = rsample  # type: ignore[method-assign]
        try:
            yield
        finally:
            torch.distributions.Normal.rsample = original  # type: ignore[method-assign]
    else:
        original_like = torch.randn_like
        torch.randn_like = lambda x, **kwargs: queue.pop(0)  # type: ignore[assignment]
        try:
            yield
        finally:
            torch.randn_like = original_like
    if queue:
        raise RuntimeError(f"a side drew {len(draws) - len(queue)} of its {len(draws)} noise samples")


class Pair:
    """An SB3 SAC and a pytorchrl SAC with the same weights (SB3's copied into pytorchrl's)."""

    def __init__(self, config_path: str, overrides: list[str], reorder: bool, sb3_epsilon: float | None = None) -> None:
        """:param sb3_epsilon: SB3's guard in its tanh correction, where not its own 1e-6."""
        from stable_baselines3.common.logger import configure

        config = load_config(config_path, overrides)
        settings = sb3_settings(config)
        if settings.get("use_sde") or not config.algorithm.learn_ent_coef:
            raise SystemExit("sac_sb3_update: compare with a learned entropy coefficient and without gSDE (its noise matrix is drawn per rollout)")
        settings.update(learning_starts=0, buffer_size=1_000)
        env = config_env(config)
        unit_box(env, "sac_sb3_update")
        self.sb3 = _build(settings, env, seed=0)
        self.sb3.set_logger(configure(None, []))
        if reorder:
            self.sb3.train = types.MethodType(_train_policy_gradient_first, self.sb3)
        wiring = wire(ALGORITHMS["sac"], config, env.observation_space, env.action_space)
        self.actor = wiring.actor(torch.device("cpu"))
        self.algo = wiring.algorithm(self.actor, "cpu")
        self.gamma = config.algorithm.gamma
        if sb3_epsilon is not None:
            self.sb3.policy.actor.action_dist.epsilon = sb3_epsilon
        self._copy_weights()

    def _copy_weights(self) -> None:
        sb3_actor, actor = self.sb3.policy.actor, self.actor
        with torch.no_grad():
            for src, dst in zip(_linears(sb3_actor.latent_pi), _linears(actor.policy_torso), strict=True):
                dst.weight.copy_(src.weight)
                dst.bias.copy_(src.bias)
            head = actor.policy_head  # the means' rows, then the log stds'
            head.weight.copy_(torch.cat([sb3_actor.mu.weight, sb3_actor.log_std.weight]))
            head.bias.copy_(torch.cat([sb3_actor.mu.bias, sb3_actor.log_std.bias]))
            copy_critics(self.sb3.policy, actor)
            actor.log_alpha.copy_(self.sb3.log_ent_coef.reshape(()))

    def flat(self, side: str, part: str) -> torch.Tensor:
        """One side's (``sb3`` or ``ours``) critics, policy or log entropy coefficient, flat, in SB3's layout."""
        if side == "sb3":
            policy = self.sb3.policy
            if part == "critic":
                return flat_linears([m for q in policy.critic.q_networks for m in _linears(q)])
            if part == "policy":
                return flat_linears([*_linears(policy.actor.latent_pi), policy.actor.mu, policy.actor.log_std])
            return self.sb3.log_ent_coef.detach().flatten()
        actor = self.actor
        if part == "critic":
            return flat_critics(actor.critics)
        if part == "policy":
            n = actor.action_dim
            head = actor.policy_head
            return torch.cat([
                flat_linears(_linears(actor.policy_torso)),
                *(t.detach().flatten() for t in (head.weight[:n], head.bias[:n], head.weight[n:], head.bias[n:])),
            ])
        return actor.log_alpha.detach().flatten()

    def step(self, batch: dict[str, np.ndarray], rng: np.random.Generator) -> None:
        """One gradient step of each on the same minibatch, with the same noise (drawn from ``rng``)
        for the current observations' and the next observations' samples (SB3 draws them in that
        order, pytorchrl the next ones first)."""
        shape = (len(batch["obs"]), self.actor.action_dim)
        now, later = (torch.as_tensor(rng.normal(size=shape), dtype=torch.float32) for _ in range(2))
        sb3_samples(self.sb3, batch)
        with _noise([now, later], sb3=True):
            self.sb3.train(gradient_steps=1, batch_size=len(batch["obs"]))
        with _noise([later, now], sb3=False):
            self.algo.compute_gradients(our_batch(batch, self.gamma))
            self.algo.apply_gradients()


def _train_policy_gradient_first(self: Any, gradient_steps: int, batch_size: int = 64) -> None:
    """SB3's ``SAC.train`` with pytorchrl's order: the entropy coefficient's, the critics' and the
    policy's gradients all at the parameters before the step (the policy's at the critics before
    theirs), then every optimizer steps."""
    from stable_baselines3.common.utils import polyak_update

    self.policy.set_training_mode(True)
    for _ in range(gradient_steps):
        self._n_updates += 1
        data = self.replay_buffer.sample(batch_size)
        actions_pi, log_prob = self.actor.action_log_prob(data.observations)
        log_prob = log_prob.reshape(-1, 1)
        ent_coef = torch.exp(self.log_ent_coef.detach())
        ent_coef_loss = -(self.log_ent_coef * (log_prob + self.target_entropy).detach()).mean()
        with torch.no_grad():
            next_actions, next_log_prob = self.actor.action_log_prob(data.next_observations)
            next_q = torch.cat(self.critic_target(data.next_observations, next_actions), dim=1).min(dim=1, keepdim=True).values
            target = data.rewards + (1 - data.dones) * self.gamma * (next_q - ent_coef * next_log_prob.reshape(-1, 1))
        critic_loss = 0.5 * sum(F.mse_loss(q, target) for q in self.critic(data.observations, data.actions))
        min_q_pi = torch.cat(self.critic(data.observations, actions_pi), dim=1).min(dim=1, keepdim=True).values
        actor_loss = (ent_coef * log_prob - min_q_pi).mean()
        for optimizer in (self.ent_coef_optimizer, self.critic.optimizer, self.actor.optimizer):
            optimizer.zero_grad()
        ent_coef_loss.backward()
        self.actor.optimizer.zero_grad()  # the coefficient's loss reaches the policy only through a detached log-prob: nothing
        actor_loss.backward(retain_graph=True)
        self.critic.optimizer.zero_grad()  # the policy's loss left gradients in the critics: not theirs to step on
        critic_loss.backward()
        for optimizer in (self.ent_coef_optimizer, self.critic.optimizer, self.actor.optimizer):
            optimizer.step()
        polyak_update(self.critic.parameters(), self.critic_target.parameters(), self.tau)


def compare(
    config: str, overrides: list[str], steps: int, reorder: bool, report: tuple[int, ...], sb3_epsilon: float | None = None,
) -> list[tuple[int, str, float, float]]:
    """``(step, part, SB3's movement, |SB3 - pytorchrl|)`` at the ``report`` steps."""
    return step_pair(Pair(config, overrides, reorder, sb3_epsilon), PARTS, steps, report)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(ROOT / "configs/sac/walker2d.yaml"))
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    report = report_steps(args.steps)
    for reorder, epsilon, title in (
        (False, None, "SB3's SAC against pytorchrl's"),
        (True, None, "SB3's SAC reordered as pytorchrl's (every gradient before any step) against it"),
        (True, 0.0, "the same, SB3's tanh correction exact (its 1e-6 guard at 0)"),
    ):
        print(f"--- {title}")
        for step, part, moved, apart in compare(args.config, args.overrides, args.steps, reorder, report, epsilon):
            print(f"step {step:4d} {part:8s}: SB3 moved {moved:.4e}, |SB3 - pytorchrl| {apart:.4e} ({apart / max(moved, 1e-12):6.2%} of the move)")


if __name__ == "__main__":
    main()
