"""A selector that follows a schedule: :class:`ScheduledSelector` wires a step schedule
(:mod:`toolkit.samplers.schedules`) to one argument of a registered selector
(:mod:`toolkit.samplers.selectors`), e.g. Ring's annealed ``theta_outer``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from torch import Tensor

from toolkit import checks
from toolkit.samplers.schedules import Schedule, make_schedule

if TYPE_CHECKING:
    from toolkit.samplers.selectors import NegativeSelector

__all__ = ["ScheduledSelector"]


class ScheduledSelector:
    """A negative selector whose argument follows a schedule: ``(sims, step) -> keep-mask``.

    ``selector`` is a registered selector's name (``all``, ``hard``, ``ring``, or one a plug-in
    registered in ``toolkit.samplers.SELECTORS``) or a :class:`NegativeSelector` instance, with
    ``args``. ``schedule`` drives the argument named ``param`` (default: the selector's own,
    e.g. ``theta_outer`` / ``lower`` for ring, ``alpha`` / ``num_hard`` for hard), replacing its
    fixed value. Ring annealing as in the paper's code is
    ``ScheduledSelector("ring", {"theta_inner": 0.1}, linear(1.0, 0.1, S))``.
    """

    def __init__(
        self,
        selector: str | NegativeSelector,
        args: Mapping[str, Any] | None = None,
        schedule: Schedule | float | Mapping[str, Any] | None = None,
        param: str | None = None,
    ) -> None:
        from toolkit.samplers.selectors import make_selector

        self.selector = make_selector(selector, args) if isinstance(selector, str) else selector
        self.name = self.selector.name
        self.schedule = None if schedule is None else make_schedule(schedule)
        if self.schedule is not None:
            self.param = param or self.selector.default_param()
            if self.selector.keeps_all or self.param is None:
                raise checks.ArgumentError(
                    "param",
                    f"param {self.param!r} cannot be scheduled for selector {self.name!r}; "
                    f"expected one of {list(self.selector.arguments)}",
                )
            self.selector.check_param(self.param)
        else:
            self.param = param
        self.selector.check_missing(self.param if self.schedule is not None else None)
        # Validate now (first step and the end of the schedule), not during training.
        for at in (0, 1 << 62):
            self.selector.check(self.arguments(at))

    @property
    def args(self) -> dict[str, Any]:
        return self.selector.args

    def arguments(self, step: int = 0) -> dict[str, Any]:
        """The mask's arguments in force at ``step`` (ring in percentiles)."""
        args = dict(self.selector.args)
        if self.schedule is not None:
            value = self.schedule(step)
            args[self.param] = int(round(value)) if self.param == "num_hard" else value
        return self.selector.resolve(args)

    def __call__(self, sims: Tensor, step: int = 0) -> Tensor:
        return self.selector.mask(sims, **self.arguments(step))

    @property
    def follows_loss(self) -> bool:
        """Whether :meth:`record` wants the training loss after every step (an adaptive
        schedule, :attr:`Schedule.follows_metric`); otherwise the loop does not read it back."""
        return self.schedule is not None and self.schedule.follows_metric

    def record(self, metric: float) -> None:
        """Feed the training loss to the schedule (only one that follows a metric uses it)."""
        if self.schedule is not None:
            self.schedule.record(metric)

    def state_dict(self) -> dict[str, Any]:
        return {"schedule": None if self.schedule is None else self.schedule.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if self.schedule is not None and state.get("schedule") is not None:
            self.schedule.load_state_dict(state["schedule"])

    def __repr__(self) -> str:
        return f"ScheduledSelector({self.name!r}, {self.args!r}, schedule={self.schedule!r}, param={self.param!r})"
