"""ctk: the contrastive experiment toolkit's command line.

    ctk run recipes/vision/quickstart.yaml
    ctk show recipes/vision/quickstart.yaml --set objective.loss.temperature=0.2
    ctk list losses
    ctk sweep recipes/toy/lmcl_clusters.yaml --grid objective.regularizers.0.weight=0,0.1,1
    ctk compare sweep-lmcl_clusters
    ctk reproduce --list
    ctk ui
    ctk data fetch default

Recipe problems exit with code 2 and name the YAML path; a run that fails exits with 1.
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import click  # noqa: E402
import yaml  # noqa: E402

from domains import registry as domain_registry  # noqa: E402
from toolkit import recipe as rc  # noqa: E402

ROOT = Path(__file__).resolve().parent
RECIPES = ROOT / "recipes"
FORMATS = ("table", "markdown", "csv", "json")  # toolkit.studies.tables.FORMATS, without importing it
LISTABLE = ("losses", "selectors", "regularizers", "domains", "recipes", "tables")


def _fail(message: str, code: int) -> None:
    click.echo(message, err=True)
    sys.exit(code)


def _load(recipe: str, sets: tuple[str, ...], extra: list[str] | None = None) -> rc.Recipe:
    from toolkit.runs import load_recipe
    try:
        return load_recipe(recipe, [*sets, *(extra or [])], domain_registry.get)
    except rc.RecipeError as exc:
        _fail(f"error: {exc}", 2)
    raise AssertionError  # unreachable


def _cli_overrides(seed: int | None, experiment: str | None) -> list[str]:
    out = []
    if seed is not None:
        out.append(f"seed={seed}")
    if experiment:
        out.append(f"tracking.experiment={experiment}")
    return out


def _execute(recipe: rc.Recipe, **kwargs) -> tuple[str | None, dict[str, float]]:
    from toolkit.checkpoint import CheckpointError
    from toolkit.runs import RunFinished, execute
    from toolkit.tracking.health import TrackingUnavailable
    from toolkit.training.trainer import NonFiniteLoss, RecipeMismatch
    try:
        return execute(recipe, domain_registry.get, **kwargs)
    except rc.RecipeError as exc:
        _fail(f"error: {exc}", 2)
    except (CheckpointError, RecipeMismatch, RunFinished) as exc:
        _fail(f"error: --resume: {exc}", 2)
    except TrackingUnavailable as exc:
        _fail(f"error: {exc}", 2)
    except NonFiniteLoss as exc:
        _fail(f"error: run stopped: {exc}", 1)
    except (FileNotFoundError, ValueError, domain_registry.DomainError) as exc:
        _fail(f"error: {exc}", 1)
    except KeyboardInterrupt as exc:
        _fail(f"interrupted: the run is marked KILLED; {exc or 'continue it with --resume RUN_ID'}", 130)
    raise AssertionError  # unreachable


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="ctk", prog_name="ctk")
def main() -> None:
    """ctk: one contrastive idea, every domain, runs you can compare.

    \b
    Example:
      ctk run recipes/vision/quickstart.yaml
    """


@main.command()
@click.argument("recipe", type=click.Path(dir_okay=False))
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a recipe value (validated like the file).")
@click.option("--experiment", help="mlflow experiment name (tracking.experiment).")
@click.option("--seed", type=int, help="Random seed (seed).")
@click.option("--device", type=click.Choice(["cpu", "cuda", "auto"]), help="Device (default: the recipe's).")
@click.option("--resume", "resume", metavar="RUN", help="Continue a killed run: its mlflow run id or a checkpoint file.")
@click.option("--extend", is_flag=True, help="With --resume: allow a changed budget (continue a run for longer).")
@click.option("--precision", type=click.Choice(["fp32", "bf16", "fp16"]), help="Autocast precision (default: the recipe's).")
@click.option("--nproc", type=int, default=1, show_default=True, help="Processes on this node (one per device) under torchrun.")
@click.option("--nnodes", type=int, default=1, show_default=True, help="Nodes of a multi-node run (each runs this command).")
@click.option("--node-rank", type=int, default=0, show_default=True, help="This node's rank in [0, --nnodes).")
@click.option("--master-addr", default="127.0.0.1", show_default=True, help="Address of node 0 (multi-node).")
@click.option("--master-port", type=int, default=29500, show_default=True, help="Free port on node 0 (multi-node).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def run(recipe: str, sets: tuple[str, ...], experiment: str | None, seed: int | None,
        device: str | None, resume: str | None, extend: bool, precision: str | None, nproc: int, nnodes: int,
        node_rank: int, master_addr: str, master_port: int, quiet: bool) -> None:
    """Run RECIPE and log it to mlflow.

    \b
    Example:
      ctk run recipes/vision/quickstart.yaml --set budget.epochs=2 --seed 1
      ctk run recipes/vision/quickstart.yaml --precision bf16 --nproc 2
    """
    extra = _cli_overrides(seed, experiment) + ([f"precision={precision}"] if precision else [])
    if nproc > 1 or nnodes > 1:
        r = _load(recipe, sets, extra)
        why = getattr(domain_registry.get(r.domain), "single_process_only", None)
        if why:
            _fail(f"error: --nproc {nproc} --nnodes {nnodes}: domain {r.domain!r} runs in one process only: {why}", 2)
        from toolkit.training.distributed import launch
        args = [recipe, *sum((["--set", s] for s in (*sets, *extra)), [])]
        args += [a for a in (["--device", device] if device else []) + (["--resume", resume] if resume else [])
                 + (["--extend"] if extend else []) + (["--quiet"] if quiet else [])]
        try:
            code = launch(nproc, str(Path(__file__).resolve()), ["run", *args], nnodes=nnodes,
                          node_rank=node_rank, master_addr=master_addr, master_port=master_port)
        except ValueError as exc:
            _fail(f"error: {exc}", 2)
        sys.exit(code)
    r = _load(recipe, sets, extra)
    dist = None
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from toolkit.training.distributed import Context
        dist = Context.from_env(device or r.device)
    start = time.perf_counter()
    clean = False
    try:
        run_id, metrics = _execute(r, resume=resume, device=device, progress=not quiet, distributed=dist,
                                   extend=extend)
        clean = True
    finally:
        if dist is not None:
            dist.close(clean)
    if dist is None or dist.is_main:
        click.echo(f"run {run_id} ({r.run_name}) finished in {time.perf_counter() - start:.1f} s")
        for k, v in sorted(metrics.items()):
            click.echo(f"  {k}: {v:.4f}")


@main.command()
@click.argument("recipe", type=click.Path(dir_okay=False))
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a recipe value.")
def show(recipe: str, sets: tuple[str, ...]) -> None:
    """Print RECIPE validated and fully resolved (every default filled in).

    \b
    Example:
      ctk show recipes/vision/quickstart.yaml --set objective.loss.temperature=0.2
    """
    r = _load(recipe, sets)
    click.echo(f"# {recipe} -> run name {r.run_name}")
    if r.precision == "auto":  # what a run here would pick (the recipe itself keeps 'auto')
        from toolkit.runs import precision_choice
        from toolkit.training.trainer import select_device
        choice = precision_choice("auto", select_device(r.device), domain_registry.get(r.domain))
        click.echo(f"# on this machine: {choice.line()}")
    from toolkit.objective import with_defaults
    shown = {**r.resolved, "objective": with_defaults(r.resolved["objective"])} if "objective" in r.resolved else r.resolved
    click.echo(yaml.safe_dump(shown, sort_keys=False).rstrip())


@main.command("list")
@click.argument("what", type=click.Choice(LISTABLE))
def list_(what: str) -> None:
    """List registered components, domains, recipes or paper tables.

    \b
    Example:
      ctk list losses
    """
    if what in ("losses", "selectors", "regularizers"):
        import toolkit.objective  # noqa: F401 - registers everything
        from toolkit.losses.modules import LOSSES
        from toolkit.regularizers import REGULARIZERS
        from toolkit.samplers import SELECTORS
        reg = {"losses": LOSSES, "selectors": SELECTORS, "regularizers": REGULARIZERS}[what]
        width = max(len(e.name) for e in reg)
        for e in reg:
            click.echo(f"{e.name.ljust(width)}  {e.description}")
    elif what == "domains":
        try:
            specs = domain_registry.specs()
        except domain_registry.DomainError as exc:
            _fail(f"error: {exc}", 1)
        for name, spec in sorted(specs.items()):
            try:
                desc = spec.load().description
            except domain_registry.DomainError as exc:
                desc = f"(unavailable: {exc})"
            click.echo(f"{name.ljust(8)}  [{spec.origin}: {spec.target}]  {desc}")
    elif what == "recipes":
        paths = [p for root in _recipe_roots() for p in Path(root).glob("**/*.yaml")]
        for path in sorted(p for p in paths if "tables" not in p.parts):
            try:
                data = yaml.safe_load(path.read_text()) or {}
            except yaml.YAMLError:
                data = {}
            desc = str(data.get("description", "") or "").strip().splitlines()
            shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            click.echo(f"{shown}  {desc[0] if desc else ''}")
    else:
        for name, table in sorted(_tables().items()):
            click.echo(f"{name}  {table.title}  ({len(table.rows)} rows)")


def launch_options(command):
    """--jobs / --address / --cpus / --gpus / --retry-failed, shared by sweep and reproduce."""
    for option in reversed([
        click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Points at once; >1 starts a local Ray instance (1: in this process, serially)."),
        click.option("--address", envvar="RAY_ADDRESS", metavar="ADDR",
                     help="Join this Ray cluster (default $RAY_ADDRESS), e.g. auto or HEAD:6379."),
        click.option("--cpus", type=click.FloatRange(min=0, min_open=True), help="Cores (and threads) per point (recipe resources.cpus)."),
        click.option("--gpus", type=click.FloatRange(min=0), help="GPUs per point (recipe resources.gpus)."),
        click.option("--retry-failed", is_flag=True, help="Run FAILED points again (finished ones are always skipped)."),
    ]):
        command = option(command)
    return command


def _run_sweep(points: list, experiment: str, parent: str, grid: dict, launch: dict, quiet: bool) -> tuple:
    from toolkit.studies.launch import LaunchError, run_sweep
    try:
        return run_sweep(points, domain_registry.get, experiment=experiment, parent_name=parent, grid=grid,
                            progress=not quiet, echo=lambda m: click.echo(m, err=True), **launch)
    except LaunchError as exc:
        _fail(f"error: {exc}", 2)
    raise AssertionError  # unreachable


@main.command()
@click.argument("recipe", type=click.Path(dir_okay=False))
@click.option("--grid", multiple=True, required=True, metavar="KEY=V1,V2", help="A swept key and its values (repeatable: cartesian product).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override applied to every point.")
@click.option("--experiment", help="Experiment grouping the runs (default: sweep-<recipe file>).")
@launch_options
@click.option("--quiet", is_flag=True, help="No progress bars.")
def sweep(recipe: str, grid: tuple[str, ...], sets: tuple[str, ...], experiment: str | None, quiet: bool,
          **launch) -> None:
    """Run RECIPE once per grid point, all in one experiment under one parent run; then print
    the comparison. Run it again: finished points are skipped, killed ones resumed.

    \b
    Example:
      ctk sweep recipes/toy/lmcl_clusters.yaml --grid objective.loss.temperature=0.1,0.5 --grid seed=0,1
      ctk sweep recipes/toy/lmcl_clusters.yaml --grid seed=0,1,2,3 --jobs 2
    """
    from toolkit.runs import expand_grid
    from toolkit.studies.sweeps import grid_points, log_sweep_figure
    try:
        points = expand_grid(list(grid))
    except rc.RecipeError as exc:
        _fail(f"error: {exc}", 2)
    experiment = experiment or f"sweep-{Path(recipe).stem}"
    todo = grid_points(recipe, points, list(sets), experiment, _load)
    code, _ = _run_sweep(todo, experiment, f"sweep-{Path(recipe).stem}",
                         {"recipe": recipe, "grid": list(grid), "set": list(sets)}, launch, quiet)
    comp = _print_comparison(experiment, todo[0].recipe.tracking.uri, soft=True)
    if comp is not None:
        log_sweep_figure(comp, experiment)
    sys.exit(code)


@main.command()
@click.argument("study_file", metavar="STUDY.yaml", type=click.Path(dir_okay=False, exists=True))
@click.option("--seeds", metavar="S1,S2,...", help="Seeds instead of the study's (at least 2: the tests pair them).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("--plot", type=click.Path(dir_okay=False), metavar="FILE.png", help="Also write the forest plot here.")
@click.option("--dry-run", is_flag=True, help="Validate every (domain, arm) recipe and list the points; run nothing.")
@launch_options
@click.option("--quiet", is_flag=True, help="No progress bars.")
def study(study_file: str, seeds: str | None, fmt: str, plot: str | None, dry_run: bool, quiet: bool,
          **launch) -> None:
    """Run one objective change against its baseline in every domain of STUDY.yaml (seeds
    paired), then print one table: per domain, does it help, hurt, or make no detectable
    difference. Run it again: finished points are skipped.

    \b
    Example:
      ctk study studies/lmcl-dp.yaml --jobs 2
      ctk study studies/hard-negatives.yaml --seeds 0,1,2,3,4 --format markdown --plot forest.png
    """
    from toolkit.runs import load_recipe
    from toolkit.studies.study import forest_figure, load_study, run_study
    from toolkit.studies.tables import render

    def load(path: str, sets: list[str]) -> rc.Recipe:
        return load_recipe(path, sets, domain_registry.get)
    try:
        chosen = [int(s) for s in seeds.split(",")] if seeds else None
    except ValueError:
        _fail(f"error: --seeds {seeds!r}: expected integers separated by commas, e.g. 0,1,2", 2)
    try:
        spec = load_study(study_file, load, domain_registry.get, chosen)
    except rc.RecipeError as exc:
        _fail(f"error: {exc}", 2)
    if dry_run:
        click.echo(f"study {spec.spec.name}: {len(spec.recipes)} domains x {len(spec.arms)} arms x "
                   f"{len(spec.seeds)} seeds, experiment {spec.experiment!r}; every recipe is valid")
        for (domain, arm), sets in spec.overrides.items():
            click.echo(f"  {domain:<14} {arm:<12} {spec.recipes[domain]} {' '.join(sets) or '(as written)'}")
        return
    code, report, _ = run_study(spec, load, domain_registry.get, progress=not quiet,
                                echo=lambda m: click.echo(m, err=True), **launch)
    click.echo(render(report, fmt, shutil.get_terminal_size().columns if fmt == "table" else None))
    if plot:
        forest_figure(report).savefig(plot, dpi=120)
        click.echo(f"forest plot: {plot}", err=True)
    sys.exit(code)


@main.command()
@click.argument("recipe", type=click.Path(dir_okay=False))
@click.option("--space", "space", multiple=True, required=True, metavar="KEY=DIST",
              help="A searched key: uniform(a,b), loguniform(a,b), randint(a,b) or choice(x,y,...).")
@click.option("--samples", type=click.IntRange(min=1), default=8, show_default=True, help="Trials.")
@click.option("--metric", required=True, help="The periodic metric to optimise (e.g. online_knn_top1).")
@click.option("--mode", type=click.Choice(["max", "min"]), default="max", show_default=True)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override applied to every trial.")
@click.option("--jobs", type=click.IntRange(min=1), default=2, show_default=True, help="Trials at once.")
@click.option("--address", envvar="RAY_ADDRESS", metavar="ADDR", help="Join this Ray cluster.")
@click.option("--experiment", help="Experiment of the trials (default: tune-<recipe file>).")
@click.option("--out", type=click.Path(dir_okay=False), help="Best recipe (default: <recipe>-best.yaml).")
def tune(recipe: str, space: tuple[str, ...], samples: int, metric: str, mode: str, sets: tuple[str, ...],
         jobs: int, address: str | None, experiment: str | None, out: str | None) -> None:
    """Search RECIPE's hyper-parameters on Ray Tune (Optuna's sampler, ASHA early stopping on
    --metric); every trial is an mlflow child run; the best recipe is written as YAML.

    \b
    Example:
      ctk tune recipes/toy/lmcl_three_bars_cl.yaml --space objective.loss.temperature=loguniform(0.05,1) \
        --samples 8 --metric kmeans_accuracy --set budget.eval_every=50
    """
    from toolkit.studies.launch import LaunchError
    from toolkit.studies.tune import tune as run_tune
    _load(recipe, sets)  # every recipe problem before Ray starts
    try:
        config, path = run_tune(recipe, list(sets), list(space), samples=samples, metric=metric, mode=mode,
                                lookup=domain_registry.get, jobs=jobs, address=address,
                                experiment=experiment, out=out)
    except rc.RecipeError as exc:
        _fail(f"error: {exc}", 2)
    except LaunchError as exc:
        _fail(f"error: {exc}", 2)
    click.echo(f"best: {' '.join(f'{k}={v}' for k, v in config.items())}; recipe written to {path}")


def _print_comparison(experiment: str, uri: str | None, fmt: str = "table", soft: bool = False, **kwargs):
    """Print the comparison of ``experiment`` (and refresh its mlflow columns view); ``soft``:
    a sweep with nothing to compare yet says so and goes on."""
    import shutil

    from toolkit.studies.comparison import comparison_text
    try:
        text, comp = comparison_text(experiment, uri, fmt, shutil.get_terminal_size().columns, **kwargs)
    except ValueError as exc:
        if soft:
            click.echo(f"(no comparison: {exc})", err=True)
            return None
        _fail(f"error: {exc}", 1)
    click.echo(text)
    return comp


@main.command()
@click.argument("experiment")
@click.option("--by", multiple=True, metavar="KEY",
              help="Group by this recipe key (repeatable; default: the keys whose values differ, seed aside).")
@click.option("--metric", "metrics", multiple=True, help="Metric (repeatable; default: every evaluation metric).")
@click.option("--baseline", metavar="GROUP", help="Test every group against this one (its label, e.g. 'temperature=0.5').")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("--plot", type=click.Path(dir_okay=False), metavar="FILE.png",
              help="Draw the first metric against a numeric swept key: a line per method, 95% bands.")
@click.option("--x", "x_key", metavar="KEY", help="The plot's x key (default: the numeric swept key with most values).")
@click.option("--curves", metavar="METRIC", help="Plot METRIC's learning curves instead: mean and 95% band over seeds per group.")
@click.option("--uri", help="mlflow tracking URI (default: $MLFLOW_TRACKING_URI or ./mlflow.db).")
@click.option("--per-run", is_flag=True, help="One row per run instead of grouping seeds.")
def compare(experiment: str, by: tuple[str, ...], metrics: tuple[str, ...], baseline: str | None,
            fmt: str, plot: str | None, x_key: str | None, curves: str | None, uri: str | None,
            per_run: bool) -> None:
    """Compare the runs of EXPERIMENT: per group and metric the mean, std, n and the 95%
    Student-t interval; with --baseline the difference, its interval, the p-value (paired by
    seed, else Welch) and significance after Holm's correction.

    \b
    Example:
      ctk compare sweep-quickstart --metric linear_top1 --baseline temperature=0.5
      ctk compare sweep-quickstart --format markdown --plot temperature.png
    """
    from toolkit.studies.comparison import write_figure
    comp = _print_comparison(experiment, uri, fmt, by=list(by) or None, metrics=list(metrics) or None,
                             per_run=per_run, baseline=baseline)
    if plot or curves:
        try:
            path, logged = write_figure(comp, plot, x_key, curves)
        except ValueError as exc:
            _fail(f"error: {exc}", 1)
        where = f"; logged to parent run(s) {', '.join(logged)}" if logged else \
            " (the experiment has no parent run to log it to)"
        click.echo(f"figure: {path}{where}", err=True)


@main.command()
@click.argument("run")
@click.option("--out", type=click.Path(dir_okay=False), help="File to write (default: encoder-RUN.pt).")
@click.option("--uri", help="mlflow tracking URI (default: $MLFLOW_TRACKING_URI or ./mlflow.db).")
def export(run: str, out: str | None, uri: str | None) -> None:
    """Write the trained encoder of RUN (a run id or an encoder file) as data: CPU tensors,
    the resolved recipe, no pickled code. Load it with domains.export.load_encoder.

    \b
    Example:
      ctk export 3f2a...c1 --out simclr.pt
    """
    from domains.export import export_encoder
    from toolkit.checkpoint import CheckpointError
    target = out or f"encoder-{Path(run).stem}.pt"
    try:
        path = export_encoder(run, target, uri)
    except (CheckpointError, rc.RecipeError) as exc:
        _fail(f"error: {exc}", 2)
    except FileNotFoundError as exc:
        _fail(f"error: {exc}", 1)
    click.echo(f"wrote {path} (load: from domains.export import load_encoder; load_encoder({str(path)!r}))")


@main.command("runs")
@click.argument("experiment", required=False)
@click.option("--uri", help="mlflow tracking URI (default: $MLFLOW_TRACKING_URI or ./mlflow.db).")
@click.option("--limit", default=30, show_default=True, help="Newest runs shown.")
def runs_(experiment: str | None, uri: str | None, limit: int) -> None:
    """List runs with their status, last heartbeat, last checkpoint and the command that
    resumes them; RUNNING runs whose process is gone are marked KILLED first.

    \b
    Example:
      ctk runs quickstart
    """
    from toolkit.studies.listing import runs_table
    try:
        click.echo(runs_table(experiment, uri, limit))
    except ValueError as exc:
        _fail(f"error: {exc}", 1)


def _recipe_roots() -> list[Path]:
    """The built-in recipes folder plus the folders plugin domains ship."""
    roots = [RECIPES]
    for spec in domain_registry.specs().values():
        if spec.origin != "built-in":
            try:
                cls = spec.load()
            except domain_registry.DomainError:
                continue
            roots += [Path(d) for d in cls.recipe_dirs]
    return roots


def _tables() -> dict:
    from toolkit.studies.reproduce import discover_tables
    try:
        return discover_tables(_recipe_roots())
    except (rc.RecipeError, ValueError) as exc:
        _fail(f"error: {exc}", 2)
    raise AssertionError


@main.command()
@click.argument("name", required=False)
@click.option("--list", "list_only", is_flag=True, help="List the paper tables that exist.")
@click.option("--seeds", help="Comma-separated seeds (default: the table's).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override applied to every row (e.g. a shorter budget).")
@click.option("--row", "rows", multiple=True, metavar="LABEL",
              help="Run only this row (repeatable; default: every row of the table).")
@click.option("--experiment", help="Experiment for the runs (default: reproduce-NAME).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@launch_options
@click.option("--quiet", is_flag=True, help="No progress bars.")
def reproduce(name: str | None, list_only: bool, seeds: str | None, sets: tuple[str, ...],
              rows: tuple[str, ...], experiment: str | None, fmt: str, quiet: bool, **launch) -> None:
    """Run the recipes behind a paper table; print measured (mean, std, 95% interval over
    seeds) beside the paper's number, with a verdict per row, then the paper's claims, each
    tested over seeds (paired t-test, Holm-corrected).

    \b
    Example:
      ctk reproduce --list
      ctk reproduce ring-mi-toy --seeds 0,1,2
      ctk reproduce lmcl-table4-cpu --row QT --row "LMCL(QT+DP)"
    """
    import shutil

    from toolkit.studies.reproduce import render_reproduction
    from toolkit.studies.sweeps import fill_measured, select_rows, table_points
    from toolkit.tracking.store import client_for
    from toolkit.studies.ui_view import publish_view
    tables = _tables()
    if list_only or not name:
        for n, t in sorted(tables.items()):
            click.echo(f"{n}  {t.title}  ({len(t.rows)} rows x {len(t.seeds)} seeds)")
        return
    if name not in tables:
        _fail(f"error: no paper table {name!r}; expected one of: {', '.join(sorted(tables))}", 2)
    table = tables[name]
    table.seeds = [int(s) for s in seeds.split(",")] if seeds else table.seeds
    try:
        select_rows(table, name, list(rows)) if rows else None
    except ValueError as exc:
        _fail(f"error: {exc}", 2)
    experiment = experiment or f"reproduce-{name}"
    todo = table_points(table, name, list(sets), experiment, _load)
    start = time.perf_counter()
    code, outcomes = _run_sweep(todo, experiment, f"reproduce-{name}", {"table": name, "seeds": table.seeds,
                                "set": list(sets), "rows": [row.label for row in table.rows]}, launch, quiet)
    fill_measured(table, todo, outcomes)
    click.echo(render_reproduction(table, fmt, shutil.get_terminal_size().columns))
    click.echo(f"({len(todo)} runs in {time.perf_counter() - start:.0f} s; mlflow experiment {experiment!r})",
               err=fmt in ("csv", "json"))  # stdout carries only the parseable report
    publish_view(client_for(todo[0].recipe.tracking.uri), experiment)
    sys.exit(code)


@main.command()
@click.option("--uri", help="mlflow tracking URI (default: $MLFLOW_TRACKING_URI or ./mlflow.db).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; anything but loopback exposes every run (a warning says how to protect it).")
@click.option("--port", default=5000, show_default=True, type=int)
@click.option("--basic-auth", is_flag=True, help="Require a login: mlflow's basic-auth app (needs mlflow[auth]).")
def ui(uri: str | None, host: str, port: int, basic_auth: bool) -> None:
    """Open the mlflow UI on the same store the runs log to (this machine only by default).

    \b
    Example:
      ctk ui --port 5000   (then browse http://127.0.0.1:5000)
    """
    from toolkit.tracking.servers import exposure_warning, mlflow_command
    from toolkit.tracking.store import artifact_root, client_for, tracking_uri
    from toolkit.studies.ui_view import prepare
    store = tracking_uri(uri)
    try:
        cmd = mlflow_command("ui", store, host=host, port=port, artifacts=artifact_root(store),
                             basic_auth=basic_auth)
    except RuntimeError as exc:
        _fail(f"error: {exc}", 2)
    warning = exposure_warning(host, port, basic_auth)
    if warning:
        click.echo(warning, err=True)
    click.echo(f"mlflow UI on http://{host}:{port} for {store}")
    for name, route in prepare(client_for(store)):
        click.echo(f"  {name}: http://{host}:{port}/{route}")
    sys.stdout.flush()
    os.execvp(cmd[0], cmd)


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0: every machine; a warning says how to protect it).")
@click.option("--port", default=5000, show_default=True, type=int)
@click.option("--backend-store-uri", "store", metavar="URI", help="Run store: sqlite:///PATH or postgresql://... (default: ./mlflow.db).")
@click.option("--artifacts", type=click.Path(file_okay=False), default="mlartifacts", show_default=True, help="Folder where the server keeps the artifacts it serves.")
@click.option("--basic-auth", is_flag=True, help="Require a login: mlflow's basic-auth app (needs mlflow[auth]).")
def server(host: str, port: int, store: str | None, artifacts: str, basic_auth: bool) -> None:
    """Start an mlflow tracking server that every worker of a cluster sweep logs to (runs and
    artifacts over HTTP); prints the MLFLOW_TRACKING_URI to use; Ctrl-C stops it.

    \b
    Example:
      ctk server --host 0.0.0.0 --backend-store-uri postgresql://ctk@db/ctk --artifacts /shared/mlartifacts
    """
    from toolkit.tracking.servers import serve
    from toolkit.tracking.store import tracking_uri
    try:
        sys.exit(serve(tracking_uri(store), artifacts, host, port, basic_auth, echo=click.echo))
    except RuntimeError as exc:
        _fail(f"error: {exc}", 2)


@main.command(context_settings={"ignore_unknown_options": True, "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def data(args: tuple[str, ...]) -> None:
    """Offline datasets: list | fetch NAME... | fetch default | path NAME | verify [NAME...].

    \b
    Example:
      ctk data fetch default      (what the default recipes and tests need)
      ctk data list               (every dataset, source, licence, size, state)
    """
    from domains.packaged import load_catalogues
    from toolkit.data.cli import main as data_main
    load_catalogues()
    sys.exit(data_main(list(args), prog="ctk data"))

if __name__ == "__main__":
    main()
