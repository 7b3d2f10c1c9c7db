"""PPO from demonstrations (PPOD): the mixing of demonstrations, the agent's best episodes and
the policy at episode starts; replays that reproduce the recorded episodes; the buffer of best
episodes; demonstration files refused in one line; ``evaluate --save-demos``; exact state."""

from __future__ import annotations

import copy
import io
import json
import warnings
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from pytorchrl.agent.storages.on_policy.demos import (
    AGENT,
    DEMO,
    POLICY,
    DemoReplay,
    DemoSpec,
    Episode,
    ReplayingPolicy,
    load_demo,
    load_demos,
    save_demo,
)
from pytorchrl.cli import main
from pytorchrl.config import ConfigError, from_dict
from pytorchrl.envs.chain import write_chain_demos
from pytorchrl.learner import Learner
from pytorchrl.scheme.inference import InferenceServer, RemotePolicy, direct_call

LENGTH = 8
#: a PPOD run on an 8-cell chain: small enough to build in a fraction of a second
TINY = {
    "env": {"env_id": "pytorchrl/Chain-v0", "env_kwargs": {"length": LENGTH}, "max_episode_steps": 16, "num_envs": 4, "num_test_envs": 1},
    "actor": {"hidden_sizes": [16]},
    "storage": {"num_steps": 32},
    "algorithm": {"name": "ppo", "num_epochs": 1, "minibatch_size": 64, "demos": {"enabled": True, "rho": 1.0, "phi": 0.0}},
    "run": {"target_steps": 256, "log_every": 128, "eval_every": 256, "eval_episodes": 1, "checkpoint_every": 256, "stop_at_return": None},
}


def _spec(path: str = "", rho: float = 0.1, phi: float = 0.3, buffer_size: int = 10, min_return: float | None = None) -> DemoSpec:
    return DemoSpec(
        path=path, rho=rho, phi=phi, buffer_size=buffer_size, min_return=min_return, env_id="pytorchrl/Chain-v0",
        obs_shape=(LENGTH,), obs_dtype="float32", action_shape=(), discrete=True, num_actions=2,
    )


def _episode(ret: float, obs0: np.ndarray | None = None, steps: int = 3, name: str = "") -> Episode:
    obs0 = np.eye(LENGTH, dtype=np.float32)[0] if obs0 is None else obs0
    rewards = np.zeros(steps, dtype=np.float32)
    rewards[-1] = ret
    return Episode(obs0, np.zeros(steps, dtype=np.int64), rewards, name, obs=np.repeat(obs0[None], steps + 1, 0))


def _config(tmp_path: Path, **demos) -> dict:
    demo_dir = tmp_path / "demos"
    if not demo_dir.exists():
        write_chain_demos(demo_dir, 3, length=LENGTH, max_episode_steps=16)
    return {**TINY, "algorithm": {**TINY["algorithm"], "demos": {**TINY["algorithm"]["demos"], "path": str(demo_dir), **demos}}}


@pytest.mark.timeout(10)
def test_episode_starts_replay_demonstrations_at_rho_the_agents_best_at_phi_and_the_policy_otherwise():
    """Over 20,000 seeded episode starts, the shares of each mode are rho, phi and the rest (+-
    0.015); before the agent has an episode of its own, phi's share is the policy's."""
    n = 100
    obs = torch.from_numpy(np.tile(np.eye(LENGTH, dtype=np.float32)[0], (n, 1)))
    actions = torch.zeros(n, dtype=torch.long)
    torch.manual_seed(0)
    replay = DemoReplay(_spec(rho=0.2, phi=0.3), n, demos=[_episode(1.0)])
    for _ in range(100):
        replay.restart()
        replay.force(obs, actions)
    assert replay.started[AGENT] == 0 and replay.started[DEMO] / 10_000 == pytest.approx(0.2, abs=0.015)
    replay.best = [_episode(2.0)]
    replay.started = [0, 0, 0]
    for _ in range(200):
        replay.restart()
        replay.force(obs, actions)
    shares = np.array(replay.started) / 20_000
    np.testing.assert_allclose(shares[[DEMO, AGENT, POLICY]], [0.2, 0.3, 0.5], atol=0.015)


