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
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from toolkit import recipe as rc
from toolkit.studies import stats
from toolkit.studies.tables import Column, Report, interval, num

STUDY_TAG, DOMAIN_TAG, ARM_TAG = "ctk.study", "ctk.study_domain", "ctk.study_arm"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ArmSpec(_Strict):
    """An objective change: ``set`` maps recipe keys to values (``{}``: the recipe as it is)."""

    description: str = ""
    set: dict[str, Any] = Field(default_factory=dict)


class DomainSpec(_Strict):
    """One domain of the study: its recipe (relative to the study file), the metrics of record
    (``max`` / ``min``; empty: the domain's own direction), overrides for every arm (``set``) and
    per-arm overrides that replace the arm's ``set`` in this domain (``arms``)."""

    recipe: str
    metrics: dict[str, Literal["max", "min"] | None] = Field(min_length=1)
    set: dict[str, Any] = Field(default_factory=dict)
    arms: dict[str, dict[str, Any]] = Field(default_factory=dict)


class StudyFile(_Strict):
    name: str = Field(min_length=1)
    description: str = ""
    experiment: str | None = None
    seeds: list[int] = Field(min_length=2)
    baseline: str
    arms: dict[str, ArmSpec | None] = Field(min_length=2)
    domains: dict[str, DomainSpec] = Field(min_length=1)
    alpha: float = Field(0.05, gt=0, lt=1)

    @field_validator("seeds")
    @classmethod
    def _distinct(cls, seeds: list[int]) -> list[int]:
        if len(set(seeds)) != len(seeds) or min(seeds) < 0:
            raise ValueError(f"seeds must be distinct integers >= 0, got {seeds}")
        return seeds


@dataclass
class Study:
    spec: StudyFile
    source: str
    overrides: dict[tuple[str, str], list[str]]  # (domain, arm) -> --set strings
    recipes: dict[str, Path]  # domain -> recipe file
    metrics: dict[str, dict[str, str]]  # domain -> {metric: max | min}
    seeds: list[int] = field(default_factory=list)

    @property
    def experiment(self) -> str:
        return self.spec.experiment or f"study-{self.spec.name}"

    @property
    def arms(self) -> list[str]:
        """The baseline first, then the other arms in file order."""
        return [self.spec.baseline, *(a for a in self.spec.arms if a != self.spec.baseline)]


Loader = Callable[[str, list[str]], Any]  # (recipe path, overrides) -> validated recipe; raises RecipeError


def load_study(path: str | Path, load: Loader, lookup: Callable[[str], Any], seeds: list[int] | None = None) -> Study:
    """Read and validate a study and every (domain, arm) recipe (``lookup``: domain name ->
    domain class); one RecipeError lists every problem with its path in the study file."""
    source = str(path)
    data = rc.load_yaml(path)
    if seeds is not None:
        data = {**data, "seeds": list(seeds)}
    try:
        spec = StudyFile.model_validate(data)
    except ValidationError as exc:
        raise rc.RecipeError(rc.pydantic_problems(exc), source) from None
    problems: list[tuple[str, str]] = []
    if spec.baseline not in spec.arms:
        problems.append(("baseline", f"{spec.baseline!r} is not an arm; expected one of: {', '.join(spec.arms)}"))
    overrides: dict[tuple[str, str], list[str]] = {}
    recipes: dict[str, Path] = {}
    metrics: dict[str, dict[str, str]] = {}
    for name, dom in spec.domains.items():
        where = f"domains.{name}"
        for arm in dom.arms:
            if arm not in spec.arms:
                problems.append(
                    (f"{where}.arms.{arm}", f"not an arm of the study; expected one of: {', '.join(spec.arms)}")
                )
        recipe_path = Path(os.path.normpath(Path(source).parent / dom.recipe))
        if not recipe_path.is_file():
            problems.append((f"{where}.recipe", f"no such file: {recipe_path}"))
            continue
        recipes[name] = recipe_path
        loaded: dict[str, Any] = {}
        for arm, arm_spec in spec.arms.items():
            sets = dom.arms[arm] if arm in dom.arms else (arm_spec.set if arm_spec else {})
            overrides[(name, arm)] = [*rc.overrides_from_mapping(dom.set), *rc.overrides_from_mapping(sets)]
            try:
                recipe = load(str(recipe_path), overrides[(name, arm)])
            except rc.RecipeError as exc:
                why = f"arm {arm!r} does not apply to this recipe" if arm != spec.baseline else "the baseline recipe"
                problems += [(f"{where} ({why})", f"{p}: {m}") for p, m in exc.problems]
                continue
            loaded[arm] = recipe
        if loaded:  # the metric names, read off the baseline's recipe (or any arm's that validated)
            recipe = loaded.get(spec.baseline, next(iter(loaded.values())))
            metrics[name] = _metric_directions(
                recipe, lookup(recipe.domain).result_metrics(recipe), dom, where, problems
            )
    if problems:
        raise rc.RecipeError(problems, source)
    return Study(spec, source, overrides, recipes, metrics, list(spec.seeds))


