"""Hostile recipes, generated (issue 30, item 3): every shipped recipe, mutated.

Each case writes a mutated copy of a shipped recipe and drives the validation ``ctk show`` and
``ctk run`` share (``toolkit.runs.load_recipe``), in process, then the command line through
click's CliRunner. For every case:

* validation ends in a ``RecipeError`` or a recipe; never another exception (a traceback);
* a mutation known to be invalid gives a ``RecipeError``; ``ctk run`` exits 2 with no traceback,
  writes nothing to the store (no ``mlflow.db``, no ``mlartifacts/``) and makes no
  ``checkpoints/`` folder;
* every problem has a message, and a mutation aimed at one key is reported at that key, at a
  section above it or at a key below it;
* a mutation that happens to be valid (a number still in range, a deleted key with a default)
  is told apart by the validation itself: ``ctk show`` exits 0 and what it prints (the
  resolved recipe) validates again to the same resolved recipe.

A mutation is "known invalid" when no recipe field can accept it: a mapping or a list of
mappings where a scalar was, text where a number or a flag was, NaN or an infinity, an unknown
or misspelt key (outside the free-form mappings ``tracking.tags`` and ``paper.metrics``), a
duplicated key, an empty file, non-UTF-8 bytes, nesting deeper than a recipe can be, an alias
expansion bomb, a ``!!python/...`` or unknown tag. The others (a number out of range or huge,
a deleted key or section, a YAML tag of a standard type, an anchor reused elsewhere, a random
``--set``) may be valid or not; they must still never give a traceback.

The default suite tries DEFAULT_EXAMPLES cases (derandomized: the same ones every time) plus one
deterministic pass of every file-level attack over every recipe; the test marked ``soak`` (``pytest -m soak``) tries
SLOW_EXAMPLES random ones (``$CTK_FUZZ_EXAMPLES``, default 2000; about 85 ms a case on a CI
core). ``pytest --hypothesis-show-statistics`` prints how many cases of each kind were refused
or accepted.
"""

from __future__ import annotations

import math
import os
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import cli
from domains import installed
from toolkit import recipe as rc
from toolkit.runs import load_recipe
from toolkit.runs.defaults import recipe_with_defaults

ROOT = Path(__file__).resolve().parents[2] / "recipes"
RECIPES = sorted(p for p in ROOT.rglob("*.yaml") if "tables" not in p.parts)
DATA = {p: yaml.safe_load(p.read_text(encoding="utf-8")) for p in RECIPES}
FREE_FORM = ("tracking.tags", "paper.metrics")  # mappings whose keys are the user's own
PLACEHOLDER = "CTK_FUZZ_PLACEHOLDER"
DEFAULT_EXAMPLES = 150
SLOW_EXAMPLES = int(os.environ.get("CTK_FUZZ_EXAMPLES", "2000"))  # longer soaks: CTK_FUZZ_EXAMPLES=20000


# -- every key name a recipe may hold (a misspelling that lands on one may be valid) -----------


def _model_fields(model: type[BaseModel], seen: set) -> set[str]:
    if model in seen:
        return set()
    seen.add(model)
    names = set(model.model_fields)
    for field in model.model_fields.values():
        stack = [field.annotation]
        while stack:
            t = stack.pop()
            if isinstance(t, type) and issubclass(t, BaseModel):
                names |= _model_fields(t, seen)
            stack += list(typing.get_args(t))
    return names


def _known_names() -> set[str]:
    import toolkit.objective  # noqa: F401 - registers every component
    from toolkit.losses.base import LOSSES
    from toolkit.registry import constructor_args
    from toolkit.regularizers import REGULARIZERS
    from toolkit.samplers import SELECTORS

    seen: set = set()
    names = _model_fields(rc.Common, seen)
    for name in installed.BUILTIN:
        for model in installed.get(name).sections().values():
            names |= _model_fields(model, seen)
    names |= set(installed.get("vision").sections())
    for reg in (LOSSES, REGULARIZERS, SELECTORS):
        for entry in reg:
            names |= set(constructor_args(reg.get(entry.name)))
    from toolkit.samplers import schedules

    for obj in vars(schedules).values():
        if isinstance(obj, type):
            try:
                names |= set(constructor_args(obj))
            except (TypeError, ValueError):
                pass
    return names


