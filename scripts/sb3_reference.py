"""A same-protocol reference run: Stable-Baselines3's PPO, SAC, TD3 or DQN with a pytorchrl config's settings.

    python scripts/sb3_reference.py configs/td3/ant.yaml [KEY=VALUE ...] --steps 300000 --seed 0 --out DIR [--resume]

Where a results-table row falls short of an anchor measured on another protocol (Ant-v3 under
mujoco-py, another budget), this runs the single-process reference on this one: the same env id
(gymnasium, v5 MuJoCo), the config's hyper-parameters mapped onto SB3's (``sb3_settings``: the
networks' widths and activation, learning rate, discount, batch, buffer, warm-up steps, update
cadence, polyak rate, TD3's noise and delay, SAC's entropy coefficient and gSDE; DQN's epsilon
schedule, target updates (converted from gradient steps to env steps), gradient clipping and Adam
epsilon, vanilla DQN only (no Rainbow part); PPO's rollout, epochs,
minibatches, clipping, coefficients, schedules, Adam epsilon, initial log std, orthogonal init and
VecNormalize for the env's normalisation; SAC and TD3 take the policy's gradient after the
critics' step, SB3's only order, which ``settings.json`` records as ``policy_update``) and its evaluation
protocol: ``run.eval_episodes`` deterministic episodes on a separate env every ``run.eval_every``
agent steps, after the update that ends the round as pytorchrl's evaluations are, and where the run ends (``--resume`` of a finished run adds that last evaluation
where it is missing). The run directory gets ``progress.csv`` (env_steps, wall_time_s, eval_return_mean,
eval_return_std, train_return_mean), ``settings.json`` (the config, its overrides, the seed, the
mapped settings, SB3's version, the CPU, the steps made) and, every ``run.checkpoint_every`` steps
and on SIGTERM, a checkpoint (``model.zip``, the replay buffer or the normalisation statistics)
that ``--resume`` continues from (PPO: from a new rollout at the checkpoint's step).
Needs ``pip install stable-baselines3`` (not a dependency of pytorchrl).
"""

from __future__ import annotations

import argparse
import csv
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pytorchrl.config import Config, load_config  # noqa: E402
from pytorchrl.envs.atari import is_atari_id  # noqa: E402
from pytorchrl.utils.errors import InputError  # noqa: E402

ACTIVATIONS = {"relu": "ReLU", "tanh": "Tanh", "elu": "ELU", "gelu": "GELU"}
COLUMNS = ("env_steps", "wall_time_s", "eval_return_mean", "eval_return_std", "train_return_mean")


