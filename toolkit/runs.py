"""Running recipes: load + validate, execute one run, expand sweeps.

The handshake with a domain happens once, in :func:`load_recipe`: the domain lookup is passed in
(``cli.py`` passes ``domains.registry.get``, so the toolkit stays free of any domain), called
once, and the recipe is validated against that domain's sections and rules once; the recipe
keeps the class (``recipe.domain_class``). :func:`execute` builds the domain from it and checks
nothing again::

    recipe = load_recipe(path, overrides, lookup)   # lookup, schema, objective, Domain.check, precision
    execute(recipe)                                 # domain = recipe.domain_class(recipe); trainer; fit
"""
from __future__ import annotations

import copy
import itertools
import re
import sys
from pathlib import Path
from typing import Any, Callable

import yaml

from toolkit import __version__
from toolkit import checkpoint as ckpt
from toolkit import objective as objective_mod
from toolkit import recipe as rc
from toolkit.tracking.measured import ENV, MEASURED
from toolkit.tracking.store import RECORD_TAG, client_for, git_commit
from toolkit.tracking.tracker import Tracker
from toolkit.training import precision as precision_mod
from toolkit.training.trainer import RunOptions, select_device

DomainLookup = Callable[[str], Any]


def load_recipe(path: str | Path, overrides: list[str] | None, lookup: DomainLookup,
                data: dict[str, Any] | None = None) -> rc.Recipe:
    """Read, override and validate a recipe for its domain (``lookup(name)``, called once); every
    problem is a RecipeError with its path. ``ctk show`` and ``ctk run`` both validate here."""
    source = str(path)
    raw = rc.load_yaml(path) if data is None else data
    raw = rc.apply_overrides(raw, list(overrides or []), source)
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
    raw = _with_defaults(raw, getattr(domain_cls, "recipe_defaults", {}))

    def domain_check(raw: dict[str, Any], sections: Any) -> list[tuple[str, str]]:
        return list(domain_cls.check(raw, sections)) + precision_problems(raw)
    return rc.validate(raw, domain_cls.sections(), objective_mod.check, source, overrides,
                       domain_check=domain_check, domain_class=domain_cls)


def precision_problems(raw: dict[str, Any]) -> list[tuple[str, str]]:
    """An explicit ``precision`` the machine this recipe would run on cannot run well (bf16 on
    a CPU without native bf16), as a recipe problem at ``precision``."""
    requested, device = raw.get("precision", "auto"), raw.get("device", "auto")
    if not isinstance(requested, str) or device not in ("auto", "cpu", "cuda"):
        return []  # the schema reports those
    import torch
    dev = "cuda" if device != "cpu" and torch.cuda.is_available() else "cpu"
    why = precision_mod.problem(requested, dev)
    return [("precision", f"{requested!r}: {why}")] if why else []


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
    declare = getattr(recipe.domain_class, "record_metrics", None)
    declared = dict(declare(recipe)) if declare is not None else {}
    if recipe.tracking.record:
        return {m: tuple(declared.get(m, ())) for m in recipe.tracking.record}
    return declared


def resumed_recipe(resume: str, uri: str | None = None) -> tuple[dict[str, Any], str]:
    """(the resolved recipe, its source file) of the run ``--resume RUN_ID | FILE`` continues, from
    its newest readable checkpoint (which holds the resolved recipe: overrides and precision
    included), so that a resume needs nothing but the run."""
    path = Path(resume)
    stored = None if path.is_file() else _stored_run(uri, resume)
    tags = stored.data.tags if stored is not None else {}
    found = [path] if path.is_file() else ckpt.candidates(resume, tags)
    for candidate in found:
        try:
            saved = ckpt.load(candidate)
        except ckpt.CheckpointError:
            continue
        if isinstance(saved.get("recipe"), dict) and saved["recipe"]:
            return saved["recipe"], tags.get("ctk.recipe") or str(candidate)
    where = " or ".join(str(f) for f in ckpt.folders(resume, tags))
    raise FileNotFoundError(f"--resume {resume}: no readable checkpoint in {where} (give the checkpoint file, "
                            "or the recipe and --set values of the run)")


class RunFinished(ValueError):
    """``--resume`` of a run that already FINISHED (it is never modified)."""


