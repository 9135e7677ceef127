"""Stream = memory, shown by learning (issue 46 item 3): the same Fashion-MNIST images trained
through both pipelines with the quickstart recipe for the same number of steps, in memory and
written as a PNG image folder (grayscale 'L' PNGs, ``data.dataset: imagefolder``), each run timed
whole (start-up, training, evaluation) as ``ctk run`` in its own process.

The folder holds the probes' images of the in-memory run: ``train/`` is the in-memory run's probe
subset (``evaluation.probe_train_subset``), ``val/`` its test subset, so both runs are probed on
the same images. Each pretrains on as many images (the folder run on ``train/``, the in-memory
run on its ``data.train_subset``: another seeded subset of the same 60,000). The linear probe is
the quickstart's L-BFGS in memory and SGD streamed (a streamed dataset's probe), so the kNN
(k = 200, t = 0.1, the same code on the same images) is the like-for-like figure; the random-init
twin is the pipeline's baseline (its linear probe). Usage::

    python bench/stream_vs_memory.py [--train 12000] [--test 10000] [--steps 600] [--folder DIR]
                                     [--linear-epochs 100] [--set KEY=VALUE ...]

Prints one row per pipeline and the machine (``toolkit.training.precision.machine_line``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from domains.vision import datasets as ds  # noqa: E402
from domains.vision.fixtures import write_png_folder  # noqa: E402

RECIPE = ROOT / "recipes" / "vision" / "quickstart.yaml"
METRICS = ("knn_top1", "linear_top1", "linear_top1_random_init")


def write_folder(folder: Path, train: int, test: int) -> dict[str, int]:
    """The in-memory run's probe and test subsets of Fashion-MNIST as a PNG image folder."""
    import torchvision.datasets as tvd

    probe = ds.seeded_subset(ds.load_split("fashion-mnist", "train"), train, ds.SUBSET_SEEDS[1])
    held = ds.seeded_subset(ds.load_split("fashion-mnist", "test"), test, ds.SUBSET_SEEDS[2])
    return write_png_folder(folder, {"train": probe, "val": held}, list(tvd.FashionMNIST.classes))


def common_sets(steps: int, experiment: str) -> list[str]:
    return [
        "budget.minutes=null",
        "budget.epochs=null",
        f"budget.steps={steps}",
        "evaluation.baselines=[random_init]",
        f"tracking.experiment={experiment}",
        "tracking.log_model=false",
    ]


def run(sets: list[str], env: dict[str, str]) -> tuple[str, float]:
    """``ctk run`` of the quickstart with ``sets`` in a process of its own: its run id and wall time."""
    args = [sys.executable, str(ROOT / "cli.py"), "run", str(RECIPE)] + [a for s in sets for a in ("--set", s)]
    start = time.perf_counter()
    proc = subprocess.run(args, env=env, capture_output=True, text=True, cwd=env["CTK_BENCH_CWD"])
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"ctk run failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout.split("run ", 1)[1].split()[0], seconds


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--train", type=int, default=12_000, help="training images (pretraining and probe)")
    p.add_argument("--test", type=int, default=10_000, help="test images (all 10,000 by default)")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--linear-epochs", type=int, default=100, help="the streamed run's SGD probe epochs")
    p.add_argument("--folder", help="write (or reuse) the PNG folder here (default: a temporary folder)")
    p.add_argument("--set", dest="sets", action="append", default=[], help="extra override for both runs")
    a = p.parse_args(argv)

    from mlflow.tracking import MlflowClient

    from toolkit.training.precision import machine_line

    work = Path(tempfile.mkdtemp(prefix="ctk-stream-vs-memory-"))
    folder = Path(a.folder) if a.folder else work / "fashion-png"
    if not (folder / "train").is_dir():
        start = time.perf_counter()
        counts = write_folder(folder, a.train, a.test)
        print(f"wrote {counts['train']:,} + {counts['val']:,} PNGs to {folder} in {time.perf_counter() - start:.1f} s")
    uri = f"sqlite:///{work / 'mlflow.db'}"
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "CTK_BENCH_CWD": str(work), "PYTHONPATH": str(ROOT)}
    common = common_sets(a.steps, "stream-vs-memory") + a.sets
    memory = common + [
        f"data.train_subset={a.train}",
        f"evaluation.probe_train_subset={a.train}",
        f"evaluation.test_subset={a.test}",
    ]
    stream = common + [
        "data.dataset=imagefolder",
        f"data.path={folder}",
        "evaluation.linear.solver=sgd",
        "evaluation.linear.select_c=false",
        "evaluation.linear.lr=0.1",
        f"evaluation.linear.epochs={a.linear_epochs}",
    ]
    client = MlflowClient(uri)
    rows = []
    for name, sets in (("in memory", memory), ("imagefolder (PNG)", stream)):
        run_id, seconds = run(sets, env)
        metrics = client.get_run(run_id).data.metrics
        rows.append((name, seconds, *(metrics.get(m, float("nan")) for m in METRICS)))
        print(f"{name}: run {run_id} in {seconds:.0f} s", flush=True)
    print(f"\nFashion-MNIST, quickstart recipe, {a.steps} steps, {a.train:,} training / {a.test:,} test images")
    print(f"{'pipeline':<20} {'wall s':>7} {'kNN top-1':>10} {'linear':>8} {'random-init linear':>19}")
    for name, seconds, knn, lin, rnd in rows:
        print(f"{name:<20} {seconds:>7.0f} {knn:>10.2f} {lin:>8.2f} {rnd:>19.2f}")
    print(f"kNN difference (memory - stream): {rows[0][2] - rows[1][2]:+.2f} points")
    print(machine_line())


if __name__ == "__main__":
    main()
