"""Tables: ``ctk compare`` (the runs of an experiment, grouped over seeds, in the shape of the
papers' tables) and ``ctk reproduce`` (paper tables defined in ``recipes/<domain>/tables/``)."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import yaml

from toolkit import recipe as rc
from toolkit.tracking import client_for


def format_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)] if rows else [len(h) for h in header]
    line = "  ".join("-" * w for w in widths)
    out = ["  ".join(str(h).ljust(w) for h, w in zip(header, widths)), line]
    out += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(out)


def mean_std(values: list[float]) -> str:
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.4g}"
    return f"{statistics.mean(values):.4g} ± {statistics.stdev(values):.2g} (n={len(values)})"


# ---------------------------------------------------------------------------------------
# compare

def compare_table(experiment: str, metrics: list[str] | None = None, uri: str | None = None,
                  group_seeds: bool = True) -> str:
    """The runs of ``experiment``: one row per setting (runs differing only by seed are
    grouped: mean ± std), the params that vary as columns, then the metrics."""
    client = client_for(uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        names = [e.name for e in client.search_experiments()]
        raise ValueError(f"no experiment {experiment!r} in {client.tracking_uri}; experiments: {', '.join(names) or 'none'}")
    runs = client.search_runs([exp.experiment_id], max_results=5000)
    if not runs:
        return f"experiment {experiment!r} has no runs"
    if not metrics:
        metrics = sorted({k for r in runs for k in r.data.metrics
                          if not k.startswith("train/") and not k.startswith("online_")})
    varying = _varying_params(runs)
    key_params = [p for p in varying if p != "seed"] if group_seeds else varying
    groups: dict[tuple, list[Any]] = {}
    for r in runs:
        key = tuple(r.data.params.get(p, "") for p in key_params)
        groups.setdefault(key, []).append(r)
    header = ["run" if not group_seeds else "setting", *key_params, "status", *metrics]
    rows = []
    for key, members in sorted(groups.items()):
        names = sorted({m.info.run_name or m.info.run_id[:8] for m in members})
        label = names[0] if len(names) == 1 else f"{len(members)} runs"
        statuses = ",".join(sorted({m.info.status for m in members}))
        vals = [mean_std([m.data.metrics.get(k) for m in members]) for k in metrics]
        rows.append([label, *key, statuses, *vals])
    return format_table(header, rows)


def _varying_params(runs: list[Any]) -> list[str]:
    keys = sorted({k for r in runs for k in r.data.params})
    out = [k for k in keys if len({r.data.params.get(k) for r in runs}) > 1]
    return [k for k in out if not k.startswith("tracking.")]


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
                             [f"{k}={yaml.safe_dump(v, default_flow_style=True).strip().removesuffix('...').strip()}"
                              for k, v in sets.items()],
                             {k: float(v) for k, v in (row.get("paper") or {}).items()}))
    return PaperTable(str(data["name"]), str(data["title"]), str(data.get("paper", "")),
                      [int(s) for s in data.get("seeds", [0])], list(data["metrics"]), rows, p,
                      str(data.get("notes", "")))


def discover_tables(roots: Iterable[Path]) -> dict[str, PaperTable]:
    found: dict[str, PaperTable] = {}
    for root in roots:
        for path in sorted(Path(root).glob("**/tables/*.yaml")):
            table = load_table(path)
            if table.name in found:
                raise ValueError(f"reproduce table {table.name!r} is defined twice: {found[table.name].path} and {path}")
            found[table.name] = table
    return found


def reproduce_report(table: PaperTable) -> str:
    header = ["row"]
    for m in table.metrics:
        header += [f"{m} (measured)", f"{m} (paper)"]
    rows = []
    for row in table.rows:
        cells = [row.label]
        got = table.measured.get(row.label, {})
        for m in table.metrics:
            cells.append(mean_std(got.get(m, [])))
            cells.append(f"{row.paper[m]:.4g}" if m in row.paper else "-")
        rows.append(cells)
    head = f"{table.title}\npaper: {table.paper}\nseeds: {table.seeds}"
    if table.notes:
        head += f"\nnotes: {table.notes}"
    return head + "\n" + format_table(header, rows)
