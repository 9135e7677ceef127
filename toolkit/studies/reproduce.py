"""``ctk reproduce``: paper tables defined in ``recipes/<domain>/tables/`` and the report that
puts the measured numbers (mean, std, n, Student-t 95% interval over seeds) beside the
paper's, with a verdict per row: the measured interval, widened by the paper's printed
precision, contains the paper's number, or lies above or below it. A table measured on
another dataset than the paper's (``dataset_differs``) shows its numbers as context, with no
verdict. Below the numbers, the claims the paper draws from the table
(:mod:`toolkit.studies.claims`), each tested over seeds. ``ctk compare`` lives in
:mod:`toolkit.studies.comparison`; both render through :mod:`toolkit.studies.tables`."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from toolkit import recipe as rc
from toolkit.errors import CtkError
from toolkit.studies import claims as claims_mod
from toolkit.studies import stats
from toolkit.studies.tables import Column, Report, interval, num, render

# ---------------------------------------------------------------------------------------
# reproduce


@dataclass
class TableRow:
    label: str
    recipe: Path
    overrides: list[str]
    paper: dict[str, float]
    printed: dict[str, str] = field(default_factory=dict)  # the paper's numbers as written


@dataclass
class PaperTable:
    name: str
    title: str
    paper: str
    seeds: list[int]
    metrics: list[str]
    rows: list[TableRow]
    path: Path
    notes: str = ""
    measured: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    claims: list[claims_mod.Claim] = field(default_factory=list)
    dataset_differs: str = ""  # why the paper's numbers get no verdict (measured elsewhere)
    measured_seeds: dict[str, dict[str, list[int]]] = field(default_factory=dict)


def _printed_numbers(path: Path) -> dict[int, dict[str, str]]:
    """row index -> metric -> the paper's number as written in the file (its precision)."""
    try:
        root = yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except (OSError, yaml.YAMLError):
        return {}
    out: dict[int, dict[str, str]] = {}
    rows = next((v for k, v in getattr(root, "value", []) if k.value == "rows"), None)
    for i, row in enumerate(getattr(rows, "value", []) or []):
        paper = next((v for k, v in getattr(row, "value", []) if getattr(k, "value", None) == "paper"), None)
        for k, v in getattr(paper, "value", []) or []:
            if isinstance(v, yaml.ScalarNode):
                out.setdefault(i, {})[str(k.value)] = str(v.value)
    return out


def load_table(path: str | Path) -> PaperTable:
    p = Path(path)
    data = rc.load_yaml(p)
    problems = []
    for key in ("name", "title", "rows", "metrics"):
        if key not in data:
            problems.append((key, "required key is missing"))
    if problems:
        raise rc.RecipeError(problems, str(p))
    printed = _printed_numbers(p)
    rows = []
    for i, row in enumerate(data["rows"]):
        if not isinstance(row, dict) or "recipe" not in row or "label" not in row:
            raise rc.RecipeError([(f"rows.{i}", "expected a mapping with label and recipe")], str(p))
        sets = row.get("set") or {}
        rows.append(
            TableRow(
                str(row["label"]),
                (p.parent / row["recipe"]).resolve(),
                rc.overrides_from_mapping(sets),
                {k: float(v) for k, v in (row.get("paper") or {}).items()},
                printed.get(i, {}),
            )
        )
    claims, problems = claims_mod.parse_claims(data.get("claims"), [r.label for r in rows], list(data["metrics"]))
    if problems:
        raise rc.RecipeError(problems, str(p))
    return PaperTable(
        str(data["name"]),
        str(data["title"]),
        str(data.get("paper", "")),
        [int(s) for s in data.get("seeds", [0])],
        list(data["metrics"]),
        rows,
        p,
        str(data.get("notes", "")),
        claims=claims,
        dataset_differs=str(data.get("dataset_differs") or ""),
    )


