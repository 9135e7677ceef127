"""DINO: self-distillation, a student matching a centred and sharpened teacher across views.

Conventions (docs/methods.md, section Baselines family): the teacher's
outputs and the centre are constants (detached here); the centre's EMA update and the teacher
temperature's warm-up are the caller's (they are state, not loss); the loss averages over the
pairs of different views. Nothing is read on the host.
"""

from __future__ import annotations

import torch
from torch import Tensor

from toolkit import checks

from ._precision import full_precision
from ._validation import _same_dtype

__all__ = ["dino"]


def _check_views(student: Tensor, teacher: Tensor, center: Tensor) -> tuple[int, int, int, int]:
    """``(V_s, V_t, B, K)`` of checked inputs."""
    checks.tensor("student", student, dim=3)
    checks.tensor("teacher", teacher, dim=3)
    vs, b, k = student.shape
    vt = teacher.shape[0]
    if b < 1 or k < 1:
        raise checks.ArgumentError("student", f"student must be [V_s, B, K] with B, K >= 1, got {tuple(student.shape)}")
    if teacher.shape[1:] != student.shape[1:]:
        raise checks.ArgumentError(
            "teacher",
            f"teacher must be [V_t, B, K] with the student's B and K, got {tuple(teacher.shape)} "
            f"and student {tuple(student.shape)}",
        )
    if vt > vs:
        raise checks.ArgumentError(
            "teacher",
            f"teacher has {vt} views but student only {vs}; teacher view i is student view i, so V_t <= V_s",
        )
    if vs < 2:
        raise checks.ArgumentError("student", f"student needs at least 2 views (a pair of different views), got {vs}")
    checks.tensor("center", center)
    if tuple(center.shape) not in ((k,), (1, k)):
        raise checks.ArgumentError("center", f"center must have shape ({k},) or (1, {k}), got {tuple(center.shape)}")
    _same_dtype("student", student, "teacher", teacher)
    _same_dtype("teacher", teacher, "center", center)
    return vs, vt, b, k


@full_precision
def dino(
    student: Tensor,
    teacher: Tensor,
    center: Tensor,
    student_temperature: float = 0.1,
    teacher_temperature: float = 0.04,
    *,
    stats: dict | None = None,
) -> Tensor:
    r"""DINO's cross-view distillation loss (Caron et al. 2021, Sec. 3.1, Eq. 1-4).

    With P_t^i = softmax((sg[teacher_i] - sg[c]) / tau_t) and log P_s^v = log_softmax(student_v
    / tau_s), both over the K output dimensions:

        H(i, v) = -mean_b sum_k P_t^i[b, k] log P_s^v[b, k]
        loss    = mean over the pairs (i, v), i < V_t, v < V_s, v != i, of H(i, v)

    Teacher view i is student view i (DINO: the teacher sees the 2 global crops, the student
    every crop, globals first), so there are V_t (V_s - 1) pairs. Eq. 3 sums over the pairs;
    the authors' code divides by their number, as here. Defaults: tau_s = 0.1, tau_t = 0.04
    (the start of the paper's warm-up to 0.07, which the caller schedules); the centre c is the
    caller's EMA (momentum 0.9) of the teacher's batch means.

    Args:
        student: ``[V_s, B, K]`` student head outputs (V_s >= 2; gradient flows).
        teacher: ``[V_t, B, K]`` teacher head outputs, 1 <= V_t <= V_s (a constant).
        center: ``[K]`` or ``[1, K]`` centre (a constant).
        student_temperature: tau_s > 0.
        teacher_temperature: tau_t > 0.
        stats: optional dict receiving ``teacher_entropy``, the mean entropy of P_t (a device
            tensor; log K means a uniform teacher, 0 a one-hot one: the two collapses).
    """
    vs, vt, b, k = _check_views(student, teacher, center)
    tau_s = checks.positive("student_temperature", student_temperature)
    tau_t = checks.positive("teacher_temperature", teacher_temperature)
    log_t = torch.log_softmax((teacher.detach() - center.detach().reshape(k)) / tau_t, dim=-1)
    t = log_t.exp()
    log_s = torch.log_softmax(student / tau_s, dim=-1)
    # H for every (teacher view, student view) pair at once: [V_t, B K] @ [B K, V_s]
    cross = -(t.reshape(vt, b * k) @ log_s.reshape(vs, b * k).t()) / b
    same_view = torch.eye(vt, vs, dtype=torch.bool, device=cross.device)
    loss = cross.masked_fill(same_view, 0.0).sum() / (vt * (vs - 1))
    if stats is not None:
        stats["teacher_entropy"] = -(t * log_t).sum(dim=-1).mean()
    return loss
