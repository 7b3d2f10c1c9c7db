"""Unit tests of the Ray seam that need no Ray: compression round trips, resource fitting, info merging."""

from __future__ import annotations

import functools
import threading
import time

import pytest
import torch

from pytorchrl.scheme.base import compression
from pytorchrl.scheme.base.infos import merge_step_infos
from pytorchrl.scheme.base.worker_set import CollectorNumbering, WorkerSet, actor_options, check_fits, total_resources


def test_packing_round_trips_nested_tensors_of_every_dtype_with_and_without_lz4():
    data = {
        "obs": torch.randn(5, 3, 4), "actions": torch.randint(0, 9, (5, 3)), "valid": torch.rand(5, 3) > 0.5,
        "half": torch.randn(3).to(torch.bfloat16), "scalar": torch.tensor(2.5, dtype=torch.float64),
        "nested": [torch.zeros(100), (torch.arange(7, dtype=torch.int32), "text", 3)], "empty": torch.zeros(0, 4),
    }
    wide = {"u16": torch.tensor([0, 1, 65535], dtype=torch.uint16), "u64": torch.tensor([0, 2**63], dtype=torch.uint64)}  # once a KeyError unpacking
    for compress in (False, True):
        packed = compression.pack(data, compress)
        assert isinstance(packed, compression.Wire) and packed.compressed == compress
        if compress:
            assert packed.nbytes < packed.size  # the zeros compress
        out = compression.unpack(packed)
        for key in ("obs", "actions", "valid", "half", "scalar", "empty"):
            assert out[key].dtype == data[key].dtype and out[key].shape == data[key].shape
            assert torch.equal(out[key], data[key])
        assert torch.equal(out["nested"][1][0], data["nested"][1][0]) and out["nested"][1][1:] == ("text", 3)
        for key, tensor in compression.unpack(compression.pack(wide, compress)).items():  # numpy has them; torch does little with them
            assert tensor.dtype == wide[key].dtype and tensor.numpy().tolist() == wide[key].numpy().tolist()
        out["obs"].add_(1.0)  # unpacked tensors are writable and do not alias the sender's
        assert not torch.equal(out["obs"], data["obs"])
    assert compression.unpack({"plain": 1}) == {"plain": 1}  # never-packed data passes through
    assert compression.pack({"plain": 1}) == {"plain": 1}


def test_packing_keeps_named_tuples_such_as_an_inference_reply():
    """A central-inference reply travels packed: its NamedTuple type, tensors and Nones survive."""
    from pytorchrl.scheme.inference.server import ActReply

    reply = ActReply(torch.tensor([1, 0]), torch.tensor([-0.5, -0.7]), None, None, 3)
    out = compression.unpack(compression.pack((reply, "act")))
    assert type(out[0]) is ActReply and out[1] == "act"
    assert torch.equal(out[0].action, reply.action) and torch.equal(out[0].log_prob, reply.log_prob)
    assert out[0].value is None and out[0].state is None and out[0].version == 3


CPU1 = {"num_cpus": 1.0, "num_gpus": 0.0, "memory": None, "resources": {}}


def test_layouts_that_fit_and_that_do_not():
    nodes = [{"CPU": 2.0, "node_a": 1.0}, {"CPU": 2.0, "GPU": 1.0}]
    cluster = {"CPU": 4.0, "GPU": 1.0, "node_a": 1.0}
    assert check_fits([("collection worker", 4, CPU1)], cluster, nodes) is None
    msg = check_fits([("gradient worker", 2, CPU1), ("collection worker", 3, CPU1)], cluster, nodes)
    assert msg == (
        "scheme: the workers ask for 5 CPU in all (2 gradient workers x 1 + 3 collection workers x 1) but the Ray "
        "cluster has 4; lower the worker counts or their per-worker resources"
    )
    gpu2 = {**CPU1, "num_gpus": 2.0}
    assert "one gradient worker asks for 2 GPU but no node of the Ray cluster has more than 1" in check_fits([("gradient worker", 1, gpu2)], cluster, nodes)
    pinned = {**CPU1, "num_cpus": 0.5, "resources": {"node_a": 1}}
    assert "ask for 2 node_a in all" in check_fits([("collection worker", 2, pinned)], cluster, nodes)
    assert check_fits([("collection worker", 0, gpu2)], cluster, nodes) is None  # none asked for
    assert total_resources([("c", 3, {**CPU1, "num_cpus": 0.5})]) == {"CPU": 1.5}


