"""The selectors: the named rules a recipe picks negatives with (``selector: {name: ring, ...}``),
registered in :data:`SELECTORS` like losses, regularizers and schedules.

Each registered selector is a :class:`NegativeSelector` subclass: it declares the arguments it
accepts, which one a schedule drives by default, how its arguments turn into the keyword
arguments of its mask function (:mod:`toolkit.samplers.masks`), and how to check them.
:class:`~toolkit.samplers.scheduled.ScheduledSelector` wraps any of them with a schedule, so a
plug-in package adds a selector with one decorated class::

    from toolkit.samplers import SELECTORS, NegativeSelector

    @SELECTORS.register("easy", description="the least similar fraction of negatives")
    class EasySelector(NegativeSelector):
        arguments = ("fraction",)
        def mask(self, sims, fraction):
            ...
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from torch import Tensor

from toolkit import checks
from toolkit.registry import Registry
from toolkit.samplers.masks import (
    RING_DEFAULT_THRESHOLDS,
    all_mask,
    check_percentiles,
    hard_count,
    hard_mask,
    ring_mask,
    ring_official_thresholds_to_percentiles,
)

__all__ = ["SELECTORS", "NegativeSelector", "AllSelector", "HardSelector", "RingSelector"]

SELECTORS: Registry[type[NegativeSelector]] = Registry("selector")


class NegativeSelector:
    """Base of registered selectors. ``args`` are the recipe's arguments; :meth:`resolve`
    turns them (with a scheduled value substituted) into :meth:`mask`'s keyword arguments."""

    arguments: ClassVar[tuple[str, ...]] = ()
    keeps_all: ClassVar[bool] = False  # True: no mask at all (the loss sees every negative)

    def __init__(self, args: Mapping[str, Any] | None = None) -> None:
        self.args = dict(args or {})
        unknown = sorted(set(self.args) - set(self.arguments))
        if unknown:
            raise ValueError(
                f"selector {self.name!r} got unknown argument(s) {unknown}; expected some of {list(self.arguments)}"
            )

    @property
    def name(self) -> str:
        """The name :data:`SELECTORS` holds the class under (for an unregistered subclass, that
        of its nearest registered base; the class name if none is registered)."""
        for cls in type(self).__mro__:
            name = SELECTORS.name_of(cls)
            if name is not None:
                return name
        return type(self).__name__

    def default_param(self) -> str | None:
        """The argument a schedule drives when the recipe names none."""
        return self.arguments[0] if self.arguments else None

    def check_param(self, param: str) -> None:
        """Raise ValueError if ``param`` cannot be scheduled."""
        if param not in self.arguments:
            raise checks.ArgumentError(
                "param",
                f"param {param!r} cannot be scheduled for selector {self.name!r}; "
                f"expected one of {list(self.arguments)}",
            )

    def check_missing(self, scheduled: str | None) -> None:
        """Raise ValueError if a required argument is neither given nor scheduled."""

    def resolve(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """The mask's keyword arguments from the arguments in force."""
        return dict(args)

    def check(self, resolved: Mapping[str, Any]) -> None:
        """Raise ValueError if resolved arguments are out of range."""

    def mask(self, sims: Tensor, **resolved: Any) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError


@SELECTORS.register("all", description="keep every candidate negative")
class AllSelector(NegativeSelector):
    keeps_all = True

    def mask(self, sims: Tensor, **resolved: Any) -> Tensor:
        return all_mask(sims)


@SELECTORS.register(
    "hard", description="Wang & Liu hard negatives: the top-k (num_hard) or top alpha-fraction most similar"
)
class HardSelector(NegativeSelector):
    """Wang & Liu 2021, Sec. 3.3, Eq. 9 (:func:`~toolkit.samplers.masks.hard_mask`)."""

    arguments = ("alpha", "num_hard")

    def default_param(self) -> str:
        return "num_hard" if "num_hard" in self.args else "alpha"

    def resolve(self, args: Mapping[str, Any]) -> dict[str, Any]:
        return {"alpha": args.get("alpha"), "num_hard": args.get("num_hard")}

    def check(self, resolved: Mapping[str, Any]) -> None:
        hard_count(1 << 62, **resolved)

    def mask(self, sims: Tensor, **resolved: Any) -> Tensor:
        return hard_mask(sims, **resolved)


_PERCENTILES = ("lower", "upper")
_OFFICIAL = ("theta_outer", "theta_inner")


@SELECTORS.register(
    "ring",
    description="Ring / CNCE: negatives between the lower and upper "
    "percentiles of similarity (or the official theta_outer / theta_inner)",
)
class RingSelector(NegativeSelector):
    """Ring (Wu et al. 2021), Sec. 4 / Alg. 1 (:func:`~toolkit.samplers.masks.ring_mask`):
    ``lower`` / ``upper`` percentiles, or the official ``theta_outer`` / ``theta_inner``
    (default the official config 0.1 / 0.1, i.e. percentiles [90, 99))."""

    arguments = _PERCENTILES + _OFFICIAL

    def __init__(self, args: Mapping[str, Any] | None = None) -> None:
        super().__init__(args)
        self.official = bool(set(self.args) & set(_OFFICIAL)) or not self.args
        if self.official and set(self.args) & set(_PERCENTILES):
            raise ValueError(
                "ring takes either lower/upper percentiles or "
                f"theta_outer/theta_inner, not both; got {sorted(self.args)}"
            )
        if self.official:
            outer, inner = RING_DEFAULT_THRESHOLDS
            self.args = {"theta_outer": outer, "theta_inner": inner, **self.args}

    def default_param(self) -> str:
        return "theta_outer" if self.official else "lower"

    def check_param(self, param: str) -> None:
        super().check_param(param)
        if (param in _OFFICIAL) != self.official:
            raise checks.ArgumentError(
                "param", f"param {param!r} does not belong to the ring parametrisation in use ({sorted(self.args)})"
            )

    def check_missing(self, scheduled: str | None) -> None:
        if not self.official:
            missing = [k for k in _PERCENTILES if k not in self.args and k != scheduled]
            if missing:
                raise ValueError(f"ring selector needs both lower and upper, missing {missing}")

    def resolve(self, args: Mapping[str, Any]) -> dict[str, Any]:
        if self.official:
            lower, upper = ring_official_thresholds_to_percentiles(args["theta_outer"], args["theta_inner"])
            return {"lower": lower, "upper": upper}
        return {"lower": args["lower"], "upper": args["upper"]}

    def check(self, resolved: Mapping[str, Any]) -> None:
        check_percentiles(resolved["lower"], resolved["upper"])

    def mask(self, sims: Tensor, **resolved: Any) -> Tensor:
        return ring_mask(sims, **resolved)


def make_selector(name: str, args: Mapping[str, Any] | None = None) -> NegativeSelector:
    """The registered selector ``name`` with ``args`` (KeyError lists the names that exist)."""
    if name not in SELECTORS:
        checks.choice("name", name, tuple(SELECTORS.names()))
    return SELECTORS.get(name)(args)
