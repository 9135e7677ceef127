"""The loss registry. The loss modules of :mod:`toolkit.losses.modules` register themselves
here, one module per family; importing :mod:`toolkit.losses` (or
:mod:`toolkit.losses.modules`) imports them all, so ``LOSSES`` is complete."""
from __future__ import annotations

from toolkit.losses.base import ContrastiveLoss
from toolkit.registry import Registry

__all__ = ["LOSSES"]

LOSSES: Registry[type[ContrastiveLoss]] = Registry("loss")
