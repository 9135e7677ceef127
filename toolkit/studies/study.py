"""``ctk study``: one contrastive idea against its baseline in every domain, one table.

A study file names the *arms* (objective changes written as recipe overrides, one of them the
baseline), the *domains* (a recipe each, its metrics of record with their better direction, and
optional per-domain overrides), and the seeds. Every (domain, arm) recipe is validated before
anything runs, all problems listed at once. Every (domain, arm, seed) point then runs through
the sweep machinery (:func:`toolkit.studies.launch.run_sweep`: one parent run, a child per
point, finished points skipped on a re-run, killed ones resumed, failures isolated).

The answer is one table: per domain and metric, the baseline's mean with its 95% interval, each
arm's difference to the baseline with its interval, the p-value of the t-test paired by seed,
the Holm-corrected p over every test of the study, a verdict (helps / hurts / no detectable
difference at this n) and the minutes per run. ``forest_figure`` draws the same differences.

Here: running a study and the command; the study file and its points are
:mod:`toolkit.studies.study_file`'s, the table and the figure :mod:`toolkit.studies.study_report`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from toolkit.studies.study_file import Loader, Study, load_study, study_points
from toolkit.studies.study_report import forest_figure, measured, study_report
from toolkit.studies.tables import Report

__all__ = ["run_study", "study_command"]


def run_study(
    study: Study,
    load: Loader,
    lookup: Callable[[str], Any],
    *,
    jobs: int = 1,
    address: str | None = None,
    retry_failed: bool = False,
    cpus: float | None = None,
    gpus: float | None = None,
    progress: bool = True,
    echo: Callable[[str], None] = print,
) -> tuple[int, Report, str]:
    """Run (or re-use) every point, then build the table; it is logged to the study's parent run
    (``study/table.md``, ``study/table.json``, ``study/forest.png``). Returns (exit code as
    :func:`~toolkit.studies.launch.run_sweep`'s, the report, the parent run id)."""
    from toolkit.studies.launch import run_sweep
    from toolkit.studies.sweeps import find_point_runs, parent_run_id
    from toolkit.studies.tables import render
    from toolkit.tracking.store import client_for, tracking_uri

    points = study_points(study, load)
    started = time.time()
    grid = {"study": study.source, "arms": study.arms, "domains": list(study.recipes), "seeds": study.seeds}
    code, _ = run_sweep(
        [p for p, *_ in points],
        lookup,
        experiment=study.experiment,
        parent_name=f"study-{study.spec.name}",
        grid=grid,
        jobs=jobs,
        address=address,
        retry_failed=retry_failed,
        cpus=cpus,
        gpus=gpus,
        progress=progress,
        echo=echo,
    )
    client = client_for(tracking_uri(points[0][0].recipe.tracking.uri))
    report = study_report(study, measured(points, find_point_runs(client, study.experiment)))
    parent = parent_run_id(client, study.experiment, f"study-{study.spec.name}")
    if parent is not None:
        client.log_text(parent, render(report, "markdown"), "study/table.md")
        client.log_text(parent, render(report, "json"), "study/table.json")
        fig = forest_figure(report)
        client.log_figure(parent, fig, "study/forest.png")
        import matplotlib.pyplot as plt

        plt.close(fig)
        client.log_metric(parent, "study/wall_minutes", (time.time() - started) / 60)
    return code, report, parent or ""


def study_command(
    path: str,
    seeds: str | None,
    fmt: str,
    plot: str | None,
    dry_run: bool,
    load: Loader,
    lookup: Callable[[str], Any],
    out: Callable[[str], None],
    err: Callable[[str], None],
    *,
    progress: bool = True,
    width: int | None = None,
    **launch: Any,
) -> int:
    """``ctk study``: load and check the study (a RecipeError, exit status 2, lists every
    problem), list its points (``dry_run``) or run them and print the table; the exit status."""
    from toolkit.errors import CtkError
    from toolkit.studies.tables import render

    try:
        chosen = [int(s) for s in seeds.split(",")] if seeds else None
    except ValueError:
        raise CtkError(f"--seeds {seeds!r}: expected integers separated by commas, e.g. 0,1,2", 2) from None
    study = load_study(path, load, lookup, chosen)
    if dry_run:
        out(
            f"study {study.spec.name}: {len(study.recipes)} domains x {len(study.arms)} arms x "
            f"{len(study.seeds)} seeds, experiment {study.experiment!r}; every recipe is valid"
        )
        for (domain, arm), sets in study.overrides.items():
            out(f"  {domain:<14} {arm:<12} {study.recipes[domain]} {' '.join(sets) or '(as written)'}")
        return 0
    code, report, _ = run_study(study, load, lookup, progress=progress, echo=err, **launch)
    out(render(report, fmt, width if fmt == "table" else None))
    if plot:
        forest_figure(report).savefig(plot, dpi=120)
        err(f"forest plot: {plot}")
    return code
