"""SentEval-style evaluation of sentence encoders (see ``engine`` for the face and the modes,
``tasks`` for the loaders, ``classifier`` for the probe, ``baselines`` for the anchors)."""

from domains.text.senteval.baselines import BagOfWords, EncoderEmbedder
from domains.text.senteval.classifier import ProbeResult, kfold_accuracy, pair_features, split_accuracy
from domains.text.senteval.engine import MODES, ProbeSettings, evaluate_tasks, quick_accuracy, run_task, settings_for
from domains.text.senteval.tasks import TASKS, Task, load_task, subsample

__all__ = [
    "BagOfWords",
    "EncoderEmbedder",
    "ProbeResult",
    "kfold_accuracy",
    "pair_features",
    "split_accuracy",
    "MODES",
    "ProbeSettings",
    "evaluate_tasks",
    "quick_accuracy",
    "run_task",
    "settings_for",
    "TASKS",
    "Task",
    "load_task",
    "subsample",
]
