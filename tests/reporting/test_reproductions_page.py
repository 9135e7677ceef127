"""scripts/reproductions.py: the page is written from stored runs (one per row and seed, the
newest when a point ran twice, unfinished ones left out), and its verdicts are the claims
block's on the same numbers."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

from scipy import stats as sps

from tests.reporting.conftest import log_run
from toolkit.studies.reproduce import load_table
from toolkit.tracking.store import client_for, experiment_id

ROOT = Path(__file__).resolve().parents[2]
VALUES = {"base": [0.50, 0.52, 0.49, 0.51], "new": [0.60, 0.63, 0.61, 0.62]}


def _script():
    spec = importlib.util.spec_from_file_location("reproductions", ROOT / "scripts" / "reproductions.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_page_reads_the_stored_runs_and_tests_the_claims(store, tmp_path):
    (tmp_path / "r.yaml").write_text("name: r\n")
    (tmp_path / "t.yaml").write_text(
        textwrap.dedent("""\
        name: toy-t
        title: A toy table
        seeds: [0, 1, 2, 3]
        metrics: [acc]
        rows:
          - {label: base, recipe: r.yaml, paper: {acc: 0.5}}
          - {label: new, recipe: r.yaml}
        claims:
          - {id: better, text: "new above base", section: "Sec. 1", metric: acc, pairs: [[new, base]]}
        """)
    )
    table = load_table(tmp_path / "t.yaml")
    client = client_for(store)
    eid = experiment_id(client, "reproduce-toy-t")
    for row, values in VALUES.items():
        for seed, v in enumerate(values):
            log_run(client, eid, {"seed": seed}, {"acc": v}, tags={"ctk.table": "toy-t", "ctk.row": row})
    log_run(client, eid, {"seed": 0}, {"acc": 9.0}, tags={"ctk.table": "toy-t", "ctk.row": "new"}, status="FAILED")
    module = _script()
    runs = module.stored_runs(store, table)
    assert len(runs) == 8
    text = "\n".join(module.table_section(table, runs))
    p = sps.ttest_rel(VALUES["new"], VALUES["base"]).pvalue
    assert "8 finished runs (seeds 0, 1, 2, 3)" in text
    assert "| **holds** | new > base | 4 |" in text
    assert f"{p:.2g}" in text
    assert "`ctk reproduce toy-t`" in text
    empty = load_table(tmp_path / "t.yaml")
    assert "Not measured" in "\n".join(module.table_section(empty, []))


def test_keep_takes_tables_without_runs_from_the_page_as_written(store, tmp_path, monkeypatch):
    (tmp_path / "r.yaml").write_text("name: r\n")
    tables = {}
    for name in ("toy-a", "toy-b"):
        (tmp_path / f"{name}.yaml").write_text(
            f"name: {name}\ntitle: T\nseeds: [0]\nmetrics: [acc]\n"
            "notes: NEW-NOTES\nrows:\n  - {label: base, recipe: r.yaml}\n"
        )
        tables[name] = load_table(tmp_path / f"{name}.yaml")
    client = client_for(store)
    log_run(
        client,
        experiment_id(client, "reproduce-toy-a"),
        {"seed": 0},
        {"acc": 0.5},
        tags={"ctk.table": "toy-a", "ctk.row": "base"},
    )
    module = _script()
    monkeypatch.setattr(module, "PAPERS", {"Paper": ["toy-a", "toy-b"]})
    old = (
        "# Page\n\n## Paper\n\n### `toy-a`\n\nOLD-A-TEXT\n\n### `toy-b`\n\nOLD-B-TEXT\n\n"
        f"{module.NOTES_HEAD}\n\n> OLD-NOTES\n\n## Other\n\nx\n"
    )
    keep = module.old_sections(old)
    assert keep["toy-b"][:3] == ["### `toy-b`", "", "OLD-B-TEXT"] and "> OLD-NOTES" in keep["toy-b"]
    text = module.page(tables, store, ["toy-a", "toy-b"], keep)
    assert "OLD-B-TEXT" in text and "OLD-A-TEXT" not in text and "1 finished runs" in text
    assert "OLD-NOTES" not in text and "> NEW-NOTES" in text  # the kept section's notes: the table file's
    assert "no runs of theirs in this store): `toy-b`." in text
    fresh = module.page(tables, store, ["toy-a", "toy-b"])
    assert "OLD-B-TEXT" not in fresh and "Not measured" in fresh and "Kept as" not in fresh


def test_measured_line_names_the_machine_the_runs_recorded(store, tmp_path):
    (tmp_path / "r.yaml").write_text("name: r\n")
    (tmp_path / "t.yaml").write_text(
        "name: toy-m\ntitle: T\nseeds: [0]\nmetrics: [acc]\nrows:\n  - {label: base, recipe: r.yaml}\n"
    )
    table = load_table(tmp_path / "t.yaml")
    client = client_for(store)
    env = {"env.cpu_model": "CPU-X", "env.cpu_capability": "AVX2", "env.cpu_bf16": "emulated"}
    log_run(
        client,
        experiment_id(client, "reproduce-toy-m"),
        {"seed": 0, **env, "measured.precision": "fp32"},
        {"acc": 0.5},
        tags={"ctk.table": "toy-m", "ctk.row": "base"},
    )
    module = _script()
    text = "\n".join(module.table_section(table, module.stored_runs(store, table)))
    assert "(CPU-X, AVX2, bf16 emulated, trained in fp32)" in text
    assert module._machine({"seed": "0"}) == ""  # runs from before the env params: nothing claimed
