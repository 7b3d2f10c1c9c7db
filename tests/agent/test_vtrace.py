"""V-trace: reduces to GAE on-policy, a hand-worked off-policy example, time-major batches, IMPALA/APPO losses."""

from __future__ import annotations

import math

import gymnasium as gym
import pytest
import torch

from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.agent.algorithms import APPO, IMPALA
from pytorchrl.agent.storages import VTraceBuffer, compute_gae, compute_vtrace

# one env, 6 steps: terminates at t=1 (t=2 is the reset step), truncated at t=3 (t=4 reset), t=5 normal
REWARDS = torch.tensor([[1.0], [2.0], [0.0], [3.0], [0.0], [4.0]])
VALUES = torch.tensor([[1.0], [2.0], [5.0], [1.0], [10.0], [2.0], [8.0]])
TERMINATED = torch.tensor([[0], [1], [0], [0], [0], [0]], dtype=torch.bool)
TRUNCATED = torch.tensor([[0], [0], [0], [1], [0], [0]], dtype=torch.bool)
VALID = torch.tensor([[1], [1], [0], [1], [0], [1]], dtype=torch.bool)


@pytest.mark.parametrize("lam", [1.0, 0.7])
def test_on_policy_vtrace_targets_are_the_gae_returns(lam):
    log_probs = torch.randn(6, 1)
    vs, adv, rho = compute_vtrace(log_probs, log_probs, REWARDS, VALUES, TERMINATED, TRUNCATED, VALID, gamma=0.5, lambda_=lam)
    gae_adv, returns = compute_gae(REWARDS, VALUES, TERMINATED, TRUNCATED, VALID, gamma=0.5, gae_lambda=lam)
    keep = VALID
    assert torch.allclose(vs[keep], returns[keep])
    if lam == 1.0:  # then r_t + gamma * vs_{t+1} - V(x_t) is the Monte-Carlo advantage too
        assert torch.allclose(adv[keep], gae_adv[keep])
    assert torch.equal(rho, VALID.float())


def test_off_policy_vtrace_hand_worked():
    # two steps, no episode end, gamma 0.9; pi/mu = 2 at t=0 (clipped to 1), 0.5 at t=1
    g = 0.9
    rewards = torch.tensor([[1.0], [1.0]])
    values = torch.tensor([[0.5], [1.0], [2.0]])
    behaviour = torch.log(torch.tensor([[0.25], [0.5]]))
    target = torch.log(torch.tensor([[0.5], [0.25]]))
    no = torch.zeros(2, 1, dtype=torch.bool)
    vs, adv, rho = compute_vtrace(behaviour, target, rewards, values, no, no, torch.ones(2, 1, dtype=torch.bool), gamma=g)
    rho0, rho1 = 1.0, 0.5  # min(1, 2), min(1, 0.5); c_t the same with c_bar = lambda = 1
    d1 = rho1 * (1 + g * 2.0 - 1.0)  # 0.9
    d0 = rho0 * (1 + g * 1.0 - 0.5)  # 1.4
    vs1 = 1.0 + d1
    vs0 = 0.5 + d0 + g * rho0 * (vs1 - 1.0)
    assert torch.allclose(vs, torch.tensor([[vs0], [vs1]]))
    assert torch.allclose(rho, torch.tensor([[rho0], [rho1]]))
    # policy-gradient advantages bootstrap from the next target vs (the bootstrap value at the end)
    assert torch.allclose(adv, torch.tensor([[1 + g * vs1 - 0.5], [1 + g * 2.0 - 1.0]]))


