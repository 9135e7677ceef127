"""How the pretrainer makes its step fast on the device it runs on, and says what it chose.

Decided once, when the trainer is built, and printed as one ``[ctk] speed ...`` line (beside
the precision line):

* **memory format**: an encoder with 2-d convolutions is put in ``channels_last`` on CUDA and
  on the CPU (the convolutions then read and write NHWC, and the activations stay so through
  batch-norm and ReLU; an NCHW input is taken as it is). Measured: a ResNet-50 SimCLR step on an
  H200 in bf16, 980 -> 1,598 images/s with ``cudnn.benchmark`` (``docs/gpu.md``); a ResNet-18
  forward and backward at 32 px on a 2-core Xeon with AMX, 1.22x in fp32 and 1.30x in bf16.
  Other devices keep the default layout. The quickstart's conv net is channels-last by itself.
* **cudnn.benchmark** on CUDA: the views have one shape for the whole run, so the convolution
  algorithms are timed once and the fastest kept.
* **the optimizer**: SGD, Adam and AdamW fused (one kernel for all the parameters; on a 2-core
  Xeon, Adam's step over ResNet-18's parameters 21 -> 7 ms), LARS multi-tensor
  (:class:`~toolkit.training.optim.LARS`); see :func:`toolkit.training.optim.build_optimizer`.
* **compile** (the recipe's ``compile``, ``--set compile=default``): ``torch.compile`` of the
  model the step calls, in torch's modes (``reduce-overhead`` adds CUDA graphs, for small models
  whose step is launch-bound; it needs CUDA). Off by default: compiling takes seconds to minutes
  before the first step (62 s for a ResNet-50 on an H200). The state, checkpoints, evaluations
  and the logged model use the uncompiled encoder.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["COMPILE_MODES", "Speed", "channels_last_wins", "compile_mode", "compiled", "has_convolutions", "prepare"]

COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune")


@dataclass(frozen=True)
class Speed:
    """What the trainer chose: the encoder's memory format, cudnn.benchmark, the optimizer's
    implementation and the compile mode."""

    memory_format: str
    cudnn_benchmark: bool
    optimizer: str
    compile: str

    def line(self) -> str:
        cudnn = ", cudnn.benchmark" if self.cudnn_benchmark else ""
        compiled = "not compiled" if self.compile == "off" else f"torch.compile mode {self.compile}"
        return f"speed: encoder {self.memory_format}{cudnn}; optimizer {self.optimizer}; {compiled}"


def has_convolutions(module: nn.Module) -> bool:
    return any(isinstance(m, nn.Conv2d) for m in module.modules())


def channels_last_wins(device: torch.device) -> bool:
    """Where channels_last was measured faster for convolutions: CUDA and the CPU (oneDNN)."""
    return device.type in ("cuda", "cpu")


def prepare(encoder: nn.Module, device: torch.device) -> str:
    """Put ``encoder`` (already on ``device``) in the memory format its step runs fastest in
    there, and turn on ``cudnn.benchmark`` on CUDA; returns the format's name."""
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    if not has_convolutions(encoder):
        return "(no convolutions)"
    if channels_last_wins(device):
        encoder.to(memory_format=torch.channels_last)
        return "channels_last"
    return "contiguous (NCHW)"


def compile_mode(asked: str, device: torch.device) -> str:
    """The ``torch.compile`` mode a run uses on ``device`` for the recipe's ``compile``:
    ``reduce-overhead`` (CUDA graphs) becomes ``default`` off CUDA, said in the speed line."""
    if asked not in COMPILE_MODES:
        raise ValueError(f"compile must be one of {', '.join(COMPILE_MODES)}, got {asked!r}")
    if asked == "reduce-overhead" and device.type != "cuda":
        return "default (reduce-overhead's CUDA graphs need CUDA)"
    return asked


def compiled(model: nn.Module, mode: str) -> nn.Module:
    """``model`` under ``torch.compile`` in ``mode`` (:func:`compile_mode`; ``off``: the model)."""
    if mode == "off":
        return model
    return torch.compile(model, mode=mode.split(" ")[0])  # type: ignore[return-value]
