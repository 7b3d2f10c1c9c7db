"""Encoders on every space, for every actor; images stay uint8 through storages and Ray."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from pytorchrl.agent.actors.networks import EncoderError, EncoderSpec, ImpalaResNet, NatureCNN
from pytorchrl.agent.actors.off_policy import OffPolicyActor
from pytorchrl.agent.actors.on_policy import OnPolicyActor
from pytorchrl.agent.actors.policy_critic import PolicyCriticActor
from pytorchrl.agent.algorithms import ALGORITHMS
from pytorchrl.agent.storages.off_policy.replay_storage import ReplayStorage
from pytorchrl.agent.storages.on_policy.gae_buffer import GAEBuffer
from pytorchrl.config import ConfigError, config_to_dict, from_dict, load_config
from pytorchrl.envs.vec_env import VecEnv
from pytorchrl.utils.errors import InputError
from pytorchrl.utils.spaces import obs_layout, pack_dict, same_layout
from tests.conftest import CONFIGS

IMAGE_CHW = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
IMAGE_HWC = gym.spaces.Box(0, 255, (40, 40, 3), np.uint8)
VECTOR = gym.spaces.Box(-1, 1, (5,), np.float32)
DISCRETE = gym.spaces.Discrete(7)
MIXED = gym.spaces.Dict({"camera": gym.spaces.Box(0, 255, (1, 36, 36), np.uint8), "goal": gym.spaces.Discrete(3), "pose": VECTOR})
IMAGES = gym.spaces.Dict({"a": gym.spaces.Box(0, 255, (1, 36, 36), np.uint8), "b": gym.spaces.Box(0, 255, (2, 36, 36), np.uint8)})


def _batch(space: gym.Space, n: int = 3) -> torch.Tensor:
    """``n`` stored observations of ``space`` (as the vector env hands them out)."""
    samples = [space.sample() for _ in range(n)]
    if isinstance(space, gym.spaces.Dict):
        return torch.from_numpy(pack_dict(space, {k: np.stack([s[k] for s in samples]) for k in space.spaces}, n))
    return torch.from_numpy(np.asarray(samples, dtype=obs_layout(space).dtype))


@pytest.mark.parametrize(
    ("space", "kind", "width"),
    [
        (VECTOR, "auto", 16), (VECTOR, "mlp", 16), (DISCRETE, "auto", 16),
        (IMAGE_CHW, "auto", 16), (IMAGE_CHW, "nature_cnn", 16), (IMAGE_CHW, "impala_resnet", 16), (IMAGE_CHW, "mlp", 16),
        (IMAGE_HWC, "nature_cnn", 16), (IMAGE_HWC, "impala_resnet", 16),
        (MIXED, "auto", 16), (MIXED, "impala_resnet", 16), (IMAGES, "auto", 16), (MIXED, "auto", None),
    ],
)
def test_encoder_output_shape_and_dtype(space, kind, width):
    spec = EncoderSpec(kind=kind, hidden_sizes=(width,) if width else (), cnn_features=32)
    encoder = spec.build(space)
    obs = _batch(space)
    out = encoder(obs)
    assert out.shape == (3, encoder.out_features) and out.dtype == torch.float32
    assert torch.isfinite(out).all()
    if width:
        assert encoder.out_features == width


@pytest.mark.parametrize("kind", ["nature_cnn", "impala_resnet"])
def test_cnn_features_0_hands_on_the_flattened_convolutions(kind):
    encoder = EncoderSpec(kind=kind, hidden_sizes=(), cnn_features=0).build(IMAGE_CHW)
    cnn = encoder.extractor
    assert cnn.linear is None and not any("linear" in k for k in encoder.state_dict())
    convs = {"nature_cnn": 64 * 7 * 7, "impala_resnet": 32 * 11 * 11}[kind]  # 84 -> 20 -> 9 -> 7; 84 -> 42 -> 21 -> 11
    obs = _batch(IMAGE_CHW)
    out = encoder(obs)
    assert encoder.out_features == convs and out.shape == (3, convs) and (out >= 0).all()
    with_linear = EncoderSpec(kind=kind, hidden_sizes=(), cnn_features=8).build(IMAGE_CHW)
    with_linear.load_state_dict(encoder.state_dict(), strict=False)  # the same convolutions
    lin = with_linear.extractor.linear
    torch.testing.assert_close(with_linear(obs), torch.relu(lin(out)))


def test_auto_picks_a_cnn_for_images_and_none_for_vectors():
    assert isinstance(EncoderSpec().extractor(IMAGE_CHW), NatureCNN)
    assert isinstance(EncoderSpec(kind="impala_resnet").extractor(IMAGE_CHW), ImpalaResNet)
    assert EncoderSpec().extractor(VECTOR) is None  # a flat Box: the encoder is the MLP itself
    assert [k for k in EncoderSpec().build(VECTOR).state_dict()] == ["layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"]


def test_images_are_scaled_on_the_encoders_device():
    cnn = NatureCNN(IMAGE_CHW, features=8)
    obs = _batch(IMAGE_CHW)
    by_hand = torch.relu(torch.nn.functional.conv2d(obs.float() / 255, cnn.convs[0].weight, cnn.convs[0].bias, 4))
    assert torch.allclose(torch.relu(cnn.convs[0](obs.float() / 255)), by_hand)
    channels_last = NatureCNN(IMAGE_HWC, features=8)
    img = _batch(IMAGE_HWC)
    first = torch.relu(channels_last.convs[0](img.permute(0, 3, 1, 2).float() / 255))
    second = torch.relu(channels_last.convs[1](first))
    third = torch.relu(channels_last.convs[2](second))
    assert torch.allclose(channels_last(img), torch.relu(channels_last.linear(third.flatten(1))), atol=1e-6)


def _assert_bf16_tracks_float32(full: torch.nn.Module, half: torch.nn.Module, obs: torch.Tensor) -> None:
    """``half`` (bf16 inside, same weights as ``full``) returns float32 features close to
    ``full``'s but not equal, and its float32 parameters get float32 gradients in the same direction."""
    out_full, out_half = full(obs), half(obs)
    assert out_half.dtype == torch.float32 and not torch.equal(out_full, out_half)  # bf16 rounding shows
    assert torch.allclose(out_half, out_full, atol=0.02 * out_full.abs().max().item())
    out_half.square().sum().backward()
    out_full.square().sum().backward()
    for p_half, p_full in zip(half.parameters(), full.parameters()):
        assert p_half.dtype == p_half.grad.dtype == torch.float32
        assert torch.nn.functional.cosine_similarity(p_half.grad.flatten(), p_full.grad.flatten(), dim=0) > 0.99


