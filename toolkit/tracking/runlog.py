"""The face a trainer writes a run's record to: :class:`RunLog`.

Every method is declared here with what it is for and a default that keeps nothing, so a trainer
calls each one plainly (no ``hasattr``): :class:`toolkit.tracking.tracker.Tracker` is the mlflow
run; a calibration keeps only the params (``toolkit.runs.calibrate``); tests and benchmarks keep
what they check. Nothing here imports mlflow.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["RunLog"]


class RunLog:
    """What a trainer records a run through; the defaults record nothing."""

    #: the tracking run this record belongs to (checkpoints name it); None: no run
    run_id: str | None = None

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Record settings and what the run measured or chose (``measured.*``, ``env.*``)."""

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        """Record tags on the run (its checkpoint folder, its paper, ...)."""

    def log_metrics(self, metrics: Mapping[str, Any], step: int, flush: bool = True) -> None:
        """Record metrics at ``step`` (``flush``: send them now)."""

    def flush(self) -> None:
        """Send what is queued."""

    def log_figure(self, figure: Any, name: str) -> None:
        """Record a matplotlib figure as ``figures/<name>.png``; the figure is closed either way."""
        import matplotlib.pyplot as plt

        plt.close(figure)

    def log_text(self, text: str, path: str) -> None:
        """Record a text file (the resolved recipe) at ``path`` among the run's artifacts."""

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        """Record a file among the run's artifacts."""

    def log_model(self, encoder: Any, recipe: Mapping[str, Any], extras: Mapping[str, Any] | None = None) -> None:
        """Record the trained encoder as data (``toolkit.tracking.encoder_file``)."""

    def note_checkpoint(self, path: str | Path, step: int) -> None:
        """Hear of the checkpoint just written at ``step`` (the mlflow run records the newest,
        which ``ctk runs`` shows)."""
