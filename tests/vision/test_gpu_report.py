"""bench/gpu_report.py without a GPU: ``--dry-run`` writes the report's shape (markdown and JSON)
with every GPU figure unmeasured, after one real part on the CPU through the same runner and
reader; each part keeps to its own time limit (its whole process group ended) and the report to
its budget; and the reader turns the files a GPU visit leaves into figures against their targets."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GPU_PARTS = ["cuda-tests", "r50", "quickstart-synthetic", "quickstart-fed", "r50-compiled"]
FIGURES = [
    "cuda_tests",
    "r50_ctk",
    "r50_bare",
    "r50_ratio",
    "augmentation_share",
    "imagenet100_epoch",
    "r50_compiled_ctk",
    "r50_compiled_bare",
    "r50_compiled_ratio",
    "quickstart_ms",
    "quickstart_synthetic_ms",
    "fed_vs_synthetic",
]


def _report():
    spec = importlib.util.spec_from_file_location("gpu_report", ROOT / "bench" / "gpu_report.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being made
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # one step benchmark in a process of its own
def test_the_dry_run_writes_the_report_with_every_gpu_figure_unmeasured(tmp_path, capsys):
    assert _report().main(["--dry-run", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["dry_run"] is True
    assert [f["key"] for f in report["figures"]] == FIGURES
    assert all(f["value"] is None and f["verdict"] == "unmeasured" for f in report["figures"])
    assert all(c["chose"] == "unmeasured" for c in report["compile_auto"]) and len(report["compile_auto"]) == 3
    parts = {p["name"]: p for p in report["parts"]}
    assert list(parts) == [*GPU_PARTS, "cpu-check"]
    assert all(parts[name]["status"] == "not run" and parts[name]["limit_s"] > 0 for name in GPU_PARTS)
    assert "bench/gpu_step.py --compile" in parts["r50-compiled"]["command"]
    assert sum(parts[name]["limit_s"] for name in GPU_PARTS) <= report["budget_s"] <= 480  # 8 minutes
    # the one part run for real went through the runner and the reader
    assert parts["cpu-check"]["status"] == "ok", parts["cpu-check"]["tail"]
    check = {f["key"]: f for f in report["dry_run_check"]}
    assert check["r50_ctk"]["value"] > 0 and check["r50_ratio"]["value"] > 0
    assert check["r50_ctk"]["label"].startswith("the quickstart's conv net, batch 16, on the CPU")
    md = (tmp_path / "report.md").read_text()
    assert md.startswith("# ctk GPU report (dry run: nothing measured on a GPU)")
    assert "| ctk / bare | unmeasured | >= 0.90 | unmeasured |" in md
    assert "## What compile: auto chose" in md and "## Dry-run check" in md
    assert (tmp_path / "logs" / "cpu-check.log").exists()


def _sleeper(pid_file: Path) -> list[str]:
    """A part that starts a child and both sleep: a hanging part and what it started."""
    code = (
        "import subprocess, sys, time; "
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
        f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(120)"
    )
    return [sys.executable, "-c", code]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat")
    return not (state.exists() and state.read_text().split()[2] == "Z")  # a zombie is ended


def test_a_part_past_its_limit_is_ended_with_what_it_started_and_the_next_part_runs(tmp_path):
    report = _report()
    pid_file = tmp_path / "child.pid"
    hang = report.Part("hang", "sleeps", _sleeper(pid_file), limit_s=3)
    quick = report.Part("quick", "prints", [sys.executable, "-c", "print('done')"], limit_s=30)
    start = time.monotonic()
    report.run_parts([hang, quick], tmp_path, budget_s=120, env=dict(os.environ))
    assert time.monotonic() - start < 60  # not the 120 s the part asked for
    assert hang.status == "timed out after 3 s" and quick.status == "ok"
    assert quick.tail[-1] == "done" and (tmp_path / quick.log).read_text().startswith("$ ")
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child)  # the part's whole process group went


def test_parts_left_without_time_are_skipped_and_say_so(tmp_path):
    report = _report()
    todo = [report.Part(n, "prints", [sys.executable, "-c", "print(1)"], limit_s=300) for n in ("a", "b")]
    report.run_parts(todo, tmp_path, budget_s=5, env=dict(os.environ))
    assert [p.status for p in todo] == ["skipped: 5 s of the report's 5 s left"] * 2
    assert all(p.seconds is None for p in todo)


def _step_json(path: Path, ctk_ms: float, bare_ms: float, batch: int, compile: str, aug_ms: float) -> None:
    path.write_text(
        json.dumps(
            {
                "ctk_images_per_s": batch / (ctk_ms / 1000),
                "bare_images_per_s": batch / (bare_ms / 1000),
                "ratio": bare_ms / ctk_ms,
                "ctk_ms": ctk_ms,
                "augmentation_ms": aug_ms,
                "augmentation_share": aug_ms / ctk_ms,
                "compile": compile,
                "compile_asked": "auto",
                "compile_reason": "auto: the step takes 160 ms, compute-bound; compile=default to try"
                if compile == "off"
                else "auto: 2.0 ms/step against 4.0 ms eager, 50% faster (10% needed); compiled in 9 s, ...",
                "optimizer": {"ctk": "lars multi-tensor", "bare": "lars multi-tensor"},
                "feeding": "synthetic uint8 images from pinned host memory, copied by each step",
            }
        )
    )


def test_the_reader_turns_a_gpu_visit_into_figures_against_their_targets(tmp_path):
    """The files a GPU visit leaves, written by hand: the verdicts follow the targets."""
    report = _report()
    done = {p.name: p for p in report.parts()}
    for p in done.values():
        p.status, p.seconds = "ok", 1.0
    (tmp_path / "cuda-tests.xml").write_text(
        '<testsuites><testsuite tests="50" failures="1" errors="0" skipped="0">'
        '<testcase classname="tests.gpu.test_cuda" name="test_a"><failure message="x"/></testcase>'
        "</testsuite></testsuites>"
    )
    _step_json(tmp_path / "r50.json", 160.0, 150.0, 256, "off", 20.0)  # 0.94x, 12.5% augmentation
    _step_json(tmp_path / "r50-compiled.json", 160.0, 120.0, 256, "default", 20.0)  # 0.75x
    _step_json(tmp_path / "quickstart-synthetic.json", 2.0, 1.9, 128, "reduce-overhead", 0.1)
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "quickstart-fed.log").write_text(
        "$ python bench/budget_calibration.py\n[ctk] speed: encoder channels_last, cudnn.benchmark; optimizer adam "
        "fused; torch.compile mode reduce-overhead (auto: ...)\n"
        '{"steps": 4680, "ms_per_step": 2.5, "precision": "bf16"}\n'
    )
    done["quickstart-fed"].log = "logs/quickstart-fed.log"
    figures, choices = report.read_all(done, tmp_path)
    got = {f.key: f for f in figures}
    assert [f.key for f in figures] == FIGURES
    assert got["cuda_tests"].value == "49 passed, 1 failed, 0 skipped" and got["cuda_tests"].verdict == "missed"
    assert "tests.gpu.test_cuda::test_a" in got["cuda_tests"].note
    assert got["r50_ratio"].value == pytest.approx(150 / 160) and got["r50_ratio"].verdict == "met"
    assert got["r50_compiled_ratio"].verdict == "missed"
    assert got["augmentation_share"].value == pytest.approx(12.5) and got["augmentation_share"].verdict == "missed"
    assert got["imagenet100_epoch"].value == pytest.approx(126_689 / (256 / 0.160))
    assert got["quickstart_ms"].value == 2.5 and got["quickstart_ms"].verdict == "met"
    assert got["fed_vs_synthetic"].value == pytest.approx(2.0 / 2.5) and got["fed_vs_synthetic"].verdict == "missed"
    assert choices[0]["chose"] == "off" and "compute-bound" in choices[0]["why"]
    assert choices[1]["chose"] == "reduce-overhead"
    assert choices[2]["chose"].startswith("speed: encoder channels_last") and "reduce-overhead" in choices[2]["chose"]
    md = report.markdown(
        {
            "dry_run": False,
            "machine": "m",
            "gpu": "NVIDIA H100",
            "commit": "abc",
            "started": "now",
            "seconds": 400.0,
            "budget_s": 470.0,
            "figures": [report.asdict(f) for f in figures],
            "compile_auto": choices,
            "parts": [{**report.asdict(p), "command": ""} for p in done.values()],
        }
    )
    assert "| ctk / bare | 0.94 x | >= 0.90 | met |" in md and "Unmeasured" not in md


def test_a_part_that_failed_leaves_its_figures_unmeasured_with_the_reason(tmp_path):
    report = _report()
    done = {p.name: p for p in report.parts()}
    for p in done.values():
        p.status, p.seconds = "timed out after 75 s", 75.0
    _step_json(tmp_path / "r50.json", 160.0, 150.0, 256, "off", 20.0)  # left by an earlier visit: not read
    figures, choices = report.read_all(done, tmp_path)
    assert all(f.verdict == "unmeasured" for f in figures)
    assert {f.note for f in figures if f.key.startswith("r50")} == {"timed out after 75 s"}
    assert choices[0] == {"where": choices[0]["where"], "chose": "unmeasured", "why": "timed out after 75 s"}
