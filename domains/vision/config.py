"""The vision domain's recipe sections: ``data``, ``encoder``, ``evaluation``.

Every key has a default, so a recipe names only what differs (see ``recipes/vision/``)::

    data:
      dataset: fashion-mnist
      train_subset: 12000
      augment: {preset: grey}
      local_crops: {number: 6}          # multi-crop (SwAV / DINO); default 0: off
    encoder: {arch: convnet, width: 32, head: {hidden: [128], out_dim: 64}}
    evaluation:
      linear: {solver: lbfgs, epochs: 100}
      baselines: [random_init, raw_pixels]
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveFloat, field_validator, model_validator
from pydantic_core import PydanticCustomError

from domains.base import Section
from domains.vision import dataset_table
from domains.vision.augment import PRESETS
from toolkit.evaluation.probes import C_GRID

__all__ = [
    "AugmentConfig",
    "LocalCropsConfig",
    "LoaderConfig",
    "DataConfig",
    "HeadConfig",
    "EncoderConfig",
    "LinearConfig",
    "KnnConfig",
    "MonitorConfig",
    "DiagnosticsConfig",
    "EvaluationConfig",
    "local_crop_size",
]


class AugmentConfig(Section):
    """A view family: a preset (``augment.PRESETS``) with any field overridden."""

    preset: str | None = Field(
        None, description="cacr_cifar, cacr_stl10, simclr_cifar, moco_v2, ring_imagenet, grey; default by dataset"
    )
    size: int | None = Field(None, ge=1)
    scale: tuple[float, float] | None = None
    ratio: tuple[float, float] | None = None
    flip_p: float | None = Field(None, ge=0, le=1)
    jitter: tuple[float, float, float, float] | None = None
    jitter_p: float | None = Field(None, ge=0, le=1)
    grayscale_p: float | None = Field(None, ge=0, le=1)
    blur_p: float | None = Field(None, ge=0, le=1)
    blur_sigma: tuple[float, float] | None = None
    blur_kernel: int | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _known_preset(self) -> AugmentConfig:
        if self.preset is not None and self.preset not in PRESETS:
            raise ValueError(f"preset must be one of {', '.join(sorted(PRESETS))}, got {self.preset!r}")
        return self


class LocalCropsConfig(Section):
    """Multi-crop (SwAV, Caron et al. 2020; DINO, Caron et al. 2021): besides the ``objective.views``
    global views, ``number`` small crops of each image at ``size`` px covering ``scale`` of its
    area, drawn from the same view family (``data.augment``: ratio, flip, jitter, grayscale, blur)
    and appended after the global views. The papers draw the global crops at scale (0.4, 1)
    (DINO, SwAV's 2x224 + 6x96) or (0.14, 1) (SwAV's ImageNet runs): a recipe sets that itself,
    ``data.augment.scale: [0.4, 1.0]``; the global views keep their family's scale otherwise."""

    number: int = Field(0, ge=0, description="local crops per image (0: no multi-crop)")
    size: int | None = Field(
        None,
        ge=1,
        description="side of a local crop in px, at most the view size; default: the multiple of 4 "
        "nearest 96/224 of the view size (DINO's 96 px at 224; 12 at 28 and 32 px)",
    )
    scale: tuple[float, float] = Field(
        (0.05, 0.4), description="range of the area fraction a local crop covers (DINO's and SwAV's 0.05-0.4)"
    )

    @field_validator("scale")
    @classmethod
    def _scale(cls, scale: tuple[float, float]) -> tuple[float, float]:
        lo, hi = scale
        if not 0 < lo <= hi <= 1:
            raise ValueError(f"scale must satisfy 0 < lo <= hi <= 1, got {list(scale)}")
        return scale


def local_crop_size(view_size: int) -> int:
    """``data.local_crops.size`` left unset: the multiple of 4 nearest ``view_size * 96 / 224``
    (at least 4, at most the view size; the nearest whole number below 8 px)."""
    target = view_size * 96 / 224
    size = 4 * round(target / 4) if target >= 8 else max(1, round(target))
    return min(view_size, max(size, 1))


