"""The GPU path: the central inference server and the learner on ``cuda``.

Skipped on a machine without CUDA (CI's); run on a GPU machine with ``pytest tests/test_cuda.py``
(``scripts/gpu_check.sh`` runs it there with the GPU benchmark). A GPU's kernels round
differently from the CPU's, so the server is compared with the CPU policy to a tolerance: the
sampled actions (argmax of logits plus the row's noise, or mean plus scaled noise) must agree,
the scores to float rounding.
"""

from __future__ import annotations

import pytest
import torch

from pytorchrl.config import load_config
from pytorchrl.learner import Learner
from tests.conftest import CONFIGS
from tests.scheme.test_inference import GRU, Setup, make_server  # noqa: F401 (a fixture)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")

#: float rounding between the GPU's kernels and the CPU's, on these small policies
ATOL = 1e-4


def assert_close(reply, expected, discrete: bool) -> None:
    for name in ("action", "log_prob", "value", "state"):
        got, want = getattr(reply, name), getattr(expected, name)
        assert (got is None) == (want is None), name
        if got is None:
            continue
        assert got.device.type == "cpu" and got.shape == want.shape, name
        if name == "action" and discrete:
            assert torch.equal(got, want), (got, want)
        else:
            assert torch.allclose(got, want, rtol=0, atol=ATOL), (name, (got - want).abs().max())


@pytest.mark.parametrize(("config", "scored", "discrete"), [
    ("ppo/cartpole.yaml", True, True), ("ppo/pendulum.yaml", True, False), ("dqn/cartpole.yaml", False, True),
    ("sac/pendulum.yaml", False, False),
])
def test_a_cuda_server_acts_as_the_cpu_policy_and_its_replies_outlive_the_next_batch(make_server, config, scored, discrete):  # noqa: F811
    setup = Setup(config)
    server = make_server(setup, device="cuda", max_batch_size=32, max_wait_ms=10_000)  # 4 requests of 8 rows fill a batch
    assert server.device_name().startswith("cuda")
    first = [setup.request(8, seed=10 + w) for w in range(4)]
    pending = [server.submit(w, obs, sent, None, scored) for w, (obs, sent, _) in enumerate(first)]
    replies = [p.result(timeout=60) for p in pending]
    buffers = {role: t.data_ptr() for role, t in server._staging._buffers.items()}
    assert buffers and all(t.is_pinned() for t in server._staging._buffers.values())
    # a second, different batch through the same pinned buffers: the first replies are copies
    second = [setup.request(8, seed=50 + w) for w in range(4)]
    for p in [server.submit(w, obs, sent, None, scored) for w, (obs, sent, _) in enumerate(second)]:
        p.result(timeout=60)
    assert {role: t.data_ptr() for role, t in server._staging._buffers.items()} == buffers  # reused, not reallocated
    for reply, (obs, _, noise) in zip(replies, first):
        assert_close(reply, setup.local_act(obs, noise, scored), discrete)
    assert server.pop_metrics()["batches"] == 2


def test_a_cuda_server_keeps_recurrent_states_on_the_gpu_and_returns_them_for_storage(make_server):  # noqa: F811
    setup = Setup(GRU)
    n = setup.cfg.env.num_envs
    server = make_server(setup, device="cuda", max_batch_size=2 * n, max_wait_ms=10_000)
    states = {w: torch.zeros(n, setup.spec.state_size) for w in (0, 1)}
    for step in range(4):
        starts = torch.ones(n, dtype=torch.bool) if step == 0 else torch.arange(n) % 3 == step % 3
        requests = {w: setup.request(n, seed=100 * w + step) for w in (0, 1)}
        pending = {w: server.submit(w, obs, sent, starts, True) for w, (obs, sent, _) in requests.items()}
        for w, p in pending.items():
            obs, _, noise = requests[w]
            expected = setup.local_act(obs, noise, True, states[w] * ~starts[:, None])
            reply = p.result(timeout=60)
            assert_close(reply, expected, discrete=True)
            states[w] = reply.state
    assert all(held.device.type == "cuda" for held in server._states.values())


