"""How far ``budget.minutes`` wobbles: the step count it fixes, over N calibrations of one recipe.

Each calibration runs in a fresh process, as ``ctk run`` would: the recipe (the vision quickstart
by default) is loaded and validated, ``precision: auto`` resolved for this machine, the trainer
built, and ``Pretrainer.fit`` started: the first online monitor (timed: ``budget.minutes``
charges the monitors the steps reach), then the calibration, which fixes the run's length; a
hook stops the run after its first real step. Nothing is logged (a tracker that keeps the params
in memory). Prints each calibration's steps and ms/step, then the spread of the step count (min,
max, median, max/min) and the machine (CPU model, ``torch.backends.cpu.get_cpu_capability()``,
native bf16 or not) with the load average before and after, and for each calibration the CPU
that other processes used meanwhile (in cores, from /proc/stat less this benchmark's own
children): measure on an idle machine, and distrust a run where others used a core.

    python bench/budget_calibration.py [--runs 10] [--recipe recipes/vision/quickstart.yaml] [--set key=value ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
QUICKSTART = ROOT / "recipes" / "vision" / "quickstart.yaml"
QUIET_CORES = 0.1  # a calibration during which other processes used less is summarised apart


class _Stop(Exception):
    """Raised by the hook after the first real step: the calibration is done by then."""


def _params_keeper():
    """A run log that keeps the params it is given (the fixed steps) and drops the rest."""
    try:
        from toolkit.tracking.runlog import RunLog
    except ImportError:  # a checkout from before the run log (what "before" was measured on)

        class RunLog:  # type: ignore[no-redef]
            def __getattr__(self, name):
                return lambda *args, **kwargs: None

    class _Params(RunLog):
        def __init__(self) -> None:
            self.params: dict[str, object] = {}

        def log_params(self, params) -> None:
            self.params.update(params)

    return _Params()


def _domains():
    """The domain lookup (domains.installed; domains.registry on a checkout from before the rename)."""
    try:
        from domains import installed
    except ImportError:
        from domains import registry as installed
    return installed.get


def one(recipe_path: str, sets: list[str]) -> dict[str, object]:
    """One calibration in this process: {steps, ms_per_step, seconds}."""
    from toolkit import runs
    from toolkit.training.trainer import RunOptions

    start = time.perf_counter()
    recipe = runs.load_recipe(recipe_path, sets, _domains())
    if not recipe.budget.minutes:
        raise SystemExit(f"{recipe_path}: no budget.minutes to calibrate")
    if hasattr(runs, "decide"):  # device and precision decided as ctk run decides them
        plan = runs.decide(recipe)
        recipe, device = plan.recipe, plan.device
    else:  # a checkout from before toolkit.runs.decide (what "before" was measured on)
        from toolkit.training.trainer import select_device

        device = select_device(recipe.device)
        runs.resolve_precision(recipe, device, recipe.domain_class, announce=False)
    tracker = _params_keeper()
    seen: dict[str, object] = {}
    _record_calibration(seen)

    def hook(step: int) -> None:
        raise _Stop

    trainer = recipe.domain_class(recipe).trainer(
        recipe, tracker, RunOptions(device=device, progress=False, hooks=[hook])
    )
    built = time.perf_counter()
    try:
        trainer.fit()
    except _Stop:
        pass
    p = tracker.params
    steps = p.get("measured.budget_steps_fixed", p.get("budget_steps_fixed"))
    ms = p.get("measured.budget_ms_per_step", p.get("budget_ms_per_step"))
    return {
        "steps": int(steps),
        "ms_per_step": float(ms),
        "build_s": built - start,
        "calibration_s": time.perf_counter() - built,
        "precision": recipe.precision,
        "minutes": recipe.budget.minutes,
        "monitor_every": recipe.budget.monitor_every,
        **seen,
    }


def _record_calibration(seen: dict[str, object]) -> None:
    """Keep what the calibration measured in ``seen``: every timed block's seconds per step
    (``blocks``) and the first monitor's seconds (``monitor_s``), where this checkout exposes them."""
    from toolkit.training import budget, pretrainer

    if hasattr(budget, "block_times"):
        timed = budget.block_times

        def block_times(trainer):
            seen["blocks"] = timed(trainer)
            return seen["blocks"]

        budget.block_times = block_times
    fix = pretrainer.fix_steps_from_speed

    def fix_steps(trainer, monitor_seconds):
        seen["monitor_s"] = monitor_seconds
        return fix(trainer, monitor_seconds)

    pretrainer.fix_steps_from_speed = fix_steps


