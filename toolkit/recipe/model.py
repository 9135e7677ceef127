"""A validated recipe (:class:`Recipe`) and the validation that makes one: the common sections
(:mod:`toolkit.recipe.sections`), the domain's sections, the objective, every problem collected
with its path."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from toolkit.recipe.reading import RecipeError, get_path
from toolkit.recipe.sections import (
    Budget,
    Common,
    DistributedSection,
    LRScheduleSection,
    Negatives,
    ObjectiveSection,
    Optimizer,
    Paper,
    PredictorSection,
    ProjectorSection,
    TargetSection,
    Tracking,
)


@dataclass(frozen=True)
class Recipe:
    """A validated recipe: the common sections as models, the domain's sections as the
    domain's models, the mapping as written (``raw``: overrides applied, no defaults) and the
    resolved mapping (for ``ctk show``, the logged artifact and the checkpoint's hash). Frozen:
    a changed recipe is a new one (``dataclasses.replace``), never an edit of one in use.

    The common sections are attributes (``recipe.budget``, ``recipe.seed``...); the domain's
    are ``recipe.data`` / ``recipe.encoder`` / ``recipe.evaluation`` or ``recipe.section(name)``.
    ``domain_class`` is the domain whose sections and rules validated it (``toolkit.runs.load_recipe``
    looks it up once and checks once; None for a recipe validated without a domain).
    """

    common: Common
    sections: dict[str, BaseModel]
    resolved: dict[str, Any]
    source: str = "recipe"
    overrides: list[str] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)
    domain_class: Any = field(default=None, repr=False)

    def section(self, name: str) -> Any:
        """A domain-owned section by key; a KeyError names the sections this recipe has."""
        try:
            return self.sections[name]
        except KeyError:
            raise KeyError(
                f"recipe has no domain section {name!r}; it has: {', '.join(sorted(self.sections)) or 'none'}"
            ) from None

    data = property(lambda self: self.section("data"))
    encoder = property(lambda self: self.section("encoder"))
    evaluation = property(lambda self: self.section("evaluation"))
    name = property(lambda self: self.common.name)
    description = property(lambda self: self.common.description)
    domain = property(lambda self: self.common.domain)
    seed = property(lambda self: self.common.seed)
    device = property(lambda self: self.common.device)
    precision = property(lambda self: self.common.precision)
    compile = property(lambda self: self.common.compile)
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


def point_run_name(recipe: Recipe, point: list[str]) -> str:
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


# ---------------------------------------------------------------------------------------
# Error formatting (reading files and --set overrides: toolkit.recipe.reading)


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
    return {
        "": Common,
        "objective": ObjectiveSection,
        "objective.negatives": Negatives,
        "objective.predictor": PredictorSection,
        "objective.projector": ProjectorSection,
        "objective.target": TargetSection,
        "distributed": DistributedSection,
        "optimizer": Optimizer,
        "schedule": LRScheduleSection,
        "budget": Budget,
        "tracking": Tracking,
        "paper": Paper,
    }


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
            node = (
                node.get(part)
                if isinstance(node, dict)
                else (node[int(part)] if isinstance(node, list) and part.isdigit() and int(part) < len(node) else None)
            )
        if isinstance(node, dict):
            node.pop(parts[-1], None)
        elif isinstance(node, list):
            return None  # an item of a list is itself wrong: the indices would shift
    try:
        return ObjectiveSection.model_validate(data)
    except ValidationError:
        return None


def validate(
    data: dict[str, Any],
    domain_sections: Mapping[str, type[BaseModel]],
    check_objective: Any = None,
    source: str = "recipe",
    overrides: list[str] | None = None,
    domain_check: Any = None,
    domain_class: Any = None,
) -> Recipe:
    """Validate a loaded recipe mapping.

    ``domain_sections`` are the domain's own section models (``data``, ``encoder``, ...);
    ``check_objective(objective, prefix) -> problems`` checks component names and arguments
    (``toolkit.objective.check``, which builds no objective: the trainer builds the one a run
    uses); ``domain_check(raw, sections) -> problems`` the
    domain's rules between sections (``Domain.check``); ``domain_class`` is kept on the recipe.
    All problems are collected into one RecipeError.
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
    if objective is not None and check_objective is not None:
        schema_paths = [p for p, _ in problems]
        found = check_objective(objective, "objective")
        problems += [(p, m) for p, m in found if not any(_related(p, q) for q in schema_paths)]
    if domain_check is not None:
        problems += [p for p in domain_check(data, sections) if p not in problems]
    if problems:
        raise RecipeError(problems + near_misses(problems, data), source)
    assert common is not None
    resolved = to_plain(common)
    for key, model in sections.items():
        resolved[key] = to_plain(model)
    order = [
        "name",
        "description",
        "domain",
        "seed",
        "device",
        "precision",
        "compile",
        "distributed",
        "data",
        "encoder",
        "objective",
        "optimizer",
        "schedule",
        "budget",
        "evaluation",
        "tracking",
        "paper",
    ]
    resolved = {k: resolved[k] for k in order if k in resolved} | {k: v for k, v in resolved.items() if k not in order}
    return Recipe(
        common=common,
        sections=sections,
        resolved=resolved,
        source=source,
        overrides=list(overrides or []),
        raw=copy.deepcopy(data),
        domain_class=domain_class,
    )
