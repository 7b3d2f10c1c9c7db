"""Evaluate a saved policy: ``pytorchrl evaluate RUN_DIR|CHECKPOINT``."""

from __future__ import annotations

import contextlib
import math
import numbers
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pytorchrl.agent.storages.on_policy.demos import EpisodeRecorder
from pytorchrl.config import Config, apply_overrides, load_run_config
from pytorchrl.config_applicability import IgnoredConfigKeysWarning, inapplicable_keys
from pytorchrl.envs.rendering import opengl_hint
from pytorchrl.learner import Learner
from pytorchrl.utils.checkpoint import META_FILE, RUN_STATE_KEYS, load_checkpoint, load_newest_checkpoint
from pytorchrl.utils.errors import CheckpointError, InputError
from pytorchrl.utils.paths import atomic_file, check_output_dir, make_dir

#: evaluation plays the local collection worker's test envs in this process, so a run is rebuilt
#: without its remote workers and inference servers (a run trained on a cluster evaluates on a
#: laptop, without Ray) and without its Prometheus endpoint (the training run may hold the port);
#: put after the user's overrides
EVALUATION_LAYOUT = (
    "scheme.num_col_workers=0", "scheme.num_grad_workers=0", "scheme.inference=local", "scheme.col_communication=synchronous",
    "scheme.grad_communication=synchronous", "scheme.update_execution=centralised", "run.prometheus_port=null",
)