def execute(recipe: rc.Recipe, *, resume: str | None = None,
            device: str | None = None, progress: bool = True, distributed: Any = None,
            hooks: list[Callable[[int], None]] | None = None, extend: bool = False,
            extra_tags: dict[str, str] | None = None,
            on_metrics: Callable[[dict[str, float], int], None] | None = None,
            fixed_steps: int | None = None) -> tuple[str | None, dict[str, float]]:
    """Run a recipe :func:`load_recipe` validated through its domain's trainer; returns (mlflow
    run id, final metrics).

    ``resume`` is a run id (its newest readable checkpoint, in the folder the run recorded or
    under ``./checkpoints/<run id>/``: :func:`toolkit.checkpoint.find`) or a checkpoint path;
    the run continues in the same mlflow run. ``extend`` lets a resume change the budget. The tracking store is checked first (one line, within seconds), then
    the data (``Domain.check_data``): neither problem leaves a run in the store.
    ``on_metrics(metrics, step)`` sees every batch of metrics the run logs (``ctk tune``
    reports the periodic evaluation to Ray Tune through it). ``fixed_steps``: the step count a
    sweep fixed for ``budget.minutes`` (:func:`calibrate`), trained instead of calibrating again.
    """
    from toolkit.tracking.store import tracking_uri
    from toolkit.tracking.health import check_store
    domain_cls = recipe.domain_class
    if domain_cls is None:
        raise ValueError(f"{recipe.source}: the recipe was validated without its domain; load it with "
                         "toolkit.runs.load_recipe")
    check_store(tracking_uri(recipe.tracking.uri))
    domain = domain_cls(recipe)  # validated by load_recipe: nothing is checked again
    dev = select_device(device or recipe.device)
    is_main = distributed is None or distributed.is_main
    choice = resolve_precision(recipe, dev, domain_cls, announce=is_main)
    saved = None
    run_id = None
    if resume:  # read and checked before the store or the run are touched
        # a run id: its checkpoints are in the folder the run recorded or in this directory's
        stored = None if Path(resume).is_file() else _stored_run(recipe.tracking.uri, resume)
        run_id, resume_path, saved = ckpt.for_resume(resume, recipe.resolved, extend,
                                                     stored.data.tags if stored is not None else None)
        run_id = saved.get("run_id") or run_id
        if run_id and is_main:
            if stored is None or stored.info.run_id != run_id:
                stored = _stored_run(recipe.tracking.uri, run_id)
            if stored is not None and stored.info.status == "FINISHED" and not extend:
                raise RunFinished(f"run {run_id} FINISHED; it is never modified (a longer budget "
                                  "continues it with --extend)")
    else:
        resume_path = None
    missing = domain.check_data(recipe)  # before the store is written: no run for a run that cannot start
    if missing:
        raise rc.RecipeError(missing, recipe.source)
    obj = recipe.objective
    tags = {"ctk.domain": recipe.domain, "ctk.loss": obj.loss.name if obj else "domain-own",
            "ctk.selector": obj.selector.name if obj else "all",
            "ctk.regularizers": ",".join(r.name for r in obj.regularizers) if obj else "",
            "ctk.recipe": recipe.source, "ctk.version": __version__,
            "mlflow.source.git.commit": (commit := git_commit()), "ctk.seed": str(recipe.seed),
            RECORD_TAG: ",".join(record_metrics(recipe)),
            **recipe.tracking.tags, **(extra_tags or {})}
    with Tracker(recipe.tracking.experiment, recipe.run_name, recipe.tracking.uri, tags,
                 run_id=run_id, enabled=is_main) as tracker:
        if on_metrics is not None:
            tracker.listeners.append(on_metrics)
        if distributed is not None:
            run_id = distributed.broadcast_object(tracker.run_id)
        else:
            run_id = tracker.run_id
        if resume is None:
            # settings: the recipe as set (precision as asked); what this run chose and ran on
            # is logged apart (toolkit.tracking.measured)
            tracker.log_params({**rc.flatten(recipe.resolved), "precision": choice.requested})
            tracker.log_text(yaml.safe_dump(recipe.resolved, sort_keys=False), "recipe.yaml")
        tracker.log_params({f"{MEASURED}precision": choice.value, f"{MEASURED}device": dev.type,
                            **{f"{ENV}{k}": v for k, v in precision_mod.machine_params().items()},
                            f"{ENV}ctk": __version__, f"{ENV}git_commit": commit})
        options = RunOptions(device=dev, distributed=distributed, progress=progress,
                             checkpoint_dir=ckpt.checkpoint_dir(run_id or "local"), hooks=list(hooks or []),
                             fixed_steps=fixed_steps)
        # where this run's checkpoints go, recorded before the first one is written, so that
        # `ctk runs` and `--resume RUN_ID` find them from any working directory
        run_tags = ckpt.folder_tags(options.checkpoint_dir)
        if recipe.paper is not None:
            run_tags["ctk.paper"] = recipe.paper.source
        tracker.set_tags(run_tags)
        trainer = domain.trainer(recipe, tracker, options)
        if resume_path is not None:
            trainer.resume(resume_path, saved)
        trainer.fit()
        metrics = trainer.evaluate()
        trainer.save_checkpoint()
        if recipe.tracking.log_model and trainer.encoder is not None and is_main:
            tracker.log_model(trainer.encoder, recipe.resolved, domain.encoder_extras(trainer.encoder))
    return run_id, metrics


class _Calibrated(Exception):
    """Raised by :func:`calibrate`'s hook after the first real step: the length is fixed by then."""


class _KeepParams:
    """A tracker that keeps the params it is given and drops everything else."""

    def __init__(self) -> None:
        self.params: dict[str, Any] = {}

    def log_params(self, params: dict[str, Any]) -> None:
        self.params.update(params)

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


