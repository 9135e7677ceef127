"""The toolkit's trainer for representation learning (vision, text, toy, plug-in domains).

Seeded and deterministic on CPU; logs batched metrics and the objective's records; evaluates
periodically and at the end; checkpoints model, optimizer, scheduler, grad scaler,
queues / banks, random states and the position in the epoch, so a resumed run continues to the
same result; stops with a clear message and the last good state on a non-finite loss. Ctrl-C
finishes the current step, checkpoints it and then stops (every rank at the same step under
torchrun), so no work is lost and the resumed run logs no step twice.

Precision (a resolved ``precision: fp32 | bf16 | fp16``; ``auto`` is resolved per machine by
:mod:`toolkit.training.precision` before the trainer is built): the encoder and the objective
run under ``torch.autocast`` on the run's device type (CPU honours bf16); fp16 adds a ``GradScaler``.

Host syncs: a step queues work on the device and reads nothing back. Records accumulate as
device tensors and are read once per log step (one ``tolist``); the first non-finite loss is
remembered on the device (its step and value) and checked at log steps and before every
checkpoint, so a poisoned state is never saved. Adaptive selector schedules (which follow the
loss) and ``--nproc`` stop requests (checked at log steps) are the exceptions.

Under torchrun every rank draws its own views (``views`` generator seeded by rank), shares the
shuffle-BN permutation generator, and rank 0's checkpoint holds every rank's random state.

The class is built from its named parts: this module builds the trainer and runs the loop
(``fit``, a step, what follows a step); :mod:`toolkit.training.pretrainer_state` holds its state
(checkpoints, the finite-loss watch) and :mod:`toolkit.training.pretrainer_eval` its evaluations.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Iterator
from typing import Any

import torch
from tqdm import tqdm

from toolkit import checkpoint as ckpt
from toolkit import objective as objective_mod
from toolkit.heads import cancel_gradients
from toolkit.losses.base import RunLength
from toolkit.tracking.measured import MEASURED
from toolkit.training import speed
from toolkit.training.batches import Batches, DataStop, epoch_batches, epoch_orders
from toolkit.training.budget import calibrate as calibrate_length
from toolkit.training.budget import fix_steps_from_speed
from toolkit.training.optim import build_optimizer, build_scheduler, implementation
from toolkit.training.precision import autocast_dtype
from toolkit.training.pretrainer_eval import Evaluations
from toolkit.training.pretrainer_state import CheckpointedState, LoopState
from toolkit.training.trainer import RunOptions, StopAfterStep, Trainer, select_device

__all__ = ["Pretrainer", "LoopState"]

# Rank r > 0 draws its views from seed + 1 + _RANK_STRIDE * r (rank 0 keeps a one-process run's).
_RANK_STRIDE = 7919


def to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    return batch


class Pretrainer(CheckpointedState, Evaluations, Trainer):
    """Pretrain a domain's encoder with the recipe's objective.

    Building happens here, in a fixed order (seed, data, encoder, objective, its queue / bank,
    the view generator), so two runs with one seed draw the same numbers.
    """

    def __init__(self, recipe: Any, domain: Any, tracker: Any, options: RunOptions | None = None) -> None:
        super().__init__(recipe, tracker, options)
        opts = self.options
        self.domain = domain
        dist = opts.distributed
        device = dist.device if dist else (opts.device or select_device(recipe.device))
        self.device = device
        ckpt.seed_everything(recipe.seed)
        self.data = domain.build_data(recipe)
        self.encoder = domain.build_encoder(recipe).to(device)
        layout = speed.prepare(self.encoder, device)  # before the objective copies it (a key encoder)
        self.objective = objective_mod.from_recipe(recipe)
        init_gen = torch.Generator().manual_seed(recipe.seed + 17)
        length = RunLength(lambda: self.total, len(self.data.train))  # total: fixed below (or by calibration)
        self.objective.attach(self.encoder, self._output_dim(), self.data.num_instances, init_gen, length)
        self.views_gen = torch.Generator(device=device).manual_seed(self._views_seed())
        # one permutation stream for every rank (shuffle-BN needs the same permutation everywhere)
        self.shuffle_gen = torch.Generator().manual_seed(recipe.seed + 23)
        self.model = dist.wrap(self.encoder, sync_bn=recipe.distributed.sync_bn) if dist else self.encoder
        self.key_encoder = self.objective.key_encoder
        if dist and recipe.distributed.shuffle_bn and self.key_encoder is not None:
            from toolkit.training.distributed import ShuffledKeys

            self.key_encoder = ShuffledKeys(self.key_encoder, dist, self.shuffle_gen)
        self._bad: tuple[torch.Tensor, torch.Tensor] | None = None  # (first non-finite step, its loss)
        self._rank_rng: list[Any] | None = None

        budget = recipe.budget
        self.steps_per_epoch = len(self.data.train)
        self.total = budget.steps or int(math.ceil(budget.epochs * self.steps_per_epoch))
        trained = [*self.encoder.parameters(), *self.objective.trainable_parameters()]  # + predictor, prototypes
        fixed = self.objective.fixed_lr_parameters()  # SimSiam's predictor: not scheduled
        self.optimizer = build_optimizer(trained, recipe.optimizer, budget.batch_size, fixed_lr=fixed)
        self.scheduler = build_scheduler(self.optimizer, recipe.schedule, lambda: self.total, self.steps_per_epoch)
        self.amp_dtype = autocast_dtype(recipe.precision)
        self.scaler = torch.amp.GradScaler(device.type, enabled=self.amp_dtype is torch.float16)
        choice = self._choose_compile()
        # auto's trial hands over the model it compiled and warmed: the run compiles nothing again
        self.model = choice.step_model or speed.compiled(self.model, choice.mode)
        self.speed = speed.Speed(
            layout, device.type == "cuda", implementation(self.optimizer), choice.mode, choice.reason
        )
        if self.is_main:
            print(f"[ctk] {self.speed.line()}", file=sys.stderr, flush=True)
            self.tracker.log_params({f"{MEASURED}compile": choice.measured})
        self.state = LoopState()

    @property
    def step(self) -> int:  # type: ignore[override]
        return self.state.step

    def _views_seed(self) -> int:
        dist = self.options.distributed
        return self.recipe.seed + 1 + _RANK_STRIDE * (dist.rank if dist else 0)

    def _generators(self) -> dict[str, torch.Generator]:
        return {"views": self.views_gen, "shuffle": self.shuffle_gen}

    def _choose_compile(self) -> speed.CompileChoice:
        """The recipe's ``compile`` resolved (:func:`~toolkit.training.speed.choose_compile`) on
        the run's own step model (DDP and SyncBatchNorm included), put back as it was. Under
        torchrun every rank runs the trial and the ranks' outcomes are gathered before each
        decision, so every rank takes the same one at the same point (the slowest rank's time,
        any rank's failure). The run's length weighs the compile time: ``budget.steps`` or the
        epochs, at most what ``budget.minutes`` holds."""
        dist = self.options.distributed
        return speed.choose_compile(
            self.recipe.compile,
            self.model,
            self.device,
            self._compile_trial(),
            agree=dist.all_gather_object if dist else None,
            steps=self.total,
            minutes=self.recipe.budget.minutes,
            variable_shapes=self.domain.variable_shapes,
        )

    def _rank_batch(self, batch: Any) -> Any:
        """This rank's part of a batch of the training data, as a step takes it: under torchrun an
        in-memory global batch is sharded (a sharded loader hands each rank its own already)."""
        dist = self.options.distributed
        if dist and not (isinstance(self.data.train, Batches) and self.data.train.sharded):
            return dist.shard(batch)
        return batch

    def _compile_trial(self) -> speed.Trial:
        """One forward and backward pass of a step model on the views of the batch this rank
        trains on first (sharded as a step shards it), drawn from a generator of the trial's own,
        under the run's autocast; its loss is the sum of the embeddings (or of the domain's
        scores), so no objective state (queue, bank) is touched. The batch is read at the first
        pass: a run that times nothing reads nothing. A domain whose batch has neither raises,
        and the trial leaves the run eager."""
        held: dict[str, Any] = {}

        def trial(model: torch.nn.Module) -> None:
            if not held:
                held["batch"] = to_device(self._rank_batch(next(iter(self.data.train))), self.device)
                held["gen"] = torch.Generator(device=self.device).manual_seed(self.recipe.seed + 29)
            model.zero_grad(set_to_none=True)
            with self._autocast():
                cb = self.domain.contrastive_batch(
                    held["batch"], model, None, set(), self.recipe.objective.views, 0, held["gen"]
                )
            out = cb.views if cb.views is not None else cb.scores
            if out is None:
                raise ValueError(f"domain {self.domain.name!r} returned a batch with no views and no scores")
            out.float().sum().backward()

        return trial

    def _output_dim(self) -> int:
        dim = getattr(self.encoder, "out_dim", None)
        if dim:
            return int(dim)
        batch = to_device(next(iter(self.data.train)), self.device)
        was = self.encoder.training
        self.encoder.eval()
        with torch.no_grad():
            x = self.domain.make_views(batch, 1)[:, 0][:2]
            dim = self.encoder(x).shape[-1]
        self.encoder.train(was)
        return int(dim)

    # -- training ---------------------------------------------------------------------------
    def _autocast(self) -> Any:
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def calibrate(self) -> dict[str, float]:  # toolkit.training.budget.calibrate: as a run fixes its length
        return calibrate_length(self)

    def fit(self) -> None:
        """Train to the budget: log every ``log_every`` steps, monitor, evaluate and
        checkpoint as the budget says; Ctrl-C checkpoints the step and stops."""
        state, dist = self.state, self.options.distributed
        bar = tqdm(
            total=self.total,
            initial=state.step,
            disable=not self.options.progress,
            unit="step",
            dynamic_ncols=True,
            desc=self.recipe.run_name,
        )
        self.encoder.train()
        monitor_seconds = 0.0
        if state.step == 0 and self.recipe.budget.monitor_every:
            start = time.perf_counter()
            self._monitor()  # the untrained encoder: where the time-to-accuracy curve starts
            monitor_seconds = time.perf_counter() - start
        if self.recipe.budget.minutes and state.planned_steps is None:
            fix_steps_from_speed(self, monitor_seconds)
            state = self.state  # the calibration put a copy of the loop state back
            bar.total = self.total
            bar.refresh()
        self._tick = (time.perf_counter(), state.step)
        self._clock = (time.perf_counter(), state.train_seconds)
        order = self.data.sampler if self.data.sampler is not None else self.data.train
        ordered = isinstance(order, epoch_orders())
        with StopAfterStep(allow_force=dist is None) as stop, self._data_stop():
            while state.step < self.total:
                if ordered:
                    order.set_epoch(state.epoch)
                for i, batch in epoch_batches(self.data.train, state.batch_in_epoch):
                    self._train_step(batch, i)
                    bar.update(1)
                    self._after_step(bar)
                    stopping = stop.requested if dist is None else (self._log_due() and dist.any_rank(stop.requested))
                    if stopping:
                        self.stop_now(f"step {state.step} of {self.total}")
                    if state.step >= self.total:
                        break
                else:
                    state.epoch += 1
                    state.batch_in_epoch = 0
                    continue
                break
        bar.close()
        if state.history:
            from toolkit.evaluation.plots import loss_curve_figure

            steps, values = zip(*state.history)
            self.tracker.log_figure(loss_curve_figure(list(steps), list(values)), "loss_curve")

    @contextlib.contextmanager
    def _data_stop(self) -> Iterator[None]:
        """The data gave up (:class:`DataStop`): checkpoint the last finished step, then stop."""
        try:
            yield
        except DataStop as exc:
            path = self.save_checkpoint()
            folder = self.options.checkpoint_dir
            where = (
                f"; step {self.state.step} is checkpointed in {path}, continue with: "
                f"ctk run --resume {folder.name}{exc.resume_args}"
                if path is not None and folder is not None
                else ""
            )
            raise DataStop(f"{exc}{where}", exc.resume_args) from exc

    def _train_step(self, batch: Any, index: int) -> None:
        state, dist, objective = self.state, self.options.distributed, self.objective
        batch = to_device(self._rank_batch(batch), self.device)
        with self._autocast():
            cb = self.domain.contrastive_batch(
                batch,
                self.model,
                self.key_encoder,
                objective.needs,
                self.recipe.objective.views,
                state.step,
                self.views_gen,
            )
            if dist:
                cb = dist.gather_batch(cb)
            objective.prepare(cb)
            out = objective(cb)
        self._note_finite(out.loss.detach())
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(out.loss).backward()
        cancel_gradients(state.step, self.encoder, objective)  # parts frozen for the first steps
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        objective.after_step(cb, self.encoder)
        if objective.selector is not None and objective.selector.follows_loss:  # adaptive schedules
            objective.selector.record(float(out.records["loss"]))  # the one host read of a step
        state.step += 1
        state.batch_in_epoch = index + 1
        for k, v in out.records.items():  # device tensors: read on log steps only
            v = v.detach().float() if isinstance(v, torch.Tensor) else float(v)
            state.sums[k] = v + state.sums[k] if k in state.sums else v
        state.count += 1

    def _after_step(self, bar: Any) -> None:
        state, budget = self.state, self.recipe.budget
        start, before = self._clock
        state.train_seconds = before + time.perf_counter() - start
        if self._log_due():
            self._log_train(bar)
        if budget.monitor_every and state.step % budget.monitor_every == 0:
            self._monitor()
        if budget.eval_every and state.step % budget.eval_every == 0 and state.step < self.total:
            state.metrics = self._evaluate()
            self._progress(state.metrics)
        if self._checkpoint_due():
            self.save_checkpoint()
        for hook in self.options.hooks:
            hook(state.step)

    def _log_due(self) -> bool:
        return self.state.step % self.recipe.budget.log_every == 0 or self.state.step == self.total

    def _checkpoint_due(self) -> bool:
        """Every ``budget.checkpoint_every`` steps (default: once per epoch; 0: never), and
        whenever ``budget.checkpoint_minutes`` of wall time passed since the last one."""
        budget, step = self.recipe.budget, self.state.step
        every = self.steps_per_epoch if budget.checkpoint_every is None else budget.checkpoint_every
        if every and step % every == 0:
            return True
        minutes = budget.checkpoint_minutes
        return bool(every and minutes and time.monotonic() - self.last_checkpoint_time >= 60 * minutes)

    def _log_train(self, bar: Any) -> None:
        state = self.state
        self._check_finite()
        self._settle_sums()
        avg = {f"train/{k}": v / state.count for k, v in state.sums.items()}
        now = time.perf_counter()
        tick, tick_step = self._tick
        rate = (state.step - tick_step) * self.recipe.budget.batch_size / max(now - tick, 1e-9)
        self._tick = (now, state.step)
        avg["train/lr"] = self.optimizer.param_groups[0]["lr"]
        avg["train/epoch"] = state.epoch + state.batch_in_epoch / self.steps_per_epoch
        state.history.append((state.step, avg["train/loss"]))
        data = self.data.train.metrics() if isinstance(self.data.train, Batches) else {}
        self.tracker.log_metrics(
            {**avg, **data, "train/samples_per_s": rate, "train/wall_seconds": state.train_seconds}, state.step
        )
        bar.set_postfix(loss=f"{avg['train/loss']:.4f}", rate=f"{rate:.0f}/s")
        state.sums, state.count = {}, 0
