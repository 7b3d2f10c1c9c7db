"""Each actor's rollout noise: the values it draws and how far it moves the random stream are
those of the draw code before the actors described their noise as parts (frozen below), for
every shipped actor and action head."""

from __future__ import annotations

import copy

import gymnasium as gym
import pytest
import torch

from pytorchrl.agent.actors.distributions import CategoricalHead, DiagGaussianHead, MultiCategoricalHead
from pytorchrl.agent.actors.off_policy import OffPolicyActor
from pytorchrl.agent.actors.on_policy import OnPolicyActor
from pytorchrl.agent.actors.policy_critic import PolicyCriticActor
from pytorchrl.agent.algorithms import ALGORITHMS, wire
from pytorchrl.config import load_config
from pytorchrl.envs.vec_env import VecEnv
from tests.conftest import CONFIGS


def frozen_draw_noise(actor: torch.nn.Module, num_steps: int, num_envs: int) -> torch.Tensor:
    """The actors' ``draw_noise`` as it was written out per actor and head (do not edit: it is the reference)."""
    if isinstance(actor, OnPolicyActor):
        head = actor.action_head
        shape = (num_steps, num_envs)
        if isinstance(head, CategoricalHead):
            return torch.empty((*shape, head.linear.out_features), device=head.linear.weight.device).exponential_().log_().neg_()
        if isinstance(head, MultiCategoricalHead):
            return torch.empty((*shape, sum(head.nvec)), device=head.linear.weight.device).exponential_().log_().neg_()
        assert isinstance(head, DiagGaussianHead)
        return torch.randn(*shape, head.log_std.shape[0], device=head.log_std.device).mul_(head.log_std.exp())
    if isinstance(actor, OffPolicyActor):
        actor.q_net.reset_noise()
        uniform = torch.rand(num_steps, num_envs, 1)
        random_action = torch.randint(actor.num_actions, (num_steps, num_envs, 1)).float()
        return torch.cat([uniform, random_action], dim=-1)
    assert isinstance(actor, PolicyCriticActor)
    shape = (num_steps, num_envs, actor.action_dim)
    if actor.discrete:
        gumbel = -torch.empty(shape).exponential_().log()
        return torch.cat([gumbel, torch.randint(actor.action_dim, (num_steps, num_envs, 1)).float()], -1)
    return torch.cat([torch.randn(shape), torch.rand(shape) * 2 - 1], -1)


def build_actor(config: str, overrides: list[str], action_space: gym.Space | None, device: str) -> torch.nn.Module:
    cfg = load_config(CONFIGS / config, overrides)
    _, obs_space, act_space = VecEnv.create_factory(cfg.env.env_id, num_envs=2, action_mask=cfg.env.action_mask)
    return wire(ALGORITHMS[cfg.algorithm.name], cfg, obs_space, act_space if action_space is None else action_space).actor(device)


CASES = [
    ("ppo/cartpole.yaml", [], None),  # categorical
    ("ppo/cartpole.yaml", [], gym.spaces.MultiDiscrete([3, 2, 4])),
    ("ppo/pendulum.yaml", [], None),  # Gaussian, scaled by exp(log_std)
    ("ppo/legal_moves_masked.yaml", [], None),  # masked categorical
    ("ppo/cartpole_masked_gru.yaml", [], None),
    ("appo/cartpole_masked_lstm.yaml", [], None),
    ("a2c/cartpole.yaml", [], None),
    ("impala/cartpole.yaml", [], None),
    ("dqn/cartpole.yaml", [], None),  # epsilon-greedy
    ("dqn/apex_cartpole.yaml", [], None),
    ("dqn/rainbow_cartpole.yaml", [], None),  # noisy nets: parameter noise redrawn first
    ("dqn/r2d2_cartpole_masked.yaml", [], None),
    ("dqn/legal_moves_masked.yaml", [], None),
    ("sac/pendulum.yaml", [], None),
    ("sac/discrete_cartpole.yaml", [], None),
    ("sac/pendulum_masked_gru.yaml", [], None),
    ("td3/pendulum.yaml", [], None),
    ("ddpg/pendulum.yaml", [], None),
    ("ddpg/pendulum.yaml", ["algorithm.exploration_noise_type=ou"], None),
]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA"))])
@pytest.mark.parametrize(("config", "overrides", "action_space"), CASES)
def test_every_actor_draws_the_frozen_noise_bit_for_bit(config, overrides, action_space, device):
    actor = build_actor(config, overrides, action_space, device)
    if isinstance(actor, OnPolicyActor) and isinstance(actor.action_head, DiagGaussianHead):
        with torch.no_grad():  # a std other than 1, so that the scaling shows
            actor.action_head.log_std.copy_(torch.linspace(-1.3, 0.7, actor.action_head.log_std.numel()))
    if isinstance(actor, OffPolicyActor):
        actor.set_collector(1)  # Ape-X: another exploration rate, the same draws
    reference = copy.deepcopy(actor)
    with torch.random.fork_rng(devices=[torch.cuda.current_device()] if device == "cuda" else []):
        for grad in (False, True):
            torch.manual_seed(11)
            with torch.set_grad_enabled(grad):
                expected = frozen_draw_noise(reference, 7, 5)
            after = torch.get_rng_state(), torch.cuda.get_rng_state() if device == "cuda" else None
            torch.manual_seed(11)
            with torch.set_grad_enabled(grad):
                drawn = actor.draw_noise(7, 5)
            assert torch.equal(torch.get_rng_state(), after[0])  # the stream moves on alike
            assert after[1] is None or torch.equal(torch.cuda.get_rng_state(), after[1])
            assert drawn.dtype == expected.dtype and drawn.device == expected.device and drawn.requires_grad == expected.requires_grad
            assert torch.equal(drawn, expected) and drawn.shape[:2] == (7, 5)
    for (name, got), (_, want) in zip(actor.named_buffers(), reference.named_buffers(), strict=True):
        assert torch.equal(got, want), name  # noisy nets' parameter noise redrawn alike
