"""What ``pytorchrl train --algo ALGO --env ENV_ID`` trains when no YAML is given.

The shipped config for that env and algorithm if there is one, else a *family default* derived
from the env's id and spaces:

- shipped configs are found by reading each ``configs/*/*.yaml``'s ``env.env_id``,
  ``env.env_kwargs`` and ``algorithm.name`` (never from file names); of several, the plainest (:func:`_plainness`: no
  remote workers or central inference, no recurrent core or action mask, then the fewest keys).
  An installed package without the ``configs/`` folder of a checkout has none, and uses the
  families;
- a family (:data:`FAMILIES`) is data: the envs it applies to, where its hyper-parameters come
  from (``source``), its budget (``run.target_steps``), and per algorithm a config written with
  the keys of the YAML configs (``env.env_id`` and ``run.target_steps`` are filled in here);
  an env whose reset gives its legal actions in ``info["action_mask"]`` gets
  ``env.action_mask: info`` too, and algorithms that take no masks are refused for it.

Either way the result is a nested dict that goes through the same
:func:`~pytorchrl.config.apply_overrides` and :func:`~pytorchrl.config.from_dict` as a YAML
config (:func:`~pytorchrl.config.load_config`), so the user's ``KEY=VALUE`` overrides apply on
top and every value is checked as a file's would be.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import gymnasium as gym

from pytorchrl.agent.algorithms import ALGORITHMS
from pytorchrl.config import apply_overrides, read_mapping, set_values
from pytorchrl.envs.atari import is_atari_id
from pytorchrl.envs.making import action_space_problem, check_env_id, probe_env
from pytorchrl.utils.checkout import package_checkout
from pytorchrl.utils.errors import ConfigError, InputError

__all__ = [
    "ATARI",
    "BOX_VECTOR",
    "CONFIGS",
    "DISCRETE_VECTOR",
    "FAMILIES",
    "AlgorithmDefault",
    "Choice",
    "Family",
    "choose_config",
    "family_config",
    "family_for",
    "is_short_classic_control",
    "shipped_config",
    "shown_path",
]

#: the shipped configs of the checkout the package is imported from; None in an installed wheel
#: (which carries no configs/: then only the families apply)
CONFIGS: Path | None = None if (_CHECKOUT := package_checkout()) is None else _CHECKOUT / "configs"


class AlgorithmDefault(TypedDict):
    """One algorithm's default within a family."""

    #: where these hyper-parameters come from (printed when the default is used)
    source: str
    #: the config as a YAML file would hold it, without ``env.env_id`` and ``run.target_steps``
    config: dict[str, Any]


class Family(TypedDict):
    """Envs that share defaults: when it applies, the source of its settings, its budget, and
    per algorithm the config to train with."""

    name: str
    #: the envs it covers, in words (``using the ppo family default for <applies>``)
    applies: str
    #: where the family's hyper-parameters come from
    source: str
    #: ``run.target_steps``; the user overrides it with ``run.target_steps=N``
    target_steps: int
    algorithms: dict[str, AlgorithmDefault]
    #: per algorithm, dotted values for classic-control envs with episodes of at most
    #: :data:`SHORT_EPISODE_STEPS` steps (Pendulum, MountainCarContinuous)
    classic_control: dict[str, dict[str, Any]]


#: a classic-control env whose time limit is at most this many steps gets its family's ``classic_control`` values
SHORT_EPISODE_STEPS = 1_000

