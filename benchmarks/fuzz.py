"""Seeded random mutations of the shipped configs, met the way a user meets them.

``python -m benchmarks.fuzz --seed 7 --mutations 300 --cli 20`` mutates every shipped config
(wrong types, non-finite and out-of-range numbers, unknown keys, missing or empty sections,
demonstrations that do not fit (``algorithm.demos``: missing files, files that are not
demonstrations, another env's shapes, shares over 1, a replay algorithm),
duplicate keys, bad env ids and env kwargs, bad devices; YAML aliases that recurse, expand a
billion-fold or are plain shared anchors, nesting too deep, lists where a section belongs at any
depth; limits that bound work: hundreds of layers, no-op and frame counts, CNN channels,
recurrent widths; rounds of collection larger than the whole budget; overrides YAML cannot
parse; run directories, ``--resume`` and ``evaluate`` paths of the wrong kind), loads each
in-process (and builds the scheme of those without remote workers; a path mutation goes through
:func:`pytorchrl.cli.main` in-process), and trains a sample of the cheap ones through the CLI.
Every outcome must be a run that trains (finite weights in its checkpoint) or a refusal: exit 2
with one ``pytorchrl: error:`` line, no traceback and nothing written (no run directory; a path
fixture as it was). Anything else is a failure, printed with its mutation.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import os
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
    "yaml_alias", "list_at_depth", "work_limit", "oversized_rollout", "bad_override", "path_kind", "bad_demos",
)
#: configs cheap enough to train through the CLI in a few seconds
CHEAP = ("CartPole-v1", "Pendulum-v1", "Acrobot-v1")
#: the budget of every training run the fuzzer starts
BUDGET = ["run.target_steps=4096", "run.max_time_s=60", "run.eval_episodes=2"]
#: run directories, --resume and evaluate paths of the wrong kind (see :func:`path_argv`)
PATH_KINDS = (
    "file", "under_file", "dev_null", "long_name", "progress_dir", "fifo_progress", "checkpoints_file", "tb_file", "step_file",
    "resume_missing", "resume_file", "resume_list_config", "resume_scalar_config", "resume_alias_config", "resume_config_dir",
    "evaluate_file", "evaluate_missing", "evaluate_long_name", "video_file",
)
#: sections where a mapping belongs, at every depth
SECTIONS = (
    "env", "actor", "storage", "algorithm", "scheme", "run", "env.atari", "actor.recurrent", "scheme.col_worker_resources",
    "scheme.grad_worker_resources", "scheme.ray",
)


@dataclasses.dataclass
class Mutation:
    config: str
    kind: str
    what: str
    text: str
    #: dotted overrides given on the command line after the config
    overrides: list[str] = dataclasses.field(default_factory=list)
    #: one of :data:`PATH_KINDS` (the config itself is then unchanged)
    path: str = ""


@dataclasses.dataclass
class Outcome:
    mutation: Mutation
    result: str  # accepted | refused | trained | failure
    detail: str = ""


def shipped_configs() -> list[Path]:
    return sorted(p for p in CONFIGS.rglob("*.yaml") if p.parent.name != "tune")


def _keys(raw: dict[str, Any]) -> list[tuple[str, str]]:
    """Every (section, key) of the schema for this config's algorithm."""
    from pytorchrl.agent.algorithms import ALGORITHMS
    from pytorchrl.config import Config

    name = (raw.get("algorithm") or {}).get("name", "ppo") if isinstance(raw.get("algorithm"), dict) else "ppo"
    out = []
    for section in dataclasses.fields(Config):
        cls: Any = ALGORITHMS.get(name, ALGORITHMS["ppo"]).config_class if section.name == "algorithm" else type(section.default)
        out += [(section.name, f.name) for f in dataclasses.fields(cls) if not dataclasses.is_dataclass(f.type if isinstance(f.type, type) else None)]
    return out


def mutate(path: Path, rng: random.Random) -> Mutation:
    """One random mutation of the config at ``path``."""
    raw = yaml.safe_load(path.read_text()) or {}
    kind = rng.choice(KINDS)
    if kind in ("yaml_alias", "list_at_depth", "work_limit", "oversized_rollout", "bad_override", "path_kind", "bad_demos"):
        return _mutate_structure(path, raw, kind, rng)
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


