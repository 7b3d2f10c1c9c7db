"""Replay storage: the sum tree against brute force, n-step returns against a hand-worked
example, observations stored once, ring wrap-around against a reference built from the full
history, prioritized weights by hand, checkpoints."""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest
import torch

from pytorchrl.agent.storages.off_policy import PrioritizedSampler, ReplayBuffer, SumTree, UniformSampler


def _rollout(obs, rewards, terminated=None, truncated=None, valid=None, actions=None, stream=None, chunk=None):
    """A rollout in the collection side's format from nested lists (``obs [T+1, N, ...]``, rest ``[T, N]``)."""
    rewards = torch.tensor(rewards, dtype=torch.float32)
    zeros = torch.zeros(rewards.shape, dtype=torch.bool)
    data = {
        "obs": torch.tensor(obs, dtype=torch.float32),
        "actions": torch.tensor(actions) if actions is not None else torch.zeros(rewards.shape, dtype=torch.long),
        "rewards": rewards,
        "terminated": zeros if terminated is None else torch.tensor(terminated, dtype=torch.bool),
        "truncated": zeros if truncated is None else torch.tensor(truncated, dtype=torch.bool),
        "valid": ~zeros if valid is None else torch.tensor(valid, dtype=torch.bool),
        "log_probs": torch.zeros(rewards.shape),  # other keys are ignored
    }
    if stream is not None:
        data["stream_id"], data["chunk_index"] = torch.tensor(stream), torch.tensor(chunk)
    return data


def _by_first_obs(batch):
    """``{first obs value: (G, discount, first next_obs value)}`` of a batch."""
    out = {}
    for o, g, d, nxt in zip(batch["obs"][:, 0].tolist(), batch["rewards"].tolist(), batch["discounts"].tolist(), batch["next_obs"][:, 0].tolist()):
        out[o] = (g, d, nxt)
    return out


# ---------------------------------------------------------------------------- sum tree


@pytest.mark.parametrize("cap", [37, 100_000])  # searched whole; two levels descended block by block
def test_sum_tree_matches_brute_force(cap):
    rng = np.random.default_rng(0)
    tree, ref = SumTree(cap), np.zeros(cap)
    for _ in range(30):
        idx = rng.integers(0, cap, size=20)  # duplicates in most batches
        vals = rng.integers(0, 6, size=20).astype(float)  # integers: exact sums; zeros included
        tree.update(idx, vals)
        for i, v in zip(idx, vals):  # sequential updates: the last value of an index wins
            ref[i] = v
        np.testing.assert_array_equal(tree.leaves(), ref)
        assert tree.total == ref.sum()
        assert tree.min == (ref[ref > 0].min() if ref.any() else np.inf)
        if ref.any():
            u = np.concatenate([np.arange(ref.sum()), np.arange(ref.sum()) + 0.5])  # every boundary and midpoint
            np.testing.assert_array_equal(tree.find(u), np.searchsorted(np.cumsum(ref), u, side="right"))
            # at or past the total (rounding): the last nonzero leaf, never a zero one
            assert (tree.find([ref.sum(), ref.sum() + 1]) == np.flatnonzero(ref)[-1]).all()
    # float priorities, many zeros: rounding never leads the descent to a zero leaf
    floats = rng.random(cap) * (rng.random(cap) < 0.3)
    tree.update(np.arange(cap), floats)
    u = np.concatenate([rng.random(1000) * tree.total, tree.total * (1 - np.logspace(-17, -10, 50)), [tree.total]])
    assert (floats[tree.find(u)] > 0).all()
    for _ in range(10):
        tree.update(rng.integers(0, cap, 40), rng.random(40))
    # every internal node is recomputed from its children: a tree rebuilt from the leaves is identical
    rebuilt = SumTree(cap)
    rebuilt.load_state_dict(tree.state_dict())
    for a, b in zip((*rebuilt._sums, *rebuilt._mins), (*tree._sums, *tree._mins)):
        np.testing.assert_array_equal(a, b)
    tree.update(np.arange(cap), np.zeros(cap))
    assert tree.total == 0 and tree.min == np.inf
    with pytest.raises(ValueError, match="empty"):
        tree.find([0.0])