def test_a_layout_whose_workers_fit_the_totals_but_not_the_nodes_is_refused_not_left_pending():
    """Ray places all of a worker's resources on one node, and a fraction of a GPU within one
    GPU: layouts that pass the per-resource and total checks but no node can hold once waited
    five minutes for actors that never started."""
    split = [{"CPU": 8.0}, {"CPU": 2.0, "GPU": 1.0}]
    assert "one gradient worker asks for 4 CPU, 1 GPU on one node, and no node" in check_fits(
        [("gradient worker", 1, {**CPU1, "num_cpus": 4.0, "num_gpus": 1.0})], {"CPU": 10.0, "GPU": 1.0}, split)
    pinned = {**CPU1, "num_cpus": 8.0, "resources": {"learner": 1}}
    assert "no node of the Ray cluster has all of that" in check_fits(
        [("collection worker", 1, pinned)], {"CPU": 20.0, "learner": 1.0}, [{"CPU": 4.0, "learner": 1.0}, {"CPU": 16.0}])
    msg = check_fits([("collection worker", 2, {**CPU1, "num_cpus": 3.0})], {"CPU": 6.0}, [{"CPU": 4.0}, {"CPU": 2.0}])
    assert msg is not None and "hold 1 of them at most (per node: 1, 0)" in msg
    two_gpus = [{"CPU": 4.0, "GPU": 1.0}, {"CPU": 4.0, "GPU": 1.0}]
    assert "hold 2 of them at most" in check_fits([("gradient worker", 3, {**CPU1, "num_gpus": 0.6})], {"CPU": 8.0, "GPU": 2.0}, two_gpus)
    assert check_fits([("gradient worker", 4, {**CPU1, "num_gpus": 0.5})], {"CPU": 8.0, "GPU": 2.0}, two_gpus) is None  # two a GPU
    assert check_fits([("gradient worker", 2, {**CPU1, "num_gpus": 2.0})], {"CPU": 4.0, "GPU": 4.0}, [{"CPU": 4.0, "GPU": 4.0}]) is None


def test_actor_options_carry_every_resource():
    opts = actor_options({"num_cpus": 0.5, "num_gpus": 1, "memory": 2**30, "resources": {"node_b": 1}})
    assert opts["num_cpus"] == 0.5 and opts["num_gpus"] == 1.0 and opts["memory"] == 2**30
    assert opts["resources"] == {"node_b": 1.0} and "control" in opts["concurrency_groups"]
    assert "memory" not in actor_options(CPU1)


def test_merging_the_infos_of_two_gradient_workers():
    a = {"env_steps": 64, "episode_returns": [10.0], "policy_lags": [0], "policy_loss": 1.0, "round_end": False, "collect_time_s": 0.2, "num_samples": 32}
    b = {"env_steps": 64, "episode_returns": [20.0, 30.0], "policy_lags": [2], "policy_loss": 3.0, "round_end": True, "collect_time_s": 0.5, "num_samples": 32}
    m = merge_step_infos([a, b])
    assert m["env_steps"] == 128 and m["num_samples"] == 64
    assert m["episode_returns"] == [10.0, 20.0, 30.0]
    assert m["policy_loss"] == 2.0 and m["policy_lag_mean"] == 1.0
    assert m["round_end"] is True and m["collect_time_s"] == 0.5
    assert "skipped" not in merge_step_infos([{**a, "skipped": 1.0}, b])
    assert merge_step_infos([{**a, "skipped": 1.0}, {**b, "skipped": 1.0}])["skipped"] == 1.0


