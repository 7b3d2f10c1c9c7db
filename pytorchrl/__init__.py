"""pytorchrl: scalable reinforcement learning with PyTorch on Ray.

The public API: config loading, the components' factories, the scheme and the learner. Each
name is imported when first used (:mod:`pytorchrl.utils.lazy`): a central-inference collection
worker imports the envs it steps and never torch.
"""

from typing import TYPE_CHECKING

from pytorchrl.utils.lazy import lazy_exports
from pytorchrl.version import __version__ as __version__

if TYPE_CHECKING:
    from pytorchrl.agent.actors import OnPolicyActor
    from pytorchrl.agent.actors.networks import EncoderSpec
    from pytorchrl.agent.algorithms import A2C, APPO, IMPALA, PPO, Algorithm, register_algorithm
    from pytorchrl.agent.storages import GAEBuffer, VTraceBuffer
    from pytorchrl.config import Config, ConfigError, RayConfig, RunConfig, SchemeConfig, load_config
    from pytorchrl.envs import VecEnv
    from pytorchrl.evaluation import load_learner
    from pytorchrl.learner import Learner
    from pytorchrl.scheme import (
        CollectionWorker,
        CollectionWorkerSet,
        GradientWorker,
        GradientWorkerSet,
        Scheme,
        UpdateWorker,
        build_scheme,
    )
    from pytorchrl.tuning import tune
    from pytorchrl.utils.errors import CheckpointError, InputError

_EXPORTS = {
    "OnPolicyActor": "pytorchrl.agent.actors",
    "EncoderSpec": "pytorchrl.agent.actors.networks",
    **dict.fromkeys(("A2C", "APPO", "IMPALA", "PPO", "Algorithm", "register_algorithm"), "pytorchrl.agent.algorithms"),
    **dict.fromkeys(("GAEBuffer", "VTraceBuffer"), "pytorchrl.agent.storages"),
    **dict.fromkeys(("Config", "ConfigError", "RayConfig", "RunConfig", "SchemeConfig", "load_config"), "pytorchrl.config"),
    "VecEnv": "pytorchrl.envs",
    "load_learner": "pytorchrl.evaluation",
    "Learner": "pytorchrl.learner",
    **dict.fromkeys(
        ("CollectionWorker", "CollectionWorkerSet", "GradientWorker", "GradientWorkerSet", "Scheme", "UpdateWorker", "build_scheme"),
        "pytorchrl.scheme",
    ),
    "tune": "pytorchrl.tuning",
    **dict.fromkeys(("CheckpointError", "InputError"), "pytorchrl.utils.errors"),
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = [
    "A2C",
    "APPO",
    "IMPALA",
    "PPO",
    "Algorithm",
    "CheckpointError",
    "CollectionWorker",
    "CollectionWorkerSet",
    "Config",
    "ConfigError",
    "EncoderSpec",
    "GAEBuffer",
    "GradientWorker",
    "GradientWorkerSet",
    "InputError",
    "Learner",
    "OnPolicyActor",
    "RayConfig",
    "RunConfig",
    "Scheme",
    "SchemeConfig",
    "UpdateWorker",
    "VTraceBuffer",
    "VecEnv",
    "build_scheme",
    "load_config",
    "load_learner",
    "register_algorithm",
    "tune",
]
