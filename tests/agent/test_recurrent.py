"""Recurrent cores, recurrent rollouts and sequence replay: states reset exactly at episode
starts, chunked and whole-sequence forwards agree, rollout-wide scoring equals the per-step one,
and R2D2's windows and returns are what the paper's construction says."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from pytorchrl.agent.actors.networks.encoders import EncoderSpec
from pytorchrl.agent.actors.networks.recurrent import RecurrentCore, RecurrentSpec
from pytorchrl.agent.actors.off_policy import OffPolicyActor
from pytorchrl.agent.actors.on_policy import OnPolicyActor
from pytorchrl.agent.algorithms.dqn import DQN
from pytorchrl.agent.algorithms.sequences import window_returns
from pytorchrl.agent.storages.off_policy.replay import PrioritizedSampler
from pytorchrl.agent.storages.off_policy.sequence_replay import SequenceBuffer
from pytorchrl.agent.storages.on_policy.gae_buffer import GAEBuffer
from pytorchrl.agent.storages.on_policy.vtrace_buffer import VTraceBuffer

pytestmark = pytest.mark.timeout(30)

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACTIONS = gym.spaces.Discrete(3)


@pytest.mark.parametrize("kind", ["gru", "lstm"])
@pytest.mark.parametrize("layers", [1, 2])
def test_core_steps_equal_the_sequence_and_reset_at_starts(kind, layers):
    torch.manual_seed(0)
    core = RecurrentCore(5, kind=kind, hidden_size=8, num_layers=layers)
    x = torch.randn(9, 4, 5)
    starts = torch.zeros(9, 4, dtype=torch.bool)
    starts[3, 1] = starts[6, 2] = True
    state0 = torch.randn(4, core.state_size)
    out, final = core.sequence(x, state0, starts)
    state, outs = state0, []
    for t in range(9):
        state = state * (~starts[t]).float().unsqueeze(-1)
        o, state = core.step(x[t], state)
        outs.append(o)
    torch.testing.assert_close(torch.stack(outs), out, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(state, final, atol=1e-6, rtol=1e-5)
    # env 1 from step 3 on is exactly a fresh episode: the same as running it alone from zeros
    alone, _ = core.sequence(x[3:, 1:2], core.initial_state(1), torch.zeros(6, 1, dtype=torch.bool))
    torch.testing.assert_close(out[3:, 1:2], alone, atol=1e-6, rtol=1e-5)


def _recurrent_rollout(actor, storage, valid_pattern: torch.Tensor, seed: int = 0):
    """Fill ``storage`` acting step by step; ``valid_pattern[t, i]`` False makes step t of env i
    a reset step (so a new episode starts at t + 1)."""
    gen = torch.Generator().manual_seed(seed)
    n = storage.num_envs
    storage.reset(torch.randn(n, *OBS.shape, generator=gen))
    noise = actor.draw_noise(storage.num_steps, n).unbind(0)
    with torch.inference_mode():
        for step, obs, action in storage.acting_slots():
            next_state = actor.act_recurrent(obs, storage.recurrent_state(step), noise[step], action, *storage.scoring_rows(step))
            valid = valid_pattern[step]
            storage.insert(
                reward=torch.randn(n, generator=gen), terminated=~valid, truncated=torch.zeros(n, dtype=torch.bool), valid=valid,
                next_obs=torch.randn(n, *OBS.shape, generator=gen), next_state=next_state,
            )
        storage.score(actor.score_sequence, from_step=storage.step)


def _actor(shared: bool = False, kind: str = "gru") -> OnPolicyActor:
    torch.manual_seed(1)
    return OnPolicyActor(OBS, ACTIONS, recurrent=RecurrentSpec(kind, 16), shared_network=shared)


def _storage(actor, cls=GAEBuffer, num_steps: int = 12, num_envs: int = 3, stride: int | None = None):
    return cls(num_steps=num_steps, num_envs=num_envs, obs_shape=OBS.shape, action_shape=(), discrete=True,
               state_size=actor.state_size, state_stride=stride)


def test_states_reset_exactly_where_episodes_start():
    actor = _actor()
    storage = _storage(actor, num_steps=10, num_envs=2)
    valid = torch.ones(10, 2, dtype=torch.bool)
    valid[3, 0] = valid[7, 0] = False  # env 0: two episode ends (reset steps at 3 and 7)
    _recurrent_rollout(actor, storage, valid)
    starts = storage.starts[:11, 0]
    assert starts.nonzero().flatten().tolist() == [0, 4, 8]
    assert not storage.starts[1:11, 1].any()
    zero = storage.states[:11, 0].abs().sum(-1) == 0
    assert zero.nonzero().flatten().tolist() == [0, 4, 8]  # zeroed there, and only there
    assert (storage.states[1:11, 1].abs().sum(-1) > 0).all()


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_rollout_wide_scoring_equals_per_step_scoring(shared, kind):
    actor = _actor(shared, kind)
    storage = _storage(actor)
    valid = torch.rand(12, 3, generator=torch.Generator().manual_seed(2)) > 0.25
    _recurrent_rollout(actor, storage, valid)
    per_step_log_probs, per_step_values = storage.log_probs.clone(), storage.values.clone()
    with torch.inference_mode():
        storage.score(actor.score_sequence, from_step=0)  # the recurrence re-run over the whole rollout
    torch.testing.assert_close(storage.log_probs, per_step_log_probs, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(storage.values, per_step_values, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("stride", [None, 5, 4])
def test_chunked_minibatches_reproduce_the_full_sequence_forward(stride):
    actor = _actor(shared=False)
    storage = _storage(actor, stride=stride)
    valid = torch.rand(12, 3, generator=torch.Generator().manual_seed(3)) > 0.2
    _recurrent_rollout(actor, storage, valid)
    data = storage.get_data()
    assert data["states"].shape[0] == -(-12 // (stride or 12))
    storage.add_data(data)
    storage.before_gradients()
    seen = 0
    for batch in storage.generate_batches(minibatch_size=8, num_epochs=1):
        log_prob, _, value = actor.evaluate_actions(batch["obs"], batch["actions"], batch["states"], batch["starts"])
        keep = batch["valid"].reshape(-1)
        # each chunk, re-run from its stored state, gives what acting gave (the behaviour log-probs and values)
        torch.testing.assert_close(log_prob[keep], batch["log_probs"].reshape(-1)[keep], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(value[keep], batch["values"].reshape(-1)[keep], atol=1e-5, rtol=1e-5)
        seen += int(keep.sum())
    assert seen == int(valid.sum())  # every valid step in exactly one sequence


def test_vtrace_sequences_carry_their_bootstrap_and_state():
    actor = _actor(shared=True)
    storage = _storage(actor, cls=VTraceBuffer, stride=5)
    _recurrent_rollout(actor, storage, torch.ones(12, 3, dtype=torch.bool))
    data = storage.get_data()
    storage.add_data(data)
    storage.before_gradients()
    batches = list(storage.generate_batches(minibatch_size=1_000, num_epochs=1))
    assert [b["rewards"].shape[0] for b in batches] == [5, 5, 2]
    for b in batches:
        assert b["obs"].shape[0] == b["rewards"].shape[0] + 1 and b["starts"].shape[0] == b["obs"].shape[0]
        log_prob, _, _ = actor.evaluate_actions(b["obs"][:-1], b["actions"], b["states"], b["starts"][:-1])
        torch.testing.assert_close(log_prob, b["log_probs"].reshape(-1), atol=1e-5, rtol=1e-5)


def test_recurrent_state_survives_the_storage_state_dict():
    actor = _actor()
    storage = _storage(actor)
    _recurrent_rollout(actor, storage, torch.ones(12, 3, dtype=torch.bool))
    storage.get_data()
    state = storage.state_dict()
    twin = _storage(actor)
    twin.load_state_dict(state)
    torch.testing.assert_close(twin.recurrent_state(0), storage.recurrent_state(0))
    assert storage.recurrent_state(0).abs().sum() > 0  # the memory carried into the next rollout


# ---------------------------------------------------------------------------------- R2D2


def test_window_returns_stop_at_episode_ends_and_at_the_window_end():
    rewards = torch.tensor([[1.0], [2.0], [4.0], [8.0], [16.0]])
    terminated = torch.tensor([[False], [True], [False], [False], [False]])
    truncated = torch.tensor([[False], [False], [False], [True], [False]])
    returns, discounts, boot = window_returns(rewards, terminated, truncated, gamma=0.5, n_step=3)
    # t=0: 1 + 0.5 * 2, terminated at step 1: no bootstrap
    # t=2: 4 + 0.5 * 8, truncated at step 3: bootstrap from obs[4] (the final observation) with 0.25
    # t=4: 16, the window ends: bootstrap from obs[5] with 0.5
    assert returns.flatten().tolist() == [2.0, 2.0, 8.0, 8.0, 16.0]
    assert discounts.flatten().tolist() == [0.0, 0.0, 0.25, 0.5, 0.5]
    assert boot.flatten().tolist() == [2, 2, 4, 4, 5]


def test_window_returns_stop_before_a_failed_step_as_the_flat_buffer_does():
    """A failed env step (restarted: ``valid`` False, ``truncated``, reward 0, its next
    observation the last good one) is no transition: a chain that reaches it bootstraps from
    its observation, ``obs[2]``, with ``gamma^k``; it does not add its 0 and go one further."""
    rewards = torch.tensor([[1.0], [2.0], [0.0], [8.0]])
    terminated = torch.zeros(4, 1, dtype=torch.bool)
    truncated = torch.tensor([[False], [False], [True], [False]])
    valid = torch.tensor([[True], [True], [False], [True]])
    returns, discounts, boot = window_returns(rewards, terminated, truncated, gamma=0.5, n_step=3, valid=valid)
    assert returns.flatten().tolist()[:2] == [2.0, 2.0] and returns[3].item() == 8.0  # 1 + 0.5 * 2; 2; 8
    assert discounts.flatten().tolist()[:2] == [0.25, 0.5] and discounts[3].item() == 0.5
    assert boot.flatten().tolist()[:2] == [2, 2] and boot[3].item() == 4


def _stream_chunk(t: int, n: int, start: int, chunk: int, state_size: int = 2) -> dict:
    """A recurrent rollout whose observations count steps of the stream (obs = step index)."""
    steps = torch.arange(start, start + t + 1, dtype=torch.float32)
    return {
        "obs": steps.view(-1, 1, 1).expand(t + 1, n, 1).clone(),
        "actions": torch.zeros(t, n, dtype=torch.long),
        "rewards": steps[:t].view(-1, 1).expand(t, n).clone(),
        "terminated": torch.zeros(t, n, dtype=torch.bool),
        "truncated": torch.zeros(t, n, dtype=torch.bool),
        "valid": torch.ones(t, n, dtype=torch.bool),
        "starts": torch.zeros(t + 1, n, dtype=torch.bool),
        "states": steps[:t].view(-1, 1, 1).expand(t, n, state_size).clone(),
        "stream_id": torch.tensor(7),
        "chunk_index": torch.tensor(chunk),
    }


def test_sequence_buffer_windows_overlap_by_half_across_rollouts():
    buffer = SequenceBuffer(capacity=1_000, sequence_length=6)
    buffer.add_data(_stream_chunk(4, 2, 0, 0))  # 4 steps: no window yet
    assert buffer.size == 0
    buffer.add_data(_stream_chunk(4, 2, 4, 1))  # 8 steps: the window at 0
    buffer.add_data(_stream_chunk(4, 2, 8, 2))  # 12 steps: windows at 3 and 6
    assert buffer.size == 3 * 2
    starts = sorted({int(buffer._arrays["obs"][i, 0, 0]) for i in range(buffer.size)})
    assert starts == [0, 3, 6]
    for i in range(buffer.size):
        first = buffer._arrays["obs"][i, 0, 0]
        np.testing.assert_array_equal(buffer._arrays["obs"][i, :, 0], first + np.arange(7))  # contiguous, 6 steps + bootstrap
        assert buffer._arrays["states"][i, 0] == first  # the state stored at the window's first step
    batch = buffer.sample(5)
    assert batch["obs"].shape == (7, 5, 1) and batch["rewards"].shape == (6, 5) and batch["states"].shape == (5, 2)
    # a chunk that does not continue the stream starts over
    buffer.add_data(_stream_chunk(4, 2, 100, 9))
    assert buffer.size == 3 * 2


@pytest.mark.parametrize(("length", "burn_in"), [(20, 0), (20, 4), (20, 10), (20, 16), (20, 5)])
def test_every_step_past_the_first_windows_is_learned_from_twice_whatever_the_burn_in(length, burn_in):
    """A window's loss is on its steps after the burn-in; windows start every half of that part,
    so each step is learned from twice (three times once a stride where the half is not whole),
    never 0 times (a stride of half the window skipped steps once the burn-in passed half of it)
    and not once and twice by turns."""
    from pytorchrl.agent.algorithms.sequences import Window

    buffer = SequenceBuffer(capacity=10_000, sequence_length=length, burn_in=burn_in)
    buffer.add_data(_stream_chunk(200, 1, 0, 0))
    rows = {k: torch.from_numpy(np.swapaxes(buffer._arrays[k][: buffer.size], 0, 1).copy()) for k in ("obs", "rewards", "terminated", "truncated", "valid")}
    learned = Window(rows, burn_in, gamma=0.99, n_step=1).now(rows["obs"][burn_in:, :, 0])
    counts = np.bincount(learned.long().numpy().ravel(), minlength=200)[length : 200 - length]  # past the stream's first and last windows
    assert counts.min() == 2 and counts.max() <= 3 and (counts == 2).mean() > 0.8, counts.tolist()


def test_sequence_buffer_state_dict_round_trip():
    sampler = PrioritizedSampler()
    buffer = SequenceBuffer(capacity=60, sequence_length=4, sampler=sampler)
    for c in range(5):
        buffer.add_data(_stream_chunk(4, 2, 4 * c, c))
    buffer.update_priorities(torch.tensor([0, 1]), torch.tensor([5.0, 0.1]))
    twin = SequenceBuffer(capacity=60, sequence_length=4, sampler=sampler)
    twin.load_state_dict(buffer.state_dict())
    gen_a, gen_b = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    a, b = buffer.sample(8, gen_a), twin.sample(8, gen_b)
    for key in a:
        torch.testing.assert_close(a[key], b[key])
    buffer.add_data(_stream_chunk(4, 2, 20, 5))  # the tails came along: both go on identically
    twin.add_data(_stream_chunk(4, 2, 20, 5))
    assert buffer.size == twin.size


@pytest.mark.parametrize("rainbow", [False, True], ids=["plain", "dueling-c51"])
def test_r2d2_loss_trains_only_after_the_burn_in_and_sets_window_priorities(rainbow):
    torch.manual_seed(0)
    # (noisy nets redraw their noise at every loss, so the loss comparisons below need them off)
    parts = {"dueling": True, "num_atoms": 11} if rainbow else {}
    actor = OffPolicyActor(OBS, ACTIONS, recurrent=RecurrentSpec("lstm", 8), **parts)
    algo = DQN(actor, lr=1e-3, minibatch_size=4, double_q=True, n_step=2, burn_in=3, priority_eta=0.9)
    length, b = 8, 4
    batch = {
        "obs": torch.randn(length + 1, b, 3), "starts": torch.zeros(length + 1, b, dtype=torch.bool),
        "states": torch.randn(b, actor.state_size), "actions": torch.randint(3, (length, b)), "rewards": torch.randn(length, b),
        "terminated": torch.zeros(length, b, dtype=torch.bool), "truncated": torch.zeros(length, b, dtype=torch.bool),
        "valid": torch.ones(length, b, dtype=torch.bool), "indices": torch.arange(b), "weights": torch.ones(b),
    }
    loss, _ = algo.compute_loss(batch)
    priorities = algo.pop_priorities()
    assert priorities is not None and priorities.shape == (b,) and (priorities > 0).all()
    # the rewards of burn-in steps do not enter the loss; those after it do
    changed = dict(batch, rewards=batch["rewards"].clone())
    changed["rewards"][:3] += 100.0
    assert torch.allclose(algo.compute_loss(changed)[0], loss)
    changed["rewards"][5] += 100.0
    assert not torch.allclose(algo.compute_loss(changed)[0], loss)


# ----------------------------------------------------------------------------- bad input

GRU = {"recurrent": {"type": "gru", "hidden_size": 8}}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"actor": GRU, "storage": {"num_steps": 16, "sequence_length": 32}},
         r"'storage.sequence_length' = 32 is longer than the rollout \(storage.num_steps = 16\)"),
        ({"actor": GRU, "algorithm": {"name": "dqn"}}, r"'storage.sequence_length' is required for a recurrent DQN"),
        ({"actor": GRU, "algorithm": {"name": "dqn"}, "storage": {"sequence_length": 8, "burn_in": 8}},
         r"'storage.burn_in' = 8 must be below storage.sequence_length = 8"),
        ({"storage": {"sequence_length": 8}}, r"'storage.sequence_length' = 8 is for recurrent policies"),
        ({"algorithm": {"name": "appo"}, "storage": {"burn_in": 4}}, r"'storage.burn_in' = 4 is for recurrent policies"),
        ({"algorithm": {"name": "appo"}, "storage": {"num_steps": 16, "sequence_length": 32}},
         r"'storage.sequence_length' = 32 is longer than the rollout \(storage.num_steps = 16\)"),
        ({"actor": GRU, "storage": {"burn_in": 4}}, r"'storage.burn_in' = 4 is for replayed sequences"),
        ({"actor": {"recurrent": {"type": "rnn"}}}, r"'actor.recurrent.type' = 'rnn' is not allowed"),
    ],
)
def test_impossible_recurrent_configs_are_one_line(raw, message):
    from pytorchrl.config import ConfigError, from_dict

    with pytest.raises(ConfigError, match=message) as info:
        from_dict(raw)
    assert "\n" not in str(info.value)


def test_a_recurrent_core_on_an_algorithm_that_cannot_take_one_is_one_line():
    from pytorchrl.config import from_dict
    from pytorchrl.scheme.scheme import build_scheme
    from pytorchrl.utils.errors import InputError

    raw = {"env": {"env_id": "Pendulum-v1"}, "actor": GRU, "algorithm": {"name": "td3"}, "storage": {"sequence_length": 8}}
    with pytest.raises(InputError, match=r"'actor.recurrent.type' = 'gru': algorithm 'td3' cannot take a recurrent core; these can: ppo, a2c, impala, appo, dqn, sac$"):
        build_scheme(from_dict(raw))
    shared = {**raw, "actor": {**GRU, "shared_network": True}, "algorithm": {"name": "sac"}}
    with pytest.raises(InputError, match=r"'actor.shared_network' = true cannot be combined with a recurrent SAC"):
        build_scheme(from_dict(shared))


@pytest.mark.parametrize("discrete", [False, True])
def test_recurrent_sac_acts_with_its_state_and_learns_from_windows(discrete):
    from pytorchrl.agent.actors.policy_critic import PolicyCriticActor
    from pytorchrl.agent.algorithms.sac import SAC

    torch.manual_seed(0)
    actions = gym.spaces.Discrete(3) if discrete else gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    actor = PolicyCriticActor(OBS, actions, policy="categorical" if discrete else "gaussian", recurrent=RecurrentSpec("gru", 8),
                              encoder=EncoderSpec(hidden_sizes=(16,), activation="relu"))
    actor.uniform.fill_(False)
    algo = SAC(actor, lr=1e-3, n_step=2, burn_in=2)
    # acting: the state advances and a stored state gives the same action as stepping there
    obs = torch.randn(4, 3)
    noise = actor.draw_noise(1, 4)[0]
    out = torch.zeros(4, dtype=torch.long) if discrete else torch.zeros(4, 1)
    state = actor.act_recurrent(obs, torch.zeros(4, actor.state_size), noise, out)
    assert state.shape == (4, actor.state_size) and state.abs().sum() > 0
    assert all(k.startswith(actor.acting_prefixes) for k in algo.get_weights(acting=True))
    assert any(k.startswith("policy_core.") for k in algo.get_weights(acting=True))
    length, b = 6, 4
    batch = {
        "obs": torch.randn(length + 1, b, 3), "starts": torch.zeros(length + 1, b, dtype=torch.bool), "states": torch.randn(b, actor.state_size),
        "actions": torch.randint(3, (length, b)) if discrete else torch.rand(length, b, 1) * 4 - 2, "rewards": torch.randn(length, b),
        "terminated": torch.zeros(length, b, dtype=torch.bool), "truncated": torch.zeros(length, b, dtype=torch.bool),
        "valid": torch.ones(length, b, dtype=torch.bool), "indices": torch.arange(b), "weights": torch.ones(b),
    }
    before = algo.flat_params.clone()
    algo.compute_gradients(batch)
    assert algo.apply_gradients()
    assert not torch.equal(before, algo.flat_params)
    priorities = algo.pop_priorities()
    assert priorities is not None and priorities.shape == (b,)
    core = actor.policy_core
    assert core is not None and any(p.grad is not None and p.grad.abs().sum() > 0 for p in core.parameters())


@pytest.mark.timeout(60)
def test_a_replayed_window_weighs_in_the_replicas_average_by_its_steps_after_the_burn_in():
    """Remote gradient workers' gradients are averaged by the steps each loss is a mean over: for
    windows, the valid steps after the burn-in (it only warms the state up). Counting the burn-in
    too gave a replica whose windows end early in an episode several times its weight."""
    from pytorchrl.agent.algorithms.sequences import Window
    from pytorchrl.config import load_config
    from pytorchrl.learner import Learner
    from tests.conftest import CONFIGS

    config = load_config(CONFIGS / "dqn" / "r2d2_cartpole_masked.yaml", ["algorithm.start_steps=256", "env.num_test_envs=1"])
    with Learner.from_config(config, progress=False) as learner:
        worker = learner.scheme.grad_workers.local_worker
        seen = []
        compute = worker.algo.compute_gradients
        worker.algo.compute_gradients = lambda batch: (seen.append(batch), compute(batch))[1]
        info: dict = {}
        while not seen:
            _, info = worker.step()
        batch = seen[-1]
        learning = int(Window(batch, worker.algo.burn_in, gamma=0.99, n_step=1).valid.sum())
        assert worker.algo.burn_in == 5 and info["num_samples"] == learning < int(batch["valid"].sum())