def _rollout(t: int, n: int, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    valid = torch.ones(t, n, dtype=torch.bool)
    valid[2] = False
    terminated = torch.zeros(t, n, dtype=torch.bool)
    terminated[1] = True
    return {
        "obs": torch.randn(t + 1, n, 4, generator=gen), "values": torch.randn(t + 1, n, generator=gen),
        "actions": torch.randint(0, 2, (t, n), generator=gen), "log_probs": torch.full((t, n), math.log(0.5)),
        "rewards": torch.ones(t, n), "terminated": terminated, "truncated": torch.zeros(t, n, dtype=torch.bool), "valid": valid,
    }


def test_buffer_yields_whole_sequences_of_env_groups():
    buf = VTraceBuffer(num_steps=8, num_envs=6, obs_shape=(4,), action_shape=(), discrete=True)
    buf.add_data(_rollout(8, 6))
    buf.add_data(_rollout(5, 6, seed=1))  # a preempted, shorter rollout
    buf.before_gradients()
    assert buf.num_samples == 7 * 6 + 4 * 6
    assert buf.num_batches(16) == 3 + 2  # round(48 / 16) and round(30 / 16) env groups
    batches = list(buf.generate_batches(minibatch_size=16, num_epochs=2))
    assert len(batches) == 10
    assert [b["rewards"].shape[0] for b in batches[:5]] == [8, 8, 8, 5, 5]  # time-major, all steps
    assert sum(b["rewards"].shape[1] for b in batches[:3]) == 6  # every env exactly once per pass
    assert all(b["obs"].shape[0] == b["rewards"].shape[0] + 1 for b in batches)
    buf.after_gradients()
    with pytest.raises(RuntimeError):
        next(buf.generate_batches(minibatch_size=16))


@pytest.mark.parametrize("cls", [IMPALA, APPO])
def test_losses_on_a_fixed_batch(cls):
    torch.manual_seed(0)
    actor = OnPolicyActor(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))
    algo = cls(actor, gamma=0.9)
    batch = _rollout(6, 3)
    with torch.no_grad():
        log_prob, entropy, value = actor.evaluate_actions(batch["obs"][:6].reshape(18, 4), batch["actions"].reshape(18))
        bootstrap = actor.get_value(batch["obs"][6])
    values = torch.cat([value.view(6, 3), bootstrap.view(1, 3)])
    vs, adv, rho = compute_vtrace(batch["log_probs"], log_prob.view(6, 3), batch["rewards"], values, batch["terminated"], batch["truncated"], batch["valid"], gamma=0.9)
    mask = batch["valid"].reshape(-1).float()
    count = mask.sum()
    adv = adv.reshape(-1)
    if algo.config.normalize_advantages:
        keep = mask.bool()
        adv = (adv - adv[keep].mean()) / (adv[keep].std() + 1e-8) * mask
    if cls is IMPALA:
        policy = -(rho.reshape(-1) * adv * log_prob * mask).sum() / count
    else:
        ratio = (log_prob - batch["log_probs"].reshape(-1)).exp()
        policy = -(torch.min(adv * ratio, adv * ratio.clamp(0.8, 1.2)) * mask).sum() / count
    value_loss = 0.5 * (((vs.reshape(-1) - value) ** 2) * mask).sum() / count
    ent = (entropy * mask).sum() / count
    loss, info = algo.compute_loss(batch)
    assert loss is not None
    assert math.isclose(info["policy_loss"], policy.item(), rel_tol=1e-5, abs_tol=1e-6)
    assert math.isclose(info["value_loss"], value_loss.item(), rel_tol=1e-5)
    assert math.isclose(loss.item(), (policy + 0.5 * value_loss - 0.01 * ent).item(), rel_tol=1e-5, abs_tol=1e-6)


