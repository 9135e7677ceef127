"""``VisionDomain``: image datasets, batched views, vision encoders and probes behind the
domain face of ``domains/base.py``; it shares the toolkit's pretraining loop.

What the objective gets from this domain (``Domain.contrastive_batch``): ``V`` augmented views
per image (``make_views``; K positives = V - 1 for CMC / CACR), the un-augmented natural view
(``natural_view``, CPCL's projection term), and the dataset ``index`` of every image (memory
bank slots; the MoCo queue and the momentum encoder are the toolkit's). Training batches are
``{"x": uint8 [N, C, H, W], "y": [N], "index": [N]}``; augmentation runs on the batch, on the
device the loop moved it to.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from domains.base import DataBundle, Domain, Evaluation
from domains.vision import datasets as ds
from domains.vision.augment import BatchAugment, preset
from domains.vision.config import STREAMED, DataConfig, EncoderConfig, EvaluationConfig, MonitorConfig
from domains.vision.encoders import ProjectionHead, VisionEncoder, build_backbone

__all__ = ["VisionDomain", "VisionEvalData", "default_preset"]


def default_preset(dataset: str) -> str:
    return {
        "cifar10": "cacr_cifar",
        "cifar100": "cacr_cifar",
        "stl10": "cacr_stl10",
        "imagefolder": "moco_v2",
        "imagenet": "moco_v2",
        "imagenet100": "moco_v2",
        "tiny-imagenet": "simclr_tiny",
    }.get(dataset, "grey")


def normalization(dataset: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Channel mean / std of ``dataset`` (ImageNet's for the folder datasets)."""
    if dataset in STREAMED:
        from domains.vision.folder_data import IMAGENET_NORMALIZATION

        return IMAGENET_NORMALIZATION
    return ds.NORMALIZATION[dataset]


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


def view_family(cfg: DataConfig) -> BatchAugment:
    """The recipe's whole view family, random-resized crop included, on in-memory images."""
    a = cfg.augment
    spec = preset(a.preset or default_preset(cfg.dataset), **a.model_dump(exclude={"preset"}))
    mean, std = normalization(cfg.dataset)
    return BatchAugment(spec, mean, std)


def build_augment(cfg: DataConfig) -> BatchAugment:
    """What the device applies to a training batch: the whole family, or for a streamed dataset
    (whose workers crop) the rest of it."""
    family = view_family(cfg)
    if cfg.dataset in STREAMED:
        from domains.vision.folder_data import crop_rest

        return BatchAugment(crop_rest(family.spec), family.mean, family.std)
    return family


def eval_augment(train: BatchAugment, ev: EvaluationConfig) -> BatchAugment:
    """The view family at ``evaluation.image_size`` (the training one where it is unset)."""
    if ev.image_size is None or ev.image_size == train.spec.size:
        return train
    return BatchAugment(replace(train.spec, size=ev.image_size), train.mean, train.std)


