"""Actors: networks that act, and the value/Q heads their algorithms need."""

from pytorchrl.agent.actors.on_policy import OnPolicyActor

__all__ = ["OnPolicyActor"]
