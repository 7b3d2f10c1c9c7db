"""Hindsight Experience Replay: the bit-flipping env, relabelled goals against a reference built
from the whole history (strategy, episode bounds, rewards, terminations, fraction), exact resume
of a relabelling buffer, the config's one-line refusals, and DQN + HER learning a bit-flipping task."""

from __future__ import annotations

import copy
import csv
import functools
import io
import json
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np
import pytest
import torch

from pytorchrl.agent.algorithms import ALGORITHMS
from pytorchrl.agent.algorithms.families import hindsight_relabeller
from pytorchrl.agent.storages.off_policy import HindsightRelabeller, PrioritizedSampler, ReplayBuffer, UniformSampler
from pytorchrl.cli import main
from pytorchrl.config import from_dict, load_config
from pytorchrl.config_applicability import inapplicable_keys
from pytorchrl.envs.bit_flipping import BitFlippingEnv
from pytorchrl.utils.errors import ConfigError, InputError
from pytorchrl.utils.spaces import dict_slices, pack_dict
from tests.conftest import CONFIGS

#: the registry's replay algorithms, in its order (what the message lists)
REPLAY_ALGORITHMS = ", ".join(name for name, cls in ALGORITHMS.items() if cls.config_class.replay)

GOAL_SPACE = BitFlippingEnv(n_bits=2).observation_space
assert isinstance(GOAL_SPACE, gym.spaces.Dict)
SLICES = dict_slices(GOAL_SPACE)  # achieved_goal [0:2], desired_goal [2:4], observation [4:6]
GAMMA = 0.9


# ------------------------------------------------------------------------------------ the env


@pytest.mark.timeout(10)
def test_bit_flipping_spaces_rewards_and_termination():
    env = gym.make("pytorchrl/BitFlipping-v0", n_bits=5)
    space = env.observation_space
    assert isinstance(space, gym.spaces.Dict) and set(space.spaces) == {"observation", "achieved_goal", "desired_goal"}
    assert all(s == gym.spaces.Box(0.0, 1.0, (5,), np.float32) for s in space.spaces.values())
    assert env.action_space == gym.spaces.Discrete(5)
    obs, info = env.reset(seed=3)
    again, _ = env.reset(seed=3)
    assert all(np.array_equal(obs[k], again[k]) for k in obs)  # seeded through reset
    assert np.array_equal(obs["observation"], obs["achieved_goal"]) and info["is_success"] == np.array_equal(obs["achieved_goal"], obs["desired_goal"])
    for bit in np.flatnonzero(obs["achieved_goal"] != obs["desired_goal"]):  # the shortest way to the goal
        obs, reward, terminated, truncated, info = env.step(int(bit))
    assert (reward, terminated, truncated, info["is_success"]) == (0.0, True, False, True)
    assert np.array_equal(obs["achieved_goal"], obs["desired_goal"])


@pytest.mark.timeout(10)
def test_bit_flipping_truncates_after_n_bits_steps_and_flips_continuous_actions():
    env = BitFlippingEnv(n_bits=4, continuous=True)
    assert env.action_space == gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    obs, _ = env.reset(seed=0)
    env.goal = 1.0 - obs["achieved_goal"]  # four flips away: never reached by flipping bit 0 alone
    before = obs["achieved_goal"]
    obs, *_ = env.step(np.array([0.5, -0.5, 0.0, 1.0]))  # bits 0 and 3 (> 0), not 2 (= 0)
    assert np.array_equal(obs["achieved_goal"], np.where([True, False, False, True], 1 - before, before))
    results = [env.step(np.array([1.0, -1, -1, -1]))[1:4] for _ in range(3)]
    assert results == [(-1.0, False, False), (-1.0, False, False), (-1.0, False, True)]


