"""Schemes: how collection, gradient and update workers are laid out and talk."""

from pytorchrl.scheme.collection.collection_worker import CollectionWorker
from pytorchrl.scheme.collection.collection_worker_set import CollectionWorkerSet
from pytorchrl.scheme.gradients.gradient_worker import GradientWorker
from pytorchrl.scheme.gradients.gradient_worker_set import GradientWorkerSet
from pytorchrl.scheme.scheme import Scheme, build_scheme
from pytorchrl.scheme.updates.update_worker import UpdateWorker

__all__ = ["CollectionWorker", "CollectionWorkerSet", "GradientWorker", "GradientWorkerSet", "Scheme", "UpdateWorker", "build_scheme"]
