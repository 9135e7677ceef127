"""Vision encoders: backbone + projection head, L2-normalised output.

Backbones (``features`` is what evaluation probes):

* ``resnet18`` / ``resnet50`` (torchvision's ResNet classes, randomly initialised) with a
  ``stem``: ``cifar`` (3x3 stride-1 first conv, no max-pool: Wang & Liu Sec. 5, CPCL Sec. 6,
  SimCLR's CIFAR variant), ``no_maxpool`` (7x7 stride-2 conv, max-pool removed: CPCL's STL-10 /
  Tiny-ImageNet variant) or ``imagenet`` (the original stem). ``feature: pooled`` gives the
  global-average-pooled 512 / 2048 vector; ``feature: prepool`` the flattened last feature map
  (Ring Sec. 5 probes the 512x7x7 pre-pool output).
* ``small_alexnet``: the AlexNet-style encoder of Wang & Isola (2020) / CMC that CACR's Table 2
  uses: five 3x3 conv blocks (96-192-384-384-192 channels, BN, ReLU, 3x3/2 max-pools after
  blocks 1, 2 and 5), fc6 and fc7 (4096, BN, ReLU); the probe reads fc7 (CACR App. B.1) and the
  head is fc8 (a linear map to 128, ``head.hidden: []``). Weights start N(0, 0.02).
* ``convnet``: a small net for 28x28 grey images (``blocks`` 3x3 conv blocks of ``width``,
  2*``width``, 4*``width``, ... channels with BN and ReLU, 2x2 max-pools between them, global
  average pool; channels-last memory layout, ~30% faster on CPU); cheap enough for the CPU
  quickstart.
* ``vit_tiny`` / ``vit_small`` / ``vit_base``: torchvision's ``VisionTransformer`` (randomly
  initialised) with ``patch_size`` and optionally ``depth`` (``domains/vision/vit.py``); the
  probes read the class token (192 / 384 / 768 values), and inputs of another size than the
  views' (multi-crop's local crops, an evaluation size) resample the position embeddings.

Input sizes other than the training views' (``data.local_crops``, ``evaluation.image_size``):
``convnet``, the ResNets with ``feature: pooled`` and the ViTs (a multiple of the patch size)
take them; ``small_alexnet`` and ``feature: prepool`` are sized for the views
(:func:`size_problem`).

Head: an MLP with ``hidden`` layer sizes (ReLU, optional BN) ending in ``out_dim``; SimCLR's
2-layer head is ``hidden: [d]``. The output is L2-normalised (``normalize``), which every
loss in ``toolkit.losses`` expects.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from domains.base import Encoder
from domains.vision.vit import VIT_CONFIGS, ViTBackbone, check_vit_size, default_patch_size
from toolkit.heads import MLPHead

__all__ = [
    "VisionEncoder",
    "ProjectionHead",
    "ResNetBackbone",
    "SmallAlexNet",
    "ConvNet",
    "ViTBackbone",
    "build_backbone",
    "size_problem",
    "ARCHS",
]

ARCHS = ("resnet18", "resnet50", "small_alexnet", "convnet", *VIT_CONFIGS)


class ResNetBackbone(nn.Module):
    """A torchvision ResNet without its classifier, with the chosen stem."""

    def __init__(self, depth: int = 18, in_channels: int = 3, stem: str = "cifar", feature: str = "pooled") -> None:
        super().__init__()
        import torchvision.models as tvm

        if depth not in (18, 50):
            raise ValueError(f"ResNet depth must be 18 or 50, got {depth!r}")
        if stem not in ("cifar", "no_maxpool", "imagenet"):
            raise ValueError(f"stem must be 'cifar', 'no_maxpool' or 'imagenet', got {stem!r}")
        if feature not in ("pooled", "prepool"):
            raise ValueError(f"feature must be 'pooled' or 'prepool', got {feature!r}")
        net = tvm.resnet18(weights=None) if depth == 18 else tvm.resnet50(weights=None)
        if stem == "cifar":
            net.conv1 = nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
        elif in_channels != 3:
            net.conv1 = nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
        if stem in ("cifar", "no_maxpool"):
            net.maxpool = nn.Identity()
        self.body = nn.Sequential(
            net.conv1, net.bn1, net.relu, net.maxpool, net.layer1, net.layer2, net.layer3, net.layer4
        )
        self.feature = feature
        self.channels = 512 if depth == 18 else 2048

    def forward(self, x: Tensor) -> Tensor:
        h = self.body(x)
        if self.feature == "prepool":
            return h.flatten(1)
        return torch.flatten(F.adaptive_avg_pool2d(h, 1), 1)


def _conv_block(cin: int, cout: int, pool: bool) -> nn.Sequential:
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    ]
    if pool:
        layers.append(nn.MaxPool2d(3, 2))
    return nn.Sequential(*layers)


class SmallAlexNet(nn.Module):
    """Wang & Isola's small AlexNet up to fc7 (the probed feature, 4096-d)."""

    def __init__(self, in_channels: int = 3, image_size: int = 32) -> None:
        super().__init__()
        self.convs = nn.Sequential(
            _conv_block(in_channels, 96, True),
            _conv_block(96, 192, True),
            _conv_block(192, 384, False),
            _conv_block(384, 384, False),
            _conv_block(384, 192, True),
        )
        side = image_size
        for _ in range(3):
            side = (side - 3) // 2 + 1
        if side < 1:
            raise ValueError(f"image_size {image_size!r} is too small for small_alexnet (needs >= 15)")
        self.fc = nn.Sequential(
            nn.Flatten(),
            nn.Linear(192 * side * side, 4096, bias=False),
            nn.BatchNorm1d(4096),
            nn.ReLU(inplace=True),
            nn.Linear(4096, 4096, bias=False),
            nn.BatchNorm1d(4096),
            nn.ReLU(inplace=True),
        )
        self.channels = 4096
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.normal_(m.weight, 0.0, 0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(self.convs(x))


class ConvNet(nn.Module):
    """``blocks`` conv blocks for 28x28 grey images: block ``i`` has ``width * 2**i`` channels
    (3x3 conv, BN, ReLU), a 2x2 max-pool after every block but the last, then a global
    average pool: ``width * 2**(blocks - 1)`` features."""

    def __init__(self, in_channels: int = 1, width: int = 32, blocks: int = 3) -> None:
        super().__init__()
        if width < 1:
            raise ValueError(f"convnet width must be >= 1, got {width!r}")
        if blocks not in (2, 3, 4):
            raise ValueError(f"convnet blocks must be 2, 3 or 4 (28x28 inputs), got {blocks!r}")

        def block(cin: int, cout: int) -> list[nn.Module]:
            return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]

        layers: list[nn.Module] = []
        cin = in_channels
        for i in range(blocks):
            if i:
                layers.append(nn.MaxPool2d(2))
            layers += block(cin, width * 2**i)
            cin = width * 2**i
        self.body = nn.Sequential(*layers)
        self.body.to(memory_format=torch.channels_last)  # ~30% faster convolutions on CPU
        self.channels = cin

    def forward(self, x: Tensor) -> Tensor:
        h = self.body(x.contiguous(memory_format=torch.channels_last))
        return torch.flatten(F.adaptive_avg_pool2d(h, 1), 1)


