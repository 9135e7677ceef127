"""ctk: the contrastive experiment toolkit's command line: the ``ctk`` group, to which the command
groups of ``command_line/`` are added (click wiring only: what a command does lives in commands.py,
the one place the command line meets the domains, and toolkit/; nothing here imports torch
before a command needs it).

    ctk run recipes/vision/quickstart.yaml
    ctk show recipes/vision/quickstart.yaml --set objective.loss.temperature=0.2
    ctk list losses
    ctk sweep recipes/toy/lmcl_three_bars_dp.yaml --grid objective.regularizers.0.weight=0,0.1,1
    ctk compare sweep-lmcl_three_bars_dp
    ctk reproduce --list
    ctk ui
    ctk data fetch default

Every failure a command reports is a toolkit.errors.CtkError: one message, one exit status
(recipe problems exit with code 2 and name the YAML path; a run that fails exits with 1).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import click  # noqa: E402

from command_line.data import data  # noqa: E402
from command_line.reading import compare, list_, runs_  # noqa: E402
from command_line.running import export, run, show  # noqa: E402
from command_line.servers import server, ui  # noqa: E402
from command_line.studies import reproduce, study, sweep, tune  # noqa: E402
from toolkit.errors import CtkError  # noqa: E402


class Ctk(click.Group):
    """The command group: a CtkError from any command is printed on stderr and sets the exit status;
    a Ctrl-C that no command turned into one (a sweep, a run and a study say what was kept) ends
    with 130, the shell's status for SIGINT, where click would print "Aborted!" and exit 1."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except CtkError as exc:
            click.echo(f"{exc.label}: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted: stopped by Ctrl-C", err=True)
            ctx.exit(130)


@click.group(cls=Ctk, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="ctk", prog_name="ctk")
def main() -> None:
    """ctk: one contrastive idea, every domain, runs you can compare.

    \b
    Example:
      ctk run recipes/vision/quickstart.yaml
    """
    from toolkit.tracking import mlflow_environment  # before any command imports mlflow or starts its server

    mlflow_environment()


for _command in (run, show, export, sweep, study, tune, reproduce, list_, runs_, compare, ui, server, data):
    main.add_command(_command)


if __name__ == "__main__":
    main()
