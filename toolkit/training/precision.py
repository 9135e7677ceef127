"""Which floating-point precision a run computes in, and why.

A recipe asks for ``precision: auto | fp32 | bf16 | fp16``; a run resolves it once, on the
device it runs on, and says what it chose and why (one printed line; the run logs the request
as its ``precision`` param, a setting, and the value used as ``measured.precision``):

* ``auto`` on CUDA: bf16 where the GPU supports it (Ampere and later), else fp16 with the
  gradient scaler; a domain that cannot scale its losses (RL) gets fp32 there instead.
* ``auto`` on CPU: bf16 only where the CPU computes it natively (x86 AVX512-BF16 or AMX with
  torch dispatching its AVX-512 kernels; aarch64 cores with the BF16 extension, as torch reports
  them), else fp32. Elsewhere bf16 is emulated: about 10x slower than fp32 on an AVX2-only EPYC
  (vision quickstart: 58 against 586 images/s), and oneDNN refuses some bf16 kernels outright.
* an explicit ``bf16`` on a CPU without native bf16 (or on a GPU without it) is refused before
  anything runs, naming what is missing and the fix.

:func:`cpu_bf16` is the one place that decides whether this CPU has native bf16. Set
``CTK_CPU_BF16=native`` or ``CTK_CPU_BF16=none`` to override it (tests drive both branches so on
any machine; ``none`` also lets a user keep a fast CPU to fp32). ``ATEN_CPU_CAPABILITY=avx2`` and
``ONEDNN_MAX_CPU_ISA=AVX2`` (torch's and oneDNN's own caps) are honoured: under them the CPU
counts as having no native bf16, since neither library then uses its bf16 instructions.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from functools import lru_cache

import torch

__all__ = [
    "PRECISIONS",
    "Choice",
    "CpuBf16",
    "autocast_dtype",
    "cpu_bf16",
    "cpu_model",
    "machine_line",
    "machine_params",
    "problem",
    "resolve",
    "OVERRIDE_ENV",
]

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
OVERRIDE_ENV = "CTK_CPU_BF16"
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# oneDNN ISA caps below the first ISA with bf16 arithmetic (avx512_core_bf16)
_ONEDNN_NO_BF16 = {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX512_CORE", "AVX512_CORE_VNNI"}


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The autocast dtype of a resolved ``precision`` (None for fp32)."""
    return _DTYPES.get(precision)


@dataclass(frozen=True)
class CpuBf16:
    """Whether this CPU computes bf16 natively; ``feature`` says what decided it, in words."""

    native: bool
    feature: str


@dataclass(frozen=True)
class Choice:
    """A resolved precision: ``value`` (fp32 / bf16 / fp16), what the recipe asked for and why."""

    value: str
    requested: str
    reason: str

    def line(self) -> str:
        return f"precision {self.requested} -> {self.value}: {self.reason}"


@lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's model name (``AMD EPYC``, ``Intel(R) Xeon(R) ...``), or the architecture."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _has(name: str, flag: str) -> bool:
    """torch's CPUID probe ``torch.cpu._is_<name>_supported`` where it exists, else the flag in
    /proc/cpuinfo."""
    probe = getattr(torch.cpu, f"_is_{name}_supported", None)
    if probe is not None:
        try:
            return bool(probe())
        except RuntimeError:
            pass
    return flag in _cpu_flags()


def cpu_bf16() -> CpuBf16:
    """Does this CPU compute bf16 natively? ``CTK_CPU_BF16=native|none`` overrides the answer."""
    forced = os.environ.get(OVERRIDE_ENV, "").strip().lower()
    if forced in ("native", "1", "yes", "true"):
        return CpuBf16(True, f"{OVERRIDE_ENV}={forced}")
    if forced in ("none", "0", "no", "false", "emulated"):
        return CpuBf16(False, f"{OVERRIDE_ENV}={forced}")
    capability = torch.backends.cpu.get_cpu_capability()
    machine = platform.machine().lower()
    if machine in ("aarch64", "arm64"):
        native = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        return CpuBf16(native, f"aarch64 {'with' if native else 'without'} the BF16 extension ({capability})")
    if machine not in ("x86_64", "amd64"):
        return CpuBf16(False, f"{machine} ({capability})")
    amx, avx512_bf16 = _has("amx_tile", "amx_bf16"), _has("avx512_bf16", "avx512_bf16")
    if not (amx or avx512_bf16):
        return CpuBf16(False, capability)
    found = "AMX" if amx else "AVX512-BF16"
    if not capability.upper().startswith(("AVX512", "AMX")):
        return CpuBf16(False, f"{found} present but torch dispatches {capability} kernels (ATEN_CPU_CAPABILITY)")
    isa = (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "").strip().upper()
    if isa in _ONEDNN_NO_BF16:
        return CpuBf16(False, f"{found} present but oneDNN is capped at {isa} (ONEDNN_MAX_CPU_ISA)")
    return CpuBf16(True, found)