#: values past the limits that bound a run's work (not only its memory); each must be refused
WORK_LIMITS: tuple[tuple[str, Any], ...] = (
    ("actor.hidden_sizes", [1] * 65), ("actor.hidden_sizes", [8] * 3_000), ("actor.hidden_sizes", [1] * 100_000),
    ("algorithm.head_hidden_sizes", [8] * 65), ("env.atari.noop_max", 10**8), ("env.atari.noop_max", 1_001),
    ("env.atari.frame_skip", 10**6), ("env.atari.frame_stack", 10_000), ("env.atari.max_episode_frames", 10**12),
    ("env.atari.screen_size", 100_000), ("env.max_episode_steps", 10**12), ("actor.cnn_channels", [4_096] * 3),
    ("actor.cnn_channels", [16] * 100), ("actor.recurrent", {"type": "lstm", "hidden_size": 16_384}),
    ("actor.recurrent", {"type": "gru", "hidden_size": 4_096, "num_layers": 16}), ("actor.recurrent", {"type": "lstm", "hidden_size": 2_048, "num_layers": 8}),
)
#: rounds of collection larger than the whole budget
ROLLOUTS: tuple[tuple[str, Any], ...] = (
    ("env.num_envs", 65_536), ("storage.num_steps", 1_000_000), ("scheme.num_col_workers", 10_000), ("algorithm.update_every", 1_000_000),
    ("run.target_steps", 1),
)
#: overrides YAML cannot parse, or that put a list where a section belongs, or recurse
BAD_OVERRIDES = (
    "env.env_kwargs={a: 1", "actor.hidden_sizes=[64, 64", "env.env_id='CartPole-v1", 'run.device="cpu', "env.env_kwargs={a: [1}",
    "algorithm.lr=[3e-4", "env.atari=[1, 2]", "actor.recurrent=[gru]", "scheme.ray=[1]", "env.env_kwargs=&a [*a]",
    "env.env_kwargs={a: 1, a: 2}", "env.env_kwargs={x: " + "[" * 100 + "]" * 100 + "}",
)
#: demonstrations (algorithm.demos) that do not fit: (config, the demos section); paths are absolute
CHAIN_DEMOS = CONFIGS / "ppo" / "demos" / "chain"
BAD_DEMOS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("ppo/cartpole.yaml", {"enabled": True, "path": str(CHAIN_DEMOS)}),  # observations of another env's shape
    ("ppo/cartpole.yaml", {"enabled": True, "path": str(CHAIN_DEMOS / "missing.npz")}),
    ("ppo/cartpole.yaml", {"enabled": True, "path": str(CONFIGS / "ppo" / "cartpole.yaml")}),  # not a demonstration
    ("ppo/cartpole.yaml", {"enabled": True, "path": str(CONFIGS / "ppo")}),  # a directory without any
    ("ppo/cartpole.yaml", {"enabled": True}),
    ("ppo/ppod_chain.yaml", {"enabled": True, "path": str(CHAIN_DEMOS), "rho": 0.8, "phi": 0.5}),
    ("ppo/ppod_chain.yaml", {"enabled": True, "path": str(CHAIN_DEMOS), "buffer_size": -1}),
    ("dqn/cartpole.yaml", {"enabled": True, "path": str(CHAIN_DEMOS)}),  # a replay algorithm has no demos
)
_LAUGHS = "{x: [&a0 [" + ", ".join(["lol"] * 10) + "], " + ", ".join(f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)) + "]}"
#: alias snippets put in the YAML text: (dotted key, snippet) pairs, anchors before their aliases
ALIASES: tuple[tuple[tuple[str, str], ...], ...] = (
    (("env.env_kwargs", "&r {loop: *r}"),), (("actor.hidden_sizes", "&r [64, *r]"),), (("env.env_kwargs", _LAUGHS),),
    (("env.env_kwargs", "{x: " + "[" * 200 + "]" * 200 + "}"),),
    (("scheme.col_worker_resources", "&w {num_cpus: 1}"), ("scheme.grad_worker_resources", "*w")),  # shared anchors: accepted
    (("env.env_kwargs", "&kw {}"), ("env.eval_env_kwargs", "*kw")),
)


def _set(raw: dict, dotted: str, value: Any) -> None:
    """Set ``raw[a][b]... = value`` (sections created or replaced by mappings), the key moved last."""
    *sections, last = dotted.split(".")
    node = raw
    for part in sections:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node.pop(last, None)
    node[last] = value


def _flow(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=10**9).strip().removesuffix("...").strip()