def test_stratified_sampling_is_proportional():
    priorities = np.array([5.0, 0.0, 1.0, 3.0, 0.0, 0.5, 10.0, 0.5])
    sampler = PrioritizedSampler(alpha=1.0, eps=0.0)
    sampler.bind(len(priorities))
    sampler.added(np.arange(8), priorities > 0, priorities)
    ready = priorities > 0
    gen = torch.Generator().manual_seed(0)
    counts = np.zeros(8)
    for _ in range(300):
        rows, _ = sampler.sample(64, gen, ready, 8, int(ready.sum()))
        counts += np.bincount(rows, minlength=8)
    assert counts[~ready].sum() == 0
    np.testing.assert_allclose(counts / counts.sum(), priorities / priorities.sum(), atol=0.005)


def test_a_non_finite_td_error_gets_the_highest_priority_instead_of_breaking_the_tree():
    """A NaN loss (its gradient is skipped) must not stop the run inside the sum tree."""
    sampler = PrioritizedSampler(alpha=1.0, eps=0.0)
    sampler.bind(4)
    sampler.added(np.arange(4), np.ones(4, dtype=bool), np.array([1.0, 2.0, 3.0, float("nan")]))  # the highest so far: 1
    sampler.update_priorities(np.array([0, 1]), np.array([float("nan"), float("inf")]))  # now 3
    assert sampler.max_priority == 3.0
    np.testing.assert_array_equal(sampler.tree.get(np.arange(4)), [3.0, 3.0, 3.0, 1.0])
    assert sampler.tree.total == 10.0


# ---------------------------------------------------------------------------- n-step returns


def test_n_step_returns_hand_worked_termination_truncation_and_chunk_end():
    # One env, n = 3, gamma = 0.5; obs value = step index.
    # t=0,1,2: rewards 1, 2, 4, terminated at t=2 (obs 3 is the final obs); t=3 reset step (invalid);
    # t=4,5: rewards 1, 2, truncated at t=5 (obs 6 is the final obs); t=6 reset step; t=7,8: rewards 8, 16.
    # obs 9 ends the chunk: pending, no transition yet.
    obs = [[[float(i)]] for i in range(10)]
    rewards = [[1.0], [2.0], [4.0], [0.0], [1.0], [2.0], [0.0], [8.0], [16.0]]
    terminated = [[False], [False], [True], [False], [False], [False], [False], [False], [False]]
    truncated = [[False], [False], [False], [False], [False], [True], [False], [False], [False]]
    valid = [[True], [True], [True], [False], [True], [True], [False], [True], [True]]
    buf = ReplayBuffer(capacity=32, n_step=3, gamma=0.5)
    buf.add_data(_rollout(obs, rewards, terminated, truncated, valid, stream=7, chunk=0))
    assert buf.num_samples == 7
    got = _by_first_obs(buf.sample(500, torch.Generator().manual_seed(0)))
    assert got == {  # obs: (G, discount, next_obs), by hand
        0.0: (1 + 0.5 * 2 + 0.25 * 4, 0.0, 3.0),  # terminates within the window: no bootstrap
        1.0: (2 + 0.5 * 4, 0.0, 3.0),
        2.0: (4.0, 0.0, 3.0),
        4.0: (1 + 0.5 * 2, 0.25, 6.0),  # truncated at k=1: bootstrap from the final obs 6, gamma^2
        5.0: (2.0, 0.5, 6.0),
        7.0: (8 + 0.5 * 16, 0.25, 9.0),  # obs 9 has no transition yet: m=2, bootstrap from it
        8.0: (16.0, 0.5, 9.0),
    }  # the reset steps (obs 3, obs 6) are never sampled
    # the stream continues: t=9,10 with rewards 32, 64; obs 11 pending
    buf.add_data(_rollout([[[9.0]], [[10.0]], [[11.0]]], [[32.0], [64.0]], stream=7, chunk=1))
    got = _by_first_obs(buf.sample(500, torch.Generator().manual_seed(1)))
    assert got[7.0] == (8 + 0.5 * 16 + 0.25 * 32, 0.125, 10.0)
    assert got[8.0] == (16 + 0.5 * 32 + 0.25 * 64, 0.125, 11.0)
    assert got[9.0] == (32 + 0.5 * 64, 0.25, 11.0)
    assert got[10.0] == (64.0, 0.5, 11.0)
    assert len(got) == buf.num_samples == 9


