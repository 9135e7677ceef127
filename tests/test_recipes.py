"""Every recipe the repository ships, in every domain folder, and every row of every paper table
validates (schema, component names and arguments, the domain's own sections) without running.

The per-domain test files check what is special to each domain; this one makes sure no recipe
is left behind (a recipe with an unfilled value, an unknown key or a loss that does not exist
fails here, whatever folder it sits in)."""

from __future__ import annotations

from pathlib import Path

import pytest

from domains import installed
from toolkit.runs import load_recipe
from toolkit.studies.reproduce import load_table

ROOT = Path(__file__).resolve().parents[1] / "recipes"
RECIPES = sorted(p for p in ROOT.rglob("*.yaml") if "tables" not in p.parts)
TABLES = sorted(ROOT.glob("*/tables/*.yaml"))


def test_every_domain_folder_has_recipes_and_tables():
    domains = {p.relative_to(ROOT).parts[0] for p in RECIPES}
    assert {"vision", "text", "rl", "toy"} <= domains
    assert {p.relative_to(ROOT).parts[0] for p in TABLES} >= {"vision", "text", "rl", "toy"}


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: str(p.relative_to(ROOT)))
def test_recipe_validates(path):
    recipe = load_recipe(path, [], installed.get)
    assert recipe.domain == path.relative_to(ROOT).parts[0]
    assert recipe.name


@pytest.mark.parametrize("path", TABLES, ids=lambda p: str(p.relative_to(ROOT)))
def test_table_rows_validate(path):
    table = load_table(path)
    assert table.rows and table.metrics
    labels = [row.label for row in table.rows]
    assert len(labels) == len(set(labels)), f"duplicate row labels in {path.name}"
    for row in table.rows:
        assert row.recipe.is_file(), row.recipe
        load_recipe(row.recipe, row.overrides, installed.get)


HEADER_LINES = 6


def _header_lines(path: Path) -> int:
    """The comment lines above a recipe plus the lines of its ``description`` (its key's line and
    the indented lines of a folded block after it)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    count = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
    for i, line in enumerate(lines):
        if line.startswith("description:"):
            rest = lines[i + 1 :]
            count += 1 + next((j for j, x in enumerate(rest) if not x.startswith("  ")), len(rest))
    return count


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: str(p.relative_to(ROOT)))
def test_recipe_header_is_a_few_lines(path):
    """What the recipe is and what it reaches; the tuning history lives in docs/time-to-accuracy.md."""
    n = _header_lines(path)
    assert n <= HEADER_LINES, f"{path.name}: {n} header lines (comments + description), at most {HEADER_LINES}"