def discover_tables(roots: Iterable[Path]) -> dict[str, PaperTable]:
    """Every paper table under ``roots`` by name; a table that cannot be read, or a name
    defined twice, is a CtkError (exit status 2)."""
    found: dict[str, PaperTable] = {}
    for root in roots:
        for path in sorted(Path(root).glob("**/tables/*.yaml")):
            try:
                table = load_table(path)
            except (TypeError, ValueError) as exc:  # a number or a list that is not one
                raise CtkError(f"{path}: {exc}", 2) from exc
            if table.name in found:
                raise CtkError(
                    f"reproduce table {table.name!r} is defined twice: {found[table.name].path} and {path}", 2
                )
            found[table.name] = table
    return found


def run_table(
    tables: dict[str, PaperTable],
    name: str,
    seeds: str | None,
    rows: list[str],
    sets: list[str],
    experiment: str | None,
    fmt: str,
    load: Callable[..., Any],
    lookup: Callable[[str], Any],
    echo: Callable[[str], None],
    note: Callable[[str], None],
    progress: bool = True,
    **launch: Any,
) -> int:
    """``ctk reproduce NAME``: run the table's rows (all, or ``rows``) once per seed as a sweep
    (``launch``: see :func:`toolkit.studies.launch.run_sweep`), print the report with ``echo`` (in
    ``fmt``) and return the exit status. Only the parseable report goes to ``echo`` for csv/json."""
    if name not in tables:
        raise CtkError(f"no paper table {name!r}; expected one of: {', '.join(sorted(tables))}", 2)
    import shutil
    import time

    from toolkit.studies.launch import run_sweep
    from toolkit.studies.sweeps import fill_measured, select_rows, table_points
    from toolkit.studies.ui_view import publish_view
    from toolkit.tracking.store import client_for

    table = tables[name]
    table.seeds = [int(s) for s in seeds.split(",")] if seeds else table.seeds
    if rows:
        select_rows(table, name, rows)
    experiment = experiment or f"reproduce-{name}"
    todo = table_points(table, name, sets, experiment, load)
    start = time.perf_counter()
    code, outcomes = run_sweep(
        todo,
        lookup,
        experiment=experiment,
        parent_name=f"reproduce-{name}",
        grid={"table": name, "seeds": table.seeds, "set": sets, "rows": [row.label for row in table.rows]},
        progress=progress,
        echo=note,
        **launch,
    )
    fill_measured(table, todo, outcomes)
    echo(render_reproduction(table, fmt, shutil.get_terminal_size().columns))
    (note if fmt in ("csv", "json") else echo)(
        f"({len(todo)} runs in {time.perf_counter() - start:.0f} s; mlflow experiment {experiment!r})"
    )
    publish_view(client_for(todo[0].recipe.tracking.uri), experiment)
    return code


def _half_unit(row: TableRow, metric: str) -> float:
    text = row.printed.get(metric)
    return stats.printed_half_unit(text) if text else 0.0


def reproduce_report(table: PaperTable) -> Report:
    """One record per (row, metric): measured summary, paper number, verdict (None when the
    table was measured on another dataset than the paper's)."""
    records = []
    judged = not table.dataset_differs
    for row in table.rows:
        got = table.measured.get(row.label, {})
        for m in table.metrics:
            s = stats.summarize(got.get(m, []))
            paper = row.paper.get(m)
            records.append(
                {
                    "row": row.label,
                    "metric": m,
                    "n": s.n if s else 0,
                    "mean": s and s.mean,
                    "std": s and s.std,
                    "ci_low": s and s.low,
                    "ci_high": s and s.high,
                    "paper": paper,
                    "verdict": stats.verdict(s, paper, _half_unit(row, m)) if judged else None,
                }
            )
    columns = [
        Column("row", lambda r: r["row"]),
        Column("metric", lambda r: r["metric"]),
        Column("n", lambda r: str(r["n"])),
        Column("mean", lambda r: num(r["mean"])),
        Column("std", lambda r: num(r["std"], 2)),
        Column("95% CI", lambda r: interval(r["ci_low"], r["ci_high"]), "CI"),
        Column("paper", lambda r: num(r["paper"])),
    ]
    notes = [f"paper: {table.paper}", f"seeds: {', '.join(map(str, table.seeds))}"]
    if judged:
        columns.append(Column("verdict", lambda r: r["verdict"]))
        notes.append(
            "verdict: the measured 95% interval, widened by half a unit of the paper's last "
            "printed digit, contains the paper's number, or lies above / below it"
        )
    else:
        notes.append(
            f"no verdict per number: {table.dataset_differs} The paper's numbers are "
            "context; the claims below are what is compared."
        )
    if table.notes:
        notes.append(f"notes: {table.notes}")
    fields = ["row", "metric", "n", "mean", "std", "ci_low", "ci_high", "paper", "verdict"]
    return Report(table.title, fields, records, columns, key_columns=2, notes=notes)


