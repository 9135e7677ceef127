"""Suite-wide settings: one compute thread per process (CI machines have 2 cores and the
suite spawns subprocesses; oversubscribed OpenMP threads were measured 3x slower), no hub."""
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MUJOCO_GL", "egl")

import torch  # noqa: E402

torch.set_num_threads(1)


import pytest  # noqa: E402


@pytest.fixture
def data_workdir(tmp_path, monkeypatch):
    """A fresh working folder (its own mlflow store and checkpoints) that still finds the
    offline data already fetched for the suite."""
    from domains.vision.packaged import locate
    monkeypatch.setenv("CTK_DATA", str(__import__("pathlib").Path(locate("fashion-mnist")).parent))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("CTK_CHECKPOINTS", raising=False)
    return tmp_path