def evaluate_checkpoint(
    path: str | Path, *, episodes: int = 10, video_dir: str | Path | None = None, overrides: list[str] | tuple[str, ...] = (),
    on_episode: Callable[[list[float]], None] | None = None, demos_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Returns of the policy in a run directory (newest checkpoint) or checkpoint, deterministic
    unless the run's config sets ``run.eval_deterministic: false``.

    :param path: a run directory or one of its ``checkpoints/step_N`` directories.
    :param episodes: number of episodes.
    :param video_dir: if given, record one episode as an animated GIF there.
    The run is rebuilt in this process alone (:data:`EVALUATION_LAYOUT`, :func:`evaluation_state`):
    its episodes are those the full layout would play, with the same weights, observation
    statistics and test envs.

    :param overrides: dotted ``key=value`` changes to the run's config, e.g. the same policy on
        sticky actions (``env.atari.repeat_action_probability=0.25``) or with argmax actions
        (``run.eval_deterministic=true``); one that changes a key the checkpoint fixes (its
        network, algorithm or observations: :data:`~pytorchrl.config_applicability.TRAINED_KEYS`)
        is refused in one line.
    :param on_episode: progress: called with ``[]`` when the episodes start, then with the
        returns so far after each one (e.g. :class:`~pytorchrl.logging.writers.EvaluationProgress`).
    :param demos_dir: if given, write the episodes there as demonstrations (``demo_NNN.npz``,
        numbered after the files already there; :mod:`pytorchrl.agent.storages.on_policy.demos`).
    """
    if isinstance(episodes, bool) or not isinstance(episodes, numbers.Integral) or episodes < 1:  # numpy's integers too
        raise InputError(f"evaluate_checkpoint(episodes={episodes!r}): the number of episodes must be an integer of at least 1")
    path = check_output_dir(path, "evaluate", must_exist=True, writable=False)  # a file, a missing or too long path: one line
    made = []  # output directories made here: removed again (if still empty) when the evaluation fails
    for directory, option in ((video_dir, "--video"), (demos_dir, "--save-demos")):
        if directory is not None:  # before the episodes, not after them: made now, as checks cannot foresee every failure
            check_output_dir(directory, option)
            if not Path(directory).exists():
                make_dir(Path(directory), option)
                made.append(Path(directory))
    try:
        if video_dir is not None:
            _pillow()
        learner, checkpoint, meta, config = _load(path, overrides, "evaluate")
        try:
            if demos_dir is not None and config.env.normalize_obs:
                raise InputError(
                    f"--save-demos: the run {str(checkpoint.parent.parent)!r} normalises its observations (env.normalize_obs = true); demonstrations "
                    "hold the env's own observations, and algorithm.demos needs env.normalize_obs = false"
                )
            recorder = EpisodeRecorder() if demos_dir is not None else None
            deterministic = config.run.eval_deterministic
            render = _render_env(learner) if video_dir is not None else None  # an env that cannot render fails before the episodes
            if on_episode is not None:
                on_episode([])
            returns = learner.scheme.evaluate(episodes, deterministic, on_episode, recorder)
            successes = list(learner.scheme.eval_successes)  # goal envs' info["is_success"]; empty for the others
            video = _record_gif(learner, render, Path(video_dir), deterministic) if render is not None and video_dir is not None else None
        finally:
            learner.close()
    except BaseException:
        _remove_empty(made)
        raise
    mean = sum(returns) / len(returns)
    result = {
        "checkpoint": str(checkpoint),
        "env_steps": meta.get("env_steps"),
        "episodes": episodes,
        "return_mean": mean,
        "return_std": math.sqrt(sum((r - mean) ** 2 for r in returns) / len(returns)),
        "returns": returns,
    }
    if successes:
        result["success_rate"] = sum(successes) / len(successes)
    if video is not None:
        result["video"] = str(video)
    if recorder is not None and demos_dir is not None:
        result["demos"] = [str(p) for p in recorder.save(Path(demos_dir), config.env.env_id)]
    return result


def _remove_empty(directories: list[Path]) -> None:
    """Remove the output directories a failed evaluation made, where nothing was written into them."""
    for directory in directories:
        with contextlib.suppress(OSError):
            directory.rmdir()


def load_learner(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Learner:
    """The trained policy of a run directory (its newest readable checkpoint) or of one of its
    checkpoints, rebuilt in this process as ``evaluate`` rebuilds it (:data:`EVALUATION_LAYOUT`):
    ``learner.predict(obs)`` acts, ``learner.scheme.evaluate(n)`` plays episodes; close it after.

    :param overrides: dotted ``key=value`` changes to the run's config, as ``evaluate`` takes them.
    :raises CheckpointError: no readable checkpoint, or one that does not fit its config.
    :raises InputError: a path that does not exist, or is not a run directory or a checkpoint.
    """
    learner, _, _, _ = _load(check_output_dir(path, "load_learner", must_exist=True, writable=False), overrides, "load_learner")
    return learner


def _load(path: Path, overrides: list[str] | tuple[str, ...], what: str) -> tuple[Learner, Path, dict[str, Any], Config]:
    """The one-process learner of a run directory or checkpoint at ``path``, its checkpoint's
    directory and metadata, and its config (``what``: the command or function, for messages)."""
    if (path / META_FILE).is_file():
        checkpoint, run_dir = path, path.parent.parent
        state, meta = load_checkpoint(path, RUN_STATE_KEYS)
    elif path.is_dir():
        run_dir = path
        if not (path / "config.yaml").is_file() and not (path / "checkpoints").is_dir():
            hint = f"; the run directory above it is {str(path.parent)!r}" if (path.parent / "config.yaml").is_file() else ""
            raise CheckpointError(f"{what}: {str(path)!r} is neither a run directory (no config.yaml, no checkpoints/) nor a checkpoint directory (no meta.json){hint}")
        checkpoint, state, meta = load_newest_checkpoint(path / "checkpoints")
    else:
        raise CheckpointError(f"{what}: {str(path)!r} is neither a run directory nor a checkpoint directory")
    config_path = run_dir / "config.yaml"
    if not config_path.exists():  # one of another kind: load_run_config names its kind
        raise CheckpointError(f"{str(config_path)!r} is missing: cannot rebuild the policy of {str(checkpoint)!r}")
    config = load_run_config(run_dir, [*overrides, *EVALUATION_LAYOUT])
    with warnings.catch_warnings():  # keys the one-process layout does not use (scheme.ray.*, ...): they did apply to the run
        warnings.simplefilter("ignore", IgnoredConfigKeysWarning)
        learner = Learner.from_config(config, progress=False)
    try:
        _warn_unused_overrides(overrides, config, learner, what)  # the user's own, named
        learner.load_state(evaluation_state(state), where=checkpoint, meta=meta)
    except BaseException:
        learner.close()
        raise
    return learner, checkpoint, meta, config


#: the ``run.*`` keys an evaluation reads (the rest are training's: budget, intervals, checkpoints)
EVALUATION_RUN_KEYS = ("eval_deterministic", "device", "torch_threads", "seed")


def _warn_unused_overrides(overrides: list[str] | tuple[str, ...], config: Config, learner: Learner, what: str) -> None:
    """One warning naming the keys given to an evaluation that it does not read: those the
    config's rules find do not apply to the run (:func:`inapplicable_keys`), and for ``evaluate``
    training's own ``run.*`` keys (``run.eval_episodes``: ``--episodes`` sets that). The keys the
    one-process layout sets, which applied to the training run, are not named."""
    given = _dotted_keys(apply_overrides({}, list(overrides)))
    envs = learner.scheme.collection_workers.local_worker.acting_envs()
    ignored = {key for keys, _ in inapplicable_keys(config, envs.observation_space) for key in keys}
    unused = [k for k in given if k in ignored or (what == "evaluate" and k.startswith("run.") and k[4:] not in EVALUATION_RUN_KEYS)]
    if unused:
        hint = " (--episodes sets how many episodes)" if "run.eval_episodes" in unused else ""
        verb = "does not apply to an evaluation and is" if len(unused) == 1 else "do not apply to an evaluation and are"
        warnings.warn(f"{what}: {', '.join(unused)} {verb} ignored{hint}", IgnoredConfigKeysWarning, stacklevel=3)


def _dotted_keys(raw: dict, prefix: str = "") -> list[str]:
    """The dotted keys a nested dict of overrides sets, in order (a section given whole counts as its keys)."""
    out: list[str] = []
    for key, value in raw.items():
        dotted = f"{prefix}{key}"
        out += _dotted_keys(value, f"{dotted}.") if isinstance(value, dict) and value else [dotted]
    return out


#: a video stops after this many frames (an Atari game can last 27,000 agent steps)
MAX_VIDEO_FRAMES = 5_000


def evaluation_state(state: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's state for :data:`EVALUATION_LAYOUT`: the remote workers' states are left out
    (the one-process layout has none to load them into) and so is a checkpointed replay buffer.
    When the driver's collection worker did not collect (remote collection workers did, or
    remote gradient workers' ones), it gets the remote workers' merged observation statistics
    (the merge over every remote gradient worker's; a checkpoint from before the merge: the
    first remote worker's), the ones the full layout
    evaluates with
    (:meth:`~pytorchrl.scheme.collection.collection_worker_set.CollectionWorkerSet.evaluate`);
    with ``run.eval_parallel``, the evaluation worker's test envs and evaluation stream."""
    scheme = state.get("scheme")
    if not isinstance(scheme, dict) or not isinstance(scheme.get("local_gradient_worker"), dict):
        return state  # not a scheme's state: load_state names what does not match
    master = {k: v for k, v in scheme["local_gradient_worker"].items() if k != "replay_buffer"}
    collection = master.get("collection")
    if isinstance(collection, dict) and isinstance(collection.get("local"), dict):
        local = dict(collection["local"])
        if "envs" not in local:
            replicas = scheme.get("remote_gradient_workers") or []
            sets = [  # the replicas' merged statistics first (a checkpoint from before them: a replica's)
                {"merged_statistics": scheme.get("merged_statistics")}, collection,
                *(r["collection"] for r in replicas if isinstance(r, dict) and isinstance(r.get("collection"), dict)),
            ]
            statistics = next((s for s in map(_collected_statistics, sets) if s is not None), None)
            if statistics is not None:
                local["envs"] = {"obs_rms": statistics}  # statistics only: the train envs start afresh
        evaluator = collection.get("evaluator")
        if isinstance(evaluator, dict):  # run.eval_parallel: its evaluation worker's test envs and stream are the run's
            local.update({key: evaluator[key] for key in ("test_envs", "eval_rng") if key in evaluator})
        master["collection"] = {"local": local}
    return {**state, "scheme": {"local_gradient_worker": master}}


def _collected_statistics(collection: dict[str, Any]) -> Any:
    """The observation statistics of a collection set's state: its remote workers' merged ones
    (a set whose local worker collects has none), else its collecting local worker's or its first
    remote worker's (None without normalisation)."""
    merged = collection.get("merged_statistics")
    if isinstance(merged, dict) and "obs_rms" in merged:
        return merged["obs_rms"]
    workers = [collection.get("local"), *collection.get("remote", [])]
    return next((w["envs"]["obs_rms"] for w in workers if isinstance(w, dict) and isinstance(w.get("envs"), dict) and "obs_rms" in w["envs"]), None)


def _pillow() -> Any:
    """PIL's ``Image`` module, which writes the GIF (one line, before any episode, when missing)."""
    try:
        from PIL import Image
    except ImportError:
        raise InputError("--video needs Pillow: pip install pillow pygame (pygame renders classic control; in a checkout: pip install -e '.[video]')") from None
    return Image


def _render_env(learner: Learner) -> tuple[Any, Any, Any]:
    """An env of the run's that renders rgb_array frames, reset (seed 0): the env, its first
    observation and its first frame. Rendering fails here, as one line, or not at all."""
    import gymnasium as gym

    # frames are drawn off screen: pygame's dummy video driver needs no display (without one,
    # SDL's default prints "XDG_RUNTIME_DIR is invalid" on stderr, though rendering works)
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    envs = learner.scheme.collection_workers.local_worker.envs
    assert envs is not None
    try:
        env = envs.make_render_env()
        obs, _ = env.reset(seed=0)
        return env, obs, env.render()
    except (gym.error.DependencyNotInstalled, ImportError) as exc:
        raise InputError(f"--video: env {envs.env_id!r} cannot render ({exc}); try pip install pygame pillow (in a checkout: pip install -e '.[video]')") from None
    except Exception as exc:  # OpenGL failing in the first render: mujoco.FatalError, PyOpenGL errors, a missing libOSMesa
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        if isinstance(exc, TypeError) and "render_mode" in reason:  # an env that draws no frames: no OpenGL to mend
            raise InputError(f"--video: env {envs.env_id!r} does not render: it takes no render_mode ({reason})") from None
        raise InputError(f"--video: env {envs.env_id!r} cannot render ({reason}); {opengl_hint()}") from None


def _record_gif(learner: Learner, render: tuple[Any, Any, Any], video_dir: Path, deterministic: bool = True) -> Path:
    """One episode (``deterministic``: the policy's mode; else sampled) (at most :data:`MAX_VIDEO_FRAMES` frames) of the
    :func:`_render_env` ``render`` written to ``video_dir/episode.gif``, preprocessed as in evaluation."""
    Image = _pillow()
    worker = learner.scheme.collection_workers.local_worker
    envs = worker.envs
    assert envs is not None
    env, obs, first = render
    frames = [first]
    done, rhs = False, None  # rhs: a recurrent actor's state, carried through the episode
    with torch.no_grad():  # as every evaluation acts: a continuous policy's action is an output of its graph
        while not done and len(frames) <= MAX_VIDEO_FRAMES:
            action, rhs = worker.policy.evaluation_step(envs.single_obs(obs), rhs, None, deterministic)
            obs, _, terminated, truncated, _ = env.step(envs.env_actions(action[0].cpu().numpy()))
            frames.append(env.render())
            done = terminated or truncated
    env.close()
    video_dir.mkdir(parents=True, exist_ok=True)
    out = video_dir / "episode.gif"
    images = [Image.fromarray(np.asarray(f)) for f in frames]
    with atomic_file(out, what="--video") as f:  # a full disk leaves the earlier episode.gif, not half of this one
        images[0].save(f, format="GIF", save_all=True, append_images=images[1:], duration=20, loop=0)
    return out