@pytest.mark.timeout(10)
def test_bit_flipping_goal_functions_are_vectorised():
    achieved = np.array([[[0, 1, 1], [1, 1, 1]], [[0, 0, 0], [1, 0, 1]]], dtype=np.float32)  # [2, 2, 3]
    desired = np.array([[0, 1, 1], [1, 0, 1]], dtype=np.float32)  # broadcast over the first axis
    expected = np.array([[0.0, -1.0], [-1.0, 0.0]], dtype=np.float32)
    np.testing.assert_array_equal(BitFlippingEnv.compute_reward(achieved, desired, None), expected)
    np.testing.assert_array_equal(BitFlippingEnv.compute_terminated(achieved, desired, None), expected == 0)
    assert BitFlippingEnv.compute_reward(achieved[0, 0], desired[0], {}) == 0.0  # one goal: a scalar


@pytest.mark.timeout(10)
def test_episode_outcomes_carry_is_success_where_the_env_reports_it():
    """Success is 'ended on its goal': the last reward 0, the return one above minus the length."""
    from pytorchrl.envs.vec_env import VecEnv

    envs = VecEnv("pytorchrl/BitFlipping-v0", num_envs=3, seed=0, env_kwargs={"n_bits": 2})
    envs.reset()
    for _ in range(40):
        envs.step(torch.randint(2, (3,)))
    outcomes = envs.pop_episode_outcomes()
    assert {success for *_, success in outcomes} == {True, False}
    assert all(success == (ret == 1 - length) for _, ret, length, success in outcomes)
    cartpole = VecEnv("CartPole-v1", num_envs=2, seed=0)
    cartpole.reset()
    for _ in range(60):
        cartpole.step(torch.zeros(2, dtype=torch.long))
    outcomes = cartpole.pop_episode_outcomes()
    assert outcomes and all(success is None for *_, success in outcomes)  # CartPole reports no success


# ------------------------------------------------------------------------- a reference history


