"""Package exports imported on first use (PEP 562), so that importing one light module of a
package (a collection worker's envs, say) does not import every heavy one beside it (torch)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``, whose attribute ``name`` is ``exports[name]``'s
    attribute of the same name, imported when first asked for."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # once: the next lookup finds it directly
        return value

    def __dir__() -> list[str]:
        return sorted(exports)

    return __getattr__, __dir__