@pytest.mark.parametrize("kind", ["nature_cnn", "impala_resnet"])
def test_bfloat16_cnns_compute_in_bf16_and_keep_float32_parameters_and_features(kind):
    torch.manual_seed(0)  # weights and frames fixed: unseeded, the gradients' agreement drew on whatever ran before (0.98 once)
    IMAGE_CHW.seed(0)
    full = EncoderSpec(kind=kind, hidden_sizes=(), cnn_features=32).build(IMAGE_CHW)
    half = EncoderSpec(kind=kind, hidden_sizes=(), cnn_features=32, cnn_precision="bfloat16").build(IMAGE_CHW)
    half.load_state_dict(full.state_dict())
    obs = _batch(IMAGE_CHW, 8)
    _assert_bf16_tracks_float32(full, half, obs)


@pytest.mark.parametrize("space", [VECTOR, MIXED])
def test_bfloat16_mlps_compute_in_bf16_and_keep_float32_parameters_and_features(space):
    full = EncoderSpec(hidden_sizes=(64, 64), cnn_features=16).build(space)
    half = EncoderSpec(hidden_sizes=(64, 64), cnn_features=16, mlp_precision="bfloat16").build(space)
    assert half.dtype == torch.bfloat16 and full.dtype == torch.float32
    half.load_state_dict(full.state_dict())
    obs = torch.as_tensor(np.stack([space.sample() for _ in range(16)]), dtype=torch.float32) if space is VECTOR else _batch(space, 16)
    _assert_bf16_tracks_float32(full, half, obs)


