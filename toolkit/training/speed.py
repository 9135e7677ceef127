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
  measured faster there); a domain whose batches change shape (``Domain.variable_shapes``:
  text pads to the longest sentence) stays eager, said on the line; on CUDA a trial: a few
  eager forward and backward passes of the run's own step model (DDP and SyncBatchNorm
  included) on the batch each rank trains on, timed; a step over 25 ms (compute-bound: a
  ResNet-50, whose compile takes 62 s on an H200) stays eager; a shorter one is compiled in
  ``reduce-overhead`` and timed the same way, and kept only when it is at least 10% faster
  and the run's steps repay its compile time at least twice over (both figures on the line),
  the run then stepping with the very model the trial compiled. Every rank's outcome is
  gathered and the decision taken on the gathered figures (the slowest rank, any rank's
  failure), so ranks never diverge; any error in the trial leaves the run eager and names it.
  The model's parameters, BatchNorm statistics and gradients are put back in place and the
  random state forked, so the run trains as it would have with the mode chosen. The CUDA
  branch was written and tested on the CPU (injected timings and failures, two gloo ranks);
  ``tests/gpu/test_compile.py`` and ``bench/gpu_report.py`` check it on a GPU. The state,
  checkpoints, evaluations and the logged model use the uncompiled encoder.
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from torch import nn

__all__ = [
    "COMPILE_MODES",
    "COMPUTE_BOUND_MS",
    "MIN_GAIN",
    "MIN_REPAY",
    "CompileChoice",
    "Speed",
    "channels_last_wins",
    "choose_compile",
    "compile_mode",
    "compiled",
    "has_convolutions",
    "prepare",
    "time_passes",
    "Timed",
]

COMPILE_MODES = ("auto", "off", "default", "reduce-overhead", "max-autotune")
# an eager step longer than this is compute-bound: CUDA graphs save launches, not arithmetic
COMPUTE_BOUND_MS = 25.0
AUTO_MODE = "reduce-overhead"  # what ``auto`` tries on CUDA
MIN_GAIN = 0.10  # ``auto`` keeps the compiled step only when it is at least 10% faster than eager
MIN_REPAY = 2.0  # ... and when the run's steps save at least twice the compile's time

# one forward and backward pass of the model it is given (the trial; see choose_compile)
Trial = Callable[[nn.Module], None]
# (ms per pass after warm-up, seconds of the warm-up) of a step model (compiled or not) in a mode
Measure = Callable[[nn.Module, str], tuple[float, float]]
# every rank's value in rank order (under torchrun all_gather_object; one process: [value])
Agree = Callable[[Any], list[Any]]
# the step model of a model in a mode (compiled(): torch.compile)
Compiler = Callable[[nn.Module, str], nn.Module]


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
    """The mode a run compiles its step model in (:func:`compile_mode`'s form); for ``auto``, why,
    and the step model its trial compiled and warmed (``step_model``: the run steps with it, so
    it compiles once), or None (a run compiles ``mode`` itself, :func:`compiled`)."""

    mode: str
    reason: str = ""
    step_model: nn.Module | None = field(default=None, compare=False, repr=False)

    @property
    def measured(self) -> str:
        """The mode alone, as the run records it (``measured.compile``)."""
        return self.mode.split(" ")[0]


class Timed(NamedTuple):
    """One rank's trial of one mode: ms per pass, the seconds before the timed passes (the first
    pass, where compiling happens, and the warm-up), or the error that ended it."""

    ms: float = 0.0
    seconds: float = 0.0
    error: str | None = None


def _sync(device: torch.device) -> None:
    if device.type == "cuda" and torch.cuda.is_initialized():
        torch.cuda.synchronize(device)


def _free(device: torch.device) -> None:
    """Give the memory of a failed pass back (an out-of-memory error leaves its blocks cached)."""
    if device.type == "cuda" and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def time_passes(
    model: nn.Module, trial: Trial, device: torch.device, warmup: int = 2, rounds: int = 3, passes: int = 5
) -> tuple[float, float]:
    """(ms per pass, seconds of the warm-up) of ``trial`` on ``model`` as it is (compiled or not):
    ``warmup`` untimed passes first (CUDA graphs are recorded there), then ``rounds`` rounds of
    ``passes`` timed ones, the device synchronised at each end; the median round's time per pass,
    so one round slowed by something else on the machine moves nothing."""
    _sync(device)
    start = time.perf_counter()
    for _ in range(warmup):
        trial(model)
    _sync(device)
    warm = time.perf_counter() - start
    per_round = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(passes):
            trial(model)
        _sync(device)
        per_round.append(1000 * (time.perf_counter() - start) / passes)
    return statistics.median(per_round), warm


