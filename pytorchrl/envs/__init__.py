"""Vector environments, normalisation wrappers and pytorchrl's registered envs."""

from pytorchrl.envs import chain as _chain  # noqa: F401  (registers pytorchrl/Chain-v0)
from pytorchrl.envs import masking as _masking  # noqa: F401  (registers pytorchrl/LegalMoves-v0)
from pytorchrl.envs import registration as _registration  # noqa: F401  (registers pytorchrl/* ids)
from pytorchrl.envs.making import check_env_id
from pytorchrl.envs.normalization import ObservationNormalizer, RewardScaler, RunningMeanStd
from pytorchrl.envs.vec_env import VecEnv

__all__ = ["ObservationNormalizer", "RewardScaler", "RunningMeanStd", "VecEnv", "check_env_id"]
