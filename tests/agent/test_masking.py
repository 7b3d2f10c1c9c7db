"""Action masking: a masked action is never sampled, never greedy, never a bootstrap action;
its probability is 0 and entropies stay finite; masks reach the actors from info or from a
Dict observation; wrong masks are one line."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

from pytorchrl.agent.actors.networks.recurrent import RecurrentSpec
from pytorchrl.agent.actors.off_policy import OffPolicyActor
from pytorchrl.agent.actors.on_policy import OnPolicyActor
from pytorchrl.agent.algorithms.dqn import DQN
from pytorchrl.config import from_dict
from pytorchrl.envs.masking import InfoActionMask, LegalMovesEnv, mask_slice
from pytorchrl.envs.vec_env import VecEnv
from pytorchrl.learner import Learner
from pytorchrl.scheme.scheme import build_scheme
from pytorchrl.utils.errors import InputError

pytestmark = pytest.mark.timeout(60)

N = 5
SPACE = gym.spaces.Dict({"action_mask": gym.spaces.Box(0, 1, (N,), np.int8), "obs": gym.spaces.Box(-1.0, 1.0, (3,), np.float32)})
SLICE = mask_slice(SPACE)


def _batch(rows: int = 512, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Packed observations with random masks (at least one legal action each) and the masks."""
    gen = torch.Generator().manual_seed(seed)
    legal = torch.rand(rows, N, generator=gen) < 0.4
    legal[torch.arange(rows), torch.randint(N, (rows,), generator=gen)] = True
    obs = torch.zeros(rows, SPACE["action_mask"].shape[0] + 3)
    obs[:, SLICE] = legal.float()
    obs[:, SLICE.stop :] = torch.randn(rows, 3, generator=gen)
    return obs, legal


@pytest.mark.parametrize("recurrent", [None, RecurrentSpec("gru", 8)])
def test_the_policy_never_samples_or_prefers_a_masked_action(recurrent):
    torch.manual_seed(0)
    actor = OnPolicyActor(SPACE, gym.spaces.Discrete(N), action_mask=SLICE, recurrent=recurrent)
    with torch.no_grad():  # big logits, so that an unmasked sample would often be illegal
        actor.action_head.linear.weight.normal_(0, 5.0)  # type: ignore[attr-defined]
    obs, legal = _batch()
    rows = torch.arange(len(obs))
    noise = actor.draw_noise(1, len(obs))[0]
    out = torch.zeros(len(obs), dtype=torch.long)
    log_prob, value = torch.zeros(len(obs)), torch.zeros(len(obs))
    with torch.no_grad():
        if recurrent is None:
            actor.act(obs, noise, out)
            assert legal[rows, out].all()
            actor.act_scored(obs, noise, out, log_prob, value)
        else:
            actor.act_recurrent(obs, actor.initial_state(len(obs)), noise, out, log_prob, value)
        assert legal[rows, out].all() and torch.isfinite(log_prob).all()
        for deterministic in (True, False):
            action, _, _ = actor.get_action(obs, deterministic=deterministic)
            assert legal[rows, action].all()
        seq = (obs.unsqueeze(0), torch.zeros(1, len(obs), dtype=torch.long), actor.initial_state(len(obs)), torch.ones(1, len(obs), dtype=torch.bool))
        for a in range(N):  # every action's log-probability: -inf in effect where illegal
            actions = torch.full((len(obs),), a)
            if recurrent is None:
                lp, entropy, _ = actor.evaluate_actions(obs, actions)
            else:
                lp, entropy, _ = actor.evaluate_actions(seq[0], actions.unsqueeze(0), seq[2], seq[3])
            assert (lp[~legal[:, a]] < -1e30).all() and torch.isfinite(entropy).all() and (entropy >= 0).all()
            assert (lp[legal[:, a]] > -1e30).all()


def test_q_learning_never_takes_or_bootstraps_from_a_masked_action():
    torch.manual_seed(0)
    actor = OffPolicyActor(SPACE, gym.spaces.Discrete(N), action_mask=SLICE)
    obs, legal = _batch()
    rows = torch.arange(len(obs))
    out = torch.zeros(len(obs), dtype=torch.long)
    for epsilon in (0.0, 1.0, 0.5):  # greedy, exploring, both
        actor.epsilon.fill_(epsilon)
        with torch.no_grad():
            actor.act(obs, actor.draw_noise(1, len(obs))[0], out)
        assert legal[rows, out].all()
    # exploring is uniform over the legal actions: one row with legal actions {1, 3}
    actor.epsilon.fill_(1.0)
    one = obs[:1].repeat(4000, 1)
    one[:, SLICE] = torch.tensor([0.0, 1.0, 0.0, 1.0, 0.0])
    counts = torch.zeros(N)
    picks = torch.zeros(len(one), dtype=torch.long)
    with torch.no_grad():
        actor.act(one, actor.draw_noise(1, len(one))[0], picks)
    counts.index_add_(0, picks, torch.ones(len(one)))
    assert counts[[0, 2, 4]].sum() == 0 and abs(float(counts[1] - counts[3])) < 300
    action, _, _ = actor.get_action(obs, deterministic=True)
    assert legal[rows, action].all()
    # targets: the masked actions (0, 2, 4 of `one`) are worth 100, the legal ones about 0; the
    # bootstrap must come from a legal one
    for double_q in (False, True):
        algo = DQN(actor, double_q=double_q)
        with torch.no_grad():
            for net in (actor.q_net, actor.target_q_net):
                net.advantage.bias.copy_(torch.tensor([100.0, 0.0, 100.0, 0.0, 100.0]))
        picked = actor.masked(actor.target_q_net.forward(one), one).argmax(-1)
        assert (picked % 2 == 1).all()
        batch = {"obs": one, "actions": picks, "rewards": torch.zeros(len(one)), "next_obs": one, "discounts": torch.ones(len(one))}
        algo.compute_loss(batch)
        td = algo.pop_priorities()
        assert td is not None and float(td.max()) < 50.0  # no bootstrap from a +100 masked action