def test_a_replacement_collection_worker_gets_fresh_env_and_acting_seeds():
    from pytorchrl.agent.actors.on_policy import OnPolicyActor
    from pytorchrl.agent.storages.on_policy.gae_buffer import GAEBuffer
    from pytorchrl.envs.vec_env import VecEnv
    from pytorchrl.scheme.collection.collection_worker_set import _make_collection_worker

    env_factory, obs_space, act_space = VecEnv.create_factory("CartPole-v1", num_envs=2, seed=5)
    kwargs = {
        "env_factory": env_factory, "actor_factory": OnPolicyActor.create_factory(obs_space, act_space),
        "seed": 5,
        "storage_factory": GAEBuffer.create_factory(num_steps=4, num_envs=2, obs_shape=(4,), action_shape=(), discrete=True),
    }
    make = functools.partial(_make_collection_worker, worker_kwargs=kwargs, numbering=CollectorNumbering(), local_collects=True)
    local, original, replacement = make(0, local=True), make(1, local=False), make(1, local=False, generation=1)
    # remote worker 1 of generation 0 collects what the local worker would; its replacement does not
    assert original.envs._seeds == local.envs._seeds
    assert not set(replacement.envs._seeds) & set(original.envs._seeds)
    assert replacement._stream.state.ne(original._stream.state).any()
    for worker in (local, original, replacement):
        worker.close()


def test_a_ray_error_that_announces_its_cause_keeps_the_cause_in_its_one_line():
    """`--address ray://...` ended in "Initialization failure from server:" with the cause cut off."""
    from pytorchrl.scheme.base.ray_runtime import _first_line

    traced = ConnectionError("Initialization failure from server:\nTraceback (most recent call last):\n  File \"x\"\nRuntimeError: Version mismatch")
    assert _first_line(traced) == "Initialization failure from server: RuntimeError: Version mismatch"
    assert _first_line(RuntimeError("No cluster. To fix this, either:\n  1. start one\n  2. point at one")) == "No cluster. To fix this, either: 1. start one"
    assert _first_line(RuntimeError("Cannot connect.\nmore")) == "Cannot connect."
    assert _first_line(RuntimeError("")) == "RuntimeError"


def test_collector_numbers_are_distinct_over_every_replica_added_workers_included():
    """Each gradient replica's collecting workers keep the numbers they always had (replica r's
    first worker r * n), and workers added later take numbers no other replica's worker has."""
    for replicas in (1, 2, 3):
        for per_replica in (1, 2, 3):
            numbers = {(r, index): CollectorNumbering(r, replicas, per_replica)(index) for r in range(replicas) for index in range(1, per_replica + 5)}
            assert len(set(numbers.values())) == len(numbers)
            assert all(numbers[r, j + 1] == r * per_replica + j for r in range(replicas) for j in range(per_replica))
    one = CollectorNumbering()
    assert [one(index) for index in range(6)] == [0, 0, 1, 2, 3, 4]  # the local worker and remote worker 1 collect alike


def test_collection_workers_added_to_gradient_replicas_take_numbers_no_other_collector_has():
    from pytorchrl.scheme.gradients.gradient_worker_set import collection_overrides

    for num_remote, collectors in ((2, 1), (3, 2)):
        numberings = [collection_overrides(index, local=False, num_remote=num_remote, collectors=collectors, generation=0)["numbering"]
                      for index in range(1, num_remote + 1)]
        numbers = [numbering(worker) for numbering in numberings for worker in range(1, collectors + 4)]  # 3 added to each
        assert len(set(numbers)) == len(numbers)
    assert collection_overrides(0, local=True, num_remote=2, collectors=1, generation=0) == {"evaluation_only": True}
    # no remote gradient workers: the local one's set numbers its workers from 0
    assert collection_overrides(0, local=True, num_remote=0, collectors=2, generation=0)["numbering"] == CollectorNumbering(0, 1, 2)


def test_a_remote_gradient_worker_computes_where_its_reserved_resources_are_not_on_the_learner_s_device(monkeypatch):
    """``run.device`` is the learner's, on the driver: a remote replica that reserves a GPU
    computes on the one Ray gives it (``cuda``: cuda:0 in its process, whatever the driver's
    index), and one that reserves none on the CPU (it once took the driver's device: a reserved
    GPU left idle, or an unreserved one used)."""
    from pytorchrl.scheme.gradients import gradient_worker_set

    made: dict[int, dict] = {}
    monkeypatch.setattr(gradient_worker_set, "GradientWorker", lambda index, **kwargs: made.setdefault(index, kwargs))
    kwargs = {"device": "cuda:1", "remote_device": "cuda", "seed": 0}
    for index in (0, 1):
        gradient_worker_set._make_gradient_worker(index, local=index == 0, worker_kwargs=kwargs, num_remote=1, collectors=1)
    assert made[0]["device"] == "cuda:1" and made[1]["device"] == "cuda"
    assert "remote_device" not in made[0] and "remote_device" not in made[1]


