"""MPC: the planners on a known objective, the ensemble's regression, acting through the
collection worker's interface, the one-line refusals, and learning Pendulum."""

from __future__ import annotations

import subprocess

import gymnasium as gym
import numpy as np
import pytest
import torch

from pytorchrl.agent.actors.model_based import MPCActor, cem, filtered_noise, pddm, random_shooting
from pytorchrl.agent.algorithms import ALGORITHMS
from pytorchrl.agent.algorithms.mpc import MPC, MPCConfig
from pytorchrl.config import ConfigError, from_dict, load_config
from pytorchrl.learner import Learner
from tests.conftest import CONFIGS

E, H, A = 2, 6, 2
OBS = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
ACTIONS = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))


def quadratic(target: torch.Tensor):
    """``returns = -||a - target||^2`` summed over the horizon: the best plan is ``target``."""
    def rollout_return(actions: torch.Tensor) -> torch.Tensor:
        assert actions.shape[0] == target.shape[0] and actions.shape[2:] == target.shape[1:]
        assert actions.abs().max() <= 1.0  # every planner stays in [-1, 1]
        return -(actions - target.unsqueeze(1)).square().sum((2, 3))
    return rollout_return


def distance(plan: torch.Tensor, target: torch.Tensor) -> float:
    return float((plan - target).square().sum((1, 2)).max())


@pytest.fixture
def target() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.rand(E, H, A) * 1.6 - 0.8


@pytest.mark.timeout(30)
def test_cem_converges_to_the_optimum_of_a_quadratic(target):
    start = torch.zeros(E, H, A)
    mean = cem(quadratic(target), start, num_candidates=300, iterations=12, num_elites=30, alpha=0.1)
    assert (mean - target).abs().max() < 0.05
    one = cem(quadratic(target), start, num_candidates=300, iterations=1, num_elites=30, alpha=0.1)
    assert distance(mean, target) < distance(one, target) < distance(start, target)  # each refit gets closer


@pytest.mark.timeout(30)
def test_random_shooting_and_pddm_improve_on_a_quadratic(target):
    start = torch.zeros(E, H, A)
    fn = quadratic(target)
    best = random_shooting(fn, start, num_candidates=2000)
    # the best of 2000 beats the mean of random sequences (E||a - t||^2 = H A (1/3 + t^2)) by far
    expected_random = float((1 / 3 + target.square()).sum((1, 2)).min())
    assert distance(best, target) < 0.5 * expected_random
    plan = start
    for _ in range(15):  # PDDM's plan is warm-started: each step moves it towards the optimum
        plan = pddm(fn, plan, num_candidates=300, gamma=10.0, beta=0.6, sigma=0.3)
    assert distance(plan, target) < 0.05 * distance(start, target)


@pytest.mark.timeout(30)
def test_filtered_noise_is_correlated_along_the_horizon():
    torch.manual_seed(1)
    smooth, rough = filtered_noise((1, 4000, 20, 1), 0.2, 1.0), filtered_noise((1, 4000, 20, 1), 1.0, 1.0)
    def lag_one(x: torch.Tensor) -> float:
        return float(torch.corrcoef(torch.stack([x[0, :, 10:-1].flatten(), x[0, :, 11:].flatten()]))[0, 1])
    assert lag_one(smooth) > 0.7 and abs(lag_one(rough)) < 0.05


def _algorithm(**overrides) -> MPC:
    actor = MPCActor(OBS, ACTIONS, ensemble_size=3, hidden_sizes=(32, 32), planner="cem", horizon=5, num_candidates=30,
                     planner_options={"iterations": 2, "num_elites": 5, "alpha": 0.1})
    return MPC(actor, config=MPCConfig(ensemble_size=3, num_candidates=30, horizon=5, num_elites=5), **overrides)


