"""Write docs/reproductions.md from stored runs: per paper, the claims its tables list, the
command that checks them, and the verdicts the runs give (n, wall time, machine).

Each table's runs are read from the mlflow store that ``ctk reproduce NAME`` wrote to (the
experiment ``reproduce-NAME``; finished runs tagged ``ctk.table = NAME``, one per row and seed),
so the page is regenerated, not typed; ``--run`` runs the missing tables first (each as
``ctk reproduce NAME``, under ``nice``; the minutes add up: see the page's wall times). A table
with no stored runs is listed with its command and "not measured", or with ``--keep`` keeps the
measured part of the section the page already has, with the table's current notes (one table
re-measured without running the others again; the page's header names the kept tables).

    python scripts/reproductions.py                       # ./mlflow.db -> docs/reproductions.md
    python scripts/reproductions.py --run --table ring-mi-toy --uri sqlite:///runs.db
    python scripts/reproductions.py --keep --uri sqlite:///new-table.db
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from toolkit.studies.claims import ALPHA  # noqa: E402
from toolkit.studies.reproduce import PaperTable, claims_report, discover_tables  # noqa: E402
from toolkit.studies.tables import interval, num  # noqa: E402
from toolkit.tracking.measured import split_params  # noqa: E402
from toolkit.training.precision import machine_line  # noqa: E402

# paper -> its CPU-scale tables, in the order the page shows them
PAPERS = {
    "Ring: conditional negative sampling (Wu et al. 2021)": ["ring-mi-toy", "ring-mi-toy-cnce-critic"],
    "LMCL: distance polarization (Chen et al. 2021)": ["lmcl-toy"],
    "CPCL: contrastive principal components": ["cpcl-gaussian-mixture", "cpcl-gaussian-mixture-hard"],
    "Wang & Liu 2021: temperature and hard negatives": ["wang-liu-temperature"],
    "CACR: contrastive attraction and repulsion (Zheng et al.)": ["cacr-k1-vs-k4"],
    "The baselines family (BYOL, SimSiam, MoCo v3, Barlow Twins, VICReg, SwAV, DINO, NNCLR, SupCon)": [
        "family-quickstart",
        "family-collapse",
    ],
}


def stored_runs(uri: str, table: PaperTable) -> list:
    """Finished runs of ``table`` in its ``reproduce-NAME`` experiment (one per row and seed;
    the newest when a point ran twice)."""
    from toolkit.tracking.store import client_for

    client = client_for(uri)
    exp = client.get_experiment_by_name(f"reproduce-{table.name}")
    if exp is None:
        return []
    runs = client.search_runs(
        [exp.experiment_id],
        f"tags.`ctk.table` = '{table.name}' and attributes.status = 'FINISHED'",
        max_results=5000,
        order_by=["attributes.start_time DESC"],
    )
    seen, out = set(), []
    for run in runs:
        key = (run.data.tags.get("ctk.row"), run.data.params.get("seed"))
        if key not in seen:
            seen.add(key)
            out.append(run)
    return out


def fill(table: PaperTable, runs: list) -> None:
    rows = {row.label for row in table.rows}
    for run in sorted(runs, key=lambda r: int(r.data.params.get("seed", 0))):
        row = run.data.tags.get("ctk.row")
        if row not in rows:
            continue
        for m in table.metrics:
            if m in run.data.metrics:
                table.measured.setdefault(row, {}).setdefault(m, []).append(run.data.metrics[m])
                table.measured_seeds.setdefault(row, {}).setdefault(m, []).append(int(run.data.params["seed"]))


def _minutes(ms: float) -> str:
    return f"{ms / 60000:.1f} min"


def table_section(table: PaperTable, runs: list) -> list[str]:
    out = [
        f"### `{table.name}`",
        "",
        f"{table.title}",
        "",
        f"Command: `ctk reproduce {table.name}`"
        f" ({len(table.rows)} rows x {len(table.seeds)} seeds: {', '.join(map(str, table.seeds))}).",
        "",
    ]
    if table.dataset_differs:
        out += [
            f"Measured on another dataset than the paper's: {table.dataset_differs.strip()} "
            "Only the claims are compared.",
            "",
        ]
    if not runs:
        out += [
            "Not measured: no finished runs of this table in the store the page was written from.",
            "",
            "Claims it checks:",
            "",
        ]
        out += [f"- `{c.id}` ({c.section}): {c.text}" for c in table.claims] or ["- none listed"]
        return out + [""]
    fill(table, runs)
    busy = sum((r.info.end_time or r.info.start_time) - r.info.start_time for r in runs)
    span = max(r.info.end_time or 0 for r in runs) - min(r.info.start_time for r in runs)
    seeds = sorted({int(r.data.params["seed"]) for r in runs})
    hosts = sorted({r.data.tags.get("ctk.host", "?") for r in runs})
    machines = sorted({_machine(r.data.params, r.data.tags) for r in runs} - {""})
    when = dt.datetime.fromtimestamp(max(r.info.end_time or 0 for r in runs) / 1000, dt.timezone.utc)
    out += [
        f"Measured: {len(runs)} finished runs (seeds {', '.join(map(str, seeds))}), "
        f"{_minutes(busy)} of run time, {_minutes(span)} from first start to last end, one run at a "
        f"time, on host {', '.join(hosts)}"
        + (f" ({'; '.join(machines)})" if machines else "")
        + f", finished {when:%Y-%m-%d %H:%M} UTC.",
        "",
    ]
    report = claims_report(table)
    if report is None:
        return out + ["The table lists no claims.", ""]
    out += [
        "| claim | verdict | comparison | n | effect [95% CI] | p | p (Holm) | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    shown = set()
    for r in report.records:
        claim = next(c for c in table.claims if c.id == r["claim"])
        head = (
            (f"`{claim.id}`: {claim.text} ({claim.section})", f"**{r['claim_verdict']}**")
            if claim.id not in shown
            else ("", "")
        )
        shown.add(claim.id)
        out.append(
            f"| {head[0]} | {head[1]} | {r['comparison']} | {r['n']} | "
            f"{num(r['effect'])} {interval(r['ci_low'], r['ci_high'])} | {num(r['p'], 2)} | "
            f"{num(r['p_holm'], 2)} | {r['verdict']} |"
        )
    out += ["", "Measured means (95% interval over seeds) of the metrics the claims use:", ""]
    used = sorted(
        {(s.row, s.metric) for c in table.claims for pair in c.pairs for s in pair if s.value is None},
        key=lambda k: ([row.label for row in table.rows].index(k[0]), table.metrics.index(k[1])),
    )
    from toolkit.studies import stats

    for row, metric in used:
        s = stats.summarize(table.measured.get(row, {}).get(metric, []))
        paper = next(r.paper.get(metric) for r in table.rows if r.label == row)
        shown_paper = f"; paper {num(paper)}" if paper is not None else ""
        out.append(
            f"- {row}, `{metric}`: {num(s and s.mean)} {interval(s and s.low, s and s.high)}"
            f" (n = {s.n if s else 0}){shown_paper}"
        )
    out.append("")
    return out + notes_lines(table)


NOTES_HEAD = "What the numbers mean (the table's notes):"


def notes_lines(table: PaperTable) -> list[str]:
    return [NOTES_HEAD, "", "> " + " ".join(table.notes.split()), ""] if table.notes else []


def _machine(params: dict[str, str], tags: dict[str, str] | None = None) -> str:
    """The CPU and precision a run recorded (``env.*``, ``measured.precision``, old runs' names
    mapped as every comparison maps them), or ''."""
    found = split_params(params, tags)[1]
    cpu = found.get("env.cpu_model")
    if not cpu:
        return ""
    bf16 = found.get("env.cpu_bf16")
    parts = [cpu, found.get("env.cpu_capability", ""), f"bf16 {bf16}" if bf16 else ""]
    precision = found.get("measured.precision")
    return ", ".join(x for x in parts if x) + (f", trained in {precision}" if precision else "")


def old_sections(text: str) -> dict[str, list[str]]:
    """The ``### `NAME``` sections of a page as written: name -> its lines (up to the next
    section or paper heading)."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("### `") and line.rstrip().endswith("`"):
            current = out.setdefault(line.strip()[5:-1], [])
        elif line.startswith("## "):
            current = None
        if current is not None:
            current.append(line)
    return out


