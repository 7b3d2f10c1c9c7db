"""A source checkout of pytorchrl: what a git clone has and an installed wheel does not.

The shipped configs (``configs/``) and the benchmarks, the fuzzer and their instrumented envs
(the ``benchmarks`` package) live beside the ``pytorchrl`` package in the repository, not inside
it, so a wheel carries neither. :func:`package_checkout` is the checkout the imported package
comes from (an editable install, or ``PYTHONPATH`` at a clone); :func:`benchmarks_checkout` also
looks at the working directory and its parents, for ``pytorchrl benchmark`` run inside a clone.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

#: the folder holding the imported ``pytorchrl`` package: a checkout's root, or site-packages
PACKAGE_PARENT = Path(__file__).resolve().parents[2]
#: how to get the benchmarks when the installed package has none
BENCHMARKS_HINT = (
    "benchmarks run from a source checkout of pytorchrl (an installed package has no benchmarks/): "
    "git clone the repository, then in it `pip install -e .` and `pytorchrl benchmark NAME`"
)


def is_checkout(root: Path) -> bool:
    """Whether ``root`` is the root of a pytorchrl source checkout (site-packages never has a setup.py)."""
    return (root / "setup.py").is_file() and (root / "pytorchrl" / "__init__.py").is_file()


def package_checkout() -> Path | None:
    """The root of the checkout the imported ``pytorchrl`` package comes from; None when installed."""
    return PACKAGE_PARENT if is_checkout(PACKAGE_PARENT) else None


def benchmarks_checkout(cwd: Path | None = None) -> Path | None:
    """The root of a checkout with the ``benchmarks`` package: the imported package's own, else the
    working directory (``cwd``) or the nearest of its parents that is one; None if there is none."""
    here = (cwd or Path.cwd()).resolve()
    for root in (PACKAGE_PARENT, here, *here.parents):
        if is_checkout(root) and (root / "benchmarks" / "__init__.py").is_file():
            return root
    return None


def use_checkout(root: Path) -> None:
    """Make the top-level packages of the checkout at ``root`` (``benchmarks``, ``tests``)
    importable here and in the processes started from now on: Ray's workers and subprocesses
    inherit ``PYTHONPATH``, so a ``benchmarks.envs:...`` env id resolves there too."""
    entry = str(root)
    if entry not in sys.path:
        sys.path.insert(0, entry)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if entry not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([entry, *paths])
