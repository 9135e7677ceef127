"""Reading recipe files and ``--set`` overrides, and the error every recipe problem becomes.

A recipe is YAML read with ``yaml.safe_load`` (a ``!!python/...`` tag is refused: recipes name
code only through registered names); overrides are ``a.b.c=value`` with the value parsed as
YAML. Every problem is a :class:`RecipeError` carrying ``(yaml path, message)`` pairs, so all of
them are reported at once. :mod:`toolkit.recipe` re-exports these names.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Mapping

import yaml

__all__ = ["RecipeError", "load_yaml", "apply_overrides", "get_path"]


class RecipeError(Exception):
    """One or more problems in a recipe: ``problems`` is a list of (yaml path, message)."""

    def __init__(self, problems: list[tuple[str, str]], source: str = "recipe") -> None:
        self.problems = problems
        self.source = source
        lines = [f"{source}: {len(problems)} problem{'s' if len(problems) != 1 else ''}:"]
        lines += [f"  {path or '(top level)'}: {msg}" for path, msg in problems]
        super().__init__("\n".join(lines))


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a recipe file; unreadable or non-mapping files are RecipeErrors."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise RecipeError([("", f"cannot read the file: {exc.strerror or exc}")], str(path)) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = str(getattr(exc, "problem", exc))
        if "python/" in problem:    # safe_load has no constructor for python tags: say why
            tag = problem.rsplit("tag:yaml.org,2002:", 1)[-1].rstrip("'")
            problem = (f"the tag !!{tag} is refused: a recipe is data and reaches code only "
                       "through registered names (ctk list losses|selectors|regularizers|domains)")
        raise RecipeError([("", f"not valid YAML{where}: {problem}")], str(path)) from None
    if not isinstance(data, dict):
        raise RecipeError([("", f"expected a mapping of sections, got {type(data).__name__}")], str(path))
    return data


def apply_overrides(data: dict[str, Any], overrides: list[str], source: str = "recipe") -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides (values parsed as YAML: ``0.1``, ``true``, ``[1,2]``).

    A path through a list uses the index (``objective.regularizers.0.weight=0.2``).
    """
    out = copy.deepcopy(data)
    problems: list[tuple[str, str]] = []
    for item in overrides:
        if "=" not in item:
            problems.append((item, "an override must look like key.path=value"))
            continue
        key, raw = item.split("=", 1)
        key = key.strip()
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        parts = key.split(".")
        if not all(parts):
            problems.append((key, "empty component in the key path"))
            continue
        node: Any = out
        for i, part in enumerate(parts[:-1]):
            nxt = _child(node, part)
            if nxt is None:
                nxt = {}
                _set_child(node, part, nxt)
            elif not isinstance(nxt, (dict, list)):
                problems.append((".".join(parts[: i + 1]), f"is {nxt!r}, not a section; cannot set {key}"))
                break
            node = nxt
        else:
            if not _set_child(node, parts[-1], value):
                problems.append((key, f"cannot set an item of {type(node).__name__}"))
    if problems:
        raise RecipeError([(p, f"--set: {m}") for p, m in problems], source)
    return out


def get_path(raw: Mapping[str, Any], path: str, default: Any = None) -> Any:
    """The value at ``a.b.c`` of a recipe mapping as written, or ``default`` when absent
    (domain checks read the raw mapping, so they run even when other sections are invalid)."""
    node: Any = raw
    for part in path.split("."):
        child = _child(node, part)
        if child is None:
            return default
        node = child
    return node


def _child(node: Any, part: str) -> Any:
    if isinstance(node, dict):
        return node.get(part)
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return node[int(part)]
    return None


def _set_child(node: Any, part: str, value: Any) -> bool:
    if isinstance(node, dict):
        node[part] = value
        return True
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        node[int(part)] = value
        return True
    return False
