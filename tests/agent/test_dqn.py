"""DQN and its Rainbow components: the C51 projection and the losses against hand computations,
target updates, exploration, the preset, and bad input."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from pytorchrl.agent.actors.networks import EncoderSpec
from pytorchrl.agent.actors.off_policy import NoisyLinear, OffPolicyActor
from pytorchrl.agent.algorithms.dqn import DQN, project_distribution, rescale_inverse, rescale_value
from pytorchrl.config import from_dict
from pytorchrl.learner import Learner
from tests.test_cli import _bad

OBS = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
ACTIONS = gym.spaces.Discrete(2)


def test_c51_projection_by_hand():
    support = torch.tensor([-1.0, 0.0, 1.0])  # delta 1
    next_probs = torch.tensor([[0.2, 0.5, 0.3], [0.2, 0.5, 0.3], [0.2, 0.5, 0.3]])
    rewards = torch.tensor([0.5, 0.0, 3.0])
    discounts = torch.tensor([0.5, 0.0, 1.0])
    m = project_distribution(next_probs, rewards, discounts, support)
    # row 0: atoms -1, 0, 1 move to 0.0, 0.5, 1.0: 0.2 -> atom 0; 0.5 split 0.25/0.25 between 0 and 1; 0.3 -> atom 1
    # row 1: terminal, every atom lands on 0; row 2: everything clamps to v_max
    expected = torch.tensor([[0.0, 0.45, 0.55], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    torch.testing.assert_close(m, expected)
    torch.testing.assert_close(m.sum(-1), torch.ones(3))


def test_c51_projection_of_a_return_at_v_max_stays_on_the_support():
    """float32 rounding put b a hair past the last atom on some supports (100.0000076 of 100 on
    linspace(-1.7, 2.9, 101)), and its ceil indexed one atom past the support: an IndexError
    (a device assert on CUDA) the first time a return reached v_max."""
    support = torch.linspace(-1.7, 2.9, 101)
    next_probs = torch.full((2, 101), 1 / 101)
    m = project_distribution(next_probs, torch.tensor([2.9, 5.0]), torch.tensor([0.0, 0.0]), support)
    torch.testing.assert_close(m[:, -1], torch.ones(2))  # all the mass on v_max
    torch.testing.assert_close(m.sum(-1), torch.ones(2))


def test_c51_projection_of_a_nan_return_is_a_nan_row_not_an_index_error():
    support = torch.tensor([-1.0, 0.0, 1.0])
    next_probs = torch.full((2, 3), 1 / 3)
    m = project_distribution(next_probs, torch.tensor([float("nan"), 0.5]), torch.tensor([1.0, 0.0]), support)
    assert m[0].isnan().all()
    torch.testing.assert_close(m[1], torch.tensor([0.0, 0.5, 0.5]))


def _linear_actor(**kwargs) -> OffPolicyActor:
    """A Q-network without hidden layers: Q(s) = W s + b, with weights set by hand."""
    actor = OffPolicyActor(OBS, ACTIONS, encoder=EncoderSpec(hidden_sizes=(), activation="relu"), **kwargs)
    with torch.no_grad():
        actor.q_net.advantage.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))  # Q = (s0, s1)
        actor.q_net.advantage.bias.zero_()
        actor.target_q_net.advantage.weight.copy_(torch.tensor([[0.0, 1.0], [1.0, 0.0]]))  # target Q = (s1, s0)
        actor.target_q_net.advantage.bias.zero_()
    return actor


BATCH = {
    "obs": torch.tensor([[1.0, 2.0], [0.0, -1.0]]),
    "actions": torch.tensor([0, 1]),
    "rewards": torch.tensor([1.0, 0.5]),
    "next_obs": torch.tensor([[3.0, 0.0], [2.0, 4.0]]),
    "discounts": torch.tensor([0.5, 0.0]),
    "weights": torch.tensor([1.0, 2.0]),
    "indices": torch.tensor([0, 1]),
}


@pytest.mark.parametrize(("double_q", "expected_y0"), [(False, 1.0 + 0.5 * 3.0), (True, 1.0 + 0.5 * 0.0)])
def test_dqn_loss_on_a_fixed_batch(double_q, expected_y0):
    algo = DQN(_linear_actor(), double_q=double_q)
    loss, _info = algo.compute_loss(BATCH)
    # q = (Q(s0)[a=0], Q(s1)[a=1]) = (1, -1). Row 0 bootstraps from next_obs (3, 0): the target net
    # gives (0, 3), so max is 3; double Q picks argmax of the online (3, 0) = action 0, valued 0 by
    # the target. Row 1 is terminal (discount 0): y = 0.5.
    q = torch.tensor([1.0, -1.0])
    y = torch.tensor([expected_y0, 0.5])
    huber = torch.where((y - q).abs() < 1, 0.5 * (y - q) ** 2, (y - q).abs() - 0.5)
    torch.testing.assert_close(loss, (BATCH["weights"] * huber).mean())
    torch.testing.assert_close(algo.pop_priorities(), (y - q).abs())
    assert algo.pop_priorities() is None  # popped once


def test_value_rescaling_is_invertible_monotone_and_compresses():
    x = torch.cat([torch.linspace(-1000.0, 1000.0, 2001, dtype=torch.float64), torch.tensor([0.0, 1e-6, -1e-6], dtype=torch.float64)])
    h = rescale_value(x)
    torch.testing.assert_close(rescale_inverse(h), x, rtol=1e-9, atol=1e-9)
    small = torch.tensor([1e-3, 0.01, 0.1, -0.05])  # float32 near 0, where sqrt(1 + 4 eps a) - 1 would cancel
    torch.testing.assert_close(rescale_inverse(rescale_value(small)), small, rtol=1e-5, atol=1e-6)
    assert (h[1:2001] > h[:2000]).all() and torch.equal(torch.sign(h), torch.sign(x))
    # h(x) = sqrt(x + 1) - 1 + 1e-3 x for x >= 0: h(3) = 1.003, h(99) = 9.099
    torch.testing.assert_close(rescale_value(torch.tensor([3.0, 99.0, -99.0])), torch.tensor([1.003, 9.099, -9.099]))


def test_rescaled_dqn_loss_learns_h_of_the_target_in_return_units():
    algo = DQN(_linear_actor(), value_rescaling=True)
    loss, info = algo.compute_loss(BATCH)
    # the heads output h(Q): row 0 bootstraps from h^-1 of the target's max (3), row 1 is terminal
    q = torch.tensor([1.0, -1.0])
    y = rescale_value(torch.tensor([1.0 + 0.5 * float(rescale_inverse(torch.tensor(3.0))), 0.5]))
    huber = torch.where((y - q).abs() < 1, 0.5 * (y - q) ** 2, (y - q).abs() - 0.5)
    torch.testing.assert_close(loss, (BATCH["weights"] * huber).mean())
    torch.testing.assert_close(algo.pop_priorities(), (y - q).abs())
    assert info["q_mean"] == pytest.approx(float(rescale_inverse(q).mean()))  # reported in return units
    plain, _ = DQN(_linear_actor()).compute_loss(BATCH)
    assert not torch.isclose(loss, plain)


def test_c51_loss_is_the_cross_entropy_to_the_projected_target():
    actor = OffPolicyActor(OBS, ACTIONS, encoder=EncoderSpec(hidden_sizes=(), activation="relu"), num_atoms=3, v_min=-1.0, v_max=1.0)
    algo = DQN(actor)
    loss, _ = algo.compute_loss(BATCH)
    with torch.no_grad():
        log_p = actor.q_net.logits(BATCH["obs"]).log_softmax(-1)[torch.arange(2), BATCH["actions"]]
        next_logits = actor.target_q_net.logits(BATCH["next_obs"])
        next_a = actor.target_q_net.forward(BATCH["next_obs"]).argmax(-1)
        m = project_distribution(next_logits.softmax(-1)[torch.arange(2), next_a], BATCH["rewards"], BATCH["discounts"], actor.q_net.support)
    torch.testing.assert_close(loss, (BATCH["weights"] * -(m * log_p).sum(-1)).mean())


def test_target_updates_copy_or_polyak():
    actor = _linear_actor()
    online = actor.q_net.advantage.weight.detach().clone()
    before = actor.target_q_net.advantage.weight.detach().clone()
    actor.update_target(0.25)
    torch.testing.assert_close(actor.target_q_net.advantage.weight, before + 0.25 * (online - before))
    algo = DQN(actor, target_update_interval=2, tau=1.0)
    algo.compute_gradients(BATCH)
    algo.apply_gradients()  # version 1: no update
    assert not torch.equal(actor.target_q_net.advantage.weight, actor.q_net.advantage.weight)
    algo.compute_gradients(BATCH)
    algo.apply_gradients()  # version 2: copied
    assert torch.equal(actor.target_q_net.advantage.weight, actor.q_net.advantage.weight)


def test_epsilon_decays_then_stays_and_greedy_acting_never_explores():
    actor = _linear_actor()
    algo = DQN(actor, exploration_fraction=0.5, exploration_initial_eps=1.0, exploration_final_eps=0.1)
    for progress, eps in [(0.0, 1.0), (0.25, 0.55), (0.5, 0.1), (0.9, 0.1)]:
        algo.set_progress(progress)
        assert float(actor.epsilon) == pytest.approx(eps)
    obs = torch.tensor([[1.0, 0.0], [0.0, 1.0]]).repeat(50, 1)
    action, _, _ = actor.get_action(obs, deterministic=True)
    assert torch.equal(action, obs.argmax(-1))
    algo.set_progress(0.0)  # epsilon 1: every action random, both actions seen
    action, _, _ = actor.get_action(obs)
    assert set(action.tolist()) == {0, 1} and not torch.equal(action, obs.argmax(-1))


def test_noisy_linear_uses_its_mean_when_evaluating():
    layer = NoisyLinear(3, 2)
    x = torch.randn(4, 3)
    noisy = layer(x)
    layer.reset_noise()
    assert not torch.equal(noisy, layer(x))
    layer.eval()
    torch.testing.assert_close(layer(x), x @ layer.weight_mu.T + layer.bias_mu)


def test_head_hidden_layers_give_each_stream_its_own_noisy_layers():
    image = gym.spaces.Box(0, 255, (4, 36, 36), np.uint8)
    hessel = EncoderSpec(kind="nature_cnn", hidden_sizes=(), activation="relu", cnn_features=0)
    actor = OffPolicyActor(image, gym.spaces.Discrete(3), encoder=hessel, dueling=True, noisy=True, num_atoms=5, head_hidden_sizes=(16,))
    q_net = actor.q_net
    convs = q_net.torso.out_features  # 64 x 1 x 1 on 36x36
    for hidden, out, width in ((q_net.advantage_hidden, q_net.advantage, 3 * 5), (q_net.value_hidden, q_net.value, 5)):
        assert isinstance(hidden[0], NoisyLinear) and (hidden[0].in_features, hidden[0].out_features) == (convs, 16)
        assert isinstance(out, NoisyLinear) and (out.in_features, out.out_features) == (16, width)
    obs = torch.randint(0, 256, (4, 4, 36, 36), dtype=torch.uint8)
    before = q_net.logits(obs)
    assert before.shape == (4, 3, 5)
    hidden_layer = q_net.value_hidden[0]
    eps = hidden_layer.eps_in.clone()
    q_net.reset_noise()  # the hidden layers' noise is redrawn too
    assert not torch.equal(eps, hidden_layer.eps_in) and not torch.equal(before, q_net.logits(obs))
    # the streams take gradients through their hidden layers
    q_net.logits(obs)[:, 0].sum().backward()  # one action's: a sum over actions cancels the advantages
    assert hidden_layer.weight_sigma.grad is not None and q_net.advantage_hidden[0].weight_mu.grad.abs().sum() > 0
    # without hidden layers the parameter names are those of checkpoints written before the option
    plain = OffPolicyActor(OBS, ACTIONS, encoder=EncoderSpec(hidden_sizes=(8,)), dueling=True, noisy=True).q_net
    assert {k.split(".")[0] for k in plain.state_dict()} == {"torso", "advantage", "value", "support"}


def test_rainbow_preset_turns_every_component_on_and_trains():
    raw = {
        "env": {"num_envs": 2, "num_test_envs": 1},
        "actor": {"hidden_sizes": [16]},
        "storage": {"num_steps": 16, "capacity": 1000},
        "algorithm": {"name": "dqn", "rainbow": True, "start_steps": 64, "minibatch_size": 32, "updates_per_step": 0.25},
        "run": {"target_steps": 256, "eval_every": 0, "eval_episodes": 1},
    }
    learner = Learner.from_config(from_dict(raw), progress=False)
    try:
        learner.train()
        actor = learner.scheme.algorithm.actor
        storage = learner.scheme.grad_workers.local_worker.storage
        assert actor.q_net.value is not None and actor.q_net.num_atoms == 51  # dueling, C51
        assert isinstance(actor.q_net.advantage, NoisyLinear) and float(actor.epsilon) == 0.0
        assert storage.buffer.n_step == 3 and type(storage.buffer.sampler).__name__ == "PrioritizedSampler"
        # at most (256 - 64 transitions before learning) * 0.25: reset steps are no transitions
        assert 36 <= learner.updates <= 48 and learner.updates == learner.scheme.algorithm.version
        leaves = storage.buffer.sampler._tree().leaves()[: storage.buffer.size]
        assert len(set(leaves[leaves > 0].round(6).tolist())) > 2  # priorities were updated from TD errors
    finally:
        learner.close()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["env.env_id=Pendulum-v1"], "algorithm.name = 'dqn' needs a Discrete action space; env.env_id = 'Pendulum-v1' has Box"),
        (["algorithm.minibatch_size=128", "algorithm.start_steps=64"], "'algorithm.minibatch_size' = 128 is larger than algorithm.start_steps = 64"),
        (["algorithm.noisy=true"], "unknown config key 'algorithm.noisy'; did you mean 'algorithm.noisy_nets'?"),
        (["algorithm.head_hidden_sizes=[64,0]"], "'algorithm.head_hidden_sizes' = [64, 0] is out of range: every width must be in 1.."),
        (["algorithm.value_rescaling=true", "algorithm.distributional=true"], "'algorithm.value_rescaling' = true is not available with C51"),
        (["algorithm.value_rescaling=true", "algorithm.rainbow=true"], "'algorithm.value_rescaling' = true is not available with C51"),
        (
            ["algorithm.value_rescaling=true", "algorithm.actor_priorities=true", "algorithm.prioritized_replay=true"],
            "'algorithm.value_rescaling' = true is not available with algorithm.actor_priorities",
        ),
        (
            ["algorithm.rainbow=true", "algorithm.actor_priorities=true", "algorithm.prioritized_replay=true"],
            "'algorithm.actor_priorities' = true is not available with C51 (algorithm.distributional or rainbow: the learner's priorities",
        ),
    ],
)
def test_bad_off_policy_input_exits_2_with_one_line(capsys, tmp_path, args, needle):
    from tests.conftest import CONFIGS

    err = _bad(capsys, ["train", str(CONFIGS / "dqn" / "cartpole.yaml"), *args, "--run-dir", str(tmp_path / "r"), "--quiet"])
    assert needle in err


def test_apex_epsilon_per_collector():
    actors = [OffPolicyActor(OBS, ACTIONS, encoder=EncoderSpec(hidden_sizes=(), activation="relu"), apex_alpha=7.0, num_collectors=3) for _ in range(3)]
    for i, actor in enumerate(actors):
        actor.set_collector(i)
        actor.epsilon.fill_(0.4)
    assert [a.epsilon_power for a in actors] == [1.0, 4.5, 8.0]
    added = actors[0]
    for index, power in ((3, 1.0), (4, 4.5), (5, 8.0)):  # workers added while training runs: the spread again, not past 1 + alpha
        added.set_collector(index)
        assert added.epsilon_power == power
    plain = OffPolicyActor(OBS, ACTIONS, encoder=EncoderSpec(hidden_sizes=(), activation="relu"))
    plain.set_collector(5)
    assert plain.epsilon_power == 1.0


def test_actor_side_priorities_are_one_step_td_errors():
    from pytorchrl.agent.storages.off_policy.replay_storage import ReplayStorage

    actor = _linear_actor()  # Q(s) = (s0, s1), target Q(s) = (s1, s0)
    storage = ReplayStorage(capacity=100, gamma=0.5, prioritized=True, actor_priorities=True,
                            num_steps=2, num_envs=1, obs_shape=(2,), action_shape=(), discrete=True)
    assert storage.needs_scoring
    storage.reset(torch.tensor([[1.0, 2.0]]))
    for step, (action, reward, terminated, next_obs) in enumerate([(1, 1.0, False, [3.0, 0.0]), (0, 2.0, True, [0.0, 5.0])]):
        storage.actions[step] = action
        storage.insert(reward=np.array([reward], np.float32), terminated=np.array([terminated]), truncated=np.array([False]),
                       valid=np.array([True]), next_obs=np.array([next_obs], np.float32))
    storage.score(actor.score)
    data = storage.get_data()
    # step 0: Q(s0)[1] = 2, target max at s1 = (0, 3) -> 3: |1 + 0.5 * 3 - 2| = 0.5; step 1: terminal, Q(s1)[0] = 3: |2 - 3| = 1
    torch.testing.assert_close(data["priorities"], torch.tensor([[0.5], [1.0]]))
    gradient_side = ReplayStorage(capacity=100, gamma=0.5, prioritized=True, num_steps=2, num_envs=1, obs_shape=(2,), action_shape=(), discrete=True)
    gradient_side.add_data(data)
    leaves = gradient_side.buffer.sampler._tree().leaves()
    assert sorted(leaves[leaves > 0].round(4).tolist()) == sorted(np.round((np.array([0.5, 1.0]) + 1e-6) ** 0.6, 4).tolist())


def _scored_priorities(side: str, n_step: int, actor: OffPolicyActor, chain: list[tuple]) -> dict:
    """The rollout data (actor-side ``priorities`` included) of one env's ``chain`` of steps
    (action, reward, terminated, truncated, valid, next observation) from [1, 2], scored by
    ``actor`` on the torch storage or on the numpy recorder of a central-inference worker."""
    from pytorchrl.agent.storages.off_policy.recorder import ReplayRecorder
    from pytorchrl.agent.storages.off_policy.replay_storage import ReplayStorage

    shapes = {"num_steps": len(chain), "num_envs": 1, "obs_shape": (2,), "action_shape": (), "discrete": True}
    if side == "storage":
        storage, fn, tensor = ReplayStorage(capacity=100, gamma=0.5, n_step=n_step, prioritized=True, actor_priorities=True, **shapes), actor.score, torch.tensor
    else:
        storage = ReplayRecorder(gamma=0.5, n_step=n_step, actor_priorities=True, **shapes)
        fn, tensor = (lambda obs, actions: tuple(x.detach().numpy() for x in actor.score(torch.as_tensor(obs), torch.as_tensor(actions)))), np.array
    storage.reset(tensor([[1.0, 2.0]]))
    for action, reward, terminated, truncated, valid, next_obs in chain:
        storage.insert(reward=np.array([reward], np.float32), terminated=np.array([terminated]), truncated=np.array([truncated]),
                       valid=np.array([valid]), next_obs=np.array([next_obs], np.float32), action=tensor([action]))
    storage.score(fn)
    return storage.get_data()


# a 5-step rollout of one env: (action, reward, terminated, truncated, valid, next observation);
# step 2 is truncated (its next observation the final one), step 3 the reset step after it
CHAIN = [(1, 1.0, False, False, True, [3.0, 0.0]), (0, 2.0, False, False, True, [0.0, 5.0]), (1, 1.0, False, True, True, [4.0, 1.0]),
         (0, 0.0, False, False, False, [1.0, 1.0]), (1, 4.0, None, False, True, [2.0, 6.0])]


@pytest.mark.parametrize(
    ("n_step", "double_q", "last_terminated", "expected"),
    [
        # Q(s) = (s0, s1), target (s1, s0): V(s) = max(s); gamma 0.5. Row 0: 1 + .5*2 + .25*V(s2 = [0, 5]) - Q = 3.25 - 2
        (2, False, True, [1.25, 0.5, 2.0, 0.0, 3.0]),
        # 3 steps: row 0 runs into the truncation (1 + 1 + .25 + .125*V([4, 1])) - 2; the last row meets the rollout's end: 4 + .5*6 - 1
        (3, False, False, [0.75, 0.5, 2.0, 0.0, 6.0]),
        # double Q: the online argmax picks, the target values: V(s) = s[1 - argmax s] (min, for distinct entries)
        (3, True, False, [0.375, 0.25, 3.5, 0.0, 4.0]),
    ],
)
@pytest.mark.parametrize("side", ["storage", "recorder"])
def test_actor_side_priorities_are_the_learners_n_step_td_errors(n_step, double_q, last_terminated, expected, side):
    """Ape-X's initial priorities are the TD errors the learner replays with: n-step chains cut at
    a termination (no bootstrap), a truncation (the final observation's value) and the rollout's
    end, with double Q's bootstrap value where the learner uses it; the torch storage and the numpy
    recorder of a central-inference worker agree."""
    chain = [(a, r, last_terminated if te is None else te, tr, v, o) for a, r, te, tr, v, o in CHAIN]
    priorities = _scored_priorities(side, n_step, _linear_actor(double_q=double_q), chain)["priorities"]
    assert isinstance(priorities, torch.Tensor if side == "storage" else np.ndarray)
    np.testing.assert_allclose(np.asarray(priorities).ravel(), expected, rtol=1e-6)


# step 1 failed and its env was restarted (restart_failed_envs): no transition (invalid), cut
# (truncated), its next observation the last good one; step 2 is the restarted env's reset step
FAILED_STEP = [(1, 1.0, False, False, True, [3.0, 0.0]), (0, 0.0, False, True, False, [3.0, 0.0]),
               (1, 0.0, False, False, False, [1.0, 4.0]), (0, 2.0, False, False, True, [2.0, 1.0]),
               (1, 1.0, False, False, True, [0.0, 3.0])]


@pytest.mark.parametrize("n_step", [2, 3])
@pytest.mark.parametrize("side", ["storage", "recorder"])
def test_actor_side_priorities_stop_their_chains_where_the_buffer_does_at_a_failed_step(n_step, side):
    """A chain that meets a step with no transition (a failed env step, restarted) bootstraps from
    that row's observation, as ReplayBuffer._n_step_returns does: the actor's priorities are the
    learner's TD errors on every transition of the rollout."""
    from pytorchrl.agent.storages.off_policy.replay import ReplayBuffer

    actor = _linear_actor()
    data = _scored_priorities(side, n_step, actor, FAILED_STEP)
    priorities = np.asarray(data.pop("priorities")).ravel()
    buffer = ReplayBuffer(capacity=100, gamma=0.5, n_step=n_step)
    buffer.add_data({k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in data.items()})
    rows = np.flatnonzero(buffer._arrays["ready"][: buffer.size])
    assert rows.tolist() == [0, 3, 4]
    returns, discounts, boot = buffer._n_step_returns(rows)
    obs, actions = (torch.as_tensor(buffer._arrays[k]) for k in ("obs", "actions"))
    q, _ = actor.score(obs[rows], actions[rows])
    _, values = actor.score(obs[boot], actions[boot])
    learner_errors = np.abs(returns + discounts * values.detach().numpy() - q.detach().numpy())
    np.testing.assert_allclose(priorities[rows], learner_errors, rtol=1e-6)
    np.testing.assert_array_equal(priorities[[1, 2]], 0.0)  # no transitions: never replayed


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_apex_config_runs_with_two_remote_workers(ray_session):
    from pytorchrl.config import load_config
    from tests.conftest import CONFIGS

    overrides = ["run.target_steps=2048", "run.eval_every=0", "run.stop_at_return=null", "algorithm.start_steps=512",
                 "env.num_envs=4", "actor.hidden_sizes=[32]", "scheme.col_worker_resources.num_cpus=0.25"]
    learner = Learner.from_config(load_config(CONFIGS / "dqn" / "apex_cartpole.yaml", overrides), progress=False)
    try:
        summary = learner.train()
        storage = learner.scheme.grad_workers.local_worker.storage
        leaves = storage.buffer.sampler._tree().leaves()[: storage.buffer.size]
    finally:
        learner.close()
    assert summary["env_steps"] >= 2048 and learner.updates > 0 and learner.healthy_workers == 2
    assert len(set(leaves[leaves > 0].round(6).tolist())) > 10  # priorities from the actors' TD errors, not one max value