def test_dict_encoder_one_hots_discrete_keys_and_keeps_vectors():
    space = gym.spaces.Dict({"goal": gym.spaces.Discrete(3), "pose": gym.spaces.Box(-1, 1, (2,), np.float32)})
    extractor = EncoderSpec().extractor(space)
    packed = torch.tensor([[2.0, 0.5, -0.5], [0.0, 0.1, 0.2]])  # keys in order: goal, pose
    assert torch.equal(extractor(packed), torch.tensor([[0, 0, 1, 0.5, -0.5], [1, 0, 0, 0.1, 0.2]]))


def test_a_discrete_observation_that_starts_elsewhere_than_0_one_hots_its_index():
    """gymnasium's ``Discrete(n, start=s)`` gives ``s`` to ``s + n - 1``: once one-hotted as is,
    shifted by ``s``, and the largest value raised."""
    alone = EncoderSpec().extractor(gym.spaces.Discrete(3, start=-1))
    assert torch.equal(alone(torch.tensor([[-1.0], [1.0]])), torch.tensor([[1.0, 0, 0], [0, 0, 1]]))
    keyed = EncoderSpec().extractor(gym.spaces.Dict({"goal": gym.spaces.Discrete(3, start=1), "pose": gym.spaces.Box(-1, 1, (1,), np.float32)}))
    assert torch.equal(keyed(torch.tensor([[3.0, 0.5], [1.0, 0.0]])), torch.tensor([[0, 0, 1, 0.5], [1, 0, 0, 0.0]]))
    assert not same_layout(gym.spaces.Discrete(3, start=1), gym.spaces.Discrete(3))  # an actor made for one fits no env of the other