def page(tables: dict[str, PaperTable], uri: str, names: list[str], keep: dict[str, list[str]] | None = None) -> str:
    sections: list[str] = []
    kept: list[str] = []
    for paper, tnames in PAPERS.items():
        chosen = [n for n in tnames if n in names and n in tables]
        if not chosen:
            continue
        sections += [f"## {paper}", ""]
        for name in chosen:
            runs = stored_runs(uri, tables[name])
            if not runs and keep and name in keep:  # measured part as written, notes from the table file
                kept.append(name)
                old = keep[name]
                cut = old.index(NOTES_HEAD) if NOTES_HEAD in old else len(old)
                sections += old[:cut] + notes_lines(tables[name])
            else:
                sections += table_section(tables[name], runs)
    lines = [
        "# Reproductions: the papers' claims, checked on CPU",
        "",
        "Written by `scripts/reproductions.py` from the runs in the store "
        f"(`{uri if '://' in uri else 'sqlite:///' + uri}` when it ran); do not edit by hand, run the script again. "
        "Each paper's CPU-scale tables list the claims the paper draws from them (`claims:` in "
        "`recipes/*/tables/*.yaml`); `ctk reproduce NAME` prints the same block under its numbers.",
        "",
        f"Verdicts: per comparison, the effect is the mean over seeds of left minus right, tested with "
        f"the paired t-test over seeds (scipy.stats.ttest_rel), the p-values Holm-adjusted over the "
        f"table's comparisons; **holds** / **fails**: adjusted p < {ALPHA} with the claimed / the opposite "
        f"sign, else **inconclusive at n** seeds. A claim holds when all its comparisons hold and fails "
        f"when one fails.",
        "",
        f"Written on: {machine_line()}. Each table's runs name the machine they ran on where they "
        "recorded it (its 'Measured' line). The runs were made one at a time on a 2-core machine, "
        "some under `nice` beside other jobs: wall times can be longer than on an idle machine.",
        "",
    ]
    if kept:
        lines += [
            f"Kept as the previous page had them (no runs of theirs in this store): "
            f"{', '.join(f'`{n}`' for n in kept)}.",
            "",
        ]
    return "\n".join(lines + sections).rstrip() + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--uri", default=os.environ.get("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db"))
    ap.add_argument("--table", action="append", help="only these tables (repeatable; default: every table of PAPERS)")
    ap.add_argument(
        "--run", action="store_true", help="run each chosen table with ctk reproduce first (skips finished points)"
    )
    ap.add_argument("--out", default=str(ROOT / "docs" / "reproductions.md"))
    ap.add_argument(
        "--keep",
        action="store_true",
        help="a table with no runs in the store keeps its measured section from the page at --out",
    )
    args = ap.parse_args()
    tables = discover_tables([ROOT / "recipes"])
    names = args.table or [n for group in PAPERS.values() for n in group]
    if args.run:
        env = dict(os.environ, MLFLOW_TRACKING_URI=args.uri)
        for name in names:
            subprocess.run(
                ["nice", "-n", "15", sys.executable, str(ROOT / "cli.py"), "reproduce", name, "--quiet"],
                cwd=ROOT,
                env=env,
                check=False,
            )
    out = Path(args.out)
    keep = old_sections(out.read_text()) if args.keep and out.is_file() else None
    out.write_text(page(tables, args.uri, names, keep))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