@dataclass
class History:
    """What a buffer was given, per env: each transition's observation code, next observation
    code, flags and episode; observation codes are unique, so a sampled row names its transition."""

    transitions: dict[int, tuple[int, bool, bool, bool, int]] = field(default_factory=dict)  # code -> (next, valid, term, trunc, episode)
    chain: dict[int, list[int]] = field(default_factory=dict)  # env -> its observation codes in order
    done: dict[int, bool] = field(default_factory=dict)  # env -> its last transition ended an episode
    episode: dict[int, int] = field(default_factory=dict)  # env -> the episode of its newest observation
    next_chunk: dict[int, int] = field(default_factory=dict)  # stream -> its next chunk index

    def goals(self, code: int, strategy: str) -> set[int]:
        """The observation codes whose achieved goal may replace ``code``'s goal."""
        chain = self.chain[code // 1000]  # env e's codes count up from 1000 * e
        i = code - chain[0]

        def ends(j: int) -> bool:  # transition j is its episode's last one so far
            _, _, term, trunc, _ = self.transitions[chain[j]]
            nxt = chain[j + 1]
            return term or trunc or nxt not in self.transitions or not self.transitions[nxt][1]

        end = i
        while not ends(end):
            end += 1
        start = i
        while start > 0 and self.transitions[chain[start - 1]][1] and not ends(start - 1):
            start -= 1
        first = {"future": i, "final": end, "episode": start}[strategy]
        return {chain[j + 1] for j in range(first, end + 1)}


def _obs_rows(codes: np.ndarray, episodes: np.ndarray) -> np.ndarray:
    """Packed goal-env rows: achieved_goal (code, 0), desired_goal (-1 - episode, 0), observation = achieved."""
    achieved = np.stack([codes, np.zeros_like(codes)], axis=-1).astype(np.float32)
    desired = np.stack([-1.0 - episodes, np.zeros_like(episodes)], axis=-1).astype(np.float32)
    obs = {"achieved_goal": achieved.reshape(-1, 2), "desired_goal": desired.reshape(-1, 2), "observation": achieved.reshape(-1, 2)}
    return pack_dict(GOAL_SPACE, obs, achieved.size // 2).reshape(*codes.shape, 6)


def _fill(buffer: ReplayBuffer, h: History, *, seed: int, chunks: int, num_steps: int = 5, envs: tuple[int, ...] = (0, 1), stream: int = 7) -> History:
    """Add ``chunks`` continuing chunks of one stream (its ``envs``) with random episode ends
    (terminations, truncations, then next-step reset rows) to ``buffer``, recorded in ``h``."""
    rng = np.random.default_rng(seed)
    num_envs = len(envs)
    for e in envs:
        h.chain.setdefault(e, [1000 * e])
        h.done.setdefault(e, False)
        h.episode.setdefault(e, 100 * e)
    for _ in range(chunks):
        codes, episodes = np.zeros((num_steps + 1, num_envs)), np.zeros((num_steps + 1, num_envs))
        term, trunc, valid = (np.zeros((num_steps, num_envs), bool) for _ in range(3))
        for column, e in enumerate(envs):
            codes[0, column], episodes[0, column] = h.chain[e][-1], h.episode[e]
            for t in range(num_steps):
                code, episode = h.chain[e][-1], h.episode[e]
                if h.done[e]:  # the reset step: no transition, a new episode's first observation
                    h.done[e], h.episode[e] = False, h.episode[e] + 1
                else:
                    valid[t, column] = True
                    r = rng.random()
                    term[t, column], trunc[t, column] = r < 0.15, 0.15 <= r < 0.25
                    h.done[e] = bool(term[t, column] or trunc[t, column])
                h.transitions[code] = (code + 1, bool(valid[t, column]), bool(term[t, column]), bool(trunc[t, column]), episode)
                h.chain[e].append(code + 1)
                codes[t + 1, column], episodes[t + 1, column] = code + 1, h.episode[e]
        buffer.add_data({
            "obs": torch.from_numpy(_obs_rows(codes, episodes)), "actions": torch.zeros(num_steps, num_envs, dtype=torch.long),
            "rewards": torch.full((num_steps, num_envs), -1.0), "terminated": torch.from_numpy(term), "truncated": torch.from_numpy(trunc),
            "valid": torch.from_numpy(valid), "stream_id": torch.tensor(stream), "chunk_index": torch.tensor(h.next_chunk.get(stream, 0)),
        })
        h.next_chunk[stream] = h.next_chunk.get(stream, 0) + 1
    return h


def _relabeller(strategy: str, k: int = 4) -> HindsightRelabeller:
    return HindsightRelabeller(
        strategy=strategy, k=k, achieved=SLICES["achieved_goal"], desired=SLICES["desired_goal"], make_env=functools.partial(BitFlippingEnv, n_bits=2)
    )


def _buffer(strategy: str, k: int = 4, *, capacity: int = 10_000, sampler=None) -> ReplayBuffer:
    return ReplayBuffer(capacity=capacity, gamma=GAMMA, sampler=sampler, relabeller=_relabeller(strategy, k))


# ----------------------------------------------------------------------------- relabelled goals


@pytest.mark.timeout(10)
@pytest.mark.parametrize("strategy", ["future", "final", "episode"])
@pytest.mark.parametrize("sampler", [UniformSampler(), PrioritizedSampler()], ids=["uniform", "prioritized"])
def test_relabelled_goals_come_from_the_same_episode_by_strategy(strategy, sampler):
    """Every relabelled goal is the achieved goal of a next observation the strategy allows (never
    across a termination, a truncation, a reset row or pending rows); every allowed one is drawn;
    rewards and discounts are the env's compute_reward / compute_terminated, worked by hand."""
    buffer = _buffer(strategy, sampler=sampler)
    history = _fill(buffer, History(), seed=1, chunks=12)
    batch = buffer.sample(12_000, generator=torch.Generator().manual_seed(0))
    obs, next_obs = batch["obs"].numpy(), batch["next_obs"].numpy()
    codes, goals = obs[:, 0].astype(int), obs[:, 2].astype(int)
    relabelled = goals >= 0  # real goals are negative codes
    assert np.array_equal(next_obs[:, 2:4], obs[:, 2:4])  # the goal is replaced in obs and next_obs alike
    seen: dict[int, set[int]] = {}
    allowed = {code: history.goals(code, strategy) for code in set(codes[relabelled].tolist())}
    for code, goal, nxt, reward, discount, again in zip(codes, goals, next_obs[:, 0], batch["rewards"].tolist(), batch["discounts"].tolist(), relabelled):
        expected_next, valid, term, _, episode = history.transitions[code]
        assert valid and nxt == expected_next
        if not again:
            assert goal == -1 - episode and reward == -1.0 and discount == (0.0 if term else pytest.approx(GAMMA))
            continue
        assert goal in allowed[code], (code, goal, strategy)
        seen.setdefault(code, set()).add(goal)
        reached = goal == nxt
        assert reward == (0.0 if reached else -1.0)  # bit flipping: 0 when the goals match, else -1
        assert discount == (0.0 if reached else pytest.approx(GAMMA))  # compute_terminated, not the stored flag
    counts = dict(zip(*np.unique(codes[relabelled], return_counts=True)))
    often = [code for code in seen if counts[code] >= 60]
    assert len(often) > 20
    for code in often:  # at least 60 draws of at most a few goals each: all of them appear
        assert seen[code] == allowed[code], code


@pytest.mark.timeout(10)
@pytest.mark.parametrize("k", [1, 4])
def test_the_relabelled_fraction_is_k_over_k_plus_one(k):
    buffer = _buffer("future", k)
    _fill(buffer, History(), seed=2, chunks=6)
    batch = buffer.sample(20_000, generator=torch.Generator().manual_seed(1))
    fraction = float((batch["obs"][:, 2] >= 0).float().mean())
    assert fraction == pytest.approx(k / (k + 1), abs=0.015)


@pytest.mark.timeout(10)
def test_final_goals_are_the_last_achieved_goal_of_an_ended_episode():
    """A hand-built stream: an episode that terminates, a reset row, an episode cut by pending rows."""
    buffer = _buffer("final", k=1_000)
    # one env: A0 A1 A2 (terminates into) A3 | reset row | B0 B1 (pending)
    codes = np.array([[0], [1], [2], [3], [10], [11]], dtype=float)
    episodes = np.array([[0], [0], [0], [0], [1], [1]], dtype=float)
    buffer.add_data({
        "obs": torch.from_numpy(_obs_rows(codes, episodes)), "actions": torch.zeros(5, 1, dtype=torch.long), "rewards": torch.full((5, 1), -1.0),
        "terminated": torch.tensor([[False], [False], [True], [False], [False]]), "truncated": torch.zeros(5, 1, dtype=torch.bool),
        "valid": torch.tensor([[True], [True], [True], [False], [True]]),
    })
    batch = buffer.sample(2_000, generator=torch.Generator().manual_seed(2))
    pairs = {(int(o), int(g)) for o, g in zip(batch["obs"][:, 0].tolist(), batch["obs"][:, 2].tolist()) if g >= 0}
    assert pairs == {(0, 3), (1, 3), (2, 3), (10, 11)}


@pytest.mark.timeout(10)
@pytest.mark.parametrize(("strategy", "expected"), [
    ("future", {(0, 1), (0, 2), (1, 2), (2, 11), (2, 12), (11, 12)}),
    ("final", {(0, 2), (1, 2), (2, 12), (11, 12)}),
    ("episode", {(0, 1), (0, 2), (1, 1), (1, 2), (2, 11), (2, 12), (11, 11), (11, 12)}),
])
def test_an_episode_end_without_a_reset_row_still_bounds_the_goals(strategy, expected):
    """Data without next-step autoreset's reset row (A0 A1 -terminated-> A2, then A2 -> B1 -> B2 at
    once): the termination alone ends the episode, forward and backward."""
    buffer = _buffer(strategy, k=1_000)
    codes, episodes = np.array([[0], [1], [2], [11], [12]], dtype=float), np.zeros((5, 1))
    buffer.add_data({
        "obs": torch.from_numpy(_obs_rows(codes, episodes)), "actions": torch.zeros(4, 1, dtype=torch.long), "rewards": torch.full((4, 1), -1.0),
        "terminated": torch.tensor([[False], [True], [False], [False]]), "truncated": torch.zeros(4, 1, dtype=torch.bool),
        "valid": torch.ones(4, 1, dtype=torch.bool),
    })
    batch = buffer.sample(4_000, generator=torch.Generator().manual_seed(4))
    pairs = {(int(o), int(g)) for o, g in zip(batch["obs"][:, 0].tolist(), batch["obs"][:, 2].tolist()) if g >= 0}
    assert pairs == expected


@pytest.mark.timeout(10)
@pytest.mark.parametrize("strategy", ["future", "episode"])
def test_a_wrapped_ring_relabels_within_live_episodes(strategy):
    """Capacity 29 over two streams' interleaved chunks (2 envs x 5 steps each): episodes lose
    their first rows to the ring, whose rows then hold the other stream's transitions; goals
    still come from the same episode, from rows that are still stored (sampled after every chunk)."""
    buffer = _buffer(strategy, capacity=29)
    history = History()
    for chunk in range(16):
        _fill(buffer, history, seed=chunk, chunks=1, envs=(0, 1) if chunk % 2 else (2, 3), stream=chunk % 2)
        live = set(buffer._arrays["obs"][: buffer.size, 0].astype(int).tolist())
        batch = buffer.sample(500, generator=torch.Generator().manual_seed(chunk))
        for code, goal in zip(batch["obs"][:, 0].int().tolist(), batch["obs"][:, 2].tolist()):
            if goal >= 0:
                assert int(goal) in history.goals(code, strategy) and int(goal) in live


@pytest.mark.timeout(10)
@pytest.mark.parametrize("strategy", ["future", "final", "episode"])
def test_a_restored_buffer_relabels_the_same_batches(strategy):
    """A checkpoint round trip (through bytes) gives identical samples, before and after more data."""
    original = _buffer(strategy, capacity=37, sampler=PrioritizedSampler())
    history = _fill(original, History(), seed=4, chunks=9)
    raw = io.BytesIO()
    torch.save(original.state_dict(), raw)
    raw.seek(0)
    restored = _buffer(strategy, capacity=37, sampler=PrioritizedSampler())
    restored.load_state_dict(torch.load(raw, weights_only=True))
    for more in (0, 3):
        if more:  # the same new chunks into both: the restored relabeller's rebuilt index must follow them
            _fill(restored, copy.deepcopy(history), seed=5, chunks=more)
            _fill(original, history, seed=5, chunks=more)
        a = original.sample(512, generator=torch.Generator().manual_seed(more))
        b = restored.sample(512, generator=torch.Generator().manual_seed(more))
        assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)
        assert (a["obs"][:, 2] >= 0).any()


@pytest.mark.timeout(10)
def test_the_global_generator_drives_relabelling():
    """Training samples with torch's global generator (saved in checkpoints): the same state, the same batch."""
    buffer = _buffer("future")
    _fill(buffer, History(), seed=6, chunks=4)
    torch.manual_seed(11)
    a = buffer.sample(256)
    torch.manual_seed(11)
    b = buffer.sample(256)
    assert all(torch.equal(a[key], b[key]) for key in a)


# ------------------------------------------------------------------------------------ bad input

DQN_BITS = {"env": {"env_id": "pytorchrl/BitFlipping-v0"}, "algorithm": {"name": "dqn"}, "storage": {"her": {"strategy": "future"}}}


def _with(*, algorithm: dict | None = None, storage: dict | None = None, her: dict | None = None, actor: dict | None = None) -> dict:
    """:data:`DQN_BITS` with sections replaced (``her`` merged into ``storage.her``)."""
    return {
        "env": DQN_BITS["env"], "algorithm": algorithm or DQN_BITS["algorithm"], "actor": actor or {},
        "storage": {**(storage or {}), "her": {**DQN_BITS["storage"]["her"], **(her or {})}},
    }


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (_with(algorithm={"name": "ppo"}),
         "config key 'storage.her.strategy' = 'future' relabels replayed transitions: algorithm 'ppo' keeps no replay buffer; these do: " + REPLAY_ALGORITHMS),
        (_with(algorithm={"name": "dqn", "n_step": 3}),
         "config key 'storage.her.strategy' = 'future' needs 1-step returns: algorithm.n_step is 3; set algorithm.n_step=1 or storage.her.strategy=none"),
        (_with(algorithm={"name": "dqn", "rainbow": True}),
         "config key 'storage.her.strategy' = 'future' needs 1-step returns: algorithm.n_step is 3 (algorithm.rainbow raises it to 3); "
         "set algorithm.n_step=1 or storage.her.strategy=none"),
        (_with(algorithm={"name": "sac"}, actor={"recurrent": {"type": "gru"}}, storage={"sequence_length": 8}, her={"strategy": "final"}),
         "config key 'storage.her.strategy' = 'final' relabels single transitions: it does not take a recurrent core (actor.recurrent.type = 'gru'); "
         "set actor.recurrent.type=none or storage.her.strategy=none"),
        ({**_with(), "env": {**DQN_BITS["env"], "normalize_reward": True}},
         "config key 'storage.her.strategy' = 'future' recomputes a relabelled transition's reward with the env's compute_reward, unscaled: "
         "it does not take env.normalize_reward = true (the replayed rewards would mix two scales); set env.normalize_reward=false"),
        (_with(her={"k": 0}), "config key 'storage.her.k' = 0 is out of range: must be >= 1"),
        (_with(her={"strategy": "past"}), "config key 'storage.her.strategy' = 'past' is not allowed; allowed: 'none', 'future', 'final', 'episode'"),
    ],
    ids=["on_policy", "n_step", "rainbow", "recurrent", "normalize_reward", "k", "strategy"],
)
def test_bad_her_configs_are_one_line(raw, message):
    with pytest.raises(ConfigError) as info:
        from_dict(raw)
    assert str(info.value) == message


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("env_id", "space", "message"),
    [
        ("tests.envs_for_tests:DictTargetEnv", gym.spaces.Dict({"noise": gym.spaces.Box(-1, 1, (2,)), "target": gym.spaces.Discrete(4)}),
         "config key 'storage.her.strategy' = 'future' needs a goal env, and env.env_id = 'tests.envs_for_tests:DictTargetEnv' is not one: its Dict observation has no "
         "'observation', 'achieved_goal', 'desired_goal' (it has 'noise', 'target')"),
        ("CartPole-v1", gym.spaces.Box(-1, 1, (4,)),
         "config key 'storage.her.strategy' = 'future' needs a goal env, and env.env_id = 'CartPole-v1' is not one: its observation space is Box(-1.0, 1.0, (4,), float32), "
         "not a Dict with keys observation, achieved_goal, desired_goal"),
    ],
)
def test_her_on_an_env_without_goals_is_one_line(env_id, space, message):
    config = from_dict({**DQN_BITS, "env": {"env_id": env_id}})
    with pytest.raises(InputError) as info:
        hindsight_relabeller(config, space)
    assert str(info.value) == message