def test_info_masks_become_the_dict_key_and_reach_the_vector_env():
    env = InfoActionMask(LegalMovesEnv())
    obs, info = env.reset(seed=0)
    assert set(obs) == {"action_mask", "obs"} and np.array_equal(obs["action_mask"], info["action_mask"])
    _, space, _ = VecEnv.create_factory("pytorchrl/LegalMoves-v0", num_envs=2, action_mask="info")
    assert isinstance(space, gym.spaces.Dict) and "action_mask" in space.spaces
    vec = VecEnv("pytorchrl/LegalMoves-v0", num_envs=2, action_mask="info")
    packed = vec.reset()
    assert packed[:, mask_slice(space)].sum(-1).min() >= 1  # every row holds its mask


def test_masks_in_info_that_the_config_ignores_are_warned_of():
    """env.action_mask 'none' on an env that gives legal actions in its info: one warning saying
    how to use them; none when they are used."""
    with pytest.warns(UserWarning, match=r"gives its legal actions in info\['action_mask'\].*set env.action_mask: info"):
        VecEnv.create_factory("pytorchrl/LegalMoves-v0", num_envs=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        VecEnv.create_factory("pytorchrl/LegalMoves-v0", num_envs=2, action_mask="info")
        VecEnv.create_factory("CartPole-v1", num_envs=2)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"env": {"env_id": "CartPole-v1", "action_mask": "obs"}}, r"'env.action_mask' = 'obs' on env.env_id = 'CartPole-v1': the observation space has no 'action_mask' key"),
        ({"env": {"env_id": "pytorchrl/LegalMoves-v0", "env_kwargs": {"dict_obs": True}, "action_mask": "obs"}, "algorithm": {"name": "sac"}},
         r"'env.action_mask' = 'obs': algorithm 'sac' does not take action masks; these do: ppo, a2c, impala, appo, dqn"),
    ],
)
def test_impossible_masks_are_one_line(raw, message):
    with pytest.raises(InputError, match=message) as info:
        build_scheme(from_dict(raw))
    assert "\n" not in str(info.value)


class _ShortMask(LegalMovesEnv):
    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        return obs, {"action_mask": info["action_mask"][:-1]}


def test_an_info_mask_of_the_wrong_shape_is_one_line():
    with pytest.raises(InputError, match=r"info\['action_mask'\] has shape \(5,\); a mask of shape \(6,\), one flag per action, is needed"):
        VecEnv.create_factory(f"{__name__}:_ShortMask", num_envs=1, action_mask="info")


def test_a_mask_of_the_wrong_shape_is_named():
    from pytorchrl.envs.masking import check_mask_space

    space = gym.spaces.Dict({"action_mask": gym.spaces.Box(0, 1, (3,), np.int8), "x": gym.spaces.Box(0, 1, (2,))})
    problem = check_mask_space(space, gym.spaces.Discrete(4), "obs")
    assert problem is not None and "must be a mask of shape (4,)" in problem
    assert "Discrete action space" in str(check_mask_space(space, gym.spaces.Box(-1, 1, (2,)), "obs"))


@pytest.mark.learning
@pytest.mark.timeout(300)
@pytest.mark.parametrize("algorithm", ["ppo", "dqn"])
def test_masked_runs_never_take_an_illegal_action(algorithm, tmp_path):
    """pytorchrl/LegalMoves-v0 raises on an illegal action: a run that finishes took none, and
    it learns to pick the most valuable legal one (a random legal policy scores about 9.5)."""
    overrides = {"ppo": {"num_epochs": 4, "minibatch_size": 128, "lr": 1e-3}, "dqn": {"start_steps": 500, "update_every": 8, "lr": 1e-3, "updates_per_step": 0.25}}
    raw = {
        "env": {"env_id": "pytorchrl/LegalMoves-v0", "num_envs": 8, "action_mask": "info", "num_test_envs": 4},
        "storage": {"num_steps": 64 if algorithm == "ppo" else 8},
        "algorithm": {"name": algorithm, **overrides[algorithm]},
        "run": {"target_steps": 12_000, "log_every": 4096, "eval_every": 4096, "eval_episodes": 8, "stop_at_return": None},
    }
    learner = Learner.from_config(from_dict(raw), run_dir=tmp_path / "run", progress=False)
    try:
        summary = learner.train()
    finally:
        learner.close()
    assert summary["env_restarts"] == 0 and summary["final_eval_return_mean"] > 11.0, summary
