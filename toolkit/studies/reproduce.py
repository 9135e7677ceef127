"""``ctk reproduce``: paper tables defined in ``recipes/<domain>/tables/`` and the report that
puts the measured numbers (mean, std, n, Student-t 95% interval over seeds) beside the
paper's, with a verdict per row: the measured interval contains the paper's number, or lies
above or below it. ``ctk compare`` lives in :mod:`toolkit.studies.comparison`; both render through
:mod:`toolkit.studies.tables`."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from toolkit import recipe as rc
from toolkit.errors import CtkError
from toolkit.studies.tables import Column, Report, interval, num

# ---------------------------------------------------------------------------------------
# reproduce

@dataclass
class TableRow:
    label: str
    recipe: Path
    overrides: list[str]
    paper: dict[str, float]


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


def load_table(path: str | Path) -> PaperTable:
    p = Path(path)
    data = rc.load_yaml(p)
    problems = []
    for key in ("name", "title", "rows", "metrics"):
        if key not in data:
            problems.append((key, "required key is missing"))
    if problems:
        raise rc.RecipeError(problems, str(p))
    rows = []
    for i, row in enumerate(data["rows"]):
        if not isinstance(row, dict) or "recipe" not in row or "label" not in row:
            raise rc.RecipeError([(f"rows.{i}", "expected a mapping with label and recipe")], str(p))
        sets = row.get("set") or {}
        rows.append(TableRow(str(row["label"]), (p.parent / row["recipe"]).resolve(),
                             rc.overrides_from_mapping(sets),
                             {k: float(v) for k, v in (row.get("paper") or {}).items()}))
    return PaperTable(str(data["name"]), str(data["title"]), str(data.get("paper", "")),
                      [int(s) for s in data.get("seeds", [0])], list(data["metrics"]), rows, p,
                      str(data.get("notes", "")))


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
                raise CtkError(f"reproduce table {table.name!r} is defined twice: {found[table.name].path} and {path}", 2)
            found[table.name] = table
    return found


def run_table(tables: dict[str, PaperTable], name: str, seeds: str | None, rows: list[str], sets: list[str],
              experiment: str | None, fmt: str, load: Callable[..., Any], lookup: Callable[[str], Any],
              echo: Callable[[str], None], note: Callable[[str], None], progress: bool = True,
              **launch: Any) -> int:
    """``ctk reproduce NAME``: run the table's rows (all, or ``rows``) once per seed as a sweep
    (``launch``: see :func:`toolkit.studies.launch.run_sweep`), print the report with ``echo`` (in
    ``fmt``) and return the exit status. Only the parseable report goes to ``echo`` for csv/json."""
    if name not in tables:
        raise CtkError(f"no paper table {name!r}; expected one of: {', '.join(sorted(tables))}", 2)
    import shutil
    import time

    from toolkit.studies.launch import run_sweep
    from toolkit.studies.sweeps import fill_measured, select_rows, table_points
    from toolkit.studies.tables import render
    from toolkit.studies.ui_view import publish_view
    from toolkit.tracking.store import client_for
    table = tables[name]
    table.seeds = [int(s) for s in seeds.split(",")] if seeds else table.seeds
    if rows:
        select_rows(table, name, rows)
    experiment = experiment or f"reproduce-{name}"
    todo = table_points(table, name, sets, experiment, load)
    start = time.perf_counter()
    code, outcomes = run_sweep(todo, lookup, experiment=experiment, parent_name=f"reproduce-{name}",
                               grid={"table": name, "seeds": table.seeds, "set": sets,
                                     "rows": [row.label for row in table.rows]},
                               progress=progress, echo=note, **launch)
    fill_measured(table, todo, outcomes)
    echo(render(reproduce_report(table), fmt, shutil.get_terminal_size().columns))
    (note if fmt in ("csv", "json") else echo)(
        f"({len(todo)} runs in {time.perf_counter() - start:.0f} s; mlflow experiment {experiment!r})")
    publish_view(client_for(todo[0].recipe.tracking.uri), experiment)
    return code


def reproduce_report(table: PaperTable) -> Report:
    """One record per (row, metric): measured summary, paper number, verdict."""
    from toolkit.studies import stats  # (scipy) not for listing the tables
    records = []
    for row in table.rows:
        got = table.measured.get(row.label, {})
        for m in table.metrics:
            s = stats.summarize(got.get(m, []))
            paper = row.paper.get(m)
            records.append({"row": row.label, "metric": m, "n": s.n if s else 0,
                            "mean": s and s.mean, "std": s and s.std,
                            "ci_low": s and s.low, "ci_high": s and s.high, "paper": paper,
                            "verdict": stats.verdict(s, paper)})
    columns = [Column("row", lambda r: r["row"]), Column("metric", lambda r: r["metric"]),
               Column("n", lambda r: str(r["n"])), Column("mean", lambda r: num(r["mean"])),
               Column("std", lambda r: num(r["std"], 2)),
               Column("95% CI", lambda r: interval(r["ci_low"], r["ci_high"]), "CI"),
               Column("paper", lambda r: num(r["paper"])),
               Column("verdict", lambda r: r["verdict"])]
    notes = [f"paper: {table.paper}", f"seeds: {', '.join(map(str, table.seeds))}",
             ("verdict: the measured 95% interval contains the paper's number, or lies above / "
              "below it")]
    if table.notes:
        notes.append(f"notes: {table.notes}")
    fields = ["row", "metric", "n", "mean", "std", "ci_low", "ci_high", "paper", "verdict"]
    return Report(table.title, fields, records, columns, key_columns=2, notes=notes)
