"""What the commands that need the domain registry do behind their options (command_line/ parses the
options and calls these): ``ctk run`` (in this process or relaunched under torchrun), ``ctk
show``, ``ctk export``, ``ctk list domains|recipes|tables``, what a paper table needs (``ctk
reproduce --list``) and ``ctk data`` (on the installed domains' datasets, one catalogue).

The run path's own failures (a checkpoint, the trainer, Ctrl-C) become a
:class:`~toolkit.errors.CtkError` here, with the exit status the command ends with; the
toolkit's errors already are one. Nothing here imports torch before a recipe is loaded.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import yaml

from domains import installed
from toolkit.errors import CtkError

__all__ = [
    "lookup",
    "load",
    "overrides",
    "relaunch",
    "run",
    "execute",
    "summary",
    "show",
    "export",
    "domains",
    "recipes",
    "tables",
    "datasets",
    "table_needs",
    "data_list",
    "data_fetch",
    "data_path",
    "data_verify",
]

lookup = (
    installed.get
)  # a domain's name -> its class: what the toolkit's commands (sweep, study, tune, tables) are handed


def load(recipe: str, sets: tuple[str, ...] | list[str] = (), extra: list[str] | None = None) -> Any:
    """The validated recipe (a RecipeError, exit status 2, lists every problem)."""
    from toolkit.runs import load_recipe

    return load_recipe(recipe, [*sets, *(extra or [])], lookup)


def overrides(seed: int | None, experiment: str | None, precision: str | None = None) -> list[str]:
    """The ``--set`` values that ``--seed``, ``--experiment`` and ``--precision`` stand for."""
    return (
        ([f"seed={seed}"] if seed is not None else [])
        + ([f"tracking.experiment={experiment}"] if experiment else [])
        + ([f"precision={precision}"] if precision else [])
    )


def relaunch(
    recipe: str | None,
    sets: tuple[str, ...],
    extra: list[str],
    cli: str,
    *,
    nproc: int,
    nnodes: int,
    node_rank: int,
    master_addr: str,
    master_port: int,
    device: str | None,
    resume: str | None,
    extend: bool,
    quiet: bool,
) -> int:
    """``ctk run --nproc/--nnodes``: check the recipe, then run ``cli run ...`` once per process
    under torchrun; returns torchrun's exit status."""
    p = load_for_run(recipe, sets, extra, resume, device=device, extend=extend)
    why = p.domain.single_process_only
    if why:
        raise CtkError(
            f"--nproc {nproc} --nnodes {nnodes}: domain {p.recipe.domain!r} runs in one process only: {why}", 2
        )
    from toolkit.training.distributed import launch

    args = [*([recipe] if recipe else []), *(word for s in (*sets, *extra) for word in ("--set", s))]
    args += (
        (["--device", device] if device else [])
        + (["--resume", resume] if resume else [])
        + (["--extend"] if extend else [])
        + (["--quiet"] if quiet else [])
    )
    try:
        return launch(
            nproc,
            cli,
            ["run", *args],
            nnodes=nnodes,
            node_rank=node_rank,
            master_addr=master_addr,
            master_port=master_port,
        )
    except ValueError as exc:
        raise CtkError(str(exc), 2) from exc


def load_for_run(
    recipe: str | None,
    sets: tuple[str, ...] | list[str],
    extra: list[str],
    resume: str | None,
    *,
    device: str | None = None,
    extend: bool = False,
) -> Any:
    """The :class:`~toolkit.runs.Plan` a run executes, decided in one pass by
    :func:`toolkit.runs.plan` (read, overridden, named, validated; device, precision and the
    resume point decided). With ``--resume`` the run's own resolved recipe (from its checkpoint:
    its overrides and precision) unless a recipe file is given; a given recipe keeps the run's
    precision unless ``--precision`` says otherwise; what differs from the run is refused (the
    budget accepted with ``--extend``). A checkpoint or a run that does not fit exits 2."""
    if recipe is None and not resume:
        raise CtkError("give a RECIPE to run (or --resume RUN_ID to continue a run)", 2)
    from toolkit.checkpoint import CheckpointError
    from toolkit.runs import RunFinished, plan

    try:
        return plan(recipe, [*sets, *extra], lookup, device=device, resume=resume, extend=extend)
    except CtkError:
        raise
    except (CheckpointError, RunFinished) as exc:  # RecipeMismatch is a CheckpointError
        raise CtkError(f"--resume: {exc}", 2) from exc
    except FileNotFoundError as exc:  # no checkpoint for --resume
        raise CtkError(str(exc), 2) from exc
    except ValueError as exc:  # a device torch does not see
        raise CtkError(str(exc), 1) from exc


