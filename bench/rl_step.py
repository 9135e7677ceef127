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

The measurements are ``bench/rl_measure.py``'s; this script parses the options and prints them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402
from rl_measure import (  # noqa: E402
    JEMALLOC,
    bench_encoders,
    bench_env,
    bench_loop,
    bench_precision,
    bench_updates,
    buffer_memory,
    load,
    tune_glibc_malloc,
)

from toolkit.training.precision import machine_line  # noqa: E402


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