@pytest.mark.timeout(30)
def test_the_cli_refuses_her_on_cartpole_with_exit_2(tmp_path, capsys):
    code = main(["train", str(CONFIGS / "dqn" / "cartpole.yaml"), "storage.her.strategy=future", "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "needs a goal env, and env.env_id = 'CartPole-v1' is not one: its observation space is Box(" in err


@pytest.mark.timeout(10)
def test_k_without_relabelling_does_not_apply():
    config = from_dict({"algorithm": {"name": "dqn"}, "storage": {"her": {"k": 8}}})
    assert inapplicable_keys(config, GOAL_SPACE) == [(["storage.her.k"], "storage.her.strategy is 'none'")]
    assert inapplicable_keys(from_dict(DQN_BITS), GOAL_SPACE) == []


@pytest.mark.timeout(10)
def test_a_relabelling_buffer_refuses_n_step_returns():
    with pytest.raises(ValueError, match="hindsight relabelling needs n_step = 1"):
        ReplayBuffer(capacity=8, n_step=3, relabeller=_relabeller("future"))


# ------------------------------------------------------------------------------------ learning


@pytest.mark.learning
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("algo", "n_bits", "budget"), [("dqn", 7, 8000), ("sac", 10, 10000)])
def test_her_flips_bits_to_their_goal(tmp_path, algo, n_bits, budget):
    """DQN + HER ('future', k = 4) on 7 bits reaches a 0.9 success rate within 8k env steps;
    discrete SAC + HER with configs/sac/her_bitflip.yaml's settings on 10 bits within 10k (7k,
    seeds 0 and 1; 15 s)."""
    from pytorchrl.learner import Learner

    cfg = load_config(CONFIGS / algo / "her_bitflip.yaml", [
        f"env.env_kwargs={{n_bits: {n_bits}}}", f"run.target_steps={budget}", "run.eval_every=1000", "run.log_every=1000", "storage.capacity=20000",
        "run.eval_episodes=30", "run.checkpoint_every=0",
    ])
    learner = Learner.from_config(cfg, run_dir=tmp_path / "run", progress=False)
    try:
        summary = learner.train()
    finally:
        learner.close()
    assert summary["final_eval_success_rate"] >= 0.9, summary
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["final_eval_success_rate"] == summary["final_eval_success_rate"]
    with open(tmp_path / "run" / "progress.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert float(rows[-1]["eval_success_rate"]) == summary["final_eval_success_rate"]
    assert rows[0]["eval_success_rate"] != "" and float(rows[0]["eval_success_rate"]) < 0.9  # learnt, not there from the start


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize(("algorithm", "continuous"), [("sac", False), ("td3", True)])
def test_sac_and_td3_train_on_relabelled_batches(algorithm, continuous):
    """Discrete SAC on Discrete bit flips and TD3 on the Box variant run end to end with HER; their
    batches' rewards are compute_reward of their (relabelled) goals, met far more often than the env's own."""
    from pytorchrl.learner import Learner

    config = from_dict({
        "env": {"env_id": "pytorchrl/BitFlipping-v0", "env_kwargs": {"n_bits": 4, "continuous": continuous}, "num_envs": 2, "num_test_envs": 2},
        "actor": {"hidden_sizes": [16]}, "storage": {"capacity": 1000, "her": {"strategy": "future"}},
        "algorithm": {"name": algorithm, "minibatch_size": 32, "update_every": 8, "start_steps": 64},
        "run": {"target_steps": 256, "eval_every": 0, "log_every": 256, "eval_episodes": 2},
    })
    learner = Learner.from_config(config, progress=False)
    try:
        summary = learner.train()
        storage = learner.scheme.grad_workers.workers.local_worker.storage
        batch = storage.buffer.sample(256)
    finally:
        learner.close()
    assert summary["env_steps"] == 256 and summary["updates"] > 0 and summary["final_eval_success_rate"] is not None
    assert storage.buffer.relabeller is not None and torch.equal(batch["obs"][:, 4:8], batch["next_obs"][:, 4:8])
    achieved, desired = batch["next_obs"][:, 0:4].numpy(), batch["next_obs"][:, 4:8].numpy()
    np.testing.assert_array_equal(batch["rewards"].numpy(), BitFlippingEnv.compute_reward(achieved, desired, None))
    assert (batch["rewards"] == 0).float().mean() > 0.25  # about half; without HER 0.04-0.06 (the env's own goals)

