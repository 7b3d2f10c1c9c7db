"""Config loading, overrides and validation: every bad value is one clear ConfigError."""

from __future__ import annotations

import pytest

from pytorchrl.agent.algorithms import A2CConfig, PPOConfig
from pytorchrl.config import ConfigError, config_to_dict, from_dict, load_config
from pytorchrl.protocol import describe_protocol
from tests.conftest import CONFIGS, load_script


@pytest.mark.parametrize(
    "path", sorted(p for p in CONFIGS.rglob("*.yaml") if p.parent.name != "tune"), ids=lambda p: str(p.relative_to(CONFIGS))
)
def test_shipped_configs_load(path):
    config = load_config(path)
    assert config.run.target_steps > 0
    assert config_to_dict(config)["env"]["env_id"] == config.env.env_id
    # its header says where its settings come from, and its protocol as the config itself makes it (issue 38)
    header = " ".join(line.lstrip("#").strip() for line in _header_lines(path))
    assert "Source: " in header, f"{path}: no 'Source:' in its header"
    assert f"Protocol: {describe_protocol(config)}" in header, f"{path}: its header's protocol is not {describe_protocol(config)!r}"


def _header_lines(path):
    lines = path.read_text().splitlines()
    return lines[: next(i for i, line in enumerate(lines) if not line.startswith("#"))]


def test_the_protocol_says_frames_sticky_actions_and_how_evaluation_samples():
    pong = from_dict({"env": {"env_id": "ALE/Pong-v5", "atari": {"repeat_action_probability": 0.0}}, "run": {"eval_deterministic": False, "eval_episodes": 8, "eval_every": 0}})
    text = describe_protocol(pong)
    assert text.startswith("agent steps of 4 frames; no sticky actions, up to 30 no-ops")
    assert text.endswith("sampled-action evaluation, 8 whole games (raw scores) at the end")
    cartpole = from_dict({"env": {"max_episode_steps": 200}, "run": {"eval_episodes": 1, "eval_every": 4096}})
    assert describe_protocol(cartpole) == "agent steps, episodes cut at 200 steps; deterministic evaluation, 1 episode every 4,096 steps"


def test_defaults_and_algorithm_section_is_picked_by_name():
    assert isinstance(from_dict({}).algorithm, PPOConfig)
    config = from_dict({"algorithm": {"name": "a2c", "lr": 1e-3}})
    assert isinstance(config.algorithm, A2CConfig) and config.algorithm.lr == 1e-3


def test_overrides_are_parsed_as_yaml(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("algorithm:\n  name: ppo\n")
    config = load_config(path, ["env.env_id=CartPole-v1", "algorithm.lr=3e-4", "env.num_envs=4", "actor.hidden_sizes=[32, 32]", "run.stop_at_return=null"])
    assert config.algorithm.lr == 3e-4
    assert config.env.num_envs == 4
    assert config.actor.hidden_sizes == (32, 32)
    assert config.run.stop_at_return is None


@pytest.mark.parametrize("text, missing", [("algorithm:\n  name: ppo\n", "env.env_id"), ("env:\n  env_id: CartPole-v1\n", "algorithm.name")])
def test_a_config_file_names_its_env_and_algorithm(tmp_path, text, missing):
    """The library's defaults (CartPole, PPO) serve configs built in Python; a file that leaves
    one out would train something its author did not write."""
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=rf"config file '.*c.yaml' sets no {missing}: a config names at least its env \(env.env_id\) and algorithm"):
        load_config(path)
    assert load_config(path, [f"{missing}={'ppo' if missing == 'algorithm.name' else 'CartPole-v1'}"]).env.env_id == "CartPole-v1"


def test_a_mapping_override_of_a_section_changes_only_the_keys_it_names():
    """``algorithm={lr: 1}`` is ``algorithm.lr=1``: the config's other keys stay (they were reset
    to the library's defaults once); a dict-valued key (``env.env_kwargs``) is replaced whole, and
    an ``algorithm`` mapping naming another algorithm starts from that one's defaults."""
    path = CONFIGS / "ppo" / "cartpole.yaml"
    given = load_config(path)
    merged = load_config(path, ["algorithm={lr: 1}", "actor={activation: relu}"])
    assert merged.algorithm.lr == 1.0 and merged.algorithm.gamma == given.algorithm.gamma == 0.98
    assert merged.algorithm.num_epochs == given.algorithm.num_epochs and merged.actor.activation == "relu"
    assert merged.actor.hidden_sizes == given.actor.hidden_sizes and merged.actor.encoder == given.actor.encoder
    assert merged == load_config(path, ["algorithm.lr=1", "actor.activation=relu"])
    lander = CONFIGS / "sac" / "lunarlander_continuous.yaml"
    assert load_config(lander, ["env={env_kwargs: {enable_wind: true}}"]).env.env_kwargs == {"enable_wind": True}
    assert load_config(lander, ["env.env_kwargs={enable_wind: true}"]).env.env_kwargs == {"enable_wind": True}
    other = load_config(path, ["algorithm={name: dqn, lr: 0.01}"]).algorithm
    assert other.name == "dqn" and other.lr == 0.01 and other.gamma == 0.99  # DQN's own default, not the PPO config's 0.98


