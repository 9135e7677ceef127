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
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "tests.distributed.worker",
        str(out),
    ]
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


def test_shuffle_bn_matches_one_process_with_the_same_permutation(two_ranks):
    """MoCo Sec. 3.3 written out on one process: permute the global batch, run BN on each rank's
    half of the shuffled batch, un-shuffle; every rank gets its own rows of the result."""
    x = worker.inputs()[1]
    perm = torch.randperm(worker.N, generator=torch.Generator().manual_seed(worker.SHUFFLE_SEED))
    half = worker.N // 2
    outs, means = [], []
    for r in range(2):
        torch.manual_seed(0)
        enc = worker.BNKeyEncoder().double()
        with torch.no_grad():
            outs.append(enc(x[perm][r * half : (r + 1) * half]))
        means.append(enc.bn.running_mean)
    ref = torch.empty(worker.N, worker.D_OUT, dtype=torch.float64)
    ref[perm] = torch.cat(outs)
    for r in range(2):
        keys, running_mean = two_ranks[r]["shuffle_bn"]
        torch.testing.assert_close(keys, ref[r * half : (r + 1) * half], rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(running_mean, means[r], rtol=1e-10, atol=1e-12)
    # the shuffle matters: BN over the rank's own, unshuffled half gives other keys
    torch.manual_seed(0)
    with torch.no_grad():
        plain = worker.BNKeyEncoder().double()(x[:half])
    assert not torch.allclose(two_ranks[0]["shuffle_bn"][0], plain, atol=1e-3)


def test_each_rank_draws_its_own_views(two_ranks):
    """Both ranks see the same global batch but augment it with their own generator; rank 0
    draws what one process draws."""
    v0, v1 = two_ranks[0]["views"], two_ranks[1]["views"]
    assert v0.shape == v1.shape
    torch.testing.assert_close(v0, worker.run_views(None), rtol=0, atol=0)
    assert (v0 - v1).abs().mean() > 0.01