def _mutate_structure(path: Path, raw: dict, kind: str, rng: random.Random) -> Mutation:
    """The mutations of YAML structure, work, budget, override text and paths (see the module doc)."""
    name, text = str(path.relative_to(CONFIGS)), path.read_text()
    if kind == "path_kind":  # always of a cheap local config: a path that is not refused trains
        cheap = [p for p in shipped_configs() if any(e in p.read_text() for e in CHEAP) and "num_col_workers" not in p.read_text()]
        config, fixture = rng.choice(cheap), rng.choice(PATH_KINDS)
        return Mutation(str(config.relative_to(CONFIGS)), kind, f"path = {fixture}", config.read_text(), path=fixture)
    if kind == "bad_demos":
        demo_config, demos = rng.choice(BAD_DEMOS)
        raw = yaml.safe_load((CONFIGS / demo_config).read_text()) or {}
        _set(raw, "algorithm.demos", demos)
        return Mutation(demo_config, kind, f"algorithm.demos = {demos!r}", yaml.safe_dump(raw, sort_keys=False))
    if kind == "bad_override":
        item = rng.choice(BAD_OVERRIDES)
        return Mutation(name, kind, item, text, overrides=[item])
    if kind == "list_at_depth":
        section, value = rng.choice(SECTIONS), rng.choice([[1, 2], [], [{"a": 1}], "abc", 5])
        if rng.random() < 0.5:
            return Mutation(name, kind, f"{section}={_flow(value)}", text, overrides=[f"{section}={_flow(value)}"])
        _set(raw, section, value)
        return Mutation(name, kind, f"{section} = {value!r}", yaml.safe_dump(raw, sort_keys=False))
    if kind == "yaml_alias":
        snippets = rng.choice(ALIASES)
        for i, (key, _) in enumerate(snippets):
            _set(raw, key, f"__FUZZ{i}__")
        text = yaml.safe_dump(raw, sort_keys=False)
        for i, (_, snippet) in enumerate(snippets):
            text = text.replace(f"__FUZZ{i}__", snippet)
        return Mutation(name, kind, "; ".join(f"{k}: {s[:40]}" for k, s in snippets), text)
    key, value = rng.choice(WORK_LIMITS if kind == "work_limit" else ROLLOUTS)
    _set(raw, key, value)
    shown = f"[{value[0]}] * {len(value)}" if isinstance(value, list) else repr(value)
    return Mutation(name, kind, f"{key} = {shown}", yaml.safe_dump(raw, sort_keys=False))


_FIFO = "(a named pipe)"


def path_argv(kind: str, config: Path, work: Path) -> list[str]:
    """Make the fixture of the path kind ``kind`` (:data:`PATH_KINDS`) under ``work`` and return
    the ``pytorchrl`` arguments that meet it."""
    p = work / "p"
    if kind in ("file", "under_file", "resume_file", "evaluate_file", "video_file"):
        p.write_text("not a directory\n")
    elif kind not in ("dev_null", "long_name", "resume_missing", "evaluate_missing", "evaluate_long_name"):
        p.mkdir()
    # what the fixture directory holds: name -> its text, None for a directory, _FIFO for a named pipe
    inside: dict[str, dict[str, str | None]] = {
        "progress_dir": {"progress.csv": None}, "fifo_progress": {"progress.csv": _FIFO}, "checkpoints_file": {"checkpoints": ""},
        "tb_file": {"tb": ""}, "step_file": {"checkpoints": None, "checkpoints/step_8": ""}, "resume_list_config": {"config.yaml": "- 1\n- 2\n"},
        "resume_scalar_config": {"config.yaml": "5\n"}, "resume_alias_config": {"config.yaml": "env: &x {env_kwargs: *x}\n"},
        "resume_config_dir": {"config.yaml": None},
    }
    for name, content in inside.get(kind, {}).items():
        if content is None:
            (p / name).mkdir()
        elif content is _FIFO:
            os.mkfifo(p / name)
        else:
            (p / name).write_text(content)
    long = str(work / ("x" * 300))
    train = ["train", str(config), *BUDGET, "--quiet", "--run-dir"]
    if kind.startswith("resume_"):
        return ["train", "--resume", str(work / "missing" if kind == "resume_missing" else p), "--quiet"]
    if kind.startswith("evaluate_") or kind == "video_file":
        target = {"evaluate_missing": str(work / "missing"), "evaluate_long_name": long, "video_file": str(work)}.get(kind, str(p))
        return ["evaluate", target, "--episodes", "1", *(["--video", str(p)] if kind == "video_file" else [])]
    return [*train, {"under_file": str(p / "run"), "dev_null": os.devnull, "long_name": long}.get(kind, str(p))]


def _snapshot(work: Path) -> dict[str, tuple[int, int]]:
    """``{relative path: (file type, size)}`` of everything under ``work`` (links not followed)."""
    out = {}
    for root, dirs, files in os.walk(work):
        for entry in (*dirs, *files):
            st = os.lstat(os.path.join(root, entry))
            out[os.path.relpath(os.path.join(root, entry), work)] = (st.st_mode >> 12, st.st_size if not os.path.isdir(os.path.join(root, entry)) else 0)
    return out