@pytest.mark.parametrize(("config", "overrides"), [
    ("ppo/cartpole.yaml", []),  # local inference: the workers' weights come from a GPU learner
    ("ppo/cartpole_central.yaml", ["scheme.inference_server.num_gpus=0.5"]),  # the learner and the server share the GPU
    ("ppo/cartpole_central.yaml", []),  # the same by default: run.device=cuda puts the server on the GPU too
    ("ppo/cartpole_masked_gru.yaml", []),
    ("dqn/cartpole.yaml", []),
    ("dqn/r2d2_cartpole_masked.yaml", ["algorithm.start_steps=512"]),  # updates well before the 2,048 steps end
    ("sac/pendulum.yaml", []),
    ("impala/cartpole.yaml", []),
])
def test_a_run_trains_on_cuda(ray_session, config, overrides):
    small = ["run.device=cuda", "run.target_steps=2048", "run.log_every=1024", "run.eval_every=0", "run.checkpoint_every=0",
             "run.stop_at_return=null"]
    cfg = load_config(CONFIGS / config, [*small, *overrides])
    learner = Learner.from_config(cfg, progress=False)
    try:
        algo = learner.scheme.algorithm
        before = {k: v.clone() for k, v in algo.actor.state_dict().items()}
        summary = learner.train()
        after = algo.actor.state_dict()
        assert all(v.device.type == "cuda" for v in after.values())
        assert any(not torch.equal(before[k], after[k]) for k in before)  # it learned something
        # every parameter is still a view of the flat buffer the optimizer steps (cuDNN's packing
        # of a GRU's weights would have moved them off it, freezing them): and the GRU learned
        flat = algo.flat_params.untyped_storage().data_ptr()
        assert all(p.untyped_storage().data_ptr() == flat for p in algo.params)
        rnn = [name for name, p in algo.actor.named_parameters() if p.requires_grad and ".rnn." in f".{name}"]
        assert all(not torch.equal(before[name], after[name]) for name in rnn)
        assert summary["env_steps"] >= 2048 and learner.worker_restarts == 0
        if learner.scheme.inference is not None:
            import ray

            handle = learner.scheme.inference.handles[0]
            assert ray.get(handle.call.remote("device_name")).startswith("cuda")
    finally:
        learner.close()


def test_every_actor_acts_stochastically_on_the_gpu_with_the_cpu_stream_s_noise():
    """``get_action(deterministic=False)`` of an actor on the GPU (the inference server's
    evaluation step, ``predict``): the noise is drawn from the CPU stream and moved, as the
    rollouts' is; the off-policy actors once built it on the CPU and failed to mix devices."""
    import gymnasium as gym
    import numpy as np

    from pytorchrl.agent.actors.off_policy import OffPolicyActor
    from pytorchrl.agent.actors.on_policy import OnPolicyActor
    from pytorchrl.agent.actors.policy_critic import PolicyCriticActor

    box = gym.spaces.Box(-1, 1, (4,), np.float32)
    actions = gym.spaces.Box(-1, 1, (2,), np.float32)
    actors = [
        OffPolicyActor(box, gym.spaces.Discrete(3)), PolicyCriticActor(box, actions), PolicyCriticActor(box, actions, sde=True),
        OnPolicyActor(box, gym.spaces.Discrete(3)),
    ]
    for actor in actors:
        action, _, _ = actor.cuda().get_action(torch.zeros(5, 4, device="cuda"), deterministic=False)
        assert action.device.type == "cuda" and action.shape[0] == 5, type(actor).__name__


@pytest.mark.parametrize("learner_device", ["cpu", "cuda"])
def test_a_remote_gradient_worker_that_reserves_a_gpu_computes_on_it_whatever_the_learner_s_device(ray_session, learner_device):
    """``run.device`` is the learner's: a remote replica reserving GPU computes on the one Ray
    gives it, and its gradients reach a learner on either device."""
    import ray

    small = [f"run.device={learner_device}", "run.target_steps=1024", "run.log_every=512", "run.eval_every=0", "run.checkpoint_every=0",
             "run.stop_at_return=null", "scheme.num_grad_workers=1", "scheme.grad_worker_resources.num_gpus=0.5"]
    learner = Learner.from_config(load_config(CONFIGS / "ppo" / "cartpole.yaml", small), progress=False)
    try:
        before = {k: v.clone() for k, v in learner.scheme.algorithm.actor.state_dict().items()}
        learner.train()
        after = learner.scheme.algorithm.actor.state_dict()
        assert any(not torch.equal(before[k].cpu(), after[k].cpu()) for k in before)
        remote = learner.scheme.grad_workers.workers.remote_workers[0]
        assert ray.get(remote.call.remote("device_name")).startswith("cuda")
    finally:
        learner.close()