class LoaderConfig(Section):
    """How streamed datasets (``imagefolder``, ``imagenet``, ``imagenet100``, ``tiny-imagenet``)
    are read: DataLoader worker processes decode each image at the reduced resolution its crop
    needs (``domains/vision/streaming.py``)."""

    workers: int | Literal["auto"] = Field(
        "auto",
        description="decoding worker processes (0: in the "
        "training process); auto: the cores this process may use, at most 16",
    )
    decode: Literal["auto", "cpu", "device"] = Field(
        "auto",
        description="cpu: workers decode (PIL, JPEG DCT scaling); device: workers read the bytes and "
        "torchvision.io.decode_jpeg decodes on the training device (nvJPEG on CUDA); auto: device on CUDA "
        "where a start-up timing finds it faster, else cpu",
    )
    prefetch: int = Field(2, ge=1, description="batches each worker prepares ahead")
    bad_image_limit: float = Field(
        0.001,
        ge=0,
        le=1,
        description="stop (with a checkpoint) once this fraction "
        "of an epoch's images was unreadable; each is replaced by a seeded redraw",
    )


class DataConfig(Section):
    dataset: str = Field(
        "fashion-mnist", description=f"one of {', '.join(dataset_table.names())} (domains/vision/dataset_table.py)"
    )
    root: str | None = Field(None, description="data root; default: the data provider's ($CTK_DATA or ./data)")
    path: str | None = Field(
        None,
        description="streamed datasets: the folder holding train/ and val/ "
        "(default <root>/imagenet, <root>/imagenet100 else <root>/imagenet, "
        "<root>/tiny-imagenet-200); required for imagefolder",
    )
    classes: list[str] | str | None = Field(
        None,
        description="imagefolder / imagenet: the class folders to use, as a list or a text file with one name per line",
    )
    val_labels: str | None = Field(
        None,
        description="imagenet with a flat val/: the devkit folder "
        "(ILSVRC2012_devkit_t12) or a file of 'filename label' lines / "
        "LOC_val_solution.csv; default: looked for beside val/",
    )
    loader: LoaderConfig = Field(default_factory=LoaderConfig)
    download: bool = Field(False, description="let torchvision download CIFAR / STL-10 (needs a network)")
    verify: bool = Field(True, description="torchvision's md5 check of the CIFAR files")
    train_split: Literal["train", "unlabeled", "train+unlabeled"] = Field(
        "train", description="pretraining split; STL-10 papers use train+unlabeled"
    )
    train_subset: int | None = Field(
        None, ge=2, description="pretrain on this many images (a fixed random subset, the same for every seed)"
    )
    imbalance: Literal["linear", "exponential"] | None = Field(
        None, description="CACR Sec. 5.2 class-imbalanced training set (test set unchanged)"
    )
    imbalance_seed: int = Field(2021, ge=0, description="seed of the imbalanced subset (fixed once sampled)")
    augment: AugmentConfig = Field(default_factory=AugmentConfig)
    local_crops: LocalCropsConfig = Field(default_factory=LocalCropsConfig)
    drop_last: bool = True

    @field_validator("dataset")
    @classmethod
    def _known_dataset(cls, name: str) -> str:
        """One of the table's names (pydantic's words for a choice, the choices read from the table)."""
        known = dataset_table.names()
        if name not in known:
            choices = ", ".join(repr(n) for n in known[:-1]) + f" or {known[-1]!r}"
            raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": choices})
        return name

    @model_validator(mode="after")
    def _splits(self) -> DataConfig:
        entry = dataset_table.entry(self.dataset)
        if self.train_split not in entry.train_splits:
            owners = [n for n, e in dataset_table.DATASETS.items() if self.train_split in e.train_splits]
            raise ValueError(
                f"train_split {self.train_split!r} exists only for {', '.join(owners)}, got dataset {self.dataset!r}"
            )
        if self.imbalance is not None and self.dataset not in ("cifar10", "cifar100"):
            raise ValueError(f"imbalance applies to cifar10 / cifar100 (CACR Sec. 5.2), got dataset {self.dataset!r}")
        if entry.storage == "stream" and not entry.folders and not self.path:
            raise ValueError(
                f"dataset {self.dataset!r} needs data.path: a folder holding train/ and val/ "
                "(each with one folder of images per class), got none"
            )
        if entry.storage != "stream":
            for key in ("path", "classes", "val_labels"):
                if getattr(self, key) is not None:
                    streamed = ", ".join(dataset_table.streamed())
                    raise ValueError(f"data.{key} applies to {streamed}, got dataset {self.dataset!r}")
        return self

    @property
    def view_size(self) -> int:
        """The side of the global views: ``augment.size``, else the family's preset's."""
        if self.augment.size is not None:
            return self.augment.size
        return PRESETS[self.augment.preset or dataset_table.entry(self.dataset).preset].size

    @model_validator(mode="after")
    def _local_size(self) -> DataConfig:
        """The local crops' size filled in where the recipe leaves it (so the resolved recipe says
        what runs), and refused above the view size."""
        local = self.local_crops
        if local.number == 0:
            return self
        view = self.view_size
        if local.size is None:
            local.size = local_crop_size(view)
        elif local.size > view:
            raise ValueError(
                f"data.local_crops.size must be at most the view size ({view} px, data.augment.size): "
                f"local crops are the small ones, got {local.size}"
            )
        return self


