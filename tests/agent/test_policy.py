"""LocalPolicy: the ActingPolicy a collection worker acts through (ARCHITECTURE.md, decision 34)."""

from __future__ import annotations

import pytest
import torch

from pytorchrl.agent.algorithms import ALGORITHMS, wire
from pytorchrl.agent.contracts import ActionSlots
from pytorchrl.agent.policy import LocalPolicy
from pytorchrl.config import load_config
from pytorchrl.envs.vec_env import VecEnv
from tests.conftest import CONFIGS

#: one config per acting path: memoryless, scored while acting (a CNN), recurrent
PATHS = {
    "mlp": ("ppo/cartpole.yaml", []),
    "cnn": ("ppo/cartpole.yaml", ["env.env_id=tests.envs_for_tests:ImageSideEnv", "actor.encoder=nature_cnn", "actor.cnn_features=16"]),
    "gru": ("ppo/cartpole_masked_gru.yaml", []),
}


def _actor_pair(path: str):
    """Two actors with the same weights, and observations for them."""
    config_file, overrides = PATHS[path]
    cfg = load_config(CONFIGS / config_file, overrides)
    factory, obs_space, act_space = VecEnv.create_factory(cfg.env.env_id, num_envs=3)
    wiring = wire(ALGORITHMS[cfg.algorithm.name], cfg, obs_space, act_space)
    reference, served = wiring.actor(), wiring.actor()
    served.load_state_dict(reference.state_dict())
    envs = factory(worker_index=0)
    obs = envs.reset()
    envs.close()
    return reference, served, obs


@pytest.mark.parametrize("path", list(PATHS))
def test_local_policy_fills_the_slots_as_the_actor_would(path):
    reference, actor, obs = _actor_pair(path)
    policy = LocalPolicy(actor)
    assert policy.is_recurrent == (path == "gru") and policy.scores_while_acting == (path != "mlp")
    torch.manual_seed(3)
    noise = reference.draw_noise(1, 3)[0]
    scored = policy.scores_while_acting
    expected = ActionSlots(torch.zeros(3, dtype=torch.long), torch.zeros(3), torch.zeros(3))
    got = ActionSlots(torch.full((3,), -1, dtype=torch.long), torch.full((3,), 9.0), torch.full((3,), 9.0))
    with torch.inference_mode():
        if path == "gru":
            state = torch.zeros(3, reference.state_size)
            next_state = reference.act_recurrent(obs, state, noise, *expected)
            acted = policy.act(obs, noise, got, state)
            assert torch.equal(acted.state, next_state)
        else:
            if scored:
                reference.act_scored(obs, noise, *expected)
            else:
                reference.act(obs, noise, out=expected.action)
            acted = policy.act(obs, noise, got if scored else ActionSlots(got.action))
            assert acted.state is None
    assert acted.version == 0 and torch.equal(got.action, expected.action)
    if scored:
        assert torch.equal(got.log_prob, expected.log_prob) and torch.equal(got.value, expected.value)


def test_set_weights_copies_in_place_and_tags_the_version():
    reference, actor, _ = _actor_pair("mlp")
    policy = LocalPolicy(actor)
    before = {k: v.data_ptr() for k, v in actor.state_dict().items()}
    changed = {k: v + 1.0 for k, v in reference.state_dict().items()}
    policy.set_weights(changed, version=7)
    assert policy.version == 7
    assert {k: v.data_ptr() for k, v in actor.state_dict().items()} == before  # in place: the acting path's cached tensors stay valid
    assert all(torch.equal(v, changed[k]) for k, v in policy.get_weights().items())


def test_a_collection_worker_holds_a_policy_and_no_algorithm():
    from pytorchrl.scheme.collection.collection_worker import CollectionWorker

    cfg = load_config(CONFIGS / "ppo/cartpole.yaml", ["env.num_envs=2", "storage.num_steps=4"])
    factory, obs_space, act_space = VecEnv.create_factory(cfg.env.env_id, num_envs=2)
    wiring = wire(ALGORITHMS["ppo"], cfg, obs_space, act_space)
    worker = CollectionWorker(0, env_factory=factory, actor_factory=wiring.actor, storage_factory=wiring.storage)
    try:
        assert isinstance(worker.policy, LocalPolicy) and not hasattr(worker, "algo")
        data, info = worker.collect_data()
        assert data["actions"].shape == (4, 2) and info["policy_version"] == 0
        worker.set_weights(worker.get_weights(), 5)
        assert worker.collect_data()[1]["policy_version"] == 5
    finally:
        worker.close()