def test_appo_learner_proximal_policy_clips_around_the_round_start_and_weights_the_lag():
    """``proximal_policy: learner`` (decoupled objective): the ratio is to the policy the round
    started with, so a lagged rollout's first step clips nothing; the lag is the weight
    ``min(rho_bar, pi_prox / mu)``. Loss and gradients against the formula written out."""
    torch.manual_seed(0)
    actor = OnPolicyActor(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))
    batch = _rollout(6, 3)
    # a lagged behaviour policy: its probabilities of the taken actions far from the learner's
    batch["log_probs"] = torch.log(torch.rand(6, 3, generator=torch.Generator().manual_seed(1)) * 0.9 + 0.05)
    storage = VTraceBuffer(num_steps=6, num_envs=3, obs_shape=(4,), action_shape=(), discrete=True)
    storage.add_data(batch)
    storage.before_gradients()
    algo = APPO(actor, gamma=0.9, clip_range=0.1, proximal_policy="learner")
    algo.prepare_round(storage)
    (minibatch,) = storage.generate_batches(minibatch_size=18)
    with torch.no_grad():
        log_prob, _, _ = actor.evaluate_actions(batch["obs"][:6].reshape(18, 4), batch["actions"].reshape(18))
    torch.testing.assert_close(minibatch["round_log_probs"], log_prob.view(6, 3))

    loss, info = algo.compute_loss(minibatch)
    assert loss is not None
    mask = batch["valid"].reshape(-1).float()
    behaviour_ratio = (log_prob - batch["log_probs"].reshape(-1)).exp()
    assert ((behaviour_ratio - 1).abs() > 0.1)[mask.bool()].float().mean() > 0.5  # behaviour clipping would drop most of it
    assert info["clip_fraction"] == 0.0  # the first step is at ratio 1
    log_prob_now, entropy, value = actor.evaluate_actions(batch["obs"][:6].reshape(18, 4), batch["actions"].reshape(18))
    bootstrap = actor.get_value(batch["obs"][6]).detach()
    values = torch.cat([value.detach().view(6, 3), bootstrap.view(1, 3)])
    vs, adv, _ = compute_vtrace(batch["log_probs"], log_prob.view(6, 3), batch["rewards"], values, batch["terminated"], batch["truncated"], batch["valid"], gamma=0.9)
    count = mask.sum()
    keep = mask.bool()
    adv = adv.reshape(-1)
    adv = (adv - adv[keep].mean()) / (adv[keep].std() + 1e-8) * mask
    ratio = (log_prob_now - log_prob).exp()
    weight = behaviour_ratio.clamp(max=1.0)
    assert (weight < 1).any() and (behaviour_ratio > 1).any()  # the truncation is exercised
    policy = -(weight * torch.min(adv * ratio, adv * ratio.clamp(0.9, 1.1)) * mask).sum() / count
    expected = policy + 0.5 * (0.5 * (((vs.reshape(-1) - value) ** 2) * mask).sum() / count) - 0.01 * (entropy * mask).sum() / count
    assert math.isclose(info["policy_loss"], policy.item(), rel_tol=1e-5, abs_tol=1e-6)
    params = list(actor.parameters())
    for got, want in zip(torch.autograd.grad(loss, params, allow_unused=True), torch.autograd.grad(expected, params, allow_unused=True), strict=True):
        if want is not None:
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_appo_proximal_policy_is_a_checked_choice():
    from pytorchrl.config import from_dict
    from pytorchrl.utils.errors import InputError

    with pytest.raises(InputError, match=r"algorithm\.proximal_policy.*'behaviour', 'learner'"):
        from_dict({"algorithm": {"name": "appo", "proximal_policy": "target"}})
    with pytest.raises(InputError, match=r"algorithm\.proximal_policy.*'behaviour', 'learner'"):  # the constructor checks as a file is checked
        APPO(OnPolicyActor(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)), proximal_policy="target")
    with pytest.raises(InputError, match=r"algorithm\.targets.*'minibatch', 'round'"):
        from_dict({"algorithm": {"name": "impala", "targets": "epoch"}})
    with pytest.raises(InputError, match=r"algorithm\.targets.*'minibatch', 'round'"):
        IMPALA(OnPolicyActor(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)), targets="epoch")


def test_memoryless_rollouts_are_cut_into_unrolls_with_their_bootstrap():
    """``storage.sequence_length`` on IMPALA/APPO without a recurrent core: V-trace's unroll length."""
    data = _rollout(8, 6)
    buf = VTraceBuffer(num_steps=8, num_envs=6, obs_shape=(4,), action_shape=(), discrete=True, state_stride=3)
    buf.add_data(data)
    buf.before_gradients()
    assert buf.num_samples == int(data["valid"].sum())  # every step in exactly one unroll
    assert buf.num_batches(18) == 3  # one per unroll: round(18 / 18), round(18 / 18), round(12 / 18)
    unrolls = list(buf.generate_batches(minibatch_size=18))
    assert [u["rewards"].shape for u in unrolls] == [(3, 6), (3, 6), (2, 6)]
    for start, u in zip((0, 3, 6), unrolls, strict=True):
        steps = u["rewards"].shape[0]
        assert "states" not in u
        # the bootstrap row is the next unroll's first observation and behaviour value
        torch.testing.assert_close(u["obs"], data["obs"][start : start + steps + 1])
        torch.testing.assert_close(u["values"], data["values"][start : start + steps + 1])
        torch.testing.assert_close(u["rewards"], data["rewards"][start : start + steps])