def _linear_batch(size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Transitions of ``s' = M s + B a``, ``r = c . s - |a|^2`` with actions in ACTIONS' bounds."""
    m = torch.tensor([[0.9, 0.1, 0.0], [0.0, 0.8, 0.2], [0.1, 0.0, 0.95]])
    b = torch.tensor([[0.5, 0.0], [0.0, 1.0], [0.2, -0.3]])
    obs = torch.randn(size, 3, generator=generator) * 2 + 1
    low, high = torch.as_tensor(ACTIONS.low), torch.as_tensor(ACTIONS.high)
    actions = low + (high - low) * torch.rand(size, 2, generator=generator)
    next_obs = obs @ m.T + actions @ b.T
    rewards = obs @ torch.tensor([1.0, -0.5, 0.25]) - actions.square().sum(1)
    return {"obs": obs, "actions": actions, "next_obs": next_obs, "rewards": rewards, "discounts": torch.full((size,), 0.99)}


@pytest.mark.timeout(60)
def test_the_ensemble_learns_a_linear_system():
    torch.manual_seed(0)
    algo = _algorithm(lr=3e-3)
    g = torch.Generator().manual_seed(0)
    data = _linear_batch(4096, g)
    algo.actor.set_statistics(data["obs"], data["next_obs"], data["rewards"])
    assert torch.allclose(algo.actor.obs_mean, data["obs"].mean(0), atol=1e-5)
    losses = []
    for _ in range(300):
        rows = torch.randint(4096, (128,), generator=g)
        info = algo.compute_gradients({**{k: v[rows] for k, v in data.items()}, "indices": rows})
        assert algo.apply_gradients()
        losses.append(info["model_loss"])
        assert set(info) <= set(MPC.metrics)
    assert np.mean(losses[-20:]) < 0.05 * np.mean(losses[:5]), (losses[:5], losses[-20:])
    # the learned model predicts a held-out transition in the env's own units
    test = _linear_batch(256, g)
    actor = algo.actor
    with torch.no_grad():
        out = actor.model(actor.model_inputs(test["obs"], actor.normalize(test["actions"])).expand(3, -1, -1)).mean(0)
    predicted = test["obs"] + actor.delta_mean + out[:, :-1] * actor.delta_std
    scale = float((test["next_obs"] - test["obs"]).std())
    assert float((predicted - test["next_obs"]).abs().mean()) < 0.1 * scale


def test_each_member_learns_on_its_own_bootstrap_of_the_buffer():
    """PETS: member k counts a replay row a Poisson(1) number of times, fixed for the run, so
    each member leaves out about 37% of the rows and the members' weights are independent; the
    loss is each member's weighted mean. A resample of each minibatch gave every member the
    same expected weight on every row."""
    from pytorchrl.agent.algorithms.mpc import bootstrap_weights

    rows = torch.arange(50_000)
    weights = bootstrap_weights(rows, 3)
    assert torch.equal(weights, bootstrap_weights(rows, 3)) and torch.equal(weights[:, 7:9], bootstrap_weights(rows[7:9], 3))
    left_out = (weights == 0).float().mean(1)
    assert torch.allclose(left_out, torch.full((3,), float(np.exp(-1.0))), atol=0.01) and torch.allclose(weights.mean(1), torch.ones(3), atol=0.02)
    assert torch.corrcoef(weights).sub(torch.eye(3)).abs().max() < 0.02
    algo = _algorithm(lr=3e-3)
    g = torch.Generator().manual_seed(0)
    data = _linear_batch(64, g)
    algo.actor.set_statistics(data["obs"], data["next_obs"], data["rewards"])
    batch = {**data, "indices": torch.arange(64)}
    loss, _ = algo.compute_loss(batch)
    actor = algo.actor
    with torch.no_grad():
        inputs = actor.model_inputs(data["obs"], actor.normalize(data["actions"]))
        error = (actor.model(inputs.expand(3, -1, -1)) - actor.model_targets(data["obs"], data["next_obs"], data["rewards"])).square().mean(-1)
    w = bootstrap_weights(batch["indices"], 3)
    assert torch.allclose(loss.detach(), ((w * error).sum(1) / w.sum(1)).sum(), rtol=1e-5)


@pytest.mark.timeout(60)
def test_acting_is_random_while_warming_up_then_planned_within_bounds():
    torch.manual_seed(0)
    actor = _algorithm().actor
    low, high = torch.as_tensor(ACTIONS.low), torch.as_tensor(ACTIONS.high)
    obs = torch.randn(4, 3)
    noise = actor.draw_noise(2, 4)
    assert noise.shape == (2, 4, 2)
    out = torch.empty(4, 2)
    actor.act(obs, noise[0], out)  # warming up: the noise's random action, scaled to the bounds
    torch.testing.assert_close(out, low + (noise[0] + 1) / 2 * (high - low))
    actor.uniform.fill_(False)
    state = torch.get_rng_state()
    actor.act(obs, noise[1], out)
    assert ((out >= low) & (out <= high)).all()
    assert not torch.equal(out, low + (noise[1] + 1) / 2 * (high - low))
    again = torch.empty(4, 2)
    torch.set_rng_state(state)
    actor.draw_noise(1, 4)  # a new rollout: no warm start, as at the first one
    torch.set_rng_state(state)
    actor.act(obs, noise[1], again)
    torch.testing.assert_close(out, again)  # planning draws from the active stream only: it repeats
    action, _, rhs = actor.get_action(obs, None, None, deterministic=True)
    assert action.shape == (4, 2) and ((action >= low) & (action <= high)).all()
    assert rhs.shape == (4, 5, 2)  # evaluation carries the shifted plan
    _, _, rhs = actor.get_action(obs, rhs, torch.tensor([True, False, False, False]), deterministic=True)
    actor.uniform.fill_(True)
    action, _, _ = actor.get_action(obs)
    assert ((action >= low) & (action <= high)).all()


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("overrides", "message"), [
    ({"actor": {"recurrent": {"type": "gru"}}}, "config key 'actor.recurrent.type' = 'gru': mpc's dynamics model is memoryless; use 'none'"),
    ({"algorithm": {"n_step": 3}}, "config key 'algorithm.n_step' = 3: mpc's model learns one-step transitions; use 1"),
    ({"algorithm": {"num_candidates": 401}}, "config key 'algorithm.num_candidates' = 401 is not a multiple of algorithm.ensemble_size = 5"),
    ({"algorithm": {"num_elites": 500}}, "config key 'algorithm.num_elites' = 500 is larger than algorithm.num_candidates = 400"),
    ({"algorithm": {"prioritized_replay": True}}, "config key 'algorithm.prioritized_replay' = true: mpc trains its model on uniform replay"),
    ({"scheme": {"num_grad_workers": 1}}, "config key 'scheme.num_grad_workers' = 1: mpc's normalisation statistics"),
])
def test_bad_configs_are_one_line(overrides, message):
    raw = {"env": {"env_id": "Pendulum-v1", "num_envs": 1}, "algorithm": {"name": "mpc"}, "run": {"target_steps": 10_000}}
    for section, values in overrides.items():
        raw[section] = {**raw.get(section, {}), **values}
    with pytest.raises(ConfigError) as error:
        from_dict(raw)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


@pytest.mark.timeout(30)
def test_spaces_mpc_cannot_plan_in_are_named():
    assert MPC.check_action_space(gym.spaces.Discrete(2)) == "a bounded Box action space (its planners search action sequences within the bounds)"
    assert MPC.check_action_space(gym.spaces.Box(-np.inf, np.inf, (1,))) is not None
    assert MPC.check_action_space(ACTIONS) is None
    assert ALGORITHMS["mpc"] is MPC


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_train_mpc_on_cartpole_exits_2_with_one_line(pytorchrl_cmd, tmp_path):
    proc = subprocess.run([*pytorchrl_cmd, "train", "--algo", "mpc", "--env", "CartPole-v1", "--run-dir", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pytorchrl: error: --algo mpc needs a bounded Box action space"), lines


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("scheme", [{}, {"num_col_workers": 1, "col_worker_resources": {"num_cpus": 0.5}}], ids=["local", "remote-worker"])
def test_a_short_run_trains_and_checkpoints(ray_session, tmp_path, scheme):
    """Local and with a remote collection worker: the model trains, the statistics leave their
    initial values, and they are in the checkpoint beside the weights."""
    raw = {
        "env": {"env_id": "Pendulum-v1", "num_envs": 1, "num_test_envs": 1}, "actor": {"hidden_sizes": [16]},
        "algorithm": {"name": "mpc", "update_every": 50, "start_steps": 64, "minibatch_size": 32, "ensemble_size": 2, "num_candidates": 20,
                      "horizon": 4, "cem_iterations": 2, "num_elites": 4},
        "run": {"target_steps": 200, "eval_every": 200, "eval_episodes": 1, "log_every": 100, "stop_at_return": None}, "scheme": scheme,
    }
    learner = Learner.from_config(from_dict(raw), run_dir=tmp_path / "run", progress=False)
    try:
        summary = learner.train()
        state = learner.scheme.algorithm.state_dict()
    finally:
        learner.close()
    assert summary["env_steps"] == 200 and summary["final_eval_return_mean"] is not None
    assert float(state["actor"]["obs_std"][2]) != 1.0 and not bool(state["actor"]["uniform"])
    assert state["version"] > 0


@pytest.mark.learning
@pytest.mark.timeout(300)
def test_mpc_learns_pendulum_within_1200_steps():
    """One random episode, then five of planning with a smaller model and planner than the
    shipped config's (64-64, CEM 300 x 3 over 25 steps): a random policy scores about -1200.
    Measured eval means after 1200 steps: -244 (seed 0, this test) and -208 (seed 1); over 20
    steps instead of 25, -484, -204 and -149 (seeds 0-2), the swing-up from the bottom being
    what a short horizon misses. 134 s wall for seed 0 on the 2-core VM while other jobs kept its load near 10."""
    cfg = load_config(CONFIGS / "mpc/pendulum.yaml", [
        "run.target_steps=1200", "run.eval_every=1200", "run.stop_at_return=null", "actor.hidden_sizes=[64, 64]", "algorithm.num_candidates=300",
        "algorithm.cem_iterations=3", "algorithm.num_elites=30", "algorithm.horizon=25",
    ])
    learner = Learner.from_config(cfg, progress=False)
    try:
        summary = learner.train()
    finally:
        learner.close()
    assert summary["final_eval_return_mean"] > -600, summary
