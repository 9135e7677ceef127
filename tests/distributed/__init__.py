"""Two-process tests: ``torchrun_two`` runs a worker module under ``torch.distributed.run`` with
two gloo ranks on this machine and reads what each rank saved."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def torchrun_two(module: str, out: Path) -> list:
    """``python -m torch.distributed.run --standalone --nproc_per_node=2 -m MODULE OUT`` (one
    thread a rank), then every rank's ``OUT/rank{r}.pt``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", module, str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [torch.load(out / f"rank{r}.pt") for r in range(2)]
