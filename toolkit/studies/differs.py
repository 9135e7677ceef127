"""What else differs between the runs a comparison puts side by side.

Comparisons group runs by their settings only (:mod:`toolkit.tracking.measured`); what the runs
measured or ran on can still differ, and some of it can change the result. Every comparison
(``ctk compare``, ``ctk study``, a sweep's answer on its parent run) says so in one line:

    what else differs: steps 2,573-3,353 (within all runs); CPU AVX2 / AVX512 (between groups)

The aspects compared, in this order: steps trained (``budget.minutes``' fixed steps, an RL run's
steps reached), precision used, device, CPU capability, native bf16, CPU model, GPU, Ray node
(a sweep's point on a cluster: address/node id), torch, ctk, git commit. Steps, precision and commit *confound*: a difference there can change the result,
so a group or test whose runs differ in one is marked (``confounded: steps 2,573-3,353``) and
``ctk compare --strict`` refuses to compare. A value a run did not log (runs from before the
split, domains that do not measure it) is left out rather than counted as a difference.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from toolkit.tracking.measured import measurements

__all__ = ["ASPECTS", "aspect_values", "differing", "confounds", "differs_line", "differs_parts"]


@dataclass(frozen=True)
class Aspect:
    name: str
    keys: tuple[str, ...]  # measurement keys, first found wins
    confounds: bool = False  # a difference here can change the result


ASPECTS = (
    Aspect("steps", ("measured.budget_steps_fixed", "measured.budget_steps_reached"), True),
    Aspect("precision", ("measured.precision",), True),
    Aspect("device", ("measured.device",)),
    Aspect("CPU", ("env.cpu_capability",)),
    Aspect("bf16", ("env.cpu_bf16",)),
    Aspect("CPU model", ("env.cpu_model",)),
    Aspect("GPU", ("env.gpu",)),
    Aspect("Ray node", ("env.ray_node",)),
    Aspect("torch", ("env.torch",)),
    Aspect("ctk", ("env.ctk",)),
    Aspect("commit", ("env.git_commit",), True),
)
_MAX_SHOWN = 4
NOTHING = "what else differs: nothing (steps, precision, CPU, GPU, versions, commit: alike where logged)"


def aspect_values(run: Any) -> dict[str, str]:
    """{aspect name: value} of one mlflow run (aspects it did not log are absent)."""
    found = measurements(run)
    out = {}
    for aspect in ASPECTS:
        value = next((found[k] for k in aspect.keys if found.get(k) not in (None, "")), None)
        if value is not None:
            out[aspect.name] = value
    return out


def _number(text: str) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def spread(values: Iterable[str]) -> str:
    """``2,573-3,353`` for numbers, ``bf16 / fp32`` for text (at most four values shown)."""
    values = sorted(set(values))
    numbers = [_number(v) for v in values]
    if all(n is not None for n in numbers):
        low, high = min(numbers), max(numbers)
        fmt = (lambda x: f"{int(x):,}") if all(float(n).is_integer() for n in numbers) else (lambda x: f"{x:,.4g}")
        return f"{fmt(low)}-{fmt(high)}"
    shown = " / ".join(values[:_MAX_SHOWN])
    return shown + (f" / ... ({len(values)} values)" if len(values) > _MAX_SHOWN else "")


def _by_aspect(runs: list[Any]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for run in runs:
        for name, value in aspect_values(run).items():
            out.setdefault(name, set()).add(value)
    return out


def differing(runs: list[Any], only_confounds: bool = False) -> dict[str, str]:
    """{aspect: spread} of the aspects whose logged values differ among ``runs``."""
    found = _by_aspect(runs)
    return {
        a.name: spread(found[a.name])
        for a in ASPECTS
        if len(found.get(a.name, ())) > 1 and (a.confounds or not only_confounds)
    }


def confounds(runs: list[Any]) -> str | None:
    """``steps 2,573-3,353; precision bf16 / fp32``: the confounding aspects that differ among
    ``runs``, or None."""
    found = differing(runs, only_confounds=True)
    return "; ".join(f"{k} {v}" for k, v in found.items()) or None


def differs_line(groups: list[tuple[str, list[Any]]]) -> str:
    """One line: what differs among all the runs of ``groups`` ((label, runs) pairs) besides
    their settings, and where: within which groups, and/or between groups."""
    parts = differs_parts(groups)
    if not parts:
        return NOTHING
    return "what else differs: " + "; ".join(parts)


def differs_parts(groups: list[tuple[str, list[Any]]]) -> list[str]:
    """:func:`differs_line`'s pieces, one per aspect that differs (``steps 4-7 (within all runs)``)."""
    everything = [r for _, runs in groups for r in runs]
    parts = []
    for name, values in differing(everything).items():
        per_group = [(label, _by_aspect(runs).get(name, set())) for label, runs in groups]
        within = [label for label, vals in per_group if len(vals) > 1]
        known = [frozenset(vals) for _, vals in per_group if vals]
        between = len(groups) > 1 and len(set(known)) > 1
        where = []
        if within:
            where.append(
                "within " + (", ".join(within) if len(within) <= 3 else f"{len(within)} of {len(groups)} groups")
            )
        if between:
            where.append("between groups")
        parts.append(f"{name} {values} ({' and '.join(where)})")
    return parts
