"""pytorchrl: scalable reinforcement learning with PyTorch on Ray.

The public API: config loading, the components' factories, the scheme and the learner.
"""

from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.agent.actors.networks import EncoderSpec
from pytorchrl.agent.algorithms import A2C, APPO, IMPALA, PPO, Algorithm
from pytorchrl.agent.storages import GAEBuffer, VTraceBuffer
from pytorchrl.config import Config, ConfigError, RunConfig, SchemeConfig, load_config
from pytorchrl.envs import VecEnv
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
from pytorchrl.version import __version__ as __version__

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
    "RunConfig",
    "Scheme",
    "SchemeConfig",
    "UpdateWorker",
    "VTraceBuffer",
    "VecEnv",
    "build_scheme",
    "load_config",
    "tune",
]
