"""The precision-sensitive tests again, on this machine made to look like an AVX2-only CPU.

``ATEN_CPU_CAPABILITY=avx2`` makes torch dispatch its AVX2 kernels and ``ONEDNN_MAX_CPU_ISA=AVX2``
caps oneDNN below its bf16 instructions, so bf16 is emulated as on an AMD EPYC without AVX-512.
What they do not reproduce: torch's CPUID probes (``torch.ops.mkldnn._is_mkldnn_bf16_supported``)
still see the real CPU, so the oneDNN error such a CPU raises for a bf16 convolution may not
appear; ``CTK_CPU_BF16`` and the forced fallback in ``test_precision_choice`` cover that branch.
On a CPU that is already AVX2 with nothing above it (the AMD EPYC), the emulated run would repeat
the suite's own run of the same tests under the same kernels, and is left out.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHOICE = "tests/pipeline/test_precision_choice.py::"
# the tests whose outcome depends on the CPU's kernels or its detection; the rest of
# test_precision_choice drives the detection through CTK_CPU_BF16 and gives the same result on
# any CPU, so the native run of the suite covers it
SENSITIVE = [
    CHOICE + "test_detection_without_override_agrees_with_the_cpu_flags",
    CHOICE + "test_bf16_convolutions_without_onednn_bf16_take_aten_and_match",
    "tests/rl/test_precision.py",
    "tests/vision/test_precision.py",
    "tests/core/test_autocast.py",
]


# instructions above AVX2 that the emulation hides (from torch's kernels and from oneDNN)
ABOVE_AVX2 = ("avx512", "amx", "avx_vnni", "avx_ne_convert")


def hides_nothing(machine: str, capability: str, flags: set[str], env: dict[str, str]) -> bool:
    """Whether the emulation would change nothing on this machine: an x86 CPU on which torch
    already dispatches AVX2 kernels by itself and which has no instruction above AVX2."""
    return (
        machine.lower() in ("x86_64", "amd64")
        and "ATEN_CPU_CAPABILITY" not in env
        and "ONEDNN_MAX_CPU_ISA" not in env
        and capability == "AVX2"
        and not any(f.startswith(ABOVE_AVX2) for f in flags)
    )


@pytest.mark.parametrize(
    "machine, capability, flags, env, expected",
    [
        ("x86_64", "AVX2", {"avx", "avx2", "fma"}, {}, True),  # the AMD EPYC without AVX-512
        ("x86_64", "AVX512", {"avx2", "avx512f", "avx512_bf16"}, {}, False),
        ("x86_64", "AVX2", {"avx2", "avx512f", "avx512_bf16"}, {}, False),  # torch capped below the CPU
        ("x86_64", "AVX2", {"avx2", "avx_vnni", "avx_ne_convert"}, {}, False),  # oneDNN could use these
        ("x86_64", "AVX2", {"avx2"}, {"ATEN_CPU_CAPABILITY": "avx2"}, False),  # already emulated: read nothing
        ("aarch64", "DEFAULT", {"asimd"}, {}, False),
    ],
)
def test_the_emulation_is_left_out_only_where_it_hides_nothing(machine, capability, flags, env, expected):
    assert hides_nothing(machine, capability, flags, env) is expected


@pytest.mark.slow
def test_precision_sensitive_tests_pass_under_avx2_emulation():
    import platform

    import torch

    from toolkit.training.precision import _cpu_flags

    if hides_nothing(platform.machine(), torch.backends.cpu.get_cpu_capability(), _cpu_flags(), dict(os.environ)):
        pytest.skip(
            "this CPU is already AVX2 without anything above it: the suite's own run of the "
            "precision-sensitive tests is the emulated branch"
        )
    env = {k: v for k, v in os.environ.items() if k not in ("CTK_CPU_BF16", "PYTEST_ADDOPTS")}
    env.update(ATEN_CPU_CAPABILITY="avx2", ONEDNN_MAX_CPU_ISA="AVX2")
    probe = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.stdout.strip() == "AVX2", probe.stdout + probe.stderr  # the emulation is in force
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", *SENSITIVE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    tail = "\n".join(out.stdout.splitlines()[-25:])
    assert out.returncode == 0, tail + out.stderr[-3000:]
    assert " passed" in tail and "failed" not in tail, tail


SCRIPT = ROOT / "scripts" / "like-avx2.sh"
PROBE = (
    "import os, torch; from toolkit.training.precision import cpu_bf16; "
    "print(torch.backends.cpu.get_cpu_capability(), os.environ['ONEDNN_MAX_CPU_ISA'], cpu_bf16().native); "
    "print(open('/proc/self/cgroup').read())"
)


def _like_avx2(*command: str) -> subprocess.CompletedProcess:
    env = {
        k: v for k, v in os.environ.items() if k not in ("CTK_CPU_BF16", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")
    }
    return subprocess.run(
        ["bash", str(SCRIPT), "--cpus", "1.9", "--", *command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _leftover_groups() -> list[Path]:
    roots = [Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/cpu")]
    return [p for r in roots if r.is_dir() for p in r.glob("ctk-like-avx2-*")]


def test_like_avx2_script_runs_the_command_with_avx2_kernels_and_no_native_bf16():
    before = _leftover_groups()
    out = _like_avx2(sys.executable, "-c", PROBE)
    assert out.returncode == 0, out.stderr
    first = out.stdout.splitlines()[0]
    assert first == "AVX2 AVX2 False", out.stdout  # what `precision: auto` reads: fp32
    if "cannot make a cgroup" in out.stderr:  # not root: the kernels only, and it says so
        assert "ctk-like-avx2" not in out.stdout
    else:  # the command ran inside the capped group, which is gone afterwards
        assert "CPU capped at 1.9 cores (emulated)" in out.stderr
        assert "ctk-like-avx2-" in out.stdout, out.stdout
        assert _leftover_groups() == before


def test_like_avx2_script_returns_the_commands_exit_status():
    out = _like_avx2(sys.executable, "-c", "raise SystemExit(3)")
    assert out.returncode == 3, out.stderr
    assert _like_avx2("true").returncode == 0