ATARI: Family = {
    "name": "atari",
    "applies": "Atari ids, ALE/*",
    "source": "configs/ppo/atari_pong.yaml (ppo) and configs/dqn/atari_pong.yaml (dqn): their hyper-parameters, "
    "with a Nature CNN and the env.atari preprocessing defaults (noop 30, frame skip 4, 84x84 grey, 4 frames, sticky actions 0.25)",
    "target_steps": 2_500_000,  # 10M frames at frame skip 4
    "algorithms": {
        "ppo": {
            "source": "configs/ppo/atari_pong.yaml's hyper-parameters, CleanRL's Atari PPO, with a Nature CNN and the env.atari preprocessing defaults",
            "config": {
                "env": {"num_envs": 8, "num_test_envs": 4},
                "actor": {"encoder": "nature_cnn", "hidden_sizes": [], "shared_network": True},
                "storage": {"num_steps": 128},
                "algorithm": {
                    "name": "ppo",
                    "lr": 2.5e-4,
                    "anneal_lr": True,
                    "gamma": 0.99,
                    "gae_lambda": 0.95,
                    "num_epochs": 4,
                    "minibatch_size": 256,
                    "clip_range": 0.1,
                    "anneal_clip_range": False,
                    "ent_coef": 0.01,
                    "vf_coef": 0.5,
                    "max_grad_norm": 0.5,
                },
                # sampled evaluation actions, rl-zoo's convention on Atari (an argmax policy can loop)
                "run": {
                    "log_every": 10_240,
                    "eval_every": 250_000,
                    "eval_episodes": 8,
                    "eval_deterministic": False,
                    "checkpoint_every": 100_000,
                },
            },
        },
        "dqn": {
            "source": "configs/dqn/atari_pong.yaml's hyper-parameters, Rainbow as in Hessel et al. 2018 and Dopamine, "
            "with a Nature CNN and the env.atari preprocessing defaults",
            "config": {
                "env": {"num_envs": 4, "num_test_envs": 4},
                "actor": {"encoder": "nature_cnn", "hidden_sizes": [], "activation": "relu"},
                # 100k stacked frames: 2.8 GB; so kept out of checkpoints (storage.checkpoint_buffer=true puts them in)
                "storage": {"capacity": 100_000},
                "algorithm": {
                    "name": "dqn",
                    "rainbow": True,
                    "lr": 6.25e-5,
                    "adam_eps": 1.5e-4,
                    "gamma": 0.99,
                    "n_step": 3,
                    "minibatch_size": 32,
                    "update_every": 4,
                    "updates_per_step": 0.25,
                    "start_steps": 20_000,
                    "target_update_interval": 2000,
                    "per_alpha": 0.5,
                    "per_beta0": 0.4,
                    "num_atoms": 51,
                    "v_min": -10.0,
                    "v_max": 10.0,
                    "max_grad_norm": 10,
                },
                "run": {"log_every": 10_000, "eval_every": 100_000, "eval_episodes": 4, "checkpoint_every": 250_000},
            },
        },
    },
    "classic_control": {},
}

_OFF_POLICY_RUN = {"log_every": 5000, "eval_every": 10_000, "eval_episodes": 5, "checkpoint_every": 100_000}
_OFF_POLICY_REPLAY = {
    "gamma": 0.99,
    "minibatch_size": 256,
    "update_every": 1,
    "updates_per_step": 1.0,
    "start_steps": 10_000,
    "tau": 0.005,
}
_TD3_STYLE = {"lr": 1.0e-3, "exploration_noise": 0.1, **_OFF_POLICY_REPLAY}


def _td3_style(name: str, source: str) -> AlgorithmDefault:
    """TD3's and DDPG's default for Box actions: the same settings, ``algorithm.name`` apart."""
    return {
        "source": source,
        "config": {
            "env": {"num_envs": 1, "num_test_envs": 5},
            "actor": {"hidden_sizes": [400, 300], "activation": "relu"},
            "storage": {"capacity": 1_000_000},
            "algorithm": {"name": name, **_TD3_STYLE},
            "run": dict(_OFF_POLICY_RUN),
        },
    }

