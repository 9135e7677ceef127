"""decode: device keeps torchvision's image decoders (deprecated since torchvision 0.29 in favour
of torchcodec's; docs/data.md says why) without their deprecation warning at every batch: it is
silenced where ctk calls them, and only there."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
import torch
from PIL import Image

from domains.vision.decode import decode_images


def _encoded(fmt: str, seed: int) -> torch.Tensor:
    pixels = np.random.default_rng(seed).integers(0, 256, (12, 16, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def test_decoding_on_the_device_warns_nothing():
    blobs = [_encoded("JPEG", 0), _encoded("PNG", 1), _encoded("JPEG", 2)]  # the PNG: one by one
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        images = decode_images(blobs, torch.device("cpu"))
    assert [tuple(i.shape) for i in images] == [(3, 12, 16)] * 3 and images[0].dtype == torch.uint8


def test_the_filter_is_narrow():
    """torchvision's warning still reaches a caller of its own (the filter is ctk's call's only),
    and after ctk's call the filters are as they were: other warnings come through."""
    from torchvision.io import decode_jpeg

    tv = pytest.importorskip("torchvision")
    if tuple(int(p) for p in tv.__version__.split(".")[:2]) < (0, 29):
        pytest.skip("torchvision before 0.29 does not deprecate its decoders")
    with pytest.warns(DeprecationWarning, match="TorchVision are deprecated"):
        decode_jpeg(_encoded("JPEG", 3))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        decode_images([_encoded("JPEG", 4)], torch.device("cpu"))
        warnings.warn("another deprecation", DeprecationWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["another deprecation"]
