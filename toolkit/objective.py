"""The objective: loss + weighted regularizers + negative source + selector.

Built from a recipe's ``objective`` section. A step is::

    batch = domain.contrastive_batch(...)      # views (and keys from objective.key_encoder)
    objective.prepare(batch)                   # negatives from the queue / memory bank
    out = objective(batch)                     # LossOutput: total loss + records
    out.loss.backward(); optimizer.step()
    objective.after_step(batch, encoder)       # EMA key encoder, enqueue keys, bank update

so queue rows are enqueued only after the loss (an anchor never sees its own key of this step
as a negative). Queue, bank and key encoder are submodules: ``state_dict`` checkpoints them.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from toolkit import recipe as rc
from toolkit.checks import ArgumentError
from toolkit.heads import MLPHead
from toolkit.losses.base import LOSSES, ContrastiveBatch, ContrastiveLoss, LossOutput, Regularizer, RunLength
from toolkit.registry import constructor_args
from toolkit.regularizers import REGULARIZERS
from toolkit.samplers import SELECTORS, ScheduledSelector, build_selector
from toolkit.samplers.sources import MemoryBank, MoCoQueue, MomentumEncoder


class Objective(nn.Module):
    """A loss with weighted regularizers, a negative source and a selector; for the
    non-contrastive family also a predictor (an MLP on the online embeddings) and a target
    network (an EMA copy of the encoder with a momentum schedule, or SimSiam's stopped
    gradient)."""

    def __init__(
        self,
        loss: ContrastiveLoss,
        regularizers: list[tuple[str, float, Regularizer]] | None = None,
        negatives: rc.Negatives | None = None,
        selector: ScheduledSelector | None = None,
        predictor: rc.PredictorSection | None = None,
        target: rc.TargetSection | None = None,
        projector: rc.ProjectorSection | None = None,
    ) -> None:
        super().__init__()
        self.loss = loss
        regularizers = regularizers or []
        self.reg_names = [n for n, _, _ in regularizers]
        self.reg_weights = [float(w) for _, w, _ in regularizers]
        self.regularizers = nn.ModuleList([r for _, _, r in regularizers])
        self.negatives = negatives or rc.Negatives()
        self.selector = selector
        loss.attach_selector(selector)
        self.predictor_section = predictor
        self.projector_section = projector
        self.target = target
        self.length = RunLength()
        self.queue: MoCoQueue | None = None
        self.bank: MemoryBank | None = None
        self.support: MoCoQueue | None = None
        self.key_encoder: MomentumEncoder | None = None
        self.predictor: nn.Module | None = None
        self.projector: MLPHead | None = None
        self.target_projector: MomentumEncoder | None = None

    # -- set-up ---------------------------------------------------------------------------
    @property
    def needs(self) -> set[str]:
        need = set(self.loss.needs)
        for r in self.regularizers:
            need |= set(r.needs)
        if self.loss.two_branches:
            need.add("pairs")  # a domain that scores candidates itself hands two branches instead
        return need

    @property
    def uses_key_encoder(self) -> bool:
        if self.target is not None:
            return self.target.momentum > 0
        mode = self.negatives.key_encoder
        return mode == "momentum" or (mode == "auto" and self.negatives.source == "queue")

    def attach(
        self,
        encoder: nn.Module,
        dim: int,
        num_instances: int,
        generator: torch.Generator | None = None,
        length: RunLength | None = None,
        own_target: bool = True,
    ) -> None:
        """Create the stateful parts for an encoder with output size ``dim``: the queue, bank or
        support set, the key encoder / target network, the predictor and the loss's own parts
        (SwAV's prototypes, DINO's centre). ``length`` drives the schedules that follow the run
        (the target's momentum, DINO's teacher temperature). ``own_target=False``: the trainer
        keeps the target itself (CURL's momentum key encoder) and hands its embeddings in
        ``keys``; no copy is made here."""
        src = self.negatives
        self.length = length or RunLength()
        if self.projector_section is not None:
            j = self.projector_section
            self.projector = MLPHead(dim, j.hidden, j.out_dim, j.batch_norm, j.last_batch_norm)
            dim = j.out_dim  # what the sources, the predictor and the loss see
            if self.uses_key_encoder:  # the target's projector: an EMA copy, as the target's encoder
                self.target_projector = MomentumEncoder(self.projector, self.key_momentum)
        if src.source == "queue":
            self.queue = MoCoQueue(src.size, dim, generator)
        elif src.source == "memory_bank":
            self.bank = MemoryBank(num_instances, dim, src.bank_momentum, generator)
        elif src.source == "support_set":
            self.support = MoCoQueue(src.size, dim, generator)
        if self.uses_key_encoder and own_target:
            self.key_encoder = MomentumEncoder(encoder, self.key_momentum)
        if self.predictor_section is not None:
            p = self.predictor_section
            self.predictor = (
                nn.Identity()
                if p.identity
                else MLPHead(dim, p.hidden, p.out_dim or dim, p.batch_norm, p.last_batch_norm)
            )
        self.loss.attach(dim, self.length)
        device = next(encoder.parameters()).device
        self.to(device)

    @property
    def key_momentum(self) -> float:
        """The target's (or key encoder's) starting momentum."""
        return self.target.momentum if self.target is not None else self.negatives.momentum

    def trainable_parameters(self) -> list[nn.Parameter]:
        """The objective's own parameters the optimizer trains with the encoder (the predictor,
        SwAV's prototypes); the target network's are frozen."""
        return [p for p in self.parameters() if p.requires_grad]

    def fixed_lr_parameters(self) -> list[nn.Parameter]:
        """The parameters whose learning rate the schedule leaves at its base value: the
        predictor's when ``objective.predictor.fixed_lr`` (SimSiam's setting), else none."""
        if self.predictor is None or self.predictor_section is None or not self.predictor_section.fixed_lr:
            return []
        return [p for p in self.predictor.parameters() if p.requires_grad]

    def target_momentum(self, step: int) -> float | None:
        """The target network's momentum at ``step`` (None: the key encoder's constant one).
        Cosine (BYOL Sec. 3.2): ``tau_k = 1 - (1 - tau_0) (cos(pi k / K) + 1) / 2`` rising
        from ``momentum`` to ``final_momentum`` over the run's K steps."""
        t = self.target
        if t is None:
            return None
        if t.schedule == "constant":
            return t.momentum
        total = max(int(self.length.total()), 1)
        progress = min(max(step / total, 0.0), 1.0)
        return t.final_momentum - (t.final_momentum - t.momentum) * (math.cos(math.pi * progress) + 1) / 2

    def get_extra_state(self) -> Any:
        return {"selector": self.selector.state_dict() if self.selector is not None else None}

    def set_extra_state(self, state: Any) -> None:
        if state and state.get("selector") is not None and self.selector is not None:
            self.selector.load_state_dict(state["selector"])

    # -- a step ---------------------------------------------------------------------------
    def prepare(self, batch: ContrastiveBatch) -> ContrastiveBatch:
        if self.queue is not None:
            batch.negatives = self.queue.rows()
        elif self.bank is not None:
            batch.negatives = self.bank.rows()
        elif self.support is not None:
            batch.negatives = self.support.rows()
        return batch

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        if self.projector is not None and batch.views is not None:
            if batch.scores is not None:
                raise ValueError(
                    "objective.projector: the domain scored the batch itself (quick-thought's, CURL's scores), so there "
                    "are no embeddings for a projector to map; expected a loss of the non-contrastive family (byol, "
                    "barlow_twins, vicreg, ...) or no projector"
                )
            batch.views = _rows(self.projector, batch.views)
            if batch.keys is not None and self.target_projector is not None:
                with torch.no_grad():
                    batch.keys = _rows(self.target_projector, batch.keys)
        if self.predictor is not None and batch.views is not None:
            batch.predictions = _rows(self.predictor, batch.views)
        if self.target is not None and batch.keys is None and batch.views is not None:
            online = batch.views[:, : batch.num_global]  # SimSiam: the stopped gradient (or its ablation)
            batch.keys = online.detach() if self.target.stop_gradient else online
        out = self.loss(batch)
        total = out.loss
        records: dict[str, Tensor | float] = {"contrastive": out.loss.detach()}
        records.update(out.records)
        for name, weight, reg in zip(self.reg_names, self.reg_weights, self.regularizers):
            r = reg(batch)
            total = total + weight * r.loss
            records[name] = r.loss.detach()
            records.update(r.records)
        records["loss"] = total.detach()
        return LossOutput(total, records)

    @torch.no_grad()
    def after_step(self, batch: ContrastiveBatch, encoder: nn.Module) -> None:
        if self.key_encoder is not None:
            self.key_encoder.update(encoder, self.target_momentum(batch.step + 1))
        if self.target_projector is not None and self.projector is not None:
            self.target_projector.update(self.projector, self.target_momentum(batch.step + 1))
        if self.queue is not None and batch.keys is not None:
            self.queue.enqueue(batch.keys[:, 1 if batch.keys.shape[1] > 1 else 0])
        if self.bank is not None and batch.views is not None and batch.indices is not None:
            self.bank.update(batch.indices, batch.views[:, 0])
        if self.support is not None and batch.views is not None:
            self.support.enqueue(batch.views[:, 0])
        self.loss.after_step(batch)


