"""Contrastive losses: pure functions in :mod:`toolkit.losses.functional`, registered
``nn.Module`` wrappers in :mod:`toolkit.losses.modules`, one module per functional family
(importing this package registers all of them in :data:`LOSSES`)."""

from toolkit.losses import modules  # noqa: F401 - registers every loss
from toolkit.losses.base import LOSSES  # noqa: F401
