"""Name -> component registries (losses, selectors, regularizers, schedules, ...).

Recipes name components by string (``loss: cacr``); a registry maps the name to the class
and keeps a one-line description for ``ctk list``.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Generic, Iterator, TypeVar

T = TypeVar("T")


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

    def register(self, name: str, *, description: str | None = None,
                 origin: str = "built-in") -> Callable[[T], T]:
        def decorator(obj: T) -> T:
            self.add(name, obj, description=description, origin=origin)
            return obj
        return decorator

    def add(self, name: str, obj: T, *, description: str | None = None,
            origin: str = "built-in") -> None:
        if name in self._entries and self._entries[name].obj is not obj:
            other = self._entries[name].origin
            raise ValueError(f"{self.kind} name {name!r} is claimed twice: by {other} and by {origin}")
        if description is None:
            doc = inspect.getdoc(obj) or ""
            description = doc.strip().splitlines()[0] if doc.strip() else ""
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
    return {p.name: p for p in params
            if p.name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
