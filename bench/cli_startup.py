"""How fast the command line answers: wall time of ``python cli.py ...`` as a subprocess, for
the commands that need no tensors, median (and min, max) of ``--repeat`` runs each.

Every run starts in a fresh empty folder (``ctk runs`` there finds no store), with
``MLFLOW_TRACKING_URI`` and ``CTK_DATA`` unset. ``python -c pass`` and ``python -c "import
torch"`` are timed too, for scale: the first is the floor, the second what a command that
imports torch pays on top. The machine line comes last, from its own subprocess (it imports
torch). Timings on a machine shared with other work vary; say so when quoting them.

Run: ``python bench/cli_startup.py [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI = str(ROOT / "cli.py")
COMMANDS = {
    "python -c pass": ["-c", "pass"],
    "python -c 'import torch'": ["-c", "import torch"],
    "ctk --help": [CLI, "--help"],
    "ctk list losses": [CLI, "list", "losses"],
    "ctk list selector-schedules": [CLI, "list", "selector-schedules"],
    "ctk list recipes": [CLI, "list", "recipes"],
    "ctk runs": [CLI, "runs"],
    "ctk data list": [CLI, "data", "list"],
    "ctk compare --help": [CLI, "compare", "--help"],
}


def _once(args: list[str], env: dict[str, str]) -> float | None:
    """Seconds one run takes, or None when the command fails (its stderr is printed)."""
    with tempfile.TemporaryDirectory() as empty:
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, *args], cwd=empty, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
    if proc.returncode != 0:
        print(f"  failed ({proc.returncode}): {proc.stderr.strip()[-300:]}", file=sys.stderr)
        return None
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per command (median reported)")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "CTK_DATA")}
    env["PYTHONPATH"] = str(ROOT)
    print(f"{'command':<28} {'median':>8} {'min':>8} {'max':>8}   (seconds, {args.repeat} runs each)")
    for label, command in COMMANDS.items():
        times = [t for t in (_once(command, env) for _ in range(args.repeat)) if t is not None]
        if not times:
            print(f"{label:<28} {'failed':>8}")
            continue
        print(f"{label:<28} {statistics.median(times):>8.2f} {min(times):>8.2f} {max(times):>8.2f}")
    probe = "from toolkit.training.precision import machine_line; print(machine_line())"
    machine = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True)
    print(machine.stdout.strip() or machine.stderr.strip()[-300:])
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
