"""Recipes: one YAML file per experiment, validated before anything runs.

A recipe has the common sections (:mod:`.sections`: objective, optimizer, schedule, budget,
tracking, ...) plus the sections its domain owns (``data``, ``encoder``, ``evaluation`` and any
the domain adds), which the domain validates with its own pydantic models. Every problem is
reported as ``path.in.the.file: what was wrong (got X); expected Y`` and collected, so one run of
``ctk show`` lists them all.

``reading``   reading YAML safely, ``--set key=value`` overrides, dotted paths, ``--grid`` points
``sections``  the common sections' schema
``model``     :class:`Recipe` and :func:`validate`, with the error formatting; a point's run name
"""

from toolkit.recipe.model import Recipe, flatten, near_misses, point_run_name, section_models, to_plain, validate
from toolkit.recipe.reading import (
    RecipeError,
    apply_overrides,
    expand_grid,
    get_path,
    load_yaml,
    overrides_from_mapping,
)
from toolkit.recipe.sections import (
    Budget,
    Common,
    Component,
    DistributedSection,
    LRScheduleSection,
    Negatives,
    ObjectiveSection,
    Optimizer,
    Paper,
    PredictorSection,
    ProjectorSection,
    Regularizer,
    Resources,
    Section,
    SelectorSection,
    TargetSection,
    Tracking,
)

__all__ = [
    "Budget",
    "Common",
    "Component",
    "DistributedSection",
    "LRScheduleSection",
    "Negatives",
    "ObjectiveSection",
    "PredictorSection",
    "ProjectorSection",
    "TargetSection",
    "Optimizer",
    "Paper",
    "Recipe",
    "RecipeError",
    "Regularizer",
    "Resources",
    "Section",
    "SelectorSection",
    "Tracking",
    "apply_overrides",
    "expand_grid",
    "flatten",
    "get_path",
    "load_yaml",
    "near_misses",
    "overrides_from_mapping",
    "point_run_name",
    "section_models",
    "to_plain",
    "validate",
]
