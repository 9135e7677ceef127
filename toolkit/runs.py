"""The run path: a recipe read, overridden, named and validated, its device, precision and
resume point decided, once, in one place (:func:`plan`, a frozen :class:`Plan`); then executed
(:func:`execute`), which changes nothing in the plan::

    p = plan(path, overrides, lookup, device=None, resume=None)  # the one pass: everything decided
    execute(p)                                                   # marks dead runs, store, trainer, fit

The domain lookup is passed in (``cli.py`` passes ``domains.installed.get``, so the toolkit stays
free of any domain) and called once; the recipe is validated against that domain's sections and
rules once, and keeps the class (``recipe.domain_class``). :func:`load_recipe` is the
validation alone (``ctk show``, sweeps); :func:`decide` decides a recipe it validated (what
:func:`execute` does when it is given a recipe rather than a plan).
"""

from __future__ import annotations

import copy
import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import yaml

from toolkit import __version__
from toolkit import checkpoint as ckpt
from toolkit import objective as objective_mod
from toolkit import recipe as rc
from toolkit.tracking.measured import ENV, MEASURED, earlier_steps
from toolkit.tracking.store import RECORD_TAG, client_for, experiment_id, git_commit, tracking_uri
from toolkit.tracking.tracker import Tracker
from toolkit.training import precision as precision_mod
from toolkit.training.trainer import RunOptions, select_device

DomainLookup = Callable[[str], Any]


@dataclasses.dataclass(frozen=True)
class Plan:
    """One run, decided: what :func:`execute` receives, and nothing edits.

    ``recipe``: validated and named; its ``precision`` is the value the run computes in (the
    request is ``precision.requested``). ``device``: where it runs. ``precision``: the decision
    and its reason. ``resume``: what ``--resume`` continues (its checkpoint checked against
    ``recipe``), or None for a new run."""

    recipe: rc.Recipe
    device: torch.device
    precision: precision_mod.Choice
    resume: ckpt.ResumePoint | None = None

    @property
    def domain(self) -> Any:
        """The domain class that validated the recipe."""
        return self.recipe.domain_class


def plan(
    recipe: str | Path | None,
    overrides: list[str],
    lookup: DomainLookup,
    *,
    device: str | None = None,
    resume: str | None = None,
    extend: bool = False,
) -> Plan:
    """``ctk run [RECIPE] [--set ...] [--device D] [--resume RUN_ID [--extend]]`` decided in one
    pass: the resume point (:func:`toolkit.checkpoint.resume_point`, asked once: the stored run,
    the checkpoint, its content), the recipe read (RECIPE, else the run's own resolved recipe from
    its checkpoint) and overridden (a given RECIPE keeps the run's precision unless ``precision``
    is set), validated once with the device and precision decided in the same pass (every
    problem in one RecipeError), named (a new run whose overrides change more than
    ``tracking.*`` or ``seed``, without a run name, is named after what they set), and the
    checkpoint checked against it (the budget may differ with ``extend``; a FINISHED run is
    refused)."""
    overrides = list(overrides)
    raw = _read(recipe, overrides) if recipe is not None else None
    point = uri = None
    if resume:
        uri = _store_named(raw, overrides)
        point = ckpt.resume_point(resume, lambda run_id: _stored_run(uri, run_id))
        if raw is None:
            recipe = point.source
            raw = _read(recipe, overrides, point.recipe)
        elif not any(o.split("=", 1)[0].strip() == "precision" for o in overrides):
            kept = f"precision={point.recipe.get('precision', 'auto')}"  # the run's, unless --precision
            overrides.append(kept)
            raw = rc.apply_overrides(raw, [kept], str(recipe))
    elif recipe is None:
        raise ValueError("give a RECIPE to run (or --resume RUN_ID to continue a run)")
    decided: dict[str, Any] = {}
    r = _validated(raw, str(recipe), overrides, lookup, decided, device)
    if point is None:
        changed = [o for o in overrides if not o.split("=", 1)[0].strip().startswith(("tracking.", "seed"))]
        if changed and not r.tracking.run_name:  # the name says what differs from the file, as a sweep point's
            r = with_run_name(r, rc.point_run_name(r, changed))
    elif tracking_uri(r.tracking.uri) != tracking_uri(uri):  # the run's own store is named in its checkpoint
        point = dataclasses.replace(point, run=_stored_run(r.tracking.uri, point.run_id))
    return _finish(r, decided["device"], decided["choice"], point, extend)


