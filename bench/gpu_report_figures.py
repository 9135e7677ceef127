"""What ``bench/gpu_report.py`` reads and writes: the figures a GPU visit leaves in the report's
folder (the CUDA tests' JUnit file, ``bench/gpu_step.py``'s ``--json``, the calibration's line), each
beside its target with its verdict (met, missed, unmeasured, or a figure without a target), what
``compile: auto`` chose where, and the report in markdown."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

UNMEASURED = "unmeasured"
IMAGENET100_TRAIN = 126_689
Part = Any  # gpu_report.Part: name, status, seconds, log


@dataclass
class Figure:
    """One figure of the report, beside its target and whether it met it."""

    key: str
    label: str
    value: float | str | None = None
    unit: str = ""
    target: str = ""
    verdict: str = UNMEASURED  # met / missed / unmeasured / info
    part: str = ""
    note: str = ""


# -- reading ------------------------------------------------------------------------------------
def _json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _last_json_line(text: str) -> dict[str, Any] | None:
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def _fig(key: str, label: str, value: Any, unit: str = "", target: str = "", ok: Any = None, **kw: str) -> Figure:
    """A figure, its verdict from ``ok`` (a test of the value; None: a figure without a target)."""
    verdict = UNMEASURED if value is None else "info" if ok is None else "met" if ok(value) else "missed"
    return Figure(key, label, value, unit, target, verdict, **kw)


def read_tests(part: Part, out: Path) -> list[Figure]:
    figure = Figure("cuda_tests", "CUDA tests", target="all pass", part=part.name, note=part.status)
    try:  # only a part that ran: pytest writes the file when tests fail too
        suites = ET.parse(out / "cuda-tests.xml").getroot() if part.seconds is not None else None
    except (OSError, ET.ParseError):
        suites = None
    if suites is None:
        return [figure]
    suite = suites if suites.tag == "testsuite" else next(iter(suites), suites)
    total, failures, errors, skipped = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
    passed, failed = total - failures - errors - skipped, failures + errors
    figure.value = f"{passed} passed, {failed} failed, {skipped} skipped"
    figure.verdict = "met" if failed == 0 and passed > 0 else "missed"
    names = [
        f"{case.get('classname', '')}::{case.get('name', '')}"
        for case in suites.iter("testcase")
        if case.find("failure") is not None or case.find("error") is not None
    ]
    figure.note = ("failed: " + ", ".join(names[:10])) if names else ""
    return [figure]


def read_step(
    part: Part, out: Path, name: str, compiled: bool, model: str = "ResNet-50 SimCLR"
) -> tuple[list[Figure], dict[str, Any] | None]:
    """The figures of one ``bench/gpu_step.py`` part (its ``--json``)."""
    got = _json(out / f"{name}.json") if part.status == "ok" else None
    g, why = got or {}, "" if got else part.status
    tag, key = (" (torch.compile on both sides)", "r50_compiled_") if compiled else ("", "r50_")
    both = f"both {g['compile']}; optimizer {g['optimizer']['ctk']} / {g['optimizer']['bare']}; " if got else ""
    figures = [
        _fig(key + "ctk", f"{model}, ctk's step{tag}", g.get("ctk_images_per_s"), "images/s", part=part.name, note=why),
        _fig(key + "bare", f"{model}, the bare loop{tag}", g.get("bare_images_per_s"), "images/s", part=part.name),
        _fig(key + "ratio", f"ctk / bare{tag}", g.get("ratio"), "x", ">= 0.90", lambda v: v >= 0.90, part=part.name),
    ]
    figures[1].note = figures[2].note = f"{both}{g['feeding']}" if got else why
    if not compiled:
        share = 100 * g["augmentation_share"] if got else None
        aug = f"{g['augmentation_ms']:.1f} ms of {g['ctk_ms']:.1f} ms" if got else why
        epoch = IMAGENET100_TRAIN / g["ctk_images_per_s"] if got else None
        figures += [
            _fig(
                "augmentation_share",
                "augmentation's share of ctk's step",
                share,
                "%",
                "<= 10",
                lambda v: v <= 10.0,
                part=part.name,
                note=aug,
            ),
            _fig(
                "imagenet100_epoch",
                "an ImageNet-100 epoch (126,689 images) at ctk's rate",
                epoch,
                "s",
                part=part.name,
                note=f"200 epochs: {200 * epoch / 3600:.1f} h" if epoch else why,
            ),
        ]
    return figures, got


def read_fed(part: Part, out: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(the calibration's JSON, the speed line the fed run printed) of the fed quickstart."""
    if part.status != "ok" or not part.log:
        return None, None
    text = (out / part.log).read_text(errors="replace")
    speed = re.search(r"\[ctk\] (speed: .*)", text)
    return _last_json_line(text), speed.group(1) if speed else None


