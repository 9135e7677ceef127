"""The pretrainer's evaluations: the online monitor, the periodic and final evaluation, and the
time-to-accuracy record (:class:`Evaluations`, a base of
:class:`~toolkit.training.pretrainer.Pretrainer`). Each runs on the main process with the
encoder in eval mode and puts it back in training mode."""

from __future__ import annotations

import sys

import torch

from toolkit.evaluation.collapse import collapse_warning

__all__ = ["Evaluations"]


class Evaluations:
    """Monitor and evaluate the pretrainer's encoder (its attributes: ``encoder``, ``domain``,
    ``data``, ``recipe``, ``tracker``, ``state``, ``is_main``)."""

    def _monitor(self) -> None:
        """The domain's online metrics (``online_<name>``: ``Domain.monitor``, none by default)
        at this step, on the main process."""
        if not self.is_main:
            return
        self.encoder.eval()
        with torch.no_grad():
            online = {f"online_{k}": float(v) for k, v in self.domain.monitor(self.encoder, self.data).items()}
        self.encoder.train()
        if online:
            self.tracker.log_metrics(online, self.state.step)
            self._progress({k: v for k, v in online.items() if not _is_collapse_figure(k)})
            if self.state.step > 0:  # the untrained encoder is not judged (see toolkit.evaluation.collapse)
                self._say_collapse(online, "online_", f"at step {self.state.step}")

    def _evaluate(self) -> dict[str, float]:
        if not self.is_main:
            return {}
        self.encoder.eval()
        with torch.no_grad():
            result = self.domain.evaluate(self.encoder, self.data, self.recipe)
        self.encoder.train()
        for name, fig in result.figures.items():
            self.tracker.log_figure(fig, name)
        if result.settings:  # chosen by the evaluation: measurements, not results
            self.tracker.log_params({f"measured.evaluation.chosen.{k}": v for k, v in result.settings.items()})
        metrics = {k: float(v) for k, v in result.metrics.items()}
        self.tracker.log_metrics(metrics, self.state.step)
        self._say_collapse(metrics, "", f"at step {self.state.step} (evaluation)")
        return metrics

    def _say_collapse(self, metrics: dict[str, float], prefix: str, where: str) -> None:
        """One ``[ctk] collapse`` line when the domain's collapse figures say so (once a run per
        kind: the monitor's, the evaluation's)."""
        line = collapse_warning(metrics, prefix, where)
        said = getattr(self, "_collapse_said", set())
        if line is not None and prefix not in said:
            print(line, file=sys.stderr, flush=True)
            said.add(prefix)
            self._collapse_said = said

    def _progress(self, metrics: dict[str, float]) -> None:
        """Remember metrics against the training wall time (the time-to-accuracy plot)."""
        for name, value in metrics.items():
            self.state.progress.append([self.state.train_seconds, self.state.step, name, float(value)])

    def evaluate(self) -> dict[str, float]:
        """The final evaluation (logged at the last step) and the time-to-accuracy figure of
        every metric measured more than once (online monitor, periodic evaluations, the end);
        returns the final metrics."""
        self.state.metrics = self._evaluate()
        self._progress(self.state.metrics)
        if self.is_main:
            from toolkit.evaluation.plots import time_to_accuracy_figure

            series: dict[str, list[tuple[float, float]]] = {}
            for seconds, _, name, value in self.state.progress:
                series.setdefault(name, []).append((seconds, value))
            periodic = {k: v for k, v in series.items() if len(v) > 1}
            if periodic:
                self.tracker.log_figure(time_to_accuracy_figure(periodic), "time_to_accuracy")
        return self.state.metrics


def _is_collapse_figure(name: str) -> bool:
    return name.endswith(("embedding_std", "embedding_std_ratio", "effective_rank"))
