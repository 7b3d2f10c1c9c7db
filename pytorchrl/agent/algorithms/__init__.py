"""Algorithms: batches in, gradients out. They never touch an environment.

:data:`ALGORITHMS` is the registry, the only list of algorithm names: ``algorithm.name`` to the
class, which declares its own config class (in its module, with its defaults, checks and what
the memory estimate needs), spaces, metrics and wiring (:mod:`~pytorchrl.agent.algorithms.wiring`).
The config loader and ``build_scheme`` resolve ``algorithm.name`` through it.
"""

import dataclasses
import inspect
import warnings

from pytorchrl.agent.algorithms.a2c import A2C, A2CConfig
from pytorchrl.agent.algorithms.base import Algorithm
from pytorchrl.agent.algorithms.dqn import DQN, DQNConfig
from pytorchrl.agent.algorithms.families import OnPolicyConfig, ReplayConfig
from pytorchrl.agent.algorithms.impala import APPO, IMPALA, APPOConfig, IMPALAConfig
from pytorchrl.agent.algorithms.mpc import MPC, MPCConfig
from pytorchrl.agent.algorithms.mpo import MPO, MPOConfig
from pytorchrl.agent.algorithms.ppo import PPO, PPOConfig
from pytorchrl.agent.algorithms.sac import DDPG, SAC, TD3, DDPGConfig, SACConfig, TD3Config
from pytorchrl.agent.algorithms.wiring import Wiring, wire
from pytorchrl.utils.named import import_named

#: ``algorithm.name`` -> class: the built-in algorithms, and those registered since
#: (:func:`register_algorithm`, or ``'module:Class'`` names: :func:`algorithm_class`)
ALGORITHMS: dict[str, type[Algorithm]] = {
    "ppo": PPO, "a2c": A2C, "impala": IMPALA, "appo": APPO, "dqn": DQN, "sac": SAC, "td3": TD3, "ddpg": DDPG, "mpo": MPO, "mpc": MPC,
}
BUILT_IN = tuple(ALGORITHMS)


def register_algorithm(name: str, cls: type[Algorithm]) -> None:
    """Make ``cls`` (an :class:`Algorithm` subclass with a frozen-dataclass ``config_class``)
    trainable as ``algorithm.name: name``, from Python. From a YAML file or the CLI, name it
    ``'module:Class'`` instead (:func:`algorithm_class` imports and registers it in every
    process that reads the config: trials, resumed runs, evaluation).

    :raises ConfigError: when ``cls`` is not such a class, or ``name`` is a built-in algorithm's.
    """
    from pytorchrl.config import AlgorithmConfig
    from pytorchrl.utils.errors import ConfigError

    if not isinstance(name, str) or not name:
        raise ConfigError(f"register_algorithm: the name must be a non-empty str, got {name!r}")
    if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
        raise ConfigError(f"algorithm.name = {name!r}: {cls!r} is not a subclass of pytorchrl.agent.algorithms.Algorithm")
    config_class = getattr(cls, "config_class", None)
    if not (isinstance(config_class, type) and issubclass(config_class, AlgorithmConfig)):
        raise ConfigError(f"algorithm.name = {name!r}: {cls.__name__}.config_class must be a subclass of pytorchrl.config.AlgorithmConfig")
    fields = {f.name for f in dataclasses.fields(config_class)}
    own = inspect.get_annotations(config_class)  # the class's own, not its bases'
    undeclared = [k for k, hint in own.items() if k not in fields and not str(hint).startswith(("ClassVar", "typing.ClassVar"))]
    if undeclared:  # its keys would be "unknown config key" with no word of why
        raise ConfigError(
            f"algorithm.name = {name!r}: {config_class.__name__} declares {', '.join(undeclared)} but is not a dataclass of its own; "
            "decorate it with @dataclass(frozen=True)"
        )
    if name in BUILT_IN and ALGORITHMS.get(name) is not cls:
        raise ConfigError(f"register_algorithm: {name!r} is a built-in algorithm's name; choose another")
    if ALGORITHMS.get(name, cls) is not cls:  # a class redefined in a notebook, or two packages' names colliding
        warnings.warn(f"register_algorithm: {name!r} named {ALGORITHMS[name].__qualname__}; it names {cls.__qualname__} now", stacklevel=2)
    ALGORITHMS[name] = cls


def algorithm_class(name: object) -> type[Algorithm] | None:
    """The class ``algorithm.name`` names: one in :data:`ALGORITHMS`, or a ``'module:Class'``
    outside the package, imported and registered under that name (as ``env.env_id`` takes
    ``'module:function'``). None: neither.

    :raises ConfigError: a ``'module:Class'`` that cannot be imported or is no algorithm (one line).
    """
    from pytorchrl.utils.errors import ConfigError

    if not isinstance(name, str):
        return None
    if name in ALGORITHMS:
        return ALGORITHMS[name]
    if ":" not in name:
        return None
    module, attr = import_named(name, "algorithm.name", "module:Class", "my_package.algorithms:Reinforce", ConfigError)
    if not hasattr(module, attr):
        raise ConfigError(f"algorithm.name = {name!r}: module {module.__name__!r} has no {attr!r}")
    register_algorithm(name, getattr(module, attr))
    return ALGORITHMS[name]

__all__ = [
    "A2C",
    "ALGORITHMS",
    "APPO",
    "BUILT_IN",
    "DDPG",
    "DQN",
    "IMPALA",
    "MPC",
    "MPO",
    "PPO",
    "SAC",
    "TD3",
    "A2CConfig",
    "APPOConfig",
    "Algorithm",
    "DDPGConfig",
    "DQNConfig",
    "IMPALAConfig",
    "MPCConfig",
    "MPOConfig",
    "OnPolicyConfig",
    "PPOConfig",
    "ReplayConfig",
    "SACConfig",
    "TD3Config",
    "Wiring",
    "algorithm_class",
    "register_algorithm",
    "wire",
]
