"""A config's protocol in words: what a step is and how a run is evaluated.

Results compare only on one protocol: agent steps or frames, sticky actions or not, deterministic
or sampled evaluation, and over how many episodes. :func:`describe_protocol` says it from the
config itself, so it cannot drift from what a run does: the results table's "our protocol"
column (``scripts/results_table.py``) and every shipped config's ``# Protocol:`` header line
(``tests/test_config.py`` checks that the two agree) are its text.
"""

from __future__ import annotations

from pytorchrl.config import Config
from pytorchrl.envs.atari import is_atari_id


def describe_protocol(config: Config) -> str:
    """One line, e.g. ``agent steps; deterministic evaluation, 10 episodes every 4,096 steps``.

    For an ALE id it also says what a step is in frames and the preprocessing that changes what
    a score means (sticky actions, no-op starts, the game's frame limit, and what training envs
    change: life-loss episode ends, clipped rewards); evaluation plays whole games, raw scores.
    """
    env, run = config.env, config.run
    parts: list[str] = []
    atari = is_atari_id(env.env_id)
    if atari:
        a = env.atari
        sticky = f"sticky actions {a.repeat_action_probability:g}" if a.repeat_action_probability > 0 else "no sticky actions"
        parts.append(f"agent steps of {a.frame_skip} frames")
        game = [sticky, f"up to {a.noop_max} no-ops at a reset" if a.noop_max else "no no-op starts", f"games cut at {a.max_episode_frames:,} frames"]
        if a.full_action_space:
            game.append("all 18 actions")
        parts.append(", ".join(game))
        training = [what for on, what in ((a.terminal_on_life_loss, "a life lost ends an episode"), (a.clip_rewards, "rewards clipped to their sign")) if on]
        if training:
            parts.append("training envs: " + ", ".join(training))
    else:
        parts.append("agent steps" if env.max_episode_steps is None else f"agent steps, episodes cut at {env.max_episode_steps:,} steps")
    mode = "deterministic" if run.eval_deterministic else "sampled-action"
    episodes = f"{run.eval_episodes} whole game{'s' if run.eval_episodes > 1 else ''} (raw scores)" if atari else (
        f"{run.eval_episodes} episode{'s' if run.eval_episodes > 1 else ''}"
    )
    when = f"every {run.eval_every:,} steps" if run.eval_every else "at the end"
    evaluation = f"{mode} evaluation, {episodes} {when}"
    if env.eval_env_kwargs is not None and env.eval_env_kwargs != env.env_kwargs:
        evaluation += f" (test envs made with {env.eval_env_kwargs})"
    parts.append(evaluation)
    return "; ".join(parts)
