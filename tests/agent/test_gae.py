"""GAE against a hand-worked example with a termination and a truncation inside the rollout."""

from __future__ import annotations

import pytest
import torch

from pytorchrl.agent.storages import GAEBuffer, compute_gae


def test_gae_hand_worked_termination_and_truncation():
    # One env, 6 steps, gamma 0.5, lambda 0.5.
    # t=0,1: a normal episode that terminates at t=1; t=2 is the reset step (invalid);
    # t=3: truncated (obs[4] is the final observation, V=10); t=4 reset step; t=5 normal.
    g, lam = 0.5, 0.5
    rewards = torch.tensor([[1.0], [2.0], [0.0], [3.0], [0.0], [4.0]])
    values = torch.tensor([[1.0], [2.0], [5.0], [1.0], [10.0], [2.0], [8.0]])  # V(obs_0..obs_6)
    terminated = torch.tensor([[0], [1], [0], [0], [0], [0]], dtype=torch.bool)
    truncated = torch.tensor([[0], [0], [0], [1], [0], [0]], dtype=torch.bool)
    valid = torch.tensor([[1], [1], [0], [1], [0], [1]], dtype=torch.bool)
    adv, ret = compute_gae(rewards, values, terminated, truncated, valid, gamma=g, gae_lambda=lam)
    # by hand:
    d5 = 4 + g * 8 - 2  # 6.0, bootstraps from obs_6
    d3 = 3 + g * 10 - 1  # 7.0, truncated: bootstraps from the final obs value
    d1 = 2 + 0 - 2  # 0.0, terminated: no bootstrap
    d0 = 1 + g * 2 - 1  # 1.0
    expected = torch.tensor([[d0 + g * lam * d1], [d1], [0.0], [d3], [0.0], [d5]])
    assert torch.allclose(adv, expected)
    assert torch.allclose(ret, expected + values[:-1])


def _fill(buffer: GAEBuffer, steps: int, n: int):
    buffer.reset(torch.zeros(n, 3))
    for t in range(steps):
        buffer.insert(
            action=torch.full((n,), t % 2), reward=torch.ones(n), terminated=torch.zeros(n, dtype=torch.bool),
            truncated=torch.zeros(n, dtype=torch.bool), valid=torch.tensor([t != 2] * n), next_obs=torch.full((n, 3), float(t + 1)),
        )
    buffer.score(lambda obs, actions: (-actions.float(), obs[:, 0]), chunk_steps=3)
    assert torch.equal(buffer.values[: steps + 1, 0], torch.arange(steps + 1.0))  # V(obs_t) = t, bootstrap included
    assert torch.equal(buffer.log_probs[:steps, 0], -(torch.arange(steps) % 2).float())


def test_buffer_joins_workers_and_samples_only_valid_steps():
    buf = GAEBuffer(num_steps=4, num_envs=2, obs_shape=(3,), action_shape=(), discrete=True, gamma=0.9, gae_lambda=0.9)
    _fill(buf, 4, 2)
    assert buf.full
    first, second = buf.get_data(), None
    assert torch.equal(buf.obs[0], first["obs"][4])  # rolled over for the next rollout
    _fill(buf, 4, 2)
    second = buf.get_data()
    learner = GAEBuffer(num_steps=4, num_envs=2, obs_shape=(3,), action_shape=(), discrete=True)
    learner.add_data(first)
    learner.add_data(second)
    learner.before_gradients()
    assert not learner._np  # the gradient side never allocates rollout tensors
    assert learner.num_samples == 2 * 2 * 3  # 2 workers x 2 envs x 3 valid steps
    batches = list(learner.generate_batches(minibatch_size=4, num_epochs=2))
    assert len(batches) == 6 and all(len(b["obs"]) == 4 for b in batches)
    seen = torch.cat([b["obs"][:, 0] for b in batches[:3]])
    assert sorted(seen.tolist()) == sorted([0.0, 1.0, 3.0] * 4)  # obs of step 2 (invalid) never sampled
    learner.after_gradients()
    with pytest.raises(RuntimeError):
        learner.before_gradients()


@pytest.mark.timeout(10)
@pytest.mark.parametrize("recurrent", [False, True])
def test_no_minibatch_size_is_one_batch_however_many_steps_are_reset_steps(recurrent):
    """``algorithm.minibatch_size: null`` (A2C; IMPALA's default) is the whole round in one
    gradient step. Sized by its valid steps instead, a rollout of 1-step episodes (every other
    step a reset step) split in two."""
    from pytorchrl.agent.storages import VTraceBuffer

    steps, envs = 6, 4
    valid = torch.ones(steps, envs, dtype=torch.bool)
    valid[1::2] = False
    data = {
        "obs": torch.zeros(steps + 1, envs, 3), "values": torch.zeros(steps + 1, envs), "actions": torch.zeros(steps, envs, dtype=torch.long),
        "log_probs": torch.zeros(steps, envs), "rewards": torch.ones(steps, envs), "terminated": ~valid,
        "truncated": torch.zeros(steps, envs, dtype=torch.bool), "valid": valid,
    }
    if recurrent:
        data.update(states=torch.zeros(1, envs, 8), starts=torch.zeros(steps + 1, envs, dtype=torch.bool))
    for cls in (GAEBuffer, VTraceBuffer):
        storage = cls(num_steps=steps, num_envs=envs, obs_shape=(3,), action_shape=(), discrete=True, state_size=8 if recurrent else 0)
        storage.add_data(data)
        storage.before_gradients()
        assert storage.num_samples == 12
        assert storage.num_batches(None) == 1 and len(list(storage.generate_batches(minibatch_size=None))) == 1
        assert storage.num_batches(6) > 1  # a size still splits
