"""bench/gpu_step.py on the CPU (``--tiny``): ctk's step, built as ``ctk run`` builds it, beside a
bare PyTorch loop that computes the same loss with the same optimizer (built by the same code),
compile mode, memory format and feeding, its targets made on the device; and the speed choices
a trainer makes and prints (channels_last for a conv encoder, the optimizer's form, the
``compile`` switch)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("gpu_step", ROOT / "bench" / "gpu_step.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tiny_run_prints_both_rates_their_ratio_and_what_ctk_chose(capsys, tmp_path):
    assert _bench().main(["--tiny", "--device", "cpu", "--json", str(tmp_path / "step.json")]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("machine: ")
    ctk = float(re.search(r"ctk step +([\d.]+) images/s +\(([\d.]+) ms", out).group(2))
    bare = float(re.search(r"bare loop +([\d.]+) images/s +\(([\d.]+) ms", out).group(2))
    ratio = float(re.search(r"ratio ctk / bare: ([\d.]+)x", out).group(1))
    assert ctk > 0 and bare > 0
    assert ratio == pytest.approx(bare / ctk, abs=0.011)
    share = re.search(r"augmentation: ([\d.]+) ms of ctk's ([\d.]+) ms step \(([\d.]+)%", out)
    assert float(share.group(2)) == ctk and 0 < float(share.group(3)) < 100
    assert "resnet18 at 16 px, batch 8 x 2 views" in out
    assert out.count("ImageNet-100 at ") == 2 and "200 epochs" in out
    # the trainer said what it chose: a conv encoder in channels_last, LARS per parameter on a CPU
    assert "[ctk] speed: encoder channels_last; optimizer lars per-parameter; not compiled (auto: eager on cpu)" in err
    # and the bench says what compile: auto chose, with the reason, for every round
    assert "ctk compile: auto -> off (auto: eager on cpu)" in out.splitlines()[2]
    assert "not compiled (auto: eager on cpu)" in re.search(r"ctk step .*", out).group(0)
    # the ratio line says what both sides ran: the compile mode auto chose, the optimizers, the feeding
    line = re.search(r"ratio ctk / bare: .*", out).group(0)
    assert "(both not compiled, as compile: auto, which chose it (auto: eager on cpu); " in line
    assert "optimizer lars per-parameter / lars per-parameter; synthetic uint8 images in host memory;" in line
    figures = json.loads((tmp_path / "step.json").read_text())
    assert figures["ratio"] == pytest.approx(ratio, abs=0.006) and figures["ctk_ms"] == pytest.approx(ctk, abs=0.06)
    assert (figures["compile"], figures["compile_reason"]) == ("off", "auto: eager on cpu")
    assert figures["optimizer"] == {"ctk": "lars per-parameter", "bare": "lars per-parameter"}
    assert set(figures["imagenet100_epoch_s"]) == {"ctk", "bare"} and 0 < figures["augmentation_share"] < 1


def test_the_bare_loop_computes_ctk_nt_xent():
    """The bare loop's loss is the recipe's objective on the same embeddings (so the two steps
    compute the same thing)."""
    from domains import installed
    from toolkit import objective as objective_mod
    from toolkit import runs
    from toolkit.losses.base import ContrastiveBatch

    recipe = runs.load_recipe(ROOT / "recipes/vision/imagenet100/simclr.yaml", [], installed.get)
    objective = objective_mod.from_recipe(recipe)
    z = torch.nn.functional.normalize(torch.randn(12, 2, 16, generator=torch.Generator().manual_seed(0)), dim=-1)
    ours = objective(ContrastiveBatch(views=z, step=0)).loss
    bare = _bench().nt_xent(torch.cat([z[:, 0], z[:, 1]]), recipe.objective.loss.args["temperature"])
    torch.testing.assert_close(bare, ours, rtol=1e-6, atol=1e-6)


def _trainer(sets):
    bench = _bench()
    plan = bench.load(bench.RECIPE, [*bench.TINY, "budget.steps=2", *sets], "cpu")
    from toolkit.tracking.runlog import RunLog
    from toolkit.training.trainer import RunOptions

    domain = bench.synthetic_domain(plan)
    return domain.trainer(plan.recipe, RunLog(), RunOptions(device=plan.device, progress=False))


def test_a_conv_encoder_trains_in_channels_last_and_its_key_encoder_too():
    trainer = _trainer(
        [
            "objective.negatives={source: queue, size: 64, momentum: 0.99}",
            "objective.loss={name: moco_infonce, temperature: 0.07}",
        ]
    )
    conv = trainer.encoder.backbone.body[0].weight
    assert conv.is_contiguous(memory_format=torch.channels_last) and not conv.is_contiguous()
    key_conv = trainer.key_encoder.module.backbone.body[0].weight
    assert key_conv.is_contiguous(memory_format=torch.channels_last)
    assert trainer.speed.memory_format == "channels_last"


def test_the_compile_switch_compiles_the_step_model_only():
    from toolkit.recipe import RecipeError

    trainer = _trainer(["compile=true"])  # YAML's true: torch's default mode
    assert trainer.recipe.compile == "default" and trainer.speed.compile == "default"
    assert isinstance(trainer.model, torch._dynamo.eval_frame.OptimizedModule)
    assert trainer.model._orig_mod is trainer.encoder
    assert not any(k.startswith("_orig_mod") for k in trainer.state_dict()["encoder"])
    assert _trainer(["compile=reduce-overhead"]).speed.compile.startswith("default (reduce-overhead's CUDA graphs")
    plain = _trainer([])  # compile: auto, on the CPU: eager
    assert plain.model is plain.encoder and plain.speed.compile == "off"
    assert plain.recipe.compile == "auto" and plain.speed.compile_reason == "auto: eager on cpu"
    off = _trainer(["compile=off"])  # as stored recipes and runs of before auto say it
    assert off.model is off.encoder and (off.speed.compile, off.speed.compile_reason) == ("off", "")
    with pytest.raises(RecipeError, match="compile"):
        _trainer(["compile=fast"])


def test_the_bare_loop_makes_its_targets_on_the_device():
    """No host tensor copied to the device for the targets: on the meta device every op of the
    loss runs there and nothing is copied across (the loop of before built them on the host)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[tuple[str, set[str]]] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            devices = {t.device.type for t in (out if isinstance(out, (tuple, list)) else [out]) if torch.is_tensor(t)}
            self.seen.append((str(func), devices))
            return out

    z = torch.nn.functional.normalize(torch.randn(12, 16), dim=-1).to("meta")
    with Ops() as ops:
        _bench().nt_xent(z, 0.1)
    assert ops.seen and all(devices <= {"meta"} for _, devices in ops.seen), ops.seen
    assert not any("_to_copy" in name or "copy_" in name for name, _ in ops.seen)


