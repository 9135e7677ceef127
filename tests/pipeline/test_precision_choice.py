"""``precision: auto`` resolves per machine, an explicit bf16 without native bf16 is refused at
load, and the RL convolutions never reach oneDNN's bf16 kernels on a CPU without them.

Both branches of every CPU-dependent decision run on any machine: ``CTK_CPU_BF16`` overrides the
detection, and torch's / oneDNN's own caps (``ATEN_CPU_CAPABILITY``, ``ONEDNN_MAX_CPU_ISA``) are
checked in subprocesses (they are read once, when torch loads).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner

import cli
from domains import installed
from domains.rl import networks
from toolkit.runs import load_recipe
from toolkit.tracking.store import client_for
from toolkit.training import precision

ROOT = Path(cli.__file__).resolve().parent
QUICKSTART = ROOT / "recipes" / "vision" / "quickstart.yaml"
RL_CPU = ROOT / "recipes" / "rl" / "cartpole_swingup_cpu.yaml"
TOY = ROOT / "recipes" / "toy" / "lmcl_three_bars_cl.yaml"
CPU = torch.device("cpu")


@pytest.fixture
def no_bf16(monkeypatch):
    monkeypatch.setenv(precision.OVERRIDE_ENV, "none")


@pytest.fixture
def native_bf16(monkeypatch):
    monkeypatch.setenv(precision.OVERRIDE_ENV, "native")


def test_the_override_drives_the_detection_both_ways(monkeypatch):
    monkeypatch.setenv(precision.OVERRIDE_ENV, "native")
    assert precision.cpu_bf16() == precision.CpuBf16(True, "CTK_CPU_BF16=native")
    monkeypatch.setenv(precision.OVERRIDE_ENV, "none")
    assert precision.cpu_bf16() == precision.CpuBf16(False, "CTK_CPU_BF16=none")


def test_detection_without_override_agrees_with_the_cpu_flags(monkeypatch):
    """x86: native exactly when the CPU has AVX512-BF16 or AMX and torch dispatches AVX-512."""
    monkeypatch.delenv(precision.OVERRIDE_ENV, raising=False)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    got = precision.cpu_bf16()
    if os.uname().machine != "x86_64":
        pytest.skip("the flag comparison below reads x86 /proc/cpuinfo flags")
    flags = Path("/proc/cpuinfo").read_text().split("flags", 1)[1].split("\n", 1)[0].split()
    hardware = "avx512_bf16" in flags or "amx_bf16" in flags
    dispatch = torch.backends.cpu.get_cpu_capability().startswith(("AVX512", "AMX"))
    assert got.native == (hardware and dispatch), got


@pytest.mark.parametrize(
    "env", [{"ATEN_CPU_CAPABILITY": "avx2"}, {"ONEDNN_MAX_CPU_ISA": "AVX2"}], ids=["aten-avx2", "onednn-avx2"]
)
def test_torch_and_onednn_caps_count_as_no_native_bf16(env):
    """Under either cap the CPU counts as without bf16 (true on an AVX2 machine anyway; on an
    AVX512-BF16 machine the cap is what makes it so), and auto resolves to fp32."""
    code = (
        "from toolkit.training import precision as p; import torch; "
        "b = p.cpu_bf16(); c = p.resolve('auto', torch.device('cpu')); "
        "print(b.native, c.value, '|', b.feature)"
    )
    child_env = {k: v for k, v in os.environ.items() if k != precision.OVERRIDE_ENV}
    out = subprocess.run(
        [sys.executable, "-c", code], env={**child_env, **env}, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    native, value, _, feature = out.stdout.split(maxsplit=3)
    assert (native, value) == ("False", "fp32"), out.stdout
    assert feature.strip(), out.stdout


def test_auto_on_cpu_follows_the_detection(monkeypatch):
    monkeypatch.setenv(precision.OVERRIDE_ENV, "none")
    choice = precision.resolve("auto", CPU)
    assert (choice.value, choice.requested) == ("fp32", "auto")
    assert choice.line() == "precision auto -> fp32: this CPU has no native bf16 (CTK_CPU_BF16=none)"
    monkeypatch.setenv(precision.OVERRIDE_ENV, "native")
    assert precision.resolve("auto", CPU).value == "bf16"
    assert precision.resolve("auto", CPU, allowed=("fp32",)).value == "fp32"


def test_explicit_values_pass_through_where_the_hardware_has_them(native_bf16):
    for value in ("fp32", "bf16", "fp16"):
        assert precision.resolve(value, CPU).value == value


def test_explicit_bf16_without_native_bf16_is_refused_with_the_feature_and_the_fix(no_bf16):
    with pytest.raises(ValueError) as info:
        precision.resolve("bf16", CPU)
    msg = str(info.value)
    assert "no native bf16" in msg and "AVX512-BF16" in msg and "CTK_CPU_BF16=none" in msg
    assert "precision: auto" in msg and "10x slower" in msg
    assert precision.resolve("fp32", CPU).value == "fp32"


@pytest.mark.parametrize(
    "bf16, allowed, want",
    [
        (True, ("fp32", "bf16", "fp16"), "bf16"),
        (False, ("fp32", "bf16", "fp16"), "fp16"),
        (False, ("fp32", "bf16"), "fp32"),
    ],
    ids=["ampere", "older-gpu", "older-gpu-rl"],
)
def test_auto_on_cuda(monkeypatch, bf16, allowed, want):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Test GPU")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda **kw: bf16)
    choice = precision.resolve("auto", torch.device("cuda"), allowed)
    assert choice.value == want and "Test GPU" in choice.reason
    if not bf16:
        with pytest.raises(ValueError, match="no bf16 support"):
            precision.resolve("bf16", torch.device("cuda"))


def test_every_shipped_cpu_recipe_asks_for_auto():
    for path in (QUICKSTART, RL_CPU, ROOT / "recipes" / "text" / "cpu" / "qt_bow_books.yaml"):
        recipe = load_recipe(path, [], installed.get)
        assert recipe.precision == "auto", path
        assert recipe.device == "auto", path


def test_show_and_run_refuse_explicit_bf16_before_touching_the_store(no_bf16, data_workdir):
    for command in ("show", "run"):
        for path in (QUICKSTART, RL_CPU):
            result = CliRunner().invoke(cli.main, [command, str(path), "--set", "precision=bf16"])
            assert result.exit_code == 2, (command, path, result.output)
            assert "precision" in result.output and "no native bf16" in result.output, result.output
            assert "Traceback" not in result.output
    assert not (data_workdir / "mlflow.db").exists() and not (data_workdir / "checkpoints").exists()
    result = CliRunner().invoke(cli.main, ["run", str(QUICKSTART), "--precision", "bf16"])
    assert result.exit_code == 2 and "no native bf16" in result.output


VISION_TINY = [
    "data.train_subset=256",
    "budget.steps=4",
    "budget.batch_size=64",
    "budget.log_every=2",
    "budget.monitor_every=null",
    "budget.minutes=null",
    "evaluation.probe_train_subset=256",
    "evaluation.test_subset=128",
    "evaluation.baselines=[]",
    "evaluation.diagnostics.samples=64",
    "evaluation.linear.epochs=5",
    "evaluation.knn.k=10",
    "tracking.log_model=false",
]


@pytest.mark.parametrize("detected", ["none", "native"])
def test_a_run_logs_the_resolved_precision_and_the_request(monkeypatch, data_workdir, detected):
    monkeypatch.setenv(precision.OVERRIDE_ENV, detected)
    sets = [a for s in [*VISION_TINY, "tracking.experiment=prec"] for a in ("--set", s)]
    result = CliRunner().invoke(cli.main, ["run", str(QUICKSTART), "--quiet", *sets])
    assert result.exit_code == 0, result.output
    want = "fp32" if detected == "none" else "bf16"
    assert f"precision auto -> {want}: this CPU has" in result.output, result.output
    client = client_for()
    run = client.search_runs([client.get_experiment_by_name("prec").experiment_id])[0]
    assert run.data.params["measured.precision"] == want  # what the run used: a measurement
    assert run.data.params["precision"] == "auto"  # what the recipe asked for: the setting


def test_the_toy_domain_keeps_auto_at_fp32_even_with_native_bf16(native_bf16, data_workdir):
    result = CliRunner().invoke(
        cli.main,
        ["run", str(TOY), "--quiet", "--set", "tracking.experiment=toyprec", "--set", "tracking.log_model=false"],
    )
    assert result.exit_code == 0, result.output
    assert "precision auto -> fp32: the toy problems are tiny" in result.output, result.output
    client = client_for()
    run = client.search_runs([client.get_experiment_by_name("toyprec").experiment_id])[0]
    assert run.data.params["measured.precision"] == "fp32"
    assert precision.resolve("bf16", CPU, auto_fp32="reason").value == "bf16"  # explicit still honoured


def test_bf16_convolutions_without_onednn_bf16_take_aten_and_match(monkeypatch):
    """The fused oneDNN path and the fallback a CPU without oneDNN bf16 takes give the same
    bf16 numbers forward and backward (the fallback is what such a CPU runs; here it is forced)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (4, 9, 20, 20), generator=g).to(torch.bfloat16, memory_format=torch.channels_last)
    w = (torch.randn(8, 9, 3, 3, generator=g) * 0.02).bfloat16().requires_grad_()
    b = torch.zeros(8, dtype=torch.bfloat16, requires_grad=True)
    ref = F.relu(F.conv2d(x.double(), w.double(), b.double(), 2))
    outs = []
    for onednn in (networks._ONEDNN_BF16, False):
        monkeypatch.setattr(networks, "_ONEDNN_BF16", onednn)
        y = networks.conv_relu(x, w, b, 2)
        assert y.dtype == torch.bfloat16
        (gw,) = torch.autograd.grad(y.float().sum(), [w])
        outs.append((y.double(), gw.double()))
    for y, _ in outs:
        assert torch.allclose(y, ref, rtol=2**-7, atol=1e-2)
    assert torch.allclose(outs[0][1], outs[1][1], rtol=2**-6, atol=0.5)


@pytest.mark.parametrize("detected, want", [("none", "fp32"), ("native", "bf16")])
def test_show_keeps_auto_and_says_what_a_run_here_would_pick(monkeypatch, detected, want):
    monkeypatch.setenv(precision.OVERRIDE_ENV, detected)
    result = CliRunner().invoke(cli.main, ["show", str(RL_CPU)])
    assert result.exit_code == 0, result.output
    assert "\nprecision: auto\n" in result.output
    assert f"# on this machine: precision auto -> {want}: this CPU has" in result.output