def _metric_directions(
    recipe: Any, known: dict[str, str] | None, dom: DomainSpec, where: str, problems: list
) -> dict[str, str]:
    """The metrics of record with their direction; unknown names are problems when the domain
    says which metrics it logs (``known``)."""
    out = {}
    for metric, direction in dom.metrics.items():
        if known is not None and metric not in known:
            problems.append(
                (
                    f"{where}.metrics.{metric}",
                    f"a {recipe.domain} run of this recipe does not log it; "
                    f"expected one of: {', '.join(sorted(known))}",
                )
            )
            continue
        direction = direction or (known or {}).get(metric) or ""
        if direction not in ("max", "min"):
            problems.append((f"{where}.metrics.{metric}", "give its better direction: max or min"))
            continue
        out[metric] = direction
    return out


# ---------------------------------------------------------------------------------------
# the points, and the answer


def study_points(study: Study, load: Loader) -> list[tuple[Any, str, str, int]]:
    """``(sweep point, domain, arm, seed)`` for every point of the study, baseline arm first."""
    from toolkit.studies.sweeps import Point
    from toolkit.studies.ui_view import run_note

    out = []
    for domain in study.recipes:
        for arm in study.arms:
            for seed in study.seeds:
                label = f"{domain}/{arm}/s{seed}"
                sets = [
                    *study.overrides[(domain, arm)],
                    f"seed={seed}",
                    f"tracking.experiment={study.experiment}",
                    f"tracking.run_name={label}",
                ]
                recipe = load(str(study.recipes[domain]), sets)
                tags = {
                    STUDY_TAG: study.spec.name,
                    DOMAIN_TAG: domain,
                    ARM_TAG: arm,
                    "mlflow.note.content": run_note(f"study {study.spec.name}, {domain}, arm {arm}", sets[:-2]),
                }
                out.append((Point(label, recipe, [f"seed={seed}"], tags, budget_group=domain), domain, arm, seed))
    return out


@dataclass
class Measured:
    """What the store holds for the study's points: metrics and minutes per (domain, arm, seed)."""

    metrics: dict[tuple[str, str, int], dict[str, float]] = field(default_factory=dict)
    minutes: dict[tuple[str, str, int], float] = field(default_factory=dict)
    runs: dict[tuple[str, str, int], Any] = field(default_factory=dict)  # what else differs


def measured(points: list[tuple[Any, str, str, int]], runs_by_key: dict[str, Any]) -> Measured:
    """The finished runs of the points (``runs_by_key``: :func:`toolkit.studies.sweeps.find_point_runs`)."""
    out = Measured()
    for point, domain, arm, seed in points:
        run = runs_by_key.get(point.key)
        if run is None or run.info.status != "FINISHED":
            continue
        out.metrics[(domain, arm, seed)] = dict(run.data.metrics)
        out.runs[(domain, arm, seed)] = run
        if run.info.end_time and run.info.start_time:
            out.minutes[(domain, arm, seed)] = (run.info.end_time - run.info.start_time) / 60000
    return out


def _verdict(diff: float | None, p_holm: float | None, direction: str, alpha: float, n: int) -> str:
    if diff is None or p_holm is None or not math.isfinite(p_holm):
        return "n/a" if diff is None else f"not tested: the same difference on all {n} seeds"
    if p_holm >= alpha:
        return f"no detectable difference at n={n}"
    return "helps" if (diff > 0) == (direction == "max") else "hurts"


