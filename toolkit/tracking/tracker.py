"""mlflow tracking: the only tracker. One :class:`Tracker` is one mlflow run, written through
the face every trainer writes to (:class:`~toolkit.tracking.runlog.RunLog`).

Metrics are buffered and sent with one ``log_batch`` per logging interval; while the store does
not answer they stay queued and training goes on. A run that raises is marked FAILED with the
error as a tag, never left RUNNING.
"""

from __future__ import annotations

import math
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.tracking.health import HEARTBEAT_S, liveness_tags, retrying
from toolkit.tracking.runlog import RunLog
from toolkit.tracking.store import client_for, experiment_id, tracking_uri

if TYPE_CHECKING:  # mlflow is imported once the store is opened (client_for sets its environment first)
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

_MAX_PARAM = 6000
MAX_PENDING = 200_000  # metrics queued during a store outage


class Tracker(RunLog):
    """One mlflow run. Use as a context manager::

        with Tracker(experiment="ctk", run_name="vision-...", tags={...}) as tracker:
            tracker.log_params(flat)
            tracker.log_metrics({"train/loss": 0.5}, step=10)

    ``enabled=False`` (every rank but 0 in a distributed run) makes every call a no-op.
    ``run_id`` resumes an existing run (``ctk run --resume``). A resumed run replays the steps
    between its checkpoint and the kill; a metric already logged at a step is not logged there
    again, so every metric keeps one value per step (the replay is deterministic: same values).
    ``listeners`` are called with ``(metrics, step)`` after each :meth:`log_metrics` (``ctk tune``
    reports to Ray Tune through one). Entering a tracker changes no other run: marking dead runs
    is a step of the run path (``toolkit.runs.execute``) and of ``ctk runs``.
    """

    def __init__(
        self,
        experiment: str = "ctk",
        run_name: str | None = None,
        uri: str | None = None,
        tags: Mapping[str, str] | None = None,
        run_id: str | None = None,
        enabled: bool = True,
        listeners: Sequence[Callable[[dict[str, float], int], None]] = (),
    ) -> None:
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
        self.listeners = tuple(listeners)

    # -- lifecycle --------------------------------------------------------------------------
    def __enter__(self) -> Tracker:
        if not self.enabled:
            return self
        self.client = client_for(self.uri)
        tags = {**self.tags, **liveness_tags()}
        if self.run_id is None:
            eid = experiment_id(self.client, self.experiment)
            run = retrying(lambda: self.client.create_run(eid, run_name=self.run_name, tags=tags), "create_run")
            self.run_id = run.info.run_id
        else:
            self.client.update_run(self.run_id, status="RUNNING")
            self.set_tags(liveness_tags())
            stored = self.client.get_run(self.run_id).data
            for key in ("error", "ctk.killed_reason"):  # how it stopped before: no longer true
                if key in stored.tags:
                    self.client.delete_tag(self.run_id, key)
            for key in stored.metrics:
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
                killed = was_interrupted(exc if exc is not None else exc_type())
                reason = "interrupted" if exc_type is KeyboardInterrupt else f"{exc_type.__name__}: {exc}"
                self.client.set_tag(self.run_id, "error", reason[:5000])
                self.client.set_terminated(self.run_id, "KILLED" if killed else "FAILED")
        except Exception as err:  # noqa: BLE001 - never hide the run's own outcome behind the store's
            print(
                f"[ctk] warning: could not record the end of run {self.run_id} in {self.uri} "
                f"({type(err).__name__}); {len(self._pending)} metrics were not sent",
                file=sys.stderr,
                flush=True,
            )

    # -- logging ----------------------------------------------------------------------------
    def log_params(self, params: Mapping[str, Any]) -> None:
        if not self.enabled:
            return
        from mlflow.entities import Param

        items = [Param(str(k), _param_value(v)) for k, v in params.items()]
        existing = set(self.client.get_run(self.run_id).data.params) if self.run_id else set()
        items = [p for p in items if p.key not in existing]
        for i in range(0, len(items), 100):
            self.client.log_batch(self.run_id, params=items[i : i + 100])

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        if not self.enabled:
            return
        from mlflow.entities import RunTag

        self.client.log_batch(self.run_id, tags=[RunTag(str(k), str(v)) for k, v in tags.items()])

    def log_metrics(self, metrics: Mapping[str, Any], step: int, flush: bool = True) -> None:
        """Queue metrics for ``step`` (non-finite values are skipped); one ``log_batch`` on flush."""
        if not self.enabled:
            return
        from mlflow.entities import Metric

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
        if not self.enabled:
            return
        from mlflow.entities import RunTag

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
                print(
                    f"[ctk] warning: the tracking store {self.uri} did not take the metrics "
                    f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); training goes on and "
                    "they are sent when it answers again",
                    file=sys.stderr,
                    flush=True,
                )
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
        recipe + the domain's extras; see :mod:`toolkit.tracking.encoder_file`), never as a pickled module."""
        if not self.enabled:
            return
        from toolkit.tracking.encoder_file import ARTIFACT_PATH, save_encoder

        with tempfile.TemporaryDirectory() as tmp:
            path = save_encoder(Path(tmp) / Path(ARTIFACT_PATH).name, encoder, recipe, extras)
            self.client.log_artifact(self.run_id, str(path), str(Path(ARTIFACT_PATH).parent))


def was_interrupted(exc: BaseException | None) -> bool:
    """Whether ``exc`` is an interrupt (KeyboardInterrupt: Ctrl-C, the trainer's stop on SIGTERM,
    Ray's cancel) or an error raised while one was being handled: a second Ctrl-C that cuts a
    checkpoint write short ends in the writer's own error, with the interrupt as its context.
    Such a run was stopped, not failed: KILLED, and resumable."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def _param_value(value: Any) -> str:
    text = str(value)
    return text if len(text) <= _MAX_PARAM else text[: _MAX_PARAM - 3] + "..."