def sb3_settings(config: Config) -> dict:
    """SB3's constructor arguments for ``config`` (its algorithm ``ppo``, ``sac``, ``td3`` or ``dqn``), as
    plain values: ``activation_fn`` is a ``torch.nn`` name, ``action_noise_sigma`` a scale in
    [-1, 1] action units as pytorchrl's ``exploration_noise`` is, ``anneal`` the schedules that
    decay to 0 over the run; ``n_envs`` and ``normalize`` (VecNormalize's arguments, or None) say
    how the env is made. ``main`` builds the objects."""
    algo: Any = config.algorithm  # its family's config: PPOConfig, SACConfig, TD3Config or DQNConfig
    if algo.name not in ("ppo", "sac", "td3", "dqn"):
        raise SystemExit(f"sb3_reference: algorithm.name is {algo.name!r}; this script maps 'ppo', 'sac', 'td3' and 'dqn'")
    if config.actor.recurrent.type != "none" or config.actor.shared_network:
        raise SystemExit("sb3_reference: SB3's MlpPolicy has no recurrent core and shares no layers; actor.recurrent.type must be 'none' and actor.shared_network false")
    env = config.env
    # settings that change what is learned and that this mapping does not carry: refused, so that
    # a reference never claims a config's settings it ran without
    unmapped = [
        (config.actor.mlp_precision != "float32", "actor.mlp_precision is not 'float32' (SB3 computes in float32)"),
        (env.max_episode_steps is not None, "env.max_episode_steps is set (the reference keeps the env's own limit)"),
        (env.action_mask != "none", "env.action_mask is set"),
        (is_atari_id(env.env_id), "env.env_id is an ALE id (pytorchrl's Atari preprocessing and CNN are not SB3's MlpPolicy on the raw env)"),
    ]
    if algo.name == "ppo":
        unmapped += [(algo.rnd.enabled or algo.demos.enabled, "algorithm.rnd or algorithm.demos is enabled")]
    else:
        unmapped += [
            (algo.n_step != 1, "algorithm.n_step is not 1"),
            (algo.prioritized_replay, "algorithm.prioritized_replay is on"),
            (config.storage.her.strategy != "none", "storage.her is on"),
        ]
    if algo.name in ("sac", "td3"):
        unmapped += [
            (algo.max_grad_norm is not None, "algorithm.max_grad_norm is set (SB3's SAC and TD3 do not clip)"),
            (algo.adam_eps != 1e-8, "algorithm.adam_eps is not 1e-8 (SB3's Adam default)"),
        ]
    if algo.name == "dqn":
        rainbow = [k for k in ("rainbow", "double_q", "dueling", "noisy_nets", "distributional", "value_rescaling", "actor_priorities") if getattr(algo, k)]
        unmapped += [
            (bool(rainbow), f"algorithm.{rainbow[0] if rainbow else ''} is on (SB3's DQN is vanilla DQN)"),
            (bool(algo.head_hidden_sizes), "algorithm.head_hidden_sizes is set"),
            (algo.apex_epsilon_alpha is not None, "algorithm.apex_epsilon_alpha is set"),
            (algo.exploration_fraction == 0, "algorithm.exploration_fraction is 0 (SB3's schedule divides by it)"),
            (algo.exploration_initial_eps != 1 and algo.start_steps > 0, "algorithm.exploration_initial_eps is not 1 (SB3 acts uniformly before learning_starts)"),
        ]
    for refused, why in unmapped:
        if refused:
            raise SystemExit(f"sb3_reference: {why}; this script maps no such setting onto SB3")
    settings = {
        "algo": algo.name,
        "learning_rate": algo.lr,
        "gamma": algo.gamma,
        "policy_kwargs": {"net_arch": list(config.actor.hidden_sizes), "activation_fn": ACTIVATIONS[config.actor.activation]},
        "n_envs": env.num_envs,
        "normalize": None,
    }
    if env.normalize_obs or env.normalize_reward:
        settings["normalize"] = {
            "norm_obs": env.normalize_obs, "norm_reward": env.normalize_reward, "clip_obs": env.clip_obs,
            "clip_reward": env.clip_reward, "gamma": env.reward_gamma,
        }
    if algo.name == "ppo":
        settings.update(
            n_steps=config.storage.num_steps, batch_size=algo.minibatch_size, n_epochs=algo.num_epochs,
            gae_lambda=algo.gae_lambda, clip_range=algo.clip_range, clip_range_vf=algo.clip_range_vf,
            normalize_advantage=algo.normalize_advantages, ent_coef=algo.ent_coef, vf_coef=algo.vf_coef,
            max_grad_norm=_clip(algo.max_grad_norm), target_kl=algo.target_kl,
            anneal=[k for k, on in (("learning_rate", algo.anneal_lr), ("clip_range", algo.anneal_clip_range)) if on],
        )
        settings["policy_kwargs"].update(
            log_std_init=config.actor.log_std_init, ortho_init=config.actor.ortho_init, optimizer_kwargs={"eps": algo.adam_eps},
        )
        return settings
    if env.num_envs != 1 or settings["normalize"]:
        raise SystemExit(f"sb3_reference: {algo.name} here steps one env without normalisation (env.num_envs is {env.num_envs})")
    every = algo.update_every or config.storage.num_steps  # null: a round per rollout of storage.num_steps
    gradient_steps = every * algo.updates_per_step
    if gradient_steps < 1 or gradient_steps != int(gradient_steps):
        # pytorchrl carries a fraction over to the next round; SB3 makes a whole number of gradient steps per round
        raise SystemExit(f"sb3_reference: algorithm.update_every x updates_per_step = {every} x {algo.updates_per_step} is not a whole number of gradient steps per round")
    settings.update(
        batch_size=algo.minibatch_size, buffer_size=config.storage.capacity, learning_starts=algo.start_steps,
        train_freq=every, gradient_steps=int(gradient_steps), tau=algo.tau,
    )
    if algo.name == "dqn":
        # pytorchrl counts target updates in gradient steps, SB3 in env steps
        env_steps = algo.target_update_interval * every / settings["gradient_steps"]
        if env_steps != int(env_steps):
            raise SystemExit(f"sb3_reference: algorithm.target_update_interval = {algo.target_update_interval} gradient steps is no whole number of env steps here")
        settings.update(
            target_update_interval=int(env_steps), exploration_fraction=algo.exploration_fraction,
            exploration_initial_eps=algo.exploration_initial_eps, exploration_final_eps=algo.exploration_final_eps,
            max_grad_norm=_clip(algo.max_grad_norm),
        )
        settings["policy_kwargs"]["optimizer_kwargs"] = {"eps": algo.adam_eps}  # tau: a polyak step per target update in both
    elif algo.name == "td3":
        settings.update(
            policy_delay=algo.policy_delay,
            target_policy_noise=algo.target_policy_noise,
            target_noise_clip=algo.target_noise_clip,
            action_noise_sigma=algo.exploration_noise,
        )
        if algo.exploration_noise_type != "gaussian":
            raise SystemExit("sb3_reference: algorithm.exploration_noise_type must be 'gaussian' here")
    else:
        coef = algo.init_ent_coef
        settings["ent_coef"] = f"auto_{coef}" if algo.learn_ent_coef else coef
        if algo.target_entropy is not None:
            settings["target_entropy"] = algo.target_entropy
        if algo.use_sde:  # SB3's -1: a matrix per rollout, as pytorchrl's null
            settings.update(use_sde=True, sde_sample_freq=algo.sde_sample_freq or -1)
            settings["policy_kwargs"]["log_std_init"] = algo.sde_log_std_init
    if algo.name in ("sac", "td3"):
        # not a setting SB3 has: its SAC and TD3 step the critics before the policy's gradient is
        # taken (pytorchrl's after_critics); recorded, as the one way a reference may differ
        settings["policy_update"] = "after_critics"
    return settings


