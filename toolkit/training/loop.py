"""The shared pretraining loop of representation-learning domains (vision, text, toy).

Seeded and deterministic on CPU; logs batched metrics and the objective's records; evaluates
periodically and at the end; checkpoints model, optimizer, scheduler, queues/banks, RNG states
and the position in the epoch, so ``resume`` continues a killed run to the same result; stops
with a clear message and a saved checkpoint on a non-finite loss. Ctrl-C finishes the current
step, checkpoints it and then stops (every rank at the same step under torchrun), so no work is
lost and the resumed run logs no step twice.
"""
from __future__ import annotations

import contextlib
import math
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn
from tqdm import tqdm

from toolkit import objective as objective_mod
from toolkit.training import checkpoint as ckpt
from toolkit.training.optim import build_optimizer, build_scheduler


class NonFiniteLoss(RuntimeError):
    """The loss became NaN or infinite; the message says where and what was saved."""


class StopAfterStep:
    """Ctrl-C (SIGINT) during training asks the loop to stop after the current step.

    The loop checkpoints that step and raises KeyboardInterrupt, so ``--resume`` continues
    exactly where the run stopped. With ``allow_force`` (one process) a second Ctrl-C stops at
    once; under torchrun the launcher's own timeout ends a rank that does not stop.
    """

    def __init__(self, allow_force: bool = True) -> None:
        self.requested = False
        self.allow_force = allow_force
        self._previous: Any = None

    def __enter__(self) -> "StopAfterStep":
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested and self.allow_force:
            raise KeyboardInterrupt("stopped at once (second Ctrl-C); the last periodic checkpoint is kept")
        if not self.requested:
            print("\n[ctk] Ctrl-C: stopping after this step and checkpointing it (Ctrl-C again stops at once)",
                  file=sys.stderr, flush=True)
        self.requested = True

    def __exit__(self, *exc: Any) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


@dataclass
class LoopState:
    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    sums: dict[str, float] = field(default_factory=dict)
    count: int = 0
    history: list[tuple[int, float]] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)


def select_device(name: str = "auto") -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device: 'cuda' was asked for but torch sees no CUDA device; use cpu or auto")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    return batch


def _output_dim(encoder: nn.Module, domain: Any, data: Any, device: torch.device) -> int:
    dim = getattr(encoder, "out_dim", None)
    if dim:
        return int(dim)
    batch = _to_device(next(iter(data.train)), device)
    was = encoder.training
    encoder.eval()
    with torch.no_grad():
        x = domain.make_views(batch, 1)[:, 0][:2]
        dim = encoder(x).shape[-1]
    encoder.train(was)
    return int(dim)


