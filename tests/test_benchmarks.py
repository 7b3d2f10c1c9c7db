"""Benchmark helpers: the matrix-product floor under a step counts every product's work once; the GPU script's server case; the scaling script's /proc figures."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from benchmarks.pixels import _gemm_floor
from tests.conftest import load_script


def test_gemm_floor_counts_each_product_of_a_step():
    a, b = torch.randn(4, 5), torch.randn(5, 6)
    batched, weights = torch.randn(2, 4, 5), torch.randn(2, 5, 3)
    bias = torch.zeros(2, 1, 3)
    steps = []

    def step() -> None:
        steps.append(1)
        torch.mm(a, b)  # 2 * 4 * 5 * 6 = 240
        torch.nn.functional.linear(a, b.t(), torch.zeros(6))  # addmm: 240
        torch.baddbmm(bias, batched, weights)  # 2 * (2 * 4 * 5 * 3) = 240
        torch.relu(a)  # not a matrix product: not counted

    ms, mflop = _gemm_floor(step, repeats=3)
    assert steps == [1]  # recorded from one call of the step, then replayed without it
    assert mflop == pytest.approx(720e-6)
    assert ms > 0


def test_the_gpu_scripts_server_case_measures_a_batch_of_the_requests_asked_for_on_the_cpu(capsys):
    """``scripts/central_gpu.py server`` (run on GPU machines) also runs here, on the CPU case only."""
    import argparse
    import json

    pytest.importorskip("ale_py")
    script = load_script("central_gpu")
    lines = script.bench_server(argparse.Namespace(requests=2, rows=8, gap_ms=0.0, batches=3))
    assert [line["case"] for line in lines] == (["cuda, pinned", "cuda, pageable", "cpu"] if torch.cuda.is_available() else ["cpu"])
    assert all(line["rows_per_batch"] == 16 and line["ms_per_batch"] > 0 and line["obs_per_s"] == pytest.approx(8 * line["requests_per_s"], rel=0.05) for line in lines)
    assert [json.loads(text) for text in capsys.readouterr().out.splitlines() if text.startswith("{")] == lines


def test_the_gpu_scripts_pair_counts_the_steps_of_rollouts_dropped_for_lag_as_untrained(tmp_path):
    """The H200 pair of 2026-11-30: 504,832 steps of 8-env, 128-step rollouts, 287 of them dropped."""
    script = load_script("central_gpu")
    (tmp_path / "config.yaml").write_text("env: {num_envs: 8}\nstorage: {num_steps: 128}\n")
    assert script._trained_share(tmp_path, {"env_steps": 504_832, "dropped_batches": 287}) == pytest.approx(1 - 287 * 1024 / 504_832, abs=1e-3)
    assert script._trained_share(tmp_path, {"env_steps": 504_832, "dropped_batches": 0}) == 1.0
    assert script._trained_share(tmp_path, {"env_steps": 504_832}) is None  # a summary from before dropped_batches was written


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads Linux's /proc")
def test_the_scaling_scripts_process_figures_read_the_runqueue_wait_and_renice_every_thread():
    """``scripts/central_scaling.py`` reads each process's CPU, memory and runqueue wait from
    ``/proc`` and can renice a process's every thread (``--worker-nice``)."""
    import os
    import subprocess
    import sys
    import threading

    script = load_script("central_scaling")
    # a child with two threads, so that renicing has more than its main thread to reach
    child = subprocess.Popen([sys.executable, "-c", "import threading, time; threading.Thread(target=time.sleep, args=(30,)).start(); time.sleep(30)"])
    try:
        for _ in range(100):  # until its second thread is up
            if len(os.listdir(f"/proc/{child.pid}/task")) >= 2:
                break
            threading.Event().wait(0.02)
        niceness = min(19, os.getpriority(os.PRIO_PROCESS, child.pid) + 3)  # raising it needs no privilege
        script.renice_threads(niceness, child.pid)  # what --worker-nice does to each worker
        tasks = [int(tid) for tid in os.listdir(f"/proc/{child.pid}/task")]
        assert len(tasks) >= 2 and all(os.getpriority(os.PRIO_PROCESS, tid) == niceness for tid in tasks)
        figures = script._proc(child.pid)
        assert figures["cpu_s"] >= 0 and figures["rss_mb"] > 0 and figures["runq_s"] >= 0
    finally:
        child.kill()
        child.wait()
    # this process's own threads: the wait only grows, and it is each thread's schedstat's second field
    first = script._runq_s(os.getpid())
    expected = sum(int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[1]) for tid in os.listdir("/proc/self/task")) / 1e9
    assert first <= expected + 1e-3 and script._runq_s(os.getpid()) >= first


