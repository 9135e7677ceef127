"""Small encoders for 2-D toy points: a linear map (LMCL's ``phi(x) = P x``) or an MLP
(the CPCL mixture), with an L2-normalised output."""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from domains.base import Encoder

__all__ = ["ToyEncoder"]

Init = Literal["default", "identity", "zero"]


class ToyEncoder(Encoder):
    """``depth`` linear layers (ReLU between them) from ``in_dim`` to ``embed_dim``.

    ``depth = 1`` with ``bias=False`` is LMCL's linear embedding ``P x`` (Sec. 5.1). ``forward``
    returns ``P x / ||P x||`` when ``normalize`` (the loss's view); ``features`` returns the same
    embedding, since its size is what the experiments vary (CPCL Fig. 3b probes the embedding).

    ``init``: ``default`` (PyTorch's), ``identity`` (every weight an identity, zero biases: the
    untrained encoder is the raw point, up to normalisation) or ``zero`` (LMCL's ``P = 0``;
    refused with ``normalize``, because ``P x / ||P x||`` is then undefined and has no gradient:
    docs/methods.md, section LMCL Table 1).
    """

    def __init__(
        self,
        in_dim: int = 2,
        embed_dim: int = 2,
        depth: int = 1,
        hidden: int = 64,
        bias: bool = True,
        normalize: bool = True,
        init: Init = "default",
    ) -> None:
        super().__init__()
        for name, v in (("in_dim", in_dim), ("embed_dim", embed_dim), ("depth", depth), ("hidden", hidden)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if init not in ("default", "identity", "zero"):
            raise ValueError(f"init must be one of 'default', 'identity', 'zero', got {init!r}")
        if init == "zero" and normalize:
            raise ValueError(
                "init='zero' with normalize=True gives P x = 0 and an undefined "
                "normalised embedding with no gradient (docs/methods.md, "
                "section LMCL Table 1); use "
                "init='identity' or 'default', or normalize=False"
            )
        self.normalize = normalize
        widths = [in_dim] + [hidden] * (depth - 1) + [embed_dim]
        layers: list[nn.Module] = []
        for i in range(depth):
            layers.append(nn.Linear(widths[i], widths[i + 1], bias=bias))
            if i < depth - 1:
                layers.append(nn.ReLU())
        self.net = nn.Sequential(*layers)
        self.out_dim = embed_dim  # read by the pretraining loop (queue / bank width)
        if init != "default":
            with torch.no_grad():
                for m in self.net:
                    if isinstance(m, nn.Linear):
                        if init == "identity":
                            nn.init.eye_(m.weight)
                        else:
                            nn.init.zeros_(m.weight)
                        if m.bias is not None:
                            nn.init.zeros_(m.bias)

    def features(self, x: Tensor) -> Tensor:
        z = self.net(x)
        return F.normalize(z, dim=-1) if self.normalize else z

    def forward(self, x: Tensor) -> Tensor:
        return self.features(x)
