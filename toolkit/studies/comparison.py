"""``ctk compare``: the runs of an experiment grouped by the settings that vary between them
(seed aside; never by what a run measured or ran on: :mod:`toolkit.tracking.measured`), each
group summarised per metric (mean, std, n, Student-t 95% interval), optionally tested against a
baseline group (paired by seed or Welch, Holm-corrected over the whole table); under the table,
what else differs between the runs (:mod:`toolkit.studies.differs`), with groups and tests whose
runs differ in steps, precision or commit marked confounded (``strict``: refused); plus the
series behind ``--plot`` (metric against a numeric swept key) and ``--curves`` (learning
curves, mean and band over seeds).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from toolkit.errors import CtkError
from toolkit.studies import stats
from toolkit.studies.differs import confounds, differing, differs_line
from toolkit.studies.runsets import (
    eval_metrics,
    run_seed,
    split_parents,
    varying_params,
)
from toolkit.studies.tables import Column, Report, interval, num, render
from toolkit.studies.ui_view import publish_view
from toolkit.tracking.measured import split_params
from toolkit.tracking.store import client_for, find_experiment, reading_client


class ComparisonError(CtkError, ValueError):
    """Nothing to compare, plot or test as asked; the message says what there is (exit status 1)."""


@dataclass
class Group:
    values: tuple[str, ...]  # one per ``Comparison.by`` key
    label: str
    runs: list[Any]

    def metric(self, name: str) -> list[float | None]:
        return [r.data.metrics.get(name) for r in self.runs]

    @property
    def seeds(self) -> list[str | None]:
        return [run_seed(r) for r in self.runs]


@dataclass
class Comparison:
    experiment: str
    experiment_id: str
    uri: str
    by: list[str]
    metrics: list[str]
    groups: list[Group]
    parents: list[Any] = field(default_factory=list)  # sweep parent runs (tag mlflow.parentRunId)
    notes: list[str] = field(default_factory=list)

    def group(self, text: str) -> Group:
        """The group named by ``text``: its label, its values ('0.1' or '0.1,nt_xent') or
        'key=value' pairs with full or short keys."""
        want = _norm(text)
        for g in self.groups:
            names = {
                g.label,
                ",".join(g.values),
                "/".join(g.values),
                ",".join(f"{k}={v}" for k, v in zip(self.by, g.values)),
            }
            if want in {_norm(n) for n in names}:
                return g
        raise ComparisonError(
            f"--baseline {text!r} is not a group of {self.experiment!r}; expected one "
            f"of: {', '.join(repr(g.label) for g in self.groups)}"
        )


def _norm(text: str) -> str:
    return re.sub(r"\s+", "", text)


def short_names(keys: list[str]) -> dict[str, str]:
    """``objective.loss.temperature`` -> ``temperature``, ``objective.loss.name`` -> ``loss``;
    more components when two collide."""
    out: dict[str, str] = {}
    for k in keys:
        parts = k.split(".")
        if len(parts) > 1 and parts[-1] == "name":  # a component's name: call it by the component
            parts = parts[:-1]
        n = 1
        while n < len(parts) and sum(1 for o in keys if o.split(".")[-n:] == parts[-n:]) > 1:
            n += 1
        out[k] = ".".join(parts[-n:])
    if len(set(out.values())) < len(out):  # still ambiguous: the full keys
        return {k: k for k in keys}
    return out


def _sort_key(values: tuple[str, ...]) -> tuple:
    """Numbers in numeric order, then text."""
    out = []
    for v in values:
        try:
            out.append((0, float(v), ""))
        except (TypeError, ValueError):
            out.append((1, 0.0, str(v)))
    return tuple(out)


def collect(
    experiment: str,
    uri: str | None = None,
    by: list[str] | None = None,
    metrics: list[str] | None = None,
    per_run: bool = False,
) -> Comparison:
    """Read ``experiment`` and group its finished runs (parents of a sweep left out)."""
    client = reading_client(uri)
    exp = find_experiment(client, experiment, uri)
    children, parents = split_parents(client.search_runs([exp.experiment_id], max_results=5000))
    runs = [r for r in children if r.info.status == "FINISHED"]
    notes = []
    if len(runs) < len(children):
        states = sorted({r.info.status for r in children if r.info.status != "FINISHED"})
        notes.append(f"{len(children) - len(runs)} run(s) not finished ({', '.join(states)}) are left out")
    if not runs:
        raise ComparisonError(f"experiment {experiment!r} has no finished runs")
    values = {r.info.run_id: _values(r) for r in runs}  # settings and measurements (new names)
    known = sorted({k for v in values.values() for k in v})
    for k in by or []:
        if k not in known:
            raise ComparisonError(
                f"--by {k!r} is not a recipe key of the runs in {experiment!r}; "
                f"swept keys: {', '.join(varying_params(runs)) or 'none'}"
            )
    keys = list(by) if by else varying_params(runs)
    metrics = list(metrics) if metrics else eval_metrics(runs)
    shorts = short_names(keys)
    grouped: dict[tuple[str, ...], list[Any]] = {}
    for r in runs:
        key = (r.info.run_name or r.info.run_id,) if per_run else tuple(values[r.info.run_id].get(k, "") for k in keys)
        grouped.setdefault(key, []).append(r)
    groups = []
    for values, members in sorted(grouped.items(), key=lambda kv: _sort_key(kv[0])):
        label = values[0] if per_run else (", ".join(f"{shorts[k]}={v}" for k, v in zip(keys, values)) or "all runs")
        groups.append(Group(values, label, members))
    return Comparison(
        experiment,
        exp.experiment_id,
        client.tracking_uri,
        ["run"] if per_run else keys,
        metrics,
        groups,
        parents,
        notes,
    )


def _values(run: Any) -> dict[str, str]:
    settings, found = split_params(run.data.params, run.data.tags)
    return {**settings, **found}


# ---------------------------------------------------------------------------------------
# the table


def compare_report(comp: Comparison, baseline: str | None = None, alpha: float = 0.05, strict: bool = False) -> Report:
    """One record per (group, metric); with ``baseline`` the difference to the baseline
    group, its interval, the p-value and the Holm-adjusted p-value over every test in the
    table (significant: adjusted p < ``alpha``). Each record says what else differs among its
    runs (``differs``; a test's runs are the group's and the baseline's) and which of that can
    change the result (``confounded``); ``strict`` raises ComparisonError instead of comparing
    runs that differ in steps, precision or commit."""
    base = comp.group(baseline) if baseline else None
    every = [(g.label, g.runs) for g in comp.groups]
    line = differs_line(every)
    if strict:
        mixed = confounds([r for g in comp.groups for r in g.runs])
        if mixed:
            raise ComparisonError(
                f"--strict: the runs of {comp.experiment!r} differ in what can change the result "
                f"({mixed}); nothing was tested. {line}. Train them alike (a sweep fixes one step count "
                "for every point; --set budget.steps=N and --precision fix them by hand) or drop --strict"
            )
    records: list[dict[str, Any]] = []
    for metric in comp.metrics:
        for g in comp.groups:
            s = stats.summarize(g.metric(metric))
            if s is None:
                continue
            rec: dict[str, Any] = dict(zip(comp.by, g.values))
            rec.update(group=g.label, metric=metric, n=s.n, mean=s.mean, std=s.std, ci_low=s.low, ci_high=s.high)
            pool = g.runs if base is None or g is base else g.runs + base.runs
            found = differing(pool)
            rec.update(differs="; ".join(f"{k} {v}" for k, v in found.items()) or None, confounded=confounds(pool))
            if base is not None:
                d = None if g is base else stats.difference(g.metric(metric), base.metric(metric), g.seeds, base.seeds)
                rec.update(
                    diff=d and d.diff,
                    diff_low=d and d.low,
                    diff_high=d and d.high,
                    p=d and d.p,
                    test=d.test if d else ("baseline" if g is base else "n<2"),
                    p_holm=None,
                    significant=None,
                )
            records.append(rec)
    if base is not None:
        tested = [r for r in records if r["p"] is not None and math.isfinite(r["p"])]
        for rec, adj in zip(tested, stats.holm([r["p"] for r in tested])):
            rec["p_holm"] = adj
            rec["significant"] = bool(adj < alpha)
    shorts = short_names(comp.by)
    columns = [Column(k, lambda r, k=k: str(r.get(k, "")), shorts.get(k)) for k in comp.by]
    columns += [
        Column("metric", lambda r: r["metric"]),
        Column("n", lambda r: str(r["n"])),
        Column("mean", lambda r: num(r["mean"])),
        Column("std", lambda r: num(r["std"], 2)),
        Column("95% CI", lambda r: interval(r["ci_low"], r["ci_high"]), "CI"),
    ]
    fields = [*comp.by, "group", "metric", "n", "mean", "std", "ci_low", "ci_high"]
    notes = [line, *comp.notes]
    if base is not None:
        columns += [
            Column(f"diff vs {base.label}", lambda r: num(r["diff"]), "diff"),
            Column(
                "diff 95% CI",
                lambda r: "-" if r["diff"] is None else interval(r["diff_low"], r["diff_high"]),
                "diff CI",
            ),
            Column("p", lambda r: num(r["p"], 2)),
            Column("test", lambda r: r["test"]),
            Column("p (Holm)", lambda r: num(r["p_holm"], 2), "p_holm"),
            Column("sig", lambda r: "*" if r["significant"] else ""),
        ]
        fields += ["diff", "diff_low", "diff_high", "p", "test", "p_holm", "significant"]
        notes.append(
            f"diff = group - baseline ({base.label}); paired t-test where the seeds match, "
            f"Welch otherwise; * = Holm-adjusted p < {alpha} over the "
            f"{sum(1 for r in records if r['p_holm'] is not None)} tests of this table"
        )
    if any(r["confounded"] for r in records):
        columns.append(Column("note", lambda r: f"confounded: {r['confounded']}" if r["confounded"] else ""))
        notes.append(
            "confounded: the runs behind that row (a test's: the group's and the baseline's) differ "
            "in steps trained, precision or commit, so the difference mixes those in; "
            "--strict refuses to compare them"
        )
    fields += ["confounded", "differs"]
    notes.append("95% CI: Student t interval of the mean over seeds (n-1 degrees of freedom)")
    n = len(comp.groups)
    title = (
        f"{comp.experiment}: {n} group{'s' if n != 1 else ''} by {', '.join(comp.by)}"
        if comp.by
        else f"{comp.experiment}: {n} group{'s' if n != 1 else ''}; no setting differs (seed aside)"
    )
    return Report(title, fields, records, columns, key_columns=len(comp.by) + 1, notes=notes, meta={"differs": line})


def comparison_text(
    experiment: str,
    uri: str | None,
    fmt: str,
    width: int | None,
    baseline: str | None = None,
    strict: bool = False,
    **kwargs: Any,
) -> tuple[str, Comparison]:
    """``ctk compare``'s output: the rendered report (``kwargs`` go to :func:`collect`); the
    experiment's mlflow columns view is refreshed on the way."""
    comp = collect(experiment, uri, **kwargs)
    text = render(compare_report(comp, baseline, strict=strict), fmt, width)
    publish_view(client_for(uri), comp.experiment)
    return text, comp


# ---------------------------------------------------------------------------------------
# the series behind the figures


def numeric_key(comp: Comparison, x: str | None = None) -> str:
    """The swept key to plot against: ``x``, else the numeric key with the most values."""
    candidates = []
    for i, k in enumerate(comp.by):
        values = {g.values[i] for g in comp.groups}
        try:
            [float(v) for v in values]
        except ValueError:
            continue
        candidates.append((len(values), k))
    if x is not None:
        if x not in [k for _, k in candidates]:
            raise ComparisonError(
                f"--x {x!r}: expected a numeric swept key, one of: {', '.join(k for _, k in candidates) or 'none'}"
            )
        return x
    if not candidates:
        raise ComparisonError(
            f"--plot: no numeric swept key among {', '.join(comp.by) or 'none'} "
            "(sweep a number, e.g. objective.loss.temperature)"
        )
    return max(candidates)[1]


def sweep_series(comp: Comparison, metric: str, x: str) -> dict[str, list[tuple[float, stats.Summary]]]:
    """line label (the other swept keys: the method) -> [(x value, summary over seeds)]."""
    i = comp.by.index(x)
    others = [j for j in range(len(comp.by)) if j != i]
    shorts = short_names([comp.by[j] for j in others])
    lines: dict[str, list[tuple[float, stats.Summary]]] = {}
    for g in comp.groups:
        label = ", ".join(f"{shorts[comp.by[j]]}={g.values[j]}" for j in others) or metric
        s = stats.summarize(g.metric(metric))
        if s is not None:
            lines.setdefault(label, []).append((float(g.values[i]), s))
    return {k: sorted(v, key=lambda p: p[0]) for k, v in lines.items()}


def curve_series(comp: Comparison, metric: str) -> dict[str, tuple[list[int], list[stats.Summary]]]:
    """group label -> (steps, summary over the group's runs at each step) of ``metric``."""
    client = client_for(comp.uri)
    out = {}
    for g in comp.groups:
        by_step: dict[int, list[float]] = {}
        for r in g.runs:
            for m in client.get_metric_history(r.info.run_id, metric):
                by_step.setdefault(m.step, []).append(m.value)
        steps = sorted(by_step)
        sums = [stats.summarize(by_step[s]) for s in steps]
        kept = [(s, x) for s, x in zip(steps, sums) if x is not None]
        if kept:
            out[g.label] = ([s for s, _ in kept], [x for _, x in kept])
    if not out:
        raise ComparisonError(
            f"--curves {metric!r}: no run of {comp.experiment!r} logged it; "
            f"metrics: {', '.join(sorted({k for g in comp.groups for r in g.runs for k in r.data.metrics}))}"
        )
    return out


def write_figure(
    comp: Comparison, path: str | None, x: str | None = None, curves: str | None = None
) -> tuple[str, list[str]]:
    """Draw the first metric against the swept key ``x`` (or, with ``curves``, that metric's
    learning curves), save it as ``path`` (default ``curves-<metric>.png``) and log it to the
    sweep's parent run(s); returns the path and the parent run ids it was logged to."""
    from toolkit.evaluation.plots import band_figure

    if curves:
        series = {label: list(zip(steps, sums)) for label, (steps, sums) in curve_series(comp, curves).items()}
        fig = band_figure(series, "step", curves, title=f"{comp.experiment}: {curves} (mean, 95% CI over seeds)")
        path = path or "curves-" + re.sub(r"[^A-Za-z0-9._-]+", "_", curves) + ".png"
    else:
        if not comp.metrics:
            raise ComparisonError(f"--plot: experiment {comp.experiment!r} has no evaluation metric")
        key = numeric_key(comp, x)
        metric = comp.metrics[0]
        series = sweep_series(comp, metric, key)
        if not series:
            raise ComparisonError(f"--plot: no finished run of {comp.experiment!r} has {metric!r}")
        fig = band_figure(series, key, metric, title=f"{comp.experiment}: {metric} (mean, 95% CI over seeds)")
    fig.savefig(path, dpi=120)
    client = client_for(comp.uri)
    logged = []
    for parent in comp.parents:
        client.log_artifact(parent.info.run_id, path, "figures")
        logged.append(parent.info.run_id)
    return path, logged


def figure_line(path: str, logged: list[str]) -> str:
    """What ``ctk compare --plot/--curves`` says about the figure :func:`write_figure` wrote."""
    where = (
        f"; logged to parent run(s) {', '.join(logged)}"
        if logged
        else " (the experiment has no parent run to log it to)"
    )
    return f"figure: {path}{where}"
