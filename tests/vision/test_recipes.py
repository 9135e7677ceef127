"""Every vision recipe and every row of every vision reproduce table validates (schema,
component names and arguments, the domain's sections) without running anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from domains.vision import VisionDomain
from toolkit import objective as objective_mod
from toolkit import recipe as rc
from toolkit.studies.reproduce import load_table

ROOT = Path(__file__).resolve().parents[2] / "recipes" / "vision"
RECIPES = sorted(p for p in ROOT.rglob("*.yaml") if "tables" not in p.parts)
TABLES = sorted((ROOT / "tables").glob("*.yaml"))


def _validate(path: Path, overrides: list[str]) -> rc.Recipe:
    raw = rc.apply_overrides(rc.load_yaml(path), overrides, str(path))
    return rc.validate(raw, VisionDomain.sections(), objective_mod.check, str(path), overrides)


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: str(p.relative_to(ROOT)))
def test_recipe_validates(path):
    recipe = _validate(path, [])
    assert recipe.domain == "vision"
    assert recipe.paper is None or recipe.paper.source


@pytest.mark.parametrize("path", TABLES, ids=lambda p: p.name)
def test_table_rows_validate(path):
    table = load_table(path)
    assert table.rows and table.metrics
    labels = [row.label for row in table.rows]
    assert len(labels) == len(set(labels))
    for row in table.rows:
        assert row.recipe.is_file(), row.recipe
        _validate(row.recipe, row.overrides)
        assert set(row.paper) <= set(table.metrics) | {"linear_top5"}


def test_quickstart_is_simclr_on_fashion_mnist_with_both_baselines():
    recipe = _validate(ROOT / "quickstart.yaml", [])
    assert recipe.data.dataset == "fashion-mnist"
    assert recipe.objective.loss.name == "nt_xent" and recipe.objective.negatives.source == "in_batch"
    assert set(recipe.evaluation.baselines) == {"random_init", "raw_pixels"}
