"""Archives stay in their folder: a tar, zip or Debian package with an absolute member, a '..'
member or a link out of the folder is refused before anything is written, by the archive
helpers and through the whole fetch pipeline."""

from __future__ import annotations

import hashlib
import io
import shutil
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from toolkit.data import Artifact, Catalogue, Dataset, FetchError, Source, fetch
from toolkit.data import root as data_folder
from toolkit.data.archives import UnsafeArchiveError, extract_tar, open_tar, open_zip, unpack_deb


def _tar(members: list[tuple[str, bytes | None, str | None]]) -> bytes:
    """A .tar.gz from (name, data, link target): data for files, a target for symlinks."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data, target in members:
            info = tarfile.TarInfo(name)
            if target is not None:
                info.type, info.linkname = tarfile.SYMTYPE, target
                archive.addfile(info)
            else:
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _ar(members: dict[str, bytes]) -> bytes:
    """An ar archive (the .deb container): magic, then 60-byte headers (deb(5))."""
    out = b"!<arch>\n"
    for name, data in members.items():
        header = (f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}").encode() + b"`\n"
        out += header + data + (b"\n" if len(data) % 2 else b"")
    return out


def _files_under(path: Path) -> set[str]:
    return {p.relative_to(path).as_posix() for p in path.rglob("*")}


GOOD = ("pkg/ok.txt", b"fine\n", None)
BAD_TAR_MEMBERS = {
    "absolute": ("/tmp/ctk-escape-abs.txt", b"x", None),
    "dotdot": ("pkg/../../escape.txt", b"x", None),
    "symlink": ("pkg/link", None, "../../outside"),
    "absolute symlink": ("pkg/etc", None, "/etc"),
}


@pytest.mark.parametrize("kind", sorted(BAD_TAR_MEMBERS))
def test_a_bad_tar_member_refuses_the_whole_archive(tmp_path, kind):
    bad = BAD_TAR_MEMBERS[kind]
    path = tmp_path / "dl" / "pkg.tgz"
    path.parent.mkdir()
    path.write_bytes(_tar([GOOD, bad]))
    dest = tmp_path / "box" / "out"
    before = _files_under(tmp_path)
    with pytest.raises(UnsafeArchiveError, match=f"pkg.tgz: .*{bad[0]!r}"):
        with open_tar(path) as archive:
            extract_tar(archive, dest)
    assert _files_under(tmp_path) == before  # nothing written, inside or out
    assert not Path("/tmp/ctk-escape-abs.txt").exists()


def test_a_clean_tar_with_an_inner_link_extracts(tmp_path):
    path = tmp_path / "pkg.tgz"
    path.write_bytes(_tar([GOOD, ("pkg/same", None, "ok.txt"), ("pkg/sub/up", None, "../ok.txt")]))
    with open_tar(path) as archive:
        extract_tar(archive, tmp_path / "out")
    assert (tmp_path / "out/pkg/ok.txt").read_bytes() == b"fine\n"
    assert (tmp_path / "out/pkg/sub/up").read_bytes() == b"fine\n"


def test_tar_devices_are_refused(tmp_path):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo("pkg/null")
        info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
        archive.addfile(info)
    with pytest.raises(UnsafeArchiveError, match="device"):
        with open_tar(data=buffer.getvalue(), label="dev.tar"):
            pass


@pytest.mark.parametrize("name", ["/abs.txt", "a/../../b.txt", "C:\\windows.txt"])
def test_zip_members_outside_are_refused(tmp_path, name):
    path = tmp_path / "pkg.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("pkg/ok.txt", "fine")
        z.writestr(name, "x")
    with pytest.raises(UnsafeArchiveError, match="pkg.whl: member"):
        with open_zip(path):
            pass


def test_zip_symlinks_are_refused(tmp_path):
    path = tmp_path / "pkg.whl"
    with zipfile.ZipFile(path, "w") as z:
        info = zipfile.ZipInfo("pkg/link")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        z.writestr(info, "../../etc/passwd")
    with pytest.raises(UnsafeArchiveError, match="symbolic link"):
        with open_zip(path):
            pass


def _deb(data_tar: bytes) -> bytes:
    return _ar(
        {"debian-binary": b"2.0\n", "control.tar.gz": _tar([("./control", b"x", None)]), "data.tar.gz": data_tar}
    )


def test_deb_data_is_checked_like_any_tar(tmp_path):
    good = tmp_path / "good.deb"
    good.write_bytes(_deb(_tar([("./usr/share/x/ok.txt", b"fine\n", None)])))
    assert (unpack_deb(good, tmp_path / "g") / "usr/share/x/ok.txt").read_bytes() == b"fine\n"
    bad = tmp_path / "bad.deb"
    bad.write_bytes(_deb(_tar([("./usr/../../../escape.txt", b"x", None)])))
    with pytest.raises(UnsafeArchiveError, match=r"bad.deb:data.tar.gz: member .*'\.\.'"):
        unpack_deb(bad, tmp_path / "b")
    assert not (tmp_path / "b").exists() and not (tmp_path.parent / "escape.txt").exists()


def test_fetch_refuses_a_tampered_package_and_writes_nothing_outside(monkeypatch, tmp_path):
    """Through the pipeline: the pinned digest matches (a tampered upload pinned by mistake),
    the builder extracts it, and the check still refuses it with nothing left anywhere."""
    blob = _tar([GOOD, ("pkg/../../../../escape.txt", b"x", None), ("pkg/link", None, "/etc")])
    registry = tmp_path / "registry"
    registry.mkdir()
    (registry / "evil-1.0.tgz").write_bytes(blob)
    artifact = Artifact("npm", "evil", "1.0", "evil-1.0.tgz", hashlib.sha256(blob).hexdigest(), len(blob))
    source = Source((artifact,), "evil", "0" * 64, 1, 5)

    def fake_download(art, dest, cache):
        dest.mkdir(parents=True, exist_ok=True)
        return Path(shutil.copyfile(registry / art.filename, dest / art.filename))

    def build(files, out, work):
        with open_tar(files["evil-1.0.tgz"]) as archive:
            extract_tar(archive, out)

    catalogue = Catalogue((Dataset("evil", "x", "none", "evil", (source,), False),), {"evil": build})
    monkeypatch.setattr(data_folder, "download", fake_download)
    root = tmp_path / "deep" / "er" / "root"
    before = _files_under(tmp_path)
    with pytest.raises(FetchError, match="evil-1.0.tgz: member 'pkg/../../../../escape.txt'"):
        fetch(catalogue, "evil", root)
    after = _files_under(tmp_path) - before
    # only the provider's own bookkeeping folders remain: no dataset, no escaped file
    assert all(
        p.split("/")[-1] in {".tmp", ".locks", "evil.lock"} or p in {"deep", "deep/er", "deep/er/root"} for p in after
    ), after
    assert list((root / ".tmp").iterdir()) == []
