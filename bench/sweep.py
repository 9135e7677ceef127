"""Wall time of an 8-point toy sweep run serially (in-process) and with ``--jobs 2`` (a local
Ray instance, one worker process per point), their ratio, and Ray's start-up cost (``ray.init``
and ``ray.shutdown`` of a quiet local instance with nothing to run).

Each configuration runs the real command line in a fresh folder (its own SQLite store and
checkpoints), so the figures include what a user waits for: process start, store, training,
evaluation and the final comparison. On 2 cores the ideal ratio is 2; Ray's start-up and the
per-worker imports are the overhead that keeps it below::

    python bench/sweep.py [--steps 300] [--points 8] [--jobs 2]
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

ROOT = Path(__file__).resolve().parents[1]
RECIPE = str(ROOT / "recipes" / "toy" / "lmcl_three_bars_cl.yaml")
sys.path.insert(0, str(ROOT))
from toolkit.training.precision import machine_line  # noqa: E402


def sweep_seconds(points: int, steps: int, jobs: int) -> float:
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
        env.pop("MLFLOW_TRACKING_URI", None)
        env.pop("CTK_CHECKPOINTS", None)
        cmd = [
            sys.executable,
            str(ROOT / "cli.py"),
            "sweep",
            RECIPE,
            "--grid",
            "seed=" + ",".join(str(s) for s in range(points)),
            "--set",
            f"budget.steps={steps}",
            "--quiet",
            "--jobs",
            str(jobs),
        ]
        start = time.perf_counter()
        subprocess.run(cmd, cwd=folder, env=env, check=True, capture_output=True)
        return time.perf_counter() - start


def ray_startup_seconds() -> tuple[float, float]:
    import ray

    start = time.perf_counter()
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    up = time.perf_counter() - start
    start = time.perf_counter()
    ray.shutdown()
    return up, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=8)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    print(machine_line(), flush=True)  # CPU model, capability, native bf16 or not
    up, down = ray_startup_seconds()
    serial = sweep_seconds(args.points, args.steps, 1)
    parallel = sweep_seconds(args.points, args.steps, args.jobs)
    print(
        json.dumps(
            {
                "points": args.points,
                "steps": args.steps,
                "cores": os.cpu_count(),
                "serial_s": round(serial, 1),
                f"jobs{args.jobs}_s": round(parallel, 1),
                "speed_up": round(serial / parallel, 2),
                "ray_init_s": round(up, 2),
                "ray_shutdown_s": round(down, 2),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
