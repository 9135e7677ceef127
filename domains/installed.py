"""Finding domains: the built-in ones and those installed packages declare in the
``ctk.domains`` entry-point group (``[project.entry-points."ctk.domains"] tabular =
"ctk_tabular:TabularDomain"``). Nothing in ``toolkit/``, ``cli.py`` or ``command_line/`` names a plugin.

Finding a domain imports nothing heavy: a domain's module (and torch with it) is imported when the
domain is loaded (:meth:`DomainSpec.load`, :func:`get`), so commands that need no domain start at once;
its datasets (:func:`catalogue`) are read from the module its entry names, without torch.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.data.catalogue import Catalogue
from toolkit.errors import CtkError

if TYPE_CHECKING:
    from domains.base import Domain

GROUP = "ctk.domains"
CATALOGUE = "CATALOGUE"  # the name a domain's entry module declares its datasets under (domains.base)
BUILTIN = {
    "vision": "domains.vision:VisionDomain",
    "text": "domains.text:TextDomain",
    "rl": "domains.rl:RLDomain",
    "toy": "domains.toy:ToyDomain",
}


class DomainError(CtkError):
    """A domain cannot be found or loaded; the message says which and why (exit status 1)."""


@dataclass(frozen=True)
class DomainSpec:
    name: str
    target: str  # "module:attribute"
    origin: str  # "built-in" or "<distribution> <version>"

    def load(self) -> type[Domain]:
        from domains.base import Domain

        module_name, _, attr = self.target.partition(":")
        try:
            obj: Any = importlib.import_module(module_name)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except Exception as exc:  # noqa: BLE001 - any import failure is reported the same way
            raise DomainError(
                f"domain {self.name!r} ({self.target}, {self.origin}) failed to import: {type(exc).__name__}: {exc}"
            ) from exc
        if not (isinstance(obj, type) and issubclass(obj, Domain)):
            raise DomainError(
                f"domain {self.name!r} ({self.target}, {self.origin}) is not a "
                f"domains.base.Domain subclass (got {obj!r})"
            )
        return obj

    def catalogue(self) -> Catalogue:
        """The offline datasets this domain declares (``domains.base``, "A domain's datasets"):
        the :data:`CATALOGUE` of the module its entry names, read without loading the domain class
        (no torch); a module that declares none: an empty catalogue."""
        module_name = self.target.partition(":")[0]
        try:
            found = getattr(importlib.import_module(module_name), CATALOGUE, None)
        except Exception as exc:  # noqa: BLE001 - any import failure is reported the same way
            raise DomainError(
                f"domain {self.name!r} ({self.target}, {self.origin}): its datasets failed to import: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if found is None:
            return Catalogue()
        if not isinstance(found, Catalogue):
            raise DomainError(
                f"domain {self.name!r} ({self.target}, {self.origin}): {module_name}.{CATALOGUE} is "
                f"{type(found).__name__}; expected a toolkit.data.Catalogue"
            )
        return found


def specs() -> dict[str, DomainSpec]:
    """Every known domain by name; two claims on one name are an error naming both."""
    found = {name: DomainSpec(name, target, "built-in") for name, target in BUILTIN.items()}
    for ep in entry_points(group=GROUP):
        dist = getattr(ep, "dist", None)
        origin = f"{dist.name} {dist.version}" if dist is not None else "an installed package"
        spec = DomainSpec(ep.name, ep.value, origin)
        if ep.name in found and found[ep.name].target != ep.value:
            other = found[ep.name]
            raise DomainError(
                f"domain name {ep.name!r} is claimed twice: by {other.origin} "
                f"({other.target}) and by {origin} ({ep.value})"
            )
        found[ep.name] = spec
    return found


def get(name: str) -> type[Domain]:
    """The domain class called ``name``."""
    known = specs()
    if name not in known:
        raise DomainError(f"unknown domain {name!r}; expected one of: {', '.join(sorted(known))}")
    return known[name].load()


def catalogue(broken: list[DomainError] | None = None) -> Catalogue:
    """Every installed domain's datasets, one catalogue (built-in domains first, then plug-ins).
    A domain whose datasets do not load is a DomainError, or, when ``broken`` is a list, is left
    out and its error added there (a command names it and goes on); two domains giving different
    entries under one name is a DomainError naming it."""
    parts = []
    for spec in specs().values():
        try:
            parts.append(spec.catalogue())
        except DomainError as exc:
            if broken is None:
                raise
            broken.append(exc)
    try:
        return Catalogue.joined(parts)
    except ValueError as exc:
        raise DomainError(f"the installed domains' datasets clash: {exc}") from None


def describe() -> list[tuple[str, DomainSpec, str]]:
    """(name, spec, description) of every domain, by name; a domain that does not load is
    described by why (``ctk list domains``: this loads every domain, torch included)."""
    out = []
    for name, spec in sorted(specs().items()):
        try:
            desc = spec.load().description
        except DomainError as exc:
            desc = f"(unavailable: {exc})"
        out.append((name, spec, desc))
    return out


def recipe_roots(builtin: Path) -> list[Path]:
    """The built-in recipes folder plus the folders plugin domains ship (loading the plugins
    only: the built-in domains' recipes are all under ``builtin``)."""
    roots = [builtin]
    for spec in specs().values():
        if spec.origin != "built-in":
            try:
                cls = spec.load()
            except DomainError:
                continue
            roots += [Path(d) for d in cls.recipe_dirs]
    return roots
