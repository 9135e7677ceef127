"""Wall time of the linear probe's two candidate engines on realistic feature sizes.

Multinomial logistic regression, standardised features, the same objective for both:
``mean CE + 1 / (2 C N) ||W||^2`` (bias unpenalised), fitted by

* scikit-learn ``LogisticRegression(solver="lbfgs")`` (scipy's L-BFGS-B, float64), and
* torch ``LBFGS`` (strong-Wolfe line search, float32) at 100 iterations (the vision domain's
  default) and run to sklearn's stopping rule (max |grad| <= 1e-4).

Run: ``python bench/probes.py`` (add ``--sizes 10000x256`` to pick sizes). Prints seconds and
test accuracy per engine and the ratio sklearn / torch.
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch
import torch.nn.functional as F

from toolkit.training.precision import machine_line  # noqa: E402


def problem(n: int, d: int, seed: int = 0):
    """Random ReLU features ``relu(x R)`` of Fashion-MNIST pixels (a random-init encoder's
    features: correlated, non-negative, not separable): ``n`` training rows (of the 60k),
    the first 10k test images."""
    from domains.vision.datasets import load_split

    g = torch.Generator().manual_seed(seed)
    tr, te = load_split("fashion-mnist", "train"), load_split("fashion-mnist", "test")
    proj = torch.randn(28 * 28, d, generator=g) / 28.0

    def feats(images):
        return torch.relu(images.reshape(len(images), -1).float() / 255.0 @ proj)

    idx = torch.randperm(len(tr.labels), generator=g)[:n]
    return feats(tr.images[idx]), tr.labels[idx].long(), feats(te.images), te.labels.long()


def run_sklearn(xtr, ytr, xte, yte, c, max_iter=1000):
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    t = time.perf_counter()
    sc = StandardScaler().fit(xtr.numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = LogisticRegression(C=c, max_iter=max_iter).fit(sc.transform(xtr.numpy()), ytr.numpy())
    acc = (m.predict(sc.transform(xte.numpy())) == yte.numpy()).mean() * 100
    return time.perf_counter() - t, acc, int(m.n_iter_[0])


def run_torch(xtr, ytr, xte, yte, c, max_iter, tol=None):
    t = time.perf_counter()
    mean, std = xtr.mean(0), xtr.std(0).clamp(min=1e-6)
    a, b = (xtr - mean) / std, (xte - mean) / std
    k = int(ytr.max()) + 1
    w = torch.zeros(a.shape[1], k, requires_grad=True)
    bias = torch.zeros(k, requires_grad=True)
    wd = 1.0 / (c * a.shape[0])
    opt = torch.optim.LBFGS(
        [w, bias],
        lr=1,
        max_iter=max_iter,
        history_size=20,
        line_search_fn="strong_wolfe",
        tolerance_grad=tol or 1e-6,
        tolerance_change=1e-9 if tol is None else 0.0,
    )
    calls = [0]

    def closure():
        calls[0] += 1
        opt.zero_grad()
        loss = F.cross_entropy(a @ w + bias, ytr) + 0.5 * wd * w.pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        acc = ((b @ w + bias).argmax(1) == yte).float().mean().item() * 100
    return time.perf_counter() - t, acc, opt.state[opt._params[0]]["n_iter"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", nargs="+", default=["10000x256", "60000x512"])
    args = ap.parse_args()
    print(machine_line(), flush=True)  # CPU model, capability, native bf16 or not
    print(f"torch threads {torch.get_num_threads()}")
    for size in args.sizes:
        n, d = map(int, size.split("x"))
        xtr, ytr, xte, yte = problem(n, d)
        c = 1.0 / (1e-4 * n)  # the vision default weight_decay 1e-4 as sklearn's C
        s = run_sklearn(xtr, ytr, xte, yte, c)
        t100 = run_torch(xtr, ytr, xte, yte, c, 100)
        tconv = run_torch(xtr, ytr, xte, yte, c, 1000, tol=1e-4)
        print(f"{n} x {d}, 10 classes:")
        print(f"  sklearn lbfgs (to tol)   {s[0]:7.2f} s  top1 {s[1]:.2f}  iters {s[2]}")
        print(f"  torch lbfgs 100 iters    {t100[0]:7.2f} s  top1 {t100[1]:.2f}  iters {t100[2]}")
        print(f"  torch lbfgs (to tol)     {tconv[0]:7.2f} s  top1 {tconv[1]:.2f}  iters {tconv[2]}")
        print(f"  ratio sklearn / torch-to-tol {s[0] / tconv[0]:.2f}")


if __name__ == "__main__":
    main()
