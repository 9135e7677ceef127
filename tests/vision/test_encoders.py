"""Encoder architectures: stems, feature sizes, heads, normalised outputs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from domains.vision.encoders import ProjectionHead, VisionEncoder, build_backbone


def _encoder(arch, channels=3, size=32, **kw):
    backbone, dim = build_backbone(arch, channels, size, **kw)
    return VisionEncoder(backbone, ProjectionHead(dim, [64], 32)), dim


def test_resnet18_cifar_stem():
    enc, dim = _encoder("resnet18", stem="cifar")
    conv1 = enc.backbone.body[0]
    assert dim == 512 and conv1.kernel_size == (3, 3) and conv1.stride == (1, 1)
    assert isinstance(enc.backbone.body[3], nn.Identity)  # no max-pool
    enc.eval()
    with torch.no_grad():
        x = torch.randn(2, 3, 32, 32)
        assert enc.features(x).shape == (2, 512)
        z = enc(x)
    assert z.shape == (2, 32) and torch.allclose(z.norm(dim=1), torch.ones(2), atol=1e-5)


def test_resnet_prepool_feature_and_imagenet_stem():
    backbone, dim = build_backbone("resnet18", 3, 32, stem="cifar", feature="prepool")
    assert dim == 512 * 4 * 4  # 32x32 input, CIFAR stem: layer4 is 4x4
    backbone, _ = build_backbone("resnet18", 3, 64, stem="imagenet")
    assert backbone.body[0].kernel_size == (7, 7) and isinstance(backbone.body[3], nn.MaxPool2d)


def test_small_alexnet_reads_fc7():
    for size in (32, 64):
        enc, dim = _encoder("small_alexnet", size=size)
        enc.eval()
        with torch.no_grad():
            assert enc.features(torch.randn(2, 3, size, size)).shape == (2, 4096)
    assert dim == 4096


def _plain_convnet(enc, x):
    """The grey-image encoder written out with torch.nn.functional on the module's own
    weights (eval mode): [conv3x3 (no bias), BatchNorm, ReLU] blocks with a 2x2 max-pool
    after every block but the last, global average pool; head Linear-ReLU-Linear; z / ||z||."""
    convs = [m for m in enc.backbone.body if isinstance(m, nn.Conv2d)]
    norms = [m for m in enc.backbone.body if isinstance(m, nn.BatchNorm2d)]
    h = x
    for i, (conv, bn) in enumerate(zip(convs, norms)):
        h = F.conv2d(h, conv.weight, padding=1)
        h = (h - bn.running_mean[:, None, None]) / torch.sqrt(bn.running_var[:, None, None] + bn.eps)
        h = torch.clamp(h * bn.weight[:, None, None] + bn.bias[:, None, None], min=0.0)
        if i < len(convs) - 1:
            h = F.max_pool2d(h, 2)
    feats = h.mean(dim=(2, 3))
    first, last = enc.head.net[0], enc.head.net[-1]
    z = torch.clamp(feats @ first.weight.T + first.bias, min=0.0) @ last.weight.T + last.bias
    return feats, z / z.pow(2).sum(1, keepdim=True).sqrt()


@pytest.mark.parametrize("blocks", [2, 3, 4])
def test_convnet_for_grey_images(blocks):
    enc, dim = _encoder("convnet", channels=1, size=28, width=8, blocks=blocks)
    assert dim == 8 * 2 ** (blocks - 1)  # channels double from block to block
    assert [m.out_channels for m in enc.backbone.body if isinstance(m, nn.Conv2d)] == [8 * 2**i for i in range(blocks)]
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # running statistics away from their initial 0 / 1
        for bn in (m for m in enc.backbone.body if isinstance(m, nn.BatchNorm2d)):
            bn.running_mean.normal_(0.0, 0.1, generator=g)
            bn.running_var.uniform_(0.5, 2.0, generator=g)
            bn.weight.uniform_(0.5, 1.5, generator=g)
            bn.bias.normal_(0.0, 0.1, generator=g)
    x = torch.randn(4, 1, 28, 28, generator=g)
    z = enc(x)
    assert z.shape == (4, 32) and torch.allclose(z.norm(dim=1), torch.ones(4), atol=1e-5)
    enc.eval()
    with torch.no_grad():
        feats_ref, z_ref = _plain_convnet(enc, x)
        torch.testing.assert_close(enc.features(x), feats_ref, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(enc(x), z_ref, rtol=1e-5, atol=1e-6)


def test_three_block_convnet_keeps_its_state_dict_layout():
    """Checkpoints of the three-block net written before ``blocks`` existed still load."""
    backbone, _ = build_backbone("convnet", 1, 28, width=4)
    keys = [k for k in backbone.state_dict() if k.endswith(".weight")]
    assert keys == [
        "body.0.weight",
        "body.1.weight",
        "body.4.weight",
        "body.5.weight",
        "body.8.weight",
        "body.9.weight",
    ]
    with pytest.raises(ValueError, match="blocks must be 2, 3 or 4"):
        build_backbone("convnet", 1, 28, blocks=5)


def test_linear_head_and_bad_arch():
    head = ProjectionHead(16, [], 8)
    assert [type(m) for m in head.net] == [nn.Linear]
    with pytest.raises(ValueError, match="arch must be one of"):
        build_backbone("vit", 3, 32)