def test_t1_chunks_continue_and_chain_across_them():
    n_envs, buf = 2, ReplayBuffer(capacity=64, n_step=3, gamma=0.5)
    for t in range(10):  # obs value = step, reward 1 each step
        buf.add_data(_rollout([[[t], [t]], [[t + 1], [t + 1]]], [[1.0, 1.0]], stream=0, chunk=t))
    assert buf.num_samples == 20 and buf.size == 20 + n_envs  # transitions + pending rows
    batch = buf.sample(20_000, torch.Generator().manual_seed(0))
    counts = np.bincount(batch["indices"].numpy())
    assert np.count_nonzero(counts) == 20 and np.abs(counts[counts > 0] - 1000).max() < 150  # uniform: sd 31
    got = _by_first_obs(batch)
    assert got == {
        **{float(t): (1.75, 0.125, t + 3.0) for t in range(8)},
        8.0: (1.5, 0.25, 10.0),  # obs 10 is pending
        9.0: (1.0, 0.5, 10.0),
    }


# ---------------------------------------------------------------------------- layout


def _chunk(t_steps, n, start, stream=None, chunk=None):
    obs = [[[float(start + t)] for _ in range(n)] for t in range(t_steps + 1)]
    return _rollout(obs, np.ones((t_steps, n)), stream=stream, chunk=chunk)


def test_observations_are_stored_once():
    buf = ReplayBuffer(capacity=1000)
    buf.add_data(_chunk(4, 2, 0, stream=0, chunk=0))
    assert (buf.size, buf.num_samples) == (10, 8)  # obs[0..4] of 2 envs
    buf.add_data(_chunk(4, 2, 4, stream=0, chunk=1))
    assert (buf.size, buf.num_samples) == (18, 16)  # continued: obs[0] not stored again
    buf.add_data(_chunk(4, 2, 8, stream=0, chunk=3))  # a gap (a lost chunk): obs[0] stored
    assert (buf.size, buf.num_samples) == (28, 24)
    buf.add_data(_chunk(4, 2, 0, stream=1, chunk=0))  # another stream
    buf.add_data(_chunk(4, 2, 0))  # no stream id
    buf.add_data(_chunk(4, 3, 12, stream=0, chunk=4))  # a different number of envs
    assert (buf.size, buf.num_samples) == (28 + 10 + 10 + 15, 24 + 8 + 8 + 12)
    buf.add_data(_chunk(0, 3, 16, stream=0, chunk=5))  # an empty chunk continues, stores nothing
    buf.add_data(_chunk(1, 3, 16, stream=0, chunk=6))
    assert (buf.size, buf.num_samples) == (63 + 3, 52 + 3)
    with pytest.raises(ValueError, match="together"):
        buf.add_data({**_chunk(1, 1, 0), "stream_id": torch.tensor(3)})


def test_overwritten_pending_rows_are_not_continued():
    # rows are numbered by write order (sequence numbers); ring row = seq % 20
    buf = ReplayBuffer(capacity=20)
    buf.add_data(_chunk(1, 2, 0, stream=0, chunk=0))  # seq 0-3, stream 0 pending 2-3
    buf.add_data(_chunk(7, 2, 0, stream=1, chunk=0))  # seq 4-19, stream 1 pending 18-19
    buf.add_data(_chunk(1, 2, 1, stream=0, chunk=1))  # seq 20-21 overwrite 0-1, not 2-3: continued
    assert buf._written == 22
    buf.add_data(_chunk(5, 2, 7, stream=1, chunk=1))  # seq 22-31
    buf.add_data(_chunk(5, 2, 12, stream=1, chunk=2))  # seq 32-41 overwrite stream 0's pending 20-21
    buf.add_data(_chunk(1, 2, 2, stream=0, chunk=2))  # so obs[0] is written again: seq 42-45
    assert buf._written == 46
    buf.add_data(_chunk(2, 2, 17, stream=1, chunk=3))  # seq 46-49
    # 16 new rows (seq 50-65) would overwrite stream 0's pending 44-45 themselves: obs[0] written too
    buf.add_data(_chunk(8, 2, 3, stream=0, chunk=3))
    assert buf._written == 50 + 18
    batch = buf.sample(2000, torch.Generator().manual_seed(0))  # each chunk's obs count up from the last's
    assert len(batch["indices"].unique()) == buf.num_samples and batch["next_obs"].eq(batch["obs"] + 1).all()
    with pytest.raises(ValueError, match="does not fit"):
        buf.add_data(_chunk(10, 2, 0))


