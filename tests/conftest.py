"""Suite-wide settings: one compute thread per process (CI machines have 2 cores and the
suite spawns subprocesses; oversubscribed OpenMP threads were measured 3x slower), no hub."""
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MUJOCO_GL", "egl")

import torch  # noqa: E402

torch.set_num_threads(1)