@pytest.mark.parametrize(
    ("spec", "space", "needle"),
    [
        (EncoderSpec(kind="nature_cnn"), VECTOR, "needs image observations"),
        (EncoderSpec(kind="nature_cnn"), gym.spaces.Box(0, 255, (1, 20, 20), np.uint8), "too small for encoder 'nature_cnn'"),
        (EncoderSpec(kind="impala_resnet"), gym.spaces.Dict({"x": VECTOR}), "needs an image key"),
        (EncoderSpec(kind="cnn"), VECTOR, "unknown encoder 'cnn'"),
        (EncoderSpec(), gym.spaces.Dict({"bits": gym.spaces.MultiBinary(3)}), "Dict key 'bits' is MultiBinary(3)"),
    ],
)
def test_encoders_that_cannot_take_a_space_name_it(spec, space, needle):
    with pytest.raises(EncoderError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        spec.build(space)


def test_mlp_on_a_large_image_warns_once_in_the_driver():
    from pytorchrl.agent.algorithms.wiring import check_encoder

    with pytest.warns(UserWarning, match="flattens to 28224 inputs"):
        check_encoder(EncoderSpec(kind="mlp"), IMAGE_CHW, "ALE/Pong-v5")


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("space", [IMAGE_CHW, MIXED, VECTOR])
def test_bfloat16_cnn_warns_once_on_a_cpu_that_emulates_bfloat16(monkeypatch, recwarn, native, space):
    from pytorchrl.agent.actors.networks import encoders
    from pytorchrl.agent.algorithms.wiring import check_encoder

    monkeypatch.setattr(encoders, "cpu_has_bf16", lambda: native)
    check_encoder(EncoderSpec(cnn_features=16, cnn_precision="bfloat16"), space, "Game-v0")
    slow = [w for w in recwarn if "no bfloat16 arithmetic" in str(w.message)]
    assert len(slow) == (0 if native or space is VECTOR else 1)  # no CNN, nothing emulated
    if slow:
        assert "actor.encoder.precision = 'bfloat16'" in str(slow[0].message) and "'float32'" in str(slow[0].message)


@pytest.mark.parametrize("native", [True, False])
def test_bfloat16_mlp_warns_once_on_a_cpu_that_emulates_bfloat16(monkeypatch, recwarn, native):
    from pytorchrl.agent.actors.networks import encoders
    from pytorchrl.agent.algorithms.wiring import check_encoder

    monkeypatch.setattr(encoders, "cpu_has_bf16", lambda: native)
    check_encoder(EncoderSpec(mlp_precision="bfloat16"), VECTOR, "Game-v0")
    slow = [str(w.message) for w in recwarn if "no bfloat16 arithmetic" in str(w.message)]
    assert len(slow) == (0 if native else 1)
    assert all("actor.mlp_precision = 'bfloat16'" in m and "'float32'" in m for m in slow)


@pytest.mark.parametrize(("config", "extra"), [
    ("ppo/cartpole.yaml", []), ("ppo/cartpole.yaml", ["actor.shared_network=true"]), ("dqn/cartpole.yaml", ["algorithm.rainbow=true"]),
    ("sac/pendulum.yaml", []), ("td3/pendulum.yaml", []),
    ("sac/pendulum.yaml", ["env.env_id=tests.envs_for_tests:ImageSideEnv", "algorithm.name=sac", "actor.shared_network=true", "actor.cnn_features=16"]),
])
def test_mlp_precision_reaches_every_mlp_of_every_actor(config, extra):
    """From the config key to each MLP and critic ensemble the wiring builds, target copies included."""
    from pytorchrl.agent.actors.networks.mlp import MLP
    from pytorchrl.agent.actors.policy_critic import CriticEnsemble
    from pytorchrl.agent.algorithms import wire

    cfg = load_config(CONFIGS / config, ["actor.mlp_precision=bfloat16", *extra])
    _, obs_space, act_space = VecEnv.create_factory(cfg.env.env_id, num_envs=1)
    actor = wire(ALGORITHMS[cfg.algorithm.name], cfg, obs_space, act_space).actor()
    nets = [m for m in actor.modules() if isinstance(m, (MLP, CriticEnsemble))]
    assert nets and all(net.dtype == torch.bfloat16 for net in nets), [(type(n).__name__, n.dtype) for n in nets]


def test_cpu_bf16_check_answers_a_bool():
    from pytorchrl.agent.actors.networks.encoders import cpu_has_bf16

    assert isinstance(cpu_has_bf16(), bool)


@pytest.mark.parametrize("space", [IMAGE_CHW, MIXED, DISCRETE])
def test_every_actor_takes_any_encoder(space):
    spec = EncoderSpec(hidden_sizes=(8,), cnn_features=16, activation="relu")
    obs = _batch(space, 4)
    on = OnPolicyActor(space, gym.spaces.Discrete(3), encoder=spec, shared_network=True)
    action, extra, _ = on.get_action(obs)
    assert action.shape == (4,) and extra["value"].shape == (4,)
    q = OffPolicyActor(space, gym.spaces.Discrete(3), encoder=spec, dueling=True)
    assert q.q_net(obs).shape == (4, 3)
    for shared in (False, True):
        sac = PolicyCriticActor(space, gym.spaces.Box(-1, 1, (2,)), encoder=spec, shared_network=shared)
        act, _ = sac.sample(obs)
        assert act.shape == (4, 2) and sac.q_values(obs, act).shape == (2, 4)


def test_shared_sac_encoder_is_trained_by_the_critic_only():
    from pytorchrl.agent.algorithms import SAC

    spec = EncoderSpec(hidden_sizes=(8,), cnn_features=16, activation="relu")
    actor = PolicyCriticActor(IMAGE_HWC, gym.spaces.Box(-1, 1, (2,)), encoder=spec, shared_network=True)
    algo = SAC(actor)
    obs = _batch(IMAGE_HWC, 8)
    algo.flat_grad.zero_()
    new_action, _ = actor.sample(obs)
    actor.q_values(obs, new_action, frozen=True).min(0).values.mean().backward()
    assert all(float(p.grad.abs().sum()) == 0.0 for p in actor.critic_extractor.parameters())
    batch = {"obs": obs, "actions": torch.rand(8, 2) * 2 - 1, "rewards": torch.ones(8), "next_obs": obs, "discounts": torch.full((8,), 0.99)}
    algo.compute_gradients(batch)
    assert any(float(p.grad.abs().sum()) > 0.0 for p in actor.critic_extractor.parameters())
    assert "critic_extractor.convs.0.weight" in algo.get_weights(acting=True)  # collection workers need it to act


def test_uint8_observations_stay_uint8_in_rollout_and_replay_storage():
    env = VecEnv("tests.envs_for_tests:ImageSideEnv", num_envs=2, seed=0)
    obs = env.reset()
    assert obs.dtype == torch.uint8
    shapes = {"num_steps": 3, "num_envs": 2, "obs_shape": (1, 36, 36), "obs_dtype": "uint8", "action_shape": (), "discrete": True}
    for storage in (GAEBuffer(gamma=0.99, gae_lambda=0.95, **shapes), ReplayStorage(capacity=64, start_steps=1, **shapes)):
        storage.reset(obs)
        for _, _, action in storage.acting_slots():
            action.zero_()
            next_obs, reward, terminated, truncated, valid = env.step_arrays(action.numpy())
            storage.insert(reward=reward, terminated=terminated, truncated=truncated, valid=valid, next_obs=next_obs)
        assert storage.obs.dtype == torch.uint8 and storage.obs.element_size() == 1
        data = storage.get_data()
        assert data["obs"].dtype == torch.uint8 and data["obs"].nbytes == 4 * 2 * 36 * 36
    storage.add_data(data)
    assert storage.buffer.obs_nbytes == 64 * 36 * 36  # one byte per pixel
    assert storage.buffer.sample(5)["obs"].dtype == torch.uint8
    env.close()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_uint8_rollouts_cross_a_ray_worker_as_uint8(ray_session):
    from pytorchrl.scheme.scheme import build_scheme

    cfg = load_config(CONFIGS / "ppo/cartpole.yaml", ["env.env_id=tests.envs_for_tests:ImageSideEnv", "env.num_envs=2", "storage.num_steps=4",
                                                       "scheme.num_col_workers=1", "scheme.compress_data=true"])
    scheme = build_scheme(cfg)
    try:
        col = scheme.collection_workers
        col.sync_weights(scheme.algorithm.get_weights(acting=True), scheme.algorithm.version)
        rollouts, _ = col.collect()
        assert rollouts and all(r["obs"].dtype == torch.uint8 and r["obs"].nbytes == 5 * 2 * 36 * 36 for r in rollouts)
    finally:
        scheme.close()


def test_the_registry_is_the_only_list_of_algorithms():
    """Each registered class declares its config, whose ``name`` is its registry key and which the
    loader resolves through the registry; the loader and its checks, the scheme, the memory estimate
    and the key-applicability rules name no algorithm (the default, ppo, apart)."""
    import inspect

    from pytorchrl import config as config_module
    from pytorchrl import config_applicability, config_checks
    from pytorchrl.scheme import scheme
    from pytorchrl.utils import memory

    for name, cls in ALGORITHMS.items():
        assert cls.config_class().name == name
        assert from_dict({"algorithm": {"name": name}}).algorithm == cls.config_class()
        assert "wire" in vars(cls) or any("wire" in vars(base) for base in cls.__mro__[1:-2]), name
    for module in (config_module, config_checks, scheme, memory, config_applicability):
        source = inspect.getsource(module)
        named = [name for name, cls in ALGORITHMS.items() if (name != "ppo" and f'"{name}"' in source) or cls.__name__ + "(" in source or cls.config_class.__name__ in source]
        assert not named, (module.__name__, named)


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["actor.encoder=nature_cnns"], "config key 'actor.encoder.type' = 'nature_cnns' is not allowed (did you mean 'nature_cnn'?)"),
        (["actor.cnn_precision=float16"], "config key 'actor.encoder.precision' = 'float16' is not allowed"),
        (["actor.mlp_precision=half"], "config key 'actor.mlp_precision' = 'half' is not allowed"),
        (["actor.encoder=nature_cnn"], "actor.encoder.type = 'nature_cnn' on env.env_id = 'CartPole-v1': encoder 'nature_cnn' needs image observations"),
        (["env.env_id=tests.envs_for_tests:DictTargetEnv", "env.normalize_obs=true"], "env.normalize_obs = true needs a Box observation space of floats"),
    ],
)
def test_bad_encoder_input_is_one_line(overrides, needle):
    from pytorchrl.scheme.scheme import build_scheme

    with pytest.raises(InputError) as info:
        build_scheme(load_config(CONFIGS / "ppo/cartpole.yaml", overrides))
    assert needle in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(("precision", "atol"), [("float32", 1e-5), ("bfloat16", 1e-2)])
