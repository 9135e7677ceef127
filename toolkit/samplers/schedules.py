"""Threshold schedules driven by the training step (a selector that follows one:
:mod:`toolkit.samplers.scheduled`).

Ring (Wu et al. 2021, Sec. 4 "Annealing Policy" and App. E) anneals its negative threshold
during training; Wang & Liu's hard quantile can be scheduled the same way. A schedule is a
small object with ``__call__(step) -> float`` and ``state_dict`` / ``load_state_dict`` (so a
resumed run continues where it stopped); the adaptive one follows a metric instead
(``follows_metric``; the loop feeds it the training loss through ``record(metric)``).

Ring's released code (``src/utils/policy.py``) evaluates its policy at every optimisation step
and anneals ``thres_outer`` (theta_o, the fraction of the queue kept, closest first) from 1.0
to 0.1 while ``thres_inner`` (theta_i) stays 0.1; in percentiles ``w_l = 100 (1 - theta_o)``
goes 0 -> 90 and ``w_u = 100 (1 - theta_o theta_i)`` goes 90 -> 99 (docs/methods.md, section
ring). The shipped configs do not anneal.
"""

from __future__ import annotations

import math
import numbers
from collections import deque
from collections.abc import Mapping
from typing import Any, ClassVar

from toolkit import checks
from toolkit.registry import Registry

__all__ = [
    "Schedule",
    "ConstantSchedule",
    "LinearSchedule",
    "StepSchedule",
    "StaircaseSchedule",
    "ExponentialSchedule",
    "AdaptiveSchedule",
    "constant",
    "linear",
    "step",
    "staircase",
    "exponential",
    "adaptive",
    "SELECTOR_SCHEDULES",
    "make_schedule",
]

SELECTOR_SCHEDULES: Registry[type[Schedule]] = Registry("selector schedule")