@pytest.mark.parametrize("prioritized", [False, True])
def test_ring_wraparound_against_history(prioritized):
    """Two workers of 3 envs with random episode ends, chunk lengths, lost chunks and chunks
    without a stream id, into a ring that wraps many times; obs = (stream, env, step) so that
    every sampled transition can be checked against a reference computed from the history."""
    rng = np.random.default_rng(1)
    n_envs, n_step, gamma, capacity = 3, 3, 0.5, 60
    sampler = PrioritizedSampler() if prioritized else UniformSampler()
    buf = ReplayBuffer(capacity=capacity, n_step=n_step, gamma=gamma, sampler=sampler)
    hist = {s: {"r": [], "term": [], "trunc": [], "valid": []} for s in range(2)}  # per stream, [t][env]
    breaks: dict[int, set[int]] = {0: set(), 1: set()}  # steps where a stream's chunk was not continued
    chunk = {0: 0, 1: 0}
    ended = {s: np.zeros(n_envs, dtype=bool) for s in range(2)}
    for i in range(150):
        s = i % 2  # alternating: a stream's pending rows are at most 2 chunks old, always alive
        h, t0, t_len = hist[s], len(hist[s]["r"]), int(rng.choice([1, 2, 3, 5]))
        obs = [[[s, e, t0 + t] for e in range(n_envs)] for t in range(t_len + 1)]
        r, term, trunc, valid = [], [], [], []
        for _ in range(t_len):
            valid.append(~ended[s])  # the step after an episode end is a reset step
            end = rng.random(n_envs)
            term.append((end < 0.15) & valid[-1])
            trunc.append((end > 0.85) & valid[-1])
            r.append(np.where(valid[-1], rng.integers(1, 5, n_envs), 0).astype(float))
            ended[s] = term[-1] | trunc[-1]
        data = _rollout(obs, np.array(r), np.array(term), np.array(trunc), np.array(valid),
                        actions=(np.array(r) * 10 + 1).astype(np.int64))  # action checkable against reward
        kind = rng.random()
        if kind < 0.1:  # no stream id: never continued
            breaks[s].add(t0)
        else:
            chunk[s] += 2 if kind < 0.2 else 1  # < 0.2: a lost chunk
            if kind < 0.2 or chunk[s] == 1:
                breaks[s].add(t0)
            data["stream_id"], data["chunk_index"] = torch.tensor(s), torch.tensor(chunk[s])
        prio = torch.tensor(rng.random((t_len, n_envs)) + 0.5) if prioritized and rng.random() < 0.5 else None
        buf.add_data(data, priorities=prio)
        for key, v in zip(("r", "term", "trunc", "valid"), (r, term, trunc, valid)):
            h[key].extend(v)

    def expected(s, e, t0):
        h, g, disc = hist[s], 0.0, gamma**n_step
        m = n_step
        for k in range(n_step):
            t = t0 + k
            if k and (t == len(h["r"]) or t in breaks[s] or not h["valid"][t][e]):
                m, disc = k, gamma**k
                break
            g += gamma**k * h["r"][t][e]
            if h["term"][t][e] or h["trunc"][t][e]:
                m, disc = k + 1, 0.0 if h["term"][t][e] else gamma ** (k + 1)
                break
        return g, disc, t0 + m

    assert buf._written > 10 * capacity
    batch = buf.sample(1500, torch.Generator().manual_seed(0))
    assert len(batch["indices"].unique()) == buf.num_samples  # every sampleable row, and only those
    for o, a, g, d, nxt in zip(batch["obs"].tolist(), batch["actions"].tolist(), batch["rewards"].tolist(),
                                batch["discounts"].tolist(), batch["next_obs"].tolist()):
        s, e, t = (int(x) for x in o)
        assert hist[s]["valid"][t][e]
        assert a == hist[s]["r"][t][e] * 10 + 1
        exp_g, exp_d, exp_t = expected(s, e, t)
        assert (g, d, nxt) == (exp_g, exp_d, [s, e, exp_t])
    if prioritized:
        leaves = buf.sampler.tree.leaves()
        ready = buf._arrays["ready"]
        assert (leaves[~ready] == 0).all() and (leaves[ready] > 0).all()  # invalid and pending rows: 0