def _judge(mutation: Mutation, code: int, stderr: str, wrote: list[str]) -> Outcome:
    """Exit 2 with one line, no traceback and nothing written is a refusal; exit 0 a run (not for a
    path mutation: every one of them is bad input); anything else a failure."""
    errors = [line for line in stderr.splitlines() if line.startswith("pytorchrl: error:")]
    if "Traceback" in stderr:
        return Outcome(mutation, "failure", f"exit {code} with a traceback: {stderr.strip().splitlines()[-1]}")
    if code == 2 and len(errors) == 1:
        return Outcome(mutation, "failure", f"refused, but wrote {wrote[:3]}: {errors[0]}") if wrote else Outcome(mutation, "refused", errors[0])
    if code == 0 and not mutation.path:
        return Outcome(mutation, "trained")
    return Outcome(mutation, "failure", f"exit {code}: {(errors or stderr.strip().splitlines() or [''])[-1]}")


def _check_path_in_process(mutation: Mutation, directory: Path) -> Outcome:
    """A path mutation through :func:`pytorchrl.cli.main`, in this process."""
    from pytorchrl.cli import main

    config = directory / "config.yaml"
    config.write_text(mutation.text)
    argv = path_argv(mutation.path, config, directory)
    before, err = _snapshot(directory), io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            code = main(argv)
    except BaseException as exc:  # whatever escapes main (a SystemExit too) is the finding
        return Outcome(mutation, "failure", f"{type(exc).__name__}: {str(exc).strip()[:200]}")
    after = _snapshot(directory)
    return _judge(mutation, code, err.getvalue(), sorted(k for k in after if after[k] != before.get(k)))


def check_in_process(mutation: Mutation, directory: Path) -> Outcome:
    """Load the mutated config (and build the scheme when it has no remote workers)."""
    from pytorchrl.config import load_config
    from pytorchrl.scheme import build_scheme
    from pytorchrl.utils.errors import InputError

    if mutation.path:
        return _check_path_in_process(mutation, directory)
    path = directory / "config.yaml"
    path.write_text(mutation.text)
    try:
        config = load_config(path, mutation.overrides)
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
    """Train the mutated config through the CLI on a small budget (a path mutation: meet its
    path): exit 0 with finite weights in its final checkpoint, or exit 2 with one line, no
    traceback and nothing written."""
    from pytorchrl.utils.checkpoint import load_newest_checkpoint, nonfinite_tensor

    path, run_dir = directory / "config.yaml", directory / "run"
    path.write_text(mutation.text)
    if mutation.path:
        args = path_argv(mutation.path, path, directory)
    else:
        args = ["train", str(path), *mutation.overrides, *BUDGET, "--run-dir", str(run_dir), "--quiet"]
    before = _snapshot(directory)
    try:
        done = subprocess.run([sys.executable, "-m", "pytorchrl.cli", *args], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return Outcome(mutation, "failure", f"hang: no exit in {timeout_s:.0f} s")
    after = _snapshot(directory)
    outcome = _judge(mutation, done.returncode, done.stderr, sorted(k for k in after if after[k] != before.get(k)))
    if outcome.result == "trained":
        _, state, _ = load_newest_checkpoint(run_dir / "checkpoints")
        bad = nonfinite_tensor(state["scheme"])
        return Outcome(mutation, "failure", f"non-finite {bad}") if bad else outcome
    return outcome


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
        for i, mutation in enumerate(_cli_sample(cheap, cli, rng)):
            work = Path(tmp) / f"cli{i}"
            work.mkdir()
            outcomes.append(check_cli(mutation, work))
    if verbose:
        for o in outcomes:
            if o.result == "failure":
                print(f"FAILURE {o.mutation.config} [{o.mutation.kind}] {o.mutation.what}: {o.detail}")
        print(dict(Counter(o.result for o in outcomes[:mutations])), "in-process;", dict(Counter(o.result for o in outcomes[mutations:])), "through the CLI;",
              sum("traceback" in o.detail for o in outcomes), "tracebacks,", sum(o.detail.startswith("hang") for o in outcomes), "hangs")
    return outcomes


def _cli_sample(cheap: list[Mutation], cli: int, rng: random.Random) -> list[Mutation]:
    """``cli`` of the ``cheap`` mutations: one of each kind first (so every class of input meets
    the CLI), then any."""
    shuffled = rng.sample(cheap, len(cheap))
    first = list({m.kind: m for m in reversed(shuffled)}.values())[:cli]
    return first + [m for m in shuffled if all(m is not f for f in first)][: cli - len(first)]


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
