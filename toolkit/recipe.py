"""Recipes: one YAML file per experiment, validated before anything runs.

A recipe has the common sections below plus the sections its domain owns (``data``,
``encoder``, ``evaluation`` and any the domain adds), which the domain validates with its own
pydantic models. Every problem is reported as ``path.in.the.file: what was wrong (got X);
expected Y`` and collected, so one run of ``ctk show`` lists them all.

Component sections name a registered component and its arguments in one mapping::

    objective:
      loss: {name: cacr, t_pos: 1.0, t_neg: 2.0}
      regularizers: [{name: distance_polarization, weight: 0.1, d_plus: 0.1, d_minus: 0.5}]
      negatives: {source: queue, size: 4096, momentum: 0.99}
      selector: {name: ring, lower: 0, upper: 90, schedule: {name: linear, ...}}
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from toolkit.recipe_files import RecipeError, apply_overrides, get_path, load_yaml  # noqa: F401 - re-exported


class Section(BaseModel):
    """Base of recipe sections: unknown keys are errors, and so are NaN and infinities (no
    recipe value means them; YAML's ``.nan`` / ``.inf`` are refused where a number goes)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class Component(BaseModel):
    """``{name: registered_name, **arguments}``; the arguments are checked against the
    component's constructor when the objective is built (see ``toolkit.objective``)."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    name: str

    @property
    def args(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class Regularizer(Component):
    weight: float = Field(1.0, ge=0)


class SelectorSection(Component):
    """``objective.selector``: a registered selector's name, its arguments and an optional
    schedule of one argument (the selector objects are in ``toolkit.samplers``)."""

    name: str = "all"
    schedule: Component | None = None


class Negatives(Section):
    """Where negatives come from.

    in_batch:     the other instances of the batch (SimCLR); with ``gather`` across ranks.
    queue:        a FIFO of ``size`` keys from a momentum encoder (MoCo), EMA ``momentum``.
    memory_bank:  one slot per dataset index (instance discrimination), slots updated with
                  ``bank_momentum`` (new = m * old + (1 - m) * z, renormalised).
    """

    source: Literal["in_batch", "queue", "memory_bank"] = "in_batch"
    size: int = Field(65536, ge=1)
    momentum: float = Field(0.999, ge=0, le=1)
    bank_momentum: float = Field(0.5, ge=0, lt=1)
    key_encoder: Literal["auto", "momentum", "none"] = "auto"


class DistributedSection(Section):
    """``distributed``: batch-norm across ranks under ``--nproc`` / ``--nnodes`` (no effect in
    one process).

    sync_bn:     SyncBatchNorm: BN statistics over the global batch (GPUs only, as torch's).
    shuffle_bn:  MoCo Sec. 3.3: the momentum (key) encoder sees the global batch shuffled across
                 ranks, then un-shuffled, so per-rank BN statistics cannot leak which key is
                 the positive.
    """

    sync_bn: bool = False
    shuffle_bn: bool = False


class ObjectiveSection(Section):
    """``objective``: what :func:`toolkit.objective.from_recipe` builds into an ``Objective``."""

    loss: Component
    regularizers: list[Regularizer] = Field(default_factory=list)
    negatives: Negatives = Field(default_factory=Negatives)
    selector: SelectorSection = Field(default_factory=SelectorSection)
    views: int = Field(2, ge=1, le=32)


class Optimizer(Section):
    name: Literal["sgd", "adam", "adamw", "lars"] = "sgd"
    lr: float = Field(0.05, gt=0)
    momentum: float = Field(0.9, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0)
    nesterov: bool = False
    betas: tuple[float, float] = (0.9, 0.999)
    trust_coefficient: float = Field(0.001, gt=0)
    scale_lr_by_batch: bool = Field(False, description="lr * batch_size / 256 (SimCLR rule)")


class LRScheduleSection(Section):
    """``schedule``: the learning-rate schedule (selector schedules live in ``toolkit.samplers``)."""

    name: Literal["constant", "cosine", "step"] = "cosine"
    warmup_steps: int = Field(0, ge=0)
    warmup_epochs: float = Field(0.0, ge=0)
    milestones: list[float] = Field(default_factory=list, description="epochs (step decay)")
    gamma: float = Field(0.1, gt=0, le=1)
    final_lr_fraction: float = Field(0.0, ge=0, le=1)


class Budget(Section):
    epochs: float | None = Field(None, gt=0)
    steps: int | None = Field(None, ge=1)
    batch_size: int = Field(256, ge=1)
    eval_every: int | None = Field(None, ge=1, description="steps between evaluations (end only when unset)")
    monitor_every: int | None = Field(None, ge=1, description="steps between online kNN monitors")
    checkpoint_every: int | None = Field(None, ge=0, description=(
        "steps between checkpoints (environment steps in rl); unset: once per epoch (rl: every "
        "10000 environment steps); 0: no periodic checkpoints"))
    checkpoint_minutes: float = Field(10.0, ge=0, description=(
        "also checkpoint when this much wall time passed since the last one (0: never)"))
    keep_checkpoints: int = Field(2, ge=1, description="the newest checkpoints kept per run")
    log_every: int = Field(10, ge=1)
    minutes: float | None = Field(None, gt=0, le=100_000, description=(
        "train for about this much wall time (steps and monitors; not the final evaluation, nor "
        "logging and checkpoints, ~7% more on the vision quickstart): the step count is fixed from "
        "the speed of a few timed steps before training, never more than epochs / steps, logged "
        "as budget_steps_fixed (replay with --set budget.steps=N)"))

    @model_validator(mode="after")
    def _one_length(self) -> "Budget":
        if self.epochs is None and self.steps is None:
            raise ValueError("give epochs or steps (how long to train; with minutes, the most to train)")
        return self


class Tracking(Section):
    experiment: str = Field("ctk", min_length=1)
    uri: str | None = Field(None, description="mlflow tracking URI; default $MLFLOW_TRACKING_URI, else sqlite:///./mlflow.db")
    run_name: str | None = None
    log_model: bool = True
    tags: dict[str, str] = Field(default_factory=dict)

    @field_validator("uri")
    @classmethod
    def _uri_form(cls, uri: str | None) -> str | None:
        from toolkit.tracking_health import uri_form_problem
        problem = uri_form_problem(uri) if uri is not None else None
        if problem:
            raise ValueError(problem)
        return uri


class Paper(Section):
    """The paper's reported figures for this setting (printed by ``ctk reproduce``)."""

    source: str
    metrics: dict[str, float] = Field(default_factory=dict)
    notes: str | None = None


class Resources(Section):
    """What one run asks of a Ray cluster (``ctk sweep --jobs N`` / ``--address``): CPU cores
    (its torch thread budget too; default cores / jobs) and GPUs (1 packs one run per GPU)."""

    cpus: float | None = Field(None, gt=0)
    gpus: float = Field(0, ge=0)


class Common(Section):
    """The sections every recipe shares (the domain-owned ones are removed before this)."""

    name: str | None = None
    description: str | None = None
    domain: str
    seed: int = Field(0, ge=0)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"  # auto: toolkit.training.precision
    distributed: DistributedSection = Field(default_factory=DistributedSection)
    objective: ObjectiveSection | None = None
    optimizer: Optimizer = Field(default_factory=Optimizer)
    schedule: LRScheduleSection = Field(default_factory=LRScheduleSection)
    budget: Budget | None = None
    tracking: Tracking = Field(default_factory=Tracking)
    paper: Paper | None = None
    resources: Resources = Field(default_factory=Resources)


@dataclass
class Recipe:
    """A validated recipe: the common sections as models, the domain's sections as the
    domain's models, the mapping as written (``raw``: overrides applied, no defaults) and the
    resolved mapping (for ``ctk show``, the logged artifact and the checkpoint's hash).

    The common sections are attributes (``recipe.budget``, ``recipe.seed``...); the domain's
    are ``recipe.data`` / ``recipe.encoder`` / ``recipe.evaluation`` or ``recipe.section(name)``.
    """

    common: Common
    sections: dict[str, BaseModel]
    resolved: dict[str, Any]
    source: str = "recipe"
    overrides: list[str] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)
    built: dict[str, Any] = field(default_factory=dict, repr=False)  # objects validation built

    def section(self, name: str) -> Any:
        """A domain-owned section by key; a KeyError names the sections this recipe has."""
        try:
            return self.sections[name]
        except KeyError:
            raise KeyError(f"recipe has no domain section {name!r}; it has: "
                           f"{', '.join(sorted(self.sections)) or 'none'}") from None

    data = property(lambda self: self.section("data"))
    encoder = property(lambda self: self.section("encoder"))
    evaluation = property(lambda self: self.section("evaluation"))
    name = property(lambda self: self.common.name)
    description = property(lambda self: self.common.description)
    domain = property(lambda self: self.common.domain)
    seed = property(lambda self: self.common.seed)
    device = property(lambda self: self.common.device)
    precision = property(lambda self: self.common.precision)
    distributed = property(lambda self: self.common.distributed)
    objective = property(lambda self: self.common.objective)
    optimizer = property(lambda self: self.common.optimizer)
    schedule = property(lambda self: self.common.schedule)
    budget = property(lambda self: self.common.budget)
    tracking = property(lambda self: self.common.tracking)
    paper = property(lambda self: self.common.paper)

    @property
    def run_name(self) -> str:
        """domain-dataset-loss-selector-seed, e.g. ``vision-fashion_mnist-nt_xent-all-s0``."""
        if self.common.tracking.run_name:
            return self.common.tracking.run_name
        data = self.resolved.get("data") or {}
        dataset = data.get("dataset") or data.get("task") or data.get("experiment") or data.get("corpus") or "data"
        if isinstance(dataset, (list, tuple)):  # several corpora: brown+sotu+...
            dataset = "+".join(str(d) for d in dataset)
        obj = self.common.objective
        loss = obj.loss.name if obj else "own-loss"
        if obj and obj.regularizers:
            loss += "+" + "+".join(r.name for r in obj.regularizers)
        sel = obj.selector.name if obj else "all"
        return f"{self.common.domain}-{dataset}-{loss}-{sel}-s{self.common.seed}"


# ---------------------------------------------------------------------------------------
# Error formatting (reading files and --set overrides: toolkit.recipe_files)

def pydantic_problems(exc: ValidationError, prefix: str = "") -> list[tuple[str, str]]:
    """Turn pydantic errors into (yaml path, 'message (got X); expected ...')."""
    problems = []
    for err in exc.errors():
        loc = [str(x) for x in err["loc"] if not str(x).startswith("function-")]
        path = ".".join(([prefix] if prefix else []) + loc)
        kind = err["type"]
        if kind == "extra_forbidden":
            msg = "unknown key"
        elif kind == "missing":
            msg = "required key is missing"
        else:
            msg = f"{err['msg']} (got {_short(err.get('input'))})"
        problems.append((path, msg))
    return problems


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def expected_keys(model: type[BaseModel]) -> str:
    return ", ".join(model.model_fields)


def unknown_key_hint(problems: list[tuple[str, str]], models: Mapping[str, type[BaseModel]]) -> list[tuple[str, str]]:
    """Add the list of accepted keys to 'unknown key' messages."""
    out = []
    for path, msg in problems:
        if msg == "unknown key":
            parent = path.rsplit(".", 1)[0] if "." in path else ""
            model = models.get(parent)
            if model is not None:
                msg = f"unknown key; expected one of: {expected_keys(model)}"
        out.append((path, msg))
    return out


def section_models() -> dict[str, type[BaseModel]]:
    """The common section models by YAML path (for 'expected one of' hints)."""
    return {"": Common, "objective": ObjectiveSection, "objective.negatives": Negatives,
            "distributed": DistributedSection,
            "optimizer": Optimizer, "schedule": LRScheduleSection, "budget": Budget,
            "tracking": Tracking, "paper": Paper}


def to_plain(value: Any) -> Any:
    """Models and tuples to plain YAML-able data."""
    if isinstance(value, BaseModel):
        return to_plain(value.model_dump(mode="python"))
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    return value


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """``{'a': {'b': 1}}`` -> ``{'a.b': 1}`` (lists by index), for mlflow params."""
    out: dict[str, Any] = {}
    if isinstance(value, dict):
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(value, list) and value and any(isinstance(v, (dict, list)) for v in value):
        for i, v in enumerate(value):
            out.update(flatten(v, f"{prefix}.{i}"))
    else:
        out[prefix] = value
    return out


def near_misses(problems: list[tuple[str, str]], data: Mapping[str, Any]) -> list[tuple[str, str]]:
    """For each required key reported missing, the keys beside it that look like a misspelling
    of it and are not reported yet (a component's mapping accepts any key as an argument, so
    ``{nme: nt_xent}`` would otherwise only say that ``name`` is missing)."""
    import difflib

    reported = {p for p, _ in problems}
    out: list[tuple[str, str]] = []
    for path, message in problems:
        if message != "required key is missing":
            continue
        parent, _, key = path.rpartition(".")
        node = get_path(data, parent) if parent else data
        if not isinstance(node, dict):
            continue
        for near in difflib.get_close_matches(key, [str(k) for k in node if str(k) != key], n=3, cutoff=0.6):
            where = f"{parent}.{near}" if parent else near
            if where not in reported:
                reported.add(where)
                out.append((where, f"unknown key; did you mean {key!r}?"))
    return out


def _related(a: str, b: str) -> bool:
    """Whether one YAML path is the other or lies under it."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def _objective_alone(raw: Any, bad: list[str]) -> ObjectiveSection | None:
    """The ``objective`` section validated on its own when the common sections have problems, so
    that its component checks (loss, regularizer and selector arguments) are reported with the
    schema's problems in one pass. The keys the schema rejected are left out (their defaults
    stand in, and what the component checks say about those paths is dropped); None when the
    loss itself cannot be read."""
    if not isinstance(raw, dict):
        return None
    data = copy.deepcopy(raw)
    for path in bad:
        if not _related(path, "objective"):
            continue
        parts = path.split(".")[1:]
        if not parts or parts[0] == "loss" and len(parts) <= 2:
            return None  # no loss, or no loss name: nothing to check the arguments against
        node: Any = data
        for part in parts[:-1]:
            node = node.get(part) if isinstance(node, dict) else (
                node[int(part)] if isinstance(node, list) and part.isdigit() and int(part) < len(node) else None)
        if isinstance(node, dict):
            node.pop(parts[-1], None)
        elif isinstance(node, list):
            return None  # an item of a list is itself wrong: the indices would shift
    try:
        return ObjectiveSection.model_validate(data)
    except ValidationError:
        return None


def validate(data: dict[str, Any], domain_sections: Mapping[str, type[BaseModel]],
             check_objective: Any = None, source: str = "recipe",
             overrides: list[str] | None = None, domain_check: Any = None) -> Recipe:
    """Validate a loaded recipe mapping.

    ``domain_sections`` are the domain's own section models (``data``, ``encoder``, ...);
    ``check_objective(objective, prefix) -> (built objective, problems)`` checks component
    names and arguments (``toolkit.objective.check``); ``domain_check(raw, sections) ->
    problems`` the domain's rules between sections (``Domain.check``). All problems are
    collected into one RecipeError.
    """
    problems: list[tuple[str, str]] = []
    common_part = {k: v for k, v in data.items() if k not in domain_sections}
    common: Common | None = None
    objective: ObjectiveSection | None = None
    try:
        common = Common.model_validate(common_part)
        objective = common.objective
    except ValidationError as exc:
        found = unknown_key_hint(pydantic_problems(exc), section_models())
        problems += found
        objective = _objective_alone(common_part.get("objective"), [p for p, _ in found])
    sections: dict[str, BaseModel] = {}
    for key, model in domain_sections.items():
        raw = data.get(key)
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            problems.append((key, f"expected a mapping, got {_short(raw)}"))
            continue
        try:
            sections[key] = model.model_validate(raw)
        except ValidationError as exc:
            problems += unknown_key_hint(pydantic_problems(exc, key), {key: model})
    built: dict[str, Any] = {}
    if objective is not None and check_objective is not None:
        schema_paths = [p for p, _ in problems]
        obj, found = check_objective(objective, "objective")
        problems += [(p, m) for p, m in found if not any(_related(p, q) for q in schema_paths)]
        if obj is not None and common is not None:
            built["objective"] = obj
    if domain_check is not None:
        problems += [p for p in domain_check(data, sections) if p not in problems]
    if problems:
        raise RecipeError(problems + near_misses(problems, data), source)
    assert common is not None
    resolved = to_plain(common)
    for key, model in sections.items():
        resolved[key] = to_plain(model)
    order = ["name", "description", "domain", "seed", "device", "precision", "distributed", "data", "encoder",
             "objective", "optimizer", "schedule", "budget", "evaluation", "tracking", "paper"]
    resolved = {k: resolved[k] for k in order if k in resolved} | {
        k: v for k, v in resolved.items() if k not in order}
    return Recipe(common=common, sections=sections, resolved=resolved, source=source,
                  overrides=list(overrides or []), raw=copy.deepcopy(data), built=built)