@pytest.mark.parametrize(("proximal", "targets"), [("behaviour", "minibatch"), ("learner", "minibatch"), ("learner", "round")])
def test_appo_trains_on_memoryless_unrolls_end_to_end(proximal, targets, monkeypatch):
    from pytorchrl.config import from_dict
    from pytorchrl.learner import Learner

    annotated = []
    annotate = VTraceBuffer.annotate
    monkeypatch.setattr(VTraceBuffer, "annotate", lambda self, fn: (annotated.append(1), annotate(self, fn)))

    raw = {"env": {"num_envs": 4}, "algorithm": {"name": "appo", "num_epochs": 2, "minibatch_size": 64, "proximal_policy": proximal, "targets": targets}, "storage": {"num_steps": 16, "sequence_length": 8},
           "run": {"target_steps": 128, "eval_every": 10_000, "log_every": 10_000}}
    learner = Learner.from_config(from_dict(raw), progress=False)
    try:
        learner.train()
    finally:
        learner.close()
    # 2 rollouts of 16 x 4, each cut into 2 unrolls of 8 x 4, a minibatch each (whole rollouts:
    # one 64-transition minibatch each), 2 epochs; round targets pool each round's 64 steps (less
    # its reset steps) into one minibatch of transitions
    assert learner.env_steps == 128
    assert learner.updates == 2 * (2 if targets == "minibatch" else 1) * 2
    # the learner's policy scores each round's actions once, before its minibatches
    assert len(annotated) == (2 if proximal == "learner" else 0)


def test_recurrent_whole_rollouts_yield_one_state_per_env():
    """Without ``storage.sequence_length`` a recurrent rollout is one sequence: its minibatches
    carry ``states [n, S]`` for their env columns, as the chunked ones do."""
    from tests.agent.test_recurrent import _actor, _recurrent_rollout, _storage

    actor = _actor(shared=True)
    storage = _storage(actor, cls=VTraceBuffer)
    _recurrent_rollout(actor, storage, torch.ones(12, 3, dtype=torch.bool))
    storage.add_data(storage.get_data())
    storage.before_gradients()
    batches = list(storage.generate_batches(minibatch_size=12, num_epochs=1))
    assert [b["rewards"].shape for b in batches] == [(12, 1)] * 3
    for b in batches:
        assert b["states"].shape == (1, actor.state_size)
        log_prob, _, _ = actor.evaluate_actions(b["obs"][:-1], b["actions"], b["states"], b["starts"][:-1])
        torch.testing.assert_close(log_prob, b["log_probs"].reshape(-1), atol=1e-5, rtol=1e-5)


def test_learner_proximal_policy_scores_recurrent_rollouts_from_their_states():
    """The round-start scoring runs a recurrent core from each sequence's stored state: with the
    collecting weights unchanged it reproduces the behaviour log-probs."""
    from tests.agent.test_recurrent import _actor, _recurrent_rollout, _storage

    actor = _actor(shared=True)
    storage = _storage(actor, cls=VTraceBuffer, stride=4)  # later sequences start from a carried state
    valid = torch.ones(12, 3, dtype=torch.bool)
    valid[5, 1] = False  # and one episode starts inside a sequence
    _recurrent_rollout(actor, storage, valid)
    storage.add_data(storage.get_data())
    storage.before_gradients()
    APPO(actor, proximal_policy="learner").prepare_round(storage)
    batches = list(storage.generate_batches(minibatch_size=12, num_epochs=1))
    assert len(batches) == 3 and batches[1]["states"].abs().sum() > 0
    for batch in batches:
        torch.testing.assert_close(batch["round_log_probs"], batch["log_probs"], atol=1e-5, rtol=1e-5)


