"""Two gloo processes on CPU against one process on the global batch (to 1e-6)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.distributed import worker

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", "tests.distributed.worker", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [torch.load(out / f"rank{r}.pt") for r in range(2)]


@pytest.mark.parametrize("label", [label for label, _, _ in worker.LOSSES])
def test_loss_and_gradients_match_one_process(two_ranks, label):
    ref_loss, ref_grads = worker.run_losses()[label]
    for rank in range(2):
        loss, grads = two_ranks[rank]["losses"][label]
        assert abs(loss - ref_loss) <= 1e-6 * max(1.0, abs(ref_loss)), (rank, loss, ref_loss)
        for name, g in ref_grads.items():
            torch.testing.assert_close(grads[name], g, rtol=1e-6, atol=1e-9, msg=f"rank {rank} {name}")


def test_moco_queue_identical_on_both_ranks_and_no_key_twice(two_ranks):
    (q0, p0), (q1, p1) = two_ranks[0]["queue"], two_ranks[1]["queue"]
    assert p0 == p1 == (3 * worker.N) % 32
    assert torch.equal(q0, q1)
    ref_queue, ref_ptr = worker.run_queue()
    assert ref_ptr == p0
    torch.testing.assert_close(q0, ref_queue, rtol=1e-6, atol=1e-9)
    filled = q0[: 3 * worker.N]
    assert torch.unique(filled, dim=0).shape[0] == filled.shape[0]
