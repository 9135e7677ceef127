"""Load a trained encoder from an mlflow run or an exported file, on any device.

    from domains.export import load_encoder
    encoder = load_encoder("RUN_ID")            # or "encoder.pt" from `ctk export RUN_ID`
    features = encoder.features(x)              # backbone features; encoder(x): the projection

The file holds data only (:mod:`toolkit.tracking.encoder_file`): the encoder is rebuilt from the stored recipe
by its domain and the weights are loaded with ``weights_only=True``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from domains import installed
from toolkit.runs import load_recipe
from toolkit.tracking.encoder_file import ARTIFACT_PATH, read_encoder, save_encoder
from toolkit.tracking.store import run_artifact

__all__ = ["load_encoder", "export_encoder", "encoder_path"]


def load_encoder(
    source: str | Path, device: str | torch.device = "cpu", *, uri: str | None = None, eval_mode: bool = True
) -> nn.Module:
    """The encoder of a run id (of the store ``uri``, default ``$MLFLOW_TRACKING_URI`` or
    ``./mlflow.db``) or of a file written by ``ctk export``, on ``device``."""
    encoder = _rebuild(read_encoder(encoder_path(source, uri)), source).to(device)
    return encoder.eval() if eval_mode else encoder


def export_encoder(source: str | Path, out: str | Path, uri: str | None = None) -> Path:
    """Write a run's (or file's) encoder to ``out``; it is rebuilt on the way, so a file that
    does not load is never written."""
    art: dict[str, Any] = read_encoder(encoder_path(source, uri))
    return save_encoder(out, _rebuild(art, source), art["recipe"], art["extras"])


def encoder_path(source: str | Path, uri: str | None = None) -> Path:
    """``source`` when it is a file, else the encoder logged by the run ``source`` of the store
    ``uri`` (``model/encoder.pt``, downloaded): the store is asked here, the file format reads files."""
    if Path(source).is_file():
        return Path(source)
    hint = "was it logged with tracking.log_model: false?"
    return run_artifact(str(source), ARTIFACT_PATH, uri, hint=hint)


def _rebuild(art: dict[str, Any], source: str | Path) -> nn.Module:
    recipe = load_recipe(f"{source} (stored recipe)", [], installed.get, data=art["recipe"])
    domain = recipe.domain_class(recipe)
    encoder = domain.rebuild_encoder(art["extras"])
    encoder.load_state_dict(art["state_dict"])
    return encoder
