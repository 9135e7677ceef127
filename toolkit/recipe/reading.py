"""Reading recipe files and ``--set`` overrides, and the error every recipe problem becomes.

A recipe is UTF-8 YAML read with ``yaml.SafeLoader`` (a ``!!python/...`` tag is refused: recipes
name code only through registered names) and checked before it is built: no key twice in one
mapping, at most MAX_DEPTH levels of nesting and MAX_VALUES values with aliases expanded;
overrides are ``a.b.c=value`` with the value parsed the same way. Every problem is a :class:`RecipeError` carrying ``(yaml path, message)`` pairs, so all of
them are reported at once. :mod:`toolkit.recipe` re-exports these names.
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from toolkit.errors import CtkError

__all__ = [
    "RecipeError",
    "load_yaml",
    "parse_yaml",
    "apply_overrides",
    "get_path",
    "expand_grid",
    "MAX_DEPTH",
    "MAX_VALUES",
]


class RecipeError(CtkError):
    """One or more problems in a recipe: ``problems`` is a list of (yaml path, message). A command
    reporting one exits with 2."""

    exit_code = 2

    def __init__(self, problems: list[tuple[str, str]], source: str = "recipe") -> None:
        self.problems = problems
        self.source = source
        lines = [f"{source}: {len(problems)} problem{'s' if len(problems) != 1 else ''}:"]
        lines += [f"  {path or '(top level)'}: {msg}" for path, msg in problems]
        super().__init__("\n".join(lines))


MAX_DEPTH = 32  # nesting levels a recipe may have (the shipped ones use at most 5)
MAX_VALUES = 10_000  # values once YAML aliases are expanded (the shipped ones hold < 300)
MAX_BYTES = 1_000_000  # file size (the shipped recipes are 1-4 kB)


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a recipe file; unreadable or non-mapping files are RecipeErrors."""
    p = Path(path)
    try:
        with open(p, "rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise RecipeError([("", f"cannot read the file: {exc.strerror or exc}")], str(path)) from None
    if len(raw) > MAX_BYTES:
        raise RecipeError([("", f"larger than {MAX_BYTES // 1000} kB; a recipe is a few kB")], str(path))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise RecipeError(
            [
                (
                    "",
                    f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at line {line} (offset "
                    f"{exc.start}); expected a recipe saved as UTF-8",
                )
            ],
            str(path),
        ) from None
    problems, data = parse_yaml(text)
    if problems:
        raise RecipeError(problems, str(path))
    if not isinstance(data, dict):
        raise RecipeError([("", f"expected a mapping of sections, got {type(data).__name__}")], str(path))
    return data


def parse_yaml(text: str) -> tuple[list[tuple[str, str]], Any]:
    """``(problems, value)`` of a YAML document read safely (``yaml.SafeLoader``: no Python
    tags) and checked before it is built: a key written twice in one mapping (YAML readers keep
    the last one silently), nesting deeper than MAX_DEPTH, or more than MAX_VALUES values once
    aliases are expanded (an alias "bomb" would otherwise take hours to validate)."""
    line = _too_deep_brackets(text, 2 * MAX_DEPTH)
    if line is not None:  # before the reader, whose scanner is quadratic in this depth
        return [
            (
                "",
                f"brackets nested more than {2 * MAX_DEPTH} levels deep at line {line}; a recipe "
                f"nests at most {MAX_DEPTH} levels",
            )
        ], None
    loader = None
    try:
        loader = yaml.SafeLoader(text)  # refuses non-printable characters here already
        node = loader.get_single_node()
        if node is None:
            return [], None
        problems = _node_problems(node)
        return (problems, None) if problems else ([], loader.construct_document(node))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = str(getattr(exc, "problem", exc))
        if isinstance(exc, yaml.reader.ReaderError):  # a control character, before any parsing
            where = f" at line {text.count(chr(10), 0, exc.position) + 1}"
            problem = f"unacceptable character #x{exc.character:04x} (control characters are not allowed)"
        if "python/" in problem:  # safe_load has no constructor for python tags: say why
            tag = problem.rsplit("tag:yaml.org,2002:", 1)[-1].rstrip("'")
            problem = (
                f"the tag !!{tag} is refused: a recipe is data and reaches code only "
                "through registered names (ctk list losses|selectors|regularizers|domains)"
            )
        return [("", f"not valid YAML{where}: {problem}")], None
    except RecursionError:  # the YAML reader composes nested nodes recursively
        return [("", f"nested too deeply to read; a recipe nests at most {MAX_DEPTH} levels")], None
    finally:
        if loader is not None:
            loader.dispose()


def _too_deep_brackets(text: str, limit: int) -> int | None:
    """The line where ``[``/``{`` nest more than ``limit`` deep in ``text``, or None (brackets
    in strings are counted too: this bounds the nesting, it does not parse)."""
    depth = 0
    for match in re.finditer(r"[\[\]{}]", text):
        depth = depth + 1 if match.group() in "[{" else max(0, depth - 1)
        if depth > limit:
            return text.count("\n", 0, match.start()) + 1
    return None


def _node_problems(root: yaml.Node) -> list[tuple[str, str]]:
    """Duplicated keys, too deep nesting and too many values of a composed YAML document, each
    at its path (at most the first six components of it; found without recursion)."""
    problems: list[tuple[str, str]] = []
    count, deep = 0, False
    stack: list[tuple[yaml.Node, list[str]]] = [(root, [])]
    while stack:
        node, path = stack.pop()
        count += 1
        if count > MAX_VALUES:
            problems.append(
                (
                    ".".join(path[:6]),
                    f"more than {MAX_VALUES} values once YAML aliases are "
                    "expanded (aliases repeated inside aliases?); a recipe "
                    "holds a few hundred",
                )
            )
            break
        if len(path) > MAX_DEPTH:
            if not deep:
                problems.append((".".join(path[:6]), f"nested more than {MAX_DEPTH} levels deep; a recipe nests a few"))
                deep = True
            continue
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key, value in node.value:
                name = key.value if isinstance(key, yaml.ScalarNode) else None
                if name is not None and key.tag != "tag:yaml.org,2002:merge":
                    ident = (key.tag, name)
                    if ident in seen:
                        problems.append(
                            (
                                ".".join([*path, name]),
                                f"written twice in one mapping (lines "
                                f"{seen[ident] + 1} and {key.start_mark.line + 1}); YAML would keep "
                                "the last silently: remove one",
                            )
                        )
                    seen.setdefault(ident, key.start_mark.line)
                stack.append((value, [*path, str(name)]))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, [*path, str(i)]) for i, item in enumerate(node.value))
    return problems


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
        found, value = parse_yaml(raw) if raw.strip() else ([], "")
        if found:
            if found[0][1].startswith("not valid YAML"):
                value = raw  # not YAML: the text itself
            else:
                problems += [(key, f"the value {m}") for _, m in found]
                continue
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


def overrides_from_mapping(sets: Mapping[str, Any]) -> list[str]:
    """``{"objective.loss.temperature": 0.5, ...}`` (a paper table's or a study's ``set:``) as
    ``--set`` strings, each value written as one line of YAML."""
    return [
        f"{key}={yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix('...').strip()}"
        for key, value in sets.items()
    ]


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


# ---------------------------------------------------------------------------------------
# --grid: the points of a sweep, as lists of --set overrides


def expand_grid(grid: list[str]) -> list[list[str]]:
    """``["a.b=1,2", "c=x,y"]`` -> the cartesian product as lists of ``--set`` overrides."""
    axes = []
    for item in grid:
        if "=" not in item:
            raise RecipeError([(item, "--grid: expected key.path=v1,v2,...")])
        key, values = item.split("=", 1)
        options = [v.strip() for v in _split_values(values)]
        if not options or any(v == "" for v in options):
            raise RecipeError([(key, f"--grid: empty value in {values!r}")])
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