def _finite(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def _count(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def _step(step: int) -> int:
    if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
        raise checks.ArgumentError("step", f"step must be an integer >= 0 (the global optimisation step), got {step!r}")
    return int(step)


class Schedule:
    """A value as a function of the global step. Subclasses set ``name`` and ``value(step)``."""

    name: ClassVar[str] = ""
    #: True for a schedule whose value follows a recorded metric (:meth:`record`) rather than the
    #: step alone: the loop then reads the loss back every step to feed it (a host read)
    follows_metric: ClassVar[bool] = False

    def __call__(self, step: int) -> float:
        return float(self.value(_step(step)))

    def value(self, step: int) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def config(self) -> dict[str, Any]:
        """Constructor arguments (what ``make_schedule`` needs to rebuild this schedule)."""
        return {}

    def record(self, metric: float) -> None:
        """Feed a monitored metric (only the adaptive schedule uses it)."""

    def state_dict(self) -> dict[str, Any]:
        return {"name": self.name, **self.config()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("name") != self.name:
            raise ValueError(f"state_dict is for schedule {state.get('name')!r}, not {self.name!r}")
        mine = self.config()
        other = {k: state[k] for k in mine if k in state}
        if other != mine:
            raise ValueError(f"state_dict was saved by {self.name} with {other}, this one has {mine}")

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.config().items())
        return f"{type(self).__name__}({args})"


@SELECTOR_SCHEDULES.register("constant")
class ConstantSchedule(Schedule):
    """``v(s) = value`` for every step."""

    name = "constant"

    def __init__(self, value: float) -> None:
        self.value_ = _finite("value", value)

    def value(self, step: int) -> float:
        return self.value_

    def config(self) -> dict[str, Any]:
        return {"value": self.value_}


@SELECTOR_SCHEDULES.register("linear")
class LinearSchedule(Schedule):
    """Ring repo linear policy: ``v(s) = init - (init - final) * s / (S - 1)`` for ``s < S``,
    then ``final`` (so ``v(0) = init`` and ``v(S - 1) = final``; ``S = 1`` gives ``final``)."""

    name = "linear"

    def __init__(self, init: float, final: float, steps: int) -> None:
        self.init = _finite("init", init)
        self.final = _finite("final", final)
        self.steps = _count("steps", steps)

    def value(self, step: int) -> float:
        if step >= self.steps - 1:
            return self.final
        return self.init - (self.init - self.final) * step / (self.steps - 1)

    def config(self) -> dict[str, Any]:
        return {"init": self.init, "final": self.final, "steps": self.steps}


@SELECTOR_SCHEDULES.register("step")
class StepSchedule(Schedule):
    """Multiplicative step decay: ``v(s) = init * gamma ** floor(s / every)``, held at ``final``
    once it passes it (if ``final`` is given)."""

    name = "step"

    def __init__(self, init: float, gamma: float, every: int, final: float | None = None) -> None:
        self.init = _finite("init", init)
        self.gamma = checks.positive("gamma", gamma)
        self.every = _count("every", every)
        self.final = None if final is None else _finite("final", final)

    def value(self, step: int) -> float:
        v = self.init * self.gamma ** (step // self.every)
        if self.final is not None:
            v = max(v, self.final) if self.gamma <= 1 else min(v, self.final)
        return v

    def config(self) -> dict[str, Any]:
        return {"init": self.init, "gamma": self.gamma, "every": self.every, "final": self.final}


@SELECTOR_SCHEDULES.register("staircase")
class StaircaseSchedule(Schedule):
    """Ring repo step policy: levels ``init, init - size, ..., final`` (``n = round((init -
    final) / size) + 1`` of them), each held ``floor(steps / n)`` steps, then ``final``."""

    name = "staircase"

    def __init__(self, init: float, final: float, size: float, steps: int) -> None:
        self.init = _finite("init", init)
        self.final = _finite("final", final)
        self.size = checks.positive("size", size)
        self.steps = _count("steps", steps)
        self.levels = int(round(abs(self.init - self.final) / self.size)) + 1
        self.hold = max(1, self.steps // self.levels)

    def value(self, step: int) -> float:
        k = step // self.hold
        if k >= self.levels - 1:
            return self.final
        return self.init - math.copysign(self.size * k, self.init - self.final)

    def config(self) -> dict[str, Any]:
        return {"init": self.init, "final": self.final, "size": self.size, "steps": self.steps}


@SELECTOR_SCHEDULES.register("exponential")
class ExponentialSchedule(Schedule):
    """Exponential approach from ``init`` to ``final`` over ``steps``, then ``final``.

    ``decay=None`` (default): geometric interpolation ``v(s) = init * (final / init) **
    (s / (S - 1))`` (needs ``init`` and ``final`` of the same sign, non-zero), exact at both ends.
    ``decay=r``: the Ring repo's ``ExponentialDecayThresholdPolicy``, ``v(s) = (init - final) *
    exp(-r s) + final`` for ``s < S`` (it jumps to ``final`` at ``S`` unless ``r S`` is large).
    """

    name = "exponential"

    def __init__(self, init: float, final: float, steps: int, decay: float | None = None) -> None:
        self.init = _finite("init", init)
        self.final = _finite("final", final)
        self.steps = _count("steps", steps)
        self.decay = None if decay is None else checks.positive("decay", decay)
        if self.decay is None and (self.init == 0 or self.final == 0 or (self.init > 0) != (self.final > 0)):
            raise ValueError(
                f"geometric interpolation needs init and final of the same sign and "
                f"non-zero, got init={init!r}, final={final!r}; pass decay= for the "
                "additive form"
            )

    def value(self, step: int) -> float:
        if step >= self.steps - (1 if self.decay is None else 0):
            return self.final
        if self.decay is not None:
            return (self.init - self.final) * math.exp(-self.decay * step) + self.final
        return self.init * (self.final / self.init) ** (step / (self.steps - 1))

    def config(self) -> dict[str, Any]:
        return {"init": self.init, "final": self.final, "steps": self.steps, "decay": self.decay}


@SELECTOR_SCHEDULES.register("adaptive")
class AdaptiveSchedule(Schedule):
    """Ring App. E adaptive policy, as the authors' ``AdaptiveThresholdPolicy`` implements it.

    The value does not depend on the step. After each ``record(metric)`` the metric is compared
    with the mean of the previous ``window`` recorded metrics: if it is better (lower when
    ``lower_is_better``, e.g. the training loss every step; higher otherwise, e.g. a validation
    accuracy every epoch) the threshold is lowered by ``delta`` (harder negatives, a smaller
    theta_o); if it is worse the threshold is raised by ``delta``; if equal it stays. The value is
    clipped to ``[low, high]`` (App. E: 10% is "the lowest allowed threshold"). The first record
    has nothing to compare with and changes nothing. (App. E's sentence says "lowers the
    threshold ... if the performance increases, otherwise decreasing"; the code raises it.)
    """

    name = "adaptive"
    follows_metric = True

    def __init__(
        self,
        init: float = 1.0,
        low: float = 0.1,
        high: float = 1.0,
        delta: float = 0.01,
        window: int = 10,
        lower_is_better: bool = True,
    ) -> None:
        self.init = _finite("init", init)
        self.low = _finite("low", low)
        self.high = _finite("high", high)
        if not self.low <= self.init <= self.high:
            raise checks.ArgumentError("init", f"init must lie in [low, high] = [{low!r}, {high!r}], got {init!r}")
        self.delta = checks.positive("delta", delta)
        self.window = _count("window", window)
        self.lower_is_better = bool(lower_is_better)
        self.current = self.init
        self.history: deque[float] = deque(maxlen=self.window)

    def value(self, step: int) -> float:
        return self.current

    def record(self, metric: float) -> None:
        metric = _finite("metric", metric)
        if self.history:
            reference = sum(self.history) / len(self.history)
            better = metric < reference if self.lower_is_better else metric > reference
            if metric != reference:
                self.current += -self.delta if better else self.delta
                self.current = min(self.high, max(self.low, self.current))
        self.history.append(metric)

    def config(self) -> dict[str, Any]:
        return {
            "init": self.init,
            "low": self.low,
            "high": self.high,
            "delta": self.delta,
            "window": self.window,
            "lower_is_better": self.lower_is_better,
        }

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "current": self.current, "history": list(self.history)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.current = float(state["current"])
        self.history = deque((float(v) for v in state["history"]), maxlen=self.window)


# The brief's lower-case names: ``linear(1.0, 0.1, 1000)(step)``.
constant = ConstantSchedule
linear = LinearSchedule
step = StepSchedule
staircase = StaircaseSchedule
exponential = ExponentialSchedule
adaptive = AdaptiveSchedule


def make_schedule(spec: Schedule | float | Mapping[str, Any]) -> Schedule:
    """A schedule from a recipe value: a number (constant), ``{name: linear, init: 1.0, ...}``
    or an existing schedule."""
    if isinstance(spec, Schedule):
        return spec
    if isinstance(spec, (int, float)) and not isinstance(spec, bool):
        return ConstantSchedule(spec)
    if isinstance(spec, Mapping):
        args = dict(spec)
        name = args.pop("name", None)
        if name is None:
            raise ValueError(
                f"a schedule needs a name (one of {', '.join(SELECTOR_SCHEDULES.names())}), got {dict(spec)!r}"
            )
        try:
            cls = SELECTOR_SCHEDULES.get(name)
        except KeyError as err:
            raise ValueError(str(err.args[0])) from None
        try:
            return cls(**args)
        except TypeError as err:
            raise ValueError(f"schedule {name!r}: {err}") from None
    raise ValueError(f"schedule must be a number, a mapping with a name, or a Schedule, got {spec!r}")