class _Kept:
    """A model's parameters, buffers, gradients and train / eval modes, put back in place: into
    the same storage, so the CUDA graphs of a compiled model that steps with them stay valid."""

    def __init__(self, model: nn.Module) -> None:
        tensors = {id(t): t for t in itertools.chain(model.parameters(), model.buffers())}.values()
        self.tensors = [(t, t.detach().clone()) for t in tensors]
        self.grads = [(p, None if p.grad is None else p.grad.detach().clone()) for p in model.parameters()]
        self.modes = [(m, m.training) for m in model.modules()]

    def restore(self) -> None:
        with torch.no_grad():
            for tensor, saved in self.tensors:
                tensor.copy_(saved)
        for p, grad in self.grads:
            p.grad = grad
        for module, training in self.modes:
            module.training = training


def _alone(value: Any) -> list[Any]:
    """:data:`Agree` of a run in one process."""
    return [value]


def _error(exc: BaseException) -> str:
    said = (str(exc).strip().splitlines() or [""])[0][:160]
    return f"{type(exc).__name__}: {said}" if said else type(exc).__name__


def _run_trial(
    build: Callable[[], nn.Module], mode: str, trial: Trial, measure: Measure, agree: Agree, device: torch.device
) -> tuple[list[Timed], nn.Module | None]:
    """Every rank's :class:`Timed` of the step model ``build`` makes (in rank order) and that
    model. One pass runs first (compiling happens in it) and every rank says how it went before
    any rank starts the timed passes, so a rank whose pass failed never leaves the others
    waiting in a collective of the next pass (SyncBatchNorm's all_gather, DDP's all_reduce);
    the timed passes are agreed again."""
    step_model, failure = None, None
    start = time.perf_counter()
    try:
        step_model = build()
        trial(step_model)
        _sync(device)  # an asynchronous CUDA error is raised here, inside the guard
    except Exception as exc:  # noqa: BLE001 - any failure of the trial leaves the run eager
        failure = _error(exc)
    first = time.perf_counter() - start
    if failure:
        _free(device)
    everyone = agree(Timed(seconds=first, error=failure))
    if any(t.error for t in everyone):
        return everyone, step_model
    try:
        ms, warm = measure(step_model, mode)
        mine = Timed(ms, first + warm)
    except Exception as exc:  # noqa: BLE001
        mine = Timed(error=_error(exc))
    if mine.error:
        _free(device)
    return agree(mine), step_model


def _failed(outcomes: list[Timed]) -> str | None:
    """The first failure among the ranks' outcomes, naming its rank when there are several."""
    for rank, t in enumerate(outcomes):
        if t.error:
            return f"rank {rank}: {t.error}" if len(outcomes) > 1 else t.error
    return None


def _weigh(eager_ms: float, compiled_ms: float, seconds: float, steps: int | None) -> tuple[bool, str]:
    """Whether the compiled step is worth keeping, and the figures that say so: at least
    :data:`MIN_GAIN` faster than eager, and the run's ``steps`` saving at least :data:`MIN_REPAY`
    times the compile's ``seconds``."""
    faster = 1.0 - compiled_ms / eager_ms
    how = f"{faster:.0%} faster" if faster >= 0 else f"{-faster:.0%} slower"
    gain_ok = compiled_ms <= (1.0 - MIN_GAIN) * eager_ms
    figures = f"{compiled_ms:.1f} ms/step against {eager_ms:.1f} ms eager, {how} ({MIN_GAIN:.0%} needed)"
    if steps is None:
        return gain_ok, f"{figures}; compiled in {seconds:.0f} s (the run's length unknown: not weighed)"
    saved = steps * (eager_ms - compiled_ms) / 1000.0
    repaid = max(saved, 0.0) / seconds if seconds > 0 else math.inf
    figures += f"; compiled in {seconds:.0f} s, repaid {repaid:.1f}x by {steps} steps ({MIN_REPAY:g}x needed)"
    return gain_ok and saved >= MIN_REPAY * seconds, figures