def study_report(study: Study, got: Measured) -> Report:
    """The study's table (see the module's docstring); Holm's correction runs over every
    (domain, metric, arm) test in it."""
    from toolkit.studies.differs import NOTHING, confounds, differs_parts

    base = study.spec.baseline
    records: list[dict[str, Any]] = []

    def runs_of(domain: str, arms: list[str]) -> list[Any]:
        return [r for (d, a, _), r in got.runs.items() if d == domain and a in arms]

    for domain, metric_dirs in study.metrics.items():
        minutes = [m for (d, _, _), m in got.minutes.items() if d == domain]
        per_run = sum(minutes) / len(minutes) if minutes else None
        for metric, direction in metric_dirs.items():

            def values(arm: str, domain=domain, metric=metric) -> tuple[list[float | None], list[int]]:
                return [got.metrics.get((domain, arm, s), {}).get(metric) for s in study.seeds], study.seeds

            b_vals, seeds = values(base)
            summary = stats.summarize(b_vals)
            for arm in study.arms[1:]:
                a_vals, _ = values(arm)
                d = stats.difference(a_vals, b_vals, seeds, seeds)
                if d is not None and d.test == "paired" and d.low == d.high:
                    # the same shift on every seed (common with accuracies on a few hundred
                    # points): the t statistic is undefined, and a p of 0 would claim certainty
                    d = stats.Difference(d.diff, d.low, d.high, math.nan, "degenerate", d.n)
                records.append(
                    {
                        "domain": domain,
                        "metric": metric,
                        "direction": direction,
                        "arm": arm,
                        "n": d.n if d else 0,
                        "baseline_mean": summary and summary.mean,
                        "baseline_low": summary and summary.low,
                        "baseline_high": summary and summary.high,
                        "arm_mean": _mean(a_vals),
                        "diff": d and d.diff,
                        "diff_low": d and d.low,
                        "diff_high": d and d.high,
                        "p": d and d.p,
                        "test": d.test if d else "n<2",
                        "p_holm": None,
                        "minutes_per_run": per_run,
                        "confounded": confounds(runs_of(domain, [base, arm])),
                    }
                )
    tested = [r for r in records if r["p"] is not None and math.isfinite(r["p"])]
    for rec, adj in zip(tested, stats.holm([r["p"] for r in tested])):
        rec["p_holm"] = adj
    for rec in records:
        rec["verdict"] = _verdict(rec["diff"], rec["p_holm"], rec["direction"], study.spec.alpha, rec["n"]) + (
            f" (confounded: {rec['confounded']})" if rec["confounded"] else ""
        )
    columns = [
        Column("domain", lambda r: r["domain"]),
        Column("metric", lambda r: r["metric"]),
        Column("arm", lambda r: r["arm"]),
        Column("n", lambda r: str(r["n"])),
        Column(f"{base} mean", lambda r: num(r["baseline_mean"]), "base"),
        Column(f"{base} 95% CI", lambda r: interval(r["baseline_low"], r["baseline_high"]), "base CI"),
        Column("diff", lambda r: num(r["diff"])),
        Column(
            "diff 95% CI", lambda r: "-" if r["diff"] is None else interval(r["diff_low"], r["diff_high"]), "diff CI"
        ),
        Column("p", lambda r: num(r["p"], 2)),
        Column("p (Holm)", lambda r: num(r["p_holm"], 2), "p_holm"),
        Column("verdict", lambda r: r["verdict"]),
        Column("min/run", lambda r: num(r["minutes_per_run"], 2), "min"),
    ]
    fields = [
        "domain",
        "metric",
        "direction",
        "arm",
        "n",
        "baseline_mean",
        "baseline_low",
        "baseline_high",
        "arm_mean",
        "diff",
        "diff_low",
        "diff_high",
        "p",
        "test",
        "p_holm",
        "verdict",
        "minutes_per_run",
        "confounded",
    ]
    # per domain, between its arms: domains are never compared with each other
    parts = [
        f"{d}: {part}" for d in study.metrics for part in differs_parts([(a, runs_of(d, [a])) for a in study.arms])
    ]
    line = f"what else differs: {'; '.join(parts)}" if parts else NOTHING
    notes = [
        line,
        f"diff = arm - {base} over the seeds {study.seeds}; t-test paired by seed; Holm's correction over "
        f"the {len(tested)} tests of this study; verdict at alpha {study.spec.alpha} in each metric's "
        "better direction (max / min)",
        "95% CI: Student t interval over seeds (n-1 degrees of freedom); min/run: mean wall minutes of a "
        "run of that domain",
    ]
    title = f"study {study.spec.name}: {', '.join(study.arms[1:])} vs {base} in {len(study.metrics)} domains"
    return Report(title, fields, records, columns, key_columns=3, notes=notes, meta={"differs": line})


def _mean(values: list[float | None]) -> float | None:
    summary = stats.summarize(values)
    return summary.mean if summary else None


def forest_figure(report: Report) -> Any:
    """Each arm's difference to the baseline with its 95% interval, one line per (domain,
    metric, arm), as a share of the baseline's mean so that domains of different units share an
    axis (the table has the absolute figures)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in report.records if r["diff"] is not None and r["baseline_mean"]]
    fig, ax = plt.subplots(figsize=(7.0, 0.5 * len(rows) + 1.5))
    for i, r in enumerate(reversed(rows)):
        scale = 100.0 / abs(r["baseline_mean"])
        low = (r["diff_low"] if r["diff_low"] is not None else r["diff"]) * scale
        high = (r["diff_high"] if r["diff_high"] is not None else r["diff"]) * scale
        good = (r["diff"] > 0) == (r["direction"] == "max")
        color = (
            "tab:green"
            if r["verdict"].startswith("helps")
            else "tab:red"
            if r["verdict"].startswith("hurts")
            else "tab:gray"
        )
        ax.plot([low, high], [i, i], color=color, lw=2)
        ax.plot([r["diff"] * scale], [i], "o", color=color, ms=6 if good else 5)
    ax.axvline(0.0, color="black", lw=0.8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{r['domain']} {r['metric']} ({r['arm']})" for r in reversed(rows)])
    ax.set_xlabel("difference to the baseline, % of the baseline's mean (95% CI)")
    ax.set_title(report.title, fontsize=9)
    fig.tight_layout()
    return fig


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