class HeadConfig(Section):
    """The projection head. ``mlp``: Linear [-> BatchNorm] -> ReLU per hidden size, then a
    Linear to ``out_dim`` (``last_batch_norm``: a BatchNorm1d without affine after it, MoCo v3's
    projector). ``dino``: DINO's head (:class:`toolkit.heads.DINOHead`): GELU MLP through
    ``hidden`` to ``bottleneck``, L2 normalisation, a weight-normalised layer to ``out_dim``
    (65,536 in the paper), frozen for ``freeze_last_layer_steps``."""

    kind: Literal["mlp", "dino"] = "mlp"
    hidden: list[int] = Field(default_factory=lambda: [512], description="hidden layer sizes ([] = linear head)")
    out_dim: int = Field(128, ge=1)
    batch_norm: bool = False
    last_batch_norm: bool = Field(False, description="mlp: BatchNorm1d(affine=False) on the output (MoCo v3)")
    bottleneck: int = Field(256, ge=1, description="dino: the bottleneck before the weight-normalised layer")
    norm_last_layer: bool = Field(True, description="dino: the last layer's weight norm fixed at 1")
    freeze_last_layer_steps: int = Field(0, ge=0, description="dino: steps without updates of the last layer")

    @model_validator(mode="after")
    def _dino_needs_a_hidden_size(self) -> HeadConfig:
        if self.kind == "dino" and not self.hidden:
            raise ValueError("a dino head needs at least one hidden size (hidden: [2048] in the paper), got []")
        return self


class EncoderConfig(Section):
    arch: Literal["resnet18", "resnet50", "small_alexnet", "convnet", "vit_tiny", "vit_small", "vit_base"] = "convnet"
    stem: Literal["cifar", "no_maxpool", "imagenet"] = Field("cifar", description="ResNet stem")
    feature: Literal["pooled", "prepool"] = Field("pooled", description="ResNet feature the probes read")
    width: int = Field(32, ge=1, description="convnet base width")
    blocks: int = Field(3, ge=2, le=4, description="convnet conv blocks (channels double from block to block)")
    patch_size: int | None = Field(
        None,
        ge=1,
        description="ViT patch side in px (the view size a multiple of it); default: 16 from 128 px views up, else 4",
    )
    depth: int | None = Field(None, ge=1, description="ViT transformer layers; default: the arch's 12")
    head: HeadConfig = Field(default_factory=HeadConfig)
    normalize: bool = Field(True, description="L2-normalise the projection")


