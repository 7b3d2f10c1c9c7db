"""Random Network Distillation (Burda et al. 2018): the intrinsic rewards' scaling, the
non-episodic second reward stream, the two value heads, and what stays on the learner."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from pytorchrl.agent.actors.on_policy import OnPolicyActor
from pytorchrl.agent.actors.rnd import RNDSpec, intrinsic_rewards
from pytorchrl.agent.storages.on_policy.gae_buffer import GAEBuffer, compute_gae
from pytorchrl.agent.storages.on_policy.vtrace_buffer import VTraceBuffer
from pytorchrl.config import ConfigError, from_dict
from pytorchrl.envs.chain import ChainEnv

pytestmark = pytest.mark.timeout(60)

OBS = gym.spaces.Box(-10, 10, (3,), np.float32)


def test_intrinsic_rewards_are_divided_by_the_running_std_of_their_discounted_sums():
    """A fixed batch, by hand: per env the non-episodic sums r0, g r0 + r1, ...; their variance
    over the valid steps (merged into the initial var 1 at count 1e-4) divides the rewards."""
    rnd = RNDSpec(gamma=0.5).build(OBS)
    rewards = torch.tensor([[1.0, 2.0], [3.0, 0.0], [1.0, 4.0]])
    valid = torch.tensor([[True, True], [True, False], [True, True]])
    sums = np.array([[1.0, 2.0], [0.5 * 1 + 3, 0.5 * 2 + 0], [0.5 * 3.5 + 1, 0.5 * 1 + 4]])
    kept = sums[valid.numpy()]
    count = 1e-4 + kept.size
    mean = kept.mean() * kept.size / count
    var = (1.0 * 1e-4 + kept.var() * kept.size + kept.mean() ** 2 * (1e-4 * kept.size / count)) / count
    scaled = rnd.scaled_rewards(rewards, valid)
    np.testing.assert_allclose(scaled.numpy(), rewards.numpy() / np.sqrt(var), rtol=1e-5)
    assert float(rnd.return_mean) == pytest.approx(mean) and float(rnd.return_count) == pytest.approx(count)


def test_each_envs_discounted_sum_runs_on_across_rollouts():
    """The paper's RewardForwardFilter: a rollout's sums go on from where the last rollout in
    its place left them (restarted at 0 they climbed to r / (1 - gamma) in every rollout, which
    inflated the std several times); another place, or other envs, start at 0."""
    rnd = RNDSpec(gamma=0.5).build(OBS)
    ones, valid = torch.ones(2, 3), torch.ones(2, 3, dtype=torch.bool)
    rnd.scaled_rewards(ones, valid)
    torch.testing.assert_close(rnd.forward_sums[0], torch.full((3,), 1.5, dtype=torch.float64))
    rnd.scaled_rewards(ones, valid)  # 1.5 -> 1.75 -> 1.875, not 1 -> 1.5 again
    torch.testing.assert_close(rnd.forward_sums[0], torch.full((3,), 1.875, dtype=torch.float64))
    rnd.scaled_rewards(2 * ones, valid, slot=1)
    torch.testing.assert_close(rnd.forward_sums[1], torch.full((3,), 3.0, dtype=torch.float64))
    rnd.scaled_rewards(torch.ones(1, 2), torch.ones(1, 2, dtype=torch.bool))  # 2 envs at place 0: other envs
    torch.testing.assert_close(rnd.forward_sums[0], torch.ones(2, dtype=torch.float64))


def test_the_sequences_vtrace_cuts_from_one_rollout_carry_their_sums_on_in_time_order():
    """IMPALA's unrolls (``storage.sequence_length`` < ``num_steps``) cut each received rollout
    into sequences; they share its slot, so the second goes on from the first, and the next
    round's first from this round's last: the sums are the whole rollout's, as uncut."""
    t, n, cut = 4, 2, 2
    actor = OnPolicyActor(OBS, gym.spaces.Discrete(2), rnd=RNDSpec(features=8, hidden_sizes=(8,), gamma=0.5))
    algorithm = type("Algo", (), {"actor": actor, "device": torch.device("cpu")})()

    def rollout() -> dict[str, torch.Tensor]:
        return {
            "obs": torch.randn(t + 1, n, 3), "actions": torch.zeros(t, n), "log_probs": torch.zeros(t, n), "values": torch.zeros(t + 1, n),
            "rewards": torch.zeros(t, n), "terminated": torch.zeros(t, n, dtype=torch.bool), "truncated": torch.zeros(t, n, dtype=torch.bool),
            "valid": torch.ones(t, n, dtype=torch.bool),
        }

    def errors(storage: VTraceBuffer) -> list[torch.Tensor]:  # the predictor's errors each sequence's rewards were scaled from
        return [actor.rnd.errors(r["obs"][1:].reshape(-1, 3)).view(-1, n).double() for r in storage.rollouts()]

    storage = VTraceBuffer(num_steps=t, num_envs=n, obs_shape=(3,), action_shape=(), discrete=True, state_stride=cut)
    storage.add_data(rollout())
    storage.add_data(rollout())
    storage.before_gradients()
    assert storage.rollout_slots() == [0, 0, 1, 1]
    intrinsic_rewards(algorithm, storage)
    first = errors(storage)
    by_hand = [torch.zeros(n, dtype=torch.float64) for _ in range(2)]
    for slot, e in zip(storage.rollout_slots(), first):
        for step in e:
            by_hand[slot] = by_hand[slot] * 0.5 + step
    for slot in range(2):
        torch.testing.assert_close(actor.rnd.forward_sums[slot], by_hand[slot])
    assert len(actor.rnd.forward_sums) == 2
    storage.after_gradients()
    storage.add_data(rollout())
    storage.before_gradients()
    intrinsic_rewards(algorithm, storage)
    for step in torch.cat(errors(storage)):
        by_hand[0] = by_hand[0] * 0.5 + step
    torch.testing.assert_close(actor.rnd.forward_sums[0], by_hand[0])


