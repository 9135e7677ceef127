"""Tracking: the mlflow store and the runs in it.

``store``    where runs live: the store's address, its client, experiments, the write lock
``tracker``  one run: params, buffered metrics, figures, the trained encoder; FAILED on error
``health``   a store that answers: retries, heartbeats, dead RUNNING runs marked KILLED
``export``   the trained encoder as a data-only file (logged with the run, read back anywhere)
``servers``  ``ctk ui`` / ``ctk server``: the mlflow UI and a shared tracking server
"""
