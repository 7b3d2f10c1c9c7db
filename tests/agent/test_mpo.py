"""MPO's E-step, its temperature dual, its decoupled M-step and its wiring (Abdolmaleki et al. 2018)."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from pytorchrl.agent.actors.networks.encoders import EncoderSpec
from pytorchrl.agent.actors.policy_critic import PolicyCriticActor
from pytorchrl.agent.algorithms import MPO, MPOConfig
from pytorchrl.agent.algorithms.mpo import e_step_weights, temperature_dual
from pytorchrl.config import ConfigError, from_dict

pytestmark = pytest.mark.timeout(60)

OBS, ACTIONS = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (2,))


def _actor(**kwargs):
    torch.manual_seed(0)
    return PolicyCriticActor(OBS, ACTIONS, encoder=EncoderSpec(hidden_sizes=(16,), activation="relu"), target_policy=True, duals=3, **kwargs)


def _batch(n=8):
    g = torch.Generator().manual_seed(1)
    return {
        "obs": torch.rand(n, 3, generator=g) * 2 - 1, "next_obs": torch.rand(n, 3, generator=g) * 2 - 1,
        "actions": torch.rand(n, 2, generator=g) * 4 - 2, "rewards": torch.rand(n, generator=g), "discounts": torch.full((n,), 0.99),
    }


def test_e_step_weights_by_hand():
    """Two states, three sampled actions each: weights are exp(Q / eta) normalised per state."""
    q = torch.tensor([[1.0, 0.0], [2.0, 0.0], [3.0, 3.0]])  # [N=3, B=2]
    w = e_step_weights(q, 2.0)
    first = np.exp(np.array([1.0, 2.0, 3.0]) / 2.0)
    second = np.exp(np.array([0.0, 0.0, 3.0]) / 2.0)
    np.testing.assert_allclose(w[:, 0].numpy(), first / first.sum(), rtol=1e-6)
    np.testing.assert_allclose(w[:, 1].numpy(), second / second.sum(), rtol=1e-6)
    # a high temperature spreads the weight evenly; a low one puts it on the best action
    np.testing.assert_allclose(e_step_weights(q, 1e6).numpy(), np.full((3, 2), 1 / 3), atol=1e-5)
    assert torch.equal(e_step_weights(q, 1e-3)[:, 0], torch.tensor([0.0, 0.0, 1.0]))


def test_temperature_dual_by_hand_and_its_minimum_keeps_the_kl_at_epsilon():
    q = torch.tensor([[1.0, 0.0], [2.0, 0.0], [3.0, 3.0]])
    eta, eps = torch.tensor(2.0), 0.1
    by_hand = eta * eps + eta * np.mean([math.log(np.mean(np.exp(q[:, i].numpy() / 2.0))) for i in range(2)])
    assert float(temperature_dual(q, eta, eps)) == pytest.approx(float(by_hand), rel=1e-6)
    # minimise over eta: at the optimum, the mean KL of the weights to the uniform sampling policy is epsilon
    raw = torch.zeros((), requires_grad=True)
    opt = torch.optim.Adam([raw], lr=0.05)
    for _ in range(3000):
        loss = temperature_dual(q, torch.nn.functional.softplus(raw) + 1e-8, eps)
        opt.zero_grad()
        loss.backward()
        opt.step()
    w = e_step_weights(q, torch.nn.functional.softplus(raw).detach())
    kl = (w * torch.log(w * q.shape[0])).sum(0).mean()
    assert float(kl) == pytest.approx(eps, abs=5e-3)


def test_the_m_step_moves_the_mean_and_the_spread_separately_within_their_bounds():
    """After one step from equal online and target policies, the KLs the loss reports are finite
    and small; the critics' loss moves the critics and not the policy, the policy loss the policy."""
    actor = _actor()
    algo = MPO(actor, lr=1e-3, num_action_samples=8)
    loss, info = algo.compute_loss(_batch())
    assert info["kl_mean"] == pytest.approx(0.0, abs=1e-9) and info["kl_std"] == pytest.approx(0.0, abs=1e-9)  # online == target
    assert {"temperature", "alpha_mean", "alpha_std"} <= set(info)
    assert info["temperature"] == pytest.approx(1.0, rel=1e-4) and info["alpha_std"] == pytest.approx(10.0, rel=1e-4)
    loss.backward()
    assert actor.duals.grad is not None and bool(torch.all(actor.duals.grad != 0))
    assert all(p.grad is None or not p.grad.abs().sum() for p in actor.target_policy.parameters())  # targets never train
    before = [p.detach().clone() for p in (*actor.policy_head.parameters(),)]
    assert algo.apply_gradients()
    assert any(not torch.equal(b, p) for b, p in zip(before, actor.policy_head.parameters()))
    _, info = algo.compute_loss(_batch())
    assert 0 < info["kl_mean"] < 0.1 and 0 <= info["kl_std"] < 0.1


def test_mpo_config_and_bad_input():
    cfg = from_dict({"env": {"env_id": "Pendulum-v1"}, "algorithm": {"name": "mpo", "start_steps": 256}})
    assert isinstance(cfg.algorithm, MPOConfig) and cfg.algorithm.num_action_samples == 20
    with pytest.raises(ConfigError, match=r"'algorithm.num_action_samples' = 1 is out of range"):
        from_dict({"env": {"env_id": "Pendulum-v1"}, "algorithm": {"name": "mpo", "num_action_samples": 1}})
    with pytest.raises(TypeError, match="MPO has no hyper-parameter 'clip_range'"):
        MPO(_actor(), clip_range=0.2)
    with pytest.raises(ValueError, match=r"target_policy=True and duals=3"):
        MPO(PolicyCriticActor(OBS, ACTIONS, encoder=EncoderSpec(hidden_sizes=(16,))))
    assert MPO.check_action_space(gym.spaces.Discrete(3)) == "a bounded Box action space (MPO's Gaussian policy is continuous)"
