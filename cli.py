"""ctk: the contrastive experiment toolkit's command line (click wiring only: what a command does
lives in commands.py and toolkit/; nothing here imports torch before a command needs it).

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
import shutil
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import click  # noqa: E402

from toolkit.errors import CtkError  # noqa: E402

ROOT = Path(__file__).resolve().parent
RECIPES = ROOT / "recipes"
FORMATS = ("table", "markdown", "csv", "json")  # toolkit.studies.tables.FORMATS, without importing it
COMPONENTS = ("losses", "selectors", "regularizers", "selector-schedules", "lr-schedules")  # toolkit.registry.LISTED
LISTABLE = (*COMPONENTS, "domains", "recipes", "tables")
URI_HELP = "mlflow tracking URI (default: $MLFLOW_TRACKING_URI or ./mlflow.db)."


class Ctk(click.Group):
    """The command group: a CtkError from any command is printed on stderr and sets the exit status."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except CtkError as exc:
            click.echo(f"{exc.label}: {exc}", err=True)
            ctx.exit(exc.exit_code)


def _err(message: str) -> None:
    click.echo(message, err=True)


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


@main.command()
@click.argument("recipe", type=click.Path(dir_okay=False), required=False)
@click.option(
    "--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a recipe value (validated like the file)."
)
@click.option("--experiment", help="mlflow experiment name (tracking.experiment).")
@click.option("--seed", type=int, help="Random seed (seed).")
@click.option("--device", type=click.Choice(["cpu", "cuda", "auto"]), help="Device (default: the recipe's).")
@click.option(
    "--resume",
    "resume",
    metavar="RUN",
    help="Continue a killed run (its mlflow run id or a checkpoint file; RECIPE optional).",
)
@click.option("--extend", is_flag=True, help="With --resume: allow a changed budget (continue a run for longer).")
@click.option(
    "--precision", type=click.Choice(["fp32", "bf16", "fp16"]), help="Autocast precision (default: the recipe's)."
)
@click.option(
    "--nproc", type=int, default=1, show_default=True, help="Processes on this node (one per device) under torchrun."
)
@click.option(
    "--nnodes", type=int, default=1, show_default=True, help="Nodes of a multi-node run (each runs this command)."
)
@click.option("--node-rank", type=int, default=0, show_default=True, help="This node's rank in [0, --nnodes).")
@click.option("--master-addr", default="127.0.0.1", show_default=True, help="Address of node 0 (multi-node).")
@click.option("--master-port", type=int, default=29500, show_default=True, help="Free port on node 0 (multi-node).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option("--verbose", is_flag=True, help="End with every final metric (not only the metrics of record).")
def run(
    recipe: str | None,
    sets: tuple[str, ...],
    experiment: str | None,
    seed: int | None,
    device: str | None,
    resume: str | None,
    extend: bool,
    precision: str | None,
    nproc: int,
    nnodes: int,
    node_rank: int,
    master_addr: str,
    master_port: int,
    quiet: bool,
    verbose: bool,
) -> None:
    """Run RECIPE and log it to mlflow (or continue a run with --resume RUN_ID).

    \b
    Example:
      ctk run recipes/vision/quickstart.yaml --set budget.epochs=2 --seed 1
      ctk run --resume 3f2a...c1
      ctk run recipes/vision/quickstart.yaml --precision bf16 --nproc 2
    """
    import commands

    extra = commands.overrides(seed, experiment, precision)
    if nproc > 1 or nnodes > 1:
        sys.exit(
            commands.relaunch(
                recipe,
                sets,
                extra,
                str(Path(__file__).resolve()),
                nproc=nproc,
                nnodes=nnodes,
                node_rank=node_rank,
                master_addr=master_addr,
                master_port=master_port,
                device=device,
                resume=resume,
                extend=extend,
                quiet=quiet,
            )
        )
    text = commands.run(recipe, sets, extra, device=device, resume=resume, extend=extend, quiet=quiet, verbose=verbose)
    if text is not None:
        click.echo(text)


@main.command()
@click.argument("recipe", type=click.Path(dir_okay=False))
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a recipe value.")
def show(recipe: str, sets: tuple[str, ...]) -> None:
    """Print RECIPE validated and fully resolved (every default filled in).

    \b
    Example:
      ctk show recipes/vision/quickstart.yaml --set objective.loss.temperature=0.2
    """
    import commands

    click.echo(commands.show(recipe, sets))


@main.command("list")
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
        from domains.installed import describe

        lines = [f"{name.ljust(8)}  [{spec.origin}: {spec.target}]  {desc}" for name, spec, desc in describe()]
    elif what == "recipes":
        from commands import recipes

        lines = recipes(RECIPES)
    else:
        from commands import tables

        lines = [f"{name}  {t.title}  ({len(t.rows)} rows)" for name, t in sorted(tables(RECIPES).items())]
    click.echo("\n".join(lines))


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


@main.command()
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
            _err,
            progress=not quiet,
            **launch,
        )
    )


@main.command()
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
            _err,
            progress=not quiet,
            width=shutil.get_terminal_size().columns,
            **launch,
        )
    )


@main.command()
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


@main.command()
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
        _err(figure_line(*write_figure(comp, plot, x_key, curves)))


@main.command()
@click.argument("run")
@click.option("--out", type=click.Path(dir_okay=False), help="File to write (default: encoder-RUN.pt).")
@click.option("--uri", help=URI_HELP)
def export(run: str, out: str | None, uri: str | None) -> None:
    """Write the trained encoder of RUN (a run id or an encoder file) as data: CPU tensors,
    the resolved recipe, no pickled code. Load it with domains.export.load_encoder.

    \b
    Example:
      ctk export 3f2a...c1 --out simclr.pt
    """
    import commands

    click.echo(commands.export(run, out, uri))


@main.command("runs")
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


@main.command()
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
        from domains.catalogues import load_catalogues
        from toolkit.studies.needs import table_needs

        load_catalogues()
        for n, t in sorted(tables.items()):
            click.echo(f"{n}  {t.title}  ({len(t.rows)} rows x {len(t.seeds)} seeds)\n    {table_needs(t).line()}")
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
            _err,
            progress=not quiet,
            **launch,
        )
    )


@main.command()
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

    sys.exit(run_ui(uri, host, port, basic_auth, click.echo, _err, views=prepare, workers=workers))


@main.command()
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


@main.command(context_settings={"ignore_unknown_options": True, "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def data(args: tuple[str, ...]) -> None:
    """Offline datasets: list | fetch NAME... | fetch default | path NAME | verify [NAME...].

    \b
    Example:
      ctk data fetch default      (what the default recipes and tests need)
      ctk data list               (every dataset, source, licence, size, state)
    """
    from domains.catalogues import load_catalogues
    from toolkit.data.command import main as data_main

    load_catalogues()
    sys.exit(data_main(list(args), prog="ctk data"))


if __name__ == "__main__":
    main()
