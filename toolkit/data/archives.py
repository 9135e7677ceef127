"""Opening the fetched package files safely: every member of a tar, zip or Debian (ar) archive
is checked before anything is read or extracted, so a tampered archive cannot write outside the
folder it is unpacked into.

A member is refused, with :class:`UnsafeArchiveError` naming the archive, the member and the
rule, when

- its name is absolute (``/etc/passwd``, ``C:\\x``) or has a ``..`` part;
- it is a device, a FIFO or another special file (tar);
- it is a link whose target is absolute or resolves outside the archive's root (tar), or any
  link at all (zip: Python's ``zipfile`` would write the link target as a regular file).

Extraction then also goes through tarfile's ``filter="data"`` (PEP 706), which applies the same
rules a second time and drops permission bits such as set-uid. The whole archive is refused on
the first bad member: a package that needs one is not one the catalogue should pin.

Debian packages are read here rather than with ``dpkg -x``: a ``.deb`` is an ``ar`` archive
(``debian-binary``, ``control.tar.*``, ``data.tar.*``; ``deb(5)``) whose ``data.tar`` goes
through the tar checks above.
"""

from __future__ import annotations

import io
import posixpath
import stat
import tarfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .fetchers import FetchError

__all__ = [
    "UnsafeArchiveError",
    "check_name",
    "open_tar",
    "open_zip",
    "extract_tar",
    "unpack_deb",
    "only",
    "write_file",
]


class UnsafeArchiveError(FetchError):
    """An archive member would land (or point) outside the folder it is unpacked into."""


def check_name(name: str, archive: str) -> str:
    """``name`` as a relative POSIX path inside the archive; raise for absolute or ``..`` names."""
    clean = name.replace("\\", "/")
    if clean.startswith("/") or (len(clean) > 1 and clean[1] == ":"):
        raise UnsafeArchiveError(
            f"{archive}: member {name!r} has an absolute path; expected a path relative to the archive's root"
        )
    if ".." in clean.split("/"):
        raise UnsafeArchiveError(
            f"{archive}: member {name!r} has a '..' part; expected a path that stays inside the archive's root"
        )
    return clean


def _check_link(member: tarfile.TarInfo, archive: str) -> None:
    target = member.linkname.replace("\\", "/")
    if target.startswith("/"):
        raise UnsafeArchiveError(
            f"{archive}: link {member.name!r} -> {member.linkname!r} points "
            "to an absolute path; expected a target inside the archive"
        )
    # A symbolic link resolves from its own folder, a hard link from the archive's root.
    base = posixpath.dirname(member.name) if member.issym() else ""
    resolved = posixpath.normpath(posixpath.join(base, target))
    if resolved == ".." or resolved.startswith("../"):
        raise UnsafeArchiveError(
            f"{archive}: link {member.name!r} -> {member.linkname!r} leads out of the folder it is unpacked into"
        )


def _check_tar(archive: tarfile.TarFile, label: str) -> None:
    for member in archive.getmembers():
        check_name(member.name, label)
        if member.issym() or member.islnk():
            _check_link(member, label)
        elif not (member.isfile() or member.isdir()):
            raise UnsafeArchiveError(
                f"{label}: member {member.name!r} is a device, FIFO or other "
                "special file; expected regular files, folders and links"
            )


@contextmanager
def open_tar(
    path: Path | None = None, *, data: bytes | None = None, label: str | None = None
) -> Iterator[tarfile.TarFile]:
    """A tar archive (any compression tarfile reads) whose every member passed the checks."""
    label = label or (path.name if path is not None else "archive")
    source = {"name": str(path)} if path is not None else {"fileobj": io.BytesIO(data or b"")}
    try:
        archive = tarfile.open(mode="r:*", **source)
    except tarfile.TarError as err:
        raise FetchError(f"{label}: not a readable tar archive ({err})") from err
    with archive:
        _check_tar(archive, label)
        yield archive


@contextmanager
def open_zip(path: Path) -> Iterator[zipfile.ZipFile]:
    """A zip archive (a wheel) whose every member passed the checks."""
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            check_name(info.filename, path.name)
            if stat.S_ISLNK(info.external_attr >> 16):
                raise UnsafeArchiveError(
                    f"{path.name}: member {info.filename!r} is a symbolic link; expected regular files and folders"
                )
        yield archive


def extract_tar(archive: tarfile.TarFile, dest: Path) -> Path:
    """Extract an archive from :func:`open_tar` under ``dest`` with tarfile's ``data`` filter."""
    dest.mkdir(parents=True, exist_ok=True)
    try:
        archive.extractall(dest, filter="data")
    except tarfile.FilterError as err:  # the checks above should have caught it first
        raise UnsafeArchiveError(f"{archive.name}: {err}") from err
    return dest


def _ar_members(deb: Path) -> dict[str, bytes]:
    """The members of an ``ar`` archive by name (``deb(5)``: 8-byte magic, 60-byte headers)."""
    blob = deb.read_bytes()
    if not blob.startswith(b"!<arch>\n"):
        raise FetchError(f"{deb.name}: not a Debian package (no '!<arch>' header)")
    members, pos = {}, 8
    while pos + 60 <= len(blob):
        header = blob[pos : pos + 60]
        if header[58:60] != b"`\n":
            raise FetchError(f"{deb.name}: corrupt ar header at byte {pos}")
        name = header[:16].decode("ascii").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip())
        members[check_name(name, deb.name)] = blob[pos + 60 : pos + 60 + size]
        pos += 60 + size + (size % 2)  # members are padded to an even offset
    return members


def unpack_deb(deb: Path, dest: Path) -> Path:
    """The files of a Debian package under ``dest`` (like ``dpkg -x``, nothing installed)."""
    members = _ar_members(deb)
    data = [name for name in members if name.startswith("data.tar")]
    if len(data) != 1:
        raise FetchError(f"{deb.name}: expected one data.tar member, found {sorted(members)}")
    if data[0].endswith(".zst"):
        raise FetchError(
            f"{deb.name}: data.tar is zstd-compressed, which Python's tarfile cannot read; expected .xz, .gz or .bz2"
        )
    with open_tar(data=members[data[0]], label=f"{deb.name}:{data[0]}") as archive:
        return extract_tar(archive, dest)


def only(files: dict[str, Path], suffix: str) -> Path:
    """The single fetched file whose name ends with ``suffix`` (a builder's input)."""
    matches = [p for name, p in files.items() if name.endswith(suffix)]
    if len(matches) != 1:
        raise FetchError(f"builder expected exactly one fetched *{suffix} file, got {sorted(files)}")
    return matches[0]


def write_file(data: bytes, target: Path) -> None:
    """Write ``data`` to ``target``, creating its folder."""
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
