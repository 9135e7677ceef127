"""``VisionDomain``: image datasets, batched views, vision encoders and probes behind the
domain face of ``domains/base.py``; it shares the toolkit's pretraining loop.

What the objective gets from this domain (``Domain.contrastive_batch``): ``V`` augmented views
per image (``make_views``; K positives = V - 1 for CMC / CACR), the un-augmented natural view
(``natural_view``, CPCL's projection term), and the dataset ``index`` of every image (memory
bank slots; the MoCo queue and the momentum encoder are the toolkit's). Training batches are
``{"x": uint8 [N, C, H, W], "y": [N], "index": [N]}``; augmentation runs on the batch, on the
device the loop moved it to.

Multi-crop (``data.local_crops``, SwAV / DINO): ``make_local_views`` gives ``L`` small crops per
image (``[N, L, C, s, s]``), drawn from the same generator after the global views: in memory the
batched view family at the local size and scale; streamed, the workers' crops (the batch's
``x_local``, uint8 ``[N, L, C, s, s]``) finished on the device. Without local crops it returns
None and draws nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from domains.base import DataBundle, Domain, Evaluation
from domains.vision import datasets as ds
from domains.vision import memory_storage, stream_storage
from domains.vision.augment import BatchAugment
from domains.vision.config import DataConfig, EncoderConfig, EvaluationConfig, MonitorConfig
from domains.vision.dataset_table import entry
from domains.vision.encoders import VisionEncoder, build_backbone, size_problem
from domains.vision.views import eval_augment, training_views, view_family
from domains.vision.vit import VIT_CONFIGS, check_vit_size, default_patch_size
from toolkit.heads import DINOHead, MLPHead

__all__ = ["VisionDomain", "VisionEvalData", "storage"]

STORAGES = {"memory": memory_storage, "stream": stream_storage}


def build_head(cfg: Any, dim: int) -> torch.nn.Module:
    """The recipe's projection head on ``dim`` features (``encoder.head``)."""
    if cfg.kind == "dino":
        return DINOHead(
            dim,
            cfg.out_dim,
            hidden=cfg.hidden[0],
            bottleneck=cfg.bottleneck,
            layers=len(cfg.hidden) + 1,
            batch_norm=cfg.batch_norm,
            norm_last_layer=cfg.norm_last_layer,
            freeze_last_layer_steps=cfg.freeze_last_layer_steps,
        )
    return MLPHead(dim, cfg.hidden, cfg.out_dim, cfg.batch_norm, cfg.last_batch_norm)


def storage(dataset: str) -> Any:
    """The module that reads ``dataset`` as its table entry stores it (``memory_storage`` or
    ``stream_storage``: the same calls); the one place the domain asks how a dataset is stored."""
    return STORAGES[entry(dataset).storage]


@dataclass
class VisionEvalData:
    """What ``evaluate`` and ``monitor`` read: labelled splits (uint8) and the view family."""

    probe_train: ds.ImageSplit
    test: ds.ImageSplit
    augment: BatchAugment
    num_classes: int
    seed: int = 0
    monitor: MonitorConfig | None = None
    streams: Any = None  # folder datasets: the whole labelled splits the final probes stream


