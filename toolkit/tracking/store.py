"""Where runs are stored: the store's address, its client, its experiments, its write lock.

Default store: a SQLite file ``mlflow.db`` and an artifact folder ``mlartifacts/`` in the
working directory (no server); ``$MLFLOW_TRACKING_URI`` or the recipe's ``tracking.uri`` replace
it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from toolkit.errors import CtkError
from toolkit.locking import file_lock
from toolkit.tracking import mlflow_environment
from toolkit.tracking.health import retrying

if TYPE_CHECKING:  # mlflow is imported by the first client: a store-less answer does not wait for it
    from mlflow.tracking import MlflowClient

DEFAULT_DB = "mlflow.db"
DEFAULT_ARTIFACTS = "mlartifacts"


def tracking_uri(uri: str | None = None, workdir: str | Path | None = None) -> str:
    """The tracking URI: the argument, else ``$MLFLOW_TRACKING_URI``, else the local SQLite file."""
    if uri:
        return uri
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    base = Path(workdir or os.getcwd()).resolve()
    return f"sqlite:///{base / DEFAULT_DB}"


def artifact_root(uri: str) -> str | None:
    """For a local SQLite store, the artifact folder beside the database."""
    if uri.startswith("sqlite:///"):
        return str(Path(uri[len("sqlite:///") :]).resolve().parent / DEFAULT_ARTIFACTS)
    return None


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///PATH`` URI, else None."""
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///") :].split("?", 1)[0]).resolve()
    return None


class NoSuchExperiment(CtkError, ValueError):
    """A command names an experiment the store does not have (exit status 1)."""


def reading_client(uri: str | None = None) -> MlflowClient | None:
    """A client of the store at ``uri`` for a command that only reads it; None for a SQLite store
    whose file does not exist (nothing was ever logged there): it is not created, and the answer
    comes without importing mlflow."""
    path = sqlite_path(tracking_uri(uri))
    return None if path is not None and not path.exists() else client_for(uri)


def no_store(uri: str | None = None) -> str:
    """What a reading command says when the store it looked for does not exist (it creates none)."""
    return (
        f"no tracking store at {tracking_uri(uri)} (nothing has run in this folder): run ctk in the "
        "project folder, or point it at a store with --uri URI or MLFLOW_TRACKING_URI"
    )


def run_artifact(run_id: str, artifact: str, uri: str | None = None, hint: str = "") -> Path:
    """The file ``artifact`` (a path in the run's artefacts) of run ``run_id`` of the store at
    ``uri``, downloaded into a new temporary folder. ``FileNotFoundError`` says which of the store,
    the run or the file is missing (``hint``: why a run may lack it); no store is created."""
    client = reading_client(uri)  # never creates a store
    if client is None:
        raise FileNotFoundError(f"{run_id!r} is not a file, and {no_store(uri)}")
    from mlflow.exceptions import MlflowException  # after the store is opened (its environment set)

    try:
        client.get_run(run_id)
    except MlflowException:
        raise FileNotFoundError(
            f"{run_id!r} is neither a file nor a run id of the store {client.tracking_uri}"
        ) from None
    folder = Path(tempfile.mkdtemp(prefix="ctk-artifact-"))
    try:
        return Path(client.download_artifacts(run_id, artifact, str(folder)))
    except (MlflowException, OSError) as exc:
        raise FileNotFoundError(f"run {run_id} has no {artifact}{f' ({hint})' if hint else ''}: {exc}") from None


def find_experiment(client: MlflowClient | None, name: str, uri: str | None = None):
    """The experiment ``name`` of ``client``'s store (None: the store at ``uri`` does not exist
    yet), else NoSuchExperiment naming the experiments there are."""
    exp = client.get_experiment_by_name(name) if client is not None else None
    if exp is None:
        names = sorted(e.name for e in client.search_experiments()) if client is not None else []
        if client is None:
            raise NoSuchExperiment(f"no experiment {name!r}: {no_store(uri)}")
        where = client.tracking_uri
        raise NoSuchExperiment(f"no experiment {name!r} in {where}; experiments: {', '.join(names) or 'none'}")
    return exp


RECORD_TAG = "ctk.record"  # a run's metrics of record, comma-separated: comparisons and the UI put them first
_SET_UP: set[str] = set()  # SQLite stores this process created or found migrated


def run_location(uri: str | None, run_id: str) -> tuple[str | None, str | None]:
    """(artifact location, experiment id) of run ``run_id``, or Nones when the store does not answer."""
    try:
        info = client_for(uri).get_run(run_id).info
    except Exception:  # noqa: BLE001 - a summary line, never a failure
        return None, None
    location = info.artifact_uri
    return (location[len("file://") :] if location.startswith("file://") else location), info.experiment_id


@contextlib.contextmanager
def store_lock(uri: str) -> Iterator[None]:
    """Exclusive across processes for a SQLite store: ``<database>.lock`` beside the file is held
    for the block (nothing for other stores, whose servers serialise their own set-up, nor for
    a folder this process cannot write, where no run can be written either)."""
    path = sqlite_path(uri)
    writable = path is not None and os.access(path.parent, os.W_OK)
    with file_lock(path.with_name(path.name + ".lock")) if writable else contextlib.nullcontext():
        yield