def test_round_targets_turn_the_round_into_shuffled_valid_transitions():
    """After :meth:`VTraceBuffer.use_transitions` a memoryless round is a pool of its valid
    transitions (reset steps and bootstrap rows dropped; uint8 images stay uint8), each used once
    per pass, with the annotated fields riding along."""
    buf = VTraceBuffer(num_steps=8, num_envs=6, obs_shape=(2, 2), action_shape=(), discrete=True)
    for seed, t in ((0, 8), (1, 5)):
        data = _rollout(t, 6, seed)
        data["obs"] = torch.randint(0, 256, (t + 1, 6, 2, 2), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))
        buf.add_data(data)
    buf.before_gradients()
    next_id = iter(range(10_000))
    buf.annotate(lambda r: {"step_id": torch.tensor([next(next_id) for _ in range(r["rewards"].numel())]).view_as(r["rewards"])})
    valid_ids = {int(i) for r in buf._rollouts for i in r["step_id"][r["valid"]]}
    buf.use_transitions()
    assert buf.num_samples == len(valid_ids) == 7 * 6 + 4 * 6
    assert buf.num_batches(16) == 4  # round(66 / 16)
    batches = list(buf.generate_batches(minibatch_size=16, num_epochs=2))
    assert len(batches) == 8 and {b["obs"].shape[0] for b in batches} <= {16, 17}
    for b in batches:
        assert b["obs"].dtype == torch.uint8 and b["obs"].shape[1:] == (2, 2) and bool(b["valid"].all())
    for epoch in (batches[:4], batches[4:]):
        ids = [int(i) for b in epoch for i in b["step_id"]]
        assert sorted(ids) == sorted(valid_ids)  # every valid transition exactly once per pass
    buf.after_gradients()
    buf.add_data(_rollout(8, 6))
    buf.before_gradients()
    assert buf.num_batches(16) == 3  # the next round is sequences again until it asks


@pytest.mark.parametrize(("cls", "proximal"), [(IMPALA, None), (APPO, "behaviour"), (APPO, "learner")])
def test_round_targets_are_the_minibatch_targets_of_the_round_start_network(cls, proximal):
    """``targets: round`` computes at the round's start what ``minibatch`` computes in the first
    step's loss: the same loss and gradients there. Later steps keep the stored targets while
    the network moves."""
    torch.manual_seed(0)
    actor = OnPolicyActor(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))
    batch = _rollout(6, 3)
    batch["log_probs"] = torch.log(torch.rand(6, 3, generator=torch.Generator().manual_seed(1)) * 0.9 + 0.05)  # lagged
    kwargs = {} if proximal is None else {"proximal_policy": proximal}
    losses = {}
    for targets in ("minibatch", "round"):
        storage = VTraceBuffer(num_steps=6, num_envs=3, obs_shape=(4,), action_shape=(), discrete=True)
        storage.add_data(batch)
        storage.before_gradients()
        algo = cls(actor, gamma=0.9, targets=targets, **kwargs)
        algo.prepare_round(storage)
        (minibatch,) = storage.generate_batches(minibatch_size=18)
        assert ("vs" in minibatch) == (targets == "round") and (minibatch["rewards"].dim() == 1) == (targets == "round")
        loss, info = algo.compute_loss(minibatch)
        assert loss is not None
        losses[targets] = (loss, info, torch.autograd.grad(loss, list(actor.parameters()), allow_unused=True), minibatch)
    (_, info_m, grads_m, _), (_, info_r, grads_r, stored) = losses["minibatch"], losses["round"]
    for key in ("policy_loss", "value_loss", "entropy", "rho_mean"):
        assert math.isclose(info_r[key], info_m[key], rel_tol=1e-5, abs_tol=1e-6), key
    for got, want in zip(grads_r, grads_m, strict=True):
        if want is not None:
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    with torch.no_grad():  # the network moves; the stored targets do not
        for p in actor.parameters():
            p.add_(0.05 * torch.randn_like(p))
    _, info = algo.compute_loss(stored)
    _, _, value = actor.evaluate_actions(stored["obs"], stored["actions"])
    assert math.isclose(info["value_loss"], (0.5 * (stored["vs"] - value) ** 2).mean().item(), rel_tol=1e-5)


def test_round_targets_keep_recurrent_sequences():
    from tests.agent.test_recurrent import _actor, _recurrent_rollout, _storage

    actor = _actor(shared=True)
    storage = _storage(actor, cls=VTraceBuffer, stride=4)
    _recurrent_rollout(actor, storage, torch.ones(12, 3, dtype=torch.bool))
    storage.add_data(storage.get_data())
    storage.before_gradients()
    algo = APPO(actor, targets="round", proximal_policy="learner")
    algo.prepare_round(storage)
    batches = list(storage.generate_batches(minibatch_size=12, num_epochs=1))
    assert len(batches) == 3
    for batch in batches:  # sequences with their states, and the targets of their steps
        assert batch["states"].shape[0] == batch["vs"].shape[1] and batch["vs"].shape == batch["rewards"].shape
        loss, _ = algo.compute_loss(batch)
        assert loss is not None and torch.isfinite(loss)
