"""Checkpoint files: data in, data out, never code.

A checkpoint is a dict of tensors and plain containers (dict, list, tuple, str, int, float,
bool, None). :func:`save` refuses anything else before writing, and :func:`load` reads with
``torch.load(weights_only=True)``, so opening a checkpoint cannot run code, whoever sent it: a
file that needs more than data is refused with :class:`UnsafeCheckpoint` naming the file and
what it asked for.

Writes are atomic (a temporary file in the same folder, flushed to disk, then ``os.replace``):
a crash or a full disk while writing leaves the previous checkpoint intact. Everything is
stored on the CPU (``map_location="cpu"`` on load too): ``load_state_dict`` of a module or
optimizer moves the tensors to wherever the model lives, so a checkpoint written on a GPU
resumes on a CPU and the other way round. Random states are kept as CPU tensors and plain
numbers (python's, numpy's legacy and ``Generator`` states, torch CPU / CUDA, named
``torch.Generator`` objects).

What a ctk checkpoint holds around a trainer's state (format, recipe, its hash) is
:mod:`toolkit.checkpoint.envelope`; where a run's files are, :mod:`toolkit.checkpoint.find`.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import random
import warnings
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = [
    "CheckpointError",
    "UnsafeCheckpoint",
    "CorruptCheckpoint",
    "save",
    "load",
    "check_plain",
    "rng_state",
    "set_rng_state",
    "numpy_state",
    "set_numpy_state",
    "seed_everything",
]

_PLAIN = (str, int, float, bool, type(None))


class CheckpointError(ValueError):
    """A checkpoint cannot be used; the message names the file and why."""


class UnsafeCheckpoint(CheckpointError):
    """The file needs more than tensors and plain containers to load (it would run code)."""


class CorruptCheckpoint(CheckpointError):
    """The file is truncated, damaged or not a checkpoint."""


def check_plain(obj: Any, where: str = "state") -> None:
    """Raise ``TypeError`` naming the first value in ``obj`` that is neither a tensor nor a
    plain container / scalar (what ``weights_only=True`` would refuse to read back)."""
    import torch  # here: reading checkpoint folders (ctk runs) needs no torch

    if isinstance(obj, torch.Tensor) or isinstance(obj, _PLAIN):
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not isinstance(k, (str, int)):
                raise TypeError(f"{where}: key {k!r} of type {type(k).__name__} (expected str or int)")
            check_plain(v, f"{where}.{k}")
        return
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            check_plain(v, f"{where}[{i}]")
        return
    raise TypeError(
        f"{where}: {type(obj).__module__}.{type(obj).__name__} is not plain data "
        "(checkpoints hold tensors, numbers, strings, lists, tuples and dicts)"
    )


def save(path: str | Path, state: Mapping[str, Any], keep: int | None = None) -> Path:
    """Write ``state`` to ``path`` atomically. With ``keep``, also remove all but the newest
    ``keep`` ``*.pt`` siblings written by :func:`save` (by modification time)."""
    import torch  # here: reading checkpoint folders (ctk runs) needs no torch

    check_plain(dict(state))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            torch.save(dict(state), fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    if keep is not None and keep > 0:
        siblings = sorted(
            (p for p in path.parent.glob("*.pt") if p.is_file()), key=lambda p: p.stat().st_mtime_ns, reverse=True
        )
        for old in siblings[keep:]:
            old.unlink(missing_ok=True)
    return path


def load(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint with ``weights_only=True`` onto the CPU.

    Raises :class:`UnsafeCheckpoint` when the file asks for code (a pickled object of any
    class) and :class:`CorruptCheckpoint` when it is truncated or not a checkpoint; both name
    the file. A missing file is a ``FileNotFoundError``.
    """
    import torch  # here: reading checkpoint folders (ctk runs) needs no torch

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        text = str(exc)
        if "Weights only load failed" in text or "Unsupported global" in text or "GLOBAL" in text:
            raise UnsafeCheckpoint(
                f"{path}: refused: it holds more than tensors and plain data "
                f"({_what_it_needs(text)}); ctk never unpickles code from a "
                "checkpoint (see SECURITY.md)"
            ) from None
        raise CorruptCheckpoint(f"{path}: not a readable checkpoint ({_first_line(text)})") from None
    except (RuntimeError, EOFError, OSError, zipfile.BadZipFile, ValueError) as exc:
        raise CorruptCheckpoint(
            f"{path}: truncated or damaged checkpoint ({type(exc).__name__}: {_first_line(str(exc))})"
        ) from None
    if not isinstance(state, dict):
        raise CorruptCheckpoint(f"{path}: expected a mapping of state, got {type(state).__name__}")
    return state


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "no message"
    return line[:200]


