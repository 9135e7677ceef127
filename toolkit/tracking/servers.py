"""Serving the mlflow store safely: the command line of ``mlflow ui`` / ``mlflow server`` that
the ctk commands start, the loopback default and the warning when asked for more.

The mlflow UI and tracking server can read, change and delete every run of the store and serve
every artifact (checkpoints included) to whoever reaches the port; they have no login of their
own. So ctk binds them to ``127.0.0.1`` unless ``--host`` says otherwise, and a non-loopback
address prints one warning that points to the protections that exist: mlflow's basic-auth app
(``mlflow ui|server --app-name basic-auth``, users and passwords, needs ``mlflow[auth]``), which
ctk passes through as ``--basic-auth``, or keeping the loopback address and reaching it through
an SSH tunnel (``ssh -L 5000:127.0.0.1:5000 HOST``).

What the servers cost: mlflow starts 4 web workers by default and, beside them, a job runner of
seven processes for its GenAI jobs (scorers, trace rollups), each importing mlflow. ctk uses
none of those jobs, so its servers start without the job runner
(``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false`` unless it is set), and with
:data:`UI_WORKERS` web worker for ``ctk ui`` (one person browsing) and one a core, at most 4,
for ``ctk server`` (every worker of a sweep logging to it); ``--workers`` sets either. On a
2-core machine ``mlflow server`` was ready in 11.5 s with one worker and no job runner, against
20.2 s with mlflow's defaults (13 against 37 CPU-seconds).
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolkit.errors import CtkError

__all__ = [
    "LOOPBACK",
    "UI_WORKERS",
    "ui_route",
    "server_env",
    "server_workers",
    "is_loopback",
    "exposure_warning",
    "mlflow_command",
    "ui",
    "serve",
    "supervise",
]

LOOPBACK = "127.0.0.1"
UI_WORKERS = 1
JOBS_ENV = "MLFLOW_SERVER_ENABLE_JOB_EXECUTION"


def ui_route(experiment_id: str, run_id: str | None = None, page: str = "", view: str | None = None) -> str:
    """The mlflow UI's route (what follows ``http://HOST:PORT/``) to an experiment's runs, or to
    run ``run_id`` (and its tab ``page``, e.g. ``artifacts``), in the machine-learning view:
    mlflow 3.17 opens an experiment or a run in its GenAI navigation unless the link asks for
    ``workflowType=machine_learning``. ``view``: a saved columns view (``viewStateShareKey``,
    :mod:`toolkit.studies.ui_view`). Every UI link ctk prints or writes is made here, so they all
    have one form."""
    path = f"#/experiments/{experiment_id}/runs" + (f"/{run_id}" if run_id else "") + (f"/{page}" if page else "")
    return f"{path}?workflowType=machine_learning" + (f"&viewStateShareKey={view}" if view else "")


def server_env() -> dict[str, str]:
    """The environment ctk starts mlflow's servers in: this one, with mlflow's job runner off
    unless ``MLFLOW_SERVER_ENABLE_JOB_EXECUTION`` is set."""
    return {JOBS_ENV: "false", **os.environ}


def server_workers() -> int:
    """``ctk server``'s default web workers: one a core of this machine, at most 4 (mlflow's own
    default)."""
    return max(1, min(4, os.cpu_count() or 1))


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (``127.0.0.0/8``, ``::1``); any other name
    may resolve beyond this machine and counts as exposed."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def exposure_warning(host: str, port: int, basic_auth: bool) -> str | None:
    """The one warning for a server bound to ``host`` (None on loopback)."""
    if is_loopback(host):
        return None
    where = f"{host}:{port}"
    if basic_auth:
        return (
            f"warning: listening on {where}, beyond this machine. Basic-auth is on, but the "
            "traffic is plain HTTP (passwords and runs readable on the network): prefer an "
            f"SSH tunnel to {LOOPBACK} (ssh -L {port}:{LOOPBACK}:{port} HOST) or a TLS proxy."
        )
    return (
        f"warning: listening on {where}, beyond this machine: anyone who reaches the port "
        "can read and change every run and download every artifact. Protect it with "
        "--basic-auth (mlflow's basic-auth app, `mlflow ui --app-name basic-auth`, needs "
        f"mlflow[auth]) or keep --host {LOOPBACK} and use an SSH tunnel "
        f"(ssh -L {port}:{LOOPBACK}:{port} HOST)."
    )


def mlflow_command(
    kind: str,
    store: str,
    *,
    host: str,
    port: int,
    artifacts: str | None,
    basic_auth: bool,
    serve_artifacts: bool = False,
    workers: int = 1,
) -> list[str]:
    """``python -m mlflow ui|server`` on ``store`` bound to ``host:port`` with ``workers`` web
    workers; ``serve_artifacts``: the server stores artifacts under ``artifacts`` and serves
    them over HTTP (clients on other machines never need the folder).

    Raises ``ValueError`` for an unknown ``kind`` or fewer than one worker and a CtkError (exit
    status 2) when ``basic_auth`` is asked for but mlflow's auth extra (Flask-WTF) is missing,
    before anything starts.
    """
    if kind not in ("ui", "server"):
        raise ValueError(f"kind must be 'ui' or 'server', got {kind!r}")
    if workers < 1:
        raise ValueError(f"workers must be 1 or more, got {workers}")
    cmd = [
        sys.executable,
        "-m",
        "mlflow",
        kind,
        "--backend-store-uri",
        store,
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        str(workers),
    ]
    if artifacts and serve_artifacts:
        cmd += ["--serve-artifacts", "--artifacts-destination", artifacts]
    elif artifacts:
        cmd += ["--default-artifact-root", artifacts]
    if kind == "server" and not is_loopback(host):  # mlflow's host check: the names workers use
        names = {socket.gethostname(), socket.getfqdn(), "localhost", LOOPBACK} | (
            {host} if host != "0.0.0.0" else set()
        )
        cmd += ["--allowed-hosts", ",".join(sorted(f"{n}:{port}" for n in names))]
    if basic_auth:
        if importlib.util.find_spec("flask_wtf") is None:
            raise CtkError("--basic-auth needs mlflow's auth extra (Flask-WTF): pip install 'mlflow[auth]'", 2)
        cmd += ["--app-name", "basic-auth"]
    return cmd


def ui(
    uri: str | None,
    host: str,
    port: int,
    basic_auth: bool,
    echo: Callable[[str], None] = print,
    warn: Callable[[str], None] = print,
    ready_timeout: float = 180.0,
    views: Callable[[Any], list[tuple[str, str]]] | None = None,
    workers: int = UI_WORKERS,
) -> int:
    """``ctk ui``: ``mlflow ui`` on the existing store at ``uri`` (see
    :func:`~toolkit.tracking.store.tracking_uri`; a missing local store is not created: a
    CtkError says where ctk looked); ``views(client)`` writes the saved views the UI opens and
    returns ``(name, route)`` of each (``ctk ui`` passes
    :func:`toolkit.studies.ui_view.prepare`: the studies sit above tracking, so they are handed
    in, never imported here). The links are printed (``echo``) once the UI answers an HTTP
    request, a progress line until then (the exposure warning with ``warn``). Runs until
    Ctrl-C; returns the exit code."""
    from toolkit.tracking.store import artifact_root, no_store, reading_client, tracking_uri

    store = tracking_uri(uri)
    cmd = mlflow_command(
        "ui", store, host=host, port=port, artifacts=artifact_root(store), basic_auth=basic_auth, workers=workers
    )
    client = reading_client(store)
    if client is None:
        raise CtkError(no_store(store), 1)
    warning = exposure_warning(host, port, basic_auth)
    if warning:
        warn(warning)
    links = views(client) if views is not None else []
    echo(f"starting the mlflow UI for {store} on port {port} (this can take a minute) ...")

    def ready() -> None:
        echo(f"mlflow UI on http://{host}:{port}")
        for name, route in links:
            echo(f"  {name}: http://{host}:{port}/{route}")
        echo("stop it with Ctrl-C")

    return supervise(cmd, host, port, ready, echo, ready_timeout)


def supervise(
    cmd: list[str],
    host: str,
    port: int,
    on_ready: Callable[[], None],
    echo: Callable[[str], None],
    ready_timeout: float,
    note_every: float = 15.0,
) -> int:
    """Start the server ``cmd`` (its own process group), call ``on_ready`` once an HTTP request
    to its ``/health`` on ``host:port`` succeeds (a progress line every ``note_every`` seconds
    until then), and on Ctrl-C / SIGTERM stop it and its workers. mlflow's job runner stays off
    unless ``MLFLOW_SERVER_ENABLE_JOB_EXECUTION`` is set. Returns the exit code."""
    proc = subprocess.Popen(cmd, start_new_session=True, env=server_env())
    stop = {"asked": False}

    def ask_stop(signum: int, frame: object) -> None:
        stop["asked"] = True

    previous = {sig: signal.signal(sig, ask_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    url = f"http://{LOOPBACK if host in ('0.0.0.0', '::') else host}:{port}/health"
    try:
        start = time.monotonic()
        ready, note = False, start + note_every
        while not stop["asked"] and proc.poll() is None:
            if not ready and _answers(url):
                ready = True
                on_ready()
            if not ready and time.monotonic() > start + ready_timeout:
                echo(f"error: the server did not answer on port {port} within {ready_timeout:.0f} s")
                return 1
            if not ready and time.monotonic() > note:
                echo(f"  still starting ({time.monotonic() - start:.0f} s) ...")
                note += note_every
            time.sleep(0.2)
        if proc.poll() is not None and not stop["asked"]:
            return proc.returncode or 1
        return 0
    finally:
        _stop_group(proc)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def serve(
    store: str,
    artifacts: str,
    host: str,
    port: int,
    basic_auth: bool = False,
    echo: Callable[[str], None] = print,
    ready_timeout: float = 60.0,
    workers: int | None = None,
) -> int:
    """``ctk server``: an mlflow tracking server on ``store`` serving the artifacts kept in
    ``artifacts``; prints the URI that workers set as ``MLFLOW_TRACKING_URI`` once it answers,
    and on Ctrl-C / SIGTERM stops it and its workers (their own process group); ``workers``
    web workers (default :func:`server_workers`). Returns the exit code."""
    Path(artifacts).mkdir(parents=True, exist_ok=True)
    cmd = mlflow_command(
        "server",
        store,
        host=host,
        port=port,
        artifacts=str(Path(artifacts).resolve()),
        basic_auth=basic_auth,
        serve_artifacts=True,
        workers=workers or server_workers(),
    )
    warning = exposure_warning(host, port, basic_auth)
    if warning:
        echo(warning)
    name = socket.getfqdn() if host in ("0.0.0.0", "::") else host

    def ready() -> None:
        echo(f"mlflow tracking server on http://{host}:{port} (store {store}, artifacts {artifacts})")
        echo(f"workers: export MLFLOW_TRACKING_URI=http://{name}:{port}")
        echo("stop it with Ctrl-C")

    return supervise(cmd, host, port, ready, echo, ready_timeout)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 - our own server
            return resp.status < 400
    except OSError:
        return False


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's process group, SIGKILL after 10 s."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass
