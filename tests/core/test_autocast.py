"""Every registered loss, the regularizers, the selectors and the negative sources under
``torch.autocast``: half-precision embeddings (and a float32 queue or second view) give a
float32 loss whose gradients are as accurate as a plain ``cross_entropy`` under the same
autocast, and float16 at tau = 0.05 (where exp would overflow float16) does as well."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as nnf
from torch.nn.functional import cross_entropy

from toolkit.losses import functional as F
from toolkit.losses.base import LOSSES, ContrastiveBatch, RunLength
from toolkit.regularizers import REGULARIZERS
from toolkit.samplers.masks import hard_mask, ring_mask
from toolkit.samplers.sources import MemoryBank, MoCoQueue

N, V, D, M = 24, 3, 16, 96
BF16 = torch.bfloat16
# The gradient of a loss may differ from its float32 value by this multiple of the error a
# plain cross_entropy over bfloat16 logits makes (both see the same bfloat16 inputs). Measured:
# 0.35-0.39 for every registered loss (the floor: the gradient is rounded to bfloat16 on its
# way back to the embeddings); 0.6-36 with the similarities computed in bfloat16.
TOLERANCE_RATIO = 1.0


def unit(*shape: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return nnf.normalize(torch.randn(*shape, generator=g), dim=-1)


def inputs(low: torch.dtype, seed: int = 0) -> dict[str, torch.Tensor]:
    """The batch fields, rounded to ``low`` where an autocast encoder would produce them: views,
    keys and the natural view; the queue / bank rows stay float32 (a buffer)."""
    return {
        "views": unit(N, V, D, seed=seed).to(low),
        "keys": unit(N, V, D, seed=seed + 1).to(low),
        "natural": unit(N, D, seed=seed + 2).to(low),
        "negatives": unit(M, D, seed=seed + 3),
        "indices": torch.arange(N),
        "predictions": unit(N, V, D, seed=seed + 4).to(low),  # a predictor's output (BYOL, SimSiam, ...)
        "labels": torch.arange(N) % 5,  # SupCon's classes, several views a class
    }


def run(module, fields: dict, needs, dtype: torch.dtype | None, autocast: torch.dtype | None):
    """Loss and the gradients of the differentiable fields (views, natural), with the fields
    cast to ``dtype`` (None: as given), under autocast to ``autocast`` (None: off)."""
    known = {"views", "keys", "natural", "negatives", "indices", "predictions", "labels"}
    missing = set(needs) - known
    assert not missing, f"extend this test's batch with {missing} (needed by {module})"
    grads = {
        k: fields[k].detach().clone().to(dtype or fields[k].dtype).requires_grad_()
        for k in ("views", "natural", "predictions")
    }
    batch = ContrastiveBatch(
        views=grads["views"],
        natural=grads["natural"],
        predictions=grads["predictions"],
        keys=fields["keys"].to(dtype or fields["keys"].dtype),
        negatives=fields["negatives"],
        indices=fields["indices"],
        labels=fields["labels"],
    )
    torch.manual_seed(1)  # the loss's own state (SwAV's prototypes, DINO's centre): alike in both runs
    if hasattr(module, "attach"):  # losses build their own state; regularizers have none
        module.attach(D, RunLength())
    torch.manual_seed(0)  # losses that draw noise draw the same in both runs
    with torch.autocast("cpu", dtype=autocast or BF16, enabled=autocast is not None):
        loss = module(batch).loss
    used = [g for g in grads.values()]
    out = torch.autograd.grad(loss, used, allow_unused=True)
    flat = torch.cat([(o if o is not None else torch.zeros_like(u)).float().flatten() for o, u in zip(out, used)])
    return loss, flat


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


def ce_reference_error(fields: dict, tau: float = 0.1, half: torch.dtype = BF16) -> float:
    """Relative gradient error of a plain InfoNCE (cross_entropy over z1 z2^T / tau) on the
    same half-precision inputs under autocast to ``half``, against its float32 value."""

    def ce(z1, z2):
        return cross_entropy(z1 @ z2.t() / tau, torch.arange(N))

    v = fields["views"]
    low = v[:, :2].detach().clone().requires_grad_()
    with torch.autocast("cpu", dtype=half):
        g_low = torch.autograd.grad(ce(low[:, 0], low[:, 1]), low)[0]
    ref = v[:, :2].detach().float().requires_grad_()
    g_ref = torch.autograd.grad(ce(ref[:, 0], ref[:, 1]), ref)[0]
    return rel_err(g_low.float(), g_ref)


@pytest.fixture(scope="module")
def ce_error() -> float:
    err = ce_reference_error(inputs(BF16))
    assert 1e-4 < err < 5e-2  # bfloat16 logits: ~2^-8 relative
    return err


@pytest.mark.parametrize("name", LOSSES.names())
def test_registered_loss_under_bf16_autocast_matches_float32(name, ce_error):
    """bfloat16 views and keys, float32 queue, autocast on: float32 loss, gradients within
    TOLERANCE_RATIO x the cross_entropy reference error of the float32 computation on the
    same (rounded) inputs."""
    cls = LOSSES.get(name)
    fields = inputs(BF16)
    loss, g = run(cls(), fields, cls.needs, None, BF16)
    ref_loss, g_ref = run(cls(), fields, cls.needs, torch.float32, None)
    assert loss.dtype == torch.float32
    assert torch.isfinite(loss) and torch.isfinite(g).all()
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
    ratio = rel_err(g, g_ref) / ce_error
    assert ratio <= TOLERANCE_RATIO, f"{name}: gradient error {ratio:.3g} x the CE reference"


def _with_temperature(cls, tau: float):
    params = inspect.signature(cls.__init__).parameters
    return cls(temperature=tau) if "temperature" in params else cls()


@pytest.fixture(scope="module")
def ce_error_f16() -> float:
    err = ce_reference_error(inputs(torch.float16, seed=5), tau=0.05, half=torch.float16)
    assert 1e-5 < err < 1e-2  # float16 logits: ~2^-11 relative, times logits up to 20
    return err


@pytest.mark.parametrize("name", LOSSES.names())
def test_registered_loss_float16_at_tau_005_matches_float32(name, ce_error_f16):
    """float16 embeddings and autocast to float16, tau = 0.05 (logits up to 20: exp overflows
    float16 at 11.1): the float32 loss of the same (rounded) inputs, and gradients within
    TOLERANCE_RATIO x the float16 cross_entropy reference error (measured 0.28-0.31)."""
    cls = LOSSES.get(name)
    fields = inputs(torch.float16, seed=5)
    loss, g = run(_with_temperature(cls, 0.05), fields, cls.needs, None, torch.float16)
    ref_loss, g_ref = run(_with_temperature(cls, 0.05), fields, cls.needs, torch.float32, None)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
    ratio = rel_err(g, g_ref) / ce_error_f16
    assert ratio <= TOLERANCE_RATIO, f"{name}: gradient error {ratio:.3g} x the CE reference"


@pytest.mark.parametrize("name", REGULARIZERS.names())
def test_registered_regularizer_under_bf16_autocast(name, ce_error):
    """Regularizers (distance polarization) as the losses: float32 value, accurate gradient."""
    cls = REGULARIZERS.get(name)
    fields = inputs(BF16, seed=7)
    loss, g = run(cls(), fields, getattr(cls, "needs", ("views",)), None, BF16)
    ref_loss, g_ref = run(cls(), fields, getattr(cls, "needs", ("views",)), torch.float32, None)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
    assert rel_err(g, g_ref) / ce_error <= TOLERANCE_RATIO


# ----------------------------------------------------------------------------- mixed dtypes
def _pair_calls():
    """(name, call(a, b)) for functions of two embeddings where b may come from a float32
    momentum encoder or queue while a is half precision."""
    queue = unit(M, D, seed=11)
    return [
        ("nt_xent", lambda a, b: F.nt_xent(a, b, 0.1)),
        ("dcl", lambda a, b: F.dcl(a, b, 0.1)),
        ("hcl", lambda a, b: F.hcl(a, b, 0.1)),
        ("align_uniform", lambda a, b: F.align_uniform(a, b)),
        ("spectral", lambda a, b: F.spectral(a, b)),
        ("cmc", lambda a, b: F.cmc([a, b], 0.1)),
        ("moco_infonce", lambda a, b: F.moco_infonce(a, b, queue, 0.05)),
        ("ring_nce", lambda a, b: F.ring_nce(a, b, queue, 0.05, lower=50, upper=90)),
        ("cacr", lambda a, b: F.cacr(a, b, queue)),
        ("cacr_moco", lambda a, b: F.cacr_moco([a, b], [b, a], queue)),
    ]


@pytest.mark.parametrize("autocast", [False, True], ids=["plain", "autocast"])
@pytest.mark.parametrize("name,call", _pair_calls(), ids=[n for n, _ in _pair_calls()])
def test_half_view_with_float32_view_or_queue(name, call, autocast):
    """A bfloat16 view with a float32 second view / queue: no dtype error, the value and
    gradient of the float32 computation on the same values."""
    a = unit(N, D, seed=12).to(BF16).requires_grad_()
    b = unit(N, D, seed=13)
    with torch.autocast("cpu", dtype=BF16, enabled=autocast):
        loss = call(a, b)
    ref_a = a.detach().float().requires_grad_()
    ref = call(ref_a, b)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-6)
    (g,) = torch.autograd.grad(loss, a)
    (g_ref,) = torch.autograd.grad(ref, ref_a)
    assert g.dtype == BF16  # back to the input in its own dtype
    torch.testing.assert_close(g.float(), g_ref.to(BF16).float(), rtol=0, atol=0)


@pytest.mark.parametrize("fn", [F.info_nce_scores, F.dcl_scores, F.hcl_scores])
def test_score_forms_take_half_scores(fn):
    """Domain-computed bfloat16 scores (quick-thought, CURL under autocast), tau = 0.05."""
    s = (unit(N, D, seed=14) @ unit(N, D, seed=15).t()).to(BF16).requires_grad_()
    pos = torch.eye(N, dtype=torch.bool)
    with torch.autocast("cpu", dtype=BF16):
        loss = fn(s, pos, None, temperature=0.05)
    ref_s = s.detach().float().requires_grad_()
    ref = fn(ref_s, pos, None, temperature=0.05)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(
        torch.autograd.grad(loss, s)[0].float(), torch.autograd.grad(ref, ref_s)[0].to(BF16).float(), rtol=0, atol=0
    )


def test_float32_inputs_pass_through_uncopied():
    """Outside autocast a float32 argument reaches the loss as the same tensor (no copy)."""
    from toolkit.losses.functional._precision import full_precision

    seen = []
    probe = full_precision(lambda x, y: seen.extend([x, y]))
    x, y = unit(4, 3, seed=0), [unit(4, 3, seed=1)]
    probe(x, y)
    assert seen[0] is x and seen[1] is y


# ----------------------------------------------------------------------------- selectors
@pytest.mark.parametrize("low", [torch.float16, BF16], ids=["f16", "bf16"])
def test_selectors_on_half_similarities(low):
    """Masks from half-precision similarities equal the masks of the same values in float32
    (ties included: hard_mask keeps them, ring_mask keeps exactly hi - lo)."""
    sims = (unit(N, D, seed=16) @ unit(M, D, seed=17).t()).to(low)
    exact = sims.float()
    assert torch.equal(hard_mask(sims, num_hard=10), hard_mask(exact, num_hard=10))
    for lower, upper in ((50, 90), (10, 30)):
        mask = ring_mask(sims, lower, upper)
        assert (mask.sum(dim=1) == int(upper / 100 * M) - int(lower / 100 * M)).all()
        kept = exact.masked_fill(~mask, float("nan"))
        ref = ring_mask(exact, lower, upper)
        # the same multiset of kept values per row (ties may swap equal columns)
        assert torch.equal(kept.nan_to_num(-9).sort(dim=1).values, exact.masked_fill(~ref, -9).sort(dim=1).values)


@pytest.mark.parametrize("name", ["nt_xent", "moco_infonce", "wl_contrastive"])
def test_module_selector_ranks_float32_similarities(name):
    """A hard selector attached to a loss under autocast keeps the negatives the float32
    similarities of the same embeddings keep: the same loss as without autocast."""
    cls = LOSSES.get(name)
    fields = inputs(BF16, seed=18)
    losses = []
    for autocast in (BF16, None):
        module = cls()
        module.attach_selector(lambda sims, step: hard_mask(sims, num_hard=5))
        losses.append(run(module, fields, cls.needs, None if autocast else torch.float32, autocast)[0])
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- sources
@pytest.mark.parametrize("low", [torch.float16, BF16], ids=["f16", "bf16"])
def test_queue_and_bank_store_half_keys_in_float32(low):
    queue = MoCoQueue(8, D)
    keys = unit(5, D, seed=19).to(low)
    with torch.autocast("cpu", dtype=low):
        queue.enqueue(keys)
    assert queue.rows().dtype == torch.float32
    torch.testing.assert_close(queue.rows()[:5], keys.float(), rtol=0, atol=0)
    bank = MemoryBank(10, D, momentum=0.5)
    before = bank.rows()
    idx = torch.tensor([1, 4, 7, 8, 9])
    with torch.autocast("cpu", dtype=low):
        bank.update(idx, keys)
    assert bank.rows().dtype == torch.float32
    expected = nnf.normalize(0.5 * before[idx] + 0.5 * keys.float(), dim=1)
    torch.testing.assert_close(bank.rows()[idx], expected, rtol=1e-6, atol=1e-7)
