"""The tabular encoder: an MLP backbone and an MLP projection head.

SCARF (Bahri et al. 2022, Sec. 3, "Architecture") uses a 4-layer ReLU MLP of width 256 as the
encoder ``f`` and a 2-layer ReLU MLP of width 256 as the pre-training head ``g``; those are the
defaults here. ``features(x) = f(x)`` (what the linear probe reads); ``forward(x) =
g(f(x)) / ||g(f(x))||`` (what the contrastive loss sees).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from domains.base import Encoder

__all__ = ["MLPEncoder"]


class MLPEncoder(Encoder):
    """``depth`` x [Linear(width), (BatchNorm), ReLU, (Dropout)] backbone; head of
    ``head_depth`` Linear layers (ReLU between them) ending in ``out_dim``; L2-normalised."""

    def __init__(
        self,
        in_features: int,
        hidden: int = 256,
        depth: int = 4,
        head_hidden: int = 256,
        head_depth: int = 2,
        out_dim: int = 128,
        batch_norm: bool = False,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        for name, value, low in (
            ("in_features", in_features, 1),
            ("encoder.hidden", hidden, 1),
            ("encoder.depth", depth, 1),
            ("encoder.head_hidden", head_hidden, 1),
            ("encoder.head_depth", head_depth, 1),
            ("encoder.out_dim", out_dim, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"encoder.dropout must lie in [0, 1), got {dropout!r}")
        layers: list[nn.Module] = []
        width = in_features
        for _ in range(depth):
            layers.append(nn.Linear(width, hidden))
            if batch_norm:
                layers.append(nn.BatchNorm1d(hidden))
            layers.append(nn.ReLU(inplace=True))
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
            width = hidden
        self.backbone = nn.Sequential(*layers)
        head: list[nn.Module] = []
        for _ in range(head_depth - 1):
            head += [nn.Linear(width, head_hidden), nn.ReLU(inplace=True)]
            width = head_hidden
        head.append(nn.Linear(width, out_dim))
        self.head = nn.Sequential(*head)
        self.in_features, self.feature_dim, self.out_dim = in_features, hidden, out_dim

    def features(self, x: Tensor) -> Tensor:
        """``[N, M] -> [N, hidden]``: the backbone output."""
        return self.backbone(x)

    def forward(self, x: Tensor) -> Tensor:
        """``[N, M] -> [N, out_dim]``: the projection, unit L2 norm."""
        return F.normalize(self.head(self.backbone(x)), dim=-1)