class LinearConfig(Section):
    """The linear probe. ``lbfgs``: scikit-learn's logistic regression
    (``toolkit.evaluation.probes.linear_probe``) with C = 1 / (weight_decay * N), or C chosen from
    ``c_grid`` on a held-out part of the training features (``select_c``); ``adam`` / ``sgd``:
    the papers' mini-batch schedules."""

    enabled: bool = True
    solver: Literal["lbfgs", "adam", "sgd"] = "lbfgs"
    epochs: int = Field(100, ge=1, description="L-BFGS iterations (max_iter), or passes for adam / sgd")
    lr: float | None = Field(None, gt=0)
    weight_decay: float = Field(1e-4, ge=0, description="L2 term weight_decay / 2 ||W||^2 on the mean loss")
    select_c: bool = Field(False, description="lbfgs: choose C from c_grid on a held-out part of the training features")
    c_grid: list[PositiveFloat] = Field(
        default_factory=lambda: list(C_GRID),
        min_length=1,
        description="lbfgs with select_c: candidate C (inverse L2 strength)",
    )
    holdout: float = Field(
        0.1, gt=0, lt=1, description="lbfgs with select_c: held-out fraction of the training features"
    )
    c_search: Literal["grid", "ascend"] = Field(
        "grid",
        description="lbfgs with select_c: fit every C of c_grid, or from the smallest up until "
        "the held-out accuracy falls (toolkit.evaluation.probes.select_c)",
    )
    batch_size: int = Field(256, ge=1)
    milestones: list[int] = Field(default_factory=list)
    gamma: float = Field(0.1, gt=0, le=1)
    betas: tuple[float, float] = (0.9, 0.999)
    momentum: float = Field(0.9, ge=0, lt=1)
    final_lr: float | None = Field(
        None, gt=0, description="exponential decay per epoch to this rate (replaces milestones)"
    )
    standardize: bool = Field(True, description="standardise features with the training split's mean / std")
    augment: bool = Field(
        False,
        description="streamed datasets: train the linear layer on random-resized "
        "crops and flips of the training images, streamed through the frozen backbone each "
        "epoch (the papers' ImageNet protocol); off: centre crops",
    )

    @model_validator(mode="after")
    def _penalised(self) -> LinearConfig:
        if self.solver == "lbfgs" and self.weight_decay == 0 and not self.select_c:
            raise ValueError(
                "weight_decay must be > 0 for solver 'lbfgs' (C = 1 / (weight_decay N)), or set select_c; got 0"
            )
        return self


class KnnConfig(Section):
    enabled: bool = True
    k: int = Field(200, ge=1)
    temperature: float = Field(0.1, gt=0)
    five_nn: bool = Field(True, description="also report knn5_top1 (majority vote of 5)")


class MonitorConfig(Section):
    k: int = Field(200, ge=1)
    temperature: float = Field(0.1, gt=0)
    train_samples: int = Field(5000, ge=1)
    test_samples: int = Field(1000, ge=1)


class DiagnosticsConfig(Section):
    enabled: bool = True
    samples: int = Field(2000, ge=4, description="test images used for the geometry metrics")
    t_neg: float | None = Field(None, gt=0, description="CACR t- for H(X-|X); default: the loss's, else 2")
    entropy_batch: int = Field(512, ge=2, description="mini-batch size M of H(X-|X) (CACR Fig. 3)")
    d_plus: float | None = Field(None, ge=0, le=1, description="LMCL margin; default: the regularizer's, else 0.1")
    d_minus: float | None = Field(None, ge=0, le=1, description="default: the regularizer's, else 0.5")
    uniformity_t: float = Field(2.0, gt=0)
    figures: bool = True


class EvaluationConfig(Section):
    linear: LinearConfig = Field(default_factory=LinearConfig)
    knn: KnnConfig = Field(default_factory=KnnConfig)
    monitor: MonitorConfig = Field(default_factory=MonitorConfig)
    diagnostics: DiagnosticsConfig = Field(default_factory=DiagnosticsConfig)
    baselines: list[Literal["random_init", "raw_pixels"]] = Field(
        default_factory=list, description="probe a random encoder of the same architecture / raw pixels too"
    )
    probe_train_subset: int | None = Field(
        None, ge=2, description="labelled training images for the probes (a fixed random subset)"
    )
    test_subset: int | None = Field(None, ge=2, description="test images (a fixed random subset)")
    batch_size: int = Field(512, ge=1, description="feature-extraction batch size")
    image_size: int | None = Field(
        None,
        ge=1,
        description="side of the images that the probes, kNN, monitor and diagnostics see "
        "(resized un-augmented images; default: the training view size). Above the view size it is "
        "FixRes (Touvron et al. 2019): random crops enlarge objects, so small training views meet the "
        "test objects at their training scale at a larger test size",
    )