def _clip(max_grad_norm: float | None) -> float:
    """SB3's ``max_grad_norm`` (always a number) for pytorchrl's (null: no clipping)."""
    return float("inf") if max_grad_norm is None else max_grad_norm


def _classes():
    from stable_baselines3 import DQN, PPO, SAC, TD3

    return {"ppo": PPO, "sac": SAC, "td3": TD3, "dqn": DQN}


def _build(settings: dict, env, seed: int):
    import numpy as np
    import torch
    from stable_baselines3.common.noise import NormalActionNoise

    kwargs = {k: v for k, v in settings.items() if k not in ("algo", "action_noise_sigma", "n_envs", "normalize", "anneal", "policy_update")}
    kwargs["policy_kwargs"] = dict(kwargs["policy_kwargs"], activation_fn=getattr(torch.nn, kwargs["policy_kwargs"]["activation_fn"]))
    for key in settings.get("anneal", ()):  # linear to 0 over the run: SB3 passes the share of the run left
        start = kwargs[key]
        kwargs[key] = lambda remaining, start=start: start * remaining
    if settings["algo"] == "td3":  # SB3 adds it to the action scaled to [-1, 1], as pytorchrl does: no rescaling
        dim = env.action_space.shape[0]
        kwargs["action_noise"] = NormalActionNoise(np.zeros(dim), np.full(dim, settings["action_noise_sigma"]))
    return _classes()[settings["algo"]]("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **kwargs)


def evaluate(model, env, episodes: int) -> tuple[float, float]:
    """Mean and std of ``episodes`` deterministic returns on ``env`` (raw rewards), observations
    normalised with the training env's statistics where it normalises them."""
    import numpy as np

    normalizer = model.get_vec_normalize_env()
    returns = []
    for _ in range(episodes):
        obs, _ = env.reset()
        done, total = False, 0.0
        while not done:
            seen = normalizer.normalize_obs(obs) if normalizer is not None else obs
            action, _ = model.predict(seen, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return float(np.mean(returns)), float(np.std(returns))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config")
    ap.add_argument("--steps", type=int, default=None, help="agent steps (default: the config's run.target_steps)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True, help="run directory")
    ap.add_argument("--resume", action="store_true", help="continue from the run directory's checkpoint")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1: one process per core)")
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE config overrides, as pytorchrl train takes them")
    args = ap.parse_args(argv)

    import gymnasium as gym
    import torch

    try:
        import stable_baselines3
        from stable_baselines3.common.callbacks import BaseCallback
        from stable_baselines3.common.env_util import make_vec_env
        from stable_baselines3.common.vec_env import VecNormalize
    except ImportError:
        raise SystemExit("sb3_reference: needs Stable-Baselines3, not a dependency of pytorchrl: pip install stable-baselines3") from None

    from pytorchrl.utils.runtime import cpu_model

    torch.set_num_threads(args.threads)
    sb3_version, machine = stable_baselines3.__version__, cpu_model()
    # the results table matches a reference to its row by this label: the path from the repository's root
    config_path = Path(args.config).resolve()
    config_label = config_path.relative_to(ROOT).as_posix() if config_path.is_relative_to(ROOT) else args.config
    try:
        config = load_config(args.config, args.overrides)
    except InputError as e:
        raise SystemExit(f"sb3_reference: {e}") from None
    settings = sb3_settings(config)
    steps = args.steps or config.run.target_steps
    out = Path(args.out)
    if args.resume and not (out / "settings.json").is_file():
        raise SystemExit(f"sb3_reference: --resume: {out} holds no checkpoint (settings.json) to continue from")
    try:
        env = make_vec_env(config.env.env_id, n_envs=settings["n_envs"], seed=args.seed, env_kwargs=config.env.env_kwargs)
        eval_env = gym.make(config.env.env_id, **(config.env.eval_env_kwargs or config.env.env_kwargs))
    except gym.error.Error as e:
        raise SystemExit(f"sb3_reference: env.env_id = {config.env.env_id!r}: {e}") from None
    eval_env.reset(seed=args.seed + 10_000)
    out.mkdir(parents=True, exist_ok=True)  # after what can be refused, so a refusal leaves nothing behind
    progress, normalizer, replay = out / "progress.csv", out / "vecnormalize.pkl", out / "replay_buffer.pkl"
    if args.resume:
        if settings["normalize"]:
            env = VecNormalize.load(str(normalizer), env)
        model = _classes()[settings["algo"]].load(out / "model.zip", env=env, device="cpu")
        if settings["algo"] != "ppo":
            model.load_replay_buffer(replay)
        elapsed = json.loads((out / "settings.json").read_text())["wall_time_s"]
        # rows past the checkpoint are dropped: the resumed run writes them again
        rows = [r for r in csv.DictReader(progress.open()) if int(r["env_steps"]) <= model.num_timesteps]
    else:
        if progress.exists():
            raise SystemExit(f"sb3_reference: {progress} exists; pass --resume to continue it, or another --out")
        if settings["normalize"]:
            env = VecNormalize(env, **settings["normalize"])
        model = _build(settings, env, args.seed)
        elapsed, rows = 0.0, []
    with progress.open("w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    stop = {"asked": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(asked=True))
    started = time.perf_counter() - elapsed

    def checkpoint() -> None:
        model.save(out / "model.zip")
        if settings["algo"] != "ppo":
            model.save_replay_buffer(replay)
        if settings["normalize"]:
            model.get_vec_normalize_env().save(str(normalizer))
        meta = {"config": config_label, "overrides": args.overrides, "seed": args.seed, "steps": steps, "settings": settings, "sb3": sb3_version, "machine": machine}
        (out / "settings.json").write_text(json.dumps({**meta, "env_steps": model.num_timesteps, "wall_time_s": time.perf_counter() - started}, indent=1))

    evaluated = {"at": int(rows[-1]["env_steps"]) if rows else -1}

    def record(n: int) -> None:
        """Evaluate the policy now and append the row of step ``n``."""
        mean, std = evaluate(model, eval_env, config.run.eval_episodes)
        infos = model.ep_info_buffer
        train = sum(e["r"] for e in infos) / len(infos) if infos else ""
        with progress.open("a", newline="") as f:
            csv.DictWriter(f, COLUMNS).writerow(dict(zip(COLUMNS, (n, round(time.perf_counter() - started, 3), mean, std, train))))
        evaluated["at"] = n
        print(f"{n} steps, {time.perf_counter() - started:.0f} s: eval {mean:.1f} +- {std:.1f}", flush=True)

    class Every(BaseCallback):
        """Evaluates and checkpoints where the step count has crossed a multiple of the config's
        ``eval_every`` and ``checkpoint_every`` (a vector env's step adds ``n_envs``), at the start
        of the next rollout: after the update that ends the round, as pytorchrl's round ends with
        its update before it evaluates (SB3 calls ``_on_step`` before it trains on the rollout)."""

        last = model.num_timesteps

        def _on_rollout_start(self) -> None:
            n, last = self.model.num_timesteps, self.last
            self.last = n

            def crossed(every: int) -> bool:
                return bool(every) and n // every > last // every

            if crossed(config.run.eval_every):
                record(n)
            if crossed(config.run.checkpoint_every):
                checkpoint()

        def _on_step(self) -> bool:
            return not stop["asked"]

    if model.num_timesteps < steps:
        model.learn(steps - model.num_timesteps, callback=Every(), reset_num_timesteps=False)
    if not stop["asked"] and evaluated["at"] != model.num_timesteps:
        record(model.num_timesteps)  # the final evaluation, as pytorchrl train makes one where a run ends
    checkpoint()
    print(f"sb3_reference: {model.num_timesteps} steps{' (stopped by SIGTERM)' if stop['asked'] else ''}; checkpoint in {out}")


if __name__ == "__main__":
    main()