def test_cnn_policies_score_while_acting_and_match_the_rollout_scoring(precision, atol):
    """The learner's first-epoch ratio is 1 up to ``atol``: acting and scoring run the same
    network in the same precision (bf16 rounding differs with the batch's kernels only)."""
    from pytorchrl.agent.algorithms import wire
    from pytorchrl.scheme.collection.collection_worker import CollectionWorker

    cfg = load_config(CONFIGS / "ppo/cartpole.yaml", ["env.env_id=tests.envs_for_tests:ImageSideEnv", "env.num_envs=3", "storage.num_steps=5",
                                                       "actor.encoder=nature_cnn", "actor.cnn_features=16", f"actor.cnn_precision={precision}"])
    factory, obs_space, act_space = VecEnv.create_factory(cfg.env.env_id, num_envs=3)
    wiring = wire(ALGORITHMS["ppo"], cfg, obs_space, act_space)
    worker = CollectionWorker(0, env_factory=factory, actor_factory=wiring.actor, storage_factory=wiring.storage)
    assert worker.policy.scores_while_acting
    data, _ = worker.collect_data()
    with torch.no_grad():
        log_prob, value = worker.policy.score(data["obs"].flatten(0, 1), torch.cat([data["actions"], data["actions"][:1]]).flatten(0, 1))
    assert torch.allclose(data["values"], value.view(6, 3), atol=atol)  # the bootstrap value included
    assert torch.allclose(data["log_probs"], log_prob.view(6, 3)[:5], atol=atol)
    worker.close()


