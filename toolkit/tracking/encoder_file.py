"""A trained encoder as data: its state dict (CPU tensors), the resolved recipe that built it,
and the domain's extras (e.g. the text domain's tokenizer as JSON). No pickled code: the file
is written and read through :mod:`toolkit.checkpoint` (``weights_only=True``).

Every run logs this artefact as ``model/encoder.pt``; ``ctk export RUN --out FILE`` writes the
same file. This module reads and writes files only: it knows no tracking store. Loading rebuilds the encoder from the recipe through its domain and loads the
weights: :func:`domains.export.load_encoder` (the domain layer, which knows the builders).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from toolkit import checkpoint as ckpt

__all__ = ["ENCODER_FORMAT", "ARTIFACT_PATH", "encoder_artifact", "save_encoder", "read_encoder"]

ENCODER_FORMAT = "ctk-encoder/1"
ARTIFACT_PATH = "model/encoder.pt"


def encoder_artifact(
    encoder: nn.Module, recipe: Mapping[str, Any], extras: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The plain-data description of a trained encoder (tensors copied to the CPU). A module's
    extra state (``get_extra_state``, e.g. the text encoder's tokenizer) is kept as the plain
    data it is; :func:`toolkit.checkpoint.save` refuses anything else."""
    state = {
        k: v.detach().cpu().clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v)
        for k, v in encoder.state_dict().items()
    }
    return {
        "format": ENCODER_FORMAT,
        "domain": recipe.get("domain"),
        "recipe": dict(recipe),
        "state_dict": state,
        "extras": dict(extras or {}),
    }


def save_encoder(
    path: str | Path, encoder: nn.Module, recipe: Mapping[str, Any], extras: Mapping[str, Any] | None = None
) -> Path:
    return ckpt.save(path, encoder_artifact(encoder, recipe, extras))


def read_encoder(path: str | Path) -> dict[str, Any]:
    """The artefact of an encoder file. Raises ``FileNotFoundError`` for a path that is not a file
    and ``CheckpointError`` for a file that is not one (a run id's file is found in the store by
    :func:`toolkit.tracking.store.run_artifact`, which :func:`domains.export.load_encoder` asks)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{str(path)!r} is not a file")
    state = ckpt.load(path)
    if state.get("format") != ENCODER_FORMAT:
        raise ckpt.CorruptCheckpoint(
            f"{path}: not a ctk encoder (format {state.get('format')!r}, expected {ENCODER_FORMAT!r})"
        )
    return state
