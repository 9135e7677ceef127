"""mlflow tracking: the only tracker.

Default store: a SQLite file ``mlflow.db`` and an artifact folder ``mlartifacts/`` in the
working directory (no server); ``$MLFLOW_TRACKING_URI`` or the recipe's ``tracking.uri`` replace
it. Metrics are buffered and sent with one ``log_batch`` per logging interval. A run that raises
is marked FAILED with the error as a tag, never left RUNNING.
"""
from __future__ import annotations

import math
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "true")

from mlflow.entities import Metric, Param, RunTag  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

DEFAULT_DB = "mlflow.db"
DEFAULT_ARTIFACTS = "mlartifacts"
_MAX_PARAM = 6000


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


def client_for(uri: str | None = None) -> MlflowClient:
    return MlflowClient(tracking_uri=tracking_uri(uri))


def experiment_id(client: MlflowClient, name: str) -> str:
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    root = artifact_root(client.tracking_uri)
    location = str(Path(root) / name) if root else None
    # mlflow 3 opens an experiment without this tag in its GenAI (traces) view
    return client.create_experiment(name, artifact_location=location,
                                    tags={"mlflow.experimentKind": "custom_model_development"})


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

    # -- lifecycle --------------------------------------------------------------------------
    def __enter__(self) -> "Tracker":
        if not self.enabled:
            return self
        self.client = MlflowClient(tracking_uri=self.uri)
        if self.run_id is None:
            eid = experiment_id(self.client, self.experiment)
            run = self.client.create_run(eid, run_name=self.run_name, tags=self.tags)
            self.run_id = run.info.run_id
        else:
            self.client.update_run(self.run_id, status="RUNNING")
            for key in self.client.get_run(self.run_id).data.metrics:
                history = self.client.get_metric_history(self.run_id, key)
                self._logged_up_to[key] = max(m.step for m in history)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if not self.enabled or self.client is None:
            return
        try:
            self.flush()
        finally:
            if exc_type is None:
                self.client.set_terminated(self.run_id, "FINISHED")
            else:
                reason = "interrupted" if exc_type is KeyboardInterrupt else f"{exc_type.__name__}: {exc}"
                self.client.set_tag(self.run_id, "error", reason[:5000])
                self.client.set_terminated(self.run_id, "KILLED" if exc_type is KeyboardInterrupt else "FAILED")

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

    def flush(self) -> None:
        if not self.enabled or not self._pending:
            return
        pending, self._pending = self._pending, []
        for i in range(0, len(pending), 1000):
            self.client.log_batch(self.run_id, metrics=pending[i:i + 1000])

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