def pretrain(recipe: Any, domain: Any, tracker: Any, *, device: torch.device | None = None,
             resume_from: str | Path | None = None, checkpoint_path: str | Path | None = None,
             progress: bool = True, hooks: list[Callable[[int], None]] | None = None,
             distributed: Any = None) -> dict[str, float]:
    """Pretrain ``domain``'s encoder with ``recipe``'s objective; returns the final metrics.

    ``hooks`` are called with the step after each optimisation step (tests use one to stop a
    run part-way, as a kill would). ``distributed`` is a :class:`toolkit.distributed.Context`
    (or None for one process).
    """
    device = distributed.device if distributed else (device or select_device(recipe.device))
    ckpt.seed_everything(recipe.seed)
    data = domain.build_data(recipe)
    encoder = domain.build_encoder(recipe).to(device)
    objective = objective_mod.build(recipe.objective)
    init_gen = torch.Generator().manual_seed(recipe.seed + 17)
    objective.attach(encoder, _output_dim(encoder, domain, data, device), data.num_instances, init_gen)
    views_gen = torch.Generator(device=device).manual_seed(recipe.seed + 1)
    model = distributed.wrap(encoder, sync_bn=recipe.objective.negatives.shuffle_bn) if distributed else encoder

    budget = recipe.budget
    steps_per_epoch = len(data.train)
    total = budget.steps or int(math.ceil(budget.epochs * steps_per_epoch))
    optimizer = build_optimizer(encoder.parameters(), recipe.optimizer, budget.batch_size)
    scheduler = build_scheduler(optimizer, recipe.schedule, total, steps_per_epoch)
    use_amp = recipe.precision == "amp" and device.type == "cuda"
    scaler = torch.amp.GradScaler("cuda", enabled=use_amp)

    state = LoopState()
    if resume_from:
        saved = ckpt.load(resume_from, map_location=device)
        encoder.load_state_dict(saved["encoder"])
        objective.load_state_dict(saved["objective"])
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        scaler.load_state_dict(saved["scaler"])
        state = LoopState(**saved["loop"])
        ckpt.set_rng_state(saved["rng"], views_gen)
    checkpoint_path = Path(checkpoint_path) if checkpoint_path else None

    def snapshot(path: Path | None) -> Path | None:
        if path is None or (distributed and not distributed.is_main):
            return None
        return ckpt.save(path, {
            "encoder": encoder.state_dict(), "objective": objective.state_dict(),
            "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
            "scaler": scaler.state_dict(), "loop": state.__dict__, "rng": ckpt.rng_state(views_gen),
            "recipe": recipe.resolved})

    def evaluate(prefix: str = "") -> dict[str, float]:
        if distributed and not distributed.is_main:
            return {}
        encoder.eval()
        with torch.no_grad():
            result = domain.evaluate(encoder, data, recipe)
        encoder.train()
        for name, fig in result.figures.items():
            tracker.log_figure(fig, f"{name}_step{state.step}" if prefix else name)
        metrics = {f"{prefix}{k}": float(v) for k, v in result.metrics.items()}
        tracker.log_metrics(metrics, state.step)
        return metrics

    bar = tqdm(total=total, initial=state.step, disable=not progress, unit="step",
               dynamic_ncols=True, desc=recipe.run_name)
    encoder.train()
    tick, tick_step = time.perf_counter(), state.step
    sampler = getattr(data, "sampler", None) or data.train
    with StopAfterStep(allow_force=distributed is None) as stop:
        while state.step < total:
            if hasattr(sampler, "set_epoch"):
                sampler.set_epoch(state.epoch)
            for i, batch in enumerate(data.train):
                if i < state.batch_in_epoch:
                    continue
                if distributed:
                    batch = distributed.shard(batch)
                batch = _to_device(batch, device)
                autocast = torch.autocast("cuda", dtype=torch.float16) if use_amp else contextlib.nullcontext()
                with autocast:
                    cb = domain.contrastive_batch(batch, model, objective.key_encoder, objective.needs,
                                                  recipe.objective.views, state.step, views_gen)
                    if distributed:
                        cb = distributed.gather_batch(cb)
                    objective.prepare(cb)
                    out = objective(cb)
                if not torch.isfinite(out.loss):
                    where = snapshot(checkpoint_path.with_name("nonfinite.pt")) if checkpoint_path else None
                    recs = ", ".join(f"{k}={float(v):.4g}" for k, v in out.records.items())
                    raise NonFiniteLoss(
                        f"the loss is {float(out.loss.detach())} at step {state.step} (epoch {state.epoch}); records: {recs}. "
                        f"The state before this step was saved to {where or '(no checkpoint path)'}. "
                        "Lower the learning rate, raise the temperature, or check the inputs.")
                optimizer.zero_grad(set_to_none=True)
                scaler.scale(out.loss).backward()
                scaler.step(optimizer)
                scaler.update()
                scheduler.step()
                objective.after_step(cb, encoder)
                if hasattr(objective.selector, "record"):  # adaptive threshold schedules follow the loss
                    objective.selector.record(float(out.records["loss"]))
                state.step += 1
                state.batch_in_epoch = i + 1
                for k, v in out.records.items():
                    state.sums[k] = state.sums.get(k, 0.0) + float(v)
                state.count += 1
                bar.update(1)
                if state.step % budget.log_every == 0 or state.step == total:
                    avg = {f"train/{k}": v / state.count for k, v in state.sums.items()}
                    now = time.perf_counter()
                    rate = (state.step - tick_step) * budget.batch_size / max(now - tick, 1e-9)
                    tick, tick_step = now, state.step
                    avg["train/lr"] = optimizer.param_groups[0]["lr"]
                    avg["train/epoch"] = state.epoch + state.batch_in_epoch / steps_per_epoch
                    state.history.append((state.step, avg["train/loss"]))
                    tracker.log_metrics({**avg, "train/samples_per_s": rate}, state.step)
                    bar.set_postfix(loss=f"{avg['train/loss']:.4f}", rate=f"{rate:.0f}/s")
                    state.sums, state.count = {}, 0
                if (budget.monitor_every and state.step % budget.monitor_every == 0 and hasattr(domain, "monitor")
                        and (distributed is None or distributed.is_main)):
                    encoder.eval()
                    with torch.no_grad():
                        tracker.log_metrics({f"online_{k}": v for k, v in domain.monitor(encoder, data).items()}, state.step)
                    encoder.train()
                if budget.eval_every and state.step % budget.eval_every == 0 and state.step < total:
                    state.metrics = evaluate(prefix="")
                if budget.checkpoint_every and state.step % budget.checkpoint_every == 0:
                    snapshot(checkpoint_path)
                for hook in hooks or ():
                    hook(state.step)
                stopping = stop.requested if distributed is None else distributed.any_rank(stop.requested)
                if stopping:
                    snapshot(checkpoint_path)
                    raise KeyboardInterrupt(
                        f"stopped after step {state.step} of {total}, checkpointed in {checkpoint_path}; "
                        f"continue with --resume {checkpoint_path.parent.name}" if checkpoint_path else
                        f"stopped after step {state.step} of {total} (no checkpoint path, so no resume)")
                if state.step >= total:
                    break
            else:
                state.epoch += 1
                state.batch_in_epoch = 0
                continue
            break
    bar.close()
    state.metrics = evaluate()
    snapshot(checkpoint_path)
    if state.history:
        from toolkit.plots import loss_curve_figure
        steps, values = zip(*state.history)
        tracker.log_figure(loss_curve_figure(list(steps), list(values)), "loss_curve")
    if recipe.tracking.log_model:
        tracker.log_model(encoder, "encoder")
    return state.metrics
