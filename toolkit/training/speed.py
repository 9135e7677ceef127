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
  whose step is launch-bound; it needs CUDA), or ``auto`` (the default), decided once by
  :func:`choose_compile`: off the GPU, eager (inductor compiles for minutes on a CPU and was not
  measured faster there); on CUDA, a few eager forward and backward passes of a copy of the step
  model are timed on a batch of the run's views, a step over 25 ms (compute-bound: a ResNet-50,
  whose compile takes 62 s on an H200) stays eager, a shorter one is compiled in
  ``reduce-overhead`` on a copy, timed the same way, and kept only when faster. The CUDA branch
  was written and tested with injected timings; it has not been measured on a GPU yet. The
  state, checkpoints, evaluations and the logged model use the uncompiled encoder.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

__all__ = [
    "COMPILE_MODES",
    "COMPUTE_BOUND_MS",
    "CompileChoice",
    "Speed",
    "channels_last_wins",
    "choose_compile",
    "compile_mode",
    "compiled",
    "has_convolutions",
    "prepare",
    "time_passes",
]

COMPILE_MODES = ("auto", "off", "default", "reduce-overhead", "max-autotune")
# an eager step longer than this is compute-bound: CUDA graphs save launches, not arithmetic
COMPUTE_BOUND_MS = 25.0
AUTO_MODE = "reduce-overhead"  # what ``auto`` tries on CUDA

# one forward and backward pass of the model it is given (the trial; see choose_compile)
Trial = Callable[[nn.Module], None]
# (ms per pass after warm-up, seconds of the warm-up, compiling included) of a model in a mode
Measure = Callable[[nn.Module, str], tuple[float, float]]


@dataclass(frozen=True)
class Speed:
    """What the trainer chose: the encoder's memory format, cudnn.benchmark, the optimizer's
    implementation and the compile mode."""

    memory_format: str
    cudnn_benchmark: bool
    optimizer: str
    compile: str
    compile_reason: str = ""  # why ``auto`` chose it

    def line(self) -> str:
        cudnn = ", cudnn.benchmark" if self.cudnn_benchmark else ""
        compiled = "not compiled" if self.compile == "off" else f"torch.compile mode {self.compile}"
        why = f" ({self.compile_reason})" if self.compile_reason else ""
        return f"speed: encoder {self.memory_format}{cudnn}; optimizer {self.optimizer}; {compiled}{why}"


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
    if asked == "auto":
        raise ValueError("compile: auto is decided by choose_compile, which times the step; compile_mode got 'auto'")
    if asked == "reduce-overhead" and device.type != "cuda":
        return "default (reduce-overhead's CUDA graphs need CUDA)"
    return asked


def compiled(model: nn.Module, mode: str) -> nn.Module:
    """``model`` under ``torch.compile`` in ``mode`` (:func:`compile_mode`; ``off``: the model)."""
    if mode == "off":
        return model
    return torch.compile(model, mode=mode.split(" ")[0])  # type: ignore[return-value]


@dataclass(frozen=True)
class CompileChoice:
    """The mode a run compiles its step model in (:func:`compile_mode`'s form) and, for ``auto``,
    why."""

    mode: str
    reason: str = ""

    @property
    def measured(self) -> str:
        """The mode alone, as the run records it (``measured.compile``)."""
        return self.mode.split(" ")[0]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_passes(
    model: nn.Module, mode: str, trial: Trial, device: torch.device, warmup: int = 3, passes: int = 10
) -> tuple[float, float]:
    """(ms per pass, seconds of the warm-up) of ``trial`` on ``model`` compiled in ``mode``
    (``off``: eager): ``warmup`` untimed passes first (compiling and recording CUDA graphs
    happen there), then ``passes`` timed ones, the device synchronised at each end."""
    step_model = compiled(model, mode)
    _sync(device)
    start = time.perf_counter()
    for _ in range(warmup):
        trial(step_model)
    _sync(device)
    warm = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(passes):
        trial(step_model)
    _sync(device)
    return 1000 * (time.perf_counter() - start) / passes, warm


def choose_compile(
    asked: str, model: nn.Module, device: torch.device, trial: Trial | None, measure: Measure | None = None
) -> CompileChoice:
    """The compile mode for the recipe's ``compile``; ``auto`` is decided here, once:

    * off CUDA: ``off`` (``auto: eager on cpu``), nothing timed;
    * on CUDA: ``trial`` (one forward and backward pass) timed on a deep copy of ``model`` by
      ``measure`` (default :func:`time_passes`): an eager pass over :data:`COMPUTE_BOUND_MS` stays
      eager; otherwise a second copy compiled in ``reduce-overhead`` is timed and kept only when
      faster (a tie, or a compile that fails, stays eager).

    ``model`` itself is never run: the copies are, under a forked random state, so the run
    trains as it would have with ``off``."""
    if asked != "auto":
        return CompileChoice(compile_mode(asked, device))
    if device.type != "cuda":
        return CompileChoice("off", f"auto: eager on {device.type}")
    if trial is None:
        return CompileChoice("off", "auto: eager (no trial step to time)")
    timer = measure or partial(time_passes, trial=trial, device=device)
    index = torch.cuda.current_device() if device.index is None and torch.cuda.is_available() else device.index
    with torch.random.fork_rng(devices=[] if index is None else [index]):
        eager_ms, _ = timer(copy.deepcopy(model), "off")
        if eager_ms > COMPUTE_BOUND_MS:
            return CompileChoice(
                "off", f"auto: the step takes {eager_ms:.0f} ms, compute-bound; compile=default to try"
            )
        try:
            compiled_ms, seconds = timer(copy.deepcopy(model), AUTO_MODE)
        except Exception as exc:  # noqa: BLE001 - a compiler that fails here leaves the run eager
            said = (str(exc).strip().splitlines() or [""])[0][:200]
            return CompileChoice("off", f"auto: {AUTO_MODE} failed ({type(exc).__name__}: {said}), eager")
        finally:
            torch.compiler.reset()  # the trial copy's graphs and CUDA-graph pool do not stay with the run
    timings = f"{compiled_ms:.1f} ms/step against {eager_ms:.1f} ms eager, compiled in {seconds:.0f} s"
    if compiled_ms < eager_ms:
        return CompileChoice(AUTO_MODE, f"auto: {timings}")
    return CompileChoice("off", f"auto: {AUTO_MODE} {timings}, not faster")