def test_rounds_collected_one_after_another_for_one_step_add_their_collection_times():
    """A replay buffer filling up (start_steps) folds several rounds into one step: their
    collections ran one after another, so the step's collect_time_s is their sum (merging
    replicas' infos takes the longest, as those run at once); it was the longest of them."""
    from types import SimpleNamespace

    from pytorchrl.scheme.gradients.gradient_worker import GradientWorker

    rounds = iter([({"env_steps": 8, "collect_time_s": 0.5, "episode_returns": []}, 0), ({"env_steps": 8, "collect_time_s": 0.25, "episode_returns": []}, 2)])

    def new_round():
        info, remaining = next(rounds)
        worker._remaining = remaining
        return info

    worker = SimpleNamespace(_remaining=0, _new_round=new_round, report_statistics=False)
    merged = GradientWorker._new_rounds(worker)  # type: ignore[arg-type]
    assert merged["env_steps"] == 16 and merged["collect_time_s"] == pytest.approx(0.75)


class _Replica:
    """A remote gradient worker stand-in that counts its collection workers."""

    def __init__(self, collectors: int) -> None:
        self.collectors = collectors

    def add_collection_workers(self, num: int) -> None:
        self.collectors += num

    def remove_collection_workers(self, num: int) -> None:
        self.collectors -= num

    def adopt_statistics(self, statistics: dict) -> None:
        pass


class _Answer:
    def __init__(self, value: object) -> None:
        self.value = value


class _ImmediateWorkerSet(WorkerSet):
    """The real WorkerSet bookkeeping (poll, ask_all, fail, membership) with calls that run at
    once on local stand-ins instead of Ray actors."""

    def __init__(self, collectors: int, num: int) -> None:
        super().__init__(lambda index, local, generation=0: None)
        self.collectors = collectors
        for index in range(1, num + 1):
            self._start(index)
        for ref in list(self._starting):
            self.remote_workers.append(self._starting.pop(ref)[0])

    def _start(self, index: int, generation: int = 0, delay_s: float = 0.0) -> _Replica:
        handle = _Replica(self.collectors)
        self._index[handle] = (index, generation)
        self._starting[_Answer(True)] = (handle, 0.0)
        return handle

    def call(self, worker, method, *args, control=False, **kwargs):
        return _Answer(getattr(worker, method)(*args, **kwargs))

    @staticmethod
    def wait(refs, *, num_returns=1, timeout=None):
        return list(refs), []

    @staticmethod
    def get(refs):
        return refs.value


def test_a_resize_from_another_thread_reaches_a_joining_replica_once():
    """A replacement replica (built with the config's one collection worker) joins while the
    user's thread adds one to every replica: the resize lands before it joins or after it was
    told of the earlier ones, never both (it once came in between, and the replacement got the
    added worker twice)."""
    from pytorchrl.scheme.gradients.gradient_worker_set import GradientWorkerSet

    replicas = _ImmediateWorkerSet(collectors=1, num=2)
    grad = object.__new__(GradientWorkerSet)
    grad.workers, grad._collectors, grad.collectors_added = replicas, 1, 0
    grad.merged_statistics = lambda: {"obs_rms": {}}  # a merge to hand on: nothing asked of the replicas
    told = grad._on_join
    resizing = threading.Thread(target=grad.resize_collection_workers, args=(1,))

    def on_join(joined: list) -> None:  # the user's thread gets the GIL between the join and its on_join
        resizing.start()
        time.sleep(0.2)
        told(joined)

    replicas.on_join = on_join
    dead = replicas.remote_workers.pop(0)  # replica 1 died: its replacement, index 1, is starting
    replicas._index.pop(dead)
    replicas._start(1, generation=1)
    replicas.poll()
    resizing.join(timeout=10)
    assert [r.collectors for r in replicas.remote_workers] == [2, 2] and grad.collectors_added == 1
