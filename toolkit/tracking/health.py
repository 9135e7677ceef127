"""Runs that survive the tracking store: a fast check that the store answers, retries on
SQLite's lock and on get-or-create races, heartbeats, and dead runs marked as such.

* :func:`check_store` says whether a tracking URI can be used, before anything trains: a
  malformed URI, a server that refuses the connection or a SQLite file in a folder that does
  not exist is one line of error at once. A server that took the connection but has not
  answered within ``timeout`` seconds (10) is up and busy (a loaded machine's mlflow server):
  it is asked again, said in one line, and given up on after ``patience`` seconds (60).
* :func:`retrying` repeats a store call on transient failures (``database is locked``, a
  dropped connection) with exponential back-off.
* A running run carries ``ctk.heartbeat`` (unix seconds, refreshed at most every
  ``HEARTBEAT_S`` while it logs), ``ctk.host`` and ``ctk.pid``, and after each checkpoint
  ``ctk.checkpoint`` / ``ctk.checkpoint_step`` (the folder, ``ctk.checkpoint_dir``, is set at
  the start). :func:`mark_dead_runs` turns a RUNNING run whose
  process is gone (same host, pid not alive) or whose heartbeat is older than ``stale_after``
  into KILLED, with ``ctk.killed_reason`` saying why. It is a named step of the commands that
  need it, never a side effect of opening a run: ``ctk run`` before it creates a run
  (``toolkit.runs.retire_dead_runs``), a sweep before it decides its points, ``ctk tune``
  after its trials, and ``ctk runs``, which lists runs with their resume command.
"""

from __future__ import annotations

import os
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from toolkit.errors import CtkError

T = TypeVar("T")

__all__ = [
    "TrackingUnavailable",
    "check_store",
    "retrying",
    "HEARTBEAT_S",
    "STALE_AFTER_S",
    "liveness_tags",
    "mark_dead_runs",
    "pid_alive",
]

HEARTBEAT_S = 30.0
STALE_AFTER_S = 30 * 60.0
_TRANSIENT = (
    "database is locked",
    "database table is locked",
    "connection",
    "timed out",
    "temporarily unavailable",
    "503",
    "502",
    "504",
    "UNIQUE constraint failed",
)


class TrackingUnavailable(CtkError, RuntimeError):
    """The tracking store cannot be used; the message is one line naming the URI (exit status 2)."""

    exit_code = 2


def check_store(
    uri: str, timeout: float = 10.0, patience: float = 60.0, say: Callable[[str], None] | None = None
) -> None:
    """Raise :class:`TrackingUnavailable` unless ``uri`` is usable: first its form
    (:func:`toolkit.recipe.sections.uri_form_problem`, the check a recipe's ``tracking.uri``
    gets when loaded), then whether it answers. A refused or unresolvable address fails at
    once; a server that holds the request past ``timeout`` seconds is asked again until
    ``patience`` seconds have passed (``say`` hears one line when it first waits)."""
    from toolkit.recipe.sections import uri_form_problem

    problem = uri_form_problem(uri)
    if problem:
        raise TrackingUnavailable(problem)
    scheme = uri.split(":", 1)[0].lower()
    if scheme == "sqlite":
        folder = Path(uri[len("sqlite:///") :]).resolve().parent
        if not folder.is_dir() or not os.access(folder, os.W_OK):
            raise TrackingUnavailable(f"tracking URI {uri!r}: folder {folder} does not exist or is not writable")
        return
    if scheme in ("http", "https"):
        url = uri.rstrip("/") + "/health"
        started = time.monotonic()
        while True:
            try:
                with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - the user's own URI
                    if resp.status >= 400:
                        raise TrackingUnavailable(f"tracking URI {uri!r} answered {resp.status} at /health")
                return
            except (urllib.error.URLError, OSError, ValueError) as exc:
                reason = getattr(exc, "reason", exc)
                waited = time.monotonic() - started
                if isinstance(reason, TimeoutError) and waited + timeout <= patience:
                    if say is not None and waited < timeout * 1.5:
                        say(
                            f"[ctk] the tracking server {uri} took the connection but has not answered "
                            f"in {timeout:.0f} s; asking again for up to {patience:.0f} s"
                        )
                    continue
                raise TrackingUnavailable(
                    f"tracking URI {uri!r} did not answer within {max(waited, timeout):.0f} s "
                    f"({reason}); start it (ctk server) or set MLFLOW_TRACKING_URI"
                ) from None


def retrying(call: Callable[[], T], what: str = "tracking call", attempts: int = 6, first_wait: float = 0.2) -> T:
    """``call()``, repeated with back-off (0.2, 0.4, ... s) on transient store failures."""
    wait = first_wait
    for attempt in range(attempts):
        try:
            return call()
        except Exception as exc:  # noqa: BLE001 - only transient messages are retried
            if attempt == attempts - 1 or not any(t in str(exc) for t in _TRANSIENT):
                raise
            time.sleep(wait)
            wait *= 2
    raise AssertionError("unreachable")  # pragma: no cover


def liveness_tags() -> dict[str, str]:
    return {"ctk.heartbeat": f"{time.time():.0f}", "ctk.host": socket.gethostname(), "ctk.pid": str(os.getpid())}


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def death_reason(tags: dict[str, str], now: float | None = None, stale_after: float = STALE_AFTER_S) -> str | None:
    """Why a RUNNING run with these tags is dead, or None if it may be alive."""
    now = time.time() if now is None else now
    host, pid = tags.get("ctk.host"), tags.get("ctk.pid")
    if host == socket.gethostname() and pid and pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
        return f"process {pid} on {host} is gone"
    beat = tags.get("ctk.heartbeat")
    if beat and now - float(beat) > stale_after:
        return f"no heartbeat for {(now - float(beat)) / 60:.0f} min"
    return None


def mark_dead_runs(client: Any, experiment_ids: list[str], stale_after: float = STALE_AFTER_S) -> list[str]:
    """Mark the dead RUNNING runs of these experiments KILLED; returns their ids."""
    from mlflow.entities import ViewType

    marked = []
    runs = client.search_runs(
        experiment_ids, filter_string="attributes.status = 'RUNNING'", run_view_type=ViewType.ACTIVE_ONLY
    )
    for run in runs:
        reason = death_reason(run.data.tags, stale_after=stale_after)
        if reason is None:
            continue
        client.set_tag(run.info.run_id, "ctk.killed_reason", reason)
        client.set_terminated(run.info.run_id, "KILLED")
        marked.append(run.info.run_id)
    return marked
