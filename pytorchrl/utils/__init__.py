"""Shared helpers: errors, seeding, checkpoint I/O."""

from pytorchrl.utils.errors import CheckpointError, ConfigError, InputError

__all__ = ["CheckpointError", "ConfigError", "InputError"]
