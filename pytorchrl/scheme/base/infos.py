"""Merging the info dicts of several steps or workers into one (counts summed, lists joined)."""

from __future__ import annotations

import statistics
from typing import Any

#: counts that are summed when infos merge (the other numbers are averaged, lists joined)
_SUMMED = (
    "env_steps", "dropped_batches", "preempted_batches", "lost_batches", "worker_restarts", "env_restarts", "healthy_workers", "num_batches", "num_samples",
)
_JOINED = ("episode_returns", "episode_lengths", "policy_lags")
#: counts a replica reports once, in the info of the step that noticed them
_COUNTS = ("dropped_batches", "preempted_batches", "lost_batches", "worker_restarts")


#: what :func:`count_spent` reads of a step's info: what its collection took, and the counts a
#: replica's step reports once (rollouts dropped, preempted or lost, workers replaced)
_SPENT = ("env_steps", "episode_returns", "episode_lengths", "env_restarts", *_COUNTS)


def under_way_reports(under_way: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The normaliser reports of the calls under way at a checkpoint (their infos): a worker's
    state is read after its call under way (an actor runs its calls in order), so it counts the
    call's report as sent, and the checkpoint's merge must hold it."""
    return [info["new_statistics"] for info in under_way if info.get("new_statistics")]


def spent_state(infos: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What :func:`count_spent` counts of ``infos`` (the calls under way at a checkpoint, and
    those spent but not counted yet): the resumed run counts them with its first step, as the
    run that went on would have; their data and gradients are dropped, as at a reload of the
    master's state."""
    parts = [{key: info[key] for key in _SPENT if key in info} for info in infos]
    return [part for part in parts if part]


def count_spent(info: dict[str, Any], spent: list[dict[str, Any]]) -> None:
    """Add to ``info`` what the collections of ``spent`` infos took, whose data went unused
    (rollouts dropped for policy lag, gradients dropped when the replicas reload the master's
    state): their env steps, the episodes they finished and their env restarts happened all the
    same, so ``env_steps``, ``target_steps`` and the return statistics count them, as do the
    counts their replicas reported once (:data:`_COUNTS`); their lag does not enter
    ``policy_lags`` (what training used). ``info`` then carries a collection's keys (``env_steps``
    and the episode lists), whatever step it is."""
    if not spent:
        return
    for done in spent:
        info["env_steps"] = info.get("env_steps", 0) + done.get("env_steps", 0)
        for key in ("episode_returns", "episode_lengths"):
            info[key] = [*info.get(key, []), *done.get(key, [])]
        for key in ("env_restarts", *_COUNTS):
            if done.get(key):
                info[key] = info.get(key, 0) + done[key]
    spent.clear()


def merge_step_infos(infos: list[dict[str, Any]]) -> dict[str, Any]:
    """One info from the step infos of several gradient workers: counts summed, episode lists
    joined, diagnostics averaged; ``round_end`` when any worker's round ended."""
    merged: dict[str, Any] = {}
    for key in {k for i in infos for k in i}:
        values = [i[key] for i in infos if key in i and i[key] is not None]
        if not values:
            continue
        if key in _SUMMED:
            merged[key] = sum(values)
        elif key in _JOINED:
            merged[key] = [v for vs in values for v in vs]
        elif key in ("round_end", "preempted"):
            merged[key] = any(values)
        elif key == "skipped":
            merged[key] = 1.0 if len(values) == len(infos) else None
        elif key.endswith("_time_s"):
            merged[key] = max(values)
        elif all(isinstance(v, (int, float)) for v in values):
            merged[key] = statistics.fmean(values)
    if merged.get("skipped") is None:
        merged.pop("skipped", None)
    if merged.get("policy_lags"):
        merged["policy_lag_mean"] = statistics.fmean(merged["policy_lags"])
    return merged