def _what_it_needs(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if "GLOBAL" in line or "Unsupported global" in line or "Unsupported operand" in line:
            return line.replace("WeightsUnpickler error: ", "")[:200]
    return "a pickled Python object"


# -- random states ---------------------------------------------------------------------------


def numpy_state(state: tuple | Mapping[str, Any]) -> dict[str, Any]:
    """A numpy ``RandomState`` tuple (``get_state()``) or a ``Generator``'s
    ``bit_generator.state`` dict as plain data (arrays become tensors)."""
    import torch  # here: reading checkpoint folders (ctk runs) needs no torch

    if isinstance(state, tuple):
        name, keys, pos, has_gauss, cached = state
        return {
            "legacy": name,
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        }
    return {
        k: (
            numpy_state(v) if isinstance(v, Mapping) else torch.from_numpy(v.copy()) if isinstance(v, np.ndarray) else v
        )
        for k, v in state.items()
    }


def set_numpy_state(saved: Mapping[str, Any]) -> tuple | dict[str, Any]:
    """The inverse of :func:`numpy_state`: what ``set_state`` / ``bit_generator.state`` take."""
    import torch  # here: reading checkpoint folders (ctk runs) needs no torch

    if "legacy" in saved:
        keys = saved["keys"].numpy().astype(np.uint32)
        return (saved["legacy"], keys, int(saved["pos"]), int(saved["has_gauss"]), float(saved["cached_gaussian"]))
    return {
        k: (set_numpy_state(v) if isinstance(v, Mapping) else v.numpy() if isinstance(v, torch.Tensor) else v)
        for k, v in saved.items()
    }


def rng_state(generators: Mapping[str, torch.Generator] | None = None) -> dict[str, Any]:
    """Python, numpy (global), torch CPU and every CUDA device's random state, plus the named
    ``torch.Generator`` objects, as CPU tensors and plain numbers."""
    import torch  # here: reading checkpoint folders (ctk runs) needs no torch

    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {
        "python": {"version": version, "state": torch.tensor(internal, dtype=torch.int64), "gauss": gauss},
        "numpy": numpy_state(np.random.get_state()),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = [s.cpu() for s in torch.cuda.get_rng_state_all()]
    state["generators"] = {k: g.get_state().cpu() for k, g in (generators or {}).items()}
    return state


def set_rng_state(state: Mapping[str, Any], generators: Mapping[str, torch.Generator] | None = None) -> None:
    """Restore what :func:`rng_state` saved. CUDA states are restored when this process sees
    the same number of devices (a checkpoint written on a GPU resumes on a CPU without them)."""
    import torch  # here: reading checkpoint folders (ctk runs) needs no torch

    py = state["python"]
    random.setstate((int(py["version"]), tuple(int(v) for v in py["state"].tolist()), py["gauss"]))
    np.random.set_state(set_numpy_state(state["numpy"]))
    torch.set_rng_state(state["torch"].cpu())
    cuda = state.get("cuda")
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([s.cpu() for s in cuda])
    saved = state.get("generators", {})
    for name, gen in (generators or {}).items():
        if name not in saved:
            continue
        value = saved[name].cpu()
        if value.numel() == gen.get_state().numel():
            gen.set_state(value)
        else:  # written by a generator of another device type (a GPU run resumed on a CPU)
            gen.manual_seed(int.from_bytes(hashlib.sha256(value.numpy().tobytes()).digest()[:8], "little"))
            warnings.warn(
                f"the checkpoint's {name!r} random stream was written on another device type "
                f"({value.numel()}-byte state, {gen.device.type} expects {gen.get_state().numel()}); "
                "it is reseeded from that state, so the resumed run is reproducible but its "
                "random draws differ from those of an uninterrupted run",
                stacklevel=2,
            )


def seed_everything(seed: int) -> None:
    import torch  # here: reading checkpoint folders (ctk runs) needs no torch

    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)
