"""SAC, TD3 and DDPG: losses on a fixed batch, the frozen-critic policy gradient, delayed policy
and target updates, warm-up acting, and bad input."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from pytorchrl.agent.actors.networks import EncoderSpec
from pytorchrl.agent.actors.policy_critic import PolicyCriticActor
from pytorchrl.agent.algorithms.sac import SAC, TD3
from tests.test_cli import _bad

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACTIONS = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
B = 8


def _batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "obs": torch.randn(B, 3, generator=g), "actions": torch.rand(B, 1, generator=g) * 4 - 2, "rewards": torch.randn(B, generator=g),
        "next_obs": torch.randn(B, 3, generator=g), "discounts": torch.tensor([0.99] * (B - 1) + [0.0]), "weights": torch.rand(B, generator=g) + 0.5,
    }


def test_sac_loss_on_a_fixed_batch():
    actor = PolicyCriticActor(OBS, ACTIONS, policy="gaussian", encoder=EncoderSpec(hidden_sizes=(16,), activation="relu"))
    algo = SAC(actor, init_ent_coef=0.5)
    batch = _batch()
    torch.manual_seed(1)
    loss, info = algo.compute_loss(batch)
    # the same loss composed by hand, with the same random draws
    torch.manual_seed(1)
    alpha = 0.5
    with torch.no_grad():
        next_a, next_logp = actor.sample(batch["next_obs"])
        next_q = torch.minimum(*actor.q_values(batch["next_obs"], next_a, target=True)) - alpha * next_logp
        y = batch["rewards"] + batch["discounts"] * next_q
    actions = batch["actions"] / 2.0  # [-2, 2] -> [-1, 1]
    q1, q2 = actor.q_values(batch["obs"], actions)
    critic = 0.5 * ((batch["weights"] * (q1 - y) ** 2).mean() + (batch["weights"] * (q2 - y) ** 2).mean())
    new_a, logp = actor.sample(batch["obs"])
    policy = (alpha * logp - torch.minimum(*actor.q_values(batch["obs"], new_a))).mean()
    alpha_loss = -(math.log(alpha) * (logp + (-1.0))).mean()
    torch.testing.assert_close(loss, critic + policy + alpha_loss)
    assert info["ent_coef"] == pytest.approx(alpha)


def test_discrete_sac_loss_on_a_fixed_batch():
    actor = PolicyCriticActor(OBS, gym.spaces.Discrete(3), policy="categorical", encoder=EncoderSpec(hidden_sizes=(16,), activation="relu"))
    algo = SAC(actor, init_ent_coef=0.5)
    batch = {**_batch(), "actions": torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])}
    loss, info = algo.compute_loss(batch)
    # by hand: exact expectations over the policy's probabilities, no sampling
    alpha, target_entropy = 0.5, 0.89 * math.log(3)
    with torch.no_grad():
        next_pi = torch.softmax(actor._policy_out(batch["next_obs"]), -1)
        q1_next, q2_next = actor.target_critics(batch["next_obs"])
        next_v = (next_pi * (torch.minimum(q1_next, q2_next) - alpha * next_pi.log())).sum(-1)
        y = batch["rewards"] + batch["discounts"] * next_v
    q1, q2 = actor.critics(batch["obs"])
    taken = batch["actions"].view(-1, 1)
    critic = 0.5 * sum((batch["weights"] * (q.gather(1, taken).squeeze(1) - y) ** 2).mean() for q in (q1, q2))
    pi = torch.softmax(actor._policy_out(batch["obs"]), -1)
    policy = (pi * (alpha * pi.log() - torch.minimum(q1, q2))).sum(-1).mean()
    entropy = -(pi * pi.log()).sum(-1)
    alpha_loss = (math.log(alpha) * (entropy - target_entropy)).mean()
    torch.testing.assert_close(loss, critic + policy + alpha_loss)
    assert info["entropy"] == pytest.approx(float(entropy.detach().mean()), rel=1e-5)
    # the policy's loss reads the critics detached: its gradient moves the policy alone
    algo.flat_grad.zero_()
    policy_only = (pi * (alpha * pi.log() - torch.minimum(q1, q2).detach())).sum(-1).mean()
    policy_only.backward()
    assert not any(p.grad.any() for p in actor.critics.parameters())


def test_categorical_acting_samples_the_policy_and_evaluates_greedily():
    actor = PolicyCriticActor(OBS, gym.spaces.Discrete(3), policy="categorical", encoder=EncoderSpec(hidden_sizes=(8,), activation="relu"))
    algo = SAC(actor)
    obs = torch.zeros(4000, 3)
    algo.set_warmup(True)
    torch.manual_seed(0)
    warm, _, _ = actor.get_action(obs)
    torch.testing.assert_close(torch.bincount(warm, minlength=3) / 4000.0, torch.full((3,), 1 / 3), atol=0.03, rtol=0)
    algo.set_warmup(False)
    with torch.no_grad():
        actor.policy_head.bias.copy_(torch.tensor([1.0, 0.0, -1.0]))
        actor.policy_head.weight.zero_()
        acting, _, _ = actor.get_action(obs)  # Gumbel-max: a sample of softmax(logits)
    torch.testing.assert_close(torch.bincount(acting, minlength=3) / 4000.0, torch.softmax(torch.tensor([1.0, 0.0, -1.0]), 0), atol=0.03, rtol=0)
    greedy, _, _ = actor.get_action(obs, deterministic=True)
    assert greedy.dtype == torch.long and (greedy == 0).all()


def test_squashed_gaussian_log_prob_matches_the_change_of_variables():
    actor = PolicyCriticActor(OBS, ACTIONS, policy="gaussian", encoder=EncoderSpec(hidden_sizes=(8,), activation="relu"))
    obs = torch.randn(4, 3)
    torch.manual_seed(3)
    action, log_prob = actor.sample(obs)
    mean, log_std = actor._policy_out(obs).chunk(2, -1)
    pre = torch.atanh(action.clamp(-1 + 1e-6, 1 - 1e-6))
    normal = torch.distributions.Normal(mean, log_std.clamp(-20, 2).exp())
    expected = (normal.log_prob(pre) - torch.log(1 - action**2 + 1e-12)).sum(-1)
    torch.testing.assert_close(log_prob, expected, atol=1e-3, rtol=1e-4)


@pytest.mark.filterwarnings("error::UserWarning")
def test_read_only_action_bounds_build_the_actor_without_a_warning():
    """A Box that crossed Ray arrives with read-only bounds; the actor copies them (sharing their
    memory warned on every remote worker and server) and owns its own."""
    space = gym.spaces.Box(-2.0, 2.0, (3,), np.float32)
    space.low.flags.writeable = space.high.flags.writeable = False
    actor = PolicyCriticActor(gym.spaces.Box(-1.0, 1.0, (4,), np.float32), space, encoder=EncoderSpec(hidden_sizes=(8,)))
    assert torch.equal(actor.high, torch.full((3,), 2.0)) and actor.high.data_ptr() != space.high.ctypes.data


def test_the_critic_ensemble_is_independent_mlps():
    from pytorchrl.agent.actors.policy_critic import CriticEnsemble

    ensemble = CriticEnsemble(2, 4, (8,), "relu")
    x = torch.randn(5, 4)
    for k in range(2):  # critic k alone, as an ordinary MLP
        h = torch.relu(x @ ensemble.weights[0][k] + ensemble.biases[0][k])
        torch.testing.assert_close(ensemble(x)[k], h @ ensemble.weights[1][k] + ensemble.biases[1][k])
    assert not torch.equal(ensemble(x)[0], ensemble(x)[1])


def test_bfloat16_critics_keep_float32_q_values_parameters_and_gradients():
    """Hidden layers in bf16, the output layer in float32: a Q-value near 500 keeps float32's
    resolution (bf16's spacing there is 2), and gradients reach the float32 parameters."""
    from pytorchrl.agent.actors.policy_critic import CriticEnsemble

    full = CriticEnsemble(2, 4, (32, 32), "relu")
    half = CriticEnsemble(2, 4, (32, 32), "relu", dtype=torch.bfloat16)
    half.load_state_dict(full.state_dict())
    with torch.no_grad():
        for net in (full, half):
            net.biases[-1].fill_(500.3)
    x = torch.randn(64, 4, requires_grad=True)
    q_full, q_half = full(x), half(x)
    assert q_half.dtype == torch.float32 and not torch.equal(q_full, q_half)  # bf16 rounding shows
    assert (q_half - q_full).abs().max() < 0.2  # not rounded to bf16's grid of 2 near 500
    q_half.sum().backward()
    q_full.sum().backward()
    for p_half, p_full in zip(half.parameters(), full.parameters()):
        assert p_half.dtype == p_half.grad.dtype == torch.float32
        assert torch.nn.functional.cosine_similarity(p_half.grad.flatten(), p_full.grad.flatten(), dim=0) > 0.99
    x.grad = None
    half.zero_grad()
    half(x, frozen=True).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0 and all(p.grad is None or not p.grad.any() for p in half.parameters())


def test_bfloat16_sac_update_moves_the_parameters_as_float32_does():
    """``actor.mlp_precision: bfloat16``: one SAC update from the same weights and batch changes
    every float32 parameter in nearly the same direction (bf16 rounds, Adam's steps agree)."""
    torch.manual_seed(0)
    actors = [PolicyCriticActor(OBS, ACTIONS, encoder=EncoderSpec(hidden_sizes=(64, 64), activation="relu", mlp_precision=p))
              for p in ("float32", "bfloat16")]
    actors[1].load_state_dict(actors[0].state_dict())
    assert actors[1].policy_torso.dtype == actors[1].critics.dtype == torch.bfloat16
    batch, moves = _batch(), []
    for actor in actors:
        algo = SAC(actor, lr=1e-3)
        before = [p.detach().clone() for p in actor.parameters()]
        torch.manual_seed(1)  # the same policy noise
        algo.compute_gradients(batch)
        algo.apply_gradients()
        moves.append(torch.cat([(p.detach() - b).flatten() for p, b in zip(actor.parameters(), before)]))
        assert all(p.dtype == torch.float32 for p in actor.parameters())
    assert moves[1].abs().sum() > 0
    assert torch.nn.functional.cosine_similarity(moves[0], moves[1], dim=0) > 0.9


@pytest.mark.parametrize("weighted", [False, True], ids=["uniform", "prioritized"])
def test_td3_loss_on_a_fixed_batch_is_the_sum_of_the_critics_mean_squared_errors(weighted):
    """Fujimoto et al.'s and SB3's critic loss, ``mse(q1, y) + mse(q2, y)`` (no SAC-style 1/2),
    plus the policy's ``-q1(s, pi(s))`` on a policy step; priority weights scale each row."""
    actor = PolicyCriticActor(OBS, ACTIONS, policy="deterministic", encoder=EncoderSpec(hidden_sizes=(16,), activation="relu"))
    algo = TD3(actor, policy_delay=1, target_policy_noise=0.0)
    batch = _batch()
    if not weighted:
        del batch["weights"]
    loss, _ = algo.compute_loss(batch)
    with torch.no_grad():
        y = batch["rewards"] + batch["discounts"] * actor.q_values(batch["next_obs"], actor.deterministic(batch["next_obs"], target=True), target=True).min(0).values
    q1, q2 = actor.q_values(batch["obs"], batch["actions"] / 2.0)
    w = batch.get("weights", torch.ones(B))
    critic = (w * (q1 - y) ** 2).mean() + (w * (q2 - y) ** 2).mean()
    policy = -actor.q_values(batch["obs"], actor.deterministic(batch["obs"]))[0].mean()
    torch.testing.assert_close(loss, critic + policy)


def test_td3_after_critics_steps_the_critics_then_the_policy_at_them_as_the_reference_does():
    """``policy_update: after_critics`` is Fujimoto et al.'s (and SB3's) update: a critic step with
    its own Adam, then, every ``policy_delay`` steps, the policy's Adam step on ``-q1(s, pi(s))``
    at the stepped critics, then the targets' polyak step; ``fused`` (the default) takes the
    policy's gradient before the critics' step and differs."""
    import copy

    def make(update: str) -> TD3:
        torch.manual_seed(3)
        actor = PolicyCriticActor(OBS, ACTIONS, policy="deterministic", encoder=EncoderSpec(hidden_sizes=(16,), activation="relu"))
        return TD3(actor, policy_delay=2, target_policy_noise=0.0, policy_update=update)

    algo, fused = make("after_critics"), make("fused")
    ref = copy.deepcopy(algo.actor)  # plain tensors: stepped by torch's own Adam below
    policy_params = [*ref.policy_torso.parameters(), *ref.policy_head.parameters()]
    critic_opt, policy_opt = torch.optim.Adam(ref.critics.parameters(), lr=1e-3), torch.optim.Adam(policy_params, lr=1e-3)
    batches = [dict(_batch(), rewards=torch.randn(B, generator=torch.Generator().manual_seed(i))) for i in range(4)]
    for step, batch in enumerate(batches, start=1):
        batch = {k: v for k, v in batch.items() if k != "weights"}
        for a in (algo, fused):
            a.compute_gradients(batch)
            a.apply_gradients()
        with torch.no_grad():
            y = batch["rewards"] + batch["discounts"] * ref.q_values(batch["next_obs"], ref.deterministic(batch["next_obs"], target=True), target=True).min(0).values
        q = ref.q_values(batch["obs"], batch["actions"] / 2.0)
        critic_opt.zero_grad()
        sum(torch.nn.functional.mse_loss(qk, y) for qk in q).backward()
        critic_opt.step()
        if step % 2 == 0:
            policy_opt.zero_grad()
            (-ref.q_values(batch["obs"], ref.deterministic(batch["obs"]), critics=1, frozen=True).mean()).backward()
            policy_opt.step()
            ref.update_target(0.005)
    for ours, theirs in zip(algo.actor.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    assert algo.version == 4
    def policy_gap(actor: PolicyCriticActor) -> float:
        return max((a - b).abs().max().item() for a, b in zip(actor.policy_torso.parameters(), ref.policy_torso.parameters(), strict=True))

    # the default order's policy (its gradient at the critics before their step) is further off by far
    assert policy_gap(fused.actor) > 100 * max(policy_gap(algo.actor), 1e-9)


def test_td3_after_critics_is_refused_with_remote_gradient_workers():
    from pytorchrl.config import ConfigError, checked, from_dict

    with pytest.raises(ConfigError, match=r"algorithm\.policy_update"):
        checked(from_dict({"env": {"env_id": "Pendulum-v1"}, "algorithm": {"name": "td3", "policy_update": "after_critics"}, "scheme": {"num_grad_workers": 1}}))


def test_the_policy_loss_never_moves_the_critics():
    actor = PolicyCriticActor(OBS, ACTIONS, policy="deterministic", encoder=EncoderSpec(hidden_sizes=(8,), activation="relu"))
    obs = torch.randn(5, 3)
    (-actor.q_values(obs, actor.deterministic(obs), frozen=True).mean()).backward()
    assert all(p.grad is None or not p.grad.any() for p in actor.critics.parameters())
    assert actor.policy_head.weight.grad is not None and actor.policy_head.weight.grad.abs().sum() > 0


def test_td3_delays_policy_and_target_updates_and_ddpg_does_not():
    batch = _batch()
    for delay in (2, 1):
        actor = PolicyCriticActor(OBS, ACTIONS, policy="deterministic", num_critics=2 if delay == 2 else 1, encoder=EncoderSpec(hidden_sizes=(8,), activation="relu"))
        algo = TD3(actor, policy_delay=delay, target_policy_noise=0.2 if delay == 2 else 0.0)
        moved = []
        for _ in range(4):
            policy, critic = actor.policy_head.weight.detach().clone(), actor.critics.weights[-1].detach().clone()
            target = actor.target_critics.weights[-1].detach().clone()
            algo.compute_gradients(batch)
            algo.apply_gradients()
            moved.append((
                not torch.equal(policy, actor.policy_head.weight), not torch.equal(critic, actor.critics.weights[-1]),
                not torch.equal(target, actor.target_critics.weights[-1]),
            ))
        if delay == 2:  # policy and targets every 2nd step, critics every step
            assert moved == [(False, True, False), (True, True, True)] * 2
        else:
            assert moved == [(True, True, True)] * 4


def test_td3_applies_a_stale_gradient_as_the_step_it_was_computed_for():
    """Asynchronous gradient workers: a gradient computed at version 1 (a policy step, with
    ``policy_delay`` 2) arrives when the master is at version 2. Applied as a step of version 2
    it dropped the policy's gradient (that step is critics-only); ``computed_at`` applies it as
    the policy step it is, and the critic-only gradient of version 0 arriving at version 1
    moves neither the policy nor the targets."""
    def td3() -> TD3:
        torch.manual_seed(0)
        actor = PolicyCriticActor(OBS, ACTIONS, policy="deterministic", encoder=EncoderSpec(hidden_sizes=(8,), activation="relu"))
        return TD3(actor, policy_delay=2, target_policy_noise=0.0)

    replica, master = td3(), td3()
    batch = _batch()
    replica.compute_gradients(batch)
    critic_only = replica.get_gradients()  # version 0: critics only
    replica.apply_gradients()
    replica.compute_gradients(batch)
    policy_step = replica.get_gradients()  # version 1: the policy's term too
    actor = master.actor
    for gradient, computed_at, moves in ((critic_only, 0, False), (critic_only, 0, False), (policy_step, 1, True)):
        policy, target = actor.policy_head.weight.detach().clone(), actor.target_critics.weights[-1].detach().clone()
        assert master.apply_gradients(gradient, computed_at=computed_at)
        assert (not torch.equal(policy, actor.policy_head.weight)) == moves
        assert (not torch.equal(target, actor.target_critics.weights[-1])) == moves
    assert master.version == 3


def test_warm_up_acts_uniformly_then_with_the_policy():
    actor = PolicyCriticActor(OBS, ACTIONS, policy="deterministic", encoder=EncoderSpec(hidden_sizes=(8,), activation="relu"), exploration_noise=0.0)
    algo = TD3(actor)
    obs = torch.zeros(200, 3)
    algo.set_warmup(True)
    warm, _, _ = actor.get_action(obs)
    assert warm.min() < -1.5 and warm.max() > 1.5  # uniform over [-2, 2]
    algo.set_warmup(False)
    acting, _, _ = actor.get_action(obs)
    assert torch.allclose(acting, acting[0].expand_as(acting))  # one observation, one action
    torch.testing.assert_close(acting[0], actor.scale(actor.deterministic(obs[:1]))[0])
    algo.set_warmup(True)  # a buffer emptied by a resume without it: refilled with the policy
    assert torch.equal(actor.get_action(obs)[0], acting)


@pytest.mark.parametrize(
    ("config", "args", "needle"),
    [
        ("td3/pendulum.yaml", ["env.env_id=CartPole-v1"], "algorithm.name = 'td3' needs a bounded Box action space; env.env_id = 'CartPole-v1' has Discrete(2)"),
        ("sac/pendulum.yaml", ["algorithm.update_every=4", "storage.num_steps=8"], "'algorithm.update_every' = 4 disagrees with storage.num_steps = 8"),
        ("td3/pendulum.yaml", ["algorithm.minibatch_size=2048"], "'algorithm.minibatch_size' = 2048 is larger than algorithm.start_steps = 1000"),
        ("sac/pendulum.yaml", ["run.target_steps=200"], "'algorithm.start_steps' = 256 is larger than run.target_steps = 200"),
        ("sac/discrete_cartpole.yaml", ["algorithm.use_sde=true"], "config key 'algorithm.use_sde' = true needs a Box action space (gSDE perturbs a Gaussian policy); 'CartPole-v1' has Discrete(2)"),
        ("sac/pendulum_masked_gru.yaml", ["algorithm.use_sde=true"], "config key 'algorithm.use_sde' = true cannot be combined with a recurrent SAC (actor.recurrent.type = 'gru')"),
    ],
)
def test_bad_continuous_off_policy_input_exits_2(capsys, tmp_path, config, args, needle):
    from tests.conftest import CONFIGS

    err = _bad(capsys, ["train", str(CONFIGS / config), *args, "--run-dir", str(tmp_path / "r"), "--quiet"])
    assert needle in err


def test_parameters_live_in_one_flat_buffer_and_weights_leave_as_compact_copies():
    import pickle

    actor = PolicyCriticActor(OBS, ACTIONS, policy="gaussian", encoder=EncoderSpec(hidden_sizes=(16,), activation="relu"))
    algo = SAC(actor)
    assert all(p.untyped_storage().data_ptr() == algo.flat_params.untyped_storage().data_ptr() for p in algo.params)
    algo.compute_gradients(_batch())
    before = algo.flat_params.clone()
    algo.apply_gradients()
    assert not torch.equal(before, algo.flat_params)  # one optimizer step moved the flat buffer...
    weights = algo.get_weights()
    assert all(w.untyped_storage().nbytes() == w.numel() * w.element_size() for w in weights.values())  # ...and leaves as copies
    assert len(pickle.dumps(weights)) < sum(w.numel() * w.element_size() + 500 for w in weights.values())  # a view would carry the whole buffer
    # collection workers get the policy alone, and take it in place
    acting = algo.get_weights(acting=True)
    assert acting and not any(k.startswith(("critics", "target_critics", "log_alpha")) for k in acting)
    other = SAC(PolicyCriticActor(OBS, ACTIONS, policy="gaussian", encoder=EncoderSpec(hidden_sizes=(16,), activation="relu")))
    critic = other.actor.critics.weights[0].detach().clone()
    other.set_weights(acting, version=7)
    torch.testing.assert_close(other.actor.policy_head.weight, actor.policy_head.weight)
    assert torch.equal(other.actor.critics.weights[0], critic) and other.version == 7


def test_discrete_sac_trains_in_rounds_of_update_every_steps():
    from pytorchrl.config import from_dict
    from pytorchrl.learner import Learner

    raw = {
        "env": {"num_envs": 2, "num_test_envs": 1},
        "actor": {"hidden_sizes": [16], "activation": "relu"},
        "storage": {"capacity": 1000},
        "algorithm": {"name": "sac", "update_every": 8, "updates_per_step": 0.5, "start_steps": 32, "minibatch_size": 16},
        "run": {"target_steps": 160, "eval_every": 0, "eval_episodes": 1},
    }
    learner = Learner.from_config(from_dict(raw), progress=False)
    try:
        learner.train()
        scheme = learner.scheme
        assert scheme.algorithm.actor.discrete and scheme.collection_workers.local_worker.storage.num_steps == 8
        assert learner.env_steps == 160  # ten rounds of 8 steps of 2 envs
        # half a step per valid transition once 32 are stored: at most (160 - 32) / 2, less the reset steps
        assert 48 <= learner.updates <= 64 and learner.updates == scheme.algorithm.version
    finally:
        learner.close()


def test_uniform_replay_batches_need_no_importance_weights():
    actor = PolicyCriticActor(OBS, ACTIONS, policy="gaussian", encoder=EncoderSpec(hidden_sizes=(16,), activation="relu"))
    algo = SAC(actor, init_ent_coef=0.5)
    weighted = _batch()
    weighted["weights"] = torch.ones(B)
    uniform = {k: v for k, v in weighted.items() if k != "weights"}
    torch.manual_seed(1)
    loss_weighted, _ = algo.compute_loss(weighted)
    torch.manual_seed(1)
    loss_uniform, _ = algo.compute_loss(uniform)
    torch.testing.assert_close(loss_uniform, loss_weighted)
    # the new priorities: |q - y| averaged over the critics, computed when asked, once
    torch.manual_seed(1)
    with torch.no_grad():
        next_a, next_logp = actor.sample(uniform["next_obs"])
        y = uniform["rewards"] + uniform["discounts"] * (actor.q_values(uniform["next_obs"], next_a, target=True).min(0).values - 0.5 * next_logp)
        q = actor.q_values(uniform["obs"], uniform["actions"] / 2.0)
    torch.testing.assert_close(algo.pop_priorities(), (q - y).abs().mean(0))
    assert algo.pop_priorities() is None


@pytest.mark.parametrize("algo_cls", [SAC, TD3])
def test_direct_adam_and_flat_target_updates_match_torch(algo_cls):
    """The fused Adam called directly and the one-op polyak update on flat buffers step exactly
    like ``torch.optim.Adam.step`` and a per-tensor polyak update (TD3: with critic-only steps)."""
    policy = "gaussian" if algo_cls is SAC else "deterministic"
    algos = []
    for _ in range(2):
        torch.manual_seed(0)
        algos.append(algo_cls(PolicyCriticActor(OBS, ACTIONS, policy=policy, encoder=EncoderSpec(hidden_sizes=(16,), activation="relu")), lr=1e-2))
    fast, reference = algos
    assert fast._targets is not None and all(t.numel() == o.numel() for t, o in fast._targets)
    target = next(fast.actor.target_critics.parameters())
    assert target.untyped_storage().data_ptr() == fast._targets[0][0].untyped_storage().data_ptr()  # a view of the flat buffer
    reference._adam_step = reference.optimizer.step  # type: ignore[method-assign]
    reference._targets = None  # the actor's own per-tensor update
    for step in range(5):
        for algo in algos:
            torch.manual_seed(step)
            algo.compute_gradients(_batch())
            algo.apply_gradients()
        torch.testing.assert_close(fast.flat_params, reference.flat_params, rtol=1e-6, atol=1e-7)
        for (name, a), b in zip(fast.actor.state_dict().items(), reference.actor.state_dict().values()):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7, msg=name)
    assert not torch.equal(fast.actor.target_critics.weights[0], algos[0].actor.critics.weights[0])


def test_worker_processes_flush_denormals_to_zero():
    from pytorchrl.utils.runtime import configure_process

    configure_process(torch.get_num_threads())
    # 1e-30 * 1e-10 is subnormal in float32: flushed, it is 0
    assert (torch.tensor([1e-30]) * torch.tensor([1e-10])).item() == 0.0


def test_ornstein_uhlenbeck_exploration_follows_its_recursion():
    theta, dt, sigma = 0.15, 0.01, 0.05
    actor = PolicyCriticActor(OBS, ACTIONS, policy="deterministic", encoder=EncoderSpec(hidden_sizes=(8,), activation="relu"), exploration_noise=sigma, ou_noise=(theta, dt))
    actor.uniform.fill_(False)
    obs = torch.zeros(2, 3)  # two envs, each with its own process
    base = actor.deterministic(obs)
    g = torch.Generator().manual_seed(0)
    x = torch.zeros(2, 1)
    out = torch.empty(2, 1)
    with torch.no_grad():
        for _ in range(20):
            eps = torch.randn(2, 1, generator=g)
            actor.act(obs, torch.cat([eps, torch.zeros(2, 1)], -1), out)
            x = x * (1 - theta * dt) + math.sqrt(dt) * eps
            torch.testing.assert_close(out, actor.scale((base + sigma * x).clamp(-1, 1)))
    assert not torch.equal(x[0], x[1])


@pytest.mark.parametrize("algo_cls", [SAC, TD3])
def test_replay_algorithms_clip_the_gradient_norm(algo_cls):
    policy = "gaussian" if algo_cls is SAC else "deterministic"
    algo = algo_cls(PolicyCriticActor(OBS, ACTIONS, policy=policy, encoder=EncoderSpec(hidden_sizes=(16,), activation="relu")), max_grad_norm=1e-3)
    algo.version = 1  # TD3: a policy step
    algo.compute_gradients(_batch())
    assert float(algo.flat_grad.norm()) > 1e-3
    algo.apply_gradients()
    assert float(algo.flat_grad.norm()) == pytest.approx(1e-3, rel=1e-3)


# ------------------------------------------------------------------------------------ gSDE


def _sde_actor(freq: int | None = None) -> PolicyCriticActor:
    actions = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
    actor = PolicyCriticActor(OBS, actions, encoder=EncoderSpec(hidden_sizes=(8,), activation="relu"), sde=True, sde_sample_freq=freq, log_std_init=-1.0)
    actor.uniform.fill_(False)
    return actor


def test_gsde_log_prob_is_the_squashed_gaussian_of_the_features_variance():
    actor = _sde_actor()
    obs = torch.randn(5, 3)
    features = actor.policy_torso.forward(obs)
    mean = actor.policy_head.forward(features).clamp(-2, 2)  # SB3's clip_mean
    std = torch.sqrt(features.square() @ (2 * actor.sde_log_std).exp() + 1e-6)  # the std of features @ W
    torch.manual_seed(3)
    action, log_prob = actor.sample(obs)
    torch.manual_seed(3)
    pre = mean + std * torch.randn(5, 2)
    expected = (torch.distributions.Normal(mean, std).log_prob(pre) - torch.log(1 - torch.tanh(pre) ** 2)).sum(-1)
    torch.testing.assert_close(action, torch.tanh(pre))
    torch.testing.assert_close(log_prob, expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(actor.deterministic(obs), torch.tanh(mean))
    # the policy's loss reaches the noise's log std, not the features through the variance
    log_prob.sum().backward()
    assert actor.sde_log_std.grad is not None and actor.sde_log_std.grad.abs().sum() > 0


def test_gsde_acts_with_features_times_a_matrix_held_for_sde_sample_freq_steps():
    actor = _sde_actor(freq=3)
    obs = torch.randn(2, 3)  # two envs
    out = torch.empty(2, 2)
    with torch.no_grad():
        noise = actor.draw_noise(8, 2)
        eps = actor._sde_eps.clone()
        features = actor.policy_torso.forward(obs)
        mean = actor.policy_head.forward(features).clamp(-2, 2)
        expected = actor.scale(torch.tanh(mean + torch.einsum("ef,efa->ea", features, eps * actor.sde_log_std.exp())))
        actions = []
        for step in range(4):
            actor.act(obs, noise[step], out)
            actions.append(out.clone())
    for step in range(3):  # one matrix per env for three steps: the same observation, the same action
        torch.testing.assert_close(actions[step], expected)
    assert not torch.equal(actions[3], expected)  # redrawn at the fourth
    assert not torch.equal(eps[0], eps[1])  # each env its own
    with torch.no_grad():
        actor.draw_noise(8, 2)  # a new rollout: new matrices
    assert not torch.equal(actor._sde_eps, eps)


def test_gsde_without_sde_sample_freq_holds_the_matrix_for_the_rollout():
    actor = _sde_actor()
    obs = torch.randn(1, 3)
    out = torch.empty(1, 2)
    with torch.no_grad():
        noise = actor.draw_noise(50, 1)
        actions = set()
        for step in range(50):
            actor.act(obs, noise[step], out)
            actions.add(tuple(out[0].tolist()))
        assert len(actions) == 1
        # sampled evaluation (get_action) holds its matrix too, as SB3's predict does: no new one per call
        sampled = [actor.get_action(obs)[0] for _ in range(3)]
    assert torch.equal(sampled[0], sampled[1]) and torch.equal(sampled[1], sampled[2])
