"""Seeded random mutations of the shipped configs, met the way a user meets them.

``python -m pytorchrl.fuzz --seed 7 --mutations 300 --cli 20`` mutates every shipped config
(wrong types, non-finite and out-of-range numbers, unknown keys, missing or empty sections,
duplicate keys, bad env ids and env kwargs, bad devices), loads each in-process (and builds the
scheme of those without remote workers), and trains a sample of the cheap ones through the CLI.
Every outcome must be a run that trains (finite weights in its checkpoint) or a refusal: exit 2
with one ``pytorchrl: error:`` line and no traceback. Anything else is a failure, printed with its
mutation.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
KINDS = (
    "wrong_type", "non_finite", "out_of_range", "unknown_key", "missing_section", "empty_section", "duplicate_key",
    "bad_env_id", "bad_env_kwargs", "bad_device",
)
#: configs cheap enough to train through the CLI in a few seconds
CHEAP = ("CartPole-v1", "Pendulum-v1", "Acrobot-v1")


@dataclasses.dataclass
class Mutation:
    config: str
    kind: str
    what: str
    text: str


@dataclasses.dataclass
class Outcome:
    mutation: Mutation
    result: str  # accepted | refused | trained | failure
    detail: str = ""


def shipped_configs() -> list[Path]:
    return sorted(p for p in CONFIGS.rglob("*.yaml") if p.parent.name != "tune")


def _keys(raw: dict[str, Any]) -> list[tuple[str, str]]:
    """Every (section, key) of the schema for this config's algorithm."""
    from pytorchrl.config import ALGORITHM_CONFIGS, Config

    name = (raw.get("algorithm") or {}).get("name", "ppo") if isinstance(raw.get("algorithm"), dict) else "ppo"
    out = []
    for section in dataclasses.fields(Config):
        cls = ALGORITHM_CONFIGS.get(name, ALGORITHM_CONFIGS["ppo"]) if section.name == "algorithm" else section.type
        cls = cls if isinstance(cls, type) else type(section.default)
        out += [(section.name, f.name) for f in dataclasses.fields(cls) if not dataclasses.is_dataclass(f.type if isinstance(f.type, type) else None)]
    return out


def mutate(path: Path, rng: random.Random) -> Mutation:
    """One random mutation of the config at ``path``."""
    raw = yaml.safe_load(path.read_text()) or {}
    kind = rng.choice(KINDS)
    section, key = rng.choice(_keys(raw))
    node = raw.setdefault(section, {}) if isinstance(raw.get(section, {}), dict) else {}
    what = f"{section}.{key}"
    extra = ""
    if kind == "wrong_type":
        node[key] = value = rng.choice(["abc", [1, 2], {"a": 1}, True, "1e-3x"])
    elif kind == "non_finite":
        node[key] = value = rng.choice([float("nan"), float("inf"), float("-inf")])
    elif kind == "out_of_range":
        node[key] = value = rng.choice([-1, 0, -0.5, 1e30, -1e30, 2**70, 10**12])
    elif kind == "unknown_key":
        typo = key[:-1] if len(key) > 2 else key + "x"
        node[typo] = value = 1
        what = f"{section}.{typo}"
    elif kind == "missing_section":
        raw.pop(section, None)
        what, value = section, "(removed)"
    elif kind == "empty_section":
        raw[section] = value = rng.choice([None, {}, [], 5])
        what = section
    elif kind == "duplicate_key":
        value = "(twice)"
        extra = f"\n{section}:\n  {key}: {yaml.safe_dump(node.get(key, 1), default_flow_style=True).strip().removesuffix('...').strip()}\n"
        what = section
    elif kind == "bad_env_id":
        env_id = raw.setdefault("env", {}).get("env_id", "CartPole-v1")
        raw["env"]["env_id"] = value = rng.choice([env_id[:-1], env_id.lower(), "NoSuchEnv-v0", "no_module:make", "ALE/NoGame-v5"])
        what = "env.env_id"
    elif kind == "bad_env_kwargs":
        raw.setdefault("env", {})["env_kwargs"] = value = rng.choice([{"no_such_kwarg": 1}, {"max_episode_steps": -5}, {"render_mode": "bogus"}, [1]])
        what = "env.env_kwargs"
    else:
        raw.setdefault("run", {})["device"] = value = rng.choice(["cuda:3", "tpu", "", "mps", "gpu", "cuda:-1"])
        what = "run.device"
    text = yaml.safe_dump(raw, sort_keys=False) + extra
    return Mutation(str(path.relative_to(CONFIGS)), kind, f"{what} = {value!r}", text)


