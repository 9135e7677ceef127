"""What only a GPU can check (``pytest -m gpu``; skipped where torch sees no CUDA device):
every loss under bf16 and fp16 autocast on CUDA against its fp32 value, a 50-step bf16 vision
run, a checkpoint written on the GPU resumed on the CPU, geometry metrics on CUDA tensors, nvJPEG
against the CPU workers, LARS's multi-tensor update against its per-parameter one (and, in
tests/core/test_streamed_probes.py, the streamed probes on CUDA against the CPU, as counts of
correct test rows; in tests/gpu/test_compile.py, ``compile: auto``'s trial and compiled training).
The runs here set ``compile: off``: compiling is not their subject.

What is compared with what: counts where the quantity is a count (histogram bins, correct
predictions), and a tolerance, with its reason beside it, where two devices round floats
differently."""

from __future__ import annotations

import pytest
import torch
from torch.nn.functional import cross_entropy

from tests.core.test_autocast import TOLERANCE_RATIO, N, inputs, rel_err
from tests.vision.test_precision import QUICKSTART, TINY, Stop, _stop_at
from toolkit.losses.base import LOSSES, ContrastiveBatch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
CUDA = torch.device("cuda")


def _run(module, fields, dtype):
    """Loss and views / natural gradients on CUDA, under autocast to ``dtype`` (None: fp32)."""
    grads = {k: fields[k].detach().clone().to(CUDA).requires_grad_() for k in ("views", "natural")}
    batch = ContrastiveBatch(
        views=grads["views"],
        natural=grads["natural"],
        keys=fields["keys"].to(CUDA),
        negatives=fields["negatives"].to(CUDA),
        indices=fields["indices"].to(CUDA),
    )
    torch.manual_seed(0)
    with torch.autocast("cuda", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
        loss = module(batch).loss
    out = torch.autograd.grad(loss, list(grads.values()), allow_unused=True)
    flat = torch.cat(
        [(o if o is not None else torch.zeros_like(g)).float().flatten() for o, g in zip(out, grads.values())]
    )
    return loss, flat


def _ce_error(fields, dtype, tau=0.1):
    v = fields["views"][:, :2].to(CUDA)
    low = v.detach().clone().requires_grad_()
    with torch.autocast("cuda", dtype=dtype):
        g = torch.autograd.grad(cross_entropy(low[:, 0] @ low[:, 1].t() / tau, torch.arange(N, device=CUDA)), low)[0]
    ref = v.detach().float().requires_grad_()
    g_ref = torch.autograd.grad(cross_entropy(ref[:, 0] @ ref[:, 1].t() / tau, torch.arange(N, device=CUDA)), ref)[0]
    return rel_err(g.float(), g_ref)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("name", LOSSES.names())
def test_loss_under_cuda_autocast_matches_fp32(name, dtype):
    cls = LOSSES.get(name)
    fields = inputs(dtype)
    loss, g = _run(cls(), fields, dtype)
    ref_loss, g_ref = _run(cls(), {k: (v.float() if v.is_floating_point() else v) for k, v in fields.items()}, None)
    assert loss.dtype == torch.float32 and torch.isfinite(loss) and torch.isfinite(g).all()
    # the same rounded inputs, the loss in float32 both times: what differs is the autocast
    # region's low-precision products (the gradients are bounded against a CE reference below)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-4, atol=1e-5)
    assert rel_err(g, g_ref) <= max(TOLERANCE_RATIO * _ce_error(fields, dtype), 1e-3), name


@pytest.fixture
def workdir(data_workdir):
    return data_workdir


def test_fifty_step_vision_run_in_bf16(workdir):
    from domains import installed
    from toolkit.runs import execute, load_recipe
    from toolkit.tracking.store import client_for

    r = load_recipe(
        QUICKSTART,
        # not a test of compiling: compile: auto would run its trial and compile (tests/gpu/test_compile.py)
        [*TINY, "budget.steps=50", "budget.log_every=10", "device=cuda", "precision=bf16", "compile=off"],
        installed.get,
    )
    run_id, metrics = execute(r, progress=False)
    losses = [m.value for m in client_for().get_metric_history(run_id, "train/loss")]
    assert len(losses) == 5 and all(torch.isfinite(torch.tensor(losses)))
    # linear_top1 is a percentage: 10 is chance on Fashion-MNIST's 10 classes (0.3 was read as
    # a fraction and held for any probe)
    assert losses[-1] < losses[0] and metrics["linear_top1"] > 20.0


def test_checkpoint_written_on_the_gpu_resumes_on_the_cpu(workdir):
    from domains import installed
    from toolkit import checkpoint as ckpt
    from toolkit.runs import execute, load_recipe
    from toolkit.tracking.store import client_for

    sets = [*TINY, "budget.checkpoint_every=2", "compile=off"]  # not a test of compiling
    gpu = load_recipe(QUICKSTART, [*sets, "device=cuda", "precision=bf16"], installed.get)
    with pytest.raises(Stop):
        execute(gpu, progress=False, hooks=[_stop_at(4)])
    client = client_for()
    killed = client.search_runs([client.get_experiment_by_name("precision").experiment_id])[0]
    saved = ckpt.load(ckpt.checkpoint_dir(killed.info.run_id) / "step-000000004.pt")
    assert all(v.device.type == "cpu" for v in saved["trainer"]["encoder"].values())
    assert "cuda" in saved["trainer"]["rng"]
    cpu = load_recipe(QUICKSTART, [*sets, "device=cpu", "precision=fp32"], installed.get)
    run_id, metrics = execute(cpu, progress=False, resume=killed.info.run_id)
    assert run_id == killed.info.run_id and "linear_top1" in metrics


def test_geometry_metrics_take_cuda_tensors():
    """Every geometry metric on CUDA tensors equals the same metric on their CPU copies."""
    from toolkit.evaluation import metrics

    g = torch.Generator(device=CUDA).manual_seed(0)
    f = torch.nn.functional.normalize(torch.randn(64, 8, device=CUDA, generator=g), dim=1)
    y = torch.nn.functional.normalize(f + 0.1 * torch.randn(64, 8, device=CUDA, generator=g), dim=1)
    labels = torch.arange(64, device=CUDA) % 4
    ref = metrics.distance_histogram(f.cpu())
    got = metrics.distance_histogram(f)
    assert (got["counts"] == ref["counts"]).all() and got["margin_occupancy"] == ref["margin_occupancy"]
    split, split_ref = (
        metrics.class_distance_histograms(f, labels),
        metrics.class_distance_histograms(f.cpu(), labels.cpu()),
    )
    assert (split["same"] == split_ref["same"]).all() and (split["different"] == split_ref["different"]).all()
    profile = metrics.similarity_profile(f[:8], f, torch.arange(8, device=CUDA), top=5)
    assert profile["negatives"].shape == (5,)
    for name, cuda_value, cpu_value in [
        ("tolerance", metrics.tolerance(f, labels), metrics.tolerance(f.cpu(), labels.cpu())),
        ("uniformity", metrics.uniformity(f), metrics.uniformity(f.cpu())),
        ("alignment", metrics.alignment(f, y), metrics.alignment(f.cpu(), y.cpu())),
        ("conditional_entropy", metrics.conditional_entropy(f), metrics.conditional_entropy(f.cpu())),
        (
            "conditional_entropy[neg]",
            metrics.conditional_entropy(f[:8], y),
            metrics.conditional_entropy(f[:8].cpu(), y.cpu()),
        ),
    ]:
        # float32 features: CUDA's and the CPU's products round differently (about 1e-7 of each
        # value), and a metric averages them over the 64 x 64 pairs; 1e-5 is a hundred times that
        assert cuda_value == pytest.approx(cpu_value, abs=1e-5), name


def test_jpeg_decoding_on_cuda_matches_the_cpu_workers(tmp_path):
    """nvJPEG (decode: device) gives the crops the CPU workers give, pinned batches land on the GPU."""
    from domains.vision.fixtures import write_photo_folder
    from domains.vision.image_folders import FolderSource
    from domains.vision.streaming import CropSpec, StreamBatches, choose_decode

    write_photo_folder(tmp_path, classes=4, train_per_class=4, val_per_class=4)
    split = FolderSource("imagefolder", tmp_path).split("val")
    spec = CropSpec(64, views=2)
    cpu = next(StreamBatches(split, spec, 8, seed=2, rank=0, world_size=1, device=CUDA).iter_from(0))
    gpu = next(StreamBatches(split, spec, 8, seed=2, rank=0, world_size=1, decode="device", device=CUDA).iter_from(0))
    assert gpu["x"].is_cuda and cpu["x"].is_pinned()
    # grey levels (0-255): nvJPEG decodes at full size and the crop is resized on the GPU, the
    # workers decode at a reduced DCT scale and resize with PIL, so pixels differ by a few levels
    assert (gpu["x"].float().cpu() - cpu["x"].float()).abs().mean() < 6.0
    choice, why = choose_decode("auto", CUDA, split, spec, 2)
    assert choice in ("cpu", "device") and "measured" in why


def test_lars_multi_tensor_equals_its_per_parameter_update_on_cuda():
    """The ``torch._foreach_*`` update (CUDA's default) against the per-parameter loop, five steps
    on the same gradients, weight decay and momentum on; fp32 on the same device, the two differ
    only in how the kernels group the same arithmetic, hence 1e-6."""
    from toolkit.training.optim import LARS

    g = torch.Generator(device=CUDA).manual_seed(0)
    shapes = [(64, 32, 3, 3), (64,), (64,), (128, 64), (128,), (10, 128)]  # conv, BN, linear, bias
    start = [torch.randn(s, device=CUDA, generator=g) for s in shapes]
    grads = [[torch.randn(s, device=CUDA, generator=g) for s in shapes] for _ in range(5)]
    params = {}
    for foreach in (True, False):
        ps = [torch.nn.Parameter(t.clone()) for t in start]
        opt = LARS(ps, lr=0.3, momentum=0.9, weight_decay=1e-6, foreach=foreach)
        for step in grads:
            for p, grad in zip(ps, step):
                p.grad = grad.clone()
            opt.step()
        params[foreach] = ps
    for multi, single in zip(params[True], params[False]):
        torch.testing.assert_close(multi, single, rtol=1e-6, atol=1e-6)
    assert not all(torch.equal(p, s) for p, s in zip(params[False], start))  # the steps moved them