BOX_VECTOR: Family = {
    "name": "box-vector",
    "applies": "Box actions with vector observations",
    "source": "rl-zoo's continuous-control settings: SAC, TD3 and DDPG as its MuJoCo defaults (configs/sac/halfcheetah.yaml, "
    "configs/td3/halfcheetah.yaml), PPO as its MuJoCo defaults (hyperparams/ppo.yml &mujoco-defaults: normalised observations "
    "and rewards, SB3's PPO defaults); 1,000 random steps instead of 10,000 on short classic-control envs",
    "target_steps": 1_000_000,
    "algorithms": {
        "sac": {
            "source": "rl-zoo's MuJoCo SAC settings, as configs/sac/halfcheetah.yaml: 256-256 ReLU, lr 3e-4, batch 256, 1M buffer, "
            "tau 0.005, gamma 0.99, a gradient step per env step, 10k random steps first",
            "config": {
                "env": {"num_envs": 1, "num_test_envs": 5},
                "actor": {"hidden_sizes": [256, 256], "activation": "relu"},
                "storage": {"capacity": 1_000_000},
                "algorithm": {"name": "sac", "lr": 3.0e-4, **_OFF_POLICY_REPLAY},
                "run": dict(_OFF_POLICY_RUN),
            },
        },
        "td3": _td3_style(
            "td3", "rl-zoo's MuJoCo TD3 settings, as configs/td3/halfcheetah.yaml: 400-300 ReLU, lr 1e-3, batch 256, 1M buffer, "
            "tau 0.005, gamma 0.99, Gaussian exploration noise 0.1, a gradient step per env step, 10k random steps first",
        ),
        "ddpg": _td3_style(
            "ddpg", "rl-zoo's MuJoCo DDPG settings, TD3's: 400-300 ReLU, lr 1e-3, batch 256, 1M buffer, tau 0.005, gamma 0.99, "
            "Gaussian exploration noise 0.1, a gradient step per env step, 10k random steps first",
        ),
        "ppo": {
            "source": "rl-zoo's MuJoCo PPO defaults, hyperparams/ppo.yml &mujoco-defaults: normalised observations and rewards, "
            "and SB3's PPO defaults, 1 env x 2048 steps, 10 epochs of 64, lr 3e-4, clip 0.2, GAE 0.95, gamma 0.99, 64-64 tanh",
            "config": {
                "env": {"num_envs": 1, "num_test_envs": 5, "normalize_obs": True, "normalize_reward": True, "reward_gamma": 0.99},
                "actor": {"hidden_sizes": [64, 64], "activation": "tanh"},
                "storage": {"num_steps": 2048},
                "algorithm": {
                    "name": "ppo",
                    "lr": 3.0e-4,
                    "gamma": 0.99,
                    "gae_lambda": 0.95,
                    "num_epochs": 10,
                    "minibatch_size": 64,
                    "clip_range": 0.2,
                    "ent_coef": 0.0,
                    "vf_coef": 0.5,
                    "max_grad_norm": 0.5,
                },
                "run": {"log_every": 10_240, "eval_every": 20_480, "eval_episodes": 5, "checkpoint_every": 200_000},
            },
        },
    },
    # the random warm-up of configs/td3/pendulum.yaml: 10k steps would be 50 Pendulum episodes of no learning
    "classic_control": {name: {"algorithm.start_steps": 1000} for name in ("sac", "td3", "ddpg")},
}

