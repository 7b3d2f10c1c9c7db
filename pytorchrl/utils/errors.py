"""Errors that mean "the user gave bad input": the CLI turns them into one line and exit 2."""


class InputError(Exception):
    """Bad input from the user (config, env id, checkpoint, address).

    The message is one line that names the key or file, the bad value and what is allowed.
    """


class ConfigError(InputError):
    """An unknown config key, a value of the wrong type or out of range."""


class CheckpointError(InputError):
    """A missing, truncated or otherwise unreadable checkpoint."""
