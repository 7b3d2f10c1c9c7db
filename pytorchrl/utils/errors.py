"""Errors the CLI turns into one line on stderr: bad input (exit 2) and lost workers (exit 1)."""


class InputError(Exception):
    """Bad input from the user (config, env id, checkpoint, address).

    The message is one line that names the key or file, the bad value and what is allowed.
    """


class ConfigError(InputError):
    """An unknown config key, a value of the wrong type or out of range."""


class CheckpointError(InputError):
    """A missing, truncated or otherwise unreadable checkpoint."""


class TrainingDiverged(RuntimeError):
    """``run.max_nonfinite_updates`` updates in a row had a non-finite gradient (none of them was
    applied); the message names the algorithm, the first non-finite quantity and the newest
    checkpoint, which is still good (checkpoints are never written with non-finite values)."""


class WorkerFailure(RuntimeError):
    """Remote workers died and could not be replaced (``scheme.max_worker_restarts`` used up, or,
    with ``scheme.ignore_worker_failures``, none left). The run's last checkpoint stays valid."""


class RequestInDoubt(RuntimeError):
    """A call to an inference server that may or may not have run: Ray lost touch with the server
    (``ActorUnavailableError``) while its process lived on. Raised only for a request that is not
    safe to send twice (a recurrent act that leaves its state on the server); its sender resends
    it in a form that is (:class:`~pytorchrl.scheme.inference.client.RemotePolicy`)."""