def test_a_mapping_override_of_an_algorithms_own_section_keeps_its_other_keys_and_a_section_is_never_a_value():
    """PPO's ``rnd`` and ``demos`` are sections of PPO's config, not of every algorithm's: a
    mapping for them merges as ``env.atari={...}`` does, so naming one key does not switch RND or
    PPOD off. A section given a value or null (``storage=``) would drop the file's whole
    section for the library's defaults: refused, naming it."""
    chain = load_config(CONFIGS / "ppo" / "rnd_chain.yaml")
    for override in ("algorithm.rnd={features: 32}", "algorithm={rnd: {features: 32}}"):
        rnd = load_config(CONFIGS / "ppo" / "rnd_chain.yaml", [override]).algorithm.rnd
        assert rnd.features == 32 and rnd.enabled and rnd.intrinsic_coef == chain.algorithm.rnd.intrinsic_coef
    demos = load_config(CONFIGS / "ppo" / "ppod_chain.yaml", ["algorithm.demos={rho: 0.2}"]).algorithm.demos
    assert demos.enabled and demos.rho == 0.2 and demos.path == load_config(CONFIGS / "ppo" / "ppod_chain.yaml").algorithm.demos.path
    for override, section in [("storage=", "storage"), ("run=null", "run"), ("algorithm.rnd=", "algorithm.rnd")]:
        with pytest.raises(ConfigError, match=rf"^override {override!r}: config key {section!r} = null is a section, not a value: set its keys \(e.g. {section}.KEY=VALUE\)$"):
            load_config(CONFIGS / "ppo" / "cartpole.yaml", [override])


def test_int_accepted_for_float_but_not_bool_for_int():
    assert from_dict({"algorithm": {"lr": 1}}).algorithm.lr == 1.0
    with pytest.raises(ConfigError, match=r"'env.num_envs' = True has the wrong type: expected int"):
        from_dict({"env": {"num_envs": True}})


