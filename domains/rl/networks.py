"""SAC+CURL networks (Laskin et al., 2020, Sec. 4 and App. A; SAC-AE's architecture).

* :class:`PixelEncoder`: ``num_layers`` 3x3 convolutions with ``num_filters`` channels (stride 2
  for the first, 1 after), ReLU after each, then a linear layer to ``feature_dim`` and a
  LayerNorm. Pixels are divided by 255 (folded into the first convolution's weights). It is
  split into ``conv`` (shared by actor and critic) and ``project`` (linear + LayerNorm: the
  critic's and the actor's are separate).
* :class:`Actor`: its own projection of the critic's (detached) convolutional features, an MLP,
  a tanh-squashed Gaussian with log-std squashed into ``[log_std_min, log_std_max]``.
* :class:`Critic`: the encoder with gradients, two Q heads on ``[features, action]``.

Convolutions run in channels-last memory format (oneDNN's native layout on CPU: the same
arithmetic, about twice as fast as NCHW here), with the ReLU fused into them on CPU
(:func:`conv_relu`); initialisation follows SAC-AE / CURL:
orthogonal linear weights, delta-orthogonal convolutions (ReLU gain), zero biases.

Precision (a run's ``precision: bf16``): ``PixelEncoder(..., conv_dtype=torch.bfloat16)`` runs
the convolutions in bf16 and :class:`MLP` (``compute_dtype``) its two hidden layers, as
autocast would: inputs, weights and biases are cast per pass (the parameters, their gradients
and Adam's state stay fp32). Features leave ``conv`` as fp32, so the projection and its
LayerNorm are fp32, and each MLP's output layer is fp32 (Q values, policy mean and log-std);
the targets and the losses follow in fp32. Autocast itself would also round the Q values,
the bilinear logits and the policy outputs to bf16. The pixels 0..255 are exact in bf16.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

__all__ = [
    "conv_output_size",
    "conv_relu",
    "PixelEncoder",
    "Projection",
    "MLP",
    "Actor",
    "Critic",
    "orthogonal_init",
    "full_precision",
]


def conv_output_size(image_size: int, num_layers: int) -> int:
    """Side of the last feature map: ``(s - 3) // 2 + 1`` after the first layer, then ``-2``."""
    side = (image_size - 3) // 2 + 1 - 2 * (num_layers - 1)
    if side < 1:
        raise ValueError(f"crop size {image_size} is too small for {num_layers} conv layers")
    return side


def orthogonal_init(module: nn.Module) -> None:
    """SAC-AE / CURL ``weight_init``: orthogonal linear weights; convolutions zero except an
    orthogonal centre tap (delta-orthogonal, ReLU gain); zero biases; LayerNorm untouched."""
    if isinstance(module, nn.Linear):
        nn.init.orthogonal_(module.weight)
        nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Conv2d):
        if module.weight.shape[2] != module.weight.shape[3]:
            raise ValueError("delta-orthogonal init expects square kernels")
        centre = module.weight.shape[2] // 2
        with torch.no_grad():
            module.weight.zero_()
            nn.init.orthogonal_(module.weight[:, :, centre, centre], gain=nn.init.calculate_gain("relu"))
        nn.init.zeros_(module.bias)


class Projection(nn.Module):
    """Linear + LayerNorm from flattened conv features to ``feature_dim`` (no tanh: CURL's
    ``output_logits=True``)."""

    def __init__(self, in_dim: int, feature_dim: int) -> None:
        super().__init__()
        self.fc = nn.Linear(in_dim, feature_dim)
        self.ln = nn.LayerNorm(feature_dim)

    def forward(self, h: Tensor) -> Tensor:
        return self.ln(self.fc(h))


