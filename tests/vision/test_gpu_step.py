"""bench/gpu_step.py on the CPU (``--tiny``): ctk's step, built as ``ctk run`` builds it, beside a
bare PyTorch loop that computes the same loss; and the speed choices a trainer makes and prints
(channels_last for a conv encoder, the optimizer's form, the ``compile`` switch)."""

from __future__ import annotations

import importlib.util
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


def test_tiny_run_prints_both_rates_their_ratio_and_what_ctk_chose(capsys):
    assert _bench().main(["--tiny", "--device", "cpu"]) == 0
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
