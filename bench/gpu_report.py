"""Everything ctk needs measured on a GPU, in one visit of at most 8 minutes, written as one report
(``report.md`` and ``report.json``) with every figure beside its target.

    python bench/gpu_report.py [--out DIR] [--budget 470]     # on the GPU host (DIR: $OUT if set)
    python bench/gpu_report.py --dry-run [--out DIR]          # anywhere: the report's shape, on the CPU

The parts (:data:`PARTS`, in order of what matters most: the CUDA tests; the ResNet-50 SimCLR step
against the bare loop in the mode ``compile: auto`` chose, the augmentation's share and an
ImageNet-100 epoch; the quickstart on synthetic images and fed from Fashion-MNIST as ``ctk run``
feeds it, calibrated; the ResNet-50 under ``torch.compile`` on both sides) each run in a process
of their own with their own time limit, their process group ended at the limit, so a part that
hangs or compiles too long costs only its own minutes; a part that would start with less than a
minute of the budget left is skipped and says so. Targets and the procedure on the offline GPU
host: ``docs/gpu.md`` ("One GPU visit"). ``--dry-run`` measures nothing on a GPU: every GPU
figure says ``unmeasured``, the parts are listed with their commands, and one part runs for real
on the CPU (``bench/gpu_step.py`` on the quickstart's conv net) through the same runner and
reader (``tests/vision/test_gpu_report.py``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_report_figures import Figure, markdown, read_all, read_step  # noqa: E402

QUICKSTART = "recipes/vision/quickstart.yaml"
BUDGET_S = 470  # the whole report: under 8 minutes with the writing
MIN_START_S = 60  # a part is not started with less than this left of the budget


@dataclass
class Part:
    """One measurement in a process of its own: ``command`` (a string is split at spaces) run
    from the repository root with ``{out}`` replaced by the report's folder, stopped after
    ``limit_s`` seconds."""

    name: str
    what: str
    command: str | list[str]
    limit_s: int
    # what it left: its status, seconds, exit code and the tail of its log
    status: str = "not run"
    seconds: float | None = None
    returncode: int | None = None
    log: str | None = None
    tail: list[str] = field(default_factory=list)


STEP = "{py} bench/gpu_step.py"
GPU_TESTS = "tests/gpu tests/core/test_streamed_probes.py::test_streamed_probes_on_the_gpu_match_the_cpu"
# name, seconds at most, what it measures, command ({py}: this Python; {out}: the report's folder)
PARTS = [
    ("cuda-tests", 120, "the CUDA tests: tests/gpu and the streamed probes on the GPU",
     f"{{py}} -m pytest -n 0 -p no:cacheprovider -q {GPU_TESTS} --junitxml {{out}}/cuda-tests.xml"),
    ("r50", 70, "ResNet-50 SimCLR step against the bare loop, both as compile: auto chose",
     f"{STEP} --steps 10 --warmup 3 --rounds 2 --json {{out}}/r50.json"),
    # one round: each round builds a trainer, and compile: auto's trial may compile the conv net (tens of s)
    ("quickstart-synthetic", 60, "the quickstart's step on synthetic images resident on the GPU; what auto chose",
     f"{STEP} --recipe {QUICKSTART} --resident --steps 100 --warmup 20 --rounds 1 --json {{out}}/quickstart-synthetic.json"),
    ("quickstart-fed", 75, "the quickstart's calibrated ms/step, fed from Fashion-MNIST as ctk run feeds it",
     f"{{py}} bench/budget_calibration.py --one --recipe {QUICKSTART} --set device=cuda"),
    ("r50-compiled", 145, "ResNet-50 SimCLR step against the bare loop, both under torch.compile (compile: default)",
     f"{STEP} --compile --steps 10 --warmup 3 --rounds 1 --json {{out}}/r50-compiled.json"),
]  # fmt: skip
# what --dry-run runs for real: the step benchmark on the CPU, through the same runner and reader
DRY_RUN = (
    "cpu-check", 150, "bench/gpu_step.py on the quickstart's conv net on the CPU: the runner and the reader",
    f"{STEP} --recipe {QUICKSTART} --device cpu --set budget.batch_size=16 --steps 2 --warmup 1 --rounds 1 "
    "--json {out}/cpu-check.json",
)  # fmt: skip


def _part(name: str, limit_s: int, what: str, command: str, python: str = sys.executable) -> Part:
    return Part(name, what, command.replace("{py}", python), limit_s)


def parts() -> list[Part]:
    """The GPU visit, part by part, in the order they run."""
    return [_part(*row) for row in PARTS]


# -- running ------------------------------------------------------------------------------------
def _stop(proc: subprocess.Popen) -> None:
    """End the part's process group (it was started in a session of its own): TERM, then KILL."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_part(part: Part, out: Path, limit_s: float, env: dict[str, str]) -> Part:
    """Run ``part`` for at most ``limit_s`` seconds, its output in ``out/logs/NAME.log``."""
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{part.name}.log"
    asked = part.command.split() if isinstance(part.command, str) else list(part.command)
    command = [arg.replace("{out}", str(out)) for arg in asked]
    for arg, template in zip(command, asked):
        if "{out}" in template:  # what an earlier report left there is not this run's
            Path(arg).unlink(missing_ok=True)
    start = time.monotonic()
    with open(log, "w") as sink:
        sink.write(f"$ {' '.join(command)}\n")
        sink.flush()
        proc = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            part.returncode = proc.wait(timeout=limit_s)
            part.status = "ok" if part.returncode == 0 else f"failed (exit {part.returncode})"
        except subprocess.TimeoutExpired:
            _stop(proc)
            part.returncode = proc.returncode
            part.status = f"timed out after {limit_s:.0f} s"
    part.seconds = time.monotonic() - start
    part.log = str(log.relative_to(out))
    part.tail = log.read_text(errors="replace").splitlines()[-15:]
    return part