def _store_named(raw: dict[str, Any] | None, overrides: list[str]) -> str | None:
    """The store a resumed run is looked up in: the one RECIPE names (its ``--set`` values
    applied), else a ``--set tracking.uri``, else None ($MLFLOW_TRACKING_URI or ./mlflow.db)."""
    if raw is None:
        given = [o.split("=", 1)[1].strip() for o in overrides if o.split("=", 1)[0].strip() == "tracking.uri"]
        return given[-1] if given else None
    tracking = raw.get("tracking")
    uri = tracking.get("uri") if isinstance(tracking, dict) else None
    return uri if isinstance(uri, str) else None


def decide(recipe: rc.Recipe, *, device: str | None = None, resume: str | None = None, extend: bool = False) -> Plan:
    """The :class:`Plan` of a recipe :func:`load_recipe` validated: its device and precision
    decided, the resume point found and checked (as :func:`plan` does)."""
    if recipe.domain_class is None:
        raise ValueError(
            f"{recipe.source}: the recipe was validated without its domain; load it with toolkit.runs.load_recipe"
        )
    problems, dev, choice = _device_and_precision(recipe.resolved, recipe.domain_class, device)
    if problems:
        raise rc.RecipeError(problems, recipe.source)
    point = ckpt.resume_point(resume, lambda run_id: _stored_run(recipe.tracking.uri, run_id)) if resume else None
    return _finish(recipe, dev, choice, point, extend)


def _finish(
    recipe: rc.Recipe, device: torch.device, choice: precision_mod.Choice, point: ckpt.ResumePoint | None, extend: bool
) -> Plan:
    """The plan: the recipe with the precision the run computes in; a resume point checked."""
    common = recipe.common.model_copy(update={"precision": choice.value})
    recipe = dataclasses.replace(recipe, common=common, resolved={**recipe.resolved, "precision": choice.value})
    if point is not None:
        ckpt.check_recipe(point.saved, recipe.resolved, point.path, extend)
        if point.run is not None and point.run.info.status == "FINISHED" and not extend:
            raise RunFinished(
                f"run {point.run_id} FINISHED; it is never modified (a longer budget continues it with --extend)"
            )
    return Plan(recipe, device, choice, point)


def load_recipe(
    path: str | Path, overrides: list[str] | None, lookup: DomainLookup, data: dict[str, Any] | None = None
) -> rc.Recipe:
    """Read, override and validate a recipe for its domain (``lookup(name)``, called once); every
    problem is a RecipeError with its path (an explicit ``precision`` the machine cannot run on
    the recipe's device included). ``ctk show`` validates here; ``ctk run`` in :func:`plan`."""
    overrides = list(overrides or [])
    return _validated(_read(path, overrides, data), str(path), overrides, lookup, {}, None, lenient=True)


def _read(path: str | Path, overrides: list[str], data: dict[str, Any] | None = None) -> dict[str, Any]:
    """The recipe mapping (the file, or ``data``) with the ``--set`` overrides applied."""
    return rc.apply_overrides(rc.load_yaml(path) if data is None else data, overrides, str(path))


def _validated(
    raw: dict[str, Any],
    source: str,
    overrides: list[str],
    lookup: DomainLookup,
    decided: dict[str, Any],
    device: str | None,
    lenient: bool = False,
) -> rc.Recipe:
    """The one validation of a mapping :func:`_read` read: the domain looked up and its defaults
    filled in, then the schema, the objective, ``Domain.check`` and the device and precision
    (:func:`_device_and_precision`, kept in ``decided``) in one RecipeError."""
    name = raw.get("domain")
    if name is None:  # nothing else can be checked without it; a misspelt key is named too
        missing = [("domain", "required key is missing")]
        raise rc.RecipeError(missing + rc.near_misses(missing, raw), source)
    if not isinstance(name, str):
        raise rc.RecipeError([("domain", f"expected a domain name, got {name!r}")], source)
    try:
        domain_cls = lookup(name)
    except Exception as exc:  # noqa: BLE001 - unknown or broken domain: report at 'domain'
        raise rc.RecipeError([("domain", str(exc))], source) from None
    raw = _with_defaults(raw, domain_cls.recipe_defaults)

    def domain_check(raw: dict[str, Any], sections: Any) -> list[tuple[str, str]]:
        found = list(domain_cls.check(raw, sections))
        problems, decided["device"], decided["choice"] = _device_and_precision(raw, domain_cls, device, lenient)
        return found + [p for p in problems if p[0] not in {path for path, _ in found}]  # the domain's say first

    return rc.validate(
        raw,
        domain_cls.sections(),
        objective_mod.check,
        source,
        overrides,
        domain_check=domain_check,
        domain_class=domain_cls,
    )