def test_the_predictor_trains_on_the_observations_its_rewards_were_scored_on():
    """Each step's reward is the error on its next observation, so the minibatches carry those
    (``rnd_obs``): the final observation of an episode (the reset step's own, which is no
    transition) is rewarded and trained on; the reset observation is neither. Before, the
    predictor trained on each step's own observation and never on a final one."""
    from pytorchrl.agent.actors.rnd import rewarded_observations

    t, n = 4, 1
    actor = OnPolicyActor(OBS, gym.spaces.Discrete(2), rnd=RNDSpec(features=8, hidden_sizes=(8,)))
    algorithm = type("Algo", (), {"actor": actor, "device": torch.device("cpu")})()
    buffer = GAEBuffer(num_steps=t, num_envs=n, obs_shape=(3,), action_shape=(), discrete=True)
    ids = torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0])  # observation 2 ends the episode; 3 starts the next
    buffer.add_data({
        "obs": ids.view(t + 1, 1, 1).expand(t + 1, n, 3).clone(), "actions": torch.zeros(t, n), "log_probs": torch.zeros(t, n),
        "values": torch.zeros(t + 1, n), "rewards": torch.zeros(t, n), "terminated": torch.tensor([[False], [True], [False], [False]]),
        "truncated": torch.zeros(t, n, dtype=torch.bool), "valid": torch.tensor([[True], [True], [False], [True]]),
    })
    buffer.before_gradients()
    intrinsic_rewards(algorithm, buffer)
    buffer.add_reward_stream(lambda r: (r["intrinsic_rewards"], torch.zeros(t + 1, n)), gamma=0.99, extrinsic_coef=2.0, intrinsic_coef=1.0)
    batch = next(buffer.generate_batches(minibatch_size=64, shuffle=False))
    assert batch["obs"][:, 0].tolist() == [0.0, 1.0, 3.0]  # the steps' own observations
    assert rewarded_observations(batch)[:, 0].tolist() == [1.0, 2.0, 4.0]  # their next ones: the final observation 2 in
    time_major = buffer.rollouts()[0]  # IMPALA's minibatches: [T, n] steps, masked by valid
    assert rewarded_observations(time_major)[:, 0].tolist() == [1.0, 2.0, 4.0]


