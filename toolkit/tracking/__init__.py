"""Tracking: the mlflow store and the runs in it.

``store``    where runs live: the store's address, its client, experiments, the write lock
``runlog``   the face a trainer writes a run's record to (every method declared, defaults keep nothing)
``tracker``  one run: params, buffered metrics, figures, the trained encoder; FAILED on error
``measured`` what a run found or chose (``measured.*``) and where it ran (``env.*``), apart from its settings
``health``   a store that answers: retries, heartbeats, dead RUNNING runs marked KILLED
``encoder_file`` the trained encoder as a data-only file (logged with the run, read back anywhere)
``servers``  ``ctk ui`` / ``ctk server``: the mlflow UI and a shared tracking server

:func:`mlflow_environment` sets mlflow's environment defaults; nothing is set by importing a module.
"""

from __future__ import annotations

import os

__all__ = ["MLFLOW_DEFAULTS", "mlflow_environment"]

# mlflow's environment as ctk wants it where the user set nothing: no telemetry; an HTTP client
# that fails fast instead of retrying a dead server for minutes (ctk queues metrics itself,
# Tracker.flush, so training goes on)
MLFLOW_DEFAULTS = {
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "true",
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "20",
}


def mlflow_environment() -> None:
    """Set :data:`MLFLOW_DEFAULTS` where the environment does not set them. mlflow reads its
    telemetry setting when it is first imported and an mlflow server inherits the environment,
    so this runs before either: as a ``ctk`` command starts (``cli.main``) and before a store is
    opened (``toolkit.tracking.store.client_for``, for callers that are not the command line)."""
    for key, value in MLFLOW_DEFAULTS.items():
        os.environ.setdefault(key, value)