def _device_and_precision(
    values: dict[str, Any], domain_cls: Any, device: str | None = None, lenient: bool = False
) -> tuple[list[tuple[str, str]], Any, Any]:
    """(problems, device, precision choice): where the run goes (``device``, else the recipe's;
    ``auto`` -> cuda where torch sees one) and what ``precision`` resolves to there under the
    domain's policy (:func:`precision_choice`). A value the hardware cannot run well, or that the
    domain's trainer does not run, is a problem at ``precision``. ``lenient`` (validation alone):
    a CUDA device torch does not see counts as the CPU; otherwise it is the run's ValueError."""
    requested, name = values.get("precision", "auto"), device or values.get("device", "auto")
    if requested not in precision_mod.PRECISIONS or name not in ("auto", "cpu", "cuda"):
        return [], None, None  # the schema reports those
    dev = (
        torch.device("cuda" if name != "cpu" and torch.cuda.is_available() else "cpu")
        if lenient
        else select_device(name)
    )
    try:
        choice = precision_choice(requested, dev, domain_cls)
    except ValueError as exc:
        return [("precision", f"{requested!r}: {exc}")], dev, None
    if choice.value not in domain_cls.precisions:
        return (
            [
                (
                    "precision",
                    f"{requested!r}: domain {values.get('domain')!r} runs {', '.join(domain_cls.precisions)} only",
                )
            ],
            dev,
            None,
        )
    return [], dev, choice


def with_run_name(recipe: rc.Recipe, name: str) -> rc.Recipe:
    """``recipe`` with ``tracking.run_name`` set (a new recipe: the model, the resolved and the
    raw mappings; nothing else to validate)."""
    tracking = recipe.common.tracking.model_copy(update={"run_name": name})
    raw = {**recipe.raw, "tracking": {**(recipe.raw.get("tracking") or {}), "run_name": name}}
    return dataclasses.replace(
        recipe,
        common=recipe.common.model_copy(update={"tracking": tracking}),
        raw=raw,
        resolved={**recipe.resolved, "tracking": {**recipe.resolved["tracking"], "run_name": name}},
        overrides=[*recipe.overrides, f"tracking.run_name={name}"],
    )


