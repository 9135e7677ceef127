"""The measurements behind ``bench/rl_step.py`` (which parses the options and prints them): the
replay buffer filled with rendered frames, the agent, and the timed parts of an RL step
(updates, precision, encoder variants, environment steps with rendering, the whole loop, the
buffer's memory). Each returns its figures; none prints."""

from __future__ import annotations

import ctypes
import os
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from domains.rl.agent import CurlSacAgent  # noqa: E402
from domains.rl.config import AgentConfig, EncoderConfig  # noqa: E402
from domains.rl.networks import MLP  # noqa: E402
from domains.rl.replay import FrameReplayBuffer  # noqa: E402

JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def tune_glibc_malloc() -> None:
    """Keep freed memory in the heap: no mmap for large blocks, no trimming (so the
    100 MB activations of a batch-512 update are not page-faulted in again every time)."""
    libc = ctypes.CDLL("libc.so.6")
    m_trim_threshold, m_mmap_max = -1, -4
    libc.mallopt(m_mmap_max, 0)
    libc.mallopt(m_trim_threshold, 2**30)


def filled_buffer(image_size: int = 100, action_dim: int = 1, frames: int = 3000) -> FrameReplayBuffer:
    rng = np.random.default_rng(0)
    buf = FrameReplayBuffer(frames, (3, image_size, image_size), action_dim, 3)
    pool = rng.integers(0, 256, size=(64, 3, image_size, image_size), dtype=np.uint8)
    buf.start_episode(pool[0])
    for t in range(frames - 2):
        if t % 125 == 124:
            buf.start_episode(pool[t % 64])
        else:
            buf.add(rng.uniform(-1, 1, action_dim).astype(np.float32), float(rng.random()), False, pool[t % 64])
    return buf


def make_agent(
    objective: bool,
    fused: bool,
    channels_last: bool,
    crop: int = 84,
    conv_dtype: torch.dtype = torch.float32,
    layers: int = 4,
    filters: int = 32,
) -> CurlSacAgent:
    from toolkit.objective import build
    from toolkit.recipe import ObjectiveSection as Objective

    obj = build(Objective.model_validate({"loss": {"name": "info_nce"}})) if objective else None
    torch.manual_seed(0)
    return CurlSacAgent(
        (9, crop, crop),
        1,
        encoder=EncoderConfig(num_layers=layers, num_filters=filters),
        agent=AgentConfig(),
        objective=obj,
        fused=fused,
        channels_last=channels_last,
        compute_dtype=conv_dtype,
    )


def bench_updates(batch: int, repeats: int, image_size: int = 100, crop: int = 84) -> dict:
    """Seconds per update (sampling included), ctk vs reference-style, interleaved."""
    buf, rng = filled_buffer(image_size), np.random.default_rng(1)
    agents = {"ctk": make_agent(True, True, True, crop), "reference_style": make_agent(True, False, False, crop)}
    times: dict[str, list[float]] = {k: [] for k in agents}
    for agent in agents.values():  # warm-up: two updates (actor step and no actor step)
        for _ in range(2):
            agent.update(buf.sample(rng, batch, crop))
    agents["ctk"].timings.clear()
    for _ in range(repeats):
        for name, agent in agents.items():
            for _ in range(2):  # one update with and one without the actor step
                t = time.perf_counter()
                agent.update(buf.sample(rng, batch, crop))
                times[name].append(time.perf_counter() - t)
    total = sum(agents["ctk"].timings.values())
    shares = {k: v / total for k, v in agents["ctk"].timings.items()}
    return {name: statistics.median(v) for name, v in times.items()} | {"ctk_sections": shares}


