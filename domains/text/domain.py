"""The text domain: quick-thought sentence encoders (Logeswaran & Lee 2018) on contiguous
books, SentEval-style evaluation (LMCL Sec. 5.3, Table 4, Fig. 5).

A step: a batch of contiguous sentences -> ``f``, ``g`` -> the score matrix ``f(s).g(c)`` with
the neighbour positives (``quickthought.quick_thought_batch``) -> any score-level core loss
(``info_nce`` = the QT softmax, ``dcl``, ``hcl``) plus view-based regularizers (LMCL's DP on
the normalised f/g embeddings). Evaluation: the six transfer tasks, the held-out geometry
(alignment, uniformity, DP margin occupancy, distance histogram), and, when asked, the
random-encoder and bag-of-words baselines.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import nn

from domains.base import DataBundle, Domain, Encoder, Evaluation
from domains.text.config import DataConfig, EncoderConfig, EvaluationConfig
from domains.text.corpora import load_corpus, split_by_book
from domains.text.diagnostics import neighbour_top1, sentence_collapse, sentence_geometry
from domains.text.encoders import (
    BagOfWordsSentenceEncoder,
    GRUSentenceEncoder,
    QuickThoughtEncoder,
    TransformerSentenceEncoder,
)
from domains.text.quickthought import neighbour_pair_batch, quick_thought_batch
from domains.text.sampling import ContiguousBatches, SentenceTable
from domains.text.senteval import (
    BagOfWords,
    EncoderEmbedder,
    evaluate_tasks,
    load_task,
    quick_accuracy,
    settings_for,
    subsample,
)
from domains.text.tokenizer import SentenceTokenizer, train_tokenizer
from toolkit.losses.base import ContrastiveBatch

__all__ = ["TextDomain", "build_quick_thought_encoder"]


def build_quick_thought_encoder(
    cfg: EncoderConfig, tokenizer: SentenceTokenizer, max_length: int = 30
) -> QuickThoughtEncoder:
    """f and g with separate parameters (the authors' code keeps separate word embeddings)."""

    def one() -> nn.Module:
        if cfg.kind == "bow":
            return BagOfWordsSentenceEncoder(tokenizer.vocab_size, cfg.embedding_dim, tokenizer.pad_id, cfg.init_scale)
        if cfg.kind == "gru":
            return GRUSentenceEncoder(
                tokenizer.vocab_size,
                cfg.embedding_dim,
                cfg.hidden_size,
                cfg.bidirectional,
                cfg.num_layers,
                tokenizer.pad_id,
                cfg.init_scale,
            )
        return TransformerSentenceEncoder(
            tokenizer.vocab_size,
            cfg.hidden_size,
            cfg.num_layers,
            cfg.num_heads,
            cfg.intermediate_size,
            max_length,
            tokenizer.pad_id,
            cfg.pretrained,
        )

    return QuickThoughtEncoder(one(), one(), tokenizer)


def _trained_tokenizer(key: str, books: Any, cfg: Any, max_length: int) -> SentenceTokenizer:
    """The tokenizer trained on ``books`` with ``cfg``, trained once per data section and kept
    under ``<data root>/tokenizers/``. The ``tokenizers`` trainers break frequency ties at the
    vocabulary's edge differently from run to run, so a tokenizer trained again (a resumed run,
    a second seed) could differ from the one the checkpoint's embeddings belong to."""
    import hashlib
    import os

    from toolkit.data.root import data_root

    folder = data_root() / "tokenizers"
    path = folder / f"{hashlib.sha256(key.encode()).hexdigest()[:20]}.json"
    if path.is_file():
        return SentenceTokenizer.load(path, max_length)
    tokenizer = train_tokenizer(
        (s for b in books for s in b.sentences), cfg.kind, cfg.vocab_size, cfg.lowercase, cfg.min_frequency, max_length
    )
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tokenizer.save(tmp)
    os.replace(tmp, path)  # atomic: a concurrent run reads a whole file or none
    return tokenizer


def _hub_unavailable(package: str, model: str | None = None) -> str | None:
    """Why the Hugging Face hub cannot serve ``model`` (or, without one, stream a data set)
    through ``package`` here, or None: the package is missing, or the hub is off
    (``HF_HUB_OFFLINE``, which ctk sets unless the environment says otherwise) and the model is
    not in the local cache."""
    import importlib.util
    import os

    if importlib.util.find_spec(package) is None:
        return f"needs the {package!r} package (pip install 'ctk[text]')"
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() not in ("1", "true", "yes", "on"):
        return None
    if model is not None:
        try:
            from huggingface_hub import try_to_load_from_cache

            if isinstance(try_to_load_from_cache(model, "config.json"), str):
                return None
        except Exception:  # noqa: BLE001 - any failure means: not usable from the cache
            pass
        return (
            "it is not in the local Hugging Face cache and HF_HUB_OFFLINE is set; set "
            "HF_HUB_OFFLINE=0 on a machine with a network"
        )
    return "HF_HUB_OFFLINE is set; set HF_HUB_OFFLINE=0 on a machine with a network"


def _log(message: str) -> None:
    print(f"[text] {message}", file=sys.stderr, flush=True)


class TextDomain(Domain):
    """Quick-thought on contiguous books; SentEval-style transfer evaluation."""

    name: ClassVar[str] = "text"
    description: ClassVar[str] = (
        "quick-thought sentence encoders on contiguous books (Austen, "
        "BookCorpus, any folder); SentEval-style MR/CR/SUBJ/MPQA/TREC/MSRP"
    )
    DataConfig = DataConfig
    EncoderConfig = EncoderConfig
    EvaluationConfig = EvaluationConfig
    single_process_only = (
        "quick-thought batches are scored by the domain (scores / positive_mask), which "
        "cannot be gathered across ranks yet"
    )
    variable_shapes = "text batches are padded to their longest sentence (a recompile and a CUDA graph per width)"

    def __init__(self, recipe: Any) -> None:
        super().__init__(recipe)
        self._prepared: dict[str, Any] = {}
        self._tasks: dict[str, Any] = {}

    # -- data and tokenizer ---------------------------------------------------------------
    @classmethod
    def result_metrics(cls, recipe: Any) -> dict[str, str]:
        """Each SentEval-style task's accuracy (``msrp`` also its F1), for the trained encoder
        and each baseline (``random_``, ``bow_``), and the held-out books' geometry."""
        ev = recipe.evaluation
        out: dict[str, str] = {}
        for prefix in ["", *(f"{b}_" for b in ev.baselines)]:
            for task in ev.tasks:
                out[prefix + task] = "max"
                if task == "msrp":
                    out[prefix + "msrp_f1"] = "max"
        if ev.diagnostics:
            out["neighbour_top1"] = "max"
            out.update(
                dict.fromkeys(("alignment", "uniformity", "neg_uniformity", "tolerance", "dp_margin_occupancy"), "")
            )
        return out

    @classmethod
    def record_metrics(cls, recipe: Any) -> dict[str, tuple[str, ...]]:
        """Each evaluated task's accuracy, beside the baselines' (``random_<task>``, ``bow_<task>``)."""
        ev = recipe.evaluation
        return {task: tuple(f"{b}_{task}" for b in ev.baselines) for task in ev.tasks}

    def check_data(self, recipe: Any) -> list[tuple[str, str]]:
        """The corpus, the tokenizer file, a pretrained model and the evaluation tasks' data can
        be read here (offline corpora and tasks' offline datasets are fetched when missing)."""
        from pathlib import Path

        from domains.text.catalogue import locate
        from domains.text.corpora import OFFLINE_CORPORA
        from domains.text.senteval.tasks import unavailable

        cfg: DataConfig = recipe.data
        ev: EvaluationConfig = recipe.evaluation
        problems: list[tuple[str, str]] = []
        corpora = [cfg.corpus] if isinstance(cfg.corpus, str) else list(cfg.corpus)
        if cfg.path is not None:
            folder = Path(cfg.path)
            if not folder.is_dir():
                problems.append(("data.path", f"is not a folder: {cfg.path!r}; expected a folder of plain-text books"))
            elif cfg.corpus == "folder" and not any(folder.rglob("*.txt")):
                problems.append(("data.path", f"folder {cfg.path!r} holds no *.txt books"))
        else:
            for name in (c for c in corpora if c in OFFLINE_CORPORA):
                try:
                    locate(name, root=cfg.data_root)
                except (FileNotFoundError, ValueError) as err:
                    problems.append(("data.corpus", f"corpus {name!r} is not available: {err}"))
        if "bookcorpus" in corpora:
            why = _hub_unavailable("datasets")
            if why:
                problems.append(
                    (
                        "data.corpus",
                        f"corpus 'bookcorpus' streams from the Hugging Face hub: {why}; "
                        "offline, use a offline corpus or corpus: folder",
                    )
                )
        if cfg.tokenizer.path is not None and not Path(cfg.tokenizer.path).is_file():
            problems.append(
                (
                    "data.tokenizer.path",
                    f"is not a file: {cfg.tokenizer.path!r}; expected a "
                    "tokenizer.json (or leave it unset to train one)",
                )
            )
        if recipe.encoder.pretrained is not None:
            why = _hub_unavailable("transformers", recipe.encoder.pretrained)
            if why:
                problems.append(("encoder.pretrained", f"model {recipe.encoder.pretrained!r}: {why}"))
        tasks = list(dict.fromkeys([*ev.tasks, *([ev.monitor_task] if ev.monitor_task else [])]))
        for what, why in unavailable(tasks, ev.senteval_path, ev.data_root):
            problems.append((f"evaluation.{what}" if what == "senteval_path" else "evaluation.tasks", why))
        return problems

    def _prepare(self, recipe: Any) -> dict[str, Any]:
        """Corpus, split and tokenizer, computed once per data section (build_data and
        build_encoder both need the tokenizer)."""
        cfg: DataConfig = recipe.data
        key = json.dumps(cfg.model_dump(mode="json"), sort_keys=True)
        if self._prepared.get("key") == key:
            return self._prepared
        books = load_corpus(cfg.corpus, cfg.path, cfg.data_root, cfg.max_books, cfg.drop_headings)
        train_books, val_books = split_by_book(books, cfg.val_books)
        tok_cfg = cfg.tokenizer
        if tok_cfg.path:
            tokenizer = SentenceTokenizer.load(tok_cfg.path, cfg.max_length)
        elif recipe.encoder.pretrained:
            tokenizer = SentenceTokenizer.pretrained(recipe.encoder.pretrained, cfg.max_length)
        else:
            tokenizer = _trained_tokenizer(key, train_books, tok_cfg, cfg.max_length)
        train = SentenceTable.build(train_books, tokenizer)
        val = SentenceTable.build(val_books, tokenizer) if val_books else None
        label = cfg.corpus if isinstance(cfg.corpus, str) else " + ".join(cfg.corpus)
        _log(
            f"{label}: {len(train_books)} training books ({len(train)} sentences), "
            f"{len(val_books)} held out ({len(val) if val else 0}); vocabulary {tokenizer.vocab_size}"
        )
        self._prepared = {"key": key, "tokenizer": tokenizer, "train": train, "val": val}
        return self._prepared

    def build_data(self, recipe: Any) -> DataBundle:
        prep = self._prepare(recipe)
        cfg: DataConfig = recipe.data
        # contrastive_batch gets no recipe; the step options are fixed here (the loop builds
        # the data before the first step)
        self._window, self._score, self._self_candidate = cfg.window, recipe.encoder.score, cfg.self_candidate
        self._pairs = cfg.pairs
        batches = ContiguousBatches(
            prep["train"], prep["tokenizer"], recipe.budget.batch_size, cfg.run_length, shuffle=True, seed=recipe.seed
        )
        return DataBundle(
            train=batches,
            num_instances=len(prep["train"]),
            sampler=batches,
            eval={"val": prep["val"], "tokenizer": prep["tokenizer"]},
        )

    def build_encoder(self, recipe: Any) -> Encoder:
        prep = self._prepare(recipe)
        return build_quick_thought_encoder(recipe.encoder, prep["tokenizer"], recipe.data.max_length)

    def encoder_extras(self, encoder: nn.Module) -> dict[str, Any]:
        """The trained tokenizer (as JSON), which the encoder's vocabulary depends on."""
        return {"tokenizer": encoder.tokenizer.state()}

    def rebuild_encoder(self, extras: Mapping[str, Any]) -> nn.Module:
        tokenizer = SentenceTokenizer.from_state(dict(extras["tokenizer"]))
        return build_quick_thought_encoder(self.recipe.encoder, tokenizer, self.recipe.data.max_length)

    # -- a step ----------------------------------------------------------------------------
    def contrastive_batch(
        self,
        batch: Mapping[str, Any],
        encoder: nn.Module,
        key_encoder: nn.Module | None,
        needs: set[str],
        num_views: int,
        step: int,
        generator: torch.Generator | None = None,
    ) -> ContrastiveBatch:
        if "pairs" in needs:  # the non-contrastive family: two branches of neighbouring sentences
            unsupported = needs - {"views", "keys", "predictions", "negatives", "pairs"}
            if unsupported:
                raise ValueError(
                    f"the text domain's neighbour pairs cannot provide {sorted(unsupported)} (it has no class labels)"
                )
            return neighbour_pair_batch(
                batch, encoder, key_encoder, window=self._window, step=step, directions=self._pairs
            )
        unsupported = needs - {"views", "scores", "positive_mask", "valid_mask", "indices"}
        if unsupported:
            raise ValueError(
                f"the text domain builds quick-thought score batches; the objective "
                f"also needs {sorted(unsupported)}, which it cannot provide (use "
                "loss info_nce, dcl or hcl with negatives.source: in_batch)"
            )
        return quick_thought_batch(
            batch, encoder, window=self._window, score=self._score, self_candidate=self._self_candidate, step=step
        )

    # set by build_data from the recipe; these defaults are the paper's
    _window, _score, _self_candidate, _pairs = 1, "dot", "exclude", "forward"

    # -- evaluation ------------------------------------------------------------------------
    def _load_task(self, name: str, ev: EvaluationConfig, seed: int) -> Any:
        """One task, loaded once per set of loader settings (the monitor and the evaluation
        share it)."""
        key = json.dumps(
            [name, ev.senteval_path, ev.data_root, seed, ev.min_abs_rating, ev.msrp_pairs, ev.max_examples]
        )
        if key not in self._tasks:
            task = load_task(name, ev.senteval_path, ev.data_root, seed, ev.min_abs_rating, ev.msrp_pairs)
            self._tasks[key] = subsample(task, ev.max_examples, seed)
        return self._tasks[key]

    def _load_tasks(self, ev: EvaluationConfig, seed: int) -> list[Any]:
        return [self._load_task(name, ev, seed) for name in ev.tasks]

    def monitor(self, encoder: QuickThoughtEncoder, data: DataBundle) -> dict[str, float]:
        """``neighbour_top1`` on the held-out books and, with ``evaluation.monitor_task``, that
        task's :func:`~domains.text.senteval.quick_accuracy` (``senteval_<task>``)."""
        out: dict[str, float] = {}
        val = (data.eval or {}).get("val")
        if val is not None and len(val) >= 3:
            out["neighbour_top1"] = neighbour_top1(encoder, val, window=self._window, score=self._score)
            out.update(sentence_collapse(encoder, val))
        ev: EvaluationConfig = self.recipe.evaluation
        if ev.monitor_task is not None:
            seed = self.recipe.seed if ev.seed is None else ev.seed
            task = self._load_task(ev.monitor_task, ev, seed)
            out[f"senteval_{task.name}"] = quick_accuracy(
                EncoderEmbedder(encoder, ev.batch_size), task, ev.monitor_c, seed
            )
        return out

    def evaluate(self, encoder: QuickThoughtEncoder, data: DataBundle, recipe: Any) -> Evaluation:
        ev: EvaluationConfig = recipe.evaluation
        seed = recipe.seed if ev.seed is None else ev.seed
        settings = settings_for(
            ev.mode, folds=ev.folds, selection=ev.selection, inner_folds=ev.inner_folds, c_grid=ev.c_grid, seed=seed
        )
        tasks = self._load_tasks(ev, seed)
        metrics = evaluate_tasks(EncoderEmbedder(encoder, ev.batch_size), tasks, settings, log=_log)
        figures: dict[str, Any] = {}
        val = (data.eval or {}).get("val") if data is not None else None
        if val is not None and len(val) >= 3:  # collapse is measured on every run
            metrics.update(sentence_collapse(encoder, val, ev.batch_size))
        if ev.diagnostics and val is not None and len(val) >= 3:
            geo, figs = sentence_geometry(encoder, val, ev.diagnostic_sentences, ev.d_plus, ev.d_minus, ev.batch_size)
            metrics.update(geo)
            metrics["neighbour_top1"] = neighbour_top1(encoder, val, window=self._window, score=self._score)
            figures.update(figs)
        if "random" in ev.baselines:
            metrics.update(
                evaluate_tasks(
                    EncoderEmbedder(self.random_encoder(encoder, recipe), ev.batch_size),
                    tasks,
                    settings,
                    prefix="random_",
                    log=_log,
                )
            )
        if "bow" in ev.baselines:
            metrics.update(evaluate_tasks(BagOfWords(), tasks, settings, prefix="bow_", log=_log))
        return Evaluation(metrics={k: float(v) for k, v in metrics.items()}, figures=figures)

    def random_encoder(self, trained: QuickThoughtEncoder, recipe: Any) -> QuickThoughtEncoder:
        """An untrained encoder of the same architecture and vocabulary (seeded, without
        touching the global random state)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(recipe.seed + 7919)
            enc = build_quick_thought_encoder(recipe.encoder, trained.tokenizer, recipe.data.max_length)
        return enc.to(next(trained.parameters()).device)