# The projection head is the toolkit's MLP (toolkit.heads.MLPHead): Linear [-> BatchNorm] -> ReLU
# per hidden size, then a Linear to out_dim; the same module serves as the family's predictor.
ProjectionHead = MLPHead


class VisionEncoder(Encoder):
    """``forward``: L2-normalised projection (the loss's input); ``features``: the backbone
    output (what the probes read)."""

    def __init__(self, backbone: nn.Module, head: nn.Module, normalize: bool = True) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = head
        self.normalize = normalize

    def features(self, x: Tensor) -> Tensor:
        return self.backbone(x)

    def project(self, h: Tensor) -> Tensor:
        z = self.head(h)
        return F.normalize(z, dim=1) if self.normalize else z

    def forward(self, x: Tensor) -> Tensor:
        return self.project(self.backbone(x))


def build_backbone(
    arch: str,
    in_channels: int,
    image_size: int,
    *,
    stem: str = "cifar",
    feature: str = "pooled",
    width: int = 32,
    blocks: int = 3,
    patch_size: int | None = None,
    depth: int | None = None,
) -> tuple[nn.Module, int]:
    """The backbone named ``arch`` and its feature size for ``image_size`` inputs
    (``patch_size`` and ``depth``: the ViTs')."""
    if arch in ("resnet18", "resnet50"):
        net = ResNetBackbone(18 if arch == "resnet18" else 50, in_channels, stem, feature)
        if feature == "prepool":
            with torch.no_grad():
                net.eval()
                dim = net(torch.zeros(1, in_channels, image_size, image_size)).shape[1]
                net.train()
            return net, int(dim)
        return net, net.channels
    if arch == "small_alexnet":
        net = SmallAlexNet(in_channels, image_size)
        return net, net.channels
    if arch == "convnet":
        net = ConvNet(in_channels, width, blocks)
        return net, net.channels
    if arch in VIT_CONFIGS:
        net = ViTBackbone(arch, in_channels, image_size, patch_size, depth)
        return net, net.channels
    raise ValueError(f"encoder arch must be one of {', '.join(ARCHS)}, got {arch!r}")


def size_problem(
    arch: str,
    view_size: int,
    size: int,
    *,
    feature: str = "pooled",
    blocks: int = 3,
    patch_size: int | None = None,
) -> str | None:
    """Why an encoder built for ``view_size`` views cannot take ``size x size`` inputs (None
    when it can): what a recipe's other input sizes (local crops, the evaluation size) are
    checked against before a run starts."""
    if size == view_size:
        return None
    if arch == "small_alexnet":
        return f"small_alexnet takes only its training view size ({view_size}), got {size}"
    if arch in ("resnet18", "resnet50") and feature == "prepool":
        return f"feature: prepool flattens the feature map of {view_size} px views; {size} px gives another size"
    if arch == "convnet" and size < 2 ** (blocks - 1):
        return f"convnet with {blocks} blocks needs inputs of at least {2 ** (blocks - 1)} px, got {size}"
    if arch in VIT_CONFIGS:
        return check_vit_size(size, default_patch_size(view_size) if patch_size is None else patch_size)
    return None
