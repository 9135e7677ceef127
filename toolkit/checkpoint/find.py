"""Where a run's checkpoints are, which one is the newest, and which one a resume continues.

A run writes its checkpoints in :func:`checkpoint_dir` of the working directory it runs in
(``$CTK_CHECKPOINTS`` or ``./checkpoints``, then the run id), and records that folder on its
tracking run (the tag :data:`DIR_TAG`, see :func:`folder_tags`) before the first file is
written. A run resumed from another working directory writes on in that directory's folder
(and the tag follows it). So a run's checkpoints are looked for in two folders: the one the run
recorded and this working directory's; :func:`find` answers the newest file of both.

Every caller asks here: ``ctk run --resume RUN_ID | FILE`` (:func:`resume_point`: the stored
run, the checkpoint and its content, in one answer), a sweep deciding whether a KILLED point
resumes or restarts, and ``ctk runs`` listing the last checkpoint; they pass the run's tags (or
the way to fetch the run) when they have the store, so the answer is the same from any working
directory. One rule for a checkpoint that does not read (damaged, refused, another format): it
is named in a warning and the next newest is taken (:func:`newest_readable`); the last one's
error stops.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.checkpoint.envelope import unseal
from toolkit.checkpoint.files import CheckpointError

__all__ = [
    "DIR_TAG",
    "ResumePoint",
    "checkpoint_dir",
    "folder_tags",
    "latest",
    "folders",
    "candidates",
    "find",
    "newest_readable",
    "resume_point",
]

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


def newest_readable(found: list[Path]) -> tuple[Path, dict[str, Any]]:
    """The first of ``found`` (newest first) that reads as a ctk checkpoint, and its content. One
    that does not (any ``CheckpointError``: damaged, refused, another format version) is named in
    a warning and the next is taken; the last one's error is raised."""
    for i, path in enumerate(found):
        try:
            return path, unseal(path)
        except CheckpointError as exc:
            if i == len(found) - 1:
                raise
            print(f"[ctk] warning: {exc}; trying the previous checkpoint", file=sys.stderr, flush=True)
    raise FileNotFoundError("no checkpoint to read")


@dataclass(frozen=True)
class ResumePoint:
    """What ``--resume RUN_ID | FILE`` continues, found once (:func:`resume_point`)."""

    run_id: str  # the run it continues (the checkpoint's own; else the folder's or the argument)
    path: Path  # the checkpoint: the newest that reads
    saved: Mapping[str, Any]  # its content; the recipe check is the caller's (envelope.check_recipe)
    run: Any = None  # the run as the store has it (None: no store, or one that does not know it)
    source: str = ""  # where its recipe came from: the run's ctk.recipe tag, else the file

    @property
    def recipe(self) -> dict[str, Any]:
        """The resolved recipe that wrote the checkpoint (overrides and precision included)."""
        return dict(self.saved["recipe"])


def resume_point(resume: str, stored_run: Callable[[str], Any] | None = None) -> ResumePoint:
    """The checkpoint ``--resume RUN_ID | FILE`` continues, its content and its stored run.

    A file is taken as given (its folder is named after the run). A run id: ``stored_run(run_id)``
    (the caller's look-up in its tracking store, None when it has none; this room opens no
    store) gives the run, whose tags name the folder it wrote in (:func:`folders`); of its
    checkpoints, newest first, the first that reads (:func:`newest_readable`). When the
    checkpoint names another run than the one looked up, that run is looked up."""
    lookup = stored_run or (lambda run_id: None)
    given = Path(resume)
    run = None if given.is_file() else lookup(resume)
    tags = run.data.tags if run is not None else None
    found = [given] if given.is_file() else candidates(resume, tags)
    if not found:
        where = " or ".join(str(f) for f in folders(resume, tags))
        raise FileNotFoundError(
            f"--resume {resume}: no checkpoint in {where} (give the checkpoint file, "
            "or the recipe and --set values of the run)"
        )
    path, saved = newest_readable(found)
    run_id = saved.get("run_id") or (given.parent.name if given.is_file() else resume)
    if given.is_file() or run_id != resume:
        run = lookup(run_id)
    return ResumePoint(run_id, path, saved, run, (tags or {}).get("ctk.recipe") or str(path))


def _files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.glob("*.pt") if p.is_file()), key=lambda p: p.stat().st_mtime_ns, reverse=True)


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return a == b