# ---------------------------------------------------------------------------- prioritized


def test_prioritized_weights_by_hand():
    sampler = PrioritizedSampler(alpha=0.5, beta0=0.4, eps=0.0)
    buf = ReplayBuffer(capacity=16, sampler=sampler)
    # 4 steps of 1 env with actor-side priorities |td| = 4, 1, 16, 9 -> p = |td|^0.5 = 2, 1, 4, 3
    buf.add_data(_chunk(4, 1, 0, stream=0, chunk=0), priorities=torch.tensor([[4.0], [1.0], [16.0], [9.0]]))
    buf.set_progress(0.5)  # beta = 0.4 + 0.6 * 0.5 = 0.7
    # w_i = (N P(i))^-beta / max_j w_j, N = 4, P = p / 10; the max is at the smallest p (step 1)
    hand = {0: (4 * 0.2) ** -0.7 / (4 * 0.1) ** -0.7, 1: 1.0, 2: (4 * 0.4) ** -0.7 / (4 * 0.1) ** -0.7, 3: (4 * 0.3) ** -0.7 / (4 * 0.1) ** -0.7}
    gen = torch.Generator().manual_seed(0)
    counts = np.zeros(4)
    for _ in range(100):
        batch = buf.sample(100, gen)
        steps = batch["obs"][:, 0].long().numpy()
        np.testing.assert_allclose(batch["weights"].numpy(), [hand[i] for i in steps], rtol=1e-6)
        counts += np.bincount(steps, minlength=4)
    np.testing.assert_allclose(counts / counts.sum(), [0.2, 0.1, 0.4, 0.3], atol=0.005)
    # TD errors of a sampled batch: step 1 -> |td| 25 -> p = 5, the new max
    batch = buf.sample(50, gen)
    step1 = batch["indices"][batch["obs"][:, 0] == 1][:1]
    buf.update_priorities(step1, torch.tensor([-25.0]))
    buf.add_data(_chunk(1, 1, 4, stream=0, chunk=1))  # a new transition gets the max priority so far
    p = {0: 2.0, 1: 5.0, 2: 4.0, 3: 3.0, 4: 5.0}
    batch = buf.sample(200, gen)
    expected = [(2.0 / p[i]) ** 0.7 for i in batch["obs"][:, 0].long().tolist()]
    np.testing.assert_allclose(batch["weights"].numpy(), expected, rtol=1e-6)
    assert buf.sampler.tree.total == pytest.approx(sum(p.values()))


def test_prioritized_overwrite_resets_priority_and_beta_steps():
    buf = ReplayBuffer(capacity=6, sampler=PrioritizedSampler(alpha=1.0, eps=0.0, beta0=0.5, beta_steps=4))
    buf.add_data(_chunk(2, 2, 0), priorities=torch.tensor([[1.0, 2.0], [3.0, 4.0]]))  # rows 0-5, pending 4-5
    tree = buf.sampler.tree
    np.testing.assert_array_equal(tree.leaves(), [1, 2, 3, 4, 0, 0])
    buf.add_data(_chunk(1, 2, 5), priorities=torch.tensor([[7.0, 0.5]]))  # rows 0-3: obs[0] 0-1, pending 2-3
    np.testing.assert_array_equal(tree.leaves(), [7, 0.5, 0, 0, 0, 0])  # overwritten rows 2-3 lost theirs
    assert buf.num_samples == 2
    assert buf.sampler.beta == 0.5
    for _ in range(6):
        buf.sample(4)
    assert buf.sampler.beta == 1.0  # annealed over 4 sample calls
    with pytest.raises(RuntimeError, match="beta_steps"):
        buf.set_progress(0.5)