def bench_precision(batch: int, repeats: int, image_size: int, crop: int, small: tuple[int, int] | None = None) -> dict:
    """Seconds per update and per action, interleaved: fp32; bf16 convolutions only; the
    agent's bf16 (convolutions and the MLPs' hidden layers); the whole update under CPU
    autocast (unfused convolutions; Q values, logits and policy outputs in bf16 too); with
    ``small = (image_size, crop)`` also the agent's bf16 on those smaller images."""
    buf, rng = filled_buffer(image_size), np.random.default_rng(1)
    agents = {
        "fp32": make_agent(True, True, True, crop),
        "bf16_convs": make_agent(True, True, True, crop, torch.bfloat16),
        "bf16": make_agent(True, True, True, crop, torch.bfloat16),
        "autocast_all": make_agent(True, True, True, crop),
    }
    buffers, crops = dict.fromkeys(agents, buf), dict.fromkeys(agents, crop)
    if small is not None:
        agents["bf16_small"] = make_agent(True, True, True, small[1], torch.bfloat16)
        buffers["bf16_small"], crops["bf16_small"] = filled_buffer(small[0]), small[1]
    for m in agents["bf16_convs"].modules():
        if isinstance(m, MLP):
            m.compute_dtype = torch.float32
    for enc in (agents["autocast_all"].critic.encoder, agents["autocast_all"].critic_target.encoder):
        enc.fuse_relu = False  # the raw oneDNN call is not an autocast op: let autocast see conv2d
    contexts = {name: nullcontext for name in agents}
    contexts["autocast_all"] = lambda: torch.autocast("cpu", dtype=torch.bfloat16)
    times: dict[str, list[float]] = {k: [] for k in agents}
    cpu: dict[str, list[float]] = {k: [] for k in agents}
    acts: dict[str, list[float]] = {k: [] for k in agents}
    for name, agent in agents.items():
        with contexts[name]():
            for _ in range(2):
                agent.update(buffers[name].sample(rng, batch, crops[name]))
    for _ in range(repeats):
        for name, agent in agents.items():
            with contexts[name]():
                for _ in range(2):  # one update with and one without the actor step
                    b = buffers[name].sample(rng, batch, crops[name])
                    t, c = time.perf_counter(), time.process_time()
                    agent.update(b)
                    times[name].append(time.perf_counter() - t)
                    cpu[name].append(time.process_time() - c)
            obs = buffers[name].stacks(np.array([10]))[0]
            t = time.perf_counter()
            for _ in range(10):
                agent.act(obs, sample=True)
            acts[name].append((time.perf_counter() - t) / 10)
    out = {name: statistics.median(v) for name, v in times.items()}
    out.update({f"cpu_{name}": statistics.median(v) for name, v in cpu.items()})
    out.update({f"act_{name}": statistics.median(v) for name, v in acts.items()})
    return out


def bench_encoders(
    batch: int, repeats: int, conv_dtype: torch.dtype, variants: list[tuple[int, int, int, int]]
) -> dict:
    """Seconds per update (sampling included) for encoder variants ``(layers, filters,
    image_size, crop)``, interleaved in rounds of 4 updates; the first variant is the reference."""
    bufs = {size: filled_buffer(size) for size in {v[2] for v in variants}}
    agents = {v: make_agent(True, True, True, v[3], conv_dtype, v[0], v[1]) for v in variants}
    rng = np.random.default_rng(3)
    times: dict[tuple, list[float]] = {v: [] for v in variants}
    for v, agent in agents.items():  # warm-up: an update with and one without the actor step
        for _ in range(2):
            agent.update(bufs[v[2]].sample(rng, batch, v[3]))
    for _ in range(repeats):
        for v, agent in agents.items():
            t = time.perf_counter()
            for _ in range(4):
                agent.update(bufs[v[2]].sample(rng, batch, v[3]))
            times[v].append((time.perf_counter() - t) / 4)
    return {v: statistics.median(t) for v, t in times.items()}


def timed_env(image_size: int = 100, action_repeat: int = 8, shadow_size: int | None = None):
    """cartpole-swingup as CURL runs it, with the time spent rendering accumulated."""
    from domains.rl.envs import make_env

    env = make_env(
        "cartpole-swingup", action_repeat=action_repeat, image_size=image_size, seed=0, shadow_size=shadow_size
    )
    inner, render_time = env.unwrapped, [0.0]
    original = inner.render

    def timed_render():
        t = time.perf_counter()
        out = original()
        render_time[0] += time.perf_counter() - t
        return out

    inner.render = timed_render
    return env, render_time