def run(
    recipe: str | None,
    sets: tuple[str, ...],
    extra: list[str],
    *,
    device: str | None,
    resume: str | None,
    extend: bool,
    quiet: bool,
    verbose: bool = False,
) -> str | None:
    """``ctk run`` in this process (one rank of a torchrun launch when ``WORLD_SIZE`` > 1): what
    it prints at the end (None on the ranks other than 0)."""
    p = load_for_run(recipe, sets, extra, resume, device=device, extend=extend)
    dist = None
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from toolkit.training.distributed import Context

        dist = Context.from_env(device or p.recipe.device)
    start = time.perf_counter()
    clean = False
    try:
        run_id, metrics = execute(p, progress=not quiet, distributed=dist)
        clean = True
    finally:
        if dist is not None:
            dist.close(clean)
    if dist is None or dist.is_main:
        return summary(run_id, p.recipe, time.perf_counter() - start, metrics, verbose)
    return None


def execute(run: Any, **kwargs: Any) -> tuple[str | None, dict[str, float]]:
    """:func:`toolkit.runs.execute` of a plan (or a validated recipe), its failures as CtkError:
    a ``--resume`` target that does not fit exits 2; a run stopped by a non-finite loss, or
    refused by its data or an argument, exits 1; Ctrl-C exits 130 (the run is marked KILLED)."""
    from toolkit.checkpoint import CheckpointError
    from toolkit.runs import RunFinished
    from toolkit.runs import execute as execute_recipe
    from toolkit.training.batches import DataStop
    from toolkit.training.trainer import NonFiniteLoss

    try:
        return execute_recipe(run, **kwargs)
    except CtkError:
        raise
    except (CheckpointError, RunFinished) as exc:  # RecipeMismatch is a CheckpointError
        raise CtkError(f"--resume: {exc}", 2) from exc
    except (NonFiniteLoss, DataStop) as exc:
        raise CtkError(f"run stopped: {exc}", 1) from exc
    except (FileNotFoundError, ValueError) as exc:
        raise CtkError(str(exc), 1) from exc
    except KeyboardInterrupt as exc:
        raise CtkError(
            f"the run is marked KILLED; {exc or 'continue it with: ctk run --resume RUN_ID'}", 130, label="interrupted"
        ) from exc


def summary(run_id: str | None, recipe: Any, seconds: float, metrics: dict[str, float], verbose: bool = False) -> str:
    """The lines ``ctk run`` ends with: the run and its wall time, its metrics of record beside
    their baselines from the same run (with the difference), where its figures are and the
    commands to look further; every final metric with ``verbose``."""
    from toolkit.runs import record_metrics
    from toolkit.tracking.servers import ui_route
    from toolkit.tracking.store import run_location

    lines = [f"run {run_id} ({recipe.run_name}) finished in {_duration(seconds)}"]
    record = record_metrics(recipe)
    width = max([len(m) for m in record] + [len(b) for bs in record.values() for b in bs] + [6])
    for metric, baselines in record.items():
        value = metrics.get(metric)
        lines.append(
            f"  {metric.ljust(width)}  "
            + (f"{value:.4f}" if value is not None else "not logged")
            + "  (metric of record)"
        )
        for base in baselines:
            if base in metrics:
                diff = f"{value - metrics[base]:+.4f}" if value is not None else ""
                lines.append(f"  {base.ljust(width)}  {metrics[base]:.4f}  baseline; difference {diff}")
    artifacts, experiment_id = run_location(recipe.tracking.uri, run_id) if run_id else (None, None)
    if artifacts:
        lines.append(f"figures and files: {artifacts} (figures/)")
    if experiment_id:
        lines.append(f"look further: ctk ui  (then http://127.0.0.1:5000/{ui_route(experiment_id, run_id)})")
    lines.append(f"              ctk compare {recipe.tracking.experiment}")
    if verbose or not record:
        lines += ["all final metrics:", *(f"  {k}: {v:.4f}" for k, v in sorted(metrics.items()))]
    else:
        lines.append(f"all {len(metrics)} final metrics: --verbose (and in the store)")
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 120 else f"{int(seconds // 60)} min {seconds % 60:.0f} s"


def show(recipe: str, sets: tuple[str, ...]) -> str:
    """``ctk show``: the recipe resolved, with the precision a run on this machine would pick."""
    r = load(recipe, sets)
    lines = [f"# {recipe} -> run name {r.run_name}"]
    if r.precision == "auto":  # what a run here would pick (the recipe itself keeps 'auto')
        from toolkit.runs import precision_choice
        from toolkit.training.trainer import select_device

        choice = precision_choice("auto", select_device(r.device), lookup(r.domain))
        lines.append(f"# on this machine: {choice.line()}")
    from toolkit.runs.defaults import recipe_with_defaults  # every default the objective's components apply

    shown = recipe_with_defaults(r.resolved)
    return "\n".join([*lines, yaml.safe_dump(shown, sort_keys=False).rstrip()])


def export(run_or_file: str, out: str | None, uri: str | None) -> str:
    """``ctk export``: write the encoder; the line saying where and how to load it."""
    from domains.export import export_encoder
    from toolkit.checkpoint import CheckpointError

    try:
        path = export_encoder(run_or_file, out or f"encoder-{Path(run_or_file).stem}.pt", uri)
    except CheckpointError as exc:
        raise CtkError(str(exc), 2) from exc
    except FileNotFoundError as exc:
        raise CtkError(str(exc), 1) from exc
    return f"wrote {path} (load: from domains.export import load_encoder; load_encoder({str(path)!r}))"