@pytest.mark.parametrize("text", ["5e3", "5.0e+3", "5000.0"])
def test_a_whole_number_written_as_a_float_is_an_int(text):
    """``run.target_steps=1e6`` as practitioners write budgets; a fraction is still refused."""
    steps = load_config(CONFIGS / "ppo" / "cartpole.yaml", [f"run.target_steps={text}"]).run.target_steps
    assert steps == 5000 and type(steps) is int
    with pytest.raises(ConfigError, match=r"'env.num_envs' = 2.5 has the wrong type: expected int"):
        from_dict({"env": {"num_envs": 2.5}})
    with pytest.raises(ConfigError, match=r"'env.num_envs' = 'inf' has the wrong type: expected int"):
        from_dict({"env": {"num_envs": "inf"}})


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"algorithm": {"lrr": 1e-3}}, r"unknown config key 'algorithm.lrr'; did you mean 'algorithm.lr'\?"),
        ({"envv": {}}, r"unknown config key 'envv'; did you mean 'env'\?"),
        ({"algorithm": {"lr": -1.0}}, r"'algorithm.lr' = -1.0 is out of range: must be > 0"),
        ({"env": {"num_envs": 0}}, r"'env.num_envs' = 0 is out of range: must be >= 1"),
        ({"algorithm": {"gamma": 1.5}}, r"'algorithm.gamma' = 1.5 is out of range: must be <= 1"),
        ({"algorithm": {"lr": "fast"}}, r"'algorithm.lr' = 'fast' has the wrong type: expected float"),
        ({"algorithm": {"name": "ppp"}}, r"'algorithm.name' = 'ppp' is not allowed \(did you mean 'ppo'\?\)"),
        ({"scheme": {"col_communication": "sync"}}, r"allowed: 'synchronous', 'asynchronous'"),
        ({"actor": {"hidden_sizes": 64}}, r"'actor.hidden_sizes' = 64 has the wrong type: expected a list of int"),
        ({"scheme": {"col_worker_resources": {"resources": {"node_a": -1}}}}, r"'scheme.col_worker_resources.resources' = \{'node_a': -1\}: a custom Ray resource is an amount >= 0"),
        ({"scheme": {"grad_worker_resources": {"resources": {"node_a": "x"}}}}, r"'scheme.grad_worker_resources.resources' = \{'node_a': 'x'\}"),
        ({"scheme": {"grad_worker_resources": {"num_gpus": 1.5}}}, r"'scheme.grad_worker_resources.num_gpus' = 1.5: .* allowed: a value in \[0, 1\] or a whole number \(e.g. 1 or 2\)"),
        (
            {"scheme": {"col_worker_resources": {"resources": {"CPU": 2}}}},
            r"'scheme.col_worker_resources.resources' = \{'CPU': 2\}: 'CPU' is not a custom resource; set it with scheme.col_worker_resources.num_cpus",
        ),
        ({"actor": {"hidden_sizes": [64, 0]}}, r"every width must be in 1..65,536"),
        (
            {"scheme": {"update_execution": "decentralised", "grad_communication": "asynchronous"}},
            r"'decentralised' needs scheme.grad_communication 'synchronous'",
        ),
        ({"algorithm": {"name": "a2c", "num_epochs": 3}}, r"config key 'algorithm.num_epochs' does not apply to algorithm.name = 'a2c'; it is a key of ppo, impala, appo"),
    ],
)
def test_bad_values_raise_one_line(raw, message):
    with pytest.raises(ConfigError, match=message) as info:
        from_dict(raw)
    assert "\n" not in str(info.value)


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match=r"config file '.*nope.yaml' does not exist"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("env: [unclosed\n")
    with pytest.raises(ConfigError, match=r"is not valid YAML"):
        load_config(bad)
    with pytest.raises(ConfigError, match=r"must look like section.key=value"):
        load_config(CONFIGS / "ppo" / "cartpole.yaml", ["algorithm.lr"])
    with pytest.raises(ConfigError, match=r"override 'run..seed=1': the key 'run..seed' has an empty part; keys look like section.key"):
        load_config(CONFIGS / "ppo" / "cartpole.yaml", ["run..seed=1"])


def test_config_is_frozen():
    config = from_dict({})
    with pytest.raises(AttributeError):
        config.run.seed = 3  # type: ignore[misc]


@pytest.mark.slow
def test_smoke_configs_steps_each_config_and_tells_a_refusal_from_a_crash(capsys, monkeypatch, tmp_path):
    """``scripts/smoke_configs.py``: a config that trains is ``ok``, a one-line refusal (a GPU
    config on a CPU machine) is not a failure, a crash is, and sets the exit status."""
    import torch

    from pytorchrl.learner import Learner

    smoke = load_script("smoke_configs")
    assert smoke.main(["ppo/cartpole.yaml", "dqn/cartpole.yaml", "appo/atari_pong_gpu.yaml"]) == 0
    gpu, dqn, ppo, total = capsys.readouterr().out.splitlines()
    cuda = torch.cuda.is_available()
    assert gpu.startswith("ok       appo/atari_pong_gpu.yaml: " if cuda else "refused  appo/atari_pong_gpu.yaml: config key 'run.device' = 'cuda'")
    assert dqn.startswith("ok       dqn/cartpole.yaml: ") and ppo.startswith("ok       ppo/cartpole.yaml: ") and total == "3 configs: 0 failed"

    def crash(self):
        raise RuntimeError("boom")

    monkeypatch.setattr(Learner, "step", crash)
    assert smoke.main(["ppo/cartpole.yaml"]) == 1
    assert capsys.readouterr().out.splitlines() == ["FAIL     ppo/cartpole.yaml: RuntimeError: boom", "1 configs: 1 failed"]
    # a shipped config that does not load (a renamed key) is broken on every machine: no "refused"
    stale = tmp_path / "configs" / "ppo"
    stale.mkdir(parents=True)
    (stale / "cartpole.yaml").write_text((CONFIGS / "ppo" / "cartpole.yaml").read_text().replace("  lr:", "  learning_rate:"))
    monkeypatch.setattr(smoke, "CONFIGS", tmp_path / "configs")
    assert smoke.main(["ppo/cartpole.yaml"]) == 1
    assert capsys.readouterr().out.startswith("FAIL     ppo/cartpole.yaml: the config does not load: unknown config key 'algorithm.learning_rate'")
