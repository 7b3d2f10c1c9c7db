"""A same-protocol reference run: Stable-Baselines3's SAC or TD3 with a pytorchrl config's settings.

    python scripts/sb3_reference.py configs/td3/ant.yaml [KEY=VALUE ...] --steps 300000 --seed 0 --out DIR [--resume]

Where a results-table row falls short of an anchor measured on another protocol (Ant-v3 under
mujoco-py, another budget), this runs the single-process reference on this one: the same env id
(gymnasium, v5 MuJoCo), the config's hyper-parameters mapped onto SB3's (``sb3_settings``: the
networks' widths and activation, learning rate, discount, batch, buffer, warm-up steps, update
cadence, polyak rate, TD3's noise and delay, SAC's entropy coefficient) and its evaluation
protocol: ``run.eval_episodes`` deterministic episodes on a separate env every ``run.eval_every``
agent steps. The run directory gets ``progress.csv`` (env_steps, wall_time_s, eval_return_mean,
eval_return_std, train_return_mean), ``settings.json`` (the config, its overrides, the seed, the
mapped settings, SB3's version, the CPU, the steps made) and, every ``run.checkpoint_every`` steps
and on SIGTERM, a checkpoint (``model.zip`` and the replay buffer) that ``--resume`` continues from.
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

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pytorchrl.config import Config, load_config  # noqa: E402
from pytorchrl.utils.errors import InputError  # noqa: E402

ACTIVATIONS = {"relu": "ReLU", "tanh": "Tanh", "elu": "ELU", "gelu": "GELU"}
COLUMNS = ("env_steps", "wall_time_s", "eval_return_mean", "eval_return_std", "train_return_mean")


def sb3_settings(config: Config) -> dict:
    """SB3's constructor arguments for ``config`` (its algorithm ``sac`` or ``td3``), as plain
    values: ``activation_fn`` is a ``torch.nn`` name and ``action_noise_sigma`` a scale in [-1, 1]
    action units, as pytorchrl's ``exploration_noise`` is (``main`` builds the objects)."""
    algo = config.algorithm
    if algo.name not in ("sac", "td3"):
        raise SystemExit(f"sb3_reference: algorithm.name is {algo.name!r}; this script maps 'sac' and 'td3'")
    if config.env.num_envs != 1:
        raise SystemExit(f"sb3_reference: env.num_envs is {config.env.num_envs}; SB3's reference here steps one env")
    settings = {
        "algo": algo.name,
        "learning_rate": algo.lr,
        "gamma": algo.gamma,
        "batch_size": algo.minibatch_size,
        "buffer_size": config.storage.capacity,
        "learning_starts": algo.start_steps,
        "train_freq": algo.update_every,
        "gradient_steps": max(1, round(algo.update_every * algo.updates_per_step)),
        "tau": algo.tau,
        "policy_kwargs": {"net_arch": list(config.actor.hidden_sizes), "activation_fn": ACTIVATIONS[config.actor.activation]},
    }
    if algo.name == "td3":
        settings.update(
            policy_delay=algo.policy_delay,  # type: ignore[attr-defined]
            target_policy_noise=algo.target_policy_noise,  # type: ignore[attr-defined]
            target_noise_clip=algo.target_noise_clip,  # type: ignore[attr-defined]
            action_noise_sigma=algo.exploration_noise,  # type: ignore[attr-defined]
        )
        if algo.exploration_noise_type != "gaussian":  # type: ignore[attr-defined]
            raise SystemExit("sb3_reference: algorithm.exploration_noise_type must be 'gaussian' here")
    else:
        coef = algo.init_ent_coef  # type: ignore[attr-defined]
        settings["ent_coef"] = f"auto_{coef}" if algo.learn_ent_coef else coef  # type: ignore[attr-defined]
        if algo.target_entropy is not None:  # type: ignore[attr-defined]
            settings["target_entropy"] = algo.target_entropy  # type: ignore[attr-defined]
    return settings