def calibrate(recipe: rc.Recipe, device: str | None = None) -> dict[str, Any] | None:
    """``budget.minutes``' step count for ``recipe`` on this machine, fixed as a run fixes it (its
    first online monitor timed, then the timed steps of :mod:`toolkit.training.budget`), with
    nothing logged and no step kept: ``{steps, ms_per_step, precision}``. None when the recipe has
    no ``budget.minutes`` or its trainer does not calibrate (RL stops on its own clock). A sweep
    calls it once, before its points, and hands the steps to each (``execute(fixed_steps=)``)."""
    from toolkit.training.pretrainer import Pretrainer
    if recipe.budget is None or not recipe.budget.minutes:
        return None
    dev = select_device(device or recipe.device)
    resolve_precision(recipe, dev, recipe.domain_class, announce=False)
    tracker = _KeepParams()

    def stop(step: int) -> None:
        raise _Calibrated
    trainer = recipe.domain_class(recipe).trainer(recipe, tracker, RunOptions(device=dev, progress=False,
                                                                              hooks=[stop]))
    if not isinstance(trainer, Pretrainer):
        return None
    try:
        trainer.fit()
    except _Calibrated:
        pass
    found = tracker.params
    return {"steps": int(found[f"{MEASURED}budget_steps_fixed"]), "precision": recipe.precision,
            "ms_per_step": float(found.get(f"{MEASURED}budget_ms_per_step", "nan"))}


def precision_choice(requested: str, device: Any, domain_cls: Any) -> precision_mod.Choice:
    """What ``requested`` resolves to on ``device`` under the domain's precision policy (the
    precisions its trainer runs, and its reason to keep ``auto`` at fp32, if any)."""
    return precision_mod.resolve(requested, device, domain_cls.precisions, domain_cls.auto_fp32)


def resolve_precision(recipe: rc.Recipe, device: Any, domain_cls: Any,
                      announce: bool = True) -> precision_mod.Choice:
    """Fix the recipe's precision for this run on ``device`` (``auto`` -> fp32 / bf16 / fp16,
    see :mod:`toolkit.training.precision`): the recipe, its resolved mapping and so the logged
    ``precision`` param hold the value used; ``announce`` prints the choice and its reason. An
    explicit value the hardware cannot run well is a RecipeError at ``precision``."""
    requested, allowed = recipe.precision, domain_cls.precisions
    try:
        choice = precision_choice(requested, device, domain_cls)
    except ValueError as exc:
        raise rc.RecipeError([("precision", f"{requested!r}: {exc}")], recipe.source) from None
    if choice.value not in allowed:
        raise rc.RecipeError([("precision", f"{requested!r}: domain {recipe.domain!r} runs "
                                            f"{', '.join(allowed)} only")], recipe.source)
    recipe.common = recipe.common.model_copy(update={"precision": choice.value})
    recipe.resolved = {**recipe.resolved, "precision": choice.value}
    if announce:
        print(f"[ctk] {choice.line()}", file=sys.stderr, flush=True)
    return choice


def _stored_run(uri: str | None, run_id: str) -> Any:
    """Run ``run_id`` as the store has it, or None (no store, or a run it does not know: a new
    run continues it)."""
    try:
        return client_for(uri).get_run(run_id)
    except Exception:  # noqa: BLE001 - see above
        return None


def expand_grid(grid: list[str]) -> list[list[str]]:
    """``["a.b=1,2", "c=x,y"]`` -> the cartesian product as lists of ``--set`` overrides."""
    axes = []
    for item in grid:
        if "=" not in item:
            raise rc.RecipeError([(item, "--grid: expected key.path=v1,v2,...")])
        key, values = item.split("=", 1)
        options = [v.strip() for v in _split_values(values)]
        if not options or any(v == "" for v in options):
            raise rc.RecipeError([(key, f"--grid: empty value in {values!r}")])
        axes.append([f"{key.strip()}={v}" for v in options])
    return [list(point) for point in itertools.product(*axes)] if axes else [[]]


def _split_values(text: str) -> list[str]:
    """Split on commas outside brackets, so ``[1,2],[3,4]`` gives two lists."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return out


def point_run_name(recipe: rc.Recipe, point: list[str]) -> str:
    """A sweep point's run name from what it sets: ``nt_xent-t0.1-s0`` for
    ``objective.loss.temperature=0.1`` (the key's initials, the full last component when two
    keys share initials), the loss (or domain) first, the seed last."""
    pairs = [p.split("=", 1) for p in point]
    pairs = [(k.strip(), v) for k, v in pairs if k.strip() != "seed"]
    def last(key: str) -> str:
        parts = [p for p in key.split(".") if not p.isdigit()]
        return parts[-1] if parts else key
    initials = {k: "".join(w[:1] for w in last(k).split("_") if w) for k, _ in pairs}
    clash = {i for i in initials.values() if list(initials.values()).count(i) > 1}
    obj = recipe.common.objective
    bits = [obj.loss.name if obj else recipe.common.domain]
    for k, v in pairs:
        tag = last(k) if initials[k] in clash else initials[k]
        bits.append(tag + re.sub(r"[^A-Za-z0-9.+-]+", "_", v.strip()).strip("_"))
    return "-".join(bits + [f"s{recipe.common.seed}"])
