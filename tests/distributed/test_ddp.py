"""Two gloo processes on CPU against one process on the global batch (to 1e-6)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.distributed import torchrun_two, worker

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    return torchrun_two("tests.distributed.worker", tmp_path_factory.mktemp("ddp"))


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


@pytest.fixture(scope="module")
def family_reference():
    return worker.run_family()


def _close(a, b, what):
    if a is None or b is None:
        assert a is None and b is None, f"{what}: a gradient on one side only"
    else:
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-9, msg=what)


@pytest.mark.parametrize("label", [label for label, _, _ in worker.FAMILY])
def test_family_objective_matches_one_process_on_the_global_batch(two_ranks, family_reference, label):
    """The whole objective of a family method (loss, predictor, target network, prototypes and
    their queue, centre, support set) over three steps: at every step the loss, the encoder's
    gradients after DDP's averaging and the objective's own gradients (predictor, prototypes:
    outside DDP, computed by every rank from the gathered batch) equal one process's on the global
    batch (to 1e-6); after the steps and ``after_step`` the encoder and every objective state
    (target network, predictor's BN statistics, DINO's centre, SwAV's normalised prototypes and
    queue, NNCLR's support set) is bitwise the same on both ranks and equals one process's."""
    ref_steps, ref_state = family_reference[label]
    for rank in range(2):
        steps, state = two_ranks[rank]["family"][label]
        for s, ((loss, grads), (ref_loss, ref_grads)) in enumerate(zip(steps, ref_steps, strict=True)):
            assert abs(loss - ref_loss) <= 1e-6 * max(1.0, abs(ref_loss)), (rank, s, loss, ref_loss)
            assert grads.keys() == ref_grads.keys()
            for name, g in ref_grads.items():
                _close(grads[name], g, f"rank {rank} step {s} grad {name}")
        assert state.keys() == ref_state.keys()
        for name, t in ref_state.items():
            _close(state[name], t, f"rank {rank} state {name}")
    s0, s1 = two_ranks[0]["family"][label][1], two_ranks[1]["family"][label][1]
    assert all(torch.equal(s0[k], s1[k]) for k in s0), [k for k in s0 if not torch.equal(s0[k], s1[k])]


def _differs(got, ref):
    (steps, state), (ref_steps, ref_state) = got, ref
    far = lambda a, b: a is not None and b is not None and not torch.allclose(a, b, rtol=1e-4, atol=1e-7)  # noqa: E731
    return (
        any(abs(loss - ref_loss) > 1e-4 * max(1.0, abs(ref_loss)) for (loss, _), (ref_loss, _) in zip(steps, ref_steps))
        or any(far(grads[k], ref_grads[k]) for (_, grads), (_, ref_grads) in zip(steps, ref_steps) for k in ref_grads)
        or any(far(state[k], ref_state[k]) for k in ref_state if state[k].shape == ref_state[k].shape)
    )


@pytest.mark.parametrize("label", [label for label, _, _ in worker.FAMILY])
def test_family_without_the_gather_is_not_the_global_batch(two_ranks, family_reference, label):
    """The comparison above can fail: each rank computing the objective on its own slice (no
    gather; DDP still averages the encoder's gradients) gives other losses, gradients or state
    for every method of the family, the batch statistics, codes, centre, predictor BN, support
    set and the objective's own gradients being per-rank."""
    for rank in range(2):
        assert _differs(two_ranks[rank]["family_per_rank"][label], family_reference[label]), rank
