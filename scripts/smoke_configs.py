"""Every shipped config builds its run and takes a few learner steps, without evaluation.

    python scripts/smoke_configs.py [FILTER ...] [--steps 3]

FILTER keeps the configs whose path (under configs/) contains it, e.g. ``sac/`` or ``atari``.
Each config is one line: ``ok`` (its steps and seconds), ``refused`` (a one-line ConfigError or
InputError as the run is built, the answer a user would get: a GPU config on a CPU machine, a
cluster example without its cluster, more workers than this machine's cores) or ``FAIL`` (a
config that does not load, which no machine would run, or anything else: a crash). The exit
status is 1 when any config failed. Remote-worker configs start a private Ray;
Atari configs need ale-py and MuJoCo ones mujoco. Minutes for all of them on 2 cores.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"


def shipped_configs(filters: list[str]) -> list[Path]:
    """The run configs under configs/ (not the search spaces of configs/tune/) matching a filter."""
    paths = sorted(p for p in CONFIGS.glob("*/*.yaml") if p.parent.name != "tune")
    return [p for p in paths if not filters or any(f in str(p.relative_to(CONFIGS)) for f in filters)]


def smoke(path: Path, steps: int) -> tuple[str, str]:
    """``(status, detail)`` of building ``path``'s run and taking ``steps`` learner steps."""
    from pytorchrl import Learner, load_config
    from pytorchrl.utils.errors import InputError

    start, learner = time.perf_counter(), None
    try:  # a shipped config that does not load (a stale or renamed key) is broken on any machine
        config = load_config(path, ["run.eval_every=0", "run.eval_parallel=false"])
    except InputError as exc:
        return "FAIL", f"the config does not load: {exc}"
    try:
        learner = Learner.from_config(config, progress=False)
        for _ in range(steps):
            learner.step()
        return "ok", f"{learner.env_steps:,} env steps, {time.perf_counter() - start:.1f} s"
    except InputError as exc:  # ConfigError is one: the line a user would read
        return "refused", str(exc)
    except Exception as exc:  # every other failure is reported, not raised
        return "FAIL", f"{type(exc).__name__}: {exc}"
    finally:
        if learner is not None:
            learner.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("filters", nargs="*", metavar="FILTER", help="keep configs whose path under configs/ contains one of these")
    parser.add_argument("--steps", type=int, default=3, help="learner steps per config")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    paths = shipped_configs(args.filters)
    if not paths:
        print(f"smoke_configs: no config under {CONFIGS} matches {args.filters}", file=sys.stderr)
        return 2
    failed = 0
    for path in paths:
        status, detail = smoke(path, args.steps)
        failed += status == "FAIL"
        print(f"{status:8s} {path.relative_to(CONFIGS)}: {detail}", flush=True)
    print(f"{len(paths)} configs: {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