def _with_defaults(raw: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with the domain's defaults of keys it does not write (mappings merged)."""
    out = dict(raw)
    for key, value in defaults.items():
        if key not in out:
            out[key] = copy.deepcopy(value)
        elif isinstance(value, dict) and isinstance(out[key], dict):
            out[key] = _with_defaults(out[key], value)
    return out


def record_metrics(recipe: rc.Recipe) -> dict[str, tuple[str, ...]]:
    """The run's metrics of record, each with its baselines from the same run: ``tracking.record``
    when the recipe names them, else what the domain declares (``Domain.record_metrics``)."""
    declared = dict(recipe.domain_class.record_metrics(recipe)) if recipe.domain_class is not None else {}
    if recipe.tracking.record:
        return {m: tuple(declared.get(m, ())) for m in recipe.tracking.record}
    return declared


class RunFinished(ValueError):
    """``--resume`` of a run that already FINISHED (it is never modified)."""


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
    """Run a :class:`Plan` (or a recipe :func:`load_recipe` validated, decided here by
    :func:`decide` with ``device``, ``resume`` and ``extend``) through its domain's trainer;
    returns (mlflow run id, final metrics). A resumed run continues in the same mlflow run.

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
    from toolkit.tracking.health import check_store

    if isinstance(run, Plan):
        if resume or device or extend:
            raise ValueError("a Plan has its device and resume decided: give them to toolkit.runs.plan")
        p = run
    else:
        p = decide(run, device=device, resume=resume, extend=extend)
    recipe, point, dev, choice = p.recipe, p.resume, p.device, p.precision
    check_store(tracking_uri(recipe.tracking.uri))
    domain = p.domain(recipe)  # validated when the plan was made: nothing is checked again
    is_main = distributed is None or distributed.is_main
    if is_main:
        print(f"[ctk] {choice.line()}", file=sys.stderr, flush=True)
    missing = domain.check_data(recipe)  # before the store is written: no run for a run that cannot start
    if missing:
        raise rc.RecipeError(missing, recipe.source)
    obj = recipe.objective
    tags = {
        "ctk.domain": recipe.domain,
        "ctk.loss": obj.loss.name if obj else "domain-own",
        "ctk.selector": obj.selector.name if obj else "all",
        "ctk.regularizers": ",".join(r.name for r in obj.regularizers) if obj else "",
        "ctk.recipe": recipe.source,
        "ctk.version": __version__,
        "mlflow.source.git.commit": (commit := git_commit()),
        "ctk.seed": str(recipe.seed),
        RECORD_TAG: ",".join(record_metrics(recipe)),
        **recipe.tracking.tags,
        **(extra_tags or {}),
    }
    if point is None and is_main:
        retire_dead_runs(recipe)
    with Tracker(
        recipe.tracking.experiment,
        recipe.run_name,
        recipe.tracking.uri,
        tags,
        run_id=point.run_id if point is not None else None,
        enabled=is_main,
        listeners=[on_metrics] if on_metrics is not None else (),
    ) as tracker:
        if distributed is not None:
            run_id = distributed.broadcast_object(tracker.run_id)
        else:
            run_id = tracker.run_id
        if point is None:
            # settings: the recipe as set (precision as asked); what this run chose and ran on
            # is logged apart (toolkit.tracking.measured)
            tracker.log_params({**rc.flatten(recipe.resolved), "precision": choice.requested})
            tracker.log_text(yaml.safe_dump(recipe.resolved, sort_keys=False), "recipe.yaml")
        tracker.log_params(
            {
                f"{MEASURED}precision": choice.value,
                f"{MEASURED}device": dev.type,
                **{f"{ENV}{k}": v for k, v in precision_mod.machine_params().items()},
                f"{ENV}ctk": __version__,
                f"{ENV}git_commit": commit,
                **{f"{ENV}{k}": v for k, v in (where or {}).items()},
            }
        )
        if where:
            tracker.set_tags({f"ctk.{k}": v for k, v in where.items()})
        fixed_by = "sweep"
        if fixed_steps is None and point is None and recipe.budget is not None and recipe.budget.minutes:
            # a second seed trains as long as the first: the count an earlier run of the same
            # settings fixed on this machine (toolkit.tracking.measured.earlier_steps)
            found = earlier_steps(tracker.client, tracker.run_id) if is_main else None
            found = distributed.broadcast_object(found) if distributed is not None else found
            if found:
                fixed_steps, fixed_by = found[0], f"run {found[1]}"
        options = RunOptions(
            device=dev,
            distributed=distributed,
            progress=progress,
            checkpoint_dir=ckpt.checkpoint_dir(run_id or "local"),
            hooks=list(hooks or []),
            fixed_steps=fixed_steps,
            fixed_by=fixed_by,
        )
        # where this run's checkpoints go, recorded before the first one is written, so that
        # `ctk runs` and `--resume RUN_ID` find them from any working directory
        run_tags = ckpt.folder_tags(options.checkpoint_dir)
        if recipe.paper is not None:
            run_tags["ctk.paper"] = recipe.paper.source
        tracker.set_tags(run_tags)
        trainer = domain.trainer(recipe, tracker, options)
        if point is not None:
            trainer.resume(point.path, point.saved)
        trainer.fit()
        metrics = trainer.evaluate()
        trainer.save_checkpoint()
        if recipe.tracking.log_model and trainer.encoder is not None and is_main:
            tracker.log_model(trainer.encoder, recipe.resolved, domain.encoder_extras(trainer.encoder))
    return run_id, metrics


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


def precision_choice(requested: str, device: Any, domain_cls: Any) -> precision_mod.Choice:
    """What ``requested`` resolves to on ``device`` under the domain's precision policy (the
    precisions its trainer runs, and its reason to keep ``auto`` at fp32, if any)."""
    return precision_mod.resolve(requested, device, domain_cls.precisions, domain_cls.auto_fp32)


def _stored_run(uri: str | None, run_id: str) -> Any:
    """Run ``run_id`` as the store has it, or None (no store, or a run it does not know: a new
    run continues it)."""
    try:
        return client_for(uri).get_run(run_id)
    except Exception:  # noqa: BLE001 - see above
        return None