class VisionDomain(Domain):
    """CIFAR-10/100, STL-10, MNIST and Fashion-MNIST with the papers' view families, ResNet /
    small-AlexNet / conv-net encoders, linear probe, weighted kNN and geometry diagnostics."""

    name = "vision"
    description = (
        "images: CIFAR-10/100, STL-10, (Fashion-)MNIST; batched SimCLR/MoCo-v2 views; "
        "ResNet, small AlexNet, conv net; linear probe, weighted kNN, geometry"
    )
    DataConfig = DataConfig
    EncoderConfig = EncoderConfig
    EvaluationConfig = EvaluationConfig

    def __init__(self, recipe: Any) -> None:
        super().__init__(recipe)
        self.augment: BatchAugment | None = None

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
        any input size (the small AlexNet's classifier is sized for the views)."""
        problems = super().check(raw, sections)
        ev, enc, data = (sections.get(k) for k in ("evaluation", "encoder", "data"))
        if ev is not None and data is not None and data.dataset in STREAMED:
            if ev.linear.enabled and ev.linear.solver != "sgd":
                problems.append(
                    (
                        "evaluation.linear.solver",
                        f"{data.dataset} is streamed from disk and its features are never all in "
                        f"memory: the linear probe trains with sgd (the papers' protocol; lr, epochs, "
                        f"milestones or final_lr), got {ev.linear.solver!r}",
                    )
                )
            if "raw_pixels" in ev.baselines:
                problems.append(
                    (
                        "evaluation.baselines",
                        f"raw_pixels probes every pixel of the images in memory; not for the streamed "
                        f"dataset {data.dataset} (got {ev.baselines})",
                    )
                )
        if ev is None or enc is None or data is None or ev.image_size is None:
            return problems
        view = build_augment(data).spec.size
        if ev.image_size != view and enc.arch == "small_alexnet":
            problems.append(
                (
                    "evaluation.image_size",
                    f"small_alexnet takes only its training view size ({view}), got {ev.image_size}; "
                    f"leave it unset or use convnet / resnet18 / resnet50",
                )
            )
        return problems

    # -- data -------------------------------------------------------------------------------
    def check_data(self, recipe: Any) -> list[tuple[str, str]]:
        """The dataset's files are where torchvision reads them (MNIST / Fashion-MNIST fetched)."""
        cfg: DataConfig = recipe.data
        if cfg.dataset in STREAMED:
            from domains.vision.folder_data import folder_problems

            return folder_problems(cfg)
        problem = ds.unavailable(cfg.dataset, cfg.root, cfg.download)
        return [("data.dataset", problem)] if problem else []

    def load_train(self, recipe: Any) -> ds.ImageSplit:
        """The pretraining images (imbalanced / subset as the recipe says)."""
        cfg: DataConfig = recipe.data
        split = ds.load_split(cfg.dataset, cfg.train_split, cfg.root, download=cfg.download, verify=cfg.verify)
        if cfg.imbalance is not None:
            split = split.subset(
                ds.imbalanced_indices(split.labels, cfg.imbalance, split.num_classes, cfg.imbalance_seed)
            )
        return ds.seeded_subset(split, cfg.train_subset, ds.SUBSET_SEEDS[0])

    def load_eval(self, recipe: Any) -> VisionEvalData:
        cfg: DataConfig = recipe.data
        ev: EvaluationConfig = recipe.evaluation
        if cfg.dataset in STREAMED:
            from domains.vision.folder_data import FolderStreams, monitor_splits, training_device

            aug = eval_augment(view_family(cfg), ev)  # the diagnostics crop the decoded subsets
            small_tr, small_te, train, val = monitor_splits(recipe, aug.spec.size)
            streams = FolderStreams(train, val, aug.spec.size, cfg.loader, training_device(recipe))
            return VisionEvalData(small_tr, small_te, aug, train.num_classes, recipe.seed, ev.monitor, streams)
        probe = ds.load_split(cfg.dataset, "train", cfg.root, download=cfg.download, verify=cfg.verify)
        test = ds.load_split(cfg.dataset, "test", cfg.root, download=cfg.download, verify=cfg.verify)
        probe = ds.seeded_subset(probe, ev.probe_train_subset, ds.SUBSET_SEEDS[1])
        test = ds.seeded_subset(test, ev.test_subset, ds.SUBSET_SEEDS[2])
        return VisionEvalData(
            probe,
            test,
            eval_augment(self.augment or build_augment(cfg), ev),
            probe.num_classes,
            recipe.seed,
            ev.monitor,
        )

    def build_data(self, recipe: Any) -> DataBundle:
        from toolkit.training.batches import TensorBatches

        self.augment = build_augment(recipe.data)
        if recipe.data.dataset in STREAMED:
            from domains.vision.folder_data import train_batches, training_device

            stream, split = train_batches(recipe, self.augment.spec, training_device(recipe))
            return DataBundle(train=stream, num_instances=len(split), eval=self.load_eval(recipe), sampler=stream)
        train = self.load_train(recipe)
        batches = TensorBatches(
            {"x": train.images, "y": train.labels},
            recipe.budget.batch_size,
            seed=recipe.seed,
            drop_last=recipe.data.drop_last,
        )
        return DataBundle(train=batches, num_instances=len(train), eval=self.load_eval(recipe), sampler=batches)

    # -- encoder ----------------------------------------------------------------------------
    def build_encoder(self, recipe: Any) -> VisionEncoder:
        cfg: EncoderConfig = recipe.encoder
        data: DataConfig = recipe.data
        channels = len(normalization(data.dataset)[0])
        size = (self.augment or build_augment(data)).spec.size
        backbone, dim = build_backbone(
            cfg.arch, channels, size, stem=cfg.stem, feature=cfg.feature, width=cfg.width, blocks=cfg.blocks
        )
        head = ProjectionHead(dim, cfg.head.hidden, cfg.head.out_dim, cfg.head.batch_norm)
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
