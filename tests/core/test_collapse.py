"""The collapse figures against their definitions (per-dimension std of the normalised
embedding, Roy & Vetterli's effective rank) and the rule of the ``[ctk] collapse`` line at the
points it was set from."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as nnf

from toolkit.evaluation.collapse import collapse_figures, collapse_warning, effective_rank, embedding_std


def test_collapse_figures_of_a_constant_a_line_and_a_cloud():
    g = torch.Generator().manual_seed(14)
    const = torch.ones(200, 16) + 1e-9 * torch.randn(200, 16, generator=g)
    cloud = torch.randn(4000, 16, generator=g)
    line = torch.randn(200, 1, generator=g) * torch.randn(1, 16, generator=g) + 3.0
    fc, fl, fk = collapse_figures(const), collapse_figures(line), collapse_figures(cloud)
    assert fc["embedding_std_ratio"] < 1e-6
    assert fl["effective_rank"] == pytest.approx(1.0, abs=1e-4)  # float32 rounding off the line
    # an isotropic Gaussian: per-dimension std of the normalised rows is 1/sqrt(d)
    assert fk["embedding_std"] == pytest.approx(1 / math.sqrt(16), rel=0.05)
    assert 14 < fk["effective_rank"] <= 16
    assert collapse_warning(fc) is not None and collapse_warning(fl) is not None
    assert collapse_warning(fk) is None
    assert "collapse" in collapse_warning(fc, where="at step 3")
    # the measured cases the thresholds are set between: SimSiam with and without its stop-gradient
    # (400 steps), an untrained conv net (spread little but in many directions), a trained one
    without_stop_gradient = {"embedding_std_ratio": 0.042, "effective_rank": 2.29}
    with_stop_gradient = {"embedding_std_ratio": 0.76, "effective_rank": 14.1}
    untrained = {"embedding_std_ratio": 0.03, "effective_rank": 21.4}
    assert collapse_warning(without_stop_gradient) is not None
    assert collapse_warning(with_stop_gradient) is None and collapse_warning(untrained) is None
    assert collapse_warning({"embedding_std_ratio": 0.5, "effective_rank": 1.2}) is not None  # a line
    assert collapse_warning({"online_embedding_std_ratio": 0.001, "online_effective_rank": 30.0}, "online_")


def test_effective_rank_matches_its_definition():
    x = torch.randn(50, 6, generator=torch.Generator().manual_seed(15)).double()
    s = torch.linalg.svdvals(x - x.mean(0))
    p = s / s.sum()
    assert effective_rank(x) == pytest.approx(float(torch.exp(-(p * p.log()).sum())))
    u = nnf.normalize(x, dim=1)
    assert embedding_std(x) == pytest.approx(float(u.std(0).mean()))
