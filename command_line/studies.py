"""The commands of many runs: ``ctk sweep``, ``ctk study``, ``ctk tune``, ``ctk reproduce``
(click wiring; the studies themselves are toolkit/studies/'s, the domains reached through
commands.py)."""

from __future__ import annotations

import shutil
import sys

import click

from command_line.options import FORMATS, RECIPES, err, launch_options

__all__ = ["sweep", "study", "tune", "reproduce"]


@click.command()
@click.argument("recipe", type=click.Path(dir_okay=False))
@click.option(
    "--grid",
    multiple=True,
    required=True,
    metavar="KEY=V1,V2",
    help="A swept key and its values (repeatable: cartesian product).",
)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override applied to every point.")
@click.option("--experiment", help="Experiment grouping the runs (default: sweep-<recipe file>).")
@launch_options
@click.option("--quiet", is_flag=True, help="No progress bars.")
def sweep(
    recipe: str, grid: tuple[str, ...], sets: tuple[str, ...], experiment: str | None, quiet: bool, **launch
) -> None:
    """Run RECIPE once per grid point, all in one experiment under one parent run; then print
    the comparison. Run it again: finished points are skipped, killed ones resumed.

    \b
    Example:
      ctk sweep recipes/toy/lmcl_three_bars_cl.yaml --grid objective.loss.temperature=0.1,0.5 --grid seed=0,1
      ctk sweep recipes/toy/lmcl_three_bars_cl.yaml --grid seed=0,1,2,3 --jobs 2
    """
    import commands
    from toolkit.studies.launch import sweep_grid

    sys.exit(
        sweep_grid(
            recipe,
            list(grid),
            list(sets),
            experiment,
            commands.load,
            commands.lookup,
            click.echo,
            err,
            progress=not quiet,
            **launch,
        )
    )


@click.command()
@click.argument("study_file", metavar="STUDY.yaml", type=click.Path(dir_okay=False, exists=True))
@click.option("--seeds", metavar="S1,S2,...", help="Seeds instead of the study's (at least 2: the tests pair them).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("--plot", type=click.Path(dir_okay=False), metavar="FILE.png", help="Also write the forest plot here.")
@click.option("--dry-run", is_flag=True, help="Validate every (domain, arm) recipe and list the points; run nothing.")
@launch_options
@click.option("--quiet", is_flag=True, help="No progress bars.")
def study(study_file: str, seeds: str | None, fmt: str, plot: str | None, dry_run: bool, quiet: bool, **launch) -> None:
    """Run one objective change against its baseline in every domain of STUDY.yaml (seeds
    paired), then print one table: per domain, does it help, hurt, or make no detectable
    difference. Run it again: finished points are skipped.

    \b
    Example:
      ctk study studies/lmcl-dp.yaml --jobs 2
      ctk study studies/hard-negatives.yaml --seeds 0,1,2,3,4 --format markdown --plot forest.png
    """
    import commands
    from toolkit.studies.study import study_command

    sys.exit(
        study_command(
            study_file,
            seeds,
            fmt,
            plot,
            dry_run,
            commands.load,
            commands.lookup,
            click.echo,
            err,
            progress=not quiet,
            width=shutil.get_terminal_size().columns,
            **launch,
        )
    )


@click.command()
@click.argument("recipe", type=click.Path(dir_okay=False))
@click.option(
    "--space",
    "space",
    multiple=True,
    required=True,
    metavar="KEY=DIST",
    help="A searched key: uniform(a,b), loguniform(a,b), randint(a,b) or choice(x,y,...).",
)
@click.option("--samples", type=click.IntRange(min=1), default=8, show_default=True, help="Trials.")
@click.option("--metric", required=True, help="The periodic metric to optimise (e.g. online_knn_top1).")
@click.option("--mode", type=click.Choice(["max", "min"]), default="max", show_default=True)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override applied to every trial.")
@click.option("--jobs", type=click.IntRange(min=1), default=2, show_default=True, help="Trials at once.")
@click.option("--address", envvar="RAY_ADDRESS", metavar="ADDR", help="Join this Ray cluster.")
@click.option("--experiment", help="Experiment of the trials (default: tune-<recipe file>).")
@click.option("--out", type=click.Path(dir_okay=False), help="Best recipe (default: <recipe>-best.yaml).")
def tune(
    recipe: str,
    space: tuple[str, ...],
    samples: int,
    metric: str,
    mode: str,
    sets: tuple[str, ...],
    jobs: int,
    address: str | None,
    experiment: str | None,
    out: str | None,
) -> None:
    """Search RECIPE's hyper-parameters on Ray Tune (Optuna's sampler, ASHA early stopping on
    --metric); every trial is an mlflow child run; the best recipe is written as YAML.

    \b
    Example:
      ctk tune recipes/toy/lmcl_three_bars_cl.yaml --space objective.loss.temperature=loguniform(0.05,1) \
        --samples 8 --metric kmeans_accuracy --set budget.eval_every=50
    """
    import commands
    from toolkit.studies.tune import tune as run_tune

    commands.load(recipe, sets)  # every recipe problem before Ray starts
    config, path = run_tune(
        recipe,
        list(sets),
        list(space),
        samples=samples,
        metric=metric,
        mode=mode,
        lookup=commands.lookup,
        jobs=jobs,
        address=address,
        experiment=experiment,
        out=out,
    )
    click.echo(f"best: {' '.join(f'{k}={v}' for k, v in config.items())}; recipe written to {path}")


@click.command()
@click.argument("name", required=False)
@click.option("--list", "list_only", is_flag=True, help="List the paper tables that exist.")
@click.option("--seeds", help="Comma-separated seeds (default: the table's).")
@click.option(
    "--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override applied to every row (e.g. a shorter budget)."
)
@click.option(
    "--row",
    "rows",
    multiple=True,
    metavar="LABEL",
    help="Run only this row (repeatable; default: every row of the table).",
)
@click.option("--experiment", help="Experiment for the runs (default: reproduce-NAME).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@launch_options
@click.option("--quiet", is_flag=True, help="No progress bars.")
def reproduce(
    name: str | None,
    list_only: bool,
    seeds: str | None,
    sets: tuple[str, ...],
    rows: tuple[str, ...],
    experiment: str | None,
    fmt: str,
    quiet: bool,
    **launch,
) -> None:
    """Run the recipes behind a paper table; print measured (mean, std, 95% interval over
    seeds) beside the paper's number, with a verdict per row.

    \b
    Example:
      ctk reproduce --list
      ctk reproduce ring-mi-toy --seeds 0,1,2
      ctk reproduce lmcl-table4-cpu --row QT --row "LMCL(QT+DP)"
    """
    import commands
    from toolkit.studies.reproduce import run_table

    tables = commands.tables(RECIPES)
    if list_only or not name:
        needs = commands.table_needs(tables)
        for n, t in sorted(tables.items()):
            click.echo(f"{n}  {t.title}  ({len(t.rows)} rows x {len(t.seeds)} seeds)\n    {needs[n]}")
        return
    sys.exit(
        run_table(
            tables,
            name,
            seeds,
            list(rows),
            list(sets),
            experiment,
            fmt,
            commands.load,
            commands.lookup,
            click.echo,
            err,
            progress=not quiet,
            **launch,
        )
    )