def _compile_line(label: str, got: dict[str, Any] | None, part: Part) -> dict[str, str]:
    if not got:
        return {"where": label, "chose": UNMEASURED, "why": part.status}
    return {"where": label, "chose": got["compile"], "why": got["compile_reason"] or f"compile: {got['compile_asked']}"}


def read_all(done: dict[str, Part], out: Path) -> tuple[list[Figure], list[dict[str, str]]]:
    """Every figure of the report and what ``compile: auto`` chose where, from the parts' files."""
    r50, r50_got = read_step(done["r50"], out, "r50", compiled=False)
    compiled, _ = read_step(done["r50-compiled"], out, "r50-compiled", compiled=True)
    synth_part, fed_part = done["quickstart-synthetic"], done["quickstart-fed"]
    synthetic = _json(out / "quickstart-synthetic.json") if synth_part.status == "ok" else None
    fed, fed_speed = read_fed(fed_part, out)
    fed_ms, synthetic_ms = (fed or {}).get("ms_per_step"), (synthetic or {}).get("ctk_ms")
    ratio = synthetic_ms / fed_ms if fed_ms and synthetic_ms else None
    figures = [
        *read_tests(done["cuda-tests"], out),
        *r50,
        *compiled,
        _fig(
            "quickstart_ms",
            "the quickstart's calibrated step (fed from Fashion-MNIST)",
            fed_ms,
            "ms",
            "<= 3",
            lambda v: v <= 3.0,
            part=fed_part.name,
            note=f"{fed['steps']} steps fixed by budget.minutes" if fed else fed_part.status,
        ),
        _fig(
            "quickstart_synthetic_ms",
            "the quickstart's step on synthetic images resident on the GPU",
            synthetic_ms,
            "ms",
            part=synth_part.name,
            note="" if synthetic else synth_part.status,
        ),
        _fig(
            "fed_vs_synthetic",
            "fed against synthetic (synthetic ms / fed ms)",
            ratio,
            "x",
            ">= 0.95",
            lambda v: v >= 0.95,
            part=f"{fed_part.name}, {synth_part.name}",
        ),
    ]
    choices = [
        _compile_line("ResNet-50 SimCLR (bench/gpu_step.py)", r50_got, done["r50"]),
        _compile_line("quickstart, synthetic (bench/gpu_step.py)", synthetic, synth_part),
        {
            "where": "quickstart, fed (ctk run's trainer)",
            "chose": fed_speed or UNMEASURED,
            "why": "" if fed_speed else fed_part.status,
        },
    ]
    return figures, choices


# -- writing ------------------------------------------------------------------------------------
def _value(f: Figure) -> str:
    if f.value is None:
        return UNMEASURED
    if isinstance(f.value, float):
        text = f"{f.value:,.0f}" if abs(f.value) >= 100 else f"{f.value:.2f}"
        return f"{text} {f.unit}".strip()
    return f"{f.value} {f.unit}".strip()


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"# ctk GPU report{' (dry run: nothing measured on a GPU)' if report['dry_run'] else ''}",
        "",
        f"- machine: {report['machine']}",
        f"- GPU: {report['gpu'] or 'none'}",
        f"- commit: {report['commit']}; started {report['started']}; "
        f"{report['seconds']:.0f} s of a {report['budget_s']:.0f} s budget",
        "",
        "## Figures",
        "",
        "| what | value | target | verdict | note |",
        "| --- | --- | --- | --- | --- |",
    ]
    for f in report["figures"]:
        fig = Figure(**f)
        lines.append(f"| {fig.label} | {_value(fig)} | {fig.target} | {fig.verdict} | {fig.note} |")
    lines += ["", "## What compile: auto chose", "", "| where | chose | why |", "| --- | --- | --- |"]
    for c in report["compile_auto"]:
        lines.append(f"| {c['where']} | {c['chose']} | {c['why']} |")
    lines += [
        "",
        "## Parts",
        "",
        "| part | what | status | seconds | limit | log |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for p in report["parts"]:
        seconds = f"{p['seconds']:.0f}" if p["seconds"] is not None else ""
        lines.append(f"| {p['name']} | {p['what']} | {p['status']} | {seconds} | {p['limit_s']} | {p['log'] or ''} |")
    for p in report["parts"]:
        if p["status"] not in ("ok", "not run") and p["tail"]:
            lines += ["", f"### {p['name']}: {p['status']}", "", "```", *p["tail"], "```"]
    if report.get("dry_run_check"):
        lines += ["", "## Dry-run check (bench/gpu_step.py on the CPU: not GPU figures)", ""]
        lines += [f"- {f['label']}: {_value(Figure(**f))}" for f in report["dry_run_check"]]
    unmeasured = [f["label"] for f in report["figures"] if f["verdict"] == UNMEASURED]
    if unmeasured:
        lines += ["", f"Unmeasured: {', '.join(unmeasured)}."]
    return "\n".join(lines) + "\n"