def test_the_synthetic_feed_has_the_real_epoch_and_hands_over_whole_batches():
    """An epoch as long as the dataset's (ImageNet-100 at batch 8: 15,836 steps, what compile: auto
    weighs), made of four distinct batches handed over in turn, images, labels and indices
    together, never indexed per step; --resident puts them on the device (here: the CPU)."""
    bench = _bench()
    plan = bench.load(bench.RECIPE, [*bench.TINY, "budget.steps=2"], "cpu")
    fed = bench.synthetic_domain(plan).build_data(plan.recipe).train
    assert len(fed) == 126_689 // 8 and len(fed.batches) == bench.SYNTHETIC_BATCHES
    batches = list(fed.iter_from(len(fed) - 5))
    assert [b["x"].data_ptr() for b in batches] == [
        fed.batches[(len(fed) - 5 + i) % 4]["x"].data_ptr() for i in range(5)
    ]
    assert set(batches[0]) == {"x", "y", "index"} and batches[0]["x"].dtype == torch.uint8
    assert bench.feeding(torch.device("cuda"), False).endswith("from pinned host memory, copied by each step")
    assert bench.feeding(torch.device("cuda"), True) == "synthetic uint8 images resident on the device"


@pytest.mark.parametrize("sets", [[], ["optimizer.name=sgd"]], ids=["recipe's lars", "--sgd"])
def test_the_bare_loop_runs_the_optimizer_and_compile_mode_ctk_runs(monkeypatch, sets):
    from toolkit.training.trainer import RunOptions

    bench = _bench()
    modes = []
    real = bench.speed.compiled

    def compiled(model, mode):
        modes.append(mode)
        return real(model, "off")

    monkeypatch.setattr(bench.speed, "compiled", compiled)
    plan = bench.load(bench.RECIPE, [*bench.TINY, "budget.steps=2", *sets], "cpu")
    trainer = bench.synthetic_domain(plan).trainer(plan.recipe, None, RunOptions(device=plan.device, progress=False))
    trainer.speed = bench.speed.Speed("channels_last", False, "x", "default", "injected")
    seconds, optimizer = bench.bare_step(plan, trainer, 0, 1)
    assert seconds > 0 and modes[-1] == "default"  # the mode ctk's trainer has
    assert optimizer == bench.implementation(trainer.optimizer)
    assert optimizer == ("sgd fused" if sets else "lars per-parameter")
