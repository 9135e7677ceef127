"""Checkpoints: everything a run needs to continue exactly where it stopped."""
from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch


def rng_state(generator: torch.Generator | None = None) -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(),
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    if generator is not None:
        state["views"] = generator.get_state()
    return state


def set_rng_state(state: dict[str, Any], generator: torch.Generator | None = None) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if generator is not None and "views" in state:
        generator.set_state(state["views"])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def save(path: str | Path, state: dict[str, Any]) -> Path:
    """Write atomically (a killed process never leaves a half-written checkpoint)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)
    return path


def load(path: str | Path, map_location: Any = "cpu") -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    return torch.load(path, map_location=map_location, weights_only=False)


def checkpoint_dir(run_id: str, root: str | Path | None = None) -> Path:
    """Where a run keeps its checkpoints: ``$CTK_CHECKPOINTS`` or ``./checkpoints``, per run."""
    base = Path(root or os.environ.get("CTK_CHECKPOINTS", "checkpoints"))
    return base / run_id