def test_observations_are_normalised_by_running_statistics_and_clipped():
    rnd = RNDSpec(obs_clip=2.0).build(OBS)
    batch = torch.tensor([[1.0, 10.0, -4.0], [3.0, 10.0, 4.0], [2.0, 10.0, 0.0]])
    rnd.update_obs_stats(batch)
    np.testing.assert_allclose(rnd.obs_mean.numpy(), [2.0, 10.0, 0.0], atol=1e-3)
    out = rnd.normalize(torch.tensor([[2.0, 10.0, 100.0]]))
    assert out[0, 0] == pytest.approx(0.0, abs=1e-3) and out[0, 2] == 2.0  # clipped


@pytest.mark.parametrize("image", [(4, 36, 36), (36, 36, 3)])
def test_image_observations_reach_both_networks_as_normalised_not_scaled_again(image):
    """Frames are whitened and clipped to [-5, 5] before the networks (the paper's input): the
    image encoders' 1/255 for stored uint8 frames must not apply to them a second time, and
    neither network's input may change the other's (a float input is the caller's tensor)."""
    space = gym.spaces.Box(0, 255, image, np.uint8)
    rnd = RNDSpec().build(space)
    frames = torch.randint(0, 256, (16, *image), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    rnd.update_obs_stats(frames)
    seen = []
    conv2d = torch.nn.functional.conv2d

    def spy(x, *args, **kwargs):
        if x.shape[1] == min(image):  # the first convolution's input
            seen.append((x.min().item(), x.max().item()))
        return conv2d(x, *args, **kwargs)

    normalized = rnd.normalize(frames)
    torch.nn.functional.conv2d = spy
    try:
        rnd.errors(frames)
    finally:
        torch.nn.functional.conv2d = conv2d
    expected = (normalized.min().item(), normalized.max().item())
    assert len(seen) == 2 and all(low == pytest.approx(expected[0]) and high == pytest.approx(expected[1]) for low, high in seen)
    assert expected[0] < -1 and expected[1] > 1


def test_the_predictor_learns_what_it_sees_so_seen_states_pay_less():
    torch.manual_seed(0)
    rnd = RNDSpec(features=8, hidden_sizes=(32,)).build(OBS)
    seen, unseen = torch.randn(64, 3), torch.randn(64, 3) + 3.0
    rnd.update_obs_stats(torch.cat([seen, unseen]))
    opt = torch.optim.Adam(rnd.predictor.parameters(), lr=1e-2)
    before = float(rnd.errors(seen).detach().mean())
    for _ in range(200):
        opt.zero_grad()
        rnd.errors(seen).mean().backward()
        opt.step()
    with torch.no_grad():
        assert float(rnd.errors(seen).mean()) < 0.2 * before
        assert float(rnd.errors(unseen).mean()) > 3 * float(rnd.errors(seen).mean())
    assert all(not p.requires_grad for p in rnd.target.parameters())


def test_the_second_reward_stream_is_non_episodic_and_the_advantages_mix():
    """One env, 4 steps, the episode terminates at step 1 (step 2 is the reset step): the
    extrinsic GAE stops there, the intrinsic one bootstraps through it."""
    t, n = 4, 1
    buffer = GAEBuffer(gamma=0.9, gae_lambda=1.0, num_steps=t, num_envs=n, obs_shape=(3,), action_shape=(), discrete=True)
    data = {
        "obs": torch.zeros(t + 1, n, 3), "actions": torch.zeros(t, n), "log_probs": torch.zeros(t, n),
        "values": torch.tensor([[1.0], [2.0], [0.0], [1.0], [3.0]]), "rewards": torch.tensor([[1.0], [1.0], [0.0], [1.0]]),
        "terminated": torch.tensor([[False], [True], [False], [False]]), "truncated": torch.zeros(t, n, dtype=torch.bool),
        "valid": torch.tensor([[True], [True], [False], [True]]),
    }
    buffer.add_data(data)
    buffer.before_gradients()
    intrinsic_rewards = torch.tensor([[0.5], [0.5], [0.0], [0.5]])
    intrinsic_values = torch.tensor([[0.2], [0.4], [0.1], [0.3], [0.6]])
    buffer.add_reward_stream(lambda rollout: (intrinsic_rewards, intrinsic_values), gamma=0.5, extrinsic_coef=2.0, intrinsic_coef=1.0)
    batch = next(buffer.generate_batches(minibatch_size=64, shuffle=False))
    a_e, r_e = compute_gae(data["rewards"], data["values"], data["terminated"], data["truncated"], data["valid"], gamma=0.9, gae_lambda=1.0)
    never = torch.zeros(t, n, dtype=torch.bool)
    a_i, r_i = compute_gae(intrinsic_rewards, intrinsic_values, never, never, data["valid"], gamma=0.5, gae_lambda=1.0)
    keep = data["valid"].reshape(-1)
    torch.testing.assert_close(batch["advantages"], (2 * a_e + a_i).reshape(-1)[keep])
    torch.testing.assert_close(batch["returns"], torch.stack([r_e, r_i], -1).reshape(-1, 2)[keep])
    # the terminated step: no extrinsic bootstrap, an intrinsic one from the final observation
    assert float(a_e[1, 0]) == pytest.approx(1.0 - 2.0)
    assert float(a_i[1, 0]) == pytest.approx(0.5 + 0.5 * 0.1 - 0.4)
    assert batch["values"].shape == (3, 2)


def test_the_actor_has_two_value_heads_and_keeps_rnd_on_the_learner():
    actor = OnPolicyActor(OBS, gym.spaces.Discrete(2), rnd=RNDSpec(features=8, hidden_sizes=(8,)))
    obs = torch.randn(5, 3)
    _, info, _ = actor.get_action(obs)
    assert info["value"].shape == (5,)
    _, _, values = actor.evaluate_actions(obs, torch.zeros(5, dtype=torch.long))
    assert values.shape == (5, 2)
    torch.testing.assert_close(values[:, 1], actor.intrinsic_value(obs))
    torch.testing.assert_close(values[:, 0], info["value"])
    acting = [k for k in actor.state_dict() if k.startswith(actor.acting_prefixes)]
    assert acting and not any(k.startswith("rnd.") for k in acting) and any(k.startswith("value_head") for k in acting)


def test_the_chain_pays_only_at_its_end_and_no_constant_action_walks_it():
    env = ChainEnv(length=6)
    assert set(env.right.tolist()) == {0, 1}  # a constant action cannot walk it
    env.reset(seed=0)
    total, done = 0.0, False
    for cell in range(5):
        obs, reward, done, _, _ = env.step(int(env.right[cell]))
        total += reward
    assert done and total == 1.0 and obs[5] == 1.0
    env.reset()
    obs, reward, done, _, _ = env.step(1 - int(env.right[0]))
    assert reward == 0.01 and not done and obs[0] == 1.0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"algorithm": {"name": "dqn", "rnd": {"enabled": True}}}, "config key 'algorithm.rnd' does not apply to algorithm.name = 'dqn'; it is a key of ppo, a2c, impala, appo"),
        ({"algorithm": {"name": "ppo", "rnd": {"enabled": True}}, "actor": {"recurrent": {"type": "gru"}}, "storage": {"sequence_length": 8}},
         "config key 'algorithm.rnd.enabled' = true needs a memoryless actor: actor.recurrent.type is 'gru'"),
        ({"algorithm": {"name": "ppo", "rnd": {"enabled": True}}, "scheme": {"num_grad_workers": 2}},
         "config key 'algorithm.rnd.enabled' = true needs the local gradient worker: scheme.num_grad_workers is 2, allowed 0 "
         "(RND's running statistics live with the one learner that scores the rollouts)"),
    ],
)
def test_rnd_bad_input_is_one_line(overrides, message):
    with pytest.raises(ConfigError) as info:
        from_dict({"env": {"env_id": "pytorchrl/Chain-v0"}, **overrides})
    assert str(info.value) == message