class PixelEncoder(nn.Module):
    """``obs [B, C, s, s] uint8 -> [B, feature_dim]`` = ``project(conv(obs))``."""

    def __init__(
        self,
        in_channels: int,
        image_size: int,
        feature_dim: int = 50,
        num_layers: int = 4,
        num_filters: int = 32,
        channels_last: bool = True,
        fuse_relu: bool = True,
        conv_dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        if conv_dtype not in (torch.float32, torch.bfloat16):
            raise ValueError(f"conv_dtype must be torch.float32 or torch.bfloat16, got {conv_dtype!r}")
        self.fuse_relu, self.conv_dtype = fuse_relu, conv_dtype
        layers: list[nn.Module] = [nn.Conv2d(in_channels, num_filters, 3, stride=2)]
        for _ in range(num_layers - 1):
            layers.append(nn.Conv2d(num_filters, num_filters, 3, stride=1))
        self.convs = nn.ModuleList(layers)
        self.conv_side = conv_output_size(image_size, num_layers)
        self.conv_dim = num_filters * self.conv_side**2
        self.feature_dim = feature_dim
        self.project = Projection(self.conv_dim, feature_dim)
        self.apply(orthogonal_init)
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        self.to(memory_format=self.memory_format)
        self.adopt_projection(self.project)

    def adopt_projection(self, projection: Projection) -> None:
        """Reorder the input columns of a projection initialised for NCHW-flattened features
        (the reference's order) to this encoder's flattening order: channels-last features
        flatten as (h, w, c) without a copy, so the weight's columns are permuted once here
        instead of the activations at every pass. The network computes the same function
        as its NCHW twin from the same seed (tested); only the stored column order differs."""
        if self.memory_format is not torch.channels_last:
            return
        w, side = projection.fc.weight, self.conv_side
        with torch.no_grad():
            w.copy_(w.view(w.shape[0], -1, side, side).permute(0, 2, 3, 1).reshape(w.shape))

    def prepare(self, obs: Tensor) -> Tensor:
        """uint8 (or 0..255 float) pixels as ``conv_dtype`` in the encoder's memory format (a
        no-op on an already prepared tensor: convert a batch once, encode it several times)."""
        return obs.to(self.conv_dtype, memory_format=self.memory_format)

    def conv(self, obs: Tensor) -> Tensor:
        """Flattened convolutional features ``[B, conv_dim]`` (fp32) of uint8 (or 0..255 float)
        pixels; the convolutions compute in ``conv_dtype``."""
        x, dt = self.prepare(obs), self.conv_dtype
        first = self.convs[0]  # conv(x / 255, W) = conv(x, W / 255): no pass over the pixels
        x = conv_relu(x, (first.weight * (1.0 / 255.0)).to(dt), first.bias.to(dt), first.stride[0], self.fuse_relu)
        for layer in self.convs[1:]:
            x = conv_relu(x, layer.weight.to(dt), layer.bias.to(dt), layer.stride[0], self.fuse_relu)
        x = x.float()  # a no-op in fp32
        if self.memory_format is torch.channels_last:
            return x.permute(0, 2, 3, 1).flatten(1)  # (h, w, c) order: a view, no copy
        return x.flatten(1)  # NCHW order, as in the reference

    def forward(self, obs: Tensor) -> Tensor:
        return self.project(self.conv(obs))


def _mkldnn_conv_relu(x: Tensor, weight: Tensor, bias: Tensor | None, stride: int) -> Tensor:
    return torch.ops.mkldnn._convolution_pointwise(
        x, weight, bias, [0, 0], [stride, stride], [1, 1], 1, "relu", [None], ""
    )


def _has_mkldnn_conv_relu() -> bool:
    try:
        x, w = torch.ones(1, 1, 3, 3), torch.ones(1, 1, 3, 3)
        return bool(_mkldnn_conv_relu(x, w, None, 1).item() == 9.0)
    except (AttributeError, RuntimeError):
        return False


_FUSED_CONV_RELU = torch.backends.mkldnn.is_available() and _has_mkldnn_conv_relu()
# oneDNN's bf16 convolution needs AVX512BW/VL/DQ or AVX-NE-CONVERT (x86), BF16 (aarch64): on
# other CPUs it raises, so bf16 takes aten's convolution there (emulated, slow; precision: auto
# runs such a CPU in fp32 and an explicit bf16 is refused at load unless CTK_CPU_BF16=native).
_ONEDNN_BF16 = _FUSED_CONV_RELU and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


class _ConvReLU(torch.autograd.Function):
    """relu(conv2d(x, W, b)) in one oneDNN call forward (ReLU as the convolution's post-op: no
    separate pass over the activations); backward = ReLU's mask, then the convolution's
    backward, exactly the two steps autograd takes for ``relu(conv2d(...))``."""

    @staticmethod
    def forward(ctx, x, weight, bias, stride):
        y = _mkldnn_conv_relu(x, weight, bias, stride)
        ctx.save_for_backward(x, weight, y)
        ctx.stride = stride
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x, weight, y = ctx.saved_tensors
        s = ctx.stride
        g = torch.ops.aten.threshold_backward(grad, y, 0)
        gx, gw, gb = torch.ops.aten.convolution_backward(
            g, x, weight, [weight.shape[0]], [s, s], [0, 0], [1, 1], False, [0, 0], 1, list(ctx.needs_input_grad[:3])
        )
        return gx, gw, gb, None


def conv_relu(x: Tensor, weight: Tensor, bias: Tensor | None, stride: int, fused: bool = True) -> Tensor:
    """``relu(conv2d(x, weight, bias, stride))`` (no padding). ``fused`` on a CPU float32 or
    bfloat16 tensor: oneDNN's convolution with a ReLU post-op (the kernel PyTorch's compiler emits for
    this pattern on CPU; measured 15% faster than conv + in-place ReLU for this encoder's
    no-gradient pass at batch 128), with :class:`_ConvReLU`'s backward where gradients are
    needed. Elsewhere (GPU, other dtypes, bf16 on a CPU without oneDNN's bf16 kernels, builds
    without oneDNN) conv2d + in-place ReLU.
    ``x``, ``weight`` and ``bias`` share one dtype (the caller casts)."""
    if (
        fused
        and _FUSED_CONV_RELU
        and x.device.type == "cpu"
        and (x.dtype is torch.float32 or (x.dtype is torch.bfloat16 and _ONEDNN_BF16))
    ):
        if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias)):
            return _ConvReLU.apply(x, weight, bias, stride)
        return _mkldnn_conv_relu(x, weight, bias, stride)
    return F.relu(F.conv2d(x, weight, bias, stride), inplace=True)  # the conv's backward does not need its output


