"""Serving the mlflow store safely: the command line of ``mlflow ui`` / ``mlflow server`` that
the ctk commands start, the loopback default and the warning when asked for more.

The mlflow UI and tracking server can read, change and delete every run of the store and serve
every artifact (checkpoints included) to whoever reaches the port; they have no login of their
own. So ctk binds them to ``127.0.0.1`` unless ``--host`` says otherwise, and a non-loopback
address prints one warning that points to the protections that exist: mlflow's basic-auth app
(``mlflow ui|server --app-name basic-auth``, users and passwords, needs ``mlflow[auth]``), which
ctk passes through as ``--basic-auth``, or keeping the loopback address and reaching it through
an SSH tunnel (``ssh -L 5000:127.0.0.1:5000 HOST``).
"""
from __future__ import annotations

import importlib.util
import ipaddress
import sys

__all__ = ["LOOPBACK", "is_loopback", "exposure_warning", "mlflow_command"]

LOOPBACK = "127.0.0.1"


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
        return (f"warning: listening on {where}, beyond this machine. Basic-auth is on, but the "
                "traffic is plain HTTP (passwords and runs readable on the network): prefer an "
                f"SSH tunnel to {LOOPBACK} (ssh -L {port}:{LOOPBACK}:{port} HOST) or a TLS proxy.")
    return (f"warning: listening on {where}, beyond this machine: anyone who reaches the port "
            "can read and change every run and download every artifact. Protect it with "
            "--basic-auth (mlflow's basic-auth app, `mlflow ui --app-name basic-auth`, needs "
            f"mlflow[auth]) or keep --host {LOOPBACK} and use an SSH tunnel "
            f"(ssh -L {port}:{LOOPBACK}:{port} HOST).")


def mlflow_command(kind: str, store: str, *, host: str, port: int, artifacts: str | None,
                   basic_auth: bool) -> list[str]:
    """``python -m mlflow ui|server`` on ``store`` bound to ``host:port``.

    Raises ``ValueError`` for an unknown ``kind`` and ``RuntimeError`` when ``basic_auth`` is
    asked for but mlflow's auth extra (Flask-WTF) is missing, before anything starts.
    """
    if kind not in ("ui", "server"):
        raise ValueError(f"kind must be 'ui' or 'server', got {kind!r}")
    cmd = [sys.executable, "-m", "mlflow", kind, "--backend-store-uri", store,
           "--host", host, "--port", str(port)]
    if artifacts:
        cmd += ["--default-artifact-root", artifacts]
    if basic_auth:
        if importlib.util.find_spec("flask_wtf") is None:
            raise RuntimeError("--basic-auth needs mlflow's auth extra (Flask-WTF): "
                               "pip install 'mlflow[auth]'")
        cmd += ["--app-name", "basic-auth"]
    return cmd