# ---------------------------------------------------------------------------- the rest


@pytest.mark.parametrize("sampler", [UniformSampler(), PrioritizedSampler(beta0=0.5)])
def test_state_dict_round_trip_samples_identically(sampler):
    factory = ReplayBuffer.create_factory(capacity=50, n_step=3, gamma=0.9, sampler=sampler)
    factory = pickle.loads(pickle.dumps(factory))  # picklable, as scheme factories must be
    buf = factory(device="cpu")
    assert buf.sampler is not sampler
    rng = np.random.default_rng(0)
    chunks = []
    for i in range(12):  # wraps the ring
        t = int(rng.integers(1, 4))
        chunks.append(_rollout(rng.random((t + 1, 4, 3)), rng.random((t, 4)), rng.random((t, 4)) < 0.1,
                               rng.random((t, 4)) < 0.1, rng.random((t, 4)) < 0.9, stream=0, chunk=i))
    for data in chunks[:-1]:
        buf.add_data(data)
    batch = buf.sample(32)
    buf.update_priorities(batch["indices"], torch.randn(32))
    buf.set_progress(0.3)
    blob = io.BytesIO()
    torch.save(buf.state_dict(), blob)
    blob.seek(0)
    other = factory(device="cpu")
    other.load_state_dict(torch.load(blob, weights_only=True))
    for b in (buf, other):  # the stream goes on in both
        b.add_data(chunks[-1])
    assert (other.size, other.num_samples, other._written) == (buf.size, buf.num_samples, buf._written)
    for seed in range(3):
        x, y = buf.sample(64, torch.Generator().manual_seed(seed)), other.sample(64, torch.Generator().manual_seed(seed))
        for k in x:
            assert torch.equal(x[k], y[k]), k


def test_empty_buffer_and_can_sample():
    buf = ReplayBuffer(capacity=10)
    assert buf.nbytes == 0 and not buf.can_sample(1)
    with pytest.raises(ValueError, match="empty"):
        buf.sample(4)
    invalid = _chunk(1, 2, -1.0)
    invalid["valid"][:] = False
    for _ in range(2):
        buf.add_data(invalid)  # only reset steps: rows used, nothing to sample
    with pytest.raises(ValueError, match="empty"):
        buf.sample(4)
    buf.add_data(_chunk(1, 2, 0))
    assert buf.can_sample(2) and not buf.can_sample(3)
    batch = buf.sample(8)  # more than stored: with replacement; 2 sampleable rows of 12
    assert batch["obs"].shape == (8, 1) and batch["obs"].eq(0).all()
    # uniform sampling leaves the importance weights out (all 1)
    assert set(batch) == {"obs", "actions", "rewards", "next_obs", "discounts", "indices"}


def test_frames_keep_their_dtype_and_the_buffer_is_mostly_frames():
    buf = ReplayBuffer(capacity=1000, sampler=PrioritizedSampler())
    obs = torch.randint(0, 255, (3, 2, 84, 84, 4), dtype=torch.uint8)
    buf.add_data({"obs": obs, "actions": torch.zeros(2, 2, dtype=torch.long), "rewards": torch.ones(2, 2),
                  "terminated": torch.zeros(2, 2, dtype=torch.bool), "truncated": torch.zeros(2, 2, dtype=torch.bool),
                  "valid": torch.ones(2, 2, dtype=torch.bool)})
    batch = buf.sample(16)
    assert batch["obs"].dtype == torch.uint8 and batch["obs"].shape == (16, 84, 84, 4)
    assert buf.obs_nbytes == 1000 * 84 * 84 * 4 and buf.nbytes / buf.obs_nbytes < 1.01
