"""The toy domain's own figure: 2-D embeddings coloured by class (LMCL Fig. 3). The distance
histogram with the margin comes from :func:`toolkit.evaluation.plots.distance_histogram_figure`."""

from __future__ import annotations

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Circle
from torch import Tensor

__all__ = ["embedding_scatter"]


def embedding_scatter(z: Tensor, y: Tensor, title: str = "embedding") -> Figure:
    """Scatter of 2-D embeddings ``z`` (on the unit circle when normalised), one colour per
    class of ``y``."""
    if z.dim() != 2 or z.shape[1] != 2 or len(z) != len(y):
        raise ValueError(f"z must be [N, 2] with N = len(y) = {len(y)}, got shape {tuple(z.shape)}")
    fig = Figure(figsize=(4.5, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for k in sorted(set(y.tolist())):
        pts = z[y == k].detach().cpu()
        ax.scatter(pts[:, 0].numpy(), pts[:, 1].numpy(), s=4, alpha=0.5, label=f"class {k}")
    if float(z.norm(dim=1).max()) <= 1.0 + 1e-4:  # unit rows: show the whole circle
        ax.add_patch(Circle((0.0, 0.0), 1.0, fill=False, color="0.8", lw=1))
        ax.set_xlim(-1.15, 1.15)
        ax.set_ylim(-1.15, 1.15)
    ax.set_aspect("equal")
    ax.legend(fontsize="small", markerscale=3)
    ax.set_title(title)
    return fig
