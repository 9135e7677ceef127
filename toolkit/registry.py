"""Name -> component registries (losses, selectors, regularizers, schedules, ...).

Recipes name components by string (``loss: cacr``); a registry maps the name to the class
and keeps a one-line description for ``ctk list``.

``ctk list`` reads the built-in registrations from the source (:func:`declared`) instead of
importing the components, which would import torch: ``@LOSSES.register("name", description=...)``
above a class (its docstring's first paragraph when no description is given), or a module's own
decorator that calls ``SELECTORS.add(name, cls, description=...)``. tests/core/test_registry.py
checks that this reading equals the imported registries.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

T = TypeVar("T")
LISTED = {
    "losses": "LOSSES",
    "selectors": "SELECTORS",
    "regularizers": "REGULARIZERS",
    "selector-schedules": "SELECTOR_SCHEDULES",
}


def summary_line(doc: str | None) -> str:
    """A docstring's first paragraph on one line (a registered component's default description)."""
    return " ".join(inspect.cleandoc(doc or "").strip().split("\n\n")[0].split())


@dataclass(frozen=True)
class Entry(Generic[T]):
    name: str
    obj: T
    description: str
    origin: str = "built-in"


class Registry(Generic[T]):
    """A named collection of components of one kind (``kind`` is used in error messages)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}

    def register(self, name: str, *, description: str | None = None, origin: str = "built-in") -> Callable[[T], T]:
        def decorator(obj: T) -> T:
            self.add(name, obj, description=description, origin=origin)
            return obj

        return decorator

    def add(self, name: str, obj: T, *, description: str | None = None, origin: str = "built-in") -> None:
        if name in self._entries and self._entries[name].obj is not obj:
            other = self._entries[name].origin
            raise ValueError(f"{self.kind} name {name!r} is claimed twice: by {other} and by {origin}")
        if description is None:
            description = summary_line(inspect.getdoc(obj))
        self._entries[name] = Entry(name, obj, description, origin)

    def get(self, name: str) -> T:
        try:
            return self._entries[name].obj
        except KeyError:
            known = ", ".join(sorted(self._entries)) or "(none registered)"
            raise KeyError(f"unknown {self.kind} {name!r}; expected one of: {known}") from None

    def entry(self, name: str) -> Entry[T]:
        self.get(name)
        return self._entries[name]

    def name_of(self, obj: object) -> str | None:
        """The name ``obj`` is registered under (the first, if under several), or ``None``."""
        return next((e.name for e in self._entries.values() if e.obj is obj), None)

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Entry[T]]:
        return iter(sorted(self._entries.values(), key=lambda e: e.name))

    def __len__(self) -> int:
        return len(self._entries)


def constructor_args(obj: Any) -> dict[str, inspect.Parameter]:
    """The keyword arguments a registered class (or function) accepts, in order."""
    target = obj.__init__ if inspect.isclass(obj) else obj
    params = list(inspect.signature(target).parameters.values())
    return {p.name: p for p in params if p.name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def declared(registry: str, package: Path = Path(__file__).parent) -> dict[str, str]:
    """name -> description of what the modules under ``package`` register in ``registry``
    (``"LOSSES"``, see :data:`LISTED`), read from their source: nothing is imported."""
    found: dict[str, str] = {}
    for path in sorted(package.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if registry not in text:
            continue
        tree = ast.parse(text, str(path))
        helpers = {
            f.name
            for f in tree.body
            if isinstance(f, ast.FunctionDef)
            and any(_registers(call, registry) for call in ast.walk(f) if isinstance(call, ast.Call))
        }
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for deco in cls.decorator_list:
                if isinstance(deco, ast.Call) and (
                    _registers(deco, registry) or (isinstance(deco.func, ast.Name) and deco.func.id in helpers)
                ):
                    name, description = _literal_args(deco)
                    found[name] = summary_line(ast.get_docstring(cls)) if description is None else description
    return found


def _registers(call: ast.Call, registry: str) -> bool:
    """``REGISTRY.register(...)`` or ``REGISTRY.add(...)``."""
    func = call.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr in ("register", "add")
        and isinstance(func.value, ast.Name)
        and func.value.id == registry
    )


def _literal_args(call: ast.Call) -> tuple[str, str | None]:
    """The name and description a registering decorator is given (first and second argument,
    or ``description=``)."""
    values = [*call.args, *(k.value for k in call.keywords if k.arg == "description")]
    name, *rest = (ast.literal_eval(v) for v in values[:2])
    return name, rest[0] if rest else None
