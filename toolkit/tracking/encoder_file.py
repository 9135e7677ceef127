"""A trained encoder as data: its state dict (CPU tensors), the resolved recipe that built it,
and the domain's extras (e.g. the text domain's tokenizer as JSON). No pickled code: the file
is written and read through :mod:`toolkit.checkpoint` (``weights_only=True``).

Every run logs this artefact as ``model/encoder.pt``; ``ctk export RUN --out FILE`` writes the
same file. Loading rebuilds the encoder from the recipe through its domain and loads the
weights: :func:`domains.export.load_encoder` (the domain layer, which knows the builders).
"""

from __future__ import annotations

import copy
import tempfile
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


def read_encoder(source: str | Path, uri: str | None = None) -> dict[str, Any]:
    """The artefact from a file, or from an mlflow run id (downloaded from the run's
    ``model/encoder.pt``). Raises ``CheckpointError`` for a file that is not one."""
    path = Path(source)
    if not path.is_file():
        path = _download(str(source), uri)
    state = ckpt.load(path)
    if state.get("format") != ENCODER_FORMAT:
        raise ckpt.CorruptCheckpoint(
            f"{source}: not a ctk encoder (format {state.get('format')!r}, expected {ENCODER_FORMAT!r})"
        )
    return state


def _download(run_id: str, uri: str | None) -> Path:
    from toolkit.tracking.store import no_store, reading_client

    client = reading_client(uri)  # never creates a store
    if client is None:
        raise FileNotFoundError(f"{run_id!r} is not a file, and {no_store(uri)}")
    from mlflow.exceptions import MlflowException  # after the store is opened (its environment set)

    try:
        client.get_run(run_id)
    except MlflowException:
        raise FileNotFoundError(
            f"{run_id!r} is neither a file nor a run id of the store {client.tracking_uri}"
        ) from None
    folder = Path(tempfile.mkdtemp(prefix="ctk-encoder-"))
    try:
        return Path(client.download_artifacts(run_id, ARTIFACT_PATH, str(folder)))
    except (MlflowException, OSError) as exc:
        raise FileNotFoundError(
            f"run {run_id} has no {ARTIFACT_PATH} (was it logged with tracking.log_model: false?): {exc}"
        ) from None