def domains() -> list[str]:
    """``ctk list domains``: each domain, where it comes from and what it is (this loads every
    domain, torch included; one that does not load says why)."""
    return [f"{name.ljust(8)}  [{spec.origin}: {spec.target}]  {desc}" for name, spec, desc in installed.describe()]


def recipes(builtin: Path) -> list[str]:
    """``ctk list recipes``: every recipe file (paper tables aside) and its description's first
    line; paths under the folder above ``builtin`` are shown relative to it."""
    base = builtin.parent
    paths = [p for root in installed.recipe_roots(builtin) for p in Path(root).glob("**/*.yaml")]
    lines = []
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, when there: 5x faster
    for path in sorted(p for p in paths if "tables" not in p.parts):
        try:
            data = yaml.load(path.read_text(), Loader=loader) or {}
        except yaml.YAMLError:
            data = {}
        desc = str(data.get("description", "") or "").strip().splitlines()
        lines.append(f"{path.relative_to(base) if path.is_relative_to(base) else path}  {desc[0] if desc else ''}")
    return lines


def tables(builtin: Path) -> dict[str, Any]:
    """The paper tables of ``ctk reproduce``, of the built-in recipes and of plugin domains."""
    from toolkit.studies.reproduce import discover_tables

    return discover_tables(installed.recipe_roots(builtin))


def datasets() -> Any:
    """The installed domains' datasets (one :class:`toolkit.data.Catalogue`); a domain whose
    datasets do not load is named on stderr and left out."""
    import sys

    broken: list[installed.DomainError] = []
    catalogue = installed.catalogue(broken)
    for exc in broken:
        print(f"note: {exc}; its datasets are left out", file=sys.stderr)
    return catalogue


def table_needs(tables: dict[str, Any]) -> dict[str, str]:
    """Per paper table, the line ``ctk reproduce --list`` prints under it: its data (against the
    installed domains' datasets), its device and its measured time."""
    from toolkit.studies.needs import table_needs as needs

    catalogue = datasets()
    return {name: needs(table, catalogue).line() for name, table in tables.items()}


# -- ctk data: the offline datasets of the installed domains ----------------------------------
# Progress goes to stderr; ``data_path`` is the only answer on stdout, so ``$(ctk data path austen)``
# works in scripts. A dataset that cannot be found, fetched or verified is a CtkError (status 1).


def _data_errors(step):
    """Run ``step()``; the data provider's failures as CtkError (status 1)."""
    from toolkit.data import DataError

    try:
        return step()
    except (DataError, FileNotFoundError, ValueError) as exc:
        raise CtkError(str(exc), 1) from exc


def data_list(root: str | None) -> str:
    """``ctk data list``: every dataset, its state, sizes, source, licence and description."""
    from toolkit.data import data_root, is_installed

    catalogue = datasets()
    base = data_root(root)
    lines = [
        f"data root: {base}   (* = in 'default')",
        f"{'name':<18} {'state':<9} {'download':>9} {'installed':>10}  source / licence",
    ]
    for entry in catalogue.datasets:
        star = "*" if entry.default else " "
        state = "installed" if is_installed(catalogue, entry.name, base) else "-"
        lines.append(
            f"{entry.name:<17}{star} {state:<9} {entry.download_bytes / 1e6:>7.1f}MB "
            f"{entry.installed_bytes / 1e6:>8.1f}MB  {entry.source}"
        )
        lines.append(f"{'':<41}  {entry.licence}\n{'':<41}  {entry.description}")
    return "\n".join(lines)


def data_fetch(names: tuple[str, ...] | list[str], root: str | None, force: bool = False) -> None:
    """``ctk data fetch NAME...|default|all``: install them (progress on stderr)."""
    from toolkit.data import data_root, fetch
    from toolkit.data.fetchers import log

    catalogue = datasets()

    def step() -> None:
        start = time.perf_counter()
        chosen = catalogue.expand(names)
        for name in chosen:
            fetch(catalogue, name, root, force=force)
        log(f"{len(chosen)} dataset(s) ready in {data_root(root)} ({time.perf_counter() - start:.1f} s)")

    _data_errors(step)


def data_path(name: str, root: str | None) -> Path:
    """``ctk data path NAME``: the folder of an installed dataset (nothing is fetched)."""
    from toolkit.data import locate

    catalogue = datasets()
    return _data_errors(lambda: locate(catalogue, name, root, fetch=False))


def data_verify(names: tuple[str, ...] | list[str], root: str | None) -> None:
    """``ctk data verify [NAME...]``: re-hash them (default: every installed dataset)."""
    from toolkit.data import is_installed, verify
    from toolkit.data.fetchers import log

    catalogue = datasets()

    def step() -> None:
        chosen = (
            catalogue.expand(names) if names else [n for n in catalogue.names() if is_installed(catalogue, n, root)]
        )
        for name in chosen:
            log(f"{name}: verified {verify(catalogue, name, root)}")

    _data_errors(step)
