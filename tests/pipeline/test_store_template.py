"""A new SQLite store starts as a copy of this mlflow version's empty store (toolkit.tracking.store
.schema_template): the copy must be the store mlflow itself makes, and a damaged template
is made again, never copied."""

from __future__ import annotations

import contextlib
import sqlite3

import pytest
from mlflow.tracking import MlflowClient

from toolkit.tracking import store


def _schema(path) -> tuple[dict[str, list[tuple]], list[str], list[tuple]]:
    """({table: its columns (name, type, not null, default, primary key)}, the index names, the
    alembic version) of a SQLite file: the structure, not the SQL text SQLite keeps (which
    alembic's table rebuilds may quote differently)."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        columns = {t: [tuple(c[1:]) for c in db.execute(f'PRAGMA table_info("{t}")')] for t in tables}
        indexes = sorted(r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'"))
        return columns, indexes, db.execute("SELECT version_num FROM alembic_version").fetchall()


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_store_copied_from_the_template_is_the_store_mlflow_makes(own_cache):
    made = own_cache / "by-mlflow.db"
    reference = MlflowClient(tracking_uri=f"sqlite:///{made}")  # mlflow's own migrations, no template
    reference.search_experiments()
    copied = own_cache / "copied.db"
    client = store.client_for(f"sqlite:///{copied}")
    assert (own_cache / "cache" / "ctk").is_dir() and store.schema_template().exists()
    assert _schema(copied) == _schema(made)
    ours = {e.experiment_id: (e.name, e.artifact_location) for e in client.search_experiments()}
    theirs = {e.experiment_id: (e.name, e.artifact_location) for e in reference.search_experiments()}
    assert ours == theirs == {"0": ("Default", str(own_cache / "mlruns" / "0"))}
    eid = store.experiment_id(client, "e")
    run = client.create_run(eid)
    client.log_metric(run.info.run_id, "m", 1.5)
    assert client.get_run(run.info.run_id).data.metrics == {"m": 1.5}


def test_a_damaged_template_is_made_again(own_cache):
    """A template that does not read as an empty store (here: not a database at all) is made
    again by mlflow before it is copied: the store is still the one mlflow makes."""
    store.schema_template().write_bytes(b"not a database")
    path = own_cache / "mlflow.db"
    client = store.client_for(f"sqlite:///{path}")
    assert [e.name for e in client.search_experiments()] == ["Default"]
    made = own_cache / "by-mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{made}").search_experiments()
    assert _schema(path) == _schema(made)


def test_a_relative_sqlite_uri_is_the_file_of_the_current_folder_each_time(tmp_path, monkeypatch):
    from toolkit.tracking.store import client_for, experiment_id

    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        monkeypatch.chdir(tmp_path / name)
        client = client_for("sqlite:///rel.db")
        client.create_run(experiment_id(client, f"made-in-{name}"))
        assert (tmp_path / name / "rel.db").exists(), name
    import sqlite3

    for name in ("a", "b"):
        with sqlite3.connect(tmp_path / name / "rel.db") as db:
            names = {row[0] for row in db.execute("select name from experiments")}
        assert f"made-in-{name}" in names and f"made-in-{'b' if name == 'a' else 'a'}" not in names
