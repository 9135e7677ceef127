"""mlflow tracking: the only tracker.

Default store: a SQLite file ``mlflow.db`` and an artifact folder ``mlartifacts/`` in the
working directory (no server); ``$MLFLOW_TRACKING_URI`` or the recipe's ``tracking.uri`` replace
it. Metrics are buffered and sent with one ``log_batch`` per logging interval. A run that raises
is marked FAILED with the error as a tag, never left RUNNING.
"""
from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Mapping

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "true")
# mlflow's HTTP client retries a dead server for minutes by default; ctk queues metrics itself
# (Tracker.flush), so a call fails fast and training goes on.
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")

from mlflow.entities import Metric, Param, RunTag  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

DEFAULT_DB = "mlflow.db"
DEFAULT_ARTIFACTS = "mlartifacts"
_MAX_PARAM = 6000
MAX_PENDING = 200_000  # metrics queued during a store outage


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
        return str(Path(uri[len("sqlite:///"):]).resolve().parent / DEFAULT_ARTIFACTS)
    return None


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///PATH`` URI, else None."""
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///"):].split("?", 1)[0]).resolve()
    return None


_SET_UP: set[str] = set()  # SQLite stores this process created or found migrated


@contextlib.contextmanager
def store_lock(uri: str) -> Iterator[None]:
    """Exclusive across processes for a SQLite store: ``<database>.lock`` beside the file is held
    for the block (nothing for other stores, whose servers serialise their own set-up, nor for
    a folder this process cannot write, where no run can be written either)."""
    from toolkit.locking import file_lock
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
    sets the schema up and the others find it done."""
    uri = tracking_uri(uri)
    if uri in _SET_UP:
        return MlflowClient(tracking_uri=uri)
    with store_lock(uri):
        client = MlflowClient(tracking_uri=uri)  # mlflow builds (and caches) the store here
    _SET_UP.add(uri)
    return client


def experiment_id(client: MlflowClient, name: str) -> str:
    """The id of experiment ``name``, created if missing. Safe when several processes create
    it at once: on SQLite the look-up and the creation run under :func:`store_lock`; elsewhere
    the loser of the race reads the winner's (retried on transient store errors)."""
    from toolkit.tracking_health import retrying

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
            return client.create_experiment(name, artifact_location=location,
                                            tags={"mlflow.experimentKind": "custom_model_development"})
        except Exception:  # noqa: BLE001 - another process created it first: read it back
            exp = client.get_experiment_by_name(name)
            if exp is None:
                raise
            return exp.experiment_id

    with store_lock(client.tracking_uri):
        return retrying(get_or_create, f"experiment {name!r}")


def git_commit(path: str | Path | None = None) -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=path or Path(__file__).parent,
                             capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


