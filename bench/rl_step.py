"""Benchmark of the RL domain's step: rendering, updates, and where the time goes.

    python bench/rl_step.py                      # everything, ~5-10 minutes on 2 idle cores
    python bench/rl_step.py --only updates --batch 128 --repeats 3
    python bench/rl_step.py --only precision loop --batch 64 --image-size 64 --crop 56  # the CPU recipe
    python bench/rl_step.py --only recipe --batch 64 --image-size 64 --crop 56 --repeats 5 --loop-steps 40

Prints:
* environment steps per second with rendering (cartpole-swingup, action repeat 8, 100x100
  renders unless ``--image-size``, random actions) and the share of that time spent rendering;
* SAC+CURL updates per second (sampling from the replay buffer included) at batch 512 and
  128, for ctk's update and for the reference code's way of computing the same update
  (separate encoder passes, NCHW convolutions), interleaved so that machine load hits both;
  each under glibc malloc, glibc tuned through ``mallopt`` and jemalloc (``LD_PRELOAD``);
* fp32 against ``precision: bf16`` (convolutions and hidden MLP layers in bf16) and bf16
  convolutions alone, interleaved: seconds per update and per action, and the ratios; beside
  them, the whole update under ``torch.autocast`` (Q values, logits and policy outputs in bf16
  too, which the agent does not do: for the speed comparison only) and, with ``--small``,
  bf16 on smaller renders and crops;
* the share of a training loop's time in acting, updates (the contrastive term among them),
  rendering and physics;
* ``recipe``: the CPU recipe's agent step (act, update, environment step with its render) as
  it was before the time-to-accuracy work (fp32, the default shadow map) and after (bf16,
  ``shadow_size: 512``), in alternating rounds, and the ratio of agent steps per second;
* ``encoders``: seconds per update for encoder variants (conv layers x filters, optionally
  on other renders and crops), interleaved, and their speed against the first one: how the
  CPU recipe's encoder was chosen (``--only encoders --batch 64 --image-size 64 --crop 56``);
* the replay buffer's memory at 100k capacity against the reference's obs + next_obs stacks.

Timings need the machine to themselves (another busy process makes updates 2.5-3.5x slower
and distorts the ratios): the script prints the load average beside each figure. On a shared
machine time ``--threads 1`` and read the CPU-time ratios (``cpu``): with 2 threads each of
the update's many parallel regions waits for a thread the other processes hold up, an
overhead that does not shrink with the arithmetic and pulls every ratio towards 1 (bf16 read
1.14-1.5x at 2 threads under load, 1.87x in CPU time at 1 thread).
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
from toolkit.training.precision import machine_line  # noqa: E402

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


def child(args: argparse.Namespace, allocator: str) -> dict:
    """Run the update benchmark in a fresh process under ``allocator``."""
    env = dict(os.environ)
    cmd = [
        sys.executable,
        __file__,
        "--child-updates",
        "--repeats",
        str(args.repeats),
        "--threads",
        str(args.threads),
        "--image-size",
        str(args.image_size),
        "--crop",
        str(args.crop),
        "--batch",
        *map(str, args.batch),
    ]
    if allocator == "jemalloc":
        env["LD_PRELOAD"] = JEMALLOC
    if allocator == "glibc-tuned":
        cmd.append("--tune-malloc")
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--only",
        nargs="+",
        choices=["env", "updates", "precision", "loop", "memory", "recipe", "encoders"],
        default=None,
    )
    p.add_argument("--batch", type=int, nargs="+", default=[512, 128])
    p.add_argument("--image-size", type=int, default=100, help="rendered size (CPU recipe: 64)")
    p.add_argument("--crop", type=int, default=84, help="crop size the encoder sees (CPU recipe: 56)")
    p.add_argument("--action-repeat", type=int, default=8)
    p.add_argument(
        "--small",
        type=int,
        nargs=2,
        metavar=("IMAGE_SIZE", "CROP"),
        default=None,
        help="precision: also time bf16 on these smaller renders (e.g. 48 42)",
    )
    p.add_argument(
        "--shadow-size",
        type=int,
        default=None,
        help="env: also time renders with this shadow map size (data.shadow_size)",
    )
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--encoders",
        nargs="+",
        default=["4x32", "4x16", "3x16", "2x32", "4x16@48/42"],
        metavar="LxF[@SIZE/CROP]",
        help="encoders: conv layers x filters, optionally on other renders",
    )
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="encoders: the networks' dtype")
    p.add_argument("--loop-steps", type=int, default=12)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--allocators", nargs="+", default=["glibc", "glibc-tuned", "jemalloc"])
    p.add_argument("--child-updates", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--tune-malloc", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if args.child_updates:
        if args.tune_malloc:
            tune_glibc_malloc()
        print(
            json.dumps(
                {
                    str(b): bench_updates(b, args.repeats, args.image_size, args.crop) | {"load": load()}
                    for b in args.batch
                }
            )
        )
        return
    print(machine_line(), flush=True)  # CPU model, capability, native bf16 or not
    only = set(args.only or ["env", "updates", "precision", "loop", "memory", "recipe"])
    size, crop = args.image_size, args.crop
    print(
        f"# rl_step: torch {torch.__version__}, {args.threads} threads, {os.cpu_count()} cpus, "
        f"{size}x{size} renders cropped to {crop}, action repeat {args.action_repeat}, {load()}"
    )
    if "memory" in only:
        m = buffer_memory()
        print(
            f"replay buffer at 100k: ctk {m['ctk_bytes'] / 1e9:.2f} GB, reference obs+next_obs stacks "
            f"{m['reference_bytes'] / 1e9:.1f} GB, ratio {m['ratio']:.2f}x"
        )
    if "env" in only:
        sizes = (None,) if args.shadow_size is None else (None, args.shadow_size)
        for shadow, e in bench_env(250, size, args.action_repeat, sizes).items():
            print(
                f"env (cartpole, repeat {args.action_repeat}, {size}x{size} render, shadow map "
                f"{shadow or 'default'}): {e['env_steps_per_s']:.0f} env steps/s, {e['agent_steps_per_s']:.1f} "
                f"agent steps/s, render {e['render_ms']:.1f} ms/frame ({100 * e['render_share']:.0f}% of env "
                f"time)  [{load()}]"
            )
    if "updates" in only:
        for alloc in args.allocators:
            if alloc == "jemalloc" and not Path(JEMALLOC).exists():
                print("jemalloc: not installed (apt-get install libjemalloc2)")
                continue
            res = child(args, alloc)
            for b, r in res.items():
                speedup = r["reference_style"] / r["ctk"]
                sections = ", ".join(f"{k} {100 * v:.0f}%" for k, v in r["ctk_sections"].items())
                print(
                    f"updates batch {b} [{alloc}]: ctk {r['ctk']:.3f} s ({1 / r['ctk']:.2f}/s), "
                    f"reference-style {r['reference_style']:.3f} s, speed-up {speedup:.2f}x; "
                    f"ctk sections: {sections}  [{r['load']}]"
                )
    if "precision" in only:
        for b in args.batch:
            r = bench_precision(b, args.repeats, size, crop, args.small)
            names = [k for k in ("bf16_convs", "bf16", "autocast_all", "bf16_small") if k in r]
            ratios = ", ".join(
                f"{k} {r[k]:.3f} s ({r['fp32'] / r[k]:.2f}x; cpu {r['cpu_fp32'] / r['cpu_' + k]:.2f}x)" for k in names
            )
            print(
                f"precision batch {b}: update fp32 {r['fp32']:.3f} s (cpu {r['cpu_fp32']:.3f} s), {ratios}; act fp32 "
                f"{1000 * r['act_fp32']:.1f} ms, bf16 {1000 * r['act_bf16']:.1f} ms "
                f"({r['act_fp32'] / r['act_bf16']:.2f}x)  [{load()}]"
            )
    if "loop" in only:
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            lp = bench_loop(args.loop_steps, args.batch[-1], size, crop, args.action_repeat, dtype, args.shadow_size)
            print(
                f"training loop at batch {lp['batch']}, {name}, shadow map {args.shadow_size or 'default'}: {lp['ms_per_agent_step']:.0f} ms/agent step; "
                f"acting {100 * lp['act_share']:.1f}%, updates {100 * lp['update_share']:.1f}% (contrastive "
                f"term {100 * lp['contrastive_share']:.1f}%), rendering {100 * lp['render_share']:.1f}%, "
                f"physics and stacking {100 * lp['physics_share']:.1f}%  [{load()}]"
            )
    if "encoders" in only:

        def parse(spec: str) -> tuple[int, int, int, int]:
            shape, _, sizes = spec.partition("@")
            layers, filters = map(int, shape.split("x"))
            image, crop_ = map(int, sizes.split("/")) if sizes else (size, crop)
            return layers, filters, image, crop_

        variants = [parse(v) for v in args.encoders]
        dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
        res = bench_encoders(args.batch[-1], args.repeats, dtype, variants)
        ref = res[variants[0]]
        for v, t in res.items():
            print(
                f"encoder {v[0]} layers x {v[1]} filters on {v[2]}->{v[3]} crops, {args.precision}, batch "
                f"{args.batch[-1]}: {1000 * t:.0f} ms/update, {ref / t:.2f}x the speed of "
                f"{variants[0][0]}x{variants[0][1]} on {variants[0][2]}->{variants[0][3]}  [{load()}]"
            )
    if "recipe" in only:
        # the CPU recipe's agent step before the time-to-accuracy work (fp32, DMControl's 2048
        # shadow map) and after (bf16 networks, 512 shadow map), in alternating rounds
        settings = {
            "before (fp32, shadow 2048)": (torch.float32, None),
            "after (bf16, shadow 512)": (torch.bfloat16, 512),
        }
        ms: dict[str, list[float]] = {k: [] for k in settings}
        for _ in range(args.repeats):
            for name, (dtype, shadow) in settings.items():
                lp = bench_loop(args.loop_steps, args.batch[-1], size, crop, args.action_repeat, dtype, shadow)
                ms[name].append(lp["ms_per_agent_step"])
        med = {k: statistics.median(v) for k, v in ms.items()}
        (b_name, b), (a_name, a) = med.items()
        print(
            f"recipe agent step at batch {args.batch[-1]}: {b_name} {b:.0f} ms, {a_name} {a:.0f} ms; "
            f"agent steps/s after over before {b / a:.2f}x (medians of {args.repeats} rounds of "
            f"{args.loop_steps} steps)  [{load()}]"
        )


if __name__ == "__main__":
    main()
