"""Central batched inference (SEED mode), in one process: the server's actions are the local
policy's, whatever the batch; versions, batching rules, recurrent states and whole rollouts."""

from __future__ import annotations

import dataclasses
import errno
import functools
import pickle
import socket
import threading
import time
import types
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import torch

from pytorchrl.agent.algorithms import ALGORITHMS, wire
from pytorchrl.agent.contracts import ActionSlots
from pytorchrl.agent.policy import LocalPolicy
from pytorchrl.agent.storages.off_policy.recorder import ReplayRecorder
from pytorchrl.agent.storages.on_policy.recorder import RolloutRecorder
from pytorchrl.config import load_config
from pytorchrl.envs.vec_env import VecEnv
from pytorchrl.scheme.base import compression, inference_servers, socket_transport
from pytorchrl.scheme.base.socket_transport import (
    KEY_BYTES,
    MAX_RETRY_S,
    NONCE_BYTES,
    Endpoint,
    SocketCall,
    SocketListener,
    send,
    socket_address,
)
from pytorchrl.scheme.collection.collection_worker import CollectionWorker
from pytorchrl.scheme.collection.thin_worker import ThinCollectionWorker, thin_recorder_factory
from pytorchrl.scheme.inference import ActReply, InferenceServer, MissingStateError, RemotePolicy, direct_call, policy_spec
from pytorchrl.scheme.inference.array_policy import ArrayPolicy, FrameDelta, MissingNoiseError, decode_frames, encode_frames
from pytorchrl.utils.arrays import is_tensor, to_tensors
from pytorchrl.utils.errors import RequestInDoubt
from tests.conftest import CONFIGS

GRU = "ppo/cartpole_masked_gru.yaml"


