"""The catalogue of offline datasets: what each one is, where it comes from (pinned package
files with the sha256 measured when they were added), its licence, the digest of the folder the
provider builds from it, and the datasets a user places by hand.

A :class:`Catalogue` is a value: each domain declares its own (``domains/vision/catalogue.py``,
``domains/text/catalogue.py``), the command line joins the installed domains' catalogues
(``domains.installed.catalogue``) and hands the result to the functions of :mod:`.root`. This
package names no dataset and keeps no catalogue of its own.

Every entry is data, not code: the builder that places the files is named by ``Source.builder``
and given beside the entries. A dataset may list several sources; they are tried in order and
each must produce the same layout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "Artifact",
    "Source",
    "Dataset",
    "Builder",
    "Catalogue",
    "deb",
    "wheel",
    "sdist",
    "npm",
]

# build(files, out, work): ``files`` maps each fetched file name to its verified path, ``out`` is
# the dataset folder to create (absent yet), ``work`` a scratch folder deleted afterwards.
Builder = Callable[[dict[str, Path], Path, Path], None]


@dataclass(frozen=True)
class Artifact:
    """One pinned file from a package registry."""

    registry: str  # "debian" | "pypi" | "npm"
    package: str
    version: str
    filename: str  # the file the registry's client saves
    sha256: str
    size: int  # bytes
    kind: str = ""  # PyPI only: "wheel" or "sdist"

    def describe(self) -> str:
        where = {"debian": "Debian", "pypi": "PyPI", "npm": "npm"}[self.registry]
        kind = f" {self.kind}" if self.kind else ""
        return f"{where} {self.package} {self.version}{kind}"


@dataclass(frozen=True)
class Source:
    """A way to build a dataset: the artifacts to fetch, the builder that places their files,
    and what the result must be (``tree_sha256``: sha256 over ``"relpath\\tsha256\\n"`` lines of
    the produced files in sorted order, marker excluded)."""

    artifacts: tuple[Artifact, ...]
    builder: str
    tree_sha256: str
    files: int
    installed_bytes: int

    def describe(self) -> str:
        return " + ".join(a.describe() for a in self.artifacts)


@dataclass(frozen=True)
class Dataset:
    """A catalogue entry. ``folder`` is relative to the data root."""

    name: str
    description: str
    licence: str
    folder: str
    sources: tuple[Source, ...]
    default: bool

    @property
    def source(self) -> str:
        return " | ".join(s.describe() for s in self.sources)

    @property
    def download_bytes(self) -> int:
        return sum(a.size for a in self.sources[0].artifacts)

    @property
    def installed_bytes(self) -> int:
        return self.sources[0].installed_bytes


def deb(package: str, version: str, sha256: str, size: int, arch: str = "all") -> Artifact:
    """A Debian package file (``apt-get download`` names it ``<package>_<version>_<arch>.deb``)."""
    filename = f"{package}_{version.split(':')[-1]}_{arch}.deb"
    return Artifact("debian", package, version, filename, sha256, size)


def wheel(package: str, version: str, filename: str, sha256: str, size: int) -> Artifact:
    return Artifact("pypi", package, version, filename, sha256, size, kind="wheel")


def sdist(package: str, version: str, filename: str, sha256: str, size: int) -> Artifact:
    return Artifact("pypi", package, version, filename, sha256, size, kind="sdist")


def npm(package: str, version: str, sha256: str, size: int) -> Artifact:
    """An npm tarball (``npm pack`` names it ``<scope>-<name>-<version>.tgz``)."""
    filename = f"{package.lstrip('@').replace('/', '-')}-{version}.tgz"
    return Artifact("npm", package, version, filename, sha256, size)


@dataclass(frozen=True)
class Catalogue:
    """Datasets served offline, the builders their sources name, and the datasets no package
    provides that a user places by hand (``placed``: name -> the folder names looked for under
    the data root, first found wins, else the first is where to place it).

    Raises ``ValueError`` for two entries under one name or a source naming a builder it lacks."""

    datasets: tuple[Dataset, ...] = ()
    builders: Mapping[str, Builder] = field(default_factory=dict)
    placed: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "datasets", tuple(self.datasets))
        seen: set[str] = set()
        for entry in self.datasets:
            if entry.name in seen:
                raise ValueError(f"dataset name {entry.name!r} is given twice; expected one entry a name")
            seen.add(entry.name)
            for source in entry.sources:
                if source.builder not in self.builders:
                    raise ValueError(
                        f"dataset {entry.name!r}: source builder {source.builder!r} is not given; "
                        f"expected one of: {', '.join(sorted(self.builders)) or 'none'}"
                    )

    def names(self) -> tuple[str, ...]:
        """Every dataset's name, in the order given."""
        return tuple(entry.name for entry in self.datasets)

    def default_names(self) -> tuple[str, ...]:
        """The datasets the default recipes and tests need, in the order given."""
        return tuple(entry.name for entry in self.datasets if entry.default)

    def entry(self, name: str) -> Dataset:
        """The entry called ``name``; ``ValueError`` listing the known names otherwise."""
        for entry in self.datasets:
            if entry.name == name:
                return entry
        known = ", ".join(sorted(self.names())) or "none (no installed domain declares a dataset)"
        raise ValueError(f"name must be one of {known} (or 'default'/'all' for fetch), got {name!r}")

    def expand(self, names: Iterable[str]) -> list[str]:
        """Expand ``default`` and ``all``, check every name, keep the order, drop repeats."""
        out: list[str] = []
        for name in names:
            group = self.default_names() if name == "default" else self.names() if name == "all" else (name,)
            for item in group:
                self.entry(item)
                if item not in out:
                    out.append(item)
        return out

    @classmethod
    def joined(cls, catalogues: Iterable[Catalogue]) -> Catalogue:
        """One catalogue of several (the installed domains'). The same entry or builder given
        twice is kept once; a different one under a taken name is a ``ValueError`` naming it."""
        datasets: dict[str, Dataset] = {}
        builders: dict[str, Builder] = {}
        placed: dict[str, tuple[str, ...]] = {}
        for catalogue in catalogues:
            for name, build in catalogue.builders.items():
                if builders.setdefault(name, build) is not build:
                    raise ValueError(
                        f"builder name {name!r} is given by {builders[name].__module__} and by "
                        f"{build.__module__}; expected one builder a name"
                    )
            for entry in catalogue.datasets:
                if datasets.setdefault(entry.name, entry) != entry:
                    raise ValueError(f"dataset name {entry.name!r} is given twice with different entries")
            for name, folders in catalogue.placed.items():
                if placed.setdefault(name, tuple(folders)) != tuple(folders):
                    raise ValueError(f"placed dataset {name!r} is given twice with different folders")
        return cls(tuple(datasets.values()), builders, placed)
