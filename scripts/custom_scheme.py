"""Build a scheme by hand from the components' factories and train PPO on CartPole.

    python scripts/custom_scheme.py [TARGET_STEPS]
"""

import sys

from pytorchrl import PPO, EncoderSpec, GAEBuffer, Learner, OnPolicyActor, RunConfig, Scheme, SchemeConfig, VecEnv

target_steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
num_envs, num_steps = 8, 32

# 1. Environments: a factory that each collection worker calls in its own process.
env_factory, obs_space, action_space = VecEnv.create_factory("CartPole-v1", num_envs=num_envs, seed=0)

# 2. The actor (policy + value network), the storage (GAE) and the algorithm (PPO).
actor_factory = OnPolicyActor.create_factory(obs_space, action_space, encoder=EncoderSpec(hidden_sizes=(64, 64)))
storage_factory = GAEBuffer.create_factory(
    num_steps=num_steps, num_envs=num_envs, obs_shape=obs_space.shape, action_shape=(), discrete=True, gamma=0.98, gae_lambda=0.8
)
algo_factory = PPO.create_factory(lr=1e-3, num_epochs=20, minibatch_size=256, anneal_lr=True, ent_coef=0.0)

# 3. The scheme: here everything local; set num_col_workers / num_grad_workers to scale out.
scheme = Scheme(
    env_factory=env_factory,
    actor_factory=actor_factory,
    algo_factory=algo_factory,
    storage_factory=storage_factory,
    config=SchemeConfig(num_col_workers=0, num_grad_workers=0),
)

# 4. The learner drives it: evaluation, stop conditions (no run_dir: nothing written to disk).
learner = Learner(scheme, run=RunConfig(target_steps=target_steps, eval_every=4096, stop_at_return=475.0))
summary = learner.train()
learner.close()
print(summary)
