"""One exclusive lock file for work that several processes may start at once: fetching a dataset
(:mod:`toolkit.data.root`) and creating or migrating a SQLite tracking store and its
experiments (:mod:`toolkit.tracking`).

The lock is ``flock`` on a small file; the kernel releases it when its holder dies, so a killed
process never leaves a stale lock behind (the file itself stays, empty, and is reused).
"""

from __future__ import annotations

import fcntl
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["file_lock"]


@contextmanager
def file_lock(path: str | Path, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created with its folder if missing) for the block;
    ``on_wait()`` is called once when another process holds it and this one has to wait."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
