"""Checkpoints: one room for their format, their files and finding them. Trainers only supply
``state_dict`` / ``load_state_dict``; everything around that is here.

``files``     data-only files: atomic writes, ``weights_only`` reads, random states
``envelope``  the format version, the recipe and its hash around a trainer's state; the check
              that a resume continues the same recipe (``read``, ``RecipeMismatch``)
``find``      where a run's checkpoints are (the folder it recorded, this directory's), the
              newest one, and what ``--resume`` continues (``resume_point``: the run, the
              checkpoint and its content; one rule for a file that does not read)
"""

from toolkit.checkpoint.envelope import (
    FORMAT,
    RESUME_FREE_KEYS,
    RecipeMismatch,
    check_recipe,
    read,
    recipe_differences,
    recipe_hash,
    seal,
    unseal,
    write,
)
from toolkit.checkpoint.files import (
    CheckpointError,
    CorruptCheckpoint,
    UnsafeCheckpoint,
    check_plain,
    load,
    numpy_state,
    rng_state,
    save,
    seed_everything,
    set_numpy_state,
    set_rng_state,
)
from toolkit.checkpoint.find import (
    DIR_TAG,
    ResumePoint,
    candidates,
    checkpoint_dir,
    find,
    folder_tags,
    folders,
    latest,
    newest_readable,
    resume_point,
)

__all__ = [
    "CheckpointError",
    "CorruptCheckpoint",
    "DIR_TAG",
    "FORMAT",
    "RESUME_FREE_KEYS",
    "RecipeMismatch",
    "ResumePoint",
    "UnsafeCheckpoint",
    "candidates",
    "check_plain",
    "check_recipe",
    "checkpoint_dir",
    "find",
    "folder_tags",
    "folders",
    "latest",
    "load",
    "newest_readable",
    "numpy_state",
    "read",
    "recipe_differences",
    "recipe_hash",
    "resume_point",
    "rng_state",
    "save",
    "seal",
    "seed_everything",
    "set_numpy_state",
    "set_rng_state",
    "unseal",
    "write",
]
