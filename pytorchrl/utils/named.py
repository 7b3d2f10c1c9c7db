"""Objects named ``'module:attribute'`` in a config (an env function, an algorithm class)."""

from __future__ import annotations

import importlib
from types import ModuleType

from pytorchrl.utils.errors import InputError


def import_named(spec: str, key: str, form: str, example: str, error: type[InputError] = InputError) -> tuple[ModuleType, str]:
    """The module a ``'module:attribute'`` string names, imported, and the attribute's name.

    :param key: the config key, for messages (``env.env_id``).
    :param form: the form it takes, for messages (``module:function``).
    :raises InputError: (or ``error``) one line: a relative or empty name, or a module that cannot be imported.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or module_name.startswith(".") or not attr:
        noun = form.partition(":")[2].lower()
        raise error(f"{key} = {spec!r}: {form!r} needs an absolute module name and a {noun}, e.g. {example!r}")
    try:
        return importlib.import_module(module_name), attr
    except ImportError as exc:
        raise error(f"{key} = {spec!r}: cannot import module {module_name!r} ({exc}); is it on PYTHONPATH?") from None