def choose_compile(
    asked: str,
    model: nn.Module,
    device: torch.device,
    trial: Trial | None,
    measure: Measure | None = None,
    *,
    compiler: Compiler = compiled,
    agree: Agree | None = None,
    steps: int | None = None,
    minutes: float | None = None,
    variable_shapes: str | None = None,
) -> CompileChoice:
    """The compile mode for the recipe's ``compile``; ``auto`` is decided here, once, the same on
    every rank:

    * off CUDA: ``off`` (``auto: eager on cpu``), nothing timed;
    * a domain whose batches change shape (``variable_shapes``, its reason): ``off``, said so;
    * on CUDA: ``trial`` (one forward and backward pass) on ``model`` itself, eager, then compiled
      in ``reduce-overhead`` by ``compiler``, each timed by ``measure`` (default
      :func:`time_passes`). Every rank's outcome is gathered by ``agree`` (under torchrun
      ``all_gather_object``; one process: itself) and the decision is taken on the gathered
      list, so every rank takes it at the same point: the slowest rank's time, and any rank's
      failure. A failure (an out-of-memory error, a domain that returns no views, a compiler
      error) leaves the run eager and names it; an eager step over :data:`COMPUTE_BOUND_MS`
      stays eager without compiling; the compiled step is kept only when it is
      :data:`MIN_GAIN` faster and the run's steps (``steps``, at most what ``minutes`` holds
      at the eager rate) save :data:`MIN_REPAY` times its compile time. A kept compiled model
      is returned as ``step_model``: the run steps with it and compiles nothing again.

    ``model`` comes back as it was: its parameters, buffers (BatchNorm statistics), gradients
    and modes are put back in place, the random state is forked, and the optimizer and the
    objective's queue or bank are never touched, so the run trains as it would have with the
    mode chosen."""
    if asked != "auto":
        return CompileChoice(compile_mode(asked, device))
    if device.type != "cuda":
        return CompileChoice("off", f"auto: eager on {device.type}")
    if variable_shapes:
        return CompileChoice("off", f"auto: eager, {variable_shapes}")
    if trial is None:
        return CompileChoice("off", "auto: eager (no trial step to time)")
    agree = agree or _alone
    timer = measure or (lambda m, mode: time_passes(m, trial, device))
    index = torch.cuda.current_device() if device.index is None and torch.cuda.is_available() else device.index
    kept, compiled_tried, keep = _Kept(model), False, False
    with torch.random.fork_rng(devices=[] if index is None else [index]):
        try:
            eager, _ = _run_trial(lambda: model, "off", trial, timer, agree, device)
            kept.restore()
            failed = _failed(eager)
            if failed:
                return CompileChoice("off", f"auto: eager; the trial's eager pass failed ({failed})")
            eager_ms = max(t.ms for t in eager)
            slowest = f" on the slowest of {len(eager)} ranks" if len(eager) > 1 else ""
            if eager_ms > COMPUTE_BOUND_MS:
                return CompileChoice(
                    "off", f"auto: the step takes {eager_ms:.0f} ms{slowest}, compute-bound; compile=default to try"
                )
            compiled_tried = True
            timed, step_model = _run_trial(lambda: compiler(model, AUTO_MODE), AUTO_MODE, trial, timer, agree, device)
            failed = _failed(timed)
            if failed:
                return CompileChoice("off", f"auto: {AUTO_MODE} failed ({failed}), eager")
            run_steps = steps
            if steps is not None and minutes:
                run_steps = max(1, min(steps, int(minutes * 60_000 / eager_ms)))
            compiled_ms, seconds = max(t.ms for t in timed), max(t.seconds for t in timed)
            keep, figures = _weigh(eager_ms, compiled_ms, seconds, run_steps)
            if keep:
                return CompileChoice(AUTO_MODE, f"auto: {figures}{slowest}", step_model)
            return CompileChoice("off", f"auto: eager; {AUTO_MODE} {figures}{slowest}")
        finally:
            kept.restore()
            if compiled_tried and not keep:
                torch.compiler.reset()  # the graphs and CUDA-graph pool of a mode not kept go
                _free(device)