class VisionDomain(Domain):
    """CIFAR-10/100, STL-10, MNIST and Fashion-MNIST with the papers' view families (multi-crop
    included), ResNet / small-AlexNet / conv-net / ViT encoders, linear probe, weighted kNN and
    geometry diagnostics."""

    name = "vision"
    description = (
        "images: CIFAR-10/100, STL-10, (Fashion-)MNIST; batched SimCLR/MoCo-v2 views, multi-crop; "
        "ResNet, small AlexNet, conv net, ViT; linear probe, weighted kNN, geometry"
    )
    DataConfig = DataConfig
    EncoderConfig = EncoderConfig
    EvaluationConfig = EvaluationConfig

    def __init__(self, recipe: Any) -> None:
        super().__init__(recipe)
        self.augment: BatchAugment | None = None
        self.local_augment: BatchAugment | None = None

    @classmethod
    def result_metrics(cls, recipe: Any) -> dict[str, str]:
        """Probes (linear, kNN) on the trained backbone and on each baseline, and the geometry
        diagnostics (descriptive: no better direction)."""
        ev = recipe.evaluation
        out: dict[str, str] = {}
        for suffix in ["", *(f"_{b}" for b in ev.baselines)]:
            if ev.linear.enabled:
                out.update({f"linear_top1{suffix}": "max", f"linear_top5{suffix}": "max"})
            if ev.knn.enabled and suffix != "_random_init":
                out[f"knn_top1{suffix}"] = "max"
                if ev.knn.five_nn:
                    out[f"knn5_top1{suffix}"] = "max"
        if ev.diagnostics.enabled:
            out.update(
                dict.fromkeys(
                    (
                        "alignment",
                        "uniformity",
                        "neg_uniformity",
                        "tolerance",
                        "cond_entropy",
                        "dp_margin_occupancy",
                        "pos_similarity",
                        "top1_neg_similarity",
                        "top10_neg_similarity",
                    ),
                    "",
                )
            )
        return out

    @classmethod
    def record_metrics(cls, recipe: Any) -> dict[str, tuple[str, ...]]:
        """The linear probe on the trained backbone, beside the same probe on each baseline."""
        ev = recipe.evaluation
        if not ev.linear.enabled:
            return {"knn_top1": ()} if ev.knn.enabled else {}
        return {"linear_top1": tuple(f"linear_top1_{b}" for b in ev.baselines)}

    @classmethod
    def check(cls, raw: Mapping[str, Any], sections: Mapping[str, Any]) -> list[tuple[str, str]]:
        """Also: an evaluation size other than the view size needs an encoder that pools over
        any input size (the small AlexNet's classifier is sized for the views), and so do local
        crops (through the projection head too: no ResNet ``feature: prepool``); a ViT's inputs
        are multiples of its patch size, and ``patch_size`` / ``depth`` are a ViT's only."""
        problems = super().check(raw, sections)
        ev, enc, data = (sections.get(k) for k in ("evaluation", "encoder", "data"))
        if ev is not None and data is not None:
            problems += storage(data.dataset).check_sections(data, ev)
        if enc is None or data is None:
            return problems
        return problems + cls._encoder_sizes(enc, data, ev)

    @staticmethod
    def _encoder_sizes(enc: EncoderConfig, data: DataConfig, ev: EvaluationConfig | None) -> list[tuple[str, str]]:
        """What :meth:`check` asks of the encoder against the recipe's input sizes."""
        problems = []
        view, vit = data.view_size, enc.arch in VIT_CONFIGS
        if not vit:
            for key in ("patch_size", "depth"):
                if getattr(enc, key) is not None:
                    problems.append((f"encoder.{key}", f"applies to {', '.join(VIT_CONFIGS)}, got arch {enc.arch!r}"))
        patch = (enc.patch_size or default_patch_size(view)) if vit else None
        if vit and check_vit_size(view, patch):
            return [*problems, ("data.augment.size", f"the view size of {enc.arch} {check_vit_size(view, patch)}")]
        if ev is not None and ev.image_size is not None and ev.image_size != view:
            if enc.arch == "small_alexnet":
                problems.append(
                    (
                        "evaluation.image_size",
                        f"small_alexnet takes only its training view size ({view}), got {ev.image_size}; "
                        f"leave it unset or use convnet / resnet18 / resnet50",
                    )
                )
            elif vit and check_vit_size(ev.image_size, patch):
                problems.append(("evaluation.image_size", f"with {enc.arch} {check_vit_size(ev.image_size, patch)}"))
        local = data.local_crops
        if not local.number or local.size is None:
            return problems
        why = size_problem(enc.arch, view, local.size, feature=enc.feature, blocks=enc.blocks, patch_size=patch)
        if why:
            problems.append(
                (
                    "data.local_crops.size",
                    f"local crops of {local.size} px through encoder.arch {enc.arch}: {why}; set another "
                    f"size, or an encoder that takes any size (convnet, resnet18 / resnet50 with feature: "
                    f"pooled, a ViT at a multiple of its patch size)",
                )
            )
        return problems

    # -- data -------------------------------------------------------------------------------
    def check_data(self, recipe: Any) -> list[tuple[str, str]]:
        """The dataset's files are where they are read (MNIST / Fashion-MNIST fetched; a folder
        dataset's every problem at once)."""
        return storage(recipe.data.dataset).check_data(recipe)

    def load_train(self, recipe: Any) -> ds.ImageSplit:
        """The pretraining images of an in-memory dataset (imbalanced / subset as the recipe says)."""
        return memory_storage.load_train(recipe)

    def load_eval(self, recipe: Any) -> VisionEvalData:
        """The probes' labelled splits and the view family at the evaluation size."""
        aug = eval_augment(view_family(recipe.data), recipe.evaluation)
        probe, test, num_classes, streams = storage(recipe.data.dataset).eval_splits(recipe, aug.spec.size)
        return VisionEvalData(probe, test, aug, num_classes, recipe.seed, recipe.evaluation.monitor, streams)

    def build_data(self, recipe: Any) -> DataBundle:
        views = training_views(recipe)
        self.augment = views.device
        self.local_augment = views.local
        train, n = storage(recipe.data.dataset).training_batches(recipe, views)
        return DataBundle(train=train, num_instances=n, eval=self.load_eval(recipe), sampler=train)

    # -- encoder ----------------------------------------------------------------------------
    def build_encoder(self, recipe: Any) -> VisionEncoder:
        cfg: EncoderConfig = recipe.encoder
        data: DataConfig = recipe.data
        channels = len(entry(data.dataset).normalization[0])
        size = (self.augment or view_family(data)).spec.size
        backbone, dim = build_backbone(
            cfg.arch,
            channels,
            size,
            stem=cfg.stem,
            feature=cfg.feature,
            width=cfg.width,
            blocks=cfg.blocks,
            patch_size=cfg.patch_size,
            depth=cfg.depth,
        )
        head = build_head(cfg.head, dim)
        enc = VisionEncoder(backbone, head, cfg.normalize)
        enc.out_dim = cfg.head.out_dim
        return enc

    # -- views ------------------------------------------------------------------------------
    def _aug(self) -> BatchAugment:
        if self.augment is None:
            raise ValueError("VisionDomain.make_views needs build_data(recipe) first (it sets the view family)")
        return self.augment

    def make_views(self, batch: Mapping[str, Any], num_views: int, generator: torch.Generator | None = None) -> Tensor:
        """``[N, V, C, S, S]``: V independently augmented views of each image of ``batch["x"]``."""
        if not isinstance(num_views, int) or num_views < 1:
            raise ValueError(f"num_views must be an integer >= 1, got {num_views!r}")
        x = batch["x"]
        n = x.shape[0]
        if x.dim() == 5:  # streamed: each view already cropped by a worker ([N, V, C, S, S])
            if x.shape[1] < num_views:
                raise ValueError(f"the loader cropped {x.shape[1]} views per image, {num_views} asked")
            views = self._aug()(x[:, :num_views].flatten(0, 1), generator)
            return views.view(n, num_views, *views.shape[1:])
        rep = x.unsqueeze(1).expand(n, num_views, *x.shape[1:]).reshape(n * num_views, *x.shape[1:])
        views = self._aug()(rep, generator)
        return views.view(n, num_views, *views.shape[1:])

    def make_local_views(self, batch: Mapping[str, Any], generator: torch.Generator | None = None) -> Tensor | None:
        """``[N, L, C, s, s]``: the ``data.local_crops.number`` local crops of each image, or None
        without local crops (nothing drawn). In memory, the view family at the local size and
        scale applied to ``batch["x"]``; streamed, the workers' ``batch["x_local"]`` finished on
        the device. Draws from ``generator`` (after the global views, when called after
        :meth:`make_views`)."""
        number = self.recipe.data.local_crops.number
        if number == 0:
            return None
        if self.local_augment is None:
            raise ValueError("VisionDomain.make_local_views needs build_data(recipe) first (it sets the view family)")
        x = batch.get("x_local")  # streamed: cropped by a worker at the local size
        if x is None:
            x = batch["x"]
            if x.dim() != 4:
                raise ValueError(f"a streamed batch brings its local crops as 'x_local', got none (x {tuple(x.shape)})")
            x = x.unsqueeze(1).expand(x.shape[0], number, *x.shape[1:])
        n, count = x.shape[:2]
        views = self.local_augment(x.reshape(n * count, *x.shape[2:]), generator)
        return views.view(n, count, *views.shape[1:])

    def natural_view(self, batch: Mapping[str, Any]) -> Tensor:
        """The un-augmented image, resized to the view size and normalised (CPCL's x-bar)."""
        return self._aug().natural(batch["natural_x"] if "natural_x" in batch else batch["x"])

    # -- evaluation -------------------------------------------------------------------------
    def evaluate(self, encoder: VisionEncoder, data: DataBundle, recipe: Any) -> Evaluation:
        from domains.vision.evaluation import evaluate

        return evaluate(self, encoder, data.eval, recipe)

    def monitor(self, encoder: VisionEncoder, data: DataBundle) -> dict[str, float]:
        """Cheap online kNN accuracy (logged by the loop as ``online_knn_top1``)."""
        from domains.vision.evaluation import monitor

        return monitor(encoder, data.eval)
