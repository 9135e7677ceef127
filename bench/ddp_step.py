"""One process vs several on the same global batch: seconds per pretraining step and peak memory
of the quickstart model under ``torch.distributed`` (gloo on CPU, NCCL on GPUs).

For each process count the script re-launches itself under torchrun; every rank runs the
toolkit's own loop (``toolkit.training.pretrainer.Pretrainer`` with a ``Context``: DDP-wrapped encoder,
the global batch split over the ranks, views gathered with gradients, the loss on the global
batch) and times the steps between two of its per-step hooks. Reported: the median over ranks
of the seconds per step, images per second of the global batch, and each rank's peak resident
set (VmHWM). On a 2-core CPU machine two processes share the cores that one process used with
two threads, so the figure to read there is the cost of the gather and the duplicated loss,
not a speed-up::

    python bench/ddp_step.py [--nproc 1 2] [--steps 20] [--threads-per-proc 1] [--set key=value]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from vision_step import _NullTracker, _Stop, load_recipe  # noqa: E402

from toolkit.training.precision import machine_line  # noqa: E402


def _peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker(args: argparse.Namespace) -> None:
    from domains.vision import VisionDomain
    from toolkit.training.distributed import Context
    from toolkit.training.pretrainer import Pretrainer
    from toolkit.training.trainer import RunOptions

    torch.set_num_threads(args.threads_per_proc)
    ctx = Context.from_env("cpu" if not torch.cuda.is_available() else "auto")
    recipe = load_recipe(
        [
            "tracking.log_model=false",
            "budget.monitor_every=null",
            "budget.eval_every=null",
            "budget.checkpoint_every=null",
            f"budget.steps={args.warmup + args.steps + 5}",
            *args.set,
        ]
    )
    stamps: dict[int, float] = {}

    def hook(step: int) -> None:
        if step in (args.warmup, args.warmup + args.steps):
            stamps[step] = time.perf_counter()
        if step >= args.warmup + args.steps:
            raise _Stop

    try:
        options = RunOptions(distributed=ctx, progress=False, hooks=[hook])
        Pretrainer(recipe, VisionDomain(recipe), _NullTracker(), options).fit()
    except _Stop:
        pass
    per_step = (stamps[args.warmup + args.steps] - stamps[args.warmup]) / args.steps
    result = {"rank": ctx.rank, "step_s": per_step, "peak_mib": _peak_rss_mib(), "batch": recipe.budget.batch_size}
    Path(args.out, f"rank{ctx.rank}.json").write_text(json.dumps(result))
    ctx.barrier()
    ctx.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nproc", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads-per-proc", type=int, default=1)
    parser.add_argument("--set", action="append", default=[], help="recipe override key=value")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # output folder, set when re-launched
    args = parser.parse_args(argv)
    print(machine_line(), flush=True)  # CPU model, capability, native bf16 or not
    if args.worker:
        args.out = args.worker
        worker(args)
        return 0
    print(f"quickstart model, {args.steps} timed steps, {args.threads_per_proc} thread(s) per process")
    base = None
    for n in args.nproc:
        with tempfile.TemporaryDirectory() as out:
            cmd = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc_per_node={n}",
                __file__,
                "--worker",
                out,
                "--steps",
                str(args.steps),
                "--warmup",
                str(args.warmup),
                "--threads-per-proc",
                str(args.threads_per_proc),
                *sum((["--set", s] for s in args.set), []),
            ]
            env = {**os.environ, "OMP_NUM_THREADS": str(args.threads_per_proc)}
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if proc.returncode:
                print(proc.stdout[-2000:], proc.stderr[-4000:], file=sys.stderr)
                return proc.returncode
            ranks = sorted((json.loads(p.read_text()) for p in Path(out).glob("rank*.json")), key=lambda r: r["rank"])
        step = sorted(r["step_s"] for r in ranks)[len(ranks) // 2]
        base = base or step
        peaks = ", ".join(f"{r['peak_mib']:.0f}" for r in ranks)
        print(
            f"{n} process(es): {1000 * step:7.1f} ms/step, {ranks[0]['batch'] / step:7.1f} img/s "
            f"(global batch {ranks[0]['batch']}), x{step / base:.2f} the first row's step; "
            f"peak RSS per rank {peaks} MiB"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