def check_in_process(mutation: Mutation, directory: Path) -> Outcome:
    """Load the mutated config (and build the scheme when it has no remote workers)."""
    from pytorchrl.config import load_config
    from pytorchrl.scheme import build_scheme
    from pytorchrl.utils.errors import InputError

    path = directory / "config.yaml"
    path.write_text(mutation.text)
    try:
        config = load_config(path)
        if config.scheme.num_col_workers or config.scheme.num_grad_workers:
            return Outcome(mutation, "accepted", "not built (remote workers)")
        build_scheme(config).close()
    except InputError as exc:
        lines = str(exc).strip().splitlines()
        return Outcome(mutation, "refused" if len(lines) == 1 else "failure", lines[0] if lines else "")
    except Exception as exc:
        return Outcome(mutation, "failure", f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")
    return Outcome(mutation, "accepted")


def check_cli(mutation: Mutation, directory: Path, timeout_s: float = 180.0) -> Outcome:
    """Train the mutated config through the CLI on a small budget: exit 0 with finite weights in
    its final checkpoint, or exit 2 with one line and no traceback."""
    from pytorchrl.learner import _nonfinite_tensor
    from pytorchrl.utils.checkpoint import load_newest_checkpoint

    path, run_dir = directory / "config.yaml", directory / "run"
    path.write_text(mutation.text)
    argv = [sys.executable, "-m", "pytorchrl.cli", "train", str(path), "run.target_steps=4096", "run.max_time_s=60", "run.eval_episodes=2",
            "--run-dir", str(run_dir), "--quiet"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return Outcome(mutation, "failure", f"hang: no exit in {timeout_s:.0f} s")
    errors = [line for line in done.stderr.splitlines() if line.startswith("pytorchrl: error:")]
    if "Traceback" in done.stderr:
        return Outcome(mutation, "failure", f"exit {done.returncode} with a traceback: {done.stderr.strip().splitlines()[-1]}")
    if done.returncode == 2 and len(errors) == 1:
        return Outcome(mutation, "refused", errors[0])
    if done.returncode == 0:
        _, state, _ = load_newest_checkpoint(run_dir / "checkpoints")
        bad = _nonfinite_tensor(state["scheme"])
        return Outcome(mutation, "failure" if bad else "trained", f"non-finite {bad}" if bad else "")
    return Outcome(mutation, "failure", f"exit {done.returncode}: {(errors or done.stderr.strip().splitlines() or [''])[-1]}")


def run(seed: int, mutations: int, cli: int, *, verbose: bool = True) -> list[Outcome]:
    """``mutations`` in-process checks, then ``cli`` of the cheap accepted and refused ones through the CLI."""
    import warnings

    warnings.filterwarnings("ignore")
    rng = random.Random(seed)
    paths = shipped_configs()
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(mutations):
            mutation = mutate(rng.choice(paths), rng)
            work = Path(tmp) / f"m{i}"
            work.mkdir()
            outcomes.append(check_in_process(mutation, work))
        cheap = [o.mutation for o in outcomes if any(e in o.mutation.text for e in CHEAP) and "num_col_workers: 2" not in o.mutation.text]
        for i, mutation in enumerate(rng.sample(cheap, min(cli, len(cheap)))):
            work = Path(tmp) / f"cli{i}"
            work.mkdir()
            outcomes.append(check_cli(mutation, work))
    if verbose:
        for o in outcomes:
            if o.result == "failure":
                print(f"FAILURE {o.mutation.config} [{o.mutation.kind}] {o.mutation.what}: {o.detail}")
        print(dict(Counter(o.result for o in outcomes[:mutations])), "in-process;", dict(Counter(o.result for o in outcomes[mutations:])), "through the CLI")
    return outcomes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mutations", type=int, default=300)
    parser.add_argument("--cli", type=int, default=20, help="of them, trained through the CLI")
    args = parser.parse_args()
    outcomes = run(args.seed, args.mutations, args.cli)
    return 1 if any(o.result == "failure" for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