def run_parts(todo: list[Part], out: Path, budget_s: float, env: dict[str, str]) -> list[Part]:
    """Every part in turn, each within its own limit and what is left of ``budget_s``; a part that
    would start with less than :data:`MIN_START_S` left (or its limit, if smaller) is skipped."""
    deadline = time.monotonic() + budget_s
    for part in todo:
        left = deadline - time.monotonic()
        if left < min(MIN_START_S, part.limit_s):
            part.status = f"skipped: {left:.0f} s of the report's {budget_s:.0f} s left"
            continue
        print(f"[gpu_report] {part.name}: {part.what} (at most {min(part.limit_s, left):.0f} s)", flush=True)
        run_part(part, out, min(part.limit_s, left), env)
        print(f"[gpu_report] {part.name}: {part.status} in {part.seconds:.0f} s", flush=True)
    return todo


def _machine() -> tuple[str, str | None]:
    try:
        import torch

        sys.path.insert(0, str(ROOT))
        from toolkit.training.precision import machine_line

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
        return machine_line(), gpu
    except Exception as exc:  # noqa: BLE001 - the report is written whatever this host lacks
        return f"unknown ({type(exc).__name__}: {exc})", None


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        return out.stdout.strip() or "unknown (no git)"
    except OSError:
        return "unknown (no git)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "gpu-report", help="folder for the report (default $OUT)")
    ap.add_argument("--budget", type=float, default=BUDGET_S, help="seconds for every part together")
    ap.add_argument("--dry-run", action="store_true", help="measure nothing on a GPU: the report's shape, on the CPU")
    args = ap.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
        "HF_HUB_OFFLINE": "1",
        "MLFLOW_DISABLE_TELEMETRY": "true",
    }
    started, clock = datetime.datetime.now().isoformat(timespec="seconds"), time.monotonic()
    machine, gpu = _machine()
    plan = parts()
    check: list[Figure] = []
    if args.dry_run:
        for part in plan:
            part.status = "not run"
        cpu = run_parts([_part(*DRY_RUN)], out, args.budget, env)[0]
        check, _ = read_step(
            cpu, out, "cpu-check", compiled=False, model="the quickstart's conv net, batch 16, on the CPU"
        )
        plan.append(cpu)
    else:
        if gpu is None:
            print(
                "[gpu_report] torch sees no CUDA device: every part will fail; --dry-run checks the report", flush=True
            )
        run_parts(plan, out, args.budget, env)
    done = {p.name: p for p in plan}
    figures, choices = read_all(done, out)
    report = {
        "dry_run": args.dry_run,
        "machine": machine,
        "gpu": gpu,
        "commit": _commit(),
        "started": started,
        "seconds": time.monotonic() - clock,
        "budget_s": args.budget,
        "figures": [asdict(f) for f in figures],
        "compile_auto": choices,
        "parts": [asdict(p) for p in plan],
        "dry_run_check": [asdict(f) for f in check],
    }
    (out / "report.json").write_text(json.dumps(report, indent=2))
    (out / "report.md").write_text(markdown(report))
    print(markdown(report), flush=True)
    print(f"[gpu_report] written: {out / 'report.md'}, {out / 'report.json'}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
