"""Recipes: one YAML file per experiment, validated before anything runs.

A recipe has the common sections below plus the sections its domain owns (``data``,
``encoder``, ``evaluation`` and any the domain adds), which the domain validates with its own
pydantic models. Every problem is reported as ``path.in.the.file: what was wrong (got X);
expected Y`` and collected, so one run of ``ctk show`` lists them all.

Component sections name a registered component and its arguments in one mapping::

    objective:
      loss: {name: cacr, t_pos: 1.0, t_neg: 2.0}
      regularizers: [{name: distance_polarization, weight: 0.1, d_plus: 0.1, d_minus: 0.5}]
      negatives: {source: queue, size: 4096, momentum: 0.99}
      selector: {name: ring, lower: 0, upper: 90, schedule: {name: linear, ...}}
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class Section(BaseModel):
    """Base of recipe sections: unknown keys are errors, and so are NaN and infinities (no
    recipe value means them; YAML's ``.nan`` / ``.inf`` are refused where a number goes)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class Component(BaseModel):
    """``{name: registered_name, **arguments}``; the arguments are checked against the
    component's constructor when the objective is built (see ``toolkit.objective``)."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    name: str

    @property
    def args(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class Regularizer(Component):
    weight: float = Field(1.0, ge=0)


class SelectorSection(Component):
    """``objective.selector``: a registered selector's name, its arguments and an optional
    schedule of one argument (the selector objects are in ``toolkit.samplers``)."""

    name: str = "all"
    schedule: Component | None = None


class Negatives(Section):
    """Where negatives come from.

    in_batch:     the other instances of the batch (SimCLR); with ``gather`` across ranks.
    queue:        a FIFO of ``size`` keys from a momentum encoder (MoCo), EMA ``momentum``.
    memory_bank:  one slot per dataset index (instance discrimination), slots updated with
                  ``bank_momentum`` (new = m * old + (1 - m) * z, renormalised).
    support_set:  a FIFO of ``size`` past online embeddings of the first view (NNCLR's support
                  set: the queue's mechanism, filled with ``views[:, 0]`` after the loss, no
                  momentum encoder).
    """

    source: Literal["in_batch", "queue", "memory_bank", "support_set"] = "in_batch"
    size: int = Field(65536, ge=1)
    momentum: float = Field(0.999, ge=0, le=1)
    bank_momentum: float = Field(0.5, ge=0, lt=1)
    key_encoder: Literal["auto", "momentum", "none"] = "auto"


class DistributedSection(Section):
    """``distributed``: batch-norm across ranks under ``--nproc`` / ``--nnodes`` (no effect in
    one process).

    sync_bn:     SyncBatchNorm: BN statistics over the global batch (GPUs only, as torch's).
    shuffle_bn:  MoCo Sec. 3.3: the momentum (key) encoder sees the global batch shuffled across
                 ranks, then un-shuffled, so per-rank BN statistics cannot leak which key is
                 the positive.
    """

    sync_bn: bool = False
    shuffle_bn: bool = False


class _MLPSection(Section):
    """The layers of an MLP the objective owns (:class:`toolkit.heads.MLPHead`)."""

    hidden: list[int] = Field(default_factory=lambda: [512], description="hidden layer sizes")
    batch_norm: bool = True
    last_batch_norm: bool = Field(False, description="BatchNorm1d(affine=False) on the output (MoCo v3)")

    @field_validator("hidden")
    @classmethod
    def _sizes(cls, hidden: list[int]) -> list[int]:
        if any(h < 1 for h in hidden):
            raise ValueError(f"hidden sizes must be >= 1, got {hidden}")
        return hidden


class PredictorSection(_MLPSection):
    """``objective.predictor``: an MLP on the online embeddings (BYOL, SimSiam, MoCo v3, NNCLR),
    trained with the encoder; the losses that read ``predictions`` compare its output with the
    target's embeddings. ``out_dim`` null: the embedding's size. BYOL: hidden [4096] (ImageNet) /
    [512] (CIFAR) with batch norm; SimSiam: a [512] bottleneck with batch norm; MoCo v3: [4096]
    with batch norm and a batch norm after the last layer (``last_batch_norm``, without affine)."""

    out_dim: int | None = Field(None, ge=1, description="output size (null: the embedding's)")
    identity: bool = Field(
        False, description="no predictor at all (p = z): the papers' ablation (SimSiam Table 1, BYOL Table 5)"
    )
    fixed_lr: bool = Field(
        False,
        description="the predictor keeps the optimizer's base learning rate while the rest follows the "
        "schedule (SimSiam Sec. 4.2: 'fix lr' of the predictor)",
    )


class ProjectorSection(_MLPSection):
    """``objective.projector``: an MLP the objective puts between the domain's embedding and the
    loss (Barlow Twins' and VICReg's "expander", BYOL's projector) where the domain's encoder has
    no head of its own (quick-thought's sentence embeddings, CURL's features): the loss, the
    predictor and the regularizers read its output, the probes still read the embedding. With a
    target network the target's projector is an EMA copy of it at the target's momentum."""

    hidden: list[int] = Field(default_factory=lambda: [1024], description="hidden layer sizes")
    out_dim: int = Field(1024, ge=1, description="output size")


class TargetSection(Section):
    """``objective.target``: the target network the online one is compared with (BYOL, MoCo v3,
    DINO's teacher): an exponential moving average of the encoder and its head, with no gradient,
    its momentum following ``schedule`` from ``momentum`` to ``final_momentum`` over the run
    (BYOL's cosine: tau_k = 1 - (1 - tau_0) (cos(pi k / K) + 1) / 2). ``momentum: 0`` is SimSiam:
    no copy at all, the target is the online embedding of the same pass with its gradient
    stopped."""

    momentum: float = Field(0.996, ge=0, le=1)
    final_momentum: float = Field(1.0, ge=0, le=1)
    schedule: Literal["cosine", "constant"] = "cosine"
    stop_gradient: bool = Field(
        True, description="momentum 0 only: false lets the gradient through the target (SimSiam Fig. 2's ablation)"
    )

    @model_validator(mode="after")
    def _ablation_needs_momentum_zero(self) -> TargetSection:
        if not self.stop_gradient and self.momentum > 0:
            raise ValueError(
                f"stop_gradient: false needs momentum: 0 (an EMA target has no gradient to let through), got momentum {self.momentum}"
            )
        return self


class ObjectiveSection(Section):
    """``objective``: what :func:`toolkit.objective.from_recipe` builds into an ``Objective`` (in the trainer)."""

    loss: Component
    regularizers: list[Regularizer] = Field(default_factory=list)
    negatives: Negatives = Field(default_factory=Negatives)
    selector: SelectorSection = Field(default_factory=SelectorSection)
    views: int = Field(2, ge=1, le=32)
    projector: ProjectorSection | None = None
    predictor: PredictorSection | None = None
    target: TargetSection | None = None


class Optimizer(Section):
    name: Literal["sgd", "adam", "adamw", "lars"] = "sgd"
    lr: float = Field(0.05, gt=0)
    momentum: float = Field(0.9, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0)
    nesterov: bool = False
    betas: tuple[float, float] = (0.9, 0.999)
    trust_coefficient: float = Field(0.001, gt=0)
    scale_lr_by_batch: bool = Field(False, description="lr * batch_size / 256 (SimCLR rule)")


# The learning-rate schedules of the recipe's top-level ``schedule:`` section (``ctk list
# lr-schedules``); the selector schedules of ``objective.selector.schedule`` are another family,
# registered in ``toolkit.samplers.schedules.SELECTOR_SCHEDULES`` (``ctk list selector-schedules``).
LR_SCHEDULES = {
    "constant": "the optimizer's learning rate throughout (after any warm-up)",
    "cosine": "cosine decay from the learning rate to final_lr_fraction of it over the run (SimCLR, MoCo v2)",
    "step": "multiplied by gamma at each of milestones (epochs)",
}


class LRScheduleSection(Section):
    """``schedule``: the learning-rate schedule, after ``warmup_steps`` / ``warmup_epochs`` of linear
    warm-up (one of :data:`LR_SCHEDULES`; the selector schedules are another family)."""

    name: Literal["constant", "cosine", "step"] = "cosine"
    warmup_steps: int = Field(0, ge=0)
    warmup_epochs: float = Field(0.0, ge=0)
    milestones: list[float] = Field(default_factory=list, description="epochs (step decay)")
    gamma: float = Field(0.1, gt=0, le=1)
    final_lr_fraction: float = Field(0.0, ge=0, le=1)


class Budget(Section):
    epochs: float | None = Field(None, gt=0)
    steps: int | None = Field(None, ge=1)
    batch_size: int = Field(256, ge=1)
    eval_every: int | None = Field(None, ge=1, description="steps between evaluations (end only when unset)")
    monitor_every: int | None = Field(None, ge=1, description="steps between online kNN monitors")
    checkpoint_every: int | None = Field(
        None,
        ge=0,
        description=(
            "steps between checkpoints (environment steps in rl); unset: once per epoch (rl: every "
            "10000 environment steps); 0: no periodic checkpoints"
        ),
    )
    checkpoint_minutes: float = Field(
        10.0, ge=0, description=("also checkpoint when this much wall time passed since the last one (0: never)")
    )
    keep_checkpoints: int = Field(2, ge=1, description="the newest checkpoints kept per run")
    log_every: int = Field(10, ge=1)
    minutes: float | None = Field(
        None,
        gt=0,
        le=100_000,
        description=(
            "train for about this much wall time (steps and monitors; not the final evaluation, nor "
            "logging and checkpoints, ~7% more on the vision quickstart): the step count is fixed from "
            "the speed of timed steps before training (a sweep: once, for every point), never more "
            "than epochs / steps, logged as measured.budget_steps_fixed (replay with --set budget.steps=N)"
        ),
    )

    @model_validator(mode="after")
    def _one_length(self) -> Budget:
        if self.epochs is None and self.steps is None:
            raise ValueError("give epochs or steps (how long to train; with minutes, the most to train)")
        return self


_SCHEMES = ("sqlite", "http", "https", "postgresql", "mysql", "mssql", "file", "databricks")


def uri_form_problem(uri: str) -> str | None:
    """What is wrong with the form of a tracking URI (its scheme; ``sqlite:///PATH``), or None.
    A recipe's ``tracking.uri`` is checked with it when loaded;
    :func:`toolkit.tracking.health.check_store` also checks that the store answers."""
    scheme = uri.split(":", 1)[0].lower() if ":" in uri else ""
    if scheme == "sqlite" and not uri.startswith("sqlite:///"):
        return f"tracking URI {uri!r}: expected sqlite:///PATH"
    if scheme in _SCHEMES or scheme.startswith("postgresql+"):
        return None
    return (
        f"tracking URI {uri!r}: unknown scheme {scheme or '(none)'!r}; expected sqlite:///PATH, "
        "http(s)://HOST:PORT or a database URI"
    )


class Tracking(Section):
    experiment: str = Field("ctk", min_length=1)
    uri: str | None = Field(
        None, description="mlflow tracking URI; default $MLFLOW_TRACKING_URI, else sqlite:///./mlflow.db"
    )
    run_name: str | None = None
    log_model: bool = True
    tags: dict[str, str] = Field(default_factory=dict)
    record: list[str] = Field(default_factory=list, description="metrics of record (default: the domain's)")

    @field_validator("uri")
    @classmethod
    def _uri_form(cls, uri: str | None) -> str | None:
        problem = uri_form_problem(uri) if uri is not None else None
        if problem:
            raise ValueError(problem)
        return uri


class Paper(Section):
    """The paper's reported figures for this setting (printed by ``ctk reproduce``)."""

    source: str
    metrics: dict[str, float] = Field(default_factory=dict)
    notes: str | None = None


class Resources(Section):
    """What one run asks of a Ray cluster (``ctk sweep --jobs N`` / ``--address``): CPU cores
    (its torch thread budget too; default cores / jobs) and GPUs (1 packs one run per GPU)."""

    cpus: float | None = Field(None, gt=0)
    gpus: float = Field(0, ge=0)


class Common(Section):
    """The sections every recipe shares (the domain-owned ones are removed before this)."""

    name: str | None = None
    description: str | None = None
    domain: str
    seed: int = Field(0, ge=0)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"  # auto: toolkit.training.precision
    compile: Literal["auto", "off", "default", "reduce-overhead", "max-autotune"] = Field(
        "auto",
        description="torch.compile the training step's model in this mode (toolkit.training.speed); "
        "reduce-overhead adds CUDA graphs (CUDA only); auto: eager off CUDA, on CUDA reduce-overhead "
        "where a timed trial finds it faster; true means default, false off",
    )
    distributed: DistributedSection = Field(default_factory=DistributedSection)
    objective: ObjectiveSection | None = None
    optimizer: Optimizer = Field(default_factory=Optimizer)
    schedule: LRScheduleSection = Field(default_factory=LRScheduleSection)
    budget: Budget | None = None
    tracking: Tracking = Field(default_factory=Tracking)
    paper: Paper | None = None
    resources: Resources = Field(default_factory=Resources)

    @field_validator("compile", mode="before")
    @classmethod
    def _compile_bool(cls, value: Any) -> Any:
        """YAML reads ``on`` / ``off`` / ``true`` / ``false`` as booleans: true is ``default``."""
        return {True: "default", False: "off"}.get(value, value) if isinstance(value, bool) else value