def _build(settings: dict, env, seed: int):
    import numpy as np
    import torch
    from stable_baselines3 import SAC, TD3
    from stable_baselines3.common.noise import NormalActionNoise

    kwargs = {k: v for k, v in settings.items() if k not in ("algo", "action_noise_sigma")}
    kwargs["policy_kwargs"] = dict(kwargs["policy_kwargs"], activation_fn=getattr(torch.nn, kwargs["policy_kwargs"]["activation_fn"]))
    if settings["algo"] == "td3":
        half_range = (env.action_space.high - env.action_space.low) / 2
        kwargs["action_noise"] = NormalActionNoise(np.zeros_like(half_range), settings["action_noise_sigma"] * half_range)
        return TD3("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **kwargs)
    return SAC("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **kwargs)


def evaluate(model, env, episodes: int) -> tuple[float, float]:
    import numpy as np

    returns = []
    for _ in range(episodes):
        obs, _ = env.reset()
        done, total = False, 0.0
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return float(np.mean(returns)), float(np.std(returns))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config")
    ap.add_argument("--steps", type=int, default=None, help="agent steps (default: the config's run.target_steps)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True, help="run directory")
    ap.add_argument("--resume", action="store_true", help="continue from the run directory's checkpoint")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1: one process per core)")
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE config overrides, as pytorchrl train takes them")
    args = ap.parse_args()

    import gymnasium as gym
    import stable_baselines3
    import torch
    from stable_baselines3 import SAC, TD3
    from stable_baselines3.common.callbacks import BaseCallback

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
    out.mkdir(parents=True, exist_ok=True)
    env = gym.make(config.env.env_id, **config.env.env_kwargs)
    eval_env = gym.make(config.env.env_id, **(config.env.eval_env_kwargs or config.env.env_kwargs))
    eval_env.reset(seed=args.seed + 10_000)
    progress = out / "progress.csv"
    if args.resume:
        cls = TD3 if settings["algo"] == "td3" else SAC
        model = cls.load(out / "model.zip", env=env, device="cpu")
        model.load_replay_buffer(out / "replay_buffer.pkl")
        elapsed = json.loads((out / "settings.json").read_text())["wall_time_s"]
        # rows past the checkpoint are dropped: the resumed run writes them again
        rows = [r for r in csv.DictReader(progress.open()) if int(r["env_steps"]) <= model.num_timesteps]
    else:
        if progress.exists():
            raise SystemExit(f"sb3_reference: {progress} exists; pass --resume to continue it, or another --out")
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
        model.save_replay_buffer(out / "replay_buffer.pkl")
        meta = {"config": config_label, "overrides": args.overrides, "seed": args.seed, "steps": steps, "settings": settings, "sb3": sb3_version, "machine": machine}
        (out / "settings.json").write_text(json.dumps({**meta, "env_steps": model.num_timesteps, "wall_time_s": time.perf_counter() - started}, indent=1))

    class Every(BaseCallback):
        def _on_step(self) -> bool:
            n = self.model.num_timesteps
            if n % config.run.eval_every == 0:
                mean, std = evaluate(self.model, eval_env, config.run.eval_episodes)
                infos = self.model.ep_info_buffer
                train = sum(e["r"] for e in infos) / len(infos) if infos else ""
                with progress.open("a", newline="") as f:
                    csv.DictWriter(f, COLUMNS).writerow(dict(zip(COLUMNS, (n, round(time.perf_counter() - started, 3), mean, std, train))))
                print(f"{n} steps, {time.perf_counter() - started:.0f} s: eval {mean:.1f} +- {std:.1f}", flush=True)
            if config.run.checkpoint_every and n % config.run.checkpoint_every == 0:
                checkpoint()
            return not stop["asked"]

    model.learn(steps - model.num_timesteps, callback=Every(), reset_num_timesteps=False)
    checkpoint()
    print(f"sb3_reference: {model.num_timesteps} steps{' (stopped by SIGTERM)' if stop['asked'] else ''}; checkpoint in {out}")


if __name__ == "__main__":
    main()