class Tracker:
    """One mlflow run. Use as a context manager::

        with Tracker(experiment="ctk", run_name="vision-...", tags={...}) as tracker:
            tracker.log_params(flat)
            tracker.log_metrics({"train/loss": 0.5}, step=10)

    ``enabled=False`` (every rank but 0 in a distributed run) makes every call a no-op.
    ``run_id`` resumes an existing run (``ctk run --resume``). A resumed run replays the steps
    between its checkpoint and the kill; a metric already logged at a step is not logged there
    again, so every metric keeps one value per step (the replay is deterministic: same values).
    """

    def __init__(self, experiment: str = "ctk", run_name: str | None = None, uri: str | None = None,
                 tags: Mapping[str, str] | None = None, run_id: str | None = None,
                 enabled: bool = True) -> None:
        self.enabled = enabled
        self.experiment = experiment
        self.run_name = run_name
        self.uri = tracking_uri(uri)
        self.tags = dict(tags or {})
        self.run_id = run_id
        self.client: MlflowClient | None = None
        self._pending: list[Metric] = []
        self._logged_up_to: dict[str, int] = {}  # resumed run: the last step of each metric so far
        self._last_beat = 0.0
        self._outage_warned = False
        self.listeners: list[Any] = []  # called with (metrics, step) after each log_metrics

    # -- lifecycle --------------------------------------------------------------------------
    def __enter__(self) -> "Tracker":
        if not self.enabled:
            return self
        from toolkit.tracking_health import liveness_tags, mark_dead_runs, retrying
        self.client = client_for(self.uri)
        tags = {**self.tags, **liveness_tags()}
        if self.run_id is None:
            eid = experiment_id(self.client, self.experiment)
            retrying(lambda: mark_dead_runs(self.client, [eid]), "marking dead runs")
            run = retrying(lambda: self.client.create_run(eid, run_name=self.run_name, tags=tags), "create_run")
            self.run_id = run.info.run_id
        else:
            self.client.update_run(self.run_id, status="RUNNING")
            self.set_tags(liveness_tags())
            for key in self.client.get_run(self.run_id).data.metrics:
                history = self.client.get_metric_history(self.run_id, key)
                self._logged_up_to[key] = max(m.step for m in history)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if not self.enabled or self.client is None:
            return
        try:
            for wait in (0.0, 1.0, 4.0):  # the final metrics must reach the store
                time.sleep(wait)
                self.flush()
                if not self._pending:
                    break
        finally:
            self._terminate(exc_type, exc)

    def _terminate(self, exc_type: Any, exc: Any) -> None:
        """FINISHED, or FAILED / KILLED with the error as a tag; a store that is still down
        leaves the run RUNNING with a warning (its checkpoints are on disk either way)."""
        try:
            if exc_type is None:
                self.client.set_terminated(self.run_id, "FINISHED")
            else:
                reason = "interrupted" if exc_type is KeyboardInterrupt else f"{exc_type.__name__}: {exc}"
                self.client.set_tag(self.run_id, "error", reason[:5000])
                self.client.set_terminated(self.run_id, "KILLED" if exc_type is KeyboardInterrupt else "FAILED")
        except Exception as err:  # noqa: BLE001 - never hide the run's own outcome behind the store's
            print(f"[ctk] warning: could not record the end of run {self.run_id} in {self.uri} "
                  f"({type(err).__name__}); {len(self._pending)} metrics were not sent", file=sys.stderr, flush=True)

    # -- logging ----------------------------------------------------------------------------
    def log_params(self, params: Mapping[str, Any]) -> None:
        if not self.enabled:
            return
        items = [Param(str(k), _param_value(v)) for k, v in params.items()]
        existing = set(self.client.get_run(self.run_id).data.params) if self.run_id else set()
        items = [p for p in items if p.key not in existing]
        for i in range(0, len(items), 100):
            self.client.log_batch(self.run_id, params=items[i:i + 100])

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        if not self.enabled:
            return
        self.client.log_batch(self.run_id, tags=[RunTag(str(k), str(v)) for k, v in tags.items()])

    def log_metrics(self, metrics: Mapping[str, Any], step: int, flush: bool = True) -> None:
        """Queue metrics for ``step`` (non-finite values are skipped); one ``log_batch`` on flush."""
        if not self.enabled:
            return
        ts = int(time.time() * 1000)
        for k, v in metrics.items():
            value = float(v.item() if hasattr(v, "item") else v)
            if math.isfinite(value) and int(step) > self._logged_up_to.get(str(k), -1):
                self._pending.append(Metric(str(k), value, ts, int(step)))
        if flush:
            self.flush()
        if self.listeners:
            plain = {str(k): float(v.item() if hasattr(v, "item") else v) for k, v in metrics.items()}
            for listener in self.listeners:
                listener(plain, int(step))

    def flush(self) -> None:
        """Send the queued metrics (and a heartbeat every HEARTBEAT_S). If the store does not
        answer, training goes on: the metrics stay queued (at most MAX_PENDING, oldest dropped
        first) and are sent at the next flush, with one warning."""
        from toolkit.tracking_health import HEARTBEAT_S, liveness_tags
        if not self.enabled:
            return
        try:
            if time.monotonic() - self._last_beat >= HEARTBEAT_S:
                self.client.log_batch(self.run_id, tags=[RunTag(k, v) for k, v in liveness_tags().items()])
                self._last_beat = time.monotonic()
            while self._pending:
                self.client.log_batch(self.run_id, metrics=self._pending[:1000])
                del self._pending[:1000]
        except Exception as exc:  # noqa: BLE001 - an outage of the store must not stop training
            if len(self._pending) > MAX_PENDING:
                del self._pending[: len(self._pending) - MAX_PENDING]
            if not self._outage_warned:
                self._outage_warned = True
                print(f"[ctk] warning: the tracking store {self.uri} did not take the metrics "
                      f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); training goes on and "
                      "they are sent when it answers again", file=sys.stderr, flush=True)
            return
        if self._outage_warned:
            self._outage_warned = False
            print("[ctk] the tracking store answers again; queued metrics sent", file=sys.stderr, flush=True)

    def note_checkpoint(self, path: str | Path, step: int) -> None:
        """Record the newest checkpoint on the run (``ctk runs`` shows it)."""
        if self.enabled:
            try:
                self.set_tags({"ctk.checkpoint": str(Path(path).resolve()), "ctk.checkpoint_step": str(step)})
            except Exception:  # noqa: BLE001 - the checkpoint itself is on disk; tags can wait
                pass

    def log_figure(self, figure: Any, name: str) -> None:
        """Log a matplotlib figure as ``figures/<name>.png`` and close it."""
        if self.enabled:
            self.client.log_figure(self.run_id, figure, f"figures/{name}.png")
        import matplotlib.pyplot as plt
        plt.close(figure)

    def log_text(self, text: str, path: str) -> None:
        if self.enabled:
            self.client.log_text(self.run_id, text, path)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        if self.enabled:
            self.client.log_artifact(self.run_id, str(path), artifact_path)

    def log_model(self, encoder: Any, recipe: Mapping[str, Any], extras: Mapping[str, Any] | None = None) -> None:
        """Log the trained encoder as data (``model/encoder.pt``: CPU state dict + resolved
        recipe + the domain's extras; see :mod:`toolkit.export`), never as a pickled module."""
        if not self.enabled:
            return
        from toolkit.export import ARTIFACT_PATH, save_encoder
        with tempfile.TemporaryDirectory() as tmp:
            path = save_encoder(Path(tmp) / Path(ARTIFACT_PATH).name, encoder, recipe, extras)
            self.client.log_artifact(self.run_id, str(path), str(Path(ARTIFACT_PATH).parent))


def _param_value(value: Any) -> str:
    text = str(value)
    return text if len(text) <= _MAX_PARAM else text[: _MAX_PARAM - 3] + "..."
