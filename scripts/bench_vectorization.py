"""Raw env throughput of the vectorization options for Atari and MuJoCo (random actions): the
figures behind the EnvPool decision in BENCHMARKS.md ("Atari and MuJoCo").

    python scripts/bench_vectorization.py CONFIG [SECONDS]

CONFIG: gym_sync, gym_async (Pong, 16 envs, gymnasium's AtariPreprocessing + frame stack),
ale_vec_t1 / ale_vec_t2 (ale-py's AtariVectorEnv, 1 or 2 threads), envpool_pong_t1 / _t2,
mj_single, mj_sync8 (HalfCheetah-v5), envpool_mj8_t1 / _t2 (envpool: pip install envpool).
Prints one JSON line: rates, and the cores this process and the rest of the machine used
(so a run that shared the cores shows it). Construction and a 1 s warm-up are not timed."""
import json
import os
import sys
import time

import numpy as np

CFG = sys.argv[1]
DUR = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0
N_ATARI = 16
N_MJ = 8
rng = np.random.default_rng(0)


def make_pong_single():
    import ale_py
    import gymnasium as gym
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    gym.register_envs(ale_py)
    env = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.25)
    env = AtariPreprocessing(env, noop_max=30, frame_skip=4)
    return FrameStackObservation(env, stack_size=4)


def build():
    """Return (env, n_envs, frames_per_step, action_fn, step_fn)."""
    if CFG in ("gym_sync", "gym_async"):
        import gymnasium as gym

        fns = [make_pong_single for _ in range(N_ATARI)]
        env = gym.vector.SyncVectorEnv(fns) if CFG == "gym_sync" else gym.vector.AsyncVectorEnv(fns)
        env.reset(seed=0)
        return env, N_ATARI, 4, lambda: rng.integers(0, 6, size=N_ATARI)
    if CFG.startswith("ale_vec_t"):
        from ale_py.vector_env import AtariVectorEnv

        t = int(CFG[len("ale_vec_t"):])
        env = AtariVectorEnv("pong", N_ATARI, num_threads=t, repeat_action_probability=0.25)
        env.reset(seed=0)
        return env, N_ATARI, 4, lambda: rng.integers(0, 6, size=N_ATARI)
    if CFG.startswith("envpool_pong_t"):
        import envpool

        t = int(CFG[len("envpool_pong_t"):])
        env = envpool.make("Pong-v5", env_type="gymnasium", num_envs=N_ATARI, num_threads=t,
                           repeat_action_probability=0.25)
        env.reset()
        return env, N_ATARI, 4, lambda: rng.integers(0, 6, size=N_ATARI, dtype=np.int32)
    if CFG == "mj_single":
        import gymnasium as gym

        env = gym.make("HalfCheetah-v5")
        env.reset(seed=0)
        return env, 1, 1, None
    if CFG == "mj_sync8":
        import gymnasium as gym

        env = gym.vector.SyncVectorEnv([lambda: gym.make("HalfCheetah-v5") for _ in range(N_MJ)])
        env.reset(seed=0)
        return env, N_MJ, 1, lambda: rng.uniform(-1, 1, size=(N_MJ, 6))
    if CFG.startswith("envpool_mj8_t"):
        import envpool

        t = int(CFG[len("envpool_mj8_t"):])
        env = envpool.make("HalfCheetah-v5", env_type="gymnasium", num_envs=N_MJ, num_threads=t)
        env.reset()
        return env, N_MJ, 1, lambda: rng.uniform(-1, 1, size=(N_MJ, 6))
    raise SystemExit(f"unknown config {CFG}")


HZ = os.sysconf("SC_CLK_TCK")


def sys_busy():
    """(busy_jiffies, total_jiffies) summed over all CPUs."""
    v = list(map(int, open("/proc/stat").readline().split()[1:]))
    idle = v[3] + v[4]
    tot = sum(v[:8])
    return tot - idle, tot


def tree_cpu():
    """CPU seconds of this process (all threads) + its direct children."""
    t = time.process_time()
    kids = set()
    for task in os.listdir("/proc/self/task"):
        try:
            kids.update(open(f"/proc/self/task/{task}/children").read().split())
        except OSError:
            pass
    for k in kids:
        try:
            f = open(f"/proc/{k}/stat").read().rsplit(")", 1)[1].split()
            t += (int(f[11]) + int(f[12])) / HZ
        except OSError:
            pass
    return t


def main():
    t_build = time.perf_counter()
    env, n, fskip, act = build()
    t_build = time.perf_counter() - t_build
    single = CFG == "mj_single"

    def one_step():
        if single:
            _, _, term, trunc, _ = env.step(rng.uniform(-1, 1, size=6))
            if term or trunc:
                env.reset()
        else:
            env.step(act())

    # warm-up (~1 s)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 1.0:
        one_step()
    steps = 0
    cpu0 = tree_cpu()
    b0, tt0 = sys_busy()
    t0 = time.perf_counter()
    while True:
        for _ in range(10):
            one_step()
        steps += 10
        el = time.perf_counter() - t0
        if el >= DUR:
            break
    cpu = tree_cpu() - cpu0
    b1, tt1 = sys_busy()
    ncpu = os.cpu_count()
    sys_cores_busy = (b1 - b0) / (tt1 - tt0) * ncpu
    env_steps = steps * n
    out = dict(config=CFG, n_envs=n, agent_steps=steps, env_steps=env_steps,
               frames=env_steps * fskip, elapsed=round(el, 3), build_s=round(t_build, 2),
               env_steps_per_s=round(env_steps / el, 1), frames_per_s=round(env_steps * fskip / el, 1),
               own_cores=round(cpu / el, 2), sys_cores_busy=round(sys_cores_busy, 2),
               other_cores=round(max(0.0, sys_cores_busy - cpu / el), 2), loadavg=os.getloadavg()[0])
    print(json.dumps(out), flush=True)
    env.close()


if __name__ == "__main__":
    main()
