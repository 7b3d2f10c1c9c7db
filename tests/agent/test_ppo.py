"""PPO and A2C losses on a fixed batch against hand computations; action heads against torch.distributions."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch
from torch.distributions import Categorical, Normal

from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.agent.actors.networks import EncoderSpec
from pytorchrl.agent.algorithms import A2C, PPO


def _batch(actor, n=6):
    g = torch.Generator().manual_seed(0)
    obs = torch.randn(n, 4, generator=g)
    actions = torch.randint(0, 2, (n,), generator=g)
    return {
        "obs": obs, "actions": actions,
        "log_probs": torch.log(torch.full((n,), 0.5)) + 0.1 * torch.randn(n, generator=g),
        "values": torch.randn(n, generator=g), "returns": torch.randn(n, generator=g),
        "advantages": torch.randn(n, generator=g),
    }


def _actor():
    torch.manual_seed(0)
    return OnPolicyActor(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), encoder=EncoderSpec(hidden_sizes=(8,)), ortho_init=False)


def test_ppo_loss_matches_hand_computation():
    actor = _actor()
    algo = PPO(actor, clip_range=0.2, ent_coef=0.01, vf_coef=0.5, normalize_advantages=True)
    batch = _batch(actor)
    loss, info = algo.compute_loss(batch)
    logits, value = actor.forward(batch["obs"])
    dist = Categorical(logits=logits)
    logp = dist.log_prob(batch["actions"])
    adv = (batch["advantages"] - batch["advantages"].mean()) / (batch["advantages"].std() + 1e-8)
    ratio = torch.exp(logp - batch["log_probs"])
    policy = -torch.mean(torch.minimum(ratio * adv, torch.clamp(ratio, 0.8, 1.2) * adv))
    value_loss = torch.mean((value - batch["returns"]) ** 2)
    expected = policy + 0.5 * value_loss - 0.01 * dist.entropy().mean()
    assert torch.allclose(loss, expected, atol=1e-6)
    assert abs(info["clip_fraction"] - float(((ratio - 1).abs() > 0.2).float().mean())) < 1e-6


def test_ppo_value_clipping_and_target_kl_stop():
    actor = _actor()
    batch = _batch(actor)
    algo = PPO(actor, clip_range_vf=0.1, ent_coef=0.0)
    loss, _ = algo.compute_loss(batch)
    _, value = actor.forward(batch["obs"])
    clipped = batch["values"] + (value - batch["values"]).clamp(-0.1, 0.1)
    assert loss is not None
    algo_noclip = PPO(actor, ent_coef=0.0)
    loss_noclip, _ = algo_noclip.compute_loss(batch)
    diff = loss - loss_noclip
    assert torch.allclose(diff, 0.5 * (((clipped - batch["returns"]) ** 2).mean() - ((value - batch["returns"]) ** 2).mean()), atol=1e-6)
    stopper = PPO(actor, target_kl=1e-9)
    loss, info = stopper.compute_loss(batch)
    assert loss is None and stopper.stop_round and info["approx_kl"] > 1.5e-9


@pytest.mark.parametrize("clip_range_vf", [None, 0.1])
def test_cleanrl_s_value_loss_is_half_the_larger_of_the_clipped_and_unclipped_errors(clip_range_vf):
    """``value_loss: cleanrl`` is ppo_atari.py's and ppo_continuous_action.py's value term:
    vf_coef * 0.5 * mean(max((V - R)^2, (V_clipped - R)^2)), against SB3's vf_coef * mse of the
    clipped V. The policy and entropy terms are the same, so the losses differ by the value terms."""
    actor = _actor()
    batch = _batch(actor)
    _, value = actor.forward(batch["obs"])
    returns, old = batch["returns"], batch["values"]
    clipped = value if clip_range_vf is None else old + (value - old).clamp(-clip_range_vf, clip_range_vf)
    cleanrl = 0.5 * torch.maximum((value - returns) ** 2, (clipped - returns) ** 2).mean()
    sb3 = ((clipped - returns) ** 2).mean()
    losses = {form: PPO(actor, clip_range_vf=clip_range_vf, vf_coef=0.5, value_loss=form).compute_loss(batch) for form in ("sb3", "cleanrl")}
    assert torch.allclose(losses["cleanrl"][0] - losses["sb3"][0], 0.5 * (cleanrl - sb3), atol=1e-6)
    assert losses["cleanrl"][1]["value_loss"] == pytest.approx(float(cleanrl), abs=1e-6)


def test_a2c_loss_matches_hand_computation():
    actor = _actor()
    batch = _batch(actor)
    loss, _ = A2C(actor, ent_coef=0.0, vf_coef=0.25).compute_loss(batch)
    logits, value = actor.forward(batch["obs"])
    logp = Categorical(logits=logits).log_prob(batch["actions"])
    expected = -(batch["advantages"] * logp).mean() + 0.25 * ((value - batch["returns"]) ** 2).mean()
    assert torch.allclose(loss, expected, atol=1e-6)


def test_gaussian_head_matches_torch_normal():
    torch.manual_seed(1)
    actor = OnPolicyActor(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (2,)), log_std_init=-0.5)
    obs = torch.randn(5, 3)
    actions = torch.randn(5, 2)
    log_prob, entropy, _ = actor.evaluate_actions(obs, actions)
    mean, _ = actor.forward(obs)
    dist = Normal(mean, torch.full_like(mean, -0.5).exp())
    assert torch.allclose(log_prob, dist.log_prob(actions).sum(-1), atol=1e-5)
    assert torch.allclose(entropy, dist.entropy().sum(-1), atol=1e-5)


def test_multidiscrete_head_and_categorical_sampling_frequencies():
    torch.manual_seed(2)
    actor = OnPolicyActor(gym.spaces.Box(-1, 1, (3,)), gym.spaces.MultiDiscrete([3, 2]))
    obs = torch.randn(4, 3)
    action, extra, _ = actor.get_action(obs)
    assert action.shape == (4, 2)
    log_prob, _, _ = actor.evaluate_actions(obs, action)
    assert torch.allclose(log_prob, extra["log_prob"], atol=1e-6)
    # Gumbel-max samples follow the softmax
    from pytorchrl.agent.actors.distributions import categorical_sample

    logp = torch.log_softmax(torch.tensor([[0.0, 1.0, 2.0]]), -1).expand(20000, 3)
    samples, _ = categorical_sample(logp, deterministic=False)
    freq = torch.bincount(samples, minlength=3).float() / 20000
    assert torch.allclose(freq, logp[0].exp(), atol=0.02)


def test_apply_gradients_from_another_copy_matches_local_step():
    a1, a2 = _actor(), _actor()
    alg1, alg2 = PPO(a1, lr=1e-2), PPO(a2, lr=1e-2)
    batch = _batch(a1)
    alg1.compute_gradients(batch)
    grads = alg1.get_gradients()
    alg1.apply_gradients()
    alg2.apply_gradients(grads)
    for p1, p2 in zip(a1.parameters(), a2.parameters()):
        assert torch.allclose(p1, p2)
    assert alg1.version == alg2.version == 1


def test_flat_gradient_buffer_clips_like_torch():
    a1, a2 = _actor(), _actor()
    alg = PPO(a1, lr=1e-2, max_grad_norm=0.05)
    batch = _batch(a1)
    alg.compute_gradients(batch)
    assert all(p.grad.untyped_storage().data_ptr() == alg.flat_grad.untyped_storage().data_ptr() for p in alg.params)
    loss, _ = PPO(a2, lr=1e-2).compute_loss(batch)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(a2.parameters(), 0.05)
    expected = torch.cat([p.grad.reshape(-1) for p in a2.parameters()])
    norm = torch.linalg.vector_norm(alg.flat_grad)
    alg.flat_grad.mul_(torch.clamp(0.05 / (norm + 1e-6), max=1.0))
    assert torch.allclose(alg.flat_grad, expected, atol=1e-6)


def test_cached_mlp_parameters_follow_load_state_dict_and_optimizer_steps():
    a1, a2 = _actor(), OnPolicyActor(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), encoder=EncoderSpec(hidden_sizes=(8,)), ortho_init=True)
    obs = torch.randn(3, 4)
    a2.load_state_dict(a1.state_dict())
    assert torch.allclose(a1.forward(obs)[0], a2.forward(obs)[0])
    algo = PPO(a1, lr=0.1)
    algo.compute_gradients(_batch(a1))
    before = a1.forward(obs)[1].detach().clone()
    algo.apply_gradients()
    assert not torch.allclose(before, a1.forward(obs)[1])
    a2.load_state_dict(a1.state_dict())
    assert torch.allclose(a1.forward(obs)[1], a2.forward(obs)[1])
    moved = a2.to(torch.float64)
    assert moved.forward(obs.double())[0].dtype == torch.float64


def test_shared_network_uses_one_feature_extractor():
    space = (gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))
    shared = OnPolicyActor(*space, encoder=EncoderSpec(hidden_sizes=(16,)), shared_network=True)
    separate = OnPolicyActor(*space, encoder=EncoderSpec(hidden_sizes=(16,)))
    assert shared.value_net is None and separate.value_net is not None
    assert sum(p.numel() for p in shared.parameters()) == sum(p.numel() for p in separate.parameters()) - (4 * 16 + 16)
    obs = torch.randn(3, 4)
    assert torch.allclose(shared.get_value(obs), shared.forward(obs)[1])


def test_linear_annealing_of_lr_and_clip_range():
    algo = PPO(_actor(), lr=1e-3, clip_range=0.2, anneal_lr=True, anneal_clip_range=True)
    algo.set_progress(0.25)
    assert algo.lr == pytest.approx(7.5e-4) and algo.optimizer.param_groups[0]["lr"] == pytest.approx(7.5e-4)
    assert algo.config.clip_range == pytest.approx(0.15)
    algo.set_progress(1.5)
    assert algo.lr == 0.0 and algo.config.clip_range == 0.0
    fixed = PPO(_actor(), lr=1e-3)
    fixed.set_progress(0.5)
    assert fixed.lr == 1e-3 and fixed.config.clip_range == 0.2


@pytest.mark.timeout(10)
def test_an_algorithm_loaded_from_anothers_state_in_this_process_keeps_its_own_optimizer_moments():
    """torch's Optimizer.load_state_dict keeps tensors that already fit: without a copy, an
    algorithm loaded from another's live state shared its Adam moments and step count, so each
    one's step moved both."""
    a, b = PPO(_actor(), lr=1e-2), PPO(_actor(), lr=1e-2)
    for algo in (a, b):
        algo.compute_gradients(_batch(algo.actor))
        algo.apply_gradients()
    b.load_state_dict(a.state_dict())
    before = {k: v.clone() for k, v in a.state_dict()["actor"].items()}
    b.compute_gradients(_batch(b.actor))
    b.apply_gradients()
    steps = [float(s["step"]) for s in a.optimizer.state_dict()["state"].values()]
    assert steps and all(step == 1.0 for step in steps)  # b's second step is b's, not a's too
    assert all(torch.equal(before[k], v) for k, v in a.state_dict()["actor"].items())