def bench_env(
    agent_steps: int, image_size: int = 100, action_repeat: int = 8, shadow_sizes: tuple[int | None, ...] = (None,)
) -> dict:
    """Environment steps per second with rendering, and the rendering share, for each shadow
    map size (None: the task's), interleaved in blocks of 25 agent steps."""
    envs = {size: timed_env(image_size, action_repeat, size) for size in shadow_sizes}
    rng = np.random.default_rng(0)
    stats = {size: {"env_steps": 0, "wall": 0.0} for size in shadow_sizes}
    for env, render_time in envs.values():
        env.reset()
        render_time[0] = 0.0
    for _ in range(max(1, agent_steps // 25)):
        for size, (env, _) in envs.items():
            t = time.perf_counter()
            for _ in range(25):
                _, _, term, trunc, info = env.step(rng.uniform(-1, 1, 1).astype(np.float32))
                stats[size]["env_steps"] += info["env_steps"]
                if term or trunc:
                    env.reset()
            stats[size]["wall"] += time.perf_counter() - t
    out = {}
    for size, (_, render_time) in envs.items():
        wall, steps = stats[size]["wall"], max(1, agent_steps // 25) * 25
        out[size] = {
            "env_steps_per_s": stats[size]["env_steps"] / wall,
            "agent_steps_per_s": steps / wall,
            "render_ms": 1000 * render_time[0] / steps,
            "render_share": render_time[0] / wall,
        }
    return out


def bench_loop(
    agent_steps: int,
    batch: int,
    image_size: int = 100,
    crop: int = 84,
    action_repeat: int = 8,
    conv_dtype: torch.dtype = torch.float32,
    shadow_size: int | None = None,
) -> dict:
    """Shares of a training agent step: acting, the update (and its contrastive term), rendering
    and the rest of the environment step (physics, frame stacking)."""
    env, render_time = timed_env(image_size, action_repeat, shadow_size)
    agent, buf = make_agent(True, True, True, crop, conv_dtype), filled_buffer(image_size)
    rng = np.random.default_rng(2)
    obs, _ = env.reset()
    agent.update(buf.sample(rng, batch, crop))
    agent.timings.clear()
    render_time[0] = 0.0
    spent = {"act": 0.0, "update": 0.0, "env": 0.0}
    t0 = time.perf_counter()
    for _ in range(agent_steps):
        t = time.perf_counter()
        action = agent.act(obs, sample=True)
        t1 = time.perf_counter()
        agent.update(buf.sample(rng, batch, crop))
        t2 = time.perf_counter()
        obs, _, term, trunc, _ = env.step(action)
        if term or trunc:
            obs, _ = env.reset()
        t3 = time.perf_counter()
        spent["act"] += t1 - t
        spent["update"] += t2 - t1
        spent["env"] += t3 - t2
    wall = time.perf_counter() - t0
    return {
        "batch": batch,
        "ms_per_agent_step": 1000 * wall / agent_steps,
        "act_share": spent["act"] / wall,
        "update_share": spent["update"] / wall,
        "render_share": render_time[0] / wall,
        "physics_share": (spent["env"] - render_time[0]) / wall,
        "contrastive_share": agent.timings["contrastive"] / wall,
        "contrastive_share_of_update": agent.timings["contrastive"] / sum(agent.timings.values()),
    }


def buffer_memory() -> dict:
    ours = FrameReplayBuffer(100_000, (3, 100, 100), 6, 3).nbytes
    reference = 100_000 * (2 * 9 * 100 * 100 + 4 * 6 + 4 + 4)  # obs, next_obs, action, reward, not_done
    return {"ctk_bytes": ours, "reference_bytes": reference, "ratio": reference / ours}