def client_for(uri: str | None = None) -> MlflowClient:
    """A client of the store at ``uri`` (see :func:`tracking_uri`).

    mlflow creates a new SQLite store's tables (and migrates an old one) when the first client
    of a process opens it; processes doing that at once break each other's migration (alembic
    "expected to match one row", UNIQUE constraint on the default experiment). The first client
    of each SQLite store in a process is therefore made under :func:`store_lock`, so one process
    sets the schema up and the others find it done. mlflow's environment defaults are set
    first (:func:`toolkit.tracking.mlflow_environment`). A relative SQLite path is made
    absolute against the working folder first: mlflow and this module keep one store a URI for
    the process, so ``sqlite:///x.db`` would otherwise stay the file of the first folder it was
    opened in."""
    mlflow_environment()
    from mlflow.tracking import MlflowClient

    uri = _absolute(tracking_uri(uri))
    if uri in _SET_UP:
        return MlflowClient(tracking_uri=uri)
    with store_lock(uri):
        _from_template(uri)
        client = MlflowClient(tracking_uri=uri)  # mlflow builds (and caches) the store here
    _SET_UP.add(uri)
    return client


def _absolute(uri: str) -> str:
    """``sqlite:///RELATIVE[?query]`` as ``sqlite:////ABSOLUTE[?query]``; other URIs unchanged."""
    path = sqlite_path(uri)
    if path is None or uri[len("sqlite:///") :].startswith("/"):
        return uri
    query = uri.split("?", 1)[1] if "?" in uri else ""
    return f"sqlite:///{path}" + (f"?{query}" if query else "")


def schema_template() -> Path:
    """This mlflow version's empty SQLite store: its tables (alembic at its head) and no
    experiment, made once per machine by mlflow itself in ``$XDG_CACHE_HOME/ctk`` (else
    ``~/.cache/ctk``). A new store starts as a copy of it (:func:`client_for`): creating the
    tables through mlflow's migrations took 2.3 s a store on a 2-core EPYC, the copy 0.06 s.
    Without the Default experiment (id 0) that mlflow made with an artifact folder of the
    template's own, the copy's first client creates that experiment for its store."""
    import sqlite3

    import mlflow
    from mlflow.tracking import MlflowClient

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ctk"
    template = cache / f"mlflow-{mlflow.__version__}-empty-store.db"
    if _empty_store(template):
        return template
    with file_lock(template.with_name(template.name + ".lock")):
        if not _empty_store(template):  # missing, or damaged: made again
            # a name never used before: mlflow keeps a store (and its connection) per URI
            made = template.with_name(f"{template.name}.{uuid.uuid4().hex}.tmp")
            MlflowClient(tracking_uri=f"sqlite:///{made}").search_experiments()
            with contextlib.closing(sqlite3.connect(made)) as db, db:
                db.execute("DELETE FROM experiments WHERE experiment_id = 0")
            os.replace(made, template)
    return template


def _empty_store(path: Path) -> bool:
    """Whether ``path`` reads as a SQLite store with an alembic version and no experiment."""
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            return db.execute("SELECT count(*) FROM alembic_version").fetchone() == (1,) and db.execute(
                "SELECT count(*) FROM experiments"
            ).fetchone() == (0,)
    except sqlite3.Error:
        return False


def _from_template(uri: str) -> Path | None:
    """Place a copy of :func:`schema_template` where a SQLite store that does not exist yet is
    to be (under its :func:`store_lock`); the path, or None when nothing was copied (not SQLite,
    the store exists, the folder is not writable, or the template could not be made)."""
    path = sqlite_path(uri)
    if path is None or path.exists() or not os.access(path.parent, os.W_OK):
        return None
    try:
        template = schema_template()
        part = path.with_name(f".{path.name}.{os.getpid()}.part")
        shutil.copyfile(template, part)
        os.replace(part, path)
    except Exception:  # noqa: BLE001 - no template here (an unwritable cache, a failed build): mlflow makes the store
        return None
    return path


def experiment_id(client: MlflowClient, name: str) -> str:
    """The id of experiment ``name``, created if missing. Safe when several processes create
    it at once: on SQLite the look-up and the creation run under :func:`store_lock`; elsewhere
    the loser of the race reads the winner's (retried on transient store errors)."""

    exp = retrying(lambda: client.get_experiment_by_name(name), f"experiment {name!r}")
    if exp is not None:
        return exp.experiment_id

    def get_or_create() -> str:
        exp = client.get_experiment_by_name(name)
        if exp is not None:
            return exp.experiment_id
        root = artifact_root(client.tracking_uri)
        location = str(Path(root) / name) if root else None
        try:
            # mlflow 3 opens an experiment without this tag in its GenAI (traces) view
            return client.create_experiment(
                name, artifact_location=location, tags={"mlflow.experimentKind": "custom_model_development"}
            )
        except Exception:  # noqa: BLE001 - another process created it first: read it back
            exp = client.get_experiment_by_name(name)
            if exp is None:
                raise
            return exp.experiment_id

    with store_lock(client.tracking_uri):
        return retrying(get_or_create, f"experiment {name!r}")


def git_commit(path: str | Path | None = None) -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=path or Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"