def test_the_encoder_section_nested_and_its_old_flat_keys():
    """``actor.encoder`` is a section (or its type alone); the old flat keys of old configs and
    run directories are read as the nested ones; a flat key and its nested twin that disagree
    are one line; the saved form is the nested one and loads back the same."""
    nested = from_dict({"actor": {"encoder": {"type": "impala_resnet", "channels": [8, 8], "features": 64}}})
    assert (nested.actor.encoder.type, nested.actor.encoder.channels, nested.actor.encoder.features) == ("impala_resnet", (8, 8), 64)
    old = from_dict({"actor": {"encoder": "impala_resnet", "cnn_channels": [8, 8], "cnn_features": 64, "cnn_precision": "float32"}})
    assert old == nested
    saved_by_an_old_run = {"actor": {"encoder": "auto", "cnn_channels": None, "cnn_features": None, "cnn_precision": "float32"}}
    assert from_dict(saved_by_an_old_run).actor.encoder == from_dict({}).actor.encoder
    assert from_dict(config_to_dict(nested)) == nested
    assert load_config(CONFIGS / "ppo" / "atari_pong.yaml", ["actor.encoder.features=0", "actor.encoder=impala_resnet"]).actor.encoder.features == 0
    with pytest.raises(ConfigError) as info:
        from_dict({"actor": {"encoder": {"features": 64}, "cnn_features": 32}})
    assert str(info.value) == (
        "config keys 'actor.cnn_features' = 32 and 'actor.encoder.features' = 64 disagree: set actor.encoder.features alone (actor.cnn_features is its old name)"
    )
    with pytest.raises(ConfigError, match=r"unknown config key 'actor.encoder.depth'"):
        from_dict({"actor": {"encoder": {"type": "nature_cnn", "depth": 3}}})


def test_image_encoders_come_from_one_registry_and_size_themselves():
    """The registry is the only list of image encoders: the names the config accepts are its keys
    (with auto and mlp); each encoder sizes itself (parameters, output width) without allocating;
    the config loader, the memory estimate and the key rules name none of them."""
    import inspect

    from pytorchrl import config as config_module
    from pytorchrl import config_applicability
    from pytorchrl.agent.actors.networks.encoders import ENCODERS, IMAGE_ENCODERS
    from pytorchrl.utils import memory

    assert ENCODERS == ("auto", "mlp", *IMAGE_ENCODERS)
    space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    for cls in IMAGE_ENCODERS.values():
        net = cls.make(space, {})
        assert cls.size(space, {}) == (sum(p.numel() for p in net.parameters()), net.out_features)
    huge = IMAGE_ENCODERS["impala_resnet"].size(space, {"channels": (1024,) * 8})  # ~0.3 GB of weights: sized, not built
    assert huge[0] > 50_000_000
    for module in (config_module, memory, config_applicability):
        source = inspect.getsource(module)
        assert not any(f'"{name}"' in source or cls.__name__ in source for name, cls in IMAGE_ENCODERS.items()), module.__name__