def _rows(mlp: nn.Module, x: Tensor) -> Tensor:
    """``mlp`` on every row of ``[N, V, D]`` (all views in one batch, as the heads see them)."""
    n, v = x.shape[:2]
    return mlp(x.flatten(0, 1)).view(n, v, -1)


# ---------------------------------------------------------------------------------------
# Validation and construction from a recipe section


def _instantiate(cls: Any, args: dict[str, Any], path: str, what: str) -> tuple[Any, list[tuple[str, str]]]:
    """Construct ``cls(**args)``; unknown arguments and bad values become problems at the path
    of the offending argument (``checks.ArgumentError`` carries its name). Every bad argument is
    reported, not only the first the constructor meets: when construction fails, each known
    argument is tried alone (the others at their defaults)."""
    accepted = constructor_args(cls)
    listing = ", ".join(accepted) or "none"
    problems = [
        (f"{path}.{a}", f"unknown argument of {what}; expected one of: {listing}") for a in args if a not in accepted
    ]
    known = {a: v for a, v in args.items() if a in accepted}
    try:
        built = cls(**known)
    except (ValueError, TypeError) as exc:
        alone = []
        for a, v in known.items():
            try:
                cls(**{a: v})
            except ArgumentError as single:
                if single.arg == a:
                    alone.append((f"{path}.{a}", _message(single)))
            except (ValueError, TypeError):
                pass  # not this argument alone (a required one is missing, or a rule between two)
        return None, problems + (alone or [(_argument_path(exc, path, known), _message(exc))])
    return (None, problems) if problems else (built, [])


