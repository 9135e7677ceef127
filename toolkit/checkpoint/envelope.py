"""What a ctk checkpoint holds around a trainer's state, and the check that a resume continues
the same experiment.

A checkpoint file is ``{"format", "recipe", "recipe_hash", "run_id", "trainer"}``: the format
version (:data:`FORMAT`), the resolved recipe that wrote it and its hash, the tracking run and
``trainer``, whatever the trainer's ``state_dict()`` returned (data only: see
:mod:`toolkit.checkpoint.files`). :func:`write` seals and writes one, :func:`read` reads one and
checks it belongs to the recipe being resumed: the keys in :data:`RESUME_FREE_KEYS` may differ
(where and how the run executes, how it is named and tracked, how its input pipeline reads
files), the ``budget`` keys with ``extend``, nothing else. :func:`read` is :func:`unseal` (the file and its format) then
:func:`check_recipe` (the recipe); a resume does the two apart (``toolkit.checkpoint.find``
picks the newest file that unseals; the run path checks it against the recipe it decided).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolkit.checkpoint.files import CheckpointError, CorruptCheckpoint, load, save
from toolkit.recipe.model import flatten

__all__ = [
    "FORMAT",
    "RESUME_FREE_KEYS",
    "RecipeMismatch",
    "recipe_hash",
    "recipe_differences",
    "seal",
    "write",
    "unseal",
    "check_recipe",
    "read",
]

# The one format this ctk writes and reads. A change to what the envelope or a trainer's state
# holds that older code cannot read needs a new number; :func:`read` refuses other numbers by name.
FORMAT = "ctk-checkpoint/1"
# Top-level recipe keys a resume may change: where, how precisely, compiled or not, and over how
# many ranks and resources it runs, how it is named and tracked. Everything else must match the checkpoint's recipe.
# A dotted key frees that key and what lies under it: how a domain's input pipeline reads files
# (vision's decoding worker processes, their prefetch and the share of unreadable files a run
# accepts: a seeded redraw replaces each, whatever the limit) changes nothing that is trained.
RESUME_FREE_KEYS = (
    "device",
    "precision",
    "compile",
    "distributed",
    "resources",
    "tracking",
    "name",
    "description",
    "paper",
    "data.loader.workers",
    "data.loader.prefetch",
    "data.loader.bad_image_limit",
)


class RecipeMismatch(CheckpointError):
    """A checkpoint belongs to another recipe; ``keys`` lists the differing recipe keys."""

    def __init__(self, path: Path, keys: list[str]) -> None:
        self.keys = keys
        shown = ", ".join(keys[:12]) + (f" and {len(keys) - 12} more" if len(keys) > 12 else "")
        hint = (
            " (a longer budget needs --extend)"
            if all(k.startswith("budget.") for k in keys)
            else " (resume with the recipe and --set values of the original run)"
        )
        super().__init__(f"{path} was written by a different recipe: {shown} differ{hint}")


def recipe_hash(resolved: Mapping[str, Any]) -> str:
    """sha256 of the resolved recipe (canonical JSON, keys sorted)."""
    text = json.dumps(resolved, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def recipe_differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Flattened recipe keys whose values differ (``RESUME_FREE_KEYS`` ignored)."""
    a = {k: v for k, v in flatten(dict(old)).items() if not _free(k)}
    b = {k: v for k, v in flatten(dict(new)).items() if not _free(k)}
    return sorted(k for k in a.keys() | b.keys() if _norm(a.get(k)) != _norm(b.get(k)))


def _free(key: str) -> bool:
    """Whether the flattened ``key`` is, or lies under, one of :data:`RESUME_FREE_KEYS`."""
    return any(key == free or key.startswith(free + ".") for free in RESUME_FREE_KEYS)


def _norm(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def seal(trainer_state: Mapping[str, Any], resolved: Mapping[str, Any], run_id: str | None) -> dict[str, Any]:
    """The checkpoint content: a trainer's state in its envelope."""
    return {
        "format": FORMAT,
        "recipe": dict(resolved),
        "recipe_hash": recipe_hash(resolved),
        "run_id": run_id,
        "trainer": trainer_state,
    }


def write(
    path: str | Path,
    trainer_state: Mapping[str, Any],
    resolved: Mapping[str, Any],
    run_id: str | None = None,
    keep: int | None = None,
) -> Path:
    """Write a trainer's state, sealed, to ``path`` (atomically; ``keep``: the newest ``keep``
    checkpoints of the folder stay, see :func:`toolkit.checkpoint.files.save`)."""
    return save(path, seal(trainer_state, resolved, run_id), keep=keep)


def unseal(path: str | Path) -> dict[str, Any]:
    """A ctk checkpoint's content, read: raises ``CheckpointError`` (naming the file) for a file
    that is unsafe, damaged, not ctk's or of another format version."""
    path = Path(path)
    saved = load(path)
    found = saved.get("format")
    if isinstance(found, str) and found.startswith("ctk-checkpoint/") and found != FORMAT:
        raise CheckpointError(
            f"{path}: checkpoint format {found!r}; this ctk reads {FORMAT!r} only "
            "(resume it with the ctk version that wrote it)"
        )
    if found != FORMAT or "trainer" not in saved or not isinstance(saved.get("recipe"), dict):
        raise CorruptCheckpoint(f"{path}: not a ctk checkpoint (format {found!r}, expected {FORMAT!r})")
    return saved


def check_recipe(saved: Mapping[str, Any], resolved: Mapping[str, Any], path: str | Path, extend: bool = False) -> None:
    """Raise ``RecipeMismatch`` (naming the keys) when the checkpoint ``saved`` (read from
    ``path``) belongs to another recipe than ``resolved``. ``extend`` lets the ``budget`` keys
    differ (a longer run continues a shorter one)."""
    differing = recipe_differences(saved.get("recipe") or {}, resolved)
    if extend:
        differing = [k for k in differing if not k.startswith("budget.")]
    if differing:
        raise RecipeMismatch(Path(path), differing)


def read(path: str | Path, resolved: Mapping[str, Any], extend: bool = False) -> dict[str, Any]:
    """Read a ctk checkpoint and check it belongs to the recipe ``resolved`` (:func:`unseal`,
    then :func:`check_recipe`)."""
    saved = unseal(path)
    check_recipe(saved, resolved, path, extend)
    return saved