class Setup:
    """A shipped config's wiring, a local policy over its actor, and requests for it."""

    def __init__(self, config: str, *overrides: str) -> None:
        self.cfg = load_config(CONFIGS / config, list(overrides))
        self.env_factory, self.obs_space, act_space = VecEnv.create_factory(
            self.cfg.env.env_id, num_envs=self.cfg.env.num_envs, atari=dataclasses.asdict(self.cfg.env.atari),
        )
        self.wiring = wire(ALGORITHMS[self.cfg.algorithm.name], self.cfg, self.obs_space, act_space)
        self.local = LocalPolicy(self.wiring.actor("cpu"))
        self.spec = policy_spec(self.local.actor)

    def request(self, rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``obs``, the noise a worker sends (its spec's draw) and the noise a local policy acts
        with (its actor's draw, scaled by the std for a Gaussian head), from one seed."""
        generator = torch.Generator().manual_seed(seed)
        obs = torch.randn(rows, *self.obs_space.shape, generator=generator)
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            sent = self.spec.draw_noise(1, rows)[0]
            torch.manual_seed(seed)
            local = self.local.draw_noise(1, rows)[0]
        return obs, sent, local

    def local_act(self, obs: torch.Tensor, noise: torch.Tensor, scored: bool, state: torch.Tensor | None = None) -> ActReply:
        rows = obs.shape[0]
        slots = ActionSlots(self.spec.empty_actions(rows, torch.device("cpu")), *((torch.empty(rows), torch.empty(rows)) if scored else ()))
        with torch.inference_mode():
            acted = self.local.act(obs, noise, slots, state)
        return ActReply(slots.action, slots.log_prob, slots.value, acted.state, acted.version)


@pytest.fixture
def make_server() -> Iterator[Callable[..., InferenceServer]]:
    made: list[InferenceServer] = []

    def make(setup: Setup, **kwargs: Any) -> InferenceServer:
        server = InferenceServer(setup.wiring.actor, **kwargs)
        server.set_weights(setup.local.get_weights(), setup.local.version)
        made.append(server)
        return server

    yield make
    for server in made:
        server.close()


def assert_same(reply: ActReply, expected: ActReply) -> None:
    """The local policy's reply: discrete actions exactly; floats (scores, continuous actions,
    recurrent states) to float rounding, since a batch of another row count than the request alone
    may take another GEMM kernel (server module docstring: on the Intel Xeon VMs, MKL's kernel for
    a 2-column head changes at 16 rows); exactly wherever the kernels are the same."""
    for name in ("action", "log_prob", "value", "state"):
        got, want = getattr(reply, name), getattr(expected, name)
        assert (got is None) == (want is None), name
        if got is None:
            continue
        if got.is_floating_point():
            assert rounded_alike(got, want), (name, (got - want).abs().max())
        else:
            assert torch.equal(got, want), (name, got, want)


def rounded_alike(got: torch.Tensor | np.ndarray, want: torch.Tensor | np.ndarray) -> bool:
    """Equal up to a few float32 roundings: how far batching may move a float of a reply (the
    largest seen: 1.2e-7 on the AMD EPYC VM's PPO CartPole actor, 2.1e-6 on the Intel Xeon VM's
    with perturbed weights, on log-probabilities of magnitude ~10)."""
    return bool(np.allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6))


# ------------------------------------------------------------------------------------- noise


@pytest.mark.parametrize("config", [
    "ppo/cartpole.yaml", "ppo/pendulum.yaml", "dqn/cartpole.yaml", "dqn/apex_cartpole.yaml", "sac/pendulum.yaml", "sac/discrete_cartpole.yaml",
    "sac/pendulum_masked_gru.yaml", "td3/pendulum.yaml", GRU,
])
def test_the_spec_draws_the_actors_noise_from_the_same_stream(config):
    setup = Setup(config)
    actor = setup.local.actor
    torch.manual_seed(3)
    drawn = setup.spec.draw_noise(5, 4)
    after_spec = torch.get_rng_state()
    torch.manual_seed(3)
    expected = actor.draw_noise(5, 4)
    assert torch.equal(torch.get_rng_state(), after_spec)  # the stream moves on alike
    if setup.spec.noise_scaled_by_std:  # the server scales it: the same product, the same bits
        drawn = drawn.mul_(actor.action_head.log_std.detach().exp())
    assert torch.equal(drawn, expected)


@pytest.mark.parametrize(("config", "overrides", "needle"), [
    ("dqn/rainbow_cartpole.yaml", [], "noisy nets"),
    ("ddpg/pendulum.yaml", ["algorithm.exploration_noise_type=ou"], "Ornstein-Uhlenbeck"),
    ("sac/pendulum.yaml", ["algorithm.use_sde=true"], "gSDE"),
])
def test_exploration_state_kept_in_the_actor_is_refused(config, overrides, needle):
    with pytest.raises(ValueError, match=needle):
        Setup(config, *overrides)


def test_an_actor_that_does_not_describe_its_noise_is_refused():
    with pytest.raises(ValueError, match="no noise spec for Linear"):
        policy_spec(torch.nn.Linear(2, 2))


# ----------------------------------------------------------------------- (a) exact batching


@pytest.mark.parametrize(("config", "scored"), [
    ("ppo/cartpole.yaml", False), ("ppo/cartpole.yaml", True), ("ppo/pendulum.yaml", False), ("ppo/pendulum.yaml", True),
    ("dqn/cartpole.yaml", False), ("sac/pendulum.yaml", False),
])
def test_actions_equal_the_local_policys_alone_or_batched_in_any_order(make_server, config, scored):
    setup = Setup(config)
    rows = 8
    requests = [setup.request(rows, seed=10 + w) for w in range(4)]
    expected = [setup.local_act(obs, noise, scored) for obs, _, noise in requests]
    alone = make_server(setup, max_batch_size=rows, max_wait_ms=10_000)  # a full batch runs at once
    assert_same(alone.act(0, requests[0][0], requests[0][1], None, scored), expected[0])
    batched = make_server(setup, max_batch_size=4 * rows, max_wait_ms=10_000)
    for order in [(0, 1, 2, 3), (3, 1, 0, 2)]:
        pending = {w: batched.submit(w, requests[w][0], requests[w][1], None, scored) for w in order}
        for w, request in pending.items():
            assert_same(request.result(timeout=30), expected[w])
        metrics = batched.pop_metrics()
        assert metrics["batches"] == 1 and metrics["max_batch_rows"] == 4 * rows and metrics["requests"] == 4


def test_requests_of_other_than_4k_rows_sample_the_same_actions_with_scores_equal_to_float_rounding(make_server):
    """Rows that fall into other blocks of the GEMM kernel than alone (server module docstring): the
    scores move by float rounding, the sampled actions (argmax of logits + the row's noise) do not."""
    setup = Setup("ppo/cartpole.yaml")
    requests = [setup.request(2, seed=20 + w) for w in range(4)]
    server = make_server(setup, max_batch_size=8, max_wait_ms=10_000)
    pending = [server.submit(w, obs, sent, None, True) for w, (obs, sent, _) in enumerate(requests)]
    for request, (obs, _, noise) in zip(pending, requests):
        reply, expected = request.result(timeout=30), setup.local_act(obs, noise, True)
        assert torch.equal(reply.action, expected.action)
        assert rounded_alike(reply.log_prob, expected.log_prob) and rounded_alike(reply.value, expected.value)


def test_each_ape_x_worker_explores_at_its_own_rate_within_one_batch(make_server):
    setup = Setup("dqn/apex_cartpole.yaml")
    weights = setup.local.get_weights()
    weights["epsilon"] = torch.tensor(0.4)  # worker 0 explores at 0.4, worker 1 at 0.4 ** 8
    setup.local.set_weights(weights, 1)
    server = make_server(setup, max_batch_size=64, max_wait_ms=10_000)
    obs, sent, noise = setup.request(32, seed=5)
    expected = []
    for worker in (0, 1):
        setup.local.actor.set_collector(worker)
        expected.append(setup.local_act(obs, noise, False))
    assert not torch.equal(expected[0].action, expected[1].action)  # the rates matter for these draws
    pending = [server.submit(w, obs, sent) for w in (1, 0)]
    assert_same(pending[0].result(timeout=30), expected[1])
    assert_same(pending[1].result(timeout=30), expected[0])
    assert server.pop_metrics()["batches"] == 1


# ------------------------------------------------------------------------------ (b) versions


def test_replies_carry_the_version_of_the_weights_that_chose_them(make_server):
    setup = Setup("ppo/cartpole.yaml")
    obs, sent, noise = setup.request(8, seed=1)
    old = setup.local.get_weights()
    new = {k: v + 0.5 * torch.randn_like(v) for k, v in old.items()}
    server = make_server(setup, max_batch_size=8, max_wait_ms=10_000)
    server.set_weights(old, 4)
    before = server.act(0, obs, sent, None, True)
    server.set_weights(new, 5)
    after = server.act(0, obs, sent, None, True)
    setup.local.set_weights(old, 4)
    assert_same(before, setup.local_act(obs, noise, True))
    setup.local.set_weights(new, 5)
    assert_same(after, setup.local_act(obs, noise, True))
    assert (before.version, after.version) == (4, 5) and not torch.equal(before.log_prob, after.log_prob)
    # a request queued before new weights arrive is acted on (and tagged) with them
    waiting = make_server(setup, max_batch_size=16, max_wait_ms=10_000)
    waiting.set_weights(old, 4)
    first = waiting.submit(0, obs, sent, None, True)
    waiting.set_weights(new, 6)
    waiting.submit(1, obs, sent, None, True)  # fills the batch
    reply = first.result(timeout=30)
    assert reply.version == 6 and rounded_alike(reply.log_prob, after.log_prob)
    client = RemotePolicy(direct_call(server), 2)
    slots = ActionSlots(torch.empty(8, dtype=torch.long), torch.empty(8), torch.empty(8))
    assert client.act(obs, sent, slots).version == 5 and client.version == 5


def test_new_weights_never_mix_into_a_running_batch(make_server):
    """Weights set from another thread while workers act: each reply is exactly the local policy's
    under the weights its version names."""
    setup = Setup("ppo/cartpole.yaml")
    weights = [setup.local.get_weights()]
    weights.append({k: v + 0.5 * torch.randn_like(v) for k, v in weights[0].items()})
    requests = [setup.request(8, seed=s) for s in range(20)]
    expected = []
    for w in weights:  # by version parity
        setup.local.set_weights(w, 0)
        expected.append([setup.local_act(obs, noise, True) for obs, _, noise in requests])
    server = make_server(setup, max_batch_size=16, max_wait_ms=1)
    server.set_weights(weights[0], 0)
    replies: dict[int, ActReply] = {}

    def worker(w: int) -> None:
        for i in range(w, 20, 2):
            replies[i] = server.act(w, requests[i][0], requests[i][1], None, True)

    threads = [threading.Thread(target=worker, args=(w,)) for w in (0, 1)]
    for thread in threads:
        thread.start()
    version = 0
    while (any(thread.is_alive() for thread in threads) or version < 2) and version < 10_000:
        version += 1
        server.set_weights(weights[version % 2], version)
        time.sleep(0.0005)  # let batches run between the changes
    for thread in threads:
        thread.join(timeout=60)
    # which versions the replies carry depends on the threads' timing (both parities in most runs; on
    # a loaded machine the workers may even finish before the second change);
    # what may never happen is a reply that is not exactly the local policy's under its version
    assert len(replies) == 20, (version, [r.version for r in replies.values()])
    for i, reply in replies.items():
        got = reply._replace(version=0)
        assert_same(got, expected[reply.version % 2][i]._replace(version=0))


# ------------------------------------------------------------------------------- (c) batching


@pytest.mark.parametrize(("config", "scored"), [("ppo/cartpole.yaml", True), ("dqn/cartpole.yaml", False), ("sac/pendulum.yaml", False)])
def test_asynchronous_collection_scores_on_policy_steps_as_they_are_acted(make_server, config, scored):
    """Asynchronous collection changes the weights under a rollout, so an on-policy actor's
    clients score each step as it is acted; a replay actor's are never scored (it has no
    ``act_scored``: asked to score, its workers failed)."""
    setup = Setup(config)
    server = make_server(setup, score_while_acting=True)
    assert server.spec.scores_while_acting is scored and server.array_spec() == {"scores_while_acting": scored}
    assert make_server(setup).spec.scores_while_acting is False  # synchronous rounds: an MLP scores its rollout at the end


def test_a_lone_request_is_answered_after_max_wait_ms(make_server):
    setup = Setup("ppo/cartpole.yaml")
    server = make_server(setup, max_batch_size=1000, max_wait_ms=50)
    obs, sent, noise = setup.request(8, seed=2)
    start = time.monotonic()
    reply = server.submit(0, obs, sent).result(timeout=30)  # never a hang: a timeout raises
    elapsed = time.monotonic() - start
    assert elapsed >= 0.05  # it waited for company (a lower bound: a slow machine only waits longer)
    assert_same(reply, setup.local_act(obs, noise, False))
    metrics = server.pop_metrics()
    assert metrics["batches"] == 1 and metrics["mean_wait_ms"] >= 49.9 and 0 < metrics["busy_fraction"] < 1


def test_array_calls_run_now_in_batches_of_at_most_max_batch_size_and_give_what_one_by_one_gives(make_server):
    """The socket loop's path (act_arrays_now): the calls it read together run in the calling
    thread, split at max_batch_size rows, each reply what act_arrays alone gives; a call the
    server cannot serve gets its own error and the others their replies."""
    setup = Setup("ppo/cartpole.yaml")
    together, alone = make_server(setup, max_batch_size=16), make_server(setup, max_batch_size=8)
    calls = []
    for w in range(3):
        for server in (together, alone):
            server.begin_rollout(w, server.stream_state(100 + w), 1, 8)
        calls.append((w, setup.request(8, seed=30 + w)[0].numpy(), 0, True))
    out = together.act_arrays_now([*calls[:2], (99, calls[0][1], 0, True), calls[2]])
    assert together.pop_metrics()["batches"] == 2  # 8 + 8 rows, then 8
    assert out[2][0] is False and isinstance(out[2][1], MissingNoiseError)
    for (ok, got), args in zip([out[0], out[1], out[3]], calls):
        want = alone.act_arrays(*args)
        assert ok and np.array_equal(got[0], want[0]) and got[3] == want[3]
        assert rounded_alike(got[1], want[1]) and rounded_alike(got[2], want[2])


def test_busy_time_that_spans_windows_is_split_between_them_so_the_fraction_never_passes_one(monkeypatch):
    from pytorchrl.scheme.inference import server as server_module

    clock = [100.0]
    monkeypatch.setattr(server_module, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))  # this module's clock only
    counters = server_module._Counters()  # window from t=100
    clock[0] = 101.0
    counters.busy()  # a long scoring call from t=101 ...
    clock[0] = 102.0
    first = counters.pop()  # ... still running at the end of the first window (100-102)
    clock[0] = 106.0
    counters.scoring()  # ... ends at t=106
    counters.busy()  # a batch from t=106 to 107
    clock[0] = 107.0
    counters.batch([], 106.0)
    clock[0] = 110.0
    second = counters.pop()  # window 102-110: busy 102-107
    assert first["busy_fraction"] == pytest.approx(0.5) and first["score_requests"] == 0
    assert second["busy_fraction"] == pytest.approx(5 / 8) and second["score_requests"] == 1 and second["batches"] == 1
    counters.busy()
    clock[0] = 111.0
    counters.idle()  # a call that raised: its time counted, nothing else
    third = counters.pop()
    assert third["busy_fraction"] == pytest.approx(1.0) and third["batches"] == third["score_requests"] == 0


def test_concurrent_workers_get_their_own_replies_in_batches_of_at_most_max_batch_size(make_server):
    setup = Setup("ppo/cartpole.yaml")
    server = make_server(setup, max_batch_size=16, max_wait_ms=2)
    sizes = {w: [4 + (w + s) % 5 for s in range(8)] for w in range(4)}  # 4 to 8 rows per request
    # drawn here: torch's global generator is one per process, not per thread
    requests = {w: [setup.request(rows, seed=100 * w + s) for s, rows in enumerate(sizes[w])] for w in sizes}
    expected = {w: [setup.local_act(obs, noise, False) for obs, _, noise in requests[w]] for w in sizes}
    errors: list[BaseException] = []

    def worker(w: int) -> None:
        try:
            for (obs, sent, _), want in zip(requests[w], expected[w]):
                assert_same(server.act(w, obs, sent), want)
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    metrics = server.pop_metrics()
    rows = sum(map(sum, sizes.values()))
    assert metrics["requests"] == 32 and metrics["rows"] == rows and metrics["max_batch_rows"] <= 16
    assert rows / 16 <= metrics["batches"] <= 32


def test_a_full_batch_runs_at_once_and_a_workers_next_step_waits_for_the_next_batch(make_server):
    setup = Setup("ppo/cartpole.yaml")
    obs, sent, _ = setup.request(8, seed=3)
    full = make_server(setup, max_batch_size=16, max_wait_ms=60_000)
    pending = [full.submit(w, obs, sent) for w in (0, 1)]
    for request in pending:
        request.result(timeout=30)
    assert full.pop_metrics()["batches"] == 1  # full at once: within result()'s 30 s, where max_wait_ms is a minute
    same_worker = make_server(setup, max_batch_size=16, max_wait_ms=5)
    for request in [same_worker.submit(0, obs, sent) for _ in range(2)]:
        request.result(timeout=30)
    oversized = same_worker.act(3, torch.cat([obs, obs]), torch.cat([sent, sent]))  # 16 rows alone
    assert oversized.action.shape == (16,)
    metrics = same_worker.pop_metrics()
    assert metrics["batches"] == 3 and metrics["max_batch_rows"] == 16


def test_closing_fails_queued_requests_instead_of_leaving_them_waiting():
    setup = Setup("ppo/cartpole.yaml")
    server = InferenceServer(setup.wiring.actor, max_batch_size=1000, max_wait_ms=60_000)
    obs, sent, _ = setup.request(4, seed=4)
    pending = server.submit(0, obs, sent)
    server.close()
    with pytest.raises(RuntimeError, match="closed"):
        pending.result(timeout=30)
    with pytest.raises(RuntimeError, match="closed"):
        server.submit(0, obs, sent)


# ------------------------------------------------------------------------ (d) recurrent state

#: per step: which workers submit, in which order, and whether together (one batch) or one by one
SCHEDULE = [((0, 1), True), ((1, 0), True), ((0,), False), ((1, 0), False), ((0, 1), True), ((1,), False), ((0, 1), False), ((1, 0), True)]


def test_recurrent_states_survive_interleaved_batches_and_reset_at_episode_starts(make_server):
    setup = Setup(GRU)
    n = setup.cfg.env.num_envs
    server = make_server(setup, max_batch_size=2 * n, max_wait_ms=50)  # two requests fill a batch
    generator = torch.Generator().manual_seed(0)
    states = {w: torch.zeros(n, setup.spec.state_size) for w in (0, 1)}  # what each worker's storage holds
    steps = {0: 0, 1: 0}
    for workers, together in SCHEDULE:
        step = []
        for w in workers:
            starts = torch.ones(n, dtype=torch.bool) if steps[w] == 0 else torch.rand(n, generator=generator) < 0.3
            obs, sent, noise = setup.request(n, seed=1000 * w + steps[w])
            expected = setup.local_act(obs, noise, True, states[w] * ~starts[:, None])  # the storage's zeroing
            step.append((w, (w, obs, sent, starts, True), expected))
        submitted = []
        for w, request, expected in step:
            submitted.append((w, server.submit(*request), expected))
            if not together:
                submitted[-1][1].result(timeout=30)
        for w, pending, expected in submitted:
            assert_same(pending.result(timeout=30), expected)
            states[w], steps[w] = expected.state, steps[w] + 1
    assert steps == {0: 7, 1: 7} and not torch.equal(states[0], states[1])
    assert server.pop_metrics()["batches"] == 10  # 4 steps of both workers in one batch, 6 alone


def test_a_client_resends_the_state_that_the_server_does_not_hold(make_server):
    """A restarted server (it holds no state: it asks for it) and a restored storage (its state is
    not the last reply's: the client sends it unasked)."""
    setup = Setup(GRU)
    n = setup.cfg.env.num_envs
    servers = [make_server(setup, max_batch_size=n), make_server(setup, max_batch_size=n)]
    current, sent_states = [servers[0]], []

    def call(name: str, *args: Any) -> Any:
        if name == "act":
            sent_states.append(args[-1] is not None)
        return getattr(current[0], name)(*args)

    client = RemotePolicy(call, 0)
    state = torch.zeros(n, setup.spec.state_size)
    for step in range(6):
        if step == 2:
            current[0] = servers[1]
        if step == 4:  # a checkpoint restored: other states, no episode starting
            state = torch.randn(n, setup.spec.state_size, generator=torch.Generator().manual_seed(1))
        obs, sent, noise = setup.request(n, seed=step)
        slots = ActionSlots(torch.empty(n, dtype=torch.long), torch.empty(n), torch.empty(n))
        acted = client.act(obs, sent, slots, state)
        expected = setup.local_act(obs, noise, True, state)
        assert_same(ActReply(slots.action, slots.log_prob, slots.value, acted.state, acted.version), expected)
        state = expected.state * (torch.arange(n) % 3 != step % 3)[:, None]  # some episodes start
    # sent on the first step, on the restarted server's request (a retry) and after the restore only
    assert sent_states == [True, False, False, True, False, True, False]
    with pytest.raises(MissingStateError):
        servers[1].act(9, obs, sent, torch.zeros(n, dtype=torch.bool), True)


# ----------------------------------------------------------------------- (e) whole rollouts


def _local_and_served_workers(make_server: Callable[..., InferenceServer], config: str, transport: Callable[[InferenceServer], Any] = direct_call) -> tuple[list[CollectionWorker], InferenceServer]:
    """Two collection workers alike (8 envs, 16 steps, seed 7) with the weights of version 3: the
    first acts locally, the second through a server reached by ``transport(server)``."""
    setup = Setup(config, "storage.num_steps=16", "env.num_envs=8")
    workers = [
        CollectionWorker(1, env_factory=setup.env_factory, actor_factory=setup.wiring.actor, storage_factory=setup.wiring.storage, seed=7)
        for _ in range(2)
    ]
    weights = setup.local.get_weights()
    server = make_server(setup, max_batch_size=8, max_wait_ms=10_000)
    server.set_weights(weights, 3)
    workers[0].set_weights(weights, 3)
    workers[1].policy = RemotePolicy(transport(server), 1)
    return workers, server


@pytest.mark.parametrize("config", ["ppo/cartpole.yaml", GRU])
def test_a_collection_worker_acting_through_the_server_collects_the_same_data(make_server, config):
    workers, server = _local_and_served_workers(make_server, config)
    episode_starts = 0
    try:
        for _ in range(2):  # the second rollout starts from the first's last state
            (local, local_info), (remote, remote_info) = (w.collect_data() for w in workers)
            assert local.keys() == remote.keys()
            for key in local:
                assert torch.equal(local[key], remote[key]), key
            assert local_info["policy_version"] == remote_info["policy_version"] == 3
            episode_starts += int((~local["valid"]).sum())
        assert workers[0].evaluate(3) == workers[1].evaluate(3)  # test episodes: the stateless path
    finally:
        for worker in workers:
            worker.close()
    metrics = server.pop_metrics()
    assert metrics["requests"] == 32 and metrics["score_requests"] == 2 and episode_starts > 0


class _LostReplies:
    """An in-process transport whose 5th and 11th recurrent acts from the server's held state run
    on the server, but their replies are lost, as when Ray loses touch with a live server. A
    plain call is then sent again (as ``call_surviving`` does); ``once`` says the call is in doubt."""

    def __init__(self, server: InferenceServer) -> None:
        self.direct, self.held_acts = direct_call(server), 0

    def _lost(self, method: str, args: tuple) -> bool:
        if method != "act" or args[5] is not None:  # args[5]: the state sent, None to act from the held one
            return False
        self.held_acts += 1
        if self.held_acts in (5, 11):
            self.direct(method, *args)  # it ran; its reply never came back
            return True
        return False

    def __call__(self, method: str, *args: Any) -> Any:
        self._lost(method, args)
        return self.direct(method, *args)

    def once(self, method: str, *args: Any) -> Any:
        if self._lost(method, args):
            raise RequestInDoubt("lost touch with the server")
        return self.direct(method, *args)


def test_a_recurrent_act_whose_reply_was_lost_is_sent_again_with_its_state(make_server):
    """A recurrent act from the state the server holds moves that state on: sent twice, the second
    would act from a state one step ahead, and the storage would record it. The worker sends it
    again with its state instead, and collects what a local worker collects."""
    workers, _ = _local_and_served_workers(make_server, GRU, _LostReplies)
    transport = workers[1].policy._call
    try:
        (local, _), (remote, _) = (w.collect_data() for w in workers)
    finally:
        for worker in workers:
            worker.close()
    assert transport.held_acts >= 11
    for key in local:
        assert torch.equal(local[key], remote[key]), key


def test_a_call_that_may_have_run_on_an_unreachable_server_is_resent_only_where_that_is_safe(ray_session):
    from ray.exceptions import ActorUnavailableError

    sent = []

    def submit(handle: Any) -> Any:
        sent.append(handle)
        if len(sent) == 1:
            raise ActorUnavailableError("lost touch", None)
        return ray_session.put(42)

    inference_servers._handles["pytorchrl-test-server"] = "handle"
    with pytest.raises(RequestInDoubt, match="pytorchrl-test-server was unreachable during a call that may have run"):
        inference_servers.call_surviving("pytorchrl-test-server", submit, 30, resend_in_doubt=False)
    assert len(sent) == 1
    sent.clear()
    resolved = []
    original, inference_servers._resolve = inference_servers._resolve, lambda name: resolved.append(name)  # the name still resolves: a live server
    try:
        assert inference_servers.call_surviving("pytorchrl-test-server", submit, 30) == 42
    finally:
        inference_servers._resolve = original
        inference_servers._handles.pop("pytorchrl-test-server")
    assert len(sent) == 2 and resolved == ["pytorchrl-test-server"]


@pytest.mark.parametrize("thin", [False, True], ids=["torch-worker", "thin-worker"])
def test_a_rollout_whose_weights_changed_on_the_server_counts_its_lag_from_the_oldest(make_server, thin):
    """The server's weights can change within a rollout (asynchronous central inference): the
    rollout's ``policy_version``, from which policy lag and ``scheme.max_policy_lag`` count, is
    the oldest that chose one of its actions, not the last."""
    setup = Setup("ppo/cartpole.yaml", "storage.num_steps=8", "env.num_envs=2")
    server = make_server(setup, max_batch_size=2, max_wait_ms=10_000)
    weights = setup.local.get_weights()
    server.set_weights(weights, 3)
    acts = 0

    def call(name: str, *args: Any) -> Any:
        nonlocal acts
        if name in ("act", "act_arrays"):
            acts += 1
            if acts == 4:  # the learner moved on mid-rollout
                server.set_weights(weights, 5)
        return direct_call(server)(name, *args)

    if thin:
        local, worker = local_and_thin(setup, call)
        local.close()
    else:
        worker = CollectionWorker(1, env_factory=setup.env_factory, actor_factory=setup.wiring.actor, storage_factory=setup.wiring.storage, seed=7)
        worker.policy = RemotePolicy(call, 1)
    try:
        assert worker.collect_data()[1]["policy_version"] == 3
        assert worker.collect_data()[1]["policy_version"] == 5  # all of the next one acted with version 5
    finally:
        worker.close()


def local_and_thin(setup: Setup, call: Callable[..., Any]) -> tuple[CollectionWorker, ThinCollectionWorker]:
    """A local worker holding the weights of version 3, and a thin worker acting through ``call``,
    both collector 1 of seed 7."""
    local = CollectionWorker(1, env_factory=setup.env_factory, actor_factory=setup.wiring.actor, storage_factory=setup.wiring.storage, seed=7)
    local.set_weights(setup.local.get_weights(), 3)
    recorder = thin_recorder_factory(setup.wiring.storage)
    assert recorder is not None
    thin = ThinCollectionWorker(1, env_factory=setup.env_factory, recorder_factory=recorder, policy_factory=lambda i: ArrayPolicy(call, i), seed=7)
    return local, thin


@pytest.mark.parametrize(
    ("config", "overrides", "rollouts"),
    [
        ("ppo/cartpole.yaml", ["storage.num_steps=16", "env.num_envs=8"], 2),
        ("dqn/apex_cartpole.yaml", [], 3),  # per-worker epsilon; actor-side priorities scored through the server
        ("sac/pendulum.yaml", ["env.num_envs=2", "algorithm.update_every=16"], 3),  # uniform warm-up acting, Gaussian noise
    ],
    ids=["ppo", "apex", "sac"],
)
def test_a_thin_worker_collects_what_a_local_worker_collects_even_when_the_server_forgets_its_noise(make_server, config, overrides, rollouts):
    """No torch on the worker's side of the calls (numpy in and out): the same rollouts, bit for
    bit, as a local worker of the same index and seed; a server that lost the rollout's noise
    (restarted) draws it again from the stream state the worker hands it."""
    setup = Setup(config, *overrides)
    server = make_server(setup, max_batch_size=setup.cfg.env.num_envs, max_wait_ms=10_000)
    server.set_weights(setup.local.get_weights(), 3)
    calls: list[str] = []
    sent: list[Any] = []

    def call(name: str, *args: Any) -> Any:
        calls.append(name)
        sent.extend(args)
        if name == "act_arrays" and calls.count("act_arrays") == 5:
            server._noise.clear()  # as a restarted server holds none
        return direct_call(server)(name, *args)

    local, thin = local_and_thin(setup, call)
    try:
        for _ in range(rollouts):
            (expected, expected_info), (data, info) = local.collect_data(), thin.collect_data()
            assert expected.keys() == data.keys()
            for key in expected:
                assert isinstance(data[key], np.ndarray) and torch.equal(expected[key], torch.from_numpy(data[key])), key
            assert expected_info["policy_version"] == info["policy_version"] == 3
            assert expected_info["episode_returns"] == info["episode_returns"]
        state = to_tensors(thin.state_dict())
        assert torch.equal(state["acting_rng"], local.state_dict()["acting_rng"])  # the same stream, advanced the same way
    finally:
        local.close()
        thin.close()
    assert calls.count("begin_rollout") == rollouts + 1  # one begun again
    assert not any(is_tensor(a) for a in sent)


def test_frame_stacks_encode_as_their_newest_frames_and_decode_exactly():
    rng = np.random.default_rng(0)
    previous = rng.integers(0, 255, (5, 4, 6, 6), dtype=np.uint8)
    obs = np.concatenate([previous[:, 1:], rng.integers(0, 255, (5, 1, 6, 6), dtype=np.uint8)], axis=1)
    obs[[1, 3]] = rng.integers(0, 255, (2, 4, 6, 6), dtype=np.uint8)  # episode starts: stacks begun anew
    delta = encode_frames(obs, 7, previous)
    assert delta is not None and delta.base == 7 and delta.fresh_rows.tolist() == [1, 3]
    assert delta.newest.shape == (5, 6, 6) and delta.fresh.shape == (2, 4, 6, 6)
    assert np.array_equal(decode_frames(delta, previous), obs)
    assert encode_frames(rng.integers(0, 255, (5, 4, 6, 6), dtype=np.uint8), 7, previous) is None  # nothing shifted
    assert encode_frames(np.zeros((5, 4), np.float32), 7, np.zeros((5, 4), np.float32)) is None  # vectors are not stacks


@pytest.mark.slow  # two workers' Pong rollouts: seconds
def test_a_thin_worker_sends_pongs_frame_stacks_as_deltas_and_collects_what_a_local_worker_collects(make_server):
    """Each step sends the envs' newest frames; the server rebuilds the stacks from the step before
    (the rollouts are a local worker's, bit for bit), and a server that lost them (restarted) is
    sent the whole observations."""
    setup = Setup("appo/atari_pong_central.yaml", "env.num_envs=4", "storage.num_steps=16", "env.atari.screen_size=42")
    server = make_server(setup, max_batch_size=4, max_wait_ms=10_000)
    server.set_weights(setup.local.get_weights(), 3)
    sent: list[Any] = []

    def call(name: str, *args: Any) -> Any:
        args = compression.unpack(pickle.loads(pickle.dumps(compression.pack(args))))  # as the Ray transport sends them
        if name == "act_arrays":
            sent.append(args[1])
            if len(sent) == 20:
                server._frames.clear()  # as a restarted server holds none
        return direct_call(server)(name, *args)

    local, thin = local_and_thin(setup, call)
    try:
        for _ in range(2):
            (expected, _), (data, _) = local.collect_data(), thin.collect_data()
            for key in expected:
                assert torch.equal(expected[key], torch.from_numpy(data[key])), key
    finally:
        local.close()
        thin.close()
    deltas = [i for i, obs in enumerate(sent) if isinstance(obs, FrameDelta)]
    assert deltas[0] == 1  # the first step is sent whole
    assert isinstance(sent[20], np.ndarray) and sent[19].base == 19  # the lost step sent again whole
    assert len(deltas) == len(sent) - 2 and all(obs.newest.shape == (4, 42, 42) for i, obs in enumerate(sent) if i in deltas)


@pytest.mark.filterwarnings("ignore:inference server at")  # the connection refused while the server is down
@pytest.mark.parametrize("family", ["unix", "tcp"])
def test_a_thin_worker_over_a_socket_collects_what_a_local_worker_collects_and_falls_back_when_it_breaks(make_server, family):
    setup = Setup("ppo/cartpole.yaml", "storage.num_steps=16", "env.num_envs=8")
    server = make_server(setup, max_batch_size=8, max_wait_ms=10_000)
    server.set_weights(setup.local.get_weights(), 3)

    def handler(method: str, args: tuple[Any, ...]) -> Any:
        return getattr(server, method)(*args)

    address = socket_address(f"test-{uuid.uuid4().hex}")
    batched = ("act_arrays", server.act_arrays_now)  # as the server's Ray host listens
    listeners = [SocketListener(handler, address, "127.0.0.1", batched=batched, max_wait_s=0.01)]
    fallen_back: list[str] = []

    def fallback(name: str, *args: Any) -> Any:  # the Ray transport's place
        fallen_back.append(name)
        return direct_call(server)(name, *args)

    def locate() -> tuple[str, Any, bytes]:  # a restarted server listens on another TCP port
        endpoint = listeners[-1].endpoint()
        return family, endpoint.unix if family == "unix" else endpoint.tcp, endpoint.key

    call = SocketCall(fallback, locate, timeout_s=60, retry_s=0)
    local, thin = local_and_thin(setup, call)
    try:
        for rollout in range(3):
            (expected, _), (data, _) = local.collect_data(), thin.collect_data()
            for key in expected:
                assert torch.equal(expected[key], torch.from_numpy(data[key])), (rollout, key)
            if rollout == 0:  # all over the socket; then the server's process "dies"
                assert listeners[0].calls[family] == 20 and fallen_back == []  # array_spec, stream_state, begin_rollout, 16 steps, score_arrays
                listeners[0].close()
            elif rollout == 1:  # all through the fallback; then a server starts again
                assert fallen_back.count("act_arrays") == 16
                listeners.append(SocketListener(handler, address, "127.0.0.1", batched=batched, max_wait_s=0.01))
        assert listeners[1].calls[family] == 18 and fallen_back.count("act_arrays") == 16  # begin_rollout, 16 steps, score_arrays: back on the socket
        with pytest.raises(MissingNoiseError):  # a server's error is raised in the client
            call("act_arrays", 99, np.zeros((8, 4), np.float32), 0, True, 1)
    finally:
        local.close()
        thin.close()
        listeners[-1].close()


def test_the_listener_answers_calls_that_arrive_together_with_one_batch_and_each_error_to_its_caller():
    """Calls of the batched method wait until every connected client has one waiting (then run at
    once, however long max_wait_s is) or until max_wait_s has passed (a lone call, the other
    clients idle); an error of one call goes to its caller alone; other methods answer at once."""
    batches: list[list[int]] = []
    waited: list[float] = []  # how long the first call of each batch waited since the loop read it

    def run_many(calls: list[tuple[Any, ...]], arrivals: list[float]) -> list[tuple[bool, Any]]:
        assert len(arrivals) == len(calls) and arrivals == sorted(arrivals)
        waited.append(time.monotonic() - arrivals[0])
        batches.append(sorted(args[0] for args in calls))
        return [(False, ValueError(f"bad {args[0]}")) if args[0] < 0 else (True, 10 * args[0]) for args in calls]

    listener = SocketListener(lambda method, args: (method, args), socket_address(f"test-{uuid.uuid4().hex}"), batched=("act", run_many), max_wait_s=30.0)
    clients = [SocketCall(lambda *a: pytest.fail("fell back"), lambda: ("unix", listener.address, listener.key), timeout_s=60) for _ in range(4)]
    try:
        assert [c("ping", i) for i, c in enumerate(clients)] == [("ping", (i,)) for i in range(4)]  # all four connected, not batched
        with ThreadPoolExecutor(4) as pool:
            replies = list(pool.map(lambda i: _outcome(clients[i], "act", (i, -1)[i == 3]), range(4)))
        assert replies == [0, 10, 20, "ValueError: bad -1"] and batches == [[-1, 0, 1, 2]]
        listener.max_wait_s = 0.05  # now a lone call, the other three clients connected and idle
        assert clients[1]("act", 7) == 70 and batches[-1] == [7] and waited[-1] >= 0.049
        assert clients[0]._conn is not None
        send(clients[0]._conn, ["not", "a", "call"])  # from a client past the handshake: it alone is hung up on
        assert _hung_up(clients[0]._conn)
        assert clients[2]("ping", 5) == ("ping", (5,)) and clients[2]("act", 8) == 80
    finally:
        listener.close()


def test_the_wait_for_company_in_the_socket_loop_counts_in_the_servers_mean_wait(make_server):
    """inference_wait_ms means the same on either transport: a lone call over the socket, another
    client connected and idle, waits max_wait_ms in the listener's loop before its batch runs,
    and the server's mean wait says so (it once said ~0.1 ms, the time from the batch's start)."""
    setup = Setup("ppo/cartpole.yaml")
    server, alone = make_server(setup, max_batch_size=1000, max_wait_ms=50), make_server(setup)
    for s in (server, alone):
        s.begin_rollout(0, s.stream_state(7), 1, 8)
    listener = SocketListener(lambda method, args: getattr(server, method)(*args), socket_address(f"test-{uuid.uuid4().hex}"),
                              batched=("act_arrays", server.act_arrays_now), max_wait_s=server.max_wait_s)
    clients = [SocketCall(lambda *a: pytest.fail("fell back"), lambda: ("unix", listener.address, listener.key), timeout_s=60) for _ in range(2)]
    try:
        clients[1]("array_spec")  # connected, and idle from now on
        obs = setup.request(8, seed=3)[0].numpy()
        assert np.array_equal(clients[0]("act_arrays", 0, obs, 0, True)[0], alone.act_arrays(0, obs, 0, True)[0])
        metrics = server.pop_metrics()
        assert metrics["batches"] == 1 and metrics["mean_wait_ms"] >= 49.9
    finally:
        listener.close()


def _outcome(call: SocketCall, method: str, *args: Any) -> Any:
    try:
        return call(method, *args)
    except ValueError as error:
        return f"ValueError: {error}"


def _hung_up(conn: socket.socket) -> bool:
    """Whether the other side closed ``conn`` (reset, when what was sent to it was never read)."""
    try:
        return conn.recv(1) == b""
    except ConnectionResetError:
        return True


def test_only_a_client_holding_the_listeners_key_is_served_and_only_the_listener_holding_it_is_called():
    called: list[str] = []
    listener = SocketListener(lambda method, args: called.append(method), socket_address(f"test-{uuid.uuid4().hex}"), "127.0.0.1")
    impostor = SocketListener(lambda method, args: called.append("impostor"), socket_address(f"test-{uuid.uuid4().hex}"), "127.0.0.1")
    fallen_back: list[str] = []
    try:
        with socket.create_connection(listener.tcp, timeout=10) as conn:  # a client that knows no key
            assert len(conn.recv(NONCE_BYTES)) == NONCE_BYTES  # the listener's challenge
            conn.sendall(bytes(48))  # a wrong answer, then a call
            send(conn, ("act_arrays", ()))
            assert _hung_up(conn)
        wrong_key = SocketCall(lambda method, *a: fallen_back.append(method), lambda: ("tcp", listener.tcp, bytes(KEY_BYTES)), timeout_s=10)
        with pytest.warns(UserWarning, match="the handshake failed"):
            wrong_key("array_spec")
        assert fallen_back == ["array_spec"] and wrong_key._retry_at > time.monotonic()  # refused: it waits before trying again
        # a process at the address the client was told, without the listener's key, gets no call
        at_impostor = SocketCall(lambda method, *a: fallen_back.append(method), lambda: ("unix", impostor.address, listener.key), timeout_s=10)
        at_impostor("act_arrays")
        assert fallen_back == ["array_spec", "act_arrays"] and impostor.calls == {"unix": 0, "tcp": 0}
        assert called == [] and listener.calls == {"unix": 0, "tcp": 0}  # nothing unpickled, nothing run
        right = SocketCall(lambda *a: pytest.fail("fell back"), lambda: ("tcp", listener.tcp, listener.key), timeout_s=10)
        assert right("array_spec") is None and called == ["array_spec"] and listener.calls["tcp"] == 1
    finally:
        listener.close()
        impostor.close()


def test_a_client_that_stalls_mid_call_holds_up_the_others_no_longer_than_the_read_timeout(monkeypatch):
    """The loop reads one call at a time: a client (one holding the key) that sends a call's
    first bytes and then trickles the rest is hung up on once READ_TIMEOUT_S has passed since
    they came, however the bytes keep coming (each read's timeout once restarted with every byte)."""
    monkeypatch.setattr(socket_transport, "READ_TIMEOUT_S", 0.5)
    listener = SocketListener(lambda method, args: (method, args), socket_address(f"test-{uuid.uuid4().hex}"))
    other = SocketCall(lambda *a: pytest.fail("fell back"), lambda: ("unix", listener.address, listener.key), timeout_s=5)
    stop = threading.Event()
    try:
        assert other("echo", 0) == ("echo", (0,))
        trickler = socket.socket(socket.AF_UNIX)
        trickler.connect(listener.address)
        assert socket_transport._handshake(trickler, listener.key, listener=False)
        trickler.sendall(socket_transport._HEADER.pack(1000))  # a call of 1,000 bytes, then a byte every 0.2 s for 10 s

        def trickle() -> None:
            for _ in range(50):
                if stop.wait(0.2):
                    return
                try:
                    trickler.sendall(b"x")
                except OSError:  # hung up on
                    return

        thread = threading.Thread(target=trickle, daemon=True)
        thread.start()
        time.sleep(0.1)  # its header read first
        assert other("echo", 1) == ("echo", (1,))  # within 5 s: before, the trickle held the loop for 10
        thread.join(timeout=10)
        assert _hung_up(trickler)
    finally:
        stop.set()
        listener.close()


def test_a_socket_call_that_cannot_connect_falls_back_and_asks_where_again_only_after_a_growing_pause():
    with socket.socket() as spare:  # a port that nothing listens on
        spare.bind(("127.0.0.1", 0))
        port = spare.getsockname()[1]
    located: list[int] = []

    def locate() -> tuple[str, Any, bytes] | None:
        located.append(1)
        return ("tcp", ("127.0.0.1", port), bytes(KEY_BYTES)) if len(located) == 1 else None

    call = SocketCall(lambda method, *args: (method, args), locate, timeout_s=10, retry_s=10)
    with pytest.warns(UserWarning, match=f"127.0.0.1:{port}"):  # said once
        assert [call("act_arrays", i) for i in range(3)] == [("act_arrays", (i,)) for i in range(3)]
    assert len(located) == 1 and call._retry_at > time.monotonic() + 9 and call._pause == 20  # refused: next try in 10 s, then 20
    call._retry_at = 0.0  # the pause is over
    assert call("score_arrays") == ("score_arrays", ()) and len(located) == 2 and call._pause == 40
    call._pause = MAX_RETRY_S
    call._retry_at = 0.0
    call("score_arrays")
    assert call._pause == MAX_RETRY_S  # the longest pause


@pytest.mark.parametrize(
    ("error", "outcome"),
    [(KeyboardInterrupt(), "raises"), (TimeoutError(errno.ETIMEDOUT, "Connection timed out"), "falls back"), (TimeoutError("timed out"), "times out")],
    ids=["interrupted", "peer-gone", "no-reply"],
)
def test_a_socket_call_cut_short_hangs_up_and_the_next_call_gets_its_own_reply(monkeypatch, error, outcome):
    """Interrupted between request and reply, the call re-raises; a connection the system timed
    out (keepalive, TCP_USER_TIMEOUT: the server's node gone) falls back to Ray; no reply within
    ``timeout_s`` raises as a Ray timeout. Either way the connection is dropped, so the reply
    left on it can never answer the next call."""
    listener = SocketListener(lambda method, args: (method, args), socket_address(f"test-{uuid.uuid4().hex}"))
    fallen_back: list[str] = []
    call = SocketCall(lambda method, *a: fallen_back.append(method), lambda: ("unix", listener.address, listener.key), timeout_s=10, retry_s=0)
    real_receive = socket_transport.receive

    def cut_short(conn: socket.socket, *deadline: float) -> Any:  # once, in the client (not the listener's threads)
        if threading.current_thread() is not threading.main_thread():
            return real_receive(conn, *deadline)
        monkeypatch.setattr(socket_transport, "receive", real_receive)
        raise error

    try:
        assert call("act_arrays", 1) == ("act_arrays", (1,))
        monkeypatch.setattr(socket_transport, "receive", cut_short)
        if outcome == "raises":
            with pytest.raises(KeyboardInterrupt):
                call("act_arrays", 2)
        elif outcome == "times out":
            with pytest.raises(TimeoutError, match="within 10 s"):
                call("act_arrays", 2)
        else:
            call("act_arrays", 2)
        assert call._conn is None and fallen_back == (["act_arrays"] if outcome == "falls back" else [])
        assert call("act_arrays", 3) == ("act_arrays", (3,))  # not call 2's reply, left on the old connection
    finally:
        listener.close()


@pytest.mark.parametrize(
    ("transport", "server_node", "route"), [("auto", "here", "unix"), ("auto", "there", "tcp"), ("same_node", "here", "unix"), ("same_node", "there", None)],
)
def test_locate_picks_the_unix_socket_on_the_servers_node_and_tcp_elsewhere_as_the_transport_allows(monkeypatch, transport, server_node, route):
    ray = pytest.importorskip("ray")
    endpoint = Endpoint("\0pytorchrl-x", ("10.0.0.7", 4321), b"k" * KEY_BYTES)
    monkeypatch.setattr(inference_servers, "call_surviving", lambda name, submit, timeout_s: (server_node, endpoint))
    monkeypatch.setattr(ray, "get_runtime_context", lambda: types.SimpleNamespace(get_node_id=lambda: "here"))
    expected = {"unix": ("unix", endpoint.unix, endpoint.key), "tcp": ("tcp", endpoint.tcp, endpoint.key), None: None}[route]
    assert inference_servers.locate("server-0", transport, 5.0) == expected


@pytest.mark.parametrize(
    ("config", "overrides", "thin"),
    [
        ("ppo/cartpole.yaml", [], True),
        ("impala/cartpole.yaml", [], True),
        (GRU, [], False),  # the server keeps each env's state: the torch worker records it
        ("dqn/cartpole.yaml", [], True),  # replay: a ReplayRecorder
        ("sac/pendulum.yaml", [], True),
        ("ppo/cartpole.yaml", ["demos"], False),  # demonstrations replayed by the worker's storage
    ],
)
def test_which_storages_a_thin_worker_records_for(config, overrides, thin):
    setup = Setup(config)
    factory = setup.wiring.storage
    if overrides == ["demos"]:
        factory = functools.partial(factory.func, **{**factory.keywords, "demos": object()})
    recorder = thin_recorder_factory(factory)
    assert (recorder is not None) == thin
    if recorder is not None:
        made = recorder()
        assert type(made) is (ReplayRecorder if setup.cfg.algorithm.replay else RolloutRecorder)
        assert made.num_steps == (getattr(setup.cfg.algorithm, "update_every", None) or setup.cfg.storage.num_steps)