DISCRETE_VECTOR: Family = {
    "name": "discrete-vector",
    "applies": "discrete actions with vector observations",
    "source": "pytorchrl's CartPole-v1 configs (rl-zoo's CartPole settings): rl-zoo's CartPole PPO (configs/ppo/cartpole.yaml with "
    "8 envs, lr 1e-3, one minibatch of 256 and normalisation off), configs/dqn/cartpole.yaml, configs/a2c/cartpole.yaml, configs/sac/discrete_cartpole.yaml",
    "target_steps": 100_000,
    "algorithms": {
        "ppo": {
            "source": "rl-zoo's CartPole-v1 PPO (configs/ppo/cartpole.yaml with 8 envs, lr 1e-3 and one minibatch of 256): 8 x 32 steps, "
            "20 epochs, lr and clip 0.2 annealed, gamma 0.98, GAE 0.8; normalisation off",
            "config": {
                "env": {"num_envs": 8, "normalize_obs": False, "normalize_reward": False},
                "storage": {"num_steps": 32},
                "algorithm": {
                    "name": "ppo",
                    "lr": 1.0e-3,
                    "anneal_lr": True,
                    "gamma": 0.98,
                    "gae_lambda": 0.8,
                    "num_epochs": 20,
                    "minibatch_size": 256,
                    "clip_range": 0.2,
                    "anneal_clip_range": True,
                    "ent_coef": 0.0,
                },
                "run": {"log_every": 4096, "eval_every": 4096, "eval_episodes": 10, "checkpoint_every": 50_000},
            },
        },
        "dqn": {
            "source": "configs/dqn/cartpole.yaml's settings, rl-zoo's CartPole-v1 DQN: 256-256 ReLU, lr 2.3e-3, batch 64, "
            "epsilon 1 -> 0.04 over 16% of the budget, target copied every 128 gradient steps",
            "config": {
                "env": {"num_envs": 8},
                "actor": {"hidden_sizes": [256, 256], "activation": "relu"},
                "storage": {"capacity": 100_000},
                "algorithm": {
                    "name": "dqn",
                    "lr": 2.3e-3,
                    "gamma": 0.99,
                    "minibatch_size": 64,
                    "update_every": 32,
                    "updates_per_step": 0.5,
                    "start_steps": 1000,
                    "target_update_interval": 128,
                    "exploration_fraction": 0.16,
                    "exploration_final_eps": 0.04,
                    "max_grad_norm": 10,
                },
                "run": {"log_every": 2048, "eval_every": 2048, "eval_episodes": 10},
            },
        },
        "a2c": {
            "source": "configs/a2c/cartpole.yaml's settings: 8 envs x 5 steps, lr 7e-4, n-step returns",
            "config": {
                "env": {"num_envs": 8},
                "storage": {"num_steps": 5},
                "algorithm": {
                    "name": "a2c",
                    "lr": 7.0e-4,
                    "gamma": 0.99,
                    "gae_lambda": 1.0,
                    "ent_coef": 0.0,
                    "vf_coef": 0.5,
                    "max_grad_norm": 0.5,
                },
                "run": {"log_every": 10_000, "eval_every": 10_000, "eval_episodes": 10, "checkpoint_every": 100_000},
            },
        },
        "sac": {
            "source": "configs/sac/discrete_cartpole.yaml's settings, discrete SAC: 256-256 ReLU, lr 1e-3, batch 128, "
            "a gradient step per 4 env steps, tau 0.01, target entropy 0.2",
            "config": {
                "env": {"num_envs": 1},
                "actor": {"hidden_sizes": [256, 256], "activation": "relu"},
                "storage": {"capacity": 100_000},
                "algorithm": {
                    "name": "sac",
                    "lr": 1.0e-3,
                    "gamma": 0.99,
                    "minibatch_size": 128,
                    "update_every": 4,
                    "updates_per_step": 0.25,
                    "start_steps": 1000,
                    "tau": 0.01,
                    "target_entropy": 0.2,
                },
                "run": {"log_every": 2000, "eval_every": 2000, "eval_episodes": 10},
            },
        },
    },
    "classic_control": {},
}

#: every family, in the order they are tried (Atari by its id, before the spaces)
FAMILIES: tuple[Family, ...] = (ATARI, BOX_VECTOR, DISCRETE_VECTOR)


@dataclass(frozen=True)
class Choice:
    """What ``train --algo/--env`` trains.

    :param raw: the config as a nested dict, before the user's overrides.
    :param message: the line printed on stderr: which config or default, and why.
    :param run_name: a family default's run-directory name before its time stamp (``ppo-LunarLander-v3``);
        a shipped config's run is named after its file, as ``train CONFIG`` names it.
    :param path: the shipped config used (None: a family default).
    :param family: the family's name (None: a shipped config).
    """

    raw: dict[str, Any]
    message: str
    run_name: str | None = None
    path: Path | None = None
    family: str | None = None


