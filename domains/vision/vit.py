"""Vision Transformers for small images: torchvision's ``VisionTransformer``, randomly initialised,
in the configurations MoCo v3 and DINO use, with a patch size that fits CIFAR-size images.

* ``vit_tiny``: hidden size 192, 12 layers, 3 heads, MLP 768 (DeiT-Ti);
* ``vit_small``: 384, 12 layers, 6 heads, MLP 1536 (DeiT-S / ViT-S);
* ``vit_base``: 768, 12 layers, 12 heads, MLP 3072 (ViT-B).

``patch_size`` cuts the image into ``(size / patch_size)^2`` tokens: 4 for 32 px CIFAR (8 x 8
tokens) and 28 px Fashion-MNIST (7 x 7), 16 for 224 px ImageNet (the default picks 16 from 128 px
up, else 4; :func:`default_patch_size`); ``depth`` replaces the configuration's 12 layers (a
small model for tests on a CPU). The feature the probes read is the class token after the last
layer norm (``hidden_dim`` values).

What differs from torchvision's module: the patch projection takes any number of input channels
(its ``conv_proj`` takes 3 and is replaced, initialised as torchvision initialises it), the
classification head is left out, and the forward pass is written here from the module's own
parts (``conv_proj``, ``class_token``, ``encoder.pos_embedding``, ``encoder.layers``,
``encoder.ln``) so that an image of another size than the configured one is accepted: the
position embeddings of the patch grid are resampled bicubically to the input's grid (the class
token's own embedding unchanged), as DINO does for its small local crops. At the configured size
nothing is resampled, and the output equals torchvision's forward pass.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["VIT_CONFIGS", "ViTBackbone", "default_patch_size", "check_vit_size"]

# hidden size, layers, heads, MLP size
VIT_CONFIGS: dict[str, tuple[int, int, int, int]] = {
    "vit_tiny": (192, 12, 3, 768),
    "vit_small": (384, 12, 6, 1536),
    "vit_base": (768, 12, 12, 3072),
}


def default_patch_size(image_size: int) -> int:
    """``encoder.patch_size`` left unset: 16 from 128 px up (ImageNet's ViT-S/16), else 4."""
    return 16 if image_size >= 128 else 4


def check_vit_size(size: int, patch_size: int) -> str | None:
    """Why a ``size x size`` input does not fit patches of ``patch_size`` (None when it does)."""
    if size % patch_size:
        return f"must be a multiple of encoder.patch_size ({patch_size}), got {size}"
    return None


class ViTBackbone(nn.Module):
    """torchvision's ``VisionTransformer`` of ``arch`` for ``image_size`` inputs with
    ``in_channels`` channels, without its classification head; ``forward`` gives the class token
    (``[N, hidden_dim]``) for inputs of any size that is a multiple of the patch size."""

    def __init__(
        self,
        arch: str = "vit_tiny",
        in_channels: int = 3,
        image_size: int = 32,
        patch_size: int | None = None,
        depth: int | None = None,
    ) -> None:
        super().__init__()
        from torchvision.models import VisionTransformer

        if arch not in VIT_CONFIGS:
            raise ValueError(f"ViT arch must be one of {', '.join(VIT_CONFIGS)}, got {arch!r}")
        hidden, layers, heads, mlp = VIT_CONFIGS[arch]
        patch = default_patch_size(image_size) if patch_size is None else patch_size
        if not isinstance(patch, int) or patch < 1:
            raise ValueError(f"encoder.patch_size must be an integer >= 1, got {patch!r}")
        problem = check_vit_size(image_size, patch)
        if problem:
            raise ValueError(f"the image size {problem}")
        if depth is not None and (not isinstance(depth, int) or depth < 1):
            raise ValueError(f"encoder.depth must be an integer >= 1, got {depth!r}")
        vit = VisionTransformer(
            image_size=image_size,
            patch_size=patch,
            num_layers=depth or layers,
            num_heads=heads,
            hidden_dim=hidden,
            mlp_dim=mlp,
        )
        if in_channels != 3:
            conv = nn.Conv2d(in_channels, hidden, kernel_size=patch, stride=patch)
            fan_in = in_channels * patch * patch  # torchvision's initialisation of its own conv_proj
            nn.init.trunc_normal_(conv.weight, std=math.sqrt(1 / fan_in))
            nn.init.zeros_(conv.bias)
            vit.conv_proj = conv
        vit.heads = nn.Identity()
        self.vit = vit
        self.arch, self.patch_size, self.image_size = arch, patch, image_size
        self.channels = hidden
        self.grid = image_size // patch

    def position_embedding(self, rows: int, cols: int) -> Tensor:
        """``[1, 1 + rows * cols, D]``: the class token's embedding and the patch grid's, resampled
        bicubically from the configured grid to ``rows x cols`` where they differ."""
        pos = self.vit.encoder.pos_embedding
        if rows == self.grid and cols == self.grid:
            return pos
        cls, grid = pos[:, :1], pos[:, 1:]
        d = grid.shape[-1]
        grid = grid.reshape(1, self.grid, self.grid, d).permute(0, 3, 1, 2)
        grid = F.interpolate(grid, size=(rows, cols), mode="bicubic", align_corners=False)
        return torch.cat([cls, grid.permute(0, 2, 3, 1).reshape(1, rows * cols, d)], dim=1)

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() != 4:
            raise ValueError(f"x must be [N, C, H, W], got shape {tuple(x.shape)}")
        n, _, h, w = x.shape
        if h % self.patch_size or w % self.patch_size:
            raise ValueError(
                f"input height and width must be multiples of the patch size {self.patch_size}, got {h}x{w}"
            )
        vit = self.vit
        tokens = vit.conv_proj(x)  # [N, D, h / p, w / p]
        rows, cols = tokens.shape[-2:]
        tokens = tokens.flatten(2).transpose(1, 2)  # [N, rows * cols, D]
        tokens = torch.cat([vit.class_token.expand(n, -1, -1), tokens], dim=1)
        pos = self.position_embedding(rows, cols)
        enc = vit.encoder
        out = enc.ln(enc.layers(enc.dropout(tokens + pos)))
        return out[:, 0]
