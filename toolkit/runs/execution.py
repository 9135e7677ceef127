"""The run path's second half: a :class:`~toolkit.runs.planning.Plan` executed, changing nothing
in it. :func:`execute` reads as its steps: the plan (:func:`_the_plan`), the store and the data
ready (:func:`_ready`), dead runs retired, the run opened with its tags, its settings and what it
chose logged (:func:`_log_settings`), the step count of a wall-time budget fixed
(:func:`_fixed_steps`), the trainer's options and the checkpoints' folder (:func:`_options`),
then the training itself (:func:`_train`: fit, evaluate, checkpoint, the encoder logged)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import yaml

from toolkit import __version__
from toolkit import checkpoint as ckpt
from toolkit import recipe as rc
from toolkit.runs.planning import Plan, decide
from toolkit.tracking.measured import ENV, MEASURED, earlier_steps
from toolkit.tracking.store import RECORD_TAG, client_for, experiment_id, git_commit, tracking_uri
from toolkit.tracking.tracker import Tracker
from toolkit.training import precision as precision_mod
from toolkit.training.trainer import RunOptions

__all__ = ["record_metrics", "retire_dead_runs", "execute", "calibrate"]


def record_metrics(recipe: rc.Recipe) -> dict[str, tuple[str, ...]]:
    """The run's metrics of record, each with its baselines from the same run: ``tracking.record``
    when the recipe names them, else what the domain declares (``Domain.record_metrics``)."""
    declared = dict(recipe.domain_class.record_metrics(recipe)) if recipe.domain_class is not None else {}
    if recipe.tracking.record:
        return {m: tuple(declared.get(m, ())) for m in recipe.tracking.record}
    return declared


def retire_dead_runs(recipe: rc.Recipe) -> None:
    """A step of the run path before a new run is created: the experiment's RUNNING runs whose
    process is gone (no heartbeat) are marked KILLED (``toolkit.tracking.health.mark_dead_runs``),
    so that ``ctk runs`` and a sweep see them as what they are."""
    from toolkit.tracking.health import mark_dead_runs, retrying

    client = client_for(recipe.tracking.uri)
    eid = experiment_id(client, recipe.tracking.experiment)
    retrying(lambda: mark_dead_runs(client, [eid]), "marking dead runs")


def execute(
    run: rc.Recipe | Plan,
    *,
    resume: str | None = None,
    device: str | None = None,
    progress: bool = True,
    distributed: Any = None,
    hooks: list[Callable[[int], None]] | None = None,
    extend: bool = False,
    extra_tags: dict[str, str] | None = None,
    on_metrics: Callable[[dict[str, float], int], None] | None = None,
    fixed_steps: int | None = None,
    where: dict[str, str] | None = None,
) -> tuple[str | None, dict[str, float]]:
    """Run a :class:`Plan` (or a recipe :func:`~toolkit.runs.load_recipe` validated, decided here
    by :func:`~toolkit.runs.decide` with ``device``, ``resume`` and ``extend``) through its
    domain's trainer; returns (mlflow run id, final metrics). A resumed run continues in the same
    mlflow run.

    The tracking store is checked first (one line, within seconds), then the data
    (``Domain.check_data``): neither problem leaves a run in the store; a new run's experiment
    has its dead runs marked (:func:`retire_dead_runs`) before the run is created.
    ``on_metrics(metrics, step)`` sees every batch of metrics the run logs (``ctk tune``
    reports the periodic evaluation to Ray Tune through it). ``fixed_steps``: the step count a
    sweep fixed for ``budget.minutes`` (:func:`calibrate`), trained instead of calibrating again.
    ``where``: where the run runs beyond this machine (a sweep's Ray node: ``ray_node``, ...),
    logged beside the machine as ``env.*`` params (the first attempt's) and as ``ctk.*`` tags
    (the latest attempt's: a point resumed on another node says so).
    """
    p = _the_plan(run, resume, device, extend)
    recipe, point = p.recipe, p.resume
    is_main = distributed is None or distributed.is_main
    domain = _ready(p, is_main)
    commit = git_commit()
    if point is None and is_main:
        retire_dead_runs(recipe)
    with Tracker(
        recipe.tracking.experiment,
        recipe.run_name,
        recipe.tracking.uri,
        _tags(recipe, commit, extra_tags),
        run_id=point.run_id if point is not None else None,
        enabled=is_main,
        listeners=[on_metrics] if on_metrics is not None else (),
    ) as tracker:
        run_id = distributed.broadcast_object(tracker.run_id) if distributed is not None else tracker.run_id
        _log_settings(tracker, p, commit, where)
        steps, fixed_by = _fixed_steps(tracker, p, fixed_steps, is_main, distributed)
        options = _options(tracker, p, run_id, steps, fixed_by, progress, distributed, hooks)
        metrics = _train(domain, tracker, p, options, is_main)
    return run_id, metrics


def _the_plan(run: rc.Recipe | Plan, resume: str | None, device: str | None, extend: bool) -> Plan:
    """The plan given, or the plan of a validated recipe (a plan's device and resume are decided)."""
    if not isinstance(run, Plan):
        return decide(run, device=device, resume=resume, extend=extend)
    if resume or device or extend:
        raise ValueError("a Plan has its device and resume decided: give them to toolkit.runs.plan")
    return run


def _ready(p: Plan, is_main: bool) -> Any:
    """The store answers and the data is there, before anything is written to the store: the
    domain, built on the recipe (validated when the plan was made: nothing is checked again)."""
    from toolkit.tracking.health import check_store

    check_store(tracking_uri(p.recipe.tracking.uri), say=lambda line: print(line, file=sys.stderr, flush=True))
    domain = p.domain(p.recipe)
    if is_main:
        print(f"[ctk] {p.precision.line()}", file=sys.stderr, flush=True)
    missing = domain.check_data(p.recipe)  # no run in the store for a run that cannot start
    if missing:
        raise rc.RecipeError(missing, p.recipe.source)
    return domain


def _tags(recipe: rc.Recipe, commit: str, extra_tags: dict[str, str] | None) -> dict[str, str]:
    """The run's tags: what it is (domain, loss, selector, regularizers), where from, its metrics
    of record, the recipe's own tags and the caller's (a sweep's point)."""
    obj = recipe.objective
    return {
        "ctk.domain": recipe.domain,
        "ctk.loss": obj.loss.name if obj else "domain-own",
        "ctk.selector": obj.selector.name if obj else "all",
        "ctk.regularizers": ",".join(r.name for r in obj.regularizers) if obj else "",
        "ctk.recipe": recipe.source,
        "ctk.version": __version__,
        "mlflow.source.git.commit": commit,
        "ctk.seed": str(recipe.seed),
        RECORD_TAG: ",".join(record_metrics(recipe)),
        **recipe.tracking.tags,
        **(extra_tags or {}),
    }


def _log_settings(tracker: Tracker, p: Plan, commit: str, where: dict[str, str] | None = None) -> None:
    """A new run's settings (the recipe as set, precision as asked, and the recipe file); every
    run's choices and machine, apart (``measured.*``, ``env.*``: toolkit.tracking.measured)."""
    if p.resume is None:
        tracker.log_params({**rc.flatten(p.recipe.resolved), "precision": p.precision.requested})
        tracker.log_text(yaml.safe_dump(p.recipe.resolved, sort_keys=False), "recipe.yaml")
    tracker.log_params(
        {
            f"{MEASURED}precision": p.precision.value,
            f"{MEASURED}device": p.device.type,
            **{f"{ENV}{k}": v for k, v in precision_mod.machine_params().items()},
            f"{ENV}ctk": __version__,
            f"{ENV}git_commit": commit,
            **{f"{ENV}{k}": v for k, v in (where or {}).items()},
        }
    )
    if where:
        tracker.set_tags({f"ctk.{k}": v for k, v in where.items()})


def _fixed_steps(
    tracker: Tracker, p: Plan, fixed_steps: int | None, is_main: bool, distributed: Any
) -> tuple[int | None, str]:
    """(steps, who fixed them) for a wall-time budget: the sweep's count, else the count an
    earlier run of the same settings fixed on this machine (a second seed trains as long as the
    first: toolkit.tracking.measured.earlier_steps), else None (the trainer calibrates)."""
    recipe = p.recipe
    if fixed_steps is None and p.resume is None and recipe.budget is not None and recipe.budget.minutes:
        found = earlier_steps(tracker.client, tracker.run_id) if is_main else None
        found = distributed.broadcast_object(found) if distributed is not None else found
        if found:
            return found[0], f"run {found[1]}"
    return fixed_steps, "sweep"


def _options(
    tracker: Tracker,
    p: Plan,
    run_id: str | None,
    fixed_steps: int | None,
    fixed_by: str,
    progress: bool,
    distributed: Any,
    hooks: list[Callable[[int], None]] | None,
) -> RunOptions:
    """The trainer's options; where this run's checkpoints go is tagged on the run before the
    first one is written, so that ``ctk runs`` and ``--resume RUN_ID`` find them from any folder."""
    options = RunOptions(
        device=p.device,
        distributed=distributed,
        progress=progress,
        checkpoint_dir=ckpt.checkpoint_dir(run_id or "local"),
        hooks=list(hooks or []),
        fixed_steps=fixed_steps,
        fixed_by=fixed_by,
    )
    run_tags = ckpt.folder_tags(options.checkpoint_dir)
    if p.recipe.paper is not None:
        run_tags["ctk.paper"] = p.recipe.paper.source
    tracker.set_tags(run_tags)
    return options


def _train(domain: Any, tracker: Tracker, p: Plan, options: RunOptions, is_main: bool) -> dict[str, float]:
    """The domain's trainer: resumed from the plan's checkpoint, fitted, evaluated, its last
    checkpoint written and (``tracking.log_model``) its encoder logged; the final metrics."""
    trainer = domain.trainer(p.recipe, tracker, options)
    if p.resume is not None:
        trainer.resume(p.resume.path, p.resume.saved)
    trainer.fit()
    metrics = trainer.evaluate()
    trainer.save_checkpoint()
    if p.recipe.tracking.log_model and trainer.encoder is not None and is_main:
        tracker.log_model(trainer.encoder, p.recipe.resolved, domain.encoder_extras(trainer.encoder))
    return metrics


def calibrate(run: rc.Recipe | Plan, device: str | None = None) -> dict[str, Any] | None:
    """``budget.minutes``' step count for a plan (or a validated recipe, :func:`decide`\\ d on
    ``device``) on this machine, fixed as a run fixes it (its first online monitor timed, then
    the timed steps of :mod:`toolkit.training.budget`), with nothing logged and no step kept:
    ``{steps, ms_per_step, precision}``. None when the recipe has no ``budget.minutes`` or its
    trainer does not calibrate (:meth:`~toolkit.training.trainer.Trainer.calibrate`: the pretrainer
    in steps, RL in environment steps). A sweep calls it once, before its
    points, and hands the steps to each (``execute(fixed_steps=)``)."""
    recipe = run.recipe if isinstance(run, Plan) else run
    if recipe.budget is None or not recipe.budget.minutes:
        return None
    p = run if isinstance(run, Plan) else decide(run, device=device)
    trainer = p.domain(p.recipe).trainer(p.recipe, None, RunOptions(device=p.device, progress=False))
    found = trainer.calibrate()
    return (
        None
        if found is None
        else {"steps": int(found["steps"]), "precision": p.precision.value, "ms_per_step": float(found["ms_per_step"])}
    )