def choose_config(algo: str, env_id: str, overrides: Sequence[str] = (), *, configs: Path | None = CONFIGS) -> Choice:
    """The shipped config of ``env_id`` and ``algo``, else the family default for the env.

    :param overrides: the user's ``KEY=VALUE`` overrides; only ``env.env_kwargs`` (which can
        change the spaces) and ``env.max_episode_steps`` are read here, and overrides of
        ``algorithm.name`` or ``env.env_id`` that contradict ``--algo``/``--env`` are refused.
    :param configs: the folder of shipped configs (None: none).
    :raises InputError: one line naming what would work, for an unknown algorithm or env id, an
        env no family covers, an algorithm that does not fit its actions or has no default there.
    """
    if algo not in ALGORITHMS:
        near = difflib.get_close_matches(algo, list(ALGORITHMS), n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise InputError(f"--algo {algo!r} is not an algorithm{hint}; allowed: {', '.join(ALGORITHMS)}")
    env_section = _section(_check_overrides(algo, env_id, overrides), "env")
    check_env_id(env_id)  # an unknown id: the message a config's env.env_id gets
    env_kwargs = env_section.get("env_kwargs")
    path = shipped_config(algo, env_id, configs, env_kwargs if isinstance(env_kwargs, dict) else None)
    if path is not None:
        assert configs is not None
        raw = _anchored(read_mapping(path, "config file"), configs.parent)
        return Choice(raw, f"using {shown_path(path)} (shipped for {env_id})", path=path)
    return _family_choice(algo, env_id, env_section, configs)


def _anchored(raw: dict[str, Any], root: Path) -> dict[str, Any]:
    """A shipped config's relative file paths (``algorithm.demos.path``, written from the
    checkout's top) made absolute there: the user of ``--algo/--env`` chose no file, and may run
    from anywhere. A path that exists from the working directory is left as it is."""
    demos = _section(_section(raw, "algorithm"), "demos")
    given = demos.get("path")
    if isinstance(given, str) and given and not Path(given).is_absolute() and not Path(given).exists() and (root / given).exists():
        demos["path"] = str(root / given)
    return raw


def _family_choice(algo: str, env_id: str, env_section: dict[str, Any], configs: Path | None) -> Choice:
    """The family default of ``algo`` for ``env_id`` (which has no shipped config for it)."""
    given = env_section.get("env_kwargs")
    env_kwargs = given if isinstance(given, dict) else None
    observation_space, action_space, info_masks = probe_env(env_id, env_kwargs)
    family = family_for(env_id, observation_space, action_space)
    if family is None:
        covered = ", ".join(f"{f['name']} for {f['applies']}" for f in FAMILIES)
        problem = action_space_problem(action_space)
        raise InputError(
            f"no family default covers --env {env_id!r}: its observations are {_describe(observation_space)} and its actions "
            f"{_describe(action_space)}{f' ({problem})' if problem else ''}; the families are {covered}; write a CONFIG.yaml for it (see configs/)"
        )
    fitting = _fitting_algorithms(action_space)
    working = [a for a in fitting if a in family["algorithms"] or shipped_config(a, env_id, configs, env_kwargs) is not None]
    if algo not in fitting:
        need = ALGORITHMS[algo].check_action_space(action_space)
        kind = type(action_space).__name__
        raise InputError(
            f"--algo {algo} needs {need}, and {env_id!r} has {_describe(action_space)} actions; the algorithms that fit {kind} "
            f"actions are {', '.join(fitting)} (with a default for {env_id!r}: {', '.join(working)})"
        )
    if algo not in family["algorithms"]:
        raise InputError(
            f"no shipped config for {algo} on {env_id!r} and no {algo} default for {family['applies']}; "
            f"with a default for {env_id!r}: {', '.join(working)} (or write a CONFIG.yaml for {algo})"
        )
    if info_masks and not ALGORITHMS[algo].action_masks:
        takes = ", ".join(a for a in working if ALGORITHMS[a].action_masks)
        raise InputError(f"--env {env_id!r} gives its legal actions in info['action_mask'], and {algo} takes no action masks; these do: {takes}")
    max_steps = env_section.get("max_episode_steps")
    short = is_short_classic_control(env_id, max_steps if isinstance(max_steps, int) else None)
    raw = family_config(family, algo, env_id, classic_control=short)
    source = family["algorithms"][algo]["source"]
    adjusted = family["classic_control"].get(algo, {}) if short else {}
    if adjusted:
        source += "; " + ", ".join(f"{key} {value}" for key, value in adjusted.items()) + " on a short classic-control env"
    if info_masks:  # the env says which actions are legal: the policy must hear it (env.action_mask: info)
        raw = set_values(raw, {"env.action_mask": "info"})
        source += "; legal actions from info['action_mask'] (env.action_mask: info)"
    message = f"no shipped config for {algo} on {env_id}; using the {algo} family default for {family['applies']} ({source})"
    return Choice(raw, message, f"{algo}-{_safe_name(env_id)}", family=family["name"])


def family_for(env_id: str, observation_space: gym.Space, action_space: gym.Space) -> Family | None:
    """The family that covers an env: Atari for an ALE id (by its id alone), else by its spaces:
    vector observations (a Box of one dimension) with Box or Discrete actions. None: no family."""
    if is_atari_id(env_id):
        return ATARI
    if not (isinstance(observation_space, gym.spaces.Box) and len(observation_space.shape) == 1) or action_space_problem(action_space):
        return None
    if isinstance(action_space, gym.spaces.Box):
        return BOX_VECTOR
    if isinstance(action_space, gym.spaces.Discrete):
        return DISCRETE_VECTOR
    return None


def family_config(family: Family, algo: str, env_id: str, *, classic_control: bool = False) -> dict[str, Any]:
    """The family's default of ``algo`` as a nested config dict: its ``config`` with ``env.env_id``
    and ``run.target_steps`` filled in, and its ``classic_control`` values when asked for."""
    values: dict[str, Any] = {"env.env_id": env_id, "run.target_steps": family["target_steps"]}
    if classic_control:
        values.update(family["classic_control"].get(algo, {}))
    return set_values(family["algorithms"][algo]["config"], values)


def is_short_classic_control(env_id: str, max_episode_steps: int | None = None) -> bool:
    """Whether ``env_id`` is one of gymnasium's classic-control envs with a time limit of at most
    :data:`SHORT_EPISODE_STEPS` steps (``max_episode_steps``, when given, replaces the env's)."""
    spec = gym.registry.get(env_id)
    if spec is None or not str(spec.entry_point).startswith("gymnasium.envs.classic_control"):
        return False
    steps = max_episode_steps if max_episode_steps is not None else spec.max_episode_steps
    return steps is not None and steps <= SHORT_EPISODE_STEPS


def shipped_config(algo: str, env_id: str, configs: Path | None = CONFIGS, env_kwargs: dict[str, Any] | None = None) -> Path | None:
    """The plainest shipped config (``configs/*/*.yaml``) whose ``env.env_id`` is ``env_id``,
    whose ``env.env_kwargs`` make the same env as ``env_kwargs`` (the same values, up to those
    equal to the env's own defaults: so LunarLander-v3 with ``continuous: true`` is another env,
    and the bit-flipping env with ``n_bits: 15``, its default, the same one) and whose
    ``algorithm.name`` is ``algo``; None if there is none."""
    if configs is None:
        return None
    candidates = [(kwargs, rank, path) for (found_env, found_algo, kwargs, rank, path) in _shipped_index(configs.resolve()) if (found_env, found_algo) == (env_id, algo)]
    if not candidates:  # the env's defaults are read (its entry point imported) only when a config could match
        return None
    defaults = _env_kwarg_defaults(env_id)
    wanted = _without_defaults(env_kwargs or {}, defaults)
    matches = [(rank, path) for kwargs, rank, path in candidates if _same(_without_defaults(kwargs, defaults), wanted)]
    return min(matches)[1] if matches else None


def _without_defaults(kwargs: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` less the entries whose value is the env's default for that keyword."""
    missing = object()
    return {k: v for k, v in kwargs.items() if not _same(defaults.get(k, missing), v)}


def _same(a: Any, b: Any) -> bool:
    """``a == b`` as one bool; False where the comparison is not one (a numpy array default
    against a YAML list raises on ``bool``)."""
    try:
        return bool(a == b)
    except Exception:
        return False


def _env_kwarg_defaults(env_id: str) -> dict[str, Any]:
    """The keyword values ``gym.make(env_id)`` passes when given none: the defaults of its entry
    point's signature, then the registration's ``kwargs`` over them (empty where the entry point
    cannot be read, as for an id that is not registered)."""
    import gymnasium as gym

    spec = gym.registry.get(env_id)
    if spec is None:
        return {}
    entry = spec.entry_point
    defaults = _imported_defaults(entry) if isinstance(entry, str) else _signature_defaults(entry)
    return {**defaults, **(spec.kwargs or {})}


@functools.lru_cache(maxsize=64)
def _imported_defaults(entry_point: str) -> dict[str, Any]:
    """:func:`_signature_defaults` of a ``"module:attr"`` entry point, imported once (the cached
    dicts are not to be changed)."""
    import gymnasium as gym

    try:
        creator = gym.envs.registration.load_env_creator(entry_point)
    except Exception:  # any error its import raises: the registration's kwargs only
        return {}
    return _signature_defaults(creator)


def _signature_defaults(creator: Any) -> dict[str, Any]:
    """The keyword defaults of an env's creator (empty where its signature cannot be read)."""
    import inspect

    try:
        parameters = inspect.signature(creator).parameters.values()
    except (TypeError, ValueError):
        return {}
    return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}


@functools.lru_cache(maxsize=4)
def _shipped_index(configs: Path) -> tuple[tuple[str, str, dict[str, Any], tuple[int, int], Path], ...]:
    """``(env_id, algorithm name, env kwargs, plainness, path)`` of every config under ``configs``
    (files that are not run configs, such as search spaces, are skipped; the cached dicts are not
    to be changed)."""
    index = []
    for path in sorted(configs.glob("*/*.yaml")):
        try:
            raw = read_mapping(path, "config file")
        except ConfigError:
            continue
        env = _section(raw, "env")
        env_id, algo, kwargs = env.get("env_id"), _section(raw, "algorithm").get("name", "ppo"), env.get("env_kwargs") or {}
        if isinstance(env_id, str) and isinstance(algo, str) and isinstance(kwargs, dict):
            index.append((env_id, algo, dict(kwargs), _plainness(raw), path))
    return tuple(index)


def _plainness(raw: dict[str, Any]) -> tuple[int, int]:
    """Sort key of shipped configs, plainest first: how many of (remote workers or central
    inference; a recurrent core or an action mask) it has, then how many keys it sets."""
    scheme, actor, env = _section(raw, "scheme"), _section(raw, "actor"), _section(raw, "env")
    distributed = (
        bool(scheme.get("num_col_workers") or scheme.get("num_grad_workers")) or scheme.get("inference", "local") != "local"
    )
    variant = _section(actor, "recurrent").get("type", "none") != "none" or env.get("action_mask", "none") != "none"
    return int(distributed) + int(variant), _count_keys(raw)


def _count_keys(raw: Any) -> int:
    return sum(_count_keys(v) for v in raw.values()) if isinstance(raw, dict) else 1


def _check_overrides(algo: str, env_id: str, overrides: Sequence[str]) -> dict[str, Any]:
    """The overrides as a nested dict; one that sets ``algorithm.name`` or ``env.env_id`` to
    something else than ``--algo``/``--env`` is refused (the default chosen is for those)."""
    given = apply_overrides({}, list(overrides))
    for section, key, flag, value in (("algorithm", "name", "--algo", algo), ("env", "env_id", "--env", env_id)):
        other = _section(given, section).get(key, value)
        if other != value:
            raise InputError(f"override {section}.{key}={other} contradicts {flag} {value}: use {flag} {other} instead")
    return given


def _fitting_algorithms(action_space: gym.Space) -> list[str]:
    """The algorithms that act in ``action_space``, as each declares (``check_action_space``)."""
    return [name for name, cls in ALGORITHMS.items() if cls.check_action_space(action_space) is None]


def _section(raw: dict[str, Any], key: str) -> dict[str, Any]:
    value = raw.get(key)
    return value if isinstance(value, dict) else {}


def _describe(space: gym.Space) -> str:
    """A space in one short line (a Box's bounds can fill several)."""
    if isinstance(space, gym.spaces.Box):
        return f"Box(shape {space.shape}, {space.dtype})"
    return " ".join(str(space).split())


def shown_path(path: Path) -> str:
    """``path`` relative to the working directory where it is under it (``configs/ppo/cartpole.yaml``)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _safe_name(env_id: str) -> str:
    """An env id as part of a directory name (``ALE/Pong-v5`` -> ``ALE-Pong-v5``)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", env_id).strip("-.") or "env"
