"""The GPU path of the batched augmentation (``sync_free``) reads nothing back from the device
and draws the same views as the CPU path; here forced on the CPU, where it can be checked."""

from __future__ import annotations

import pytest
import torch

from domains.vision.augment import BatchAugment, preset
from toolkit.training.syncs import SyncCounter


@pytest.mark.parametrize("name, channels", [("cacr_cifar", 3), ("moco_v2", 3), ("grey", 1)])
def test_sync_free_path_matches_and_reads_nothing(name, channels):
    size = 32 if channels == 3 else 28
    spec = preset(name, size=size)
    x = torch.randint(0, 256, (24, channels, size, size), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    mean, std = (0.5,) * channels, (0.25,) * channels
    host = BatchAugment(spec, mean, std, sync_free=False)(x, torch.Generator().manual_seed(3))
    with SyncCounter() as reads:
        free = BatchAugment(spec, mean, std, sync_free=True)(x, torch.Generator().manual_seed(3))
    assert reads.total == 0, dict(reads.calls)
    torch.testing.assert_close(free, host, rtol=1e-5, atol=2e-5)
    with SyncCounter() as reads:
        BatchAugment(spec, mean, std, sync_free=False)(x, torch.Generator().manual_seed(3))
    assert reads.total > 0  # the counter sees the CPU path's reads: the check above can fail