def machine_line() -> str:
    """One line naming the machine a figure was measured on: CPU model, torch's CPU capability,
    native bf16 or not, torch version (and the GPU when there is one)."""
    bf16 = cpu_bf16()
    line = (
        f"machine: {cpu_model()} ({platform.machine()}), {os.cpu_count()} cores, torch "
        f"{torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
        f"bf16 {'native' if bf16.native else 'not native'} ({bf16.feature})"
    )
    if torch.cuda.is_available():
        line += f"; GPU: {torch.cuda.get_device_name(0)}"
    return line


def machine_params() -> dict[str, str]:
    """The machine a run runs on, as plain values (a run logs them as ``env.*`` params,
    :mod:`toolkit.tracking.measured`): torch's CPU capability, native bf16 or not, the CPU model,
    the GPU (``none`` without CUDA), the torch version and its CPU threads."""
    bf16 = cpu_bf16()
    return {
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_bf16": "native" if bf16.native else "not native",
        "cpu_model": cpu_model(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
        "torch": torch.__version__,
        "threads": str(torch.get_num_threads()),
    }


def _cuda_bf16(device: torch.device) -> bool:
    return torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)


def problem(requested: str, device: torch.device | str) -> str | None:
    """Why ``requested`` cannot run well on ``device`` (None when it can): an explicit bf16
    where the hardware lacks it."""
    device = torch.device(device)
    if requested == "bf16":
        if device.type == "cpu":
            bf16 = cpu_bf16()
            if not bf16.native:
                return (
                    f"this CPU ({cpu_model()}) has no native bf16: it needs AVX512-BF16 or AMX "
                    f"(x86) or the BF16 extension (aarch64); found {bf16.feature}. Emulated bf16 "
                    "runs about 10x slower than fp32 here (and some oneDNN kernels refuse it). "
                    "Use precision: auto (fp32 on this CPU) or fp32; set "
                    f"{OVERRIDE_ENV}=native to run bf16 anyway"
                )
        elif device.type == "cuda" and not _cuda_bf16(device):
            return (
                f"this GPU ({torch.cuda.get_device_name(device)}) has no bf16 support; use "
                "precision: auto (fp16 with loss scaling) or fp16"
            )
    return None


def resolve(
    requested: str,
    device: torch.device | str,
    allowed: tuple[str, ...] = ("fp32", "bf16", "fp16"),
    auto_fp32: str | None = None,
) -> Choice:
    """The precision a run on ``device`` computes in. ``allowed`` is what the domain's trainer
    supports (RL: no fp16); ``auto_fp32``, a domain's reason to keep ``auto`` at fp32 everywhere.
    Raises ValueError with :func:`problem`'s message for an explicit value this hardware cannot
    run well."""
    device = torch.device(device)
    if requested != "auto":
        why = problem(requested, device)
        if why is not None:
            raise ValueError(why)
        return Choice(requested, requested, "as the recipe asks")
    if auto_fp32:
        return Choice("fp32", requested, auto_fp32)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        if _cuda_bf16(device) and "bf16" in allowed:
            return Choice("bf16", requested, f"{name} supports bf16")
        if "fp16" in allowed:
            return Choice("fp16", requested, f"{name} has no bf16; fp16 with the gradient scaler")
        return Choice("fp32", requested, f"{name} has no bf16 and this domain does not scale losses for fp16")
    if device.type == "cpu":
        bf16 = cpu_bf16()
        if bf16.native and "bf16" in allowed:
            return Choice("bf16", requested, f"this CPU has native bf16 ({bf16.feature})")
        if bf16.native:
            return Choice("fp32", requested, "this domain does not run bf16")
        return Choice("fp32", requested, f"this CPU has no native bf16 ({bf16.feature})")
    return Choice("fp32", requested, f"no mixed precision on {device.type}")
