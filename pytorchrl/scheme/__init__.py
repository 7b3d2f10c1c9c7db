"""Schemes: how collection, gradient and update workers are laid out and talk (imported on first
use, :mod:`pytorchrl.utils.lazy`)."""

from typing import TYPE_CHECKING

from pytorchrl.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from pytorchrl.scheme.collection.collection_worker import CollectionWorker
    from pytorchrl.scheme.collection.collection_worker_set import CollectionWorkerSet
    from pytorchrl.scheme.gradients.gradient_worker import GradientWorker
    from pytorchrl.scheme.gradients.gradient_worker_set import GradientWorkerSet
    from pytorchrl.scheme.scheme import Scheme, build_scheme
    from pytorchrl.scheme.updates.update_worker import UpdateWorker

__getattr__, __dir__ = lazy_exports(__name__, {
    "CollectionWorker": "pytorchrl.scheme.collection.collection_worker",
    "CollectionWorkerSet": "pytorchrl.scheme.collection.collection_worker_set",
    "GradientWorker": "pytorchrl.scheme.gradients.gradient_worker",
    "GradientWorkerSet": "pytorchrl.scheme.gradients.gradient_worker_set",
    "Scheme": "pytorchrl.scheme.scheme",
    "build_scheme": "pytorchrl.scheme.scheme",
    "UpdateWorker": "pytorchrl.scheme.updates.update_worker",
})

__all__ = ["CollectionWorker", "CollectionWorkerSet", "GradientWorker", "GradientWorkerSet", "Scheme", "UpdateWorker", "build_scheme"]