KNOWN = _known_names()


# -- mutations --------------------------------------------------------------------------------


@dataclass
class Case:
    recipe: Path
    kind: str
    path: str | None  # the key the mutation aims at (None: the whole file)
    content: bytes
    invalid: bool  # known invalid: must be refused
    overrides: tuple[str, ...] = ()

    def __repr__(self) -> str:  # what hypothesis prints for a failing case
        head = self.content[:400].decode("utf-8", "replace")
        return (
            f"Case({self.recipe.relative_to(ROOT)}, {self.kind}, path={self.path!r}, invalid={self.invalid}, "
            f"overrides={self.overrides!r}, content[:400]={head!r})"
        )


def _walk(node: Any, path: str = "") -> tuple[list[str], list[str]]:
    """(scalar leaf paths, mapping paths) of a recipe mapping."""
    leaves, maps = [], []
    if isinstance(node, dict):
        maps.append(path)
        for k, v in node.items():
            sub = f"{path}.{k}" if path else str(k)
            a, b = _walk(v, sub)
            leaves += a
            maps += b
    elif isinstance(node, list):
        for i, v in enumerate(node):
            a, b = _walk(v, f"{path}.{i}")
            leaves += a
            maps += b
    else:
        leaves.append(path)
    return leaves, maps


def _get(data: Any, path: str) -> Any:
    node = data
    for part in path.split(".") if path else []:
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def _set(data: Any, path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node = _get(data, ".".join(parents))
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


def _free_form(path: str) -> bool:
    return any(path == f or path.startswith(f + ".") for f in FREE_FORM)


def _dump(data: Any, snippet: str | None = None) -> bytes:
    text = yaml.safe_dump(data, sort_keys=False, width=10_000)
    if snippet is not None:
        assert text.count(PLACEHOLDER) == 1, text
        text = text.replace(PLACEHOLDER, snippet)
    return text.encode("utf-8")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _misspell(key: str, how: int, where: int) -> str:
    i = where % max(1, len(key))
    if how == 0 and len(key) > 1:  # swap two neighbours
        j = min(i, len(key) - 2)
        return key[:j] + key[j + 1] + key[j] + key[j + 2 :]
    if how == 1 and len(key) > 2:  # drop one
        return key[:i] + key[i + 1 :]
    return key[:i] + key[i] + key[i:]  # double one


BOMB = (
    "["
    + ", ".join([f"&a0 [{', '.join(['lol'] * 9)}]"] + [f"&a{k} [{', '.join([f'*a{k - 1}'] * 9)}]" for k in range(1, 9)])
    + "]"
)  # 9^9 leaves expanded
TAGS_INVALID = [
    "!!python/object/apply:os.system [echo]",
    "!!python/name:os.system ''",
    "!ctk_unknown 1",
    "!!timestamp 2001-12-14t21:59:43.10-05:00",
]
TAGS_EITHER = [
    "!!binary aGVsbG8=",
    "!!str 1",
    "!!float '0.5'",
    "!!int '3'",
    "!!set {a, b}",
    "!!null ''",
    "!!bool 'true'",
    "!!omap [{a: 1}, {b: 2}]",
]


@st.composite
def cases(draw) -> Case:
    recipe = draw(st.sampled_from(RECIPES))
    data = DATA[recipe]
    leaves, maps = _walk(data)
    maps = [m for m in maps if not _free_form(m)]
    kind = draw(
        st.sampled_from(
            [
                "mapping_for_scalar",
                "list_for_scalar",
                "text_for_number",
                "nan_or_inf",
                "out_of_range",
                "huge_number",
                "unknown_key",
                "misspelt_key",
                "deleted_key",
                "deleted_section",
                "duplicated_section",
                "empty_file",
                "deep_nesting",
                "alias_bomb",
                "anchor_reused",
                "tag_refused",
                "tag_standard",
                "non_utf8",
                "random_override",
            ]
        )
    )
    event(kind)
    data = yaml.safe_load(yaml.safe_dump(data))  # a copy
    numbers = [p for p in leaves if _is_number(_get(data, p)) and not _free_form(p)]
    flags = [p for p in leaves if isinstance(_get(data, p), bool)]
    if kind in ("text_for_number", "nan_or_inf", "out_of_range", "huge_number") and not numbers:
        kind = "mapping_for_scalar"
    if kind == "mapping_for_scalar":
        path = draw(st.sampled_from(leaves))
        _set(data, path, {"ctk_fuzz": 1})
        return Case(recipe, kind, path, _dump(data), True)
    if kind == "list_for_scalar":
        path = draw(st.sampled_from(leaves))
        _set(data, path, [[1, 2], {"ctk_fuzz": 1}])
        return Case(recipe, kind, path, _dump(data), True)
    if kind == "text_for_number":
        path = draw(st.sampled_from(numbers + flags))
        _set(data, path, draw(st.sampled_from(["ctk-fuzz", "12 monkeys", "0x1g", "", "1e", "∞"])))
        return Case(recipe, kind, path, _dump(data), True)
    if kind == "nan_or_inf":
        path = draw(st.sampled_from(numbers))
        _set(data, path, draw(st.sampled_from([math.nan, math.inf, -math.inf])))
        return Case(recipe, kind, path, _dump(data), True)
    if kind == "out_of_range":
        path = draw(st.sampled_from(numbers))
        _set(data, path, draw(st.sampled_from([-1, 0, -0.5, 1.5, -1e9, 2, 100, 1e-300])))
        return Case(recipe, kind, path, _dump(data), False)
    if kind == "huge_number":
        path = draw(st.sampled_from(numbers))
        _set(data, path, draw(st.sampled_from([10**30, -(10**30), 1.7e308, 2**63, 2**64 + 1])))
        return Case(recipe, kind, path, _dump(data), False)
    if kind == "unknown_key":
        parent = draw(st.sampled_from(maps))
        _get(data, parent)["ctk_fuzz_unknown"] = 1
        return Case(recipe, kind, f"{parent}.ctk_fuzz_unknown" if parent else "ctk_fuzz_unknown", _dump(data), True)
    if kind == "misspelt_key":
        parent = draw(st.sampled_from([m for m in maps if _get(data, m)]))
        node = _get(data, parent)
        key = draw(st.sampled_from(sorted(node, key=str)))
        wrong = _misspell(str(key), draw(st.integers(0, 2)), draw(st.integers(0, 50)))
        if wrong in node:
            wrong += "_x"
        node[wrong] = node.pop(key)
        path = f"{parent}.{wrong}" if parent else wrong
        return Case(recipe, kind, path, _dump(data), wrong not in KNOWN)
    if kind == "deleted_key":
        parent = draw(st.sampled_from([m for m in maps if _get(data, m)]))
        node = _get(data, parent)
        key = draw(st.sampled_from(sorted(node, key=str)))
        del node[key]
        return Case(recipe, kind, f"{parent}.{key}" if parent else str(key), _dump(data), False)
    if kind == "deleted_section":
        key = draw(st.sampled_from(sorted(data)))
        del data[key]
        return Case(recipe, kind, key, _dump(data), key == "domain")
    if kind == "duplicated_section":
        key = draw(st.sampled_from(sorted(data)))
        extra = yaml.safe_dump({key: data[key]}, sort_keys=False).encode("utf-8")
        return Case(recipe, kind, key, _dump(data) + extra, True)
    if kind == "empty_file":
        content = draw(st.sampled_from([b"", b"\n\n", b"# only a comment\n", b"---\n", b"~\n", b"   \n"]))
        return Case(recipe, kind, None, content, True)
    if kind == "deep_nesting":
        path = draw(st.sampled_from(leaves))
        depth = draw(st.sampled_from([40, 300, 5000, 100_000]))
        flow = draw(st.sampled_from(["[", "{a: "]))
        snippet = flow * depth + "1" + ("]" if flow == "[" else "}") * depth
        _set(data, path, PLACEHOLDER)
        return Case(recipe, kind, path, _dump(data, snippet), True)
    if kind == "alias_bomb":
        path = draw(st.sampled_from(leaves))
        _set(data, path, PLACEHOLDER)
        return Case(recipe, kind, path, _dump(data, BOMB), True)
    if kind == "anchor_reused":
        keys = [k for k in data if isinstance(data[k], dict)]
        if len(keys) < 2:
            return Case(recipe, kind, None, _dump(data), False)
        src, dst = draw(st.permutations(keys))[:2]
        text = _dump(data).decode()
        text = text.replace(f"\n{src}:", f"\n{src}: &ctk_anchor", 1) if f"\n{src}:" in text else text
        lines = text.split("\n")
        start = next(i for i, ln in enumerate(lines) if ln.startswith(f"{dst}:"))
        end = next((i for i in range(start + 1, len(lines)) if lines[i] and not lines[i].startswith(" ")), len(lines))
        lines[start:end] = [f"{dst}: *ctk_anchor"]
        return Case(recipe, kind, dst, "\n".join(lines).encode(), False)
    if kind in ("tag_refused", "tag_standard"):
        path = draw(st.sampled_from(leaves))
        snippet = draw(st.sampled_from(TAGS_INVALID if kind == "tag_refused" else TAGS_EITHER))
        _set(data, path, PLACEHOLDER)
        return Case(recipe, kind, path, _dump(data, snippet), kind == "tag_refused")
    if kind == "non_utf8":
        raw = _dump(data)
        at = draw(st.integers(0, len(raw)))
        junk = draw(st.sampled_from([b"\xff", b"\xfe\xff", b"\xc3\x28", b"\x80abc", b"\xed\xa0\x80"]))
        return Case(recipe, kind, None, raw[:at] + junk + raw[at:], True)
    # random_override: a --set with any key path and any value
    key = draw(st.one_of(st.sampled_from(leaves + maps), st.text(alphabet="ab.0_=-", max_size=12)))
    value = draw(
        st.one_of(
            st.sampled_from(
                [
                    "",
                    "[",
                    "{a: [}",
                    "- x",
                    ".nan",
                    "!!python/name:os.system",
                    "1e999",
                    "[[[[[[[[1]]]]]]]]",
                    "null",
                    "~",
                    "&a [*a]",
                ]
            ),
            st.text(max_size=20),
        )
    )
    return Case(recipe, kind, key or None, _dump(data), False, (f"{key}={value}",))


# -- the properties ---------------------------------------------------------------------------


def _related(a: str, b: str) -> bool:
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def _expect_refused_before_the_store(case: Case, path: Path, folder: Path, problems: list) -> None:
    args = ["run", str(path), *sum((["--set", o] for o in case.overrides), [])]
    result = CliRunner().invoke(cli.main, args)
    assert result.exit_code == 2, (case, result.output, result.exception)
    assert "Traceback" not in result.output, result.output
    for where, _ in problems:
        assert f"  {where or '(top level)'}: " in result.output, (where, result.output)
    for name in ("mlflow.db", "mlartifacts", "checkpoints"):
        assert not (folder / name).exists(), (case, name)


def check_case(case: Case, folder: Path) -> str:
    """Drive one case through the validation and the CLI; returns 'refused' or 'accepted'."""
    path = folder / "mutated.yaml"
    path.write_bytes(case.content)
    try:
        recipe = load_recipe(path, list(case.overrides), installed.get)
    except rc.RecipeError as exc:
        problems = exc.problems
        assert problems, case
        for where, message in problems:
            assert isinstance(where, str) and isinstance(message, str) and message.strip(), (case, where, message)
        if case.invalid and case.path is not None and not case.overrides:
            # at the key, or a YAML-level problem (a refused tag, too deep brackets) at its line
            assert any(
                _related(where, case.path) or (where == "" and " line " in message) for where, message in problems
            ), (case, problems)
        if case.path is None and not case.overrides:  # a file-level problem is at the top level
            assert any(where == "" for where, _ in problems), (case, problems)
        _expect_refused_before_the_store(case, path, folder, problems)
        return "refused"
    assert not case.invalid, f"known-invalid mutation accepted: {case!r}"
    args = ["show", str(path), *sum((["--set", o] for o in case.overrides), [])]
    result = CliRunner().invoke(cli.main, args)
    assert result.exit_code == 0 and "Traceback" not in result.output, (case, result.output, result.exception)
    shown = yaml.safe_load(result.output.split("\n", 1)[1])
    assert shown == yaml.safe_load(yaml.safe_dump(recipe_with_defaults(recipe.resolved), sort_keys=False))
    again = load_recipe(path, [], installed.get, data=shown)  # ctk show's output is the same experiment
    assert recipe_with_defaults(again.resolved) == recipe_with_defaults(recipe.resolved), case
    return "accepted"


def test_the_recipes_to_mutate_are_found():
    """The cases draw from RECIPES, a glob: an empty or a short list (a moved folder, a pattern
    that no longer matches) would let every test here pass on nothing."""
    assert RECIPES, f"no recipe found under {ROOT}"
    assert ROOT / "vision" / "quickstart.yaml" in RECIPES
    assert {p.relative_to(ROOT).parts[0] for p in RECIPES} >= {"vision", "text", "rl", "toy"}
    assert all(isinstance(DATA[p], dict) for p in RECIPES)


@pytest.fixture
def fuzz_dir(workdir):
    return workdir


def _fuzz(case: Case, folder: Path) -> None:
    outcome = check_case(case, folder)
    event(f"{case.kind}: {outcome}")


@settings(
    max_examples=DEFAULT_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=cases())
def test_mutated_recipes(fuzz_dir, case):
    _fuzz(case, fuzz_dir)


@pytest.mark.soak
@settings(
    max_examples=SLOW_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=cases())
def test_mutated_recipes_many(fuzz_dir, case):
    _fuzz(case, fuzz_dir)


FILE_ATTACKS = {  # name: (the mutated file from a recipe mapping, the key it aims at or None)
    "empty": (lambda data: b"", None),
    "non_utf8": (lambda data: b"\xff\xfe" + _dump(data), None),
    "duplicated_domain": (lambda data: _dump(data) + f"domain: {data['domain']}\n".encode(), "domain"),
    "deep_nesting": (lambda data: _dump({**data, "description": PLACEHOLDER}, "[" * 100_000 + "]" * 100_000), None),
    "alias_bomb": (lambda data: _dump({**data, "description": PLACEHOLDER}, BOMB), "description"),
    "python_tag": (lambda data: _dump({**data, "name": PLACEHOLDER}, "!!python/object/apply:os.system [echo]"), None),
    "top_level_list": (lambda data: yaml.safe_dump([data]).encode(), None),
}


@pytest.mark.parametrize("attack", sorted(FILE_ATTACKS))
def test_every_recipe_refuses_each_file_level_attack(fuzz_dir, attack):
    make, path = FILE_ATTACKS[attack]
    for recipe in RECIPES:
        content = make(yaml.safe_load(yaml.safe_dump(DATA[recipe])))
        assert check_case(Case(recipe, attack, path, content, True), fuzz_dir) == "refused"