def claims_report(table: PaperTable) -> Report | None:
    """The claims block: one record per comparison (effect, interval, paired p, Holm p,
    verdict) and a note per claim with its verdict; None when the table lists no claims."""
    if not table.claims:
        return None
    records = claims_mod.evaluate(table.claims, table.measured, table.measured_seeds)
    columns = [
        Column("claim", lambda r: r["claim"]),
        Column("comparison", lambda r: r["comparison"]),
        Column("n", lambda r: str(r["n"])),
        Column("effect", lambda r: num(r["effect"])),
        Column("95% CI", lambda r: interval(r["ci_low"], r["ci_high"]), "CI"),
        Column("p", lambda r: num(r["p"], 2)),
        Column("p (Holm)", lambda r: num(r["p_holm"], 2), "Holm"),
        Column("verdict", lambda r: r["verdict"]),
    ]
    notes = []
    for claim in table.claims:
        verdict = next(r["claim_verdict"] for r in records if r["claim"] == claim.id)
        where = f" ({claim.section})" if claim.section else ""
        head, _, rest = verdict.partition(" ")
        notes.append(f"{claim.id}: {head.upper()}{' ' + rest if rest else ''}: {claim.text}{where}")
    notes.append(
        f"effect = mean over seeds of left - right; p: paired t-test over seeds (Welch where "
        f"the seeds differ), Holm-adjusted over the table's {len(records)} comparisons; "
        f"holds / fails: adjusted p < {claims_mod.ALPHA} with the claimed / the opposite sign"
    )
    fields = [
        "claim",
        "comparison",
        "n",
        "effect",
        "ci_low",
        "ci_high",
        "p",
        "p_holm",
        "test",
        "verdict",
        "claim_verdict",
    ]
    return Report(f"Claims of {table.name}", fields, records, columns, key_columns=2, notes=notes)


def render_reproduction(table: PaperTable, fmt: str = "table", width: int | None = None) -> str:
    """The numbers and the claims block in one document of ``fmt``: two tables (table,
    markdown), one JSON object with ``claims`` beside ``rows`` (json), or one CSV whose
    ``kind`` column says number or claim (csv)."""
    numbers, claims = reproduce_report(table), claims_report(table)
    if claims is None:
        return render(numbers, fmt, width)
    if fmt == "json":
        out = json.loads(render(numbers, "json"))
        out["claims"] = json.loads(render(claims, "json"))["rows"]
        out["claim_notes"] = claims.notes
        return json.dumps(out, indent=2)
    if fmt == "csv":
        merged = Report(
            numbers.title,
            ["kind", *numbers.fields, *[f for f in claims.fields if f not in numbers.fields]],
            [{"kind": "number", **r} for r in numbers.records] + [{"kind": "claim", **r} for r in claims.records],
            [],
        )
        return render(merged, "csv")
    return render(numbers, fmt, width) + "\n\n" + render(claims, fmt, width)