def _message(exc: Exception) -> str:
    """The error's text (a KeyError's without the quotes its str() adds)."""
    return str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)


def _argument_path(exc: Exception, path: str, args: dict[str, Any]) -> str:
    arg = getattr(exc, "arg", None)
    return f"{path}.{arg}" if arg in args else path


def check(obj: rc.ObjectiveSection, path: str = "objective") -> list[tuple[str, str]]:
    """Every problem of a recipe's objective section, each at its YAML path: component names,
    their arguments (each component's constructor checks its own, so the loss, regularizers and
    selector are constructed and dropped) and what they need of each other. No
    :class:`Objective` is built: the trainer builds the one a run uses, in its seeded order."""
    return _parts(obj, path)[1]


def build(obj: rc.ObjectiveSection) -> Objective:
    """Build the objective of a validated section (a RecipeError lists every problem)."""
    objective, problems = _build(obj, "objective")
    if problems:
        raise rc.RecipeError(problems)
    assert objective is not None
    return objective


def from_recipe(recipe: rc.Recipe) -> Objective:
    """Build the objective of a recipe that validation checked (each call builds a new one: the
    trainer builds its own, in its seeded order)."""
    return build(recipe.objective)


def _build_selector(sel: rc.SelectorSection, path: str) -> tuple[Any, list[tuple[str, str]]]:
    if sel.name not in SELECTORS:
        return None, [
            (f"{path}.selector.name", f"unknown selector {sel.name!r}; expected one of: {', '.join(SELECTORS.names())}")
        ]
    sched = sel.schedule
    try:
        return build_selector(sel.name, sel.args, sched.name if sched else None, sched.args if sched else {}), []
    except (ValueError, TypeError, KeyError) as exc:
        arg = getattr(exc, "arg", None)
        if sched is not None and arg in sched.args:
            where = f"{path}.selector.schedule.{arg}"
        else:
            where = f"{path}.selector.{arg}" if arg in sel.args else f"{path}.selector"
        return None, [(where, _message(exc))]