def test_the_sb3_reference_maps_a_configs_settings_onto_sb3s_and_refuses_what_it_cannot_map():
    """``scripts/sb3_reference.py`` runs SB3 with a config's own settings (the same-protocol
    reference for a results-table row), so the mapping is the whole of its claim."""
    from pytorchrl.config import load_config

    script = load_script("sb3_reference")
    root = Path(__file__).resolve().parent.parent
    td3 = script.sb3_settings(load_config(root / "configs/td3/ant.yaml"))
    assert td3 == {
        "algo": "td3", "learning_rate": 1e-3, "gamma": 0.99, "batch_size": 256, "buffer_size": 1_000_000,
        "learning_starts": 10_000, "train_freq": 1, "gradient_steps": 1, "tau": 0.005,
        "policy_kwargs": {"net_arch": [400, 300], "activation_fn": "ReLU"},
        "policy_delay": 2, "target_policy_noise": 0.2, "target_noise_clip": 0.5, "action_noise_sigma": 0.1,
        "n_envs": 1, "normalize": None, "policy_update": "after_critics",
    }
    # SAC: an update cadence of 64 steps with one gradient step each, and the learned coefficient's start
    sac = script.sb3_settings(load_config(root / "configs/sac/bipedalwalker.yaml", ["algorithm.init_ent_coef=0.5"]))
    assert (sac["train_freq"], sac["gradient_steps"], sac["ent_coef"], sac["tau"]) == (64, 64, "auto_0.5", 0.02)
    fixed = script.sb3_settings(load_config(root / "configs/sac/bipedalwalker.yaml", ["algorithm.learn_ent_coef=false", "algorithm.init_ent_coef=0.2"]))
    assert fixed["ent_coef"] == 0.2 and "target_entropy" not in fixed and "use_sde" not in fixed
    # gSDE: SB3's use_sde, its -1 for a matrix per rollout, the log std's start in the policy's kwargs
    sde = script.sb3_settings(load_config(root / "configs/sac/mountaincar_continuous.yaml"))
    assert (sde["use_sde"], sde["sde_sample_freq"], sde["policy_kwargs"]["log_std_init"], sde["ent_coef"]) == (True, -1, -3.67, 0.1)
    assert script.sb3_settings(load_config(root / "configs/sac/mountaincar_continuous.yaml", ["algorithm.sde_sample_freq=8"]))["sde_sample_freq"] == 8
    # DQN: target updates from gradient steps (300, a gradient step per 2 env steps) to SB3's env steps
    dqn = script.sb3_settings(load_config(root / "configs/dqn/mountaincar.yaml"))
    assert {k: dqn[k] for k in ("train_freq", "gradient_steps", "target_update_interval", "exploration_fraction", "exploration_final_eps", "max_grad_norm")} == {
        "train_freq": 16, "gradient_steps": 8, "target_update_interval": 600, "exploration_fraction": 0.2, "exploration_final_eps": 0.07, "max_grad_norm": 10.0,
    }
    assert dqn["policy_kwargs"]["optimizer_kwargs"] == {"eps": 1e-8} and dqn["tau"] == 1.0
    # a cadence whose gradient steps per round are no whole number: pytorchrl carries the fraction over, SB3 cannot
    with pytest.raises(SystemExit, match=r"update_every x updates_per_step = 1 x 0.5 is not a whole number"):
        script.sb3_settings(load_config(root / "configs/dqn/mountaincar.yaml", ["algorithm.update_every=1", "storage.num_steps=1"]))
    # PPO: the rollout and its epochs, the schedules, VecNormalize's arguments, the policy's init and Adam epsilon
    ppo = script.sb3_settings(load_config(root / "configs/ppo/ant.yaml", ["algorithm.anneal_lr=true", "algorithm.max_grad_norm=null"]))
    assert ppo == {
        "algo": "ppo", "learning_rate": 3e-4, "gamma": 0.99, "n_envs": 1,
        "policy_kwargs": {"net_arch": [64, 64], "activation_fn": "Tanh", "log_std_init": 0.0, "ortho_init": True, "optimizer_kwargs": {"eps": 1e-5}},
        "normalize": {"norm_obs": True, "norm_reward": True, "clip_obs": 10.0, "clip_reward": 10.0, "gamma": 0.99},
        "n_steps": 2048, "batch_size": 64, "n_epochs": 10, "gae_lambda": 0.95, "clip_range": 0.2, "clip_range_vf": None,
        "normalize_advantage": True, "ent_coef": 0.0, "vf_coef": 0.5, "max_grad_norm": float("inf"), "target_kl": None, "anneal": ["learning_rate"],
    }
    with pytest.raises(SystemExit, match=r"algorithm\.name is 'mpo'"):
        script.sb3_settings(load_config(root / "configs/mpo/pendulum.yaml"))
    with pytest.raises(SystemExit, match=r"algorithm\.double_q is on \(SB3's DQN is vanilla DQN\)"):
        script.sb3_settings(load_config(root / "configs/dqn/mountaincar.yaml", ["algorithm.double_q=true"]))
    with pytest.raises(SystemExit, match=r"env\.env_id is an ALE id"):
        script.sb3_settings(load_config(root / "configs/ppo/atari_pong.yaml", ["actor.shared_network=false"]))
    with pytest.raises(SystemExit, match=r"actor\.recurrent\.type must be 'none'"):
        script.sb3_settings(load_config(root / "configs/ppo/cartpole_masked_gru.yaml"))
    with pytest.raises(SystemExit, match=r"env\.num_envs is 4"):
        script.sb3_settings(load_config(root / "configs/td3/ant.yaml", ["env.num_envs=4"]))
    # what changes learning and has no mapping is refused, never run without
    for override, named in [("algorithm.n_step=3", "n_step"), ("algorithm.max_grad_norm=10", "max_grad_norm"), ("actor.mlp_precision=bfloat16", "mlp_precision")]:
        with pytest.raises(SystemExit, match=named):
            script.sb3_settings(load_config(root / "configs/sac/ant.yaml", [override]))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_sb3_reference_explores_in_scaled_units_and_evaluates_after_the_rounds_update(tmp_path, monkeypatch):
    """Two ways the reference could run other settings than it claims: TD3's noise scale is in
    [-1, 1] action units on both sides (SB3 adds it to the scaled action: Pendulum's bounds of 2
    must not double it), and an evaluation plays the weights after the update that ends its round,
    as pytorchrl's do (SB3's ``_on_step`` comes before it trains on the rollout)."""
    import gymnasium as gym

    from pytorchrl.config import load_config

    script = load_script("sb3_reference")
    root = Path(__file__).resolve().parent.parent
    td3 = script.sb3_settings(load_config(root / "configs/td3/pendulum.yaml", ["storage.capacity=1000"]))
    model = script._build(td3, gym.make("Pendulum-v1"), 0)
    assert model.action_noise._sigma.tolist() == [td3["action_noise_sigma"]]
    seen = []
    evaluate = script.evaluate
    monkeypatch.setattr(script, "evaluate", lambda model, env, episodes: (seen.append((model.num_timesteps, model._n_updates)), evaluate(model, env, episodes))[1])
    overrides = ["env.num_envs=1", "storage.num_steps=64", "algorithm.minibatch_size=64", "algorithm.num_epochs=1", "run.eval_every=128", "run.eval_episodes=1", "run.checkpoint_every=0"]
    script.main([str(root / "configs/ppo/cartpole.yaml"), *overrides, "--steps", "256", "--out", str(tmp_path / "run")])
    assert seen == [(128, 2), (256, 4)]  # one epoch of one minibatch a rollout of 64 steps: 2 updates by 128


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_ppos_update_is_sb3s_to_float_precision():
    """``scripts/ppo_sb3_update.py``: from SB3's weights, on the same minibatches in the same
    order, pytorchrl's PPO update (clipped surrogate, value loss, entropy bonus, per-minibatch
    advantage normalisation, global gradient clipping, Adam) moves the networks as SB3's does, to
    float precision. Any difference in a loss term's formula or scale shows as percents."""
    pytest.importorskip("stable_baselines3")
    pytest.importorskip("mujoco")
    script = load_script("ppo_sb3_update")
    root = Path(__file__).resolve().parent.parent
    rows = script.compare(str(root / "configs/ppo/ant.yaml"), ["algorithm.num_epochs=3"], rounds=1)
    assert [(epoch, part) for _, epoch, part, _, _ in rows] == [(e, p) for e in (1, 2, 3) for p in ("policy", "value")]
    for _, _, _, moved, apart in rows:
        assert moved > 1e-2 and apart < 1e-5 * moved, (moved, apart)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sacs_update_is_sb3s_reordered_to_float_precision():
    """``scripts/sac_sb3_update.py``: from SB3's weights, on the same minibatches and noise, with
    SB3's update in pytorchrl's order (every gradient before any step) and its tanh correction
    exact, pytorchrl's SAC update (critics, squashed-Gaussian policy, entropy coefficient, polyak
    targets) moves every part as SB3's does, to float precision."""
    pytest.importorskip("stable_baselines3")
    pytest.importorskip("mujoco")
    script = load_script("sac_sb3_update")
    root = Path(__file__).resolve().parent.parent
    rows = script.compare(str(root / "configs/sac/walker2d.yaml"), [], 10, True, (1, 10), sb3_epsilon=0.0)
    assert [(step, part) for step, part, _, _ in rows] == [(s, p) for s in (1, 10) for p in ("critic", "policy", "ent_coef")]
    for _, _, moved, apart in rows:
        assert moved > 1e-4 and apart < 1e-5 * moved, (moved, apart)


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize(("reorder", "policy_update"), [(False, "after_critics"), (True, "fused")])
def test_td3s_update_is_sb3s_up_to_the_order_of_the_policy_step(reorder, policy_update):
    """``scripts/td3_sb3_update.py``: from SB3's weights, on the same minibatches, pytorchrl's TD3
    with ``policy_update: after_critics`` moves critics and policy as SB3's own TD3 does, and its
    default (``fused``) as SB3's reordered to take the policy's gradient before the critics' step.
    The bound is 1e-4 of the movement: one critic weight parts by ~1.8e-5 from the first step on
    one CPU model (~4e-6 on another), rounding, not a formula."""
    pytest.importorskip("stable_baselines3")
    pytest.importorskip("mujoco")
    script = load_script("td3_sb3_update")
    root = Path(__file__).resolve().parent.parent
    rows = script.compare(str(root / "configs/td3/walker2d.yaml"), 6, reorder, (2, 6), policy_update)
    assert [(step, part) for step, part, _, _ in rows] == [(s, p) for s in (2, 6) for p in ("critic", "policy")]
    for _, _, moved, apart in rows:
        assert moved > 1e-3 and apart < 1e-4 * moved, (moved, apart)


