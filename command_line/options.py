"""What the commands' click wiring shares: where the built-in recipes are, the choices a few
options offer (read without importing the modules that define them, so that ``ctk --help`` needs
no torch), the options of a launch, and the message on stderr."""

from __future__ import annotations

from pathlib import Path

import click

__all__ = ["ROOT", "CLI", "RECIPES", "FORMATS", "COMPONENTS", "LISTABLE", "URI_HELP", "err", "launch_options"]

ROOT = Path(__file__).resolve().parents[1]
CLI = ROOT / "cli.py"  # the script torchrun starts once per process (ctk run --nproc)
RECIPES = ROOT / "recipes"
FORMATS = ("table", "markdown", "csv", "json")  # toolkit.studies.tables.FORMATS, without importing it
COMPONENTS = ("losses", "selectors", "regularizers", "selector-schedules", "lr-schedules")  # toolkit.registry.LISTED
LISTABLE = (*COMPONENTS, "domains", "recipes", "tables")
URI_HELP = "mlflow tracking URI (default: $MLFLOW_TRACKING_URI or ./mlflow.db)."


def err(message: str) -> None:
    """A line on stderr (progress and notes; the answer goes to stdout)."""
    click.echo(message, err=True)


def launch_options(command):
    """--jobs / --address / --cpus / --gpus / --retry-failed, shared by sweep and reproduce."""
    for option in reversed(
        [
            click.option(
                "--jobs",
                type=click.IntRange(min=1),
                default=1,
                show_default=True,
                help="Points at once; >1 starts a local Ray instance (1: in this process, serially).",
            ),
            click.option(
                "--address",
                envvar="RAY_ADDRESS",
                metavar="ADDR",
                help="Join this Ray cluster (default $RAY_ADDRESS), e.g. auto or HEAD:6379.",
            ),
            click.option(
                "--cpus",
                type=click.FloatRange(min=0, min_open=True),
                help="Cores (and threads) per point (recipe resources.cpus).",
            ),
            click.option("--gpus", type=click.FloatRange(min=0), help="GPUs per point (recipe resources.gpus)."),
            click.option(
                "--retry-failed", is_flag=True, help="Run FAILED points again (finished ones are always skipped)."
            ),
        ]
    ):
        command = option(command)
    return command
