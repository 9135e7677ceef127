"""The commands that read what exists: ``ctk list`` (components, domains, recipes, tables),
``ctk runs`` and ``ctk compare`` (the tracking store). Nothing here imports torch but ``ctk list
domains`` (which loads every domain)."""

from __future__ import annotations

import click

from command_line.options import COMPONENTS, FORMATS, LISTABLE, RECIPES, URI_HELP, err

__all__ = ["list_", "runs_", "compare"]


@click.command("list")
@click.argument("what", type=click.Choice(LISTABLE))
def list_(what: str) -> None:
    """List registered components, domains, recipes or paper tables.

    \b
    Example:
      ctk list losses
      ctk list selector-schedules    # objective.selector.schedule.name
      ctk list lr-schedules          # schedule.name (the learning rate)
    """
    if what in COMPONENTS:  # read from the source: no component (nor torch) is imported
        from toolkit.recipe.sections import LR_SCHEDULES
        from toolkit.registry import LISTED, declared

        entries = LR_SCHEDULES if what == "lr-schedules" else declared(LISTED[what])
        width = max(map(len, entries))
        lines = [f"{name.ljust(width)}  {entries[name]}" for name in sorted(entries)]
    elif what == "domains":  # loads every domain (torch): one that does not load says why
        from commands import domains

        lines = domains()
    elif what == "recipes":
        from commands import recipes

        lines = recipes(RECIPES)
    else:
        from commands import tables

        lines = [f"{name}  {t.title}  ({len(t.rows)} rows)" for name, t in sorted(tables(RECIPES).items())]
    click.echo("\n".join(lines))


@click.command("runs")
@click.argument("experiment", required=False)
@click.option("--uri", help=URI_HELP)
@click.option("--limit", default=30, show_default=True, help="Newest runs shown.")
def runs_(experiment: str | None, uri: str | None, limit: int) -> None:
    """List runs with their status, last heartbeat, last checkpoint and the command that
    resumes them; RUNNING runs whose process is gone are marked KILLED first.

    \b
    Example:
      ctk runs quickstart
    """
    from toolkit.studies.listing import runs_table

    click.echo(runs_table(experiment, uri, limit))


@click.command()
@click.argument("experiment")
@click.option(
    "--by",
    multiple=True,
    metavar="KEY",
    help="Group by this key (repeatable; default: the settings whose values differ, seed aside).",
)
@click.option("--metric", "metrics", multiple=True, help="Metric (repeatable; default: every evaluation metric).")
@click.option(
    "--baseline", metavar="GROUP", help="Test every group against this one (its label, e.g. 'temperature=0.5')."
)
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option(
    "--plot",
    type=click.Path(dir_okay=False),
    metavar="FILE.png",
    help="Draw the first metric against a numeric swept key: a line per method, 95% bands.",
)
@click.option("--x", "x_key", metavar="KEY", help="The plot's x key (default: the numeric swept key with most values).")
@click.option(
    "--curves", metavar="METRIC", help="Plot METRIC's learning curves instead: mean and 95% band over seeds per group."
)
@click.option("--uri", help=URI_HELP)
@click.option("--per-run", is_flag=True, help="One row per run instead of grouping seeds.")
@click.option(
    "--strict", is_flag=True, help="Refuse (exit 1) when the runs differ in steps trained, precision or commit."
)
def compare(
    experiment: str,
    by: tuple[str, ...],
    metrics: tuple[str, ...],
    baseline: str | None,
    fmt: str,
    plot: str | None,
    x_key: str | None,
    curves: str | None,
    uri: str | None,
    per_run: bool,
    strict: bool,
) -> None:
    """Compare the runs of EXPERIMENT: per group and metric the mean, std, n and the 95%
    Student-t interval; with --baseline the difference, its interval, the p-value (paired by
    seed, else Welch) and significance after Holm's correction. Groups are the settings that
    differ (seed aside); a line under the table says what else differs (steps, precision, CPU...).

    \b
    Example:
      ctk compare sweep-quickstart --metric linear_top1 --baseline temperature=0.5
      ctk compare sweep-quickstart --format markdown --plot temperature.png
    """
    import shutil

    from toolkit.studies.comparison import comparison_text, figure_line, write_figure

    text, comp = comparison_text(
        experiment,
        uri,
        fmt,
        shutil.get_terminal_size().columns,
        by=list(by) or None,
        metrics=list(metrics) or None,
        per_run=per_run,
        baseline=baseline,
        strict=strict,
    )
    click.echo(text)
    if plot or curves:
        err(figure_line(*write_figure(comp, plot, x_key, curves)))
