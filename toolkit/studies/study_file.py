"""A study file (``ctk study``): its schema, the study read and validated with every (domain,
arm) recipe (:func:`load_study`: one RecipeError lists every problem), and its points, one per
(domain, arm, seed) (:func:`study_points`). What the study is for: :mod:`toolkit.studies.study`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from toolkit import recipe as rc

__all__ = [
    "STUDY_TAG",
    "DOMAIN_TAG",
    "ARM_TAG",
    "ArmSpec",
    "DomainSpec",
    "StudyFile",
    "Study",
    "Loader",
    "load_study",
    "study_points",
]

STUDY_TAG, DOMAIN_TAG, ARM_TAG = "ctk.study", "ctk.study_domain", "ctk.study_arm"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ArmSpec(_Strict):
    """An objective change: ``set`` maps recipe keys to values (``{}``: the recipe as it is)."""

    description: str = ""
    set: dict[str, Any] = Field(default_factory=dict)


class DomainSpec(_Strict):
    """One domain of the study: its recipe (relative to the study file), the metrics of record
    (``max`` / ``min``; empty: the domain's own direction), overrides for every arm (``set``) and
    per-arm overrides that replace the arm's ``set`` in this domain (``arms``)."""

    recipe: str
    metrics: dict[str, Literal["max", "min"] | None] = Field(min_length=1)
    set: dict[str, Any] = Field(default_factory=dict)
    arms: dict[str, dict[str, Any]] = Field(default_factory=dict)


class StudyFile(_Strict):
    name: str = Field(min_length=1)
    description: str = ""
    experiment: str | None = None
    seeds: list[int] = Field(min_length=2)
    baseline: str
    arms: dict[str, ArmSpec | None] = Field(min_length=2)
    domains: dict[str, DomainSpec] = Field(min_length=1)
    alpha: float = Field(0.05, gt=0, lt=1)

    @field_validator("seeds")
    @classmethod
    def _distinct(cls, seeds: list[int]) -> list[int]:
        if len(set(seeds)) != len(seeds) or min(seeds) < 0:
            raise ValueError(f"seeds must be distinct integers >= 0, got {seeds}")
        return seeds


@dataclass
class Study:
    spec: StudyFile
    source: str
    overrides: dict[tuple[str, str], list[str]]  # (domain, arm) -> --set strings
    recipes: dict[str, Path]  # domain -> recipe file
    metrics: dict[str, dict[str, str]]  # domain -> {metric: max | min}
    seeds: list[int] = field(default_factory=list)

    @property
    def experiment(self) -> str:
        return self.spec.experiment or f"study-{self.spec.name}"

    @property
    def arms(self) -> list[str]:
        """The baseline first, then the other arms in file order."""
        return [self.spec.baseline, *(a for a in self.spec.arms if a != self.spec.baseline)]


Loader = Callable[[str, list[str]], Any]  # (recipe path, overrides) -> validated recipe; raises RecipeError


def load_study(path: str | Path, load: Loader, lookup: Callable[[str], Any], seeds: list[int] | None = None) -> Study:
    """Read and validate a study and every (domain, arm) recipe (``lookup``: domain name ->
    domain class); one RecipeError lists every problem with its path in the study file."""
    source = str(path)
    data = rc.load_yaml(path)
    if seeds is not None:
        data = {**data, "seeds": list(seeds)}
    try:
        spec = StudyFile.model_validate(data)
    except ValidationError as exc:
        raise rc.RecipeError(rc.pydantic_problems(exc), source) from None
    problems: list[tuple[str, str]] = []
    if spec.baseline not in spec.arms:
        problems.append(("baseline", f"{spec.baseline!r} is not an arm; expected one of: {', '.join(spec.arms)}"))
    overrides: dict[tuple[str, str], list[str]] = {}
    recipes: dict[str, Path] = {}
    metrics: dict[str, dict[str, str]] = {}
    for name, dom in spec.domains.items():
        where = f"domains.{name}"
        for arm in dom.arms:
            if arm not in spec.arms:
                problems.append(
                    (f"{where}.arms.{arm}", f"not an arm of the study; expected one of: {', '.join(spec.arms)}")
                )
        recipe_path = Path(os.path.normpath(Path(source).parent / dom.recipe))
        if not recipe_path.is_file():
            problems.append((f"{where}.recipe", f"no such file: {recipe_path}"))
            continue
        recipes[name] = recipe_path
        loaded: dict[str, Any] = {}
        for arm, arm_spec in spec.arms.items():
            sets = dom.arms[arm] if arm in dom.arms else (arm_spec.set if arm_spec else {})
            overrides[(name, arm)] = [*rc.overrides_from_mapping(dom.set), *rc.overrides_from_mapping(sets)]
            try:
                recipe = load(str(recipe_path), overrides[(name, arm)])
            except rc.RecipeError as exc:
                why = f"arm {arm!r} does not apply to this recipe" if arm != spec.baseline else "the baseline recipe"
                problems += [(f"{where} ({why})", f"{p}: {m}") for p, m in exc.problems]
                continue
            loaded[arm] = recipe
        if loaded:  # the metric names, read off the baseline's recipe (or any arm's that validated)
            recipe = loaded.get(spec.baseline, next(iter(loaded.values())))
            metrics[name] = _metric_directions(
                recipe, lookup(recipe.domain).result_metrics(recipe), dom, where, problems
            )
    if problems:
        raise rc.RecipeError(problems, source)
    return Study(spec, source, overrides, recipes, metrics, list(spec.seeds))


def _metric_directions(
    recipe: Any, known: dict[str, str] | None, dom: DomainSpec, where: str, problems: list
) -> dict[str, str]:
    """The metrics of record with their direction; unknown names are problems when the domain
    says which metrics it logs (``known``)."""
    out = {}
    for metric, direction in dom.metrics.items():
        if known is not None and metric not in known:
            problems.append(
                (
                    f"{where}.metrics.{metric}",
                    f"a {recipe.domain} run of this recipe does not log it; "
                    f"expected one of: {', '.join(sorted(known))}",
                )
            )
            continue
        direction = direction or (known or {}).get(metric) or ""
        if direction not in ("max", "min"):
            problems.append((f"{where}.metrics.{metric}", "give its better direction: max or min"))
            continue
        out[metric] = direction
    return out


def study_points(study: Study, load: Loader) -> list[tuple[Any, str, str, int]]:
    """``(sweep point, domain, arm, seed)`` for every point of the study, baseline arm first."""
    from toolkit.studies.sweeps import Point
    from toolkit.studies.ui_view import run_note

    out = []
    for domain in study.recipes:
        for arm in study.arms:
            for seed in study.seeds:
                label = f"{domain}/{arm}/s{seed}"
                sets = [
                    *study.overrides[(domain, arm)],
                    f"seed={seed}",
                    f"tracking.experiment={study.experiment}",
                    f"tracking.run_name={label}",
                ]
                recipe = load(str(study.recipes[domain]), sets)
                tags = {
                    STUDY_TAG: study.spec.name,
                    DOMAIN_TAG: domain,
                    ARM_TAG: arm,
                    "mlflow.note.content": run_note(f"study {study.spec.name}, {domain}, arm {arm}", sets[:-2]),
                }
                out.append((Point(label, recipe, [f"seed={seed}"], tags, budget_group=domain), domain, arm, seed))
    return out
