"""DINO: self-distillation from a momentum teacher with a centred, sharpened output
(:func:`toolkit.losses.functional.dino`)."""

from __future__ import annotations

import torch
from torch import Tensor

from toolkit import checks
from toolkit.losses import functional as F
from toolkit.losses.base import LOSSES, ContrastiveBatch, ContrastiveLoss, LossOutput, RunLength, require
from toolkit.losses.modules.batch_io import batch_views


@LOSSES.register("dino", description="DINO: the student's softmax against the centred, sharpened momentum teacher's")
class DINO(ContrastiveLoss):
    """DINO (Caron et al. 2021, Alg. 1, Sec. 3.1): cross-entropy of the teacher's
    ``softmax((t - c) / tau_t)`` on each global view against the student's
    ``log_softmax(s / tau_s)`` on every other view (multi-crop's local views included), averaged
    over the pairs. The teacher is ``objective.target`` (EMA 0.996 -> 1) with the encoder's head
    (a :class:`~toolkit.heads.DINOHead` in the paper); its temperature rises linearly from
    ``warmup_teacher_temperature`` to ``teacher_temperature`` over ``warmup_epochs``; the centre
    ``c`` follows the teacher's batch mean (global under torchrun) with ``center_momentum``,
    after the loss."""

    two_branches = True

    needs = ("views", "keys")
    parts = ("target",)

    def __init__(
        self,
        student_temperature: float = 0.1,
        teacher_temperature: float = 0.07,
        warmup_teacher_temperature: float = 0.04,
        warmup_epochs: float = 30.0,
        center_momentum: float = 0.9,
    ) -> None:
        super().__init__()
        self.student_temperature = checks.positive("student_temperature", student_temperature)
        self.teacher_temperature = checks.positive("teacher_temperature", teacher_temperature)
        self.warmup_teacher_temperature = checks.positive("warmup_teacher_temperature", warmup_teacher_temperature)
        self.warmup_epochs = checks.non_negative("warmup_epochs", warmup_epochs)
        self.center_momentum = checks.in_range("center_momentum", center_momentum, 0.0, 1.0, high_open=True)
        self.length = RunLength()
        self.register_buffer("center", torch.zeros(1, 1))

    def attach(self, dim: int, length: RunLength) -> None:
        self.length = length
        self.center = torch.zeros(1, dim)

    def teacher_temperature_at(self, step: int) -> float:
        """Linear warm-up from ``warmup_teacher_temperature`` over ``warmup_epochs``, then flat."""
        warm = self.warmup_epochs * self.length.steps_per_epoch
        if step >= warm:
            return self.teacher_temperature
        return self.warmup_teacher_temperature + (self.teacher_temperature - self.warmup_teacher_temperature) * (
            step / warm
        )

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        require(batch, "dino", "views", "keys")
        student = batch_views(batch, "dino").transpose(0, 1)  # [V_s, B, K]
        teacher = batch.keys[:, : batch.num_global].transpose(0, 1)  # [V_t, B, K]
        tau_t = self.teacher_temperature_at(batch.step)
        loss = F.dino(
            student,
            teacher,
            self.center,
            student_temperature=self.student_temperature,
            teacher_temperature=tau_t,
        )
        return LossOutput(loss, {"teacher_temperature": tau_t})

    @torch.no_grad()
    def after_step(self, batch: ContrastiveBatch) -> None:
        if batch.keys is None:
            return
        teacher: Tensor = batch.keys[:, : batch.num_global].float()
        mean = teacher.reshape(-1, teacher.shape[-1]).mean(0, keepdim=True)
        self.center.mul_(self.center_momentum).add_(mean, alpha=1 - self.center_momentum)
