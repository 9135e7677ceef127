"""Checkpoints: one room for their format, their files and finding them.

``files``  data-only files: atomic writes, ``weights_only`` reads, random states, the recipe hash,
           where a run's checkpoints live and which is the latest
"""
from toolkit.checkpoint.files import (CheckpointError, CorruptCheckpoint, UnsafeCheckpoint, check_plain,
                                      checkpoint_dir, latest, load, numpy_state, recipe_hash, rng_state, save,
                                      seed_everything, set_numpy_state, set_rng_state)

__all__ = ["CheckpointError", "CorruptCheckpoint", "UnsafeCheckpoint", "check_plain", "checkpoint_dir", "latest",
           "load", "numpy_state", "recipe_hash", "rng_state", "save", "seed_everything", "set_numpy_state",
           "set_rng_state"]
