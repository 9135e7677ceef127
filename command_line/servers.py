"""``ctk ui`` and ``ctk server``: the mlflow UI on the runs' store, a tracking server for a cluster
(click wiring; toolkit/tracking/servers.py serves)."""

from __future__ import annotations

import sys

import click

from command_line.options import URI_HELP, err

__all__ = ["ui", "server"]


@click.command()
@click.option("--uri", help=URI_HELP)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on; anything but loopback exposes every run (a warning says how to protect it).",
)
@click.option("--port", default=5000, show_default=True, type=int)
@click.option("--basic-auth", is_flag=True, help="Require a login: mlflow's basic-auth app (needs mlflow[auth]).")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True, help="Web worker processes.")
def ui(uri: str | None, host: str, port: int, basic_auth: bool, workers: int) -> None:
    """Open the mlflow UI on the same store the runs log to (this machine only by default).

    \b
    Example:
      ctk ui --port 5000   (then browse http://127.0.0.1:5000)
    """
    from toolkit.studies.ui_view import prepare
    from toolkit.tracking.servers import ui as run_ui

    sys.exit(run_ui(uri, host, port, basic_auth, click.echo, err, views=prepare, workers=workers))


@click.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on (0.0.0.0: every machine; a warning says how to protect it).",
)
@click.option("--port", default=5000, show_default=True, type=int)
@click.option(
    "--backend-store-uri",
    "store",
    metavar="URI",
    help="Run store: sqlite:///PATH or postgresql://... (default: ./mlflow.db).",
)
@click.option(
    "--artifacts",
    type=click.Path(file_okay=False),
    default="mlartifacts",
    show_default=True,
    help="Folder where the server keeps the artifacts it serves.",
)
@click.option("--basic-auth", is_flag=True, help="Require a login: mlflow's basic-auth app (needs mlflow[auth]).")
@click.option("--workers", type=click.IntRange(min=1), help="Web worker processes  [default: one a core, at most 4]")
def server(host: str, port: int, store: str | None, artifacts: str, basic_auth: bool, workers: int | None) -> None:
    """Start an mlflow tracking server that every worker of a cluster sweep logs to (runs and
    artifacts over HTTP); prints the MLFLOW_TRACKING_URI to use; Ctrl-C stops it.

    \b
    Example:
      ctk server --host 0.0.0.0 --backend-store-uri postgresql://ctk@db/ctk --artifacts /shared/mlartifacts
    """
    from toolkit.tracking.servers import serve
    from toolkit.tracking.store import tracking_uri

    sys.exit(serve(tracking_uri(store), artifacts, host, port, basic_auth, echo=click.echo, workers=workers))
