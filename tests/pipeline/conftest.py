import pytest

from domains import installed


@pytest.fixture
def points_domain(monkeypatch):
    """Make the test-only 'points' domain visible to the CLI and the runner."""
    monkeypatch.setitem(installed.BUILTIN, "points", "tests.pipeline.points_domain:PointsDomain")
    return installed.get


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """Run in a fresh directory with its own mlflow store and checkpoints."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("CTK_CHECKPOINTS", raising=False)
    return tmp_path


POINTS_RECIPE = """\
name: points-test
domain: points
seed: 0
device: cpu
precision: fp32  # these tests compare against float32 references, whatever the CPU
data: {n: 64, dim: 4}
encoder: {out_dim: 3}
objective:
  loss: {name: nt_xent, temperature: 0.5}
  regularizers: [{name: distance_polarization, weight: 0.01}]
optimizer: {name: sgd, lr: 0.1, momentum: 0.9}
schedule: {name: cosine, warmup_steps: 2}
budget: {steps: 24, batch_size: 16, log_every: 4, checkpoint_every: 8}
tracking: {experiment: pipeline-test, log_model: false}
"""


@pytest.fixture
def points_recipe(workdir):
    path = workdir / "points.yaml"
    path.write_text(POINTS_RECIPE)
    return path
