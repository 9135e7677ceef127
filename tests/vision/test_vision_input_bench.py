"""bench/vision_input.py: worker counts up to the cores, enough files that a measurement stays
inside one epoch, and the rate a step needs read from bench/gpu_step.py's output."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("vision_input", ROOT / "bench" / "vision_input.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_worker_counts_double_up_to_the_cores():
    counts = _bench().worker_counts
    assert counts(16, None) == [1, 2, 4, 8, 16]
    assert counts(14, None) == [1, 2, 4, 8, 14]
    assert counts(2, None) == [1, 2]
    assert counts(1, None) == [1]
    assert counts(16, "8,1,8") == [1, 8]


def test_the_needed_rate_comes_from_gpu_step_output(tmp_path):
    out = tmp_path / "gpu_step.txt"
    out.write_text(
        "machine: x\nround 1: ctk 10 images/s\nctk step        2165.4 images/s  (118.2 ms a step)\n"
        "bare loop       2406.0 images/s  (106.4 ms a step)\n"
    )
    needed = _bench().needed_rate
    assert needed(None, str(out)) == (2165.4, f"ctk's step in {out}")
    assert needed(500.0, None) == (500.0, "--need")
    assert needed(None, None) is None


def test_fill_links_the_jpegs_under_more_names(tmp_path):
    for cls in ("a", "b"):
        (tmp_path / "train" / cls).mkdir(parents=True)
        (tmp_path / "train" / cls / f"{cls}.jpg").write_bytes(b"jpeg " + cls.encode())
    assert _bench().fill(tmp_path, 7) == 7
    files = sorted(tmp_path.glob("train/*/*.jpg"))
    assert len(files) == 7
    assert {f.read_bytes() for f in files} == {b"jpeg a", b"jpeg b"}
    assert len({f.stat().st_ino for f in files}) == 2  # links, not copies


def test_a_short_run_measures_inside_one_epoch_and_compares_with_the_need(capsys):
    assert _bench().main(["--images", "24", "--size", "32", "--seconds", "0.5", "--workers", "1", "--need", "5"]) == 0
    out = capsys.readouterr().out
    row = re.search(r"^ +1 +([\d.]+) +([\d.]+) +([\d.]+)$", out, re.MULTILINE)
    assert row is not None, out
    assert float(row.group(3)) >= 0.5  # whole measurement, no early epoch end
    assert "ended early" not in out
    assert "the step needs 5.0 images/s (--need)" in out