def test_the_wake_cost_script_times_the_shipped_socket_call_in_parts(capsys):
    """``scripts/wake_cost.py`` times a call over the socket transport back to back and after a
    pause; its parts (pickling, sending, waiting) add up to the round trip."""
    script = load_script("wake_cost")
    script.main(["--calls", "3", "--gap-ms", "1"])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["pause 0 ms", "pause 1 ms"]
    for line in lines:
        figures = {key: float(value) for key, value in (item.rsplit(" ", 1) for item in line.split(": ", 1)[1].split(", "))}
        assert figures["client_cpu_us"] > 0 and figures["round_trip_us"] > 0
        assert figures["pickle_us"] + figures["send_us"] + figures["wait_recv_us"] == pytest.approx(figures["round_trip_us"], abs=2)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_the_sac_step_figure_times_the_steps_and_not_the_final_evaluation(monkeypatch):
    """``benchmark sac_step`` is milliseconds per step "without evaluations": the learner's final
    evaluation (``finish()``, made once at the end of any run) falls outside its timer. A clock
    that an evaluation moves by 1,000 s shows which side of it the evaluation is."""
    from benchmarks import suite
    from pytorchrl.learner import Learner

    clock = {"now": 0.0}
    monkeypatch.setattr(suite.time, "perf_counter", lambda: clock["now"])

    def evaluate(self, *args, **kwargs):
        clock["now"] += 1000.0
        return 0.0

    monkeypatch.setattr(Learner, "evaluate", evaluate)
    figure = suite.sac_step([0], steps=300)
    assert figure["runs"][0]["ms_per_step"] == 0.0


def test_the_suite_reads_the_configs_of_its_own_checkout_not_the_working_directory_s(tmp_path, monkeypatch):
    """From another checkout (a worktree) the code that runs is the installed one's: its configs
    must be too, or a benchmark mixes one commit's code with another's settings."""
    import benchmarks.suite as suite

    (tmp_path / "configs" / "ppo").mkdir(parents=True)
    (tmp_path / "configs" / "ppo" / "cartpole.yaml").write_text("algorithm: {lr: 1.0}\n")
    monkeypatch.chdir(tmp_path)
    assert suite._config_path("ppo/cartpole.yaml") == suite.CONFIGS / "ppo" / "cartpole.yaml"
    with pytest.raises(FileNotFoundError, match="not found in"):
        suite._config_path("ppo/no_such.yaml")