class MLP(nn.Sequential):
    """``Linear, ReLU, Linear, ReLU, Linear``. With ``compute_dtype=torch.bfloat16`` the two
    hidden layers compute in bf16 (inputs, weights and biases cast per pass) and the output
    layer in fp32 on the fp32 copy of the last hidden activations, so Q values and the policy's
    mean and log-std are fp32 (a bf16 output would round a Q value of 300 by up to 1)."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int, compute_dtype: torch.dtype = torch.float32) -> None:
        super().__init__(
            nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, out_dim)
        )
        self.compute_dtype = compute_dtype

    def forward(self, x: Tensor) -> Tensor:
        dt = self.compute_dtype
        if dt == torch.float32:
            return super().forward(x)
        h = x.to(dt)
        for layer in (self[0], self[2]):
            h = F.relu(F.linear(h, layer.weight.to(dt), layer.bias.to(dt)))
        return self[4](h.float())


@contextmanager
def full_precision(*modules: nn.Module) -> Iterator[None]:
    """Run every :class:`PixelEncoder` and :class:`MLP` inside ``modules`` in fp32 for the
    block. For acting on one observation: there, casting the weights to bf16 on every call costs
    more than bf16 saves (measured 2.8 ms fp32 against 7.7 ms bf16 per action)."""
    saved = []
    for m in (m for module in modules for m in module.modules()):
        if isinstance(m, PixelEncoder):
            saved.append((m, "conv_dtype", m.conv_dtype))
            m.conv_dtype = torch.float32
        elif isinstance(m, MLP):
            saved.append((m, "compute_dtype", m.compute_dtype))
            m.compute_dtype = torch.float32
    try:
        yield
    finally:
        for m, name, value in saved:
            setattr(m, name, value)


class Actor(nn.Module):
    """Tanh-squashed Gaussian policy on its own projection of conv features (SAC, App. C)."""

    def __init__(
        self,
        conv_dim: int,
        feature_dim: int,
        action_dim: int,
        hidden_dim: int = 1024,
        log_std_range: tuple[float, float] = (-10.0, 2.0),
        compute_dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.project = Projection(conv_dim, feature_dim)
        self.trunk = MLP(feature_dim, hidden_dim, 2 * action_dim, compute_dtype)
        self.log_std_min, self.log_std_max = log_std_range
        self.apply(orthogonal_init)

    def forward(self, conv_features: Tensor, *, sample: bool = True) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(mu, pi, log_pi, log_std)``: squashed mean, squashed sample, its log-density
        (with the tanh change of variables) and the log-std. ``sample=False`` gives
        ``pi = mu`` and ``log_pi`` of the mean (used only for acting)."""
        mu, log_std = self.trunk(self.project(conv_features)).chunk(2, dim=-1)
        log_std = torch.tanh(log_std)
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (log_std + 1)
        noise = torch.randn_like(mu) if sample else torch.zeros_like(mu)
        pi = mu + noise * log_std.exp()
        # log N(pi; mu, std) summed over action dimensions
        log_pi = (-0.5 * noise.pow(2) - log_std).sum(-1, keepdim=True) - 0.5 * math.log(2 * math.pi) * mu.shape[-1]
        mu, pi = torch.tanh(mu), torch.tanh(pi)
        log_pi = log_pi - torch.log(F.relu(1 - pi.pow(2)) + 1e-6).sum(-1, keepdim=True)
        return mu, pi, log_pi, log_std


class Critic(nn.Module):
    """Twin Q functions ``Q_i(encoder(obs), a)`` on the shared pixel encoder."""

    def __init__(
        self, encoder: PixelEncoder, action_dim: int, hidden_dim: int = 1024, compute_dtype: torch.dtype = torch.float32
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.q1 = MLP(encoder.feature_dim + action_dim, hidden_dim, 1, compute_dtype)
        self.q2 = MLP(encoder.feature_dim + action_dim, hidden_dim, 1, compute_dtype)
        self.q1.apply(orthogonal_init)
        self.q2.apply(orthogonal_init)

    def heads(self, features: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
        x = torch.cat([features, action], dim=-1)
        return self.q1(x), self.q2(x)

    def forward(self, obs: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
        return self.heads(self.encoder(obs), action)
