"""Where a run's checkpoints are, which one is the newest, and which one a resume continues.

A run writes its checkpoints in :func:`checkpoint_dir` of the working directory it runs in
(``$CTK_CHECKPOINTS`` or ``./checkpoints``, then the run id), and records that folder on its
tracking run (the tag :data:`DIR_TAG`, see :func:`folder_tags`) before the first file is
written. A run resumed from another working directory writes on in that directory's folder
(and the tag follows it). So a run's checkpoints are looked for in two folders: the one the run
recorded and this working directory's; :func:`find` answers the newest file of both.

Every caller asks here: ``ctk run --resume RUN_ID`` (:func:`for_resume`), a sweep deciding
whether a KILLED point resumes or restarts, and ``ctk runs`` listing the last checkpoint; they
pass the run's tags when they have the run, so the answer is the same from any working directory.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Mapping

from toolkit.checkpoint.envelope import read
from toolkit.checkpoint.files import CorruptCheckpoint

__all__ = ["DIR_TAG", "checkpoint_dir", "folder_tags", "latest", "folders", "candidates", "find", "for_resume"]

DIR_TAG = "ctk.checkpoint_dir"


def checkpoint_dir(run_id: str, root: str | Path | None = None) -> Path:
    """The folder this working directory gives a run's checkpoints: ``$CTK_CHECKPOINTS`` or
    ``./checkpoints``, per run (where a run started or resumed here writes)."""
    base = Path(root or os.environ.get("CTK_CHECKPOINTS", "checkpoints"))
    return base / run_id


def folder_tags(folder: str | Path) -> dict[str, str]:
    """The tag that records on a run where it writes its checkpoints (set before the first)."""
    return {DIR_TAG: str(Path(folder).resolve())}


def latest(folder: str | Path) -> Path | None:
    """The newest ``*.pt`` checkpoint in ``folder`` (by modification time), or None."""
    found = _files(Path(folder))
    return found[0] if found else None


def folders(run_id: str, tags: Mapping[str, str] | None = None) -> list[Path]:
    """The folders that may hold the checkpoints of run ``run_id``: the one its tags record
    (``tags``: the tracking run's tags, when the caller has the run), then this working
    directory's; each once."""
    out: list[Path] = []
    for folder in (Path(tags[DIR_TAG]) if tags and tags.get(DIR_TAG) else None, checkpoint_dir(run_id)):
        if folder is not None and not any(_same(folder, seen) for seen in out):
            out.append(folder)
    return out


def candidates(run_id: str, tags: Mapping[str, str] | None = None) -> list[Path]:
    """Every checkpoint of the run in :func:`folders`, newest first (by modification time)."""
    found = [p for folder in folders(run_id, tags) for p in _files(folder)]
    return sorted(found, key=lambda p: p.stat().st_mtime_ns, reverse=True)


def find(run_id: str, tags: Mapping[str, str] | None = None) -> Path | None:
    """The newest checkpoint of run ``run_id`` (see :func:`folders`), or None."""
    found = candidates(run_id, tags)
    return found[0] if found else None


def for_resume(resume: str, resolved: Mapping[str, Any], extend: bool = False,
               tags: Mapping[str, str] | None = None) -> tuple[str, Path, dict[str, Any]]:
    """(run id, checkpoint path, its checked content) of ``--resume RUN_ID | FILE``: a file as
    given (its folder named after the run), a run id's newest checkpoint that reads (a damaged
    newer one is reported and skipped). The content is checked against the recipe ``resolved``
    (:func:`toolkit.checkpoint.envelope.read`)."""
    path = Path(resume)
    if path.is_file():
        return path.parent.name, path, read(path, resolved, extend)
    found = candidates(resume, tags)
    if not found:
        where = " or ".join(str(f) for f in folders(resume, tags))
        raise FileNotFoundError(f"--resume {resume}: no checkpoint in {where} (and the store records no "
                                "other folder for it: give a checkpoint file)")
    for i, path in enumerate(found):
        try:
            return resume, path, read(path, resolved, extend)
        except CorruptCheckpoint as exc:
            if i == len(found) - 1:
                raise
            print(f"[ctk] warning: {exc}; trying the previous checkpoint", file=sys.stderr, flush=True)
    raise AssertionError("unreachable")


def _files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.glob("*.pt") if p.is_file()), key=lambda p: p.stat().st_mtime_ns,
                  reverse=True)


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return a == b
