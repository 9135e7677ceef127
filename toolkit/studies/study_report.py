"""The answer of a study (``ctk study``): what the store holds for its points (:func:`measured`),
the one table (:func:`study_report`: per domain and metric, the baseline's mean with its 95%
interval, each arm's difference with its interval, the paired t-test by seed, Holm's correction
over every test, a verdict and the minutes per run) and the same differences drawn
(:func:`forest_figure`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from toolkit.studies import stats
from toolkit.studies.study_file import Study
from toolkit.studies.tables import Column, Report, interval, num

__all__ = ["Measured", "measured", "study_report", "forest_figure"]


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
