"""Strict YAML reading for configs, run directories and search spaces: one :class:`ConfigError`
line for every file or text a run must not start from.

PyYAML's ``safe_load`` keeps the last of a key given twice, follows an alias into the node that
holds it (``&a [*a]`` builds a list that contains itself, which every later pass over the config
recurses into until ``RecursionError``), shares the nodes of nested aliases (the "billion laughs":
a few lines that are a billion values to copy) and composes recursively (a few hundred brackets
exhaust Python's stack). :class:`StrictLoader` refuses each of these as it composes the text.
It also reads ``5e-7`` and ``1E6`` as numbers, as YAML 1.2 reads them and as whoever writes a config
mean them (YAML 1.1's float needs a dot: PyYAML reads ``5e-7`` as the string ``"5e-7"``).
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml

from pytorchrl.utils.errors import ConfigError

__all__ = [
    "EXPONENT_FLOAT", "MAX_YAML_DEPTH", "MAX_YAML_VALUES", "BadStructure", "ConfigDumper", "DuplicateKey", "StrictLoader",
    "dump_config", "load_yaml", "parse_yaml", "yaml_problem",
]


def load_yaml(path: str | Path, what: str) -> Any:
    """Read a YAML file strictly: a directory, a missing or unreadable file, invalid YAML, a key
    given twice in one mapping (PyYAML would keep the last silently) and aliases that recurse or
    expand too far (:class:`StrictLoader`) are each one :class:`ConfigError` line naming ``what``
    and the file."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise ConfigError(f"{what} {str(path)!r} does not exist") from None
    except OSError as exc:  # a name too long, a loop of links
        raise ConfigError(f"{what} {str(path)!r} cannot be read: {exc.strerror or exc}") from None
    if stat.S_ISDIR(mode):
        raise ConfigError(f"{what} {str(path)!r} is a directory, not a YAML file")
    if not stat.S_ISREG(mode):  # a named pipe would block the read
        raise ConfigError(f"{what} {str(path)!r} is not a regular file")
    try:
        return parse_yaml(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{what} {str(path)!r} cannot be read as text: {getattr(exc, 'strerror', None) or exc}") from None
    except DuplicateKey as exc:
        raise ConfigError(f"{what} {str(path)!r}: key {exc.key!r} is given twice (lines {exc.first} and {exc.second})") from None
    except BadStructure as exc:
        raise ConfigError(f"{what} {str(path)!r}: {exc} (line {exc.line})") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        raise ConfigError(f"{what} {str(path)!r} is not valid YAML{line}: {yaml_problem(exc)}") from None


def parse_yaml(text: str) -> Any:
    """YAML text read by :class:`StrictLoader` (safe: no arbitrary objects).

    :raises yaml.YAMLError: for invalid YAML; and ``DuplicateKey`` (a key given
        twice) and ``BadStructure`` (aliases or nesting beyond the limits), which
        :func:`load_yaml` and :func:`pytorchrl.config.apply_overrides` turn into one line naming the file or override.
    """
    return yaml.load(text, Loader=StrictLoader)


def yaml_problem(exc: yaml.YAMLError) -> str:
    """What PyYAML says is wrong, without its marks (the caller names the file or override)."""
    return str(getattr(exc, "problem", None) or getattr(exc, "context", None) or type(exc).__name__)


class DuplicateKey(Exception):
    """A key given twice in one mapping, on lines ``first`` and ``second`` (1-based)."""

    def __init__(self, key: Any, first: int, second: int) -> None:
        super().__init__(key)
        self.key, self.first, self.second = key, first, second


class BadStructure(Exception):
    """Aliases or nesting the loader refuses; ``line`` is where (1-based)."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.line = line


#: the most values a YAML document may expand to (aliases counted at each use; a config has a few
#: hundred) and the deepest it may nest: bounds on the work of every later pass over the data
MAX_YAML_VALUES, MAX_YAML_DEPTH = 100_000, 64


class StrictLoader(yaml.SafeLoader):
    """yaml.safe_load that refuses a key given twice in one mapping, and bounds what aliases
    may build. Aliases are allowed (an anchor shared by two sections), but not one inside the
    node it names (``&a [*a]``: a recursive structure every later pass over the config would
    recurse into forever), nor a document that expands to more than :data:`MAX_YAML_VALUES`
    values (nine nested anchors of ten aliases each, the "billion laughs", load as a few
    shared lists but are a billion values to copy), nor one nested deeper than
    :data:`MAX_YAML_DEPTH` (PyYAML composes recursively). The expanded size and depth of each
    node are counted once, as it is composed, so the check costs one pass over the text."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._open: set[str] = set()  # anchors of the nodes being composed
        self._size: dict[int, tuple[int, int]] = {}  # id(node) -> (values, depth) when expanded
        self._depth = 0  # of the node being composed

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        line = event.start_mark.line + 1
        if isinstance(event, yaml.AliasEvent):  # the node it names was composed (and counted) before
            if event.anchor in self._open:
                raise BadStructure(f"alias *{event.anchor} is inside the node it names (a recursive structure)", line)
            return super().compose_node(parent, index)  # type: ignore[no-untyped-call]
        if self._depth >= MAX_YAML_DEPTH:  # before recursing further: Python's own limit is not far
            raise BadStructure(f"it nests deeper than {MAX_YAML_DEPTH} levels", line)
        anchor = event.anchor
        if anchor is not None:
            self._open.add(anchor)
        self._depth += 1
        try:
            node = super().compose_node(parent, index)  # type: ignore[no-untyped-call]
        finally:
            self._depth -= 1
            self._open.discard(anchor)
        self._count(node, line)
        return node

    def _count(self, node: yaml.Node | None, line: int) -> None:
        """Record ``node``'s expanded size and depth (its children's are known) and check both."""
        if node is None or id(node) in self._size:
            return
        children = node.value if isinstance(node, yaml.SequenceNode) else [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else []
        sizes = [self._size[id(child)] for child in children]
        values, depth = 1 + sum(v for v, _ in sizes), 1 + max((d for _, d in sizes), default=0)
        self._size[id(node)] = (values, depth)
        if values > MAX_YAML_VALUES:
            raise BadStructure(f"it holds {values:,} values (an alias counted at each use), more than the {MAX_YAML_VALUES:,} a config may hold", line)
        if depth > MAX_YAML_DEPTH:
            raise BadStructure(f"its aliases nest deeper than {MAX_YAML_DEPTH} levels", line)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # ``<<: *base``: its keys give way to the explicit ones (YAML's merge)
                continue
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            line = key_node.start_mark.line + 1
            try:
                hash(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(None, None, "found an unhashable key (a list or mapping used as a key)", key_node.start_mark) from None
            if key in seen:
                raise DuplicateKey(key, seen[key], line)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


#: YAML 1.2's exponent floats that YAML 1.1 reads as strings (``5e-7``, ``-1E+6``, ``1.5e3``,
#: ``.5e3``: 1.1 wants a dot and a signed exponent). A typed key converted them anyway, but a
#: free-form one (env.env_kwargs) handed "5e-7" to the env, which failed on its first step
#: inside its reward.
EXPONENT_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")


class ConfigDumper(yaml.SafeDumper):
    """yaml.safe_dump that quotes a string :class:`StrictLoader` would read as a number (``'1e3'``):
    a saved config reads back as it was written (``--resume``, ``evaluate``)."""


for _yaml_class in (StrictLoader, ConfigDumper):  # one rule both ways: what is read as a number is quoted when it is text
    _yaml_class.add_implicit_resolver("tag:yaml.org,2002:float", EXPONENT_FLOAT, list("-+.0123456789"))


def dump_config(tree: Any) -> str:
    """``tree`` as YAML text, keys in their order, that :func:`parse_yaml` reads back equal."""
    return yaml.dump(tree, Dumper=ConfigDumper, sort_keys=False)