def estimators(results: list[dict[str, object]]) -> None:
    """The step count each way of reading the same timed blocks would have fixed, and its spread
    over the calibrations: is another estimator steadier than the one in use?"""
    from toolkit.training.budget import steps_that_fit

    ways = {
        "median block": statistics.median,
        "fastest block": min,
        "mean of the fastest half": lambda b: statistics.fmean(sorted(b)[: max(1, len(b) // 2)]),
    }
    for name, way in ways.items():
        steps = [
            steps_that_fit(r["minutes"] * 60.0, way(r["blocks"]), r["monitor_every"], r["monitor_s"]) for r in results
        ]
        print(f"  {name:<26} steps min {min(steps):,}, max {max(steps):,}, max/min {max(steps) / min(steps):.3f}")
    monitor = [r["monitor_s"] for r in results]
    print(f"  the first monitor: {min(monitor):.2f}-{max(monitor):.2f} s (max/min {max(monitor) / min(monitor):.3f})")


def _busy_seconds() -> float:
    """CPU seconds every process of the machine has spent (user, nice, system, irq...; /proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _self_seconds() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _children_seconds() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def same_process(recipe_path: str, sets: list[str], runs: int) -> None:
    """``runs`` calibrations of one trainer in this process (``toolkit.training.budget.speed``,
    state put back after each): is the spread in the process, or between processes?"""
    from toolkit.runs import decide, load_recipe
    from toolkit.training import budget
    from toolkit.training.trainer import RunOptions

    p = decide(load_recipe(recipe_path, sets, _domains()))
    trainer = p.domain(p.recipe).trainer(p.recipe, None, RunOptions(device=p.device, progress=False))
    ms = []
    for i in range(runs):
        busy, mine, wall = _busy_seconds(), _self_seconds(), time.perf_counter()
        ms.append(budget.speed(trainer) * 1e3)
        others = max(0.0, (_busy_seconds() - busy) - (_self_seconds() - mine)) / (time.perf_counter() - wall)
        print(f"  {i + 1:>2}: {ms[-1]:7.2f} ms/step, others used {others:.2f} cores", flush=True)
    print(
        f"ms/step in one process: min {min(ms):.2f}, max {max(ms):.2f}, median {statistics.median(ms):.2f}, "
        f"max/min {max(ms) / min(ms):.3f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--recipe", default=str(QUICKSTART))
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument(
        "--same-process", action="store_true", help="calibrate one trainer --runs times in this process (ms/step only)"
    )
    args = ap.parse_args()
    if args.same_process:
        same_process(args.recipe, args.sets, args.runs)
        return
    if args.one:
        print(json.dumps(one(args.recipe, args.sets)), flush=True)
        return

    import torch

    from toolkit.training.precision import cpu_bf16, cpu_model

    bf16 = cpu_bf16()
    print(
        f"CPU: {cpu_model()}, {os.cpu_count()} cores; torch {torch.__version__}, "
        f"get_cpu_capability() {torch.backends.cpu.get_cpu_capability()}, bf16 "
        f"{'native' if bf16.native else 'not native'} ({bf16.feature})"
    )
    print(f"recipe: {args.recipe} {' '.join(args.sets)}; {args.runs} calibrations, each in a fresh process")
    load_before = os.getloadavg()
    results = []
    for i in range(args.runs):
        cmd = [
            sys.executable,
            __file__,
            "--one",
            "--recipe",
            args.recipe,
            *(a for s in args.sets for a in ("--set", s)),
        ]
        busy, mine, wall = _busy_seconds(), _children_seconds(), time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=os.getcwd())
        others = max(0.0, (_busy_seconds() - busy) - (_children_seconds() - mine)) / (time.perf_counter() - wall)
        if out.returncode != 0:
            raise SystemExit(f"calibration {i} failed:\n{out.stderr[-3000:]}")
        r = json.loads(out.stdout.strip().splitlines()[-1])
        results.append(r)
        print(
            f"  {i + 1:>2}: {r['steps']:>6} steps, {r['ms_per_step']:7.2f} ms/step ({r['precision']}), "
            f"calibration {r['calibration_s']:.1f} s, others used {others:.2f} cores, load "
            f"{os.getloadavg()[0]:.2f}",
            flush=True,
        )
        r["others"] = others
    steps = [r["steps"] for r in results]
    ms = [r["ms_per_step"] for r in results]
    print(
        f"steps: min {min(steps):,}, max {max(steps):,}, median {statistics.median(steps):,.0f}, "
        f"max/min {max(steps) / min(steps):.3f}"
    )
    print(f"ms/step: min {min(ms):.2f}, max {max(ms):.2f}, median {statistics.median(ms):.2f}")
    print(
        f"other processes: at most {max(r['others'] for r in results):.2f} cores during a calibration "
        f"(median {statistics.median(r['others'] for r in results):.2f})"
    )
    if all("blocks" in r and "monitor_s" in r for r in results):
        print("the same timed blocks, read other ways:")
        estimators(results)
    quiet = [r["steps"] for r in results if r["others"] < QUIET_CORES]
    if 1 < len(quiet) < len(results):
        print(
            f"the {len(quiet)} calibrations while others used < {QUIET_CORES} cores: min {min(quiet):,}, "
            f"max {max(quiet):,}, median {statistics.median(quiet):,.0f}, max/min {max(quiet) / min(quiet):.3f}"
        )
    print(
        f"load average (1/5/15 min): before {'/'.join(f'{x:.2f}' for x in load_before)}, "
        f"after {'/'.join(f'{x:.2f}' for x in os.getloadavg())}"
    )


if __name__ == "__main__":
    main()