def _build(obj: rc.ObjectiveSection, path: str) -> tuple[Objective | None, list[tuple[str, str]]]:
    parts, problems = _parts(obj, path)
    if parts is None:
        return None, problems
    loss, regs, selector = parts
    return Objective(loss, regs, obj.negatives, selector, obj.predictor, obj.target, obj.projector), []


def _parts(obj: rc.ObjectiveSection, path: str) -> tuple[tuple[Any, list[Any], Any] | None, list[tuple[str, str]]]:
    """(loss, regularizers, selector) of a section, or None and every problem."""
    problems: list[tuple[str, str]] = []
    loss = None
    if obj.loss.name not in LOSSES:
        problems.append(
            (f"{path}.loss.name", f"unknown loss {obj.loss.name!r}; expected one of: {', '.join(LOSSES.names())}")
        )
    else:
        loss, p = _instantiate(LOSSES.get(obj.loss.name), obj.loss.args, f"{path}.loss", f"loss {obj.loss.name}")
        problems += p
    regs = []
    for i, spec in enumerate(obj.regularizers):
        rpath = f"{path}.regularizers.{i}"
        if spec.name not in REGULARIZERS:
            problems.append(
                (
                    f"{rpath}.name",
                    f"unknown regularizer {spec.name!r}; expected one of: {', '.join(REGULARIZERS.names())}",
                )
            )
            continue
        reg, p = _instantiate(REGULARIZERS.get(spec.name), spec.args, rpath, f"regularizer {spec.name}")
        problems += p
        if reg is not None:
            regs.append((spec.name, spec.weight, reg))
    selector, p = _build_selector(obj.selector, path)
    problems += p
    if loss is None or problems:
        return None, problems
    src = obj.negatives.source
    need = set(loss.needs)
    if "negatives" in need and src == "in_batch":
        problems.append(
            (
                f"{path}.negatives.source",
                f"loss {obj.loss.name} needs negatives from a queue, a memory bank or a support set, got 'in_batch'",
            )
        )
    if "keys" in need and not (src == "queue" or obj.negatives.key_encoder == "momentum" or obj.target is not None):
        if "predictions" in need or "target" in loss.parts:
            problems.append(
                (
                    f"{path}.target",
                    f"loss {obj.loss.name} compares with a target network: add objective.target "
                    "(e.g. {momentum: 0.996, schedule: cosine}; momentum 0 for SimSiam's stopped gradient)",
                )
            )
        else:
            problems.append(
                (f"{path}.negatives.source", f"loss {obj.loss.name} needs momentum-encoder keys: use source: queue")
            )
    if "target" in loss.parts and obj.target is None and "keys" not in need:
        problems.append((f"{path}.target", f"loss {obj.loss.name} needs objective.target (a target network)"))
    if "predictions" in need and obj.predictor is None:
        problems.append(
            (
                f"{path}.predictor",
                f"loss {obj.loss.name} reads a predictor's output: add objective.predictor (e.g. {{hidden: [512]}})",
            )
        )
    if src == "support_set" and "negatives" not in need:
        problems.append(
            (f"{path}.negatives.source", f"loss {obj.loss.name} does not read a support set; expected in_batch")
        )
    if obj.views < loss.min_views:
        problems.append(
            (f"{path}.views", f"loss {obj.loss.name} needs at least {loss.min_views} views, got {obj.views}")
        )
    if selector is not None and not loss.accepts_selector:
        problems.append(
            (
                f"{path}.selector.name",
                f"loss {obj.loss.name} does not accept a negative selector (got {obj.selector.name!r}); expected 'all'",
            )
        )
    if problems:
        return None, problems
    try:
        loss.attach_selector(selector)  # the loss's own rule for its selector (ir_ring: a ring one)
    except ValueError as exc:
        return None, [(path, str(exc))]
    return (loss, regs, selector), []