@pytest.mark.timeout(10)
def test_only_episodes_that_start_where_the_env_starts_are_replayed():
    other = np.eye(LENGTH, dtype=np.float32)[3]
    replay = DemoReplay(_spec(rho=1.0, phi=0.0), 2, demos=[_episode(1.0, obs0=other)])
    obs = torch.from_numpy(np.stack([np.eye(LENGTH, dtype=np.float32)[0], other]))
    actions = torch.full((2,), 1, dtype=torch.long)
    forced = replay.force(obs, actions)
    assert forced is not None and forced.tolist() == [False, True]
    assert replay.mode.tolist() == [POLICY, DEMO] and actions.tolist() == [1, 0]


@pytest.mark.timeout(10)
def test_demonstrations_that_never_start_where_the_env_starts_are_warned_of_once():
    """An env with random starts (CartPole, Pendulum) never repeats a demonstration's first
    observation, so nothing is replayed: a warning says so once, not silence; one that matches
    now and then is not warned of."""
    other = np.eye(LENGTH, dtype=np.float32)[3]
    obs = torch.from_numpy(np.tile(np.eye(LENGTH, dtype=np.float32)[0], (4, 1)))
    actions = torch.zeros(4, dtype=torch.long)
    replay = DemoReplay(_spec(rho=1.0, phi=0.0), 4, demos=[_episode(1.0, obs0=other)])
    with pytest.warns(UserWarning, match=r"none of the 1 demonstrations .* starts at the observations pytorchrl/Chain-v0") as warned:
        for _ in range(20):
            replay.restart()
            replay.force(obs, actions)
    assert len(warned) == 1 and replay.started[DEMO] == 0 and replay.unmatched == 80
    matching = DemoReplay(_spec(rho=1.0, phi=0.0), 4, demos=[_episode(1.0, obs0=other), _episode(1.0)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(20):
            matching.restart()
            matching.force(obs, actions)
    assert matching.started[DEMO] == 80


@pytest.mark.timeout(10)
def test_the_best_episode_buffer_keeps_the_top_returns_once_each_above_the_least_return():
    replay = DemoReplay(_spec(buffer_size=3, min_return=0.4), 1, demos=[_episode(1.0)])
    for ret in (0.5, 2.0, 1.0, 0.3, 3.0, 0.1, 2.0, 1.5):
        replay._offer(_episode(ret))
    assert [e.ret for e in replay.best] == [3.0, 2.0, 1.5]  # 2.0 twice: the same episode, kept once
    default = DemoReplay(_spec(buffer_size=3), 1, demos=[_episode(1.0), _episode(0.6)])
    default._offer(_episode(0.5))
    default._offer(_episode(0.7))
    assert [e.ret for e in default.best] == [pytest.approx(0.7)]  # null min_return: the demonstrations' lowest (0.6)


@pytest.mark.timeout(20)
def test_a_replayed_demonstration_reproduces_its_recorded_observations_and_rewards(tmp_path):
    """rho 1: every env of a worker replays a demonstration from its first step; the rollout's
    actions, observations and rewards are the recorded ones, and their log-probabilities the
    acting policy's of those actions."""
    learner = Learner.from_config(from_dict(_config(tmp_path)), progress=False)
    try:
        worker = learner.scheme.collection_workers.local_worker
        data, _ = worker.collect_data()
        replay = worker.storage.demo_replay
        demos = {d.name: d for d in load_demos(replay.spec)}
        assert replay.started[DEMO] >= 4 and replay.diverged == 0
        for i in range(4):
            length = next(len(d.actions) for d in demos.values() if torch.equal(data["actions"][: len(d.actions), i], torch.from_numpy(d.actions)))
            demo = next(d for d in demos.values() if len(d.actions) == length)
            np.testing.assert_array_equal(data["obs"][: length + 1, i].numpy(), demo.obs)
            np.testing.assert_array_equal(data["rewards"][:length, i].numpy(), demo.rewards)
            assert bool(data["terminated"][length - 1, i]) and not bool(data["valid"][length, i])
        log_prob, _ = worker.policy.score(data["obs"][:-1].flatten(0, 1), data["actions"].flatten(0, 1))
        torch.testing.assert_close(data["log_probs"].flatten(), log_prob)
    finally:
        learner.close()


@pytest.mark.timeout(10)
def test_a_recurrent_policy_replays_demonstrations_and_scores_the_replayed_actions_while_acting(tmp_path):
    """A GRU policy is given the replayed actions (it once crashed there: its recurrent step
    always scored) and scores them in its acting pass: the rollout's log-probabilities are the
    policy's of the actions taken, replayed or not, as scoring the whole sequence gives them."""
    config = _config(tmp_path)
    config["actor"] = {**config["actor"], "recurrent": {"type": "gru", "hidden_size": 16}}
    learner = Learner.from_config(from_dict(config), progress=False)
    try:
        worker = learner.scheme.collection_workers.local_worker
        data, _ = worker.collect_data()
        assert worker.storage.demo_replay.started[DEMO] >= 4
        log_prob, _ = worker.policy.score_sequence(data["obs"][:-1], data["actions"], data["states"][0], data["starts"][:-1])
        torch.testing.assert_close(data["log_probs"].flatten(), log_prob)
        learner.step()  # and it learns from them
    finally:
        learner.close()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("recurrent", [False, True], ids=["mlp", "gru"])
def test_replayed_actions_are_scored_by_the_weights_that_acted_while_a_servers_weights_change(tmp_path, recurrent):
    """Asynchronous central inference: the server's weights change between a worker's steps (here
    after every one). Each replayed step's log-probability is that of the weights that acted on
    it, scored in the act's pass; it was scored by a second call, or for a recurrent policy after
    the rollout, with whatever weights the server held by then."""
    config = _config(tmp_path)  # rho 1: every env replays a demonstration
    if recurrent:
        config["actor"] = {**config["actor"], "recurrent": {"type": "gru", "hidden_size": 16}}
    learner = Learner.from_config(from_dict(config), progress=False)
    server = None
    try:
        worker = learner.scheme.collection_workers.local_worker
        local = worker.policy.inner
        generator = torch.Generator().manual_seed(0)
        weights = [local.get_weights()]
        weights.append({k: v + torch.randn(v.shape, generator=generator) if v.is_floating_point() else v for k, v in weights[0].items()})
        server = InferenceServer(lambda device: copy.deepcopy(local.actor), score_while_acting=True)
        server.set_weights(weights[0], 0)
        acts = 0

        def call(name: str, *args: Any) -> Any:
            nonlocal acts
            reply = direct_call(server)(name, *args)
            if name == "act":  # another worker's gradient lands after each step
                acts += 1
                server.set_weights(weights[acts % 2], acts)
            return reply

        worker.policy = ReplayingPolicy(RemotePolicy(call, 0), worker.policy.replay)
        data, _ = worker.collect_data()
        assert worker.storage.demo_replay.started[DEMO] >= 4 and acts == TINY["storage"]["num_steps"]
        state = data["states"][0] if recurrent else None
        for t in range(acts):  # step t acted with weights[t % 2] (a recurrent one from the state they carried it to)
            local.set_weights(weights[t % 2], t)
            if recurrent:
                log_prob, _ = local.score_sequence(data["obs"][t : t + 1], data["actions"][t : t + 1], state, data["starts"][t : t + 1])
                _, _, state = local.actor.get_action(data["obs"][t], state, data["starts"][t])
            else:
                log_prob, _ = local.score(data["obs"][t], data["actions"][t])
            torch.testing.assert_close(data["log_probs"][t], log_prob, msg=f"step {t}")
    finally:
        if server is not None:
            server.close()
        learner.close()


@pytest.mark.timeout(10)
def test_the_replay_state_round_trips_through_a_weights_only_checkpoint(tmp_path):
    """Mid-episode (a demonstration half replayed, an own episode half recorded, a best episode
    kept): saved with torch.save and loaded with weights_only=True, the replay goes on alike."""
    demo = _episode(1.0, steps=6, name="d.npz")
    obs0 = torch.from_numpy(np.tile(demo.obs0, (2, 1)))

    def run(replay: DemoReplay, steps: int) -> list:
        out = []
        for _ in range(steps):
            actions = torch.ones(2, dtype=torch.long)
            replay.force(obs0, actions)
            replay.observe(actions.numpy(), np.zeros(2, np.float32), np.zeros(2, bool), np.zeros(2, bool), np.ones(2, bool), obs0.numpy())
            out.append((actions.tolist(), replay.mode.tolist(), replay.pos.tolist()))
        return out

    torch.manual_seed(3)
    replay = DemoReplay(_spec(rho=0.5, phi=0.5), 2, demos=[demo])
    replay.best = [_episode(2.0, steps=6)]
    run(replay, 2)
    torch.save(replay.state_dict(), tmp_path / "s.pt")
    rng = torch.get_rng_state()
    expected = run(replay, 5)
    restored = DemoReplay(_spec(rho=0.5, phi=0.5), 2, demos=[demo])
    restored.load_state_dict(torch.load(tmp_path / "s.pt", weights_only=True))
    torch.set_rng_state(rng)
    assert run(restored, 5) == expected


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def _refused(tmp_path: Path, raw: dict, *overrides: str) -> str:
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(raw))
    code, _, err = _cli("train", str(config), "--quiet", "--run-dir", str(tmp_path / "run"), *overrides)
    lines = err.strip().splitlines()
    assert code == 2 and len([line for line in lines if line.startswith("pytorchrl: error:")]) == 1, err
    assert not (tmp_path / "run").exists()
    return lines[-1]


@pytest.mark.timeout(60)
def test_bad_demonstrations_are_refused_in_one_line(tmp_path):
    raw = _config(tmp_path)
    assert "does not exist" in _refused(tmp_path, raw, f"algorithm.demos.path={tmp_path / 'missing'}")
    (tmp_path / "empty").mkdir()
    assert "without demonstration files" in _refused(tmp_path, raw, f"algorithm.demos.path={tmp_path / 'empty'}")
    (tmp_path / "text.npz").write_text("not a demonstration\n")
    assert "is not a demonstration" in _refused(tmp_path, raw, f"algorithm.demos.path={tmp_path / 'text.npz'}")
    np.savez(tmp_path / "partial.npz", obs=np.zeros((3, LENGTH), np.float32))
    assert "no actions, rewards" in _refused(tmp_path, raw, f"algorithm.demos.path={tmp_path / 'partial.npz'}")
    line = _refused(tmp_path, raw, "env.env_kwargs={length: 6}", "env.max_episode_steps=12")
    assert "has observations of shape (8,); env 'pytorchrl/Chain-v0' has (6,)" in line and "demo_000.npz" in line
    save_demo(tmp_path / "cartpole.npz", obs=np.zeros((3, LENGTH), np.float32), actions=np.zeros(2, np.int64), rewards=np.zeros(2), env_id="CartPole-v1")
    assert "recorded on env 'CartPole-v1'" in _refused(tmp_path, raw, f"algorithm.demos.path={tmp_path / 'cartpole.npz'}")
    save_demo(tmp_path / "big.npz", obs=np.zeros((3, LENGTH), np.float32), actions=np.array([0, 5]), rewards=np.zeros(2), env_id="pytorchrl/Chain-v0")
    assert "actions from 0 to 5" in _refused(tmp_path, raw, f"algorithm.demos.path={tmp_path / 'big.npz'}")
    assert "needs algorithm.demos.path" in _refused(tmp_path, {**raw, "algorithm": {**raw["algorithm"], "demos": {"enabled": True}}})
    assert "add up to more than 1" in _refused(tmp_path, raw, "algorithm.demos.phi=0.5")
    assert "env.normalize_obs = false" in _refused(tmp_path, raw, "env.normalize_obs=true")
    assert "env.normalize_reward = false" in _refused(tmp_path, raw, "env.normalize_reward=true")
    dqn = {**raw, "algorithm": {"name": "dqn", "demos": raw["algorithm"]["demos"]}}
    assert "algorithm.demos" in _refused(tmp_path, dqn)


@pytest.mark.parametrize(("key", "value"), [("repeat_action_probability", 0.25), ("clip_rewards", True), ("terminal_on_life_loss", True)])
def test_demonstrations_on_atari_need_whole_games_of_raw_scores_without_sticky_actions(key, value):
    """Demonstrations are whole games with raw scores, replayed action by action: the agent's
    episodes must be the same (no sign clipping, no life as an episode), and the env must repeat
    a recorded game (no sticky actions). Each of the three is refused alone, naming its key."""
    whole_games = {"repeat_action_probability": 0.0, "clip_rewards": False, "terminal_on_life_loss": False}
    raw = {"env": {"env_id": "ALE/Breakout-v5", "atari": {**whole_games, key: value}},
           "algorithm": {"name": "ppo", "demos": {"enabled": True, "path": "demos"}}}
    with pytest.raises(ConfigError, match=rf"needs env\.atari\.{key} = .* \(it is {value}\)"):
        from_dict(raw)
    from_dict({**raw, "env": {**raw["env"], "atari": whole_games}})  # all three off: accepted


@pytest.mark.timeout(60)
def test_evaluate_save_demos_writes_demonstrations_a_run_can_replay(tmp_path):
    run_dir = tmp_path / "run"
    raw = {**_config(tmp_path), "run": {**TINY["run"], "target_steps": 128, "eval_every": 128}}
    learner = Learner.from_config(from_dict(raw), run_dir=run_dir, progress=False)
    try:
        learner.train()
    finally:
        learner.close()
    code, out, err = _cli("evaluate", str(run_dir), "--episodes", "2", "--save-demos", str(tmp_path / "saved"))
    assert code == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert [Path(p).name for p in result["demos"]] == ["demo_000.npz", "demo_001.npz"]
    for path, ret in zip(result["demos"], result["returns"]):
        demo, env_id = load_demo(Path(path))
        assert env_id == "pytorchrl/Chain-v0" and demo.ret == pytest.approx(ret) and demo.obs is not None
        assert len(demo.actions) == 16 or demo.rewards[-1] == 1.0  # the time limit, or the goal
    code, out, _ = _cli("evaluate", str(run_dir), "--episodes", "1", "--save-demos", str(tmp_path / "saved"))
    assert code == 0 and Path(json.loads(out.strip().splitlines()[-1])["demos"][0]).name == "demo_002.npz"
    replayed = Learner.from_config(from_dict({**TINY, "algorithm": {**TINY["algorithm"], "demos": {"enabled": True, "path": str(tmp_path / "saved")}}}), progress=False)
    replayed.close()  # the saved demonstrations pass the checks of a run of the same env
    assert "is a regular file, not a directory" in _cli("evaluate", str(run_dir), "--save-demos", result["demos"][0])[2]
    # a directory the checks pass but that cannot be made (/proc takes none, even as root): one line before any episode
    code, out, err = _cli("evaluate", str(run_dir), "--episodes", "1", "--save-demos", "/proc/demos")
    assert code == 2 and err.strip().splitlines()[-1] == "pytorchrl: error: --save-demos '/proc/demos' cannot be created: No such file or directory", err
    # an evaluation that fails leaves no output directory it made behind
    (tmp_path / "not-a-run").mkdir()  # passes the path checks; fails when its checkpoint is read, after the directory is made
    code, _, err = _cli("evaluate", str(tmp_path / "not-a-run"), "--save-demos", str(tmp_path / "never"))
    assert code == 2 and "not-a-run" in err and not (tmp_path / "never").exists()


FRACTIONAL = {"col_worker_resources": {"num_cpus": 0.1}, "grad_worker_resources": {"num_cpus": 0.1}}


def _trained(raw: dict, updates: int) -> tuple[dict, dict]:
    learner = Learner.from_config(from_dict(raw), progress=False)
    try:
        for _ in range(updates):
            learner.step()
        return learner.scheme.algorithm.get_weights(), learner.scheme.state_dict()
    finally:
        learner.close()


def _replays(state: dict) -> list[dict]:
    """The replay states of every collection worker in a scheme's state."""
    found: list[dict] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if "demos" in node and isinstance(node["demos"], dict) and "started" in node["demos"]:
                found.append(node["demos"])
            for value in node.values():
                walk(value)
        elif isinstance(node, (list, tuple)):
            for value in node:
                walk(value)

    walk(state)
    return found


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_remote_collection_worker_replays_as_a_local_one_and_appo_replays_asynchronously(tmp_path, ray_session):
    """The demonstration files are read in the remote worker's process (from an absolute path),
    its replay draws come from its own acting stream: a PPOD run with one remote collection
    worker ends with the local run's weights. APPO with two asynchronous remote workers replays too."""
    raw = _config(tmp_path, rho=0.5, phi=0.5)
    local, local_state = _trained(raw, 6)
    remote, _ = _trained({**raw, "scheme": {**FRACTIONAL, "num_col_workers": 1}}, 6)
    assert local.keys() == remote.keys() and all(torch.equal(local[k], remote[k]) for k in local)
    assert _replays(local_state)[0]["started"][DEMO] > 0
    appo = {
        **raw, "algorithm": {"name": "appo", "demos": raw["algorithm"]["demos"]},
        "scheme": {**FRACTIONAL, "num_col_workers": 2, "col_communication": "asynchronous"},
    }
    _, state = _trained(appo, 6)
    replays = _replays(state)
    assert len(replays) == 2 and all(r["started"][DEMO] > 0 and r["diverged"] == 0 for r in replays)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("index", range(8))
def test_every_bad_demonstration_the_fuzzer_makes_is_refused_in_one_line(tmp_path, index):
    from benchmarks.fuzz import BAD_DEMOS, CONFIGS, Mutation, check_in_process

    config, demos = BAD_DEMOS[index]
    raw = yaml.safe_load((CONFIGS / config).read_text())
    raw["algorithm"]["demos"] = demos
    outcome = check_in_process(Mutation(config, "bad_demos", repr(demos), yaml.safe_dump(raw)), tmp_path)
    assert outcome.result == "refused", outcome
