"""Benchmark of the RL domain's step: rendering, updates, and where the time goes.

    python bench/rl_step.py                      # everything, ~5-10 minutes on 2 idle cores
    python bench/rl_step.py --only updates --batch 128 --repeats 3

Prints:
* environment steps per second with rendering (cartpole-swingup, action repeat 8, 100x100
  renders, random actions) and the share of that time spent rendering;
* SAC+CURL updates per second (sampling from the replay buffer included) at batch 512 and
  128, for ctk's update and for the reference code's way of computing the same update
  (separate encoder passes, NCHW convolutions), interleaved so that machine load hits both;
  each under glibc malloc, glibc tuned through ``mallopt`` and jemalloc (``LD_PRELOAD``);
* the share of a training loop's time in rendering, in updates and in the contrastive term;
* the replay buffer's memory at 100k capacity against the reference's obs + next_obs stacks.

Timings need the machine to themselves (another busy process makes updates 2.5-3.5x slower
and distorts the ratios): the script prints the load average beside each figure.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from domains.rl.agent import CurlSacAgent  # noqa: E402
from domains.rl.config import AgentConfig, EncoderConfig  # noqa: E402
from domains.rl.replay import FrameReplayBuffer  # noqa: E402

JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


def load() -> str:
    return "load %.1f" % os.getloadavg()[0]


def tune_glibc_malloc() -> None:
    """Keep freed memory in the heap: no mmap for large blocks, no trimming (so the
    100 MB activations of a batch-512 update are not page-faulted in again every time)."""
    libc = ctypes.CDLL("libc.so.6")
    m_trim_threshold, m_mmap_max = -1, -4
    libc.mallopt(m_mmap_max, 0)
    libc.mallopt(m_trim_threshold, 2**30)


def filled_buffer(action_dim: int = 1, frames: int = 3000) -> FrameReplayBuffer:
    rng = np.random.default_rng(0)
    buf = FrameReplayBuffer(frames, (3, 100, 100), action_dim, 3)
    pool = rng.integers(0, 256, size=(64, 3, 100, 100), dtype=np.uint8)
    buf.start_episode(pool[0])
    for t in range(frames - 2):
        if t % 125 == 124:
            buf.start_episode(pool[t % 64])
        else:
            buf.add(rng.uniform(-1, 1, action_dim).astype(np.float32), float(rng.random()), False, pool[t % 64])
    return buf


def make_agent(objective: bool, fused: bool, channels_last: bool) -> CurlSacAgent:
    from toolkit.objective import build
    from toolkit.recipe import ObjectiveSection as Objective

    obj = build(Objective.model_validate({"loss": {"name": "info_nce"}})) if objective else None
    torch.manual_seed(0)
    return CurlSacAgent((9, 84, 84), 1, encoder=EncoderConfig(), agent=AgentConfig(), objective=obj,
                        fused=fused, channels_last=channels_last)


def bench_updates(batch: int, repeats: int) -> dict:
    """Seconds per update (sampling included), ctk vs reference-style, interleaved."""
    buf, rng = filled_buffer(), np.random.default_rng(1)
    agents = {"ctk": make_agent(True, True, True), "reference_style": make_agent(True, False, False)}
    times: dict[str, list[float]] = {k: [] for k in agents}
    for agent in agents.values():  # warm-up: two updates (actor step and no actor step)
        for _ in range(2):
            agent.update(buf.sample(rng, batch, 84))
    agents["ctk"].timings.clear()
    for _ in range(repeats):
        for name, agent in agents.items():
            for _ in range(2):  # one update with and one without the actor step
                t = time.perf_counter()
                agent.update(buf.sample(rng, batch, 84))
                times[name].append(time.perf_counter() - t)
    total = sum(agents["ctk"].timings.values())
    shares = {k: v / total for k, v in agents["ctk"].timings.items()}
    return {name: statistics.median(v) for name, v in times.items()} | {"ctk_sections": shares}


def timed_env():
    """cartpole-swingup as CURL runs it, with the time spent rendering accumulated."""
    from domains.rl.envs import make_env

    env = make_env("cartpole-swingup", action_repeat=8, image_size=100, seed=0)
    inner, render_time = env.unwrapped, [0.0]
    original = inner.render

    def timed_render():
        t = time.perf_counter()
        out = original()
        render_time[0] += time.perf_counter() - t
        return out

    inner.render = timed_render
    return env, render_time


def bench_env(agent_steps: int) -> dict:
    """Environment steps per second with 100x100 rendering, and the rendering share."""
    env, render_time = timed_env()
    env.reset()
    rng = np.random.default_rng(0)
    env_steps, render_time[0] = 0, 0.0
    t = time.perf_counter()
    for _ in range(agent_steps):
        _, _, term, trunc, info = env.step(rng.uniform(-1, 1, 1).astype(np.float32))
        env_steps += info["env_steps"]
        if term or trunc:
            env.reset()
    wall = time.perf_counter() - t
    return {"env_steps_per_s": env_steps / wall, "agent_steps_per_s": agent_steps / wall,
            "render_ms": 1000 * render_time[0] / agent_steps, "render_share": render_time[0] / wall}


def bench_loop(agent_steps: int, batch: int) -> dict:
    """Shares of a training loop (act, update, environment step) at ``batch``."""
    env, render_time = timed_env()
    agent, buf, rng = make_agent(True, True, True), filled_buffer(), np.random.default_rng(2)
    obs, _ = env.reset()
    agent.update(buf.sample(rng, batch, 84))
    agent.timings.clear()
    render_time[0] = 0.0
    update_time = 0.0
    t0 = time.perf_counter()
    for _ in range(agent_steps):
        action = agent.act(obs, sample=True)
        t = time.perf_counter()
        agent.update(buf.sample(rng, batch, 84))
        update_time += time.perf_counter() - t
        obs, _, term, trunc, _ = env.step(action)
        if term or trunc:
            obs, _ = env.reset()
    wall = time.perf_counter() - t0
    return {"batch": batch, "render_share": render_time[0] / wall, "update_share": update_time / wall,
            "contrastive_share": agent.timings["contrastive"] / wall,
            "contrastive_share_of_update": agent.timings["contrastive"] / sum(agent.timings.values())}


def buffer_memory() -> dict:
    ours = FrameReplayBuffer(100_000, (3, 100, 100), 6, 3).nbytes
    reference = 100_000 * (2 * 9 * 100 * 100 + 4 * 6 + 4 + 4)  # obs, next_obs, action, reward, not_done
    return {"ctk_bytes": ours, "reference_bytes": reference, "ratio": reference / ours}


def child(args: argparse.Namespace, allocator: str) -> dict:
    """Run the update benchmark in a fresh process under ``allocator``."""
    env = dict(os.environ)
    cmd = [sys.executable, __file__, "--child-updates", "--repeats", str(args.repeats),
           "--threads", str(args.threads), "--batch", *map(str, args.batch)]
    if allocator == "jemalloc":
        env["LD_PRELOAD"] = JEMALLOC
    if allocator == "glibc-tuned":
        cmd.append("--tune-malloc")
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", choices=["env", "updates", "loop", "memory"], default=None)
    p.add_argument("--batch", type=int, nargs="+", default=[512, 128])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--allocators", nargs="+", default=["glibc", "glibc-tuned", "jemalloc"])
    p.add_argument("--child-updates", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--tune-malloc", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if args.child_updates:
        if args.tune_malloc:
            tune_glibc_malloc()
        print(json.dumps({str(b): bench_updates(b, args.repeats) | {"load": load()} for b in args.batch}))
        return
    print(f"# rl_step: torch {torch.__version__}, {args.threads} threads, {os.cpu_count()} cpus, {load()}")
    if args.only in (None, "memory"):
        m = buffer_memory()
        print(f"replay buffer at 100k: ctk {m['ctk_bytes'] / 1e9:.2f} GB, reference obs+next_obs stacks "
              f"{m['reference_bytes'] / 1e9:.1f} GB, ratio {m['ratio']:.2f}x")
    if args.only in (None, "env"):
        e = bench_env(250)
        print(f"env (cartpole, repeat 8, 100x100 render): {e['env_steps_per_s']:.0f} env steps/s, "
              f"{e['agent_steps_per_s']:.1f} agent steps/s, render {e['render_ms']:.1f} ms/frame "
              f"({100 * e['render_share']:.0f}% of env time)  [{load()}]")
    if args.only in (None, "updates"):
        for alloc in args.allocators:
            if alloc == "jemalloc" and not Path(JEMALLOC).exists():
                print("jemalloc: not installed (apt-get install libjemalloc2)")
                continue
            res = child(args, alloc)
            for b, r in res.items():
                speedup = r["reference_style"] / r["ctk"]
                sections = ", ".join(f"{k} {100 * v:.0f}%" for k, v in r["ctk_sections"].items())
                print(f"updates batch {b} [{alloc}]: ctk {r['ctk']:.3f} s ({1 / r['ctk']:.2f}/s), "
                      f"reference-style {r['reference_style']:.3f} s, speed-up {speedup:.2f}x; "
                      f"ctk sections: {sections}  [{r['load']}]")
    if args.only in (None, "loop"):
        lp = bench_loop(12, args.batch[-1])
        print(f"training loop at batch {lp['batch']}: rendering {100 * lp['render_share']:.1f}%, updates "
              f"{100 * lp['update_share']:.1f}%, contrastive term {100 * lp['contrastive_share']:.1f}% "
              f"({100 * lp['contrastive_share_of_update']:.0f}% of the update)  [{load()}]")


if __name__ == "__main__":
    main()
