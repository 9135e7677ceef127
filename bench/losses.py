"""Speed and memory of every loss of ``toolkit.losses.functional`` against the matmul bound.

For N pairs of d-dimensional embeddings (default N=512, d=128) and a queue of M keys (default
65536) the script times forward + backward of each loss of the functional contract and divides
it by the work no implementation can avoid, measured in the same run:

* in-batch losses: the similarity matmul ``[2N, d] @ [d, 2N]`` forward plus its backward;
* queue / memory-bank losses: ``[N, d] @ [d, M]`` forward plus the backward into the queries
  (the queue is a constant), and a plain reference ``F.cross_entropy(cat([q.k, q.Q^T]) / tau)``
  that the MoCo-form losses are also compared with.

Timing: ``torch.set_num_threads(2)`` (``--threads``), warm-up, then R repeats in which the
loss and its baseline run back to back; the ratio is the median of the per-repeat ratios, so
the drift of a shared machine cancels to first order (the best-of ratio min/min is printed
beside it). On a machine busier than its cores, two-thread timings are dominated by OpenMP
threads waiting for each other (every parallel op pays a scheduling slice), so there compare
``--threads 1`` too. Memory: each loss runs once more in a fresh process (allocator set to
return large blocks at once); the growth of the peak resident set during one forward +
backward (``VmHWM`` after resetting it, ``ru_maxrss`` where /proc is missing) is reported in
MiB and in units of the similarity matrix. Losses not (yet) in the package print ``missing``.

    python bench/losses.py                    # everything
    python bench/losses.py --only nt_xent dcl --repeats 30 --no-memory
    python bench/losses.py --keep-heap        # malloc keeps freed memory (less run-to-run noise)
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.nn import functional as TF

from toolkit.training.precision import machine_line  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import toolkit.losses.functional as LF  # noqa: E402

IN_BATCH, QUEUE = "in-batch", "queue"


@dataclass
class Case:
    name: str
    kind: str  # IN_BATCH or QUEUE: which matmul bound applies
    call: Callable[[dict], torch.Tensor]
    grads: tuple[str, ...]  # inputs the backward reaches
    target: float | None = None  # max ratio to the baseline
    against: str = "bound"  # "bound" or "ref" (the plain cross-entropy reference)
    views: int = 1  # query views against the queue (the reference is scaled)
    needs: str = ""  # the function the case needs (default: its name)

    @property
    def function(self) -> str:
        return self.needs or self.name


def _simclr_masks(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    idx = torch.arange(2 * n)
    pos = torch.zeros(2 * n, 2 * n, dtype=torch.bool)
    pos[idx, (idx + n) % (2 * n)] = True
    return pos, ~torch.eye(2 * n, dtype=torch.bool)


def _scores(t: dict) -> torch.Tensor:
    z = torch.cat([t["z1"], t["z2"]])
    return z @ z.t()


def _plain_nt_xent(t: dict) -> torch.Tensor:
    """NT-Xent the usual way (logits matrix, -inf diagonal, cross-entropy), for comparison."""
    z = torch.cat([t["z1"], t["z2"]])
    n = z.shape[0]
    logits = (z @ z.t() / 0.5).masked_fill(torch.eye(n, dtype=torch.bool), float("-inf"))
    return TF.cross_entropy(logits, (torch.arange(n) + n // 2) % n)


def _bank_sims(t: dict):
    return LF.wl_sims_from_bank(t["q"], t["queue"], t["idx"])


CASES = [
    Case("nt_xent", IN_BATCH, lambda t: LF.nt_xent(t["z1"], t["z2"], 0.5), ("z1", "z2"), 1.3),
    Case("(plain CE NT-Xent)", IN_BATCH, _plain_nt_xent, ("z1", "z2"), needs="nt_xent"),
    Case("dcl", IN_BATCH, lambda t: LF.dcl(t["z1"], t["z2"], 0.5, 0.1), ("z1", "z2"), 1.3),
    Case("hcl", IN_BATCH, lambda t: LF.hcl(t["z1"], t["z2"], 0.5, 0.1, 1.0), ("z1", "z2"), 1.3),
    Case("spectral", IN_BATCH, lambda t: LF.spectral(t["z1"], t["z2"], 1.0), ("z1", "z2"), 1.3),
    Case("cpcl_a", IN_BATCH, lambda t: LF.cpcl_a(t["z1"], t["z2"], 2.0), ("z1", "z2"), 1.3),
    Case("cpcl_full", IN_BATCH, lambda t: LF.cpcl_full(t["zb"], t["z1"], t["z2"], 2.0, 1.0), ("zb", "z1", "z2"), 1.3),
    Case("align_uniform", IN_BATCH, lambda t: LF.align_uniform(t["z1"], t["z2"]), ("z1", "z2"), 1.3),
    Case("cacr_minibatch", IN_BATCH, lambda t: LF.cacr_minibatch(t["z1"], t["z2"]), ("z1", "z2"), 1.3),
    Case("align", IN_BATCH, lambda t: LF.align(t["z1"], t["z2"]), ("z1", "z2")),
    Case("uniform", IN_BATCH, lambda t: LF.uniform(t["z1"]), ("z1",)),
    Case("cmc", IN_BATCH, lambda t: LF.cmc([t["z1"], t["z2"]], 0.07), ("z1", "z2")),
    Case("cacr_multiview", IN_BATCH, lambda t: LF.cacr_multiview([t["z1"], t["z2"]]), ("z1", "z2")),
    Case("aca", IN_BATCH, lambda t: LF.aca(t["zb"], t["z1"], t["z2"]), ("zb", "z1", "z2")),
    Case(
        "distance_polarization",
        IN_BATCH,
        lambda t: LF.distance_polarization(torch.cat([t["z1"], t["z2"]])),
        ("z1", "z2"),
    ),
    Case(
        "info_nce_scores",
        IN_BATCH,
        lambda t: LF.info_nce_scores(_scores(t), *t["masks"], temperature=0.5),
        ("z1", "z2"),
    ),
    Case("dcl_scores", IN_BATCH, lambda t: LF.dcl_scores(_scores(t), *t["masks"]), ("z1", "z2")),
    Case("hcl_scores", IN_BATCH, lambda t: LF.hcl_scores(_scores(t), *t["masks"]), ("z1", "z2")),
    Case("moco_infonce", QUEUE, lambda t: LF.moco_infonce(t["q"], t["k"], t["queue"], 0.07), ("q",), 1.0, "ref"),
    Case("ring_nce", QUEUE, lambda t: LF.ring_nce(t["q"], t["k"], t["queue"], 0.07, 90.0, 99.0), ("q",), 1.3, "ref"),
    Case("cacr_moco", QUEUE, lambda t: LF.cacr_moco(t["qv"], t["kv"], t["queue"]), ("qv",), 1.5, "ref", views=2),
    Case(
        "moco_infonce+ring_mask",
        QUEUE,
        lambda t: LF.moco_infonce(t["q"], t["k"], t["queue"], 0.07, neg_mask=t["ring"]),
        ("q",),
        needs="moco_infonce",
    ),
    Case("cacr", QUEUE, lambda t: LF.cacr(t["q"], t["k"], t["queue"]), ("q",)),
    Case("wl_contrastive", QUEUE, lambda t: LF.wl_contrastive(*_bank_sims(t), 0.2), ("q",)),
    Case("wl_simple", QUEUE, lambda t: LF.wl_simple(*_bank_sims(t)), ("q",)),
    Case("wl_hard", QUEUE, lambda t: LF.wl_hard(*_bank_sims(t), 0.2, num_hard=4095), ("q",)),
    Case("wl_hard_simple", QUEUE, lambda t: LF.wl_hard_simple(*_bank_sims(t), num_hard=4095), ("q",)),
]


def make_inputs(n: int, d: int, m: int, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)

    def unit(*shape: int, grad: bool = True) -> torch.Tensor:
        x = TF.normalize(torch.randn(*shape, generator=g), dim=-1)
        return x.requires_grad_(grad)

    return {
        "z1": unit(n, d),
        "z2": unit(n, d),
        "zb": unit(n, d),
        "q": unit(n, d),
        "k": unit(n, d, grad=False),
        "queue": unit(m, d, grad=False),
        "qv": unit(n, 2, d),
        "kv": unit(n, 2, d, grad=False),
        "idx": torch.randint(0, m, (n,), generator=g),
        "masks": _simclr_masks(n),
        "seed_in": torch.randn(2 * n, 2 * n, generator=g),
        "seed_q": torch.randn(n, m, generator=g),
        # a fixed ring keep-mask holding ~9% of the queue per query (as Ring's 90-99 pct)
        "ring": torch.rand(n, m, generator=g) > 0.91,
    }


def bound_fn(kind: str, t: dict) -> Callable[[], None]:
    if kind == IN_BATCH:
        z = torch.cat([t["z1"], t["z2"]]).detach().requires_grad_()
        return lambda: torch.autograd.grad(z @ z.t(), z, t["seed_in"])
    q = t["q"]
    return lambda: torch.autograd.grad(q @ t["queue"].t(), q, t["seed_q"])


def reference_fn(t: dict) -> Callable[[], None]:
    """The plain MoCo cross-entropy over cat([q.k, q.Q^T]) / tau."""
    q, k, queue = t["q"], t["k"], t["queue"]
    target = torch.zeros(q.shape[0], dtype=torch.long)

    def run() -> None:
        logits = torch.cat([(q * k).sum(1, keepdim=True), q @ queue.t()], dim=1) / 0.07
        torch.autograd.grad(TF.cross_entropy(logits, target), q)

    return run


def loss_fn(case: Case, t: dict) -> Callable[[], None]:
    inputs = [t[name] for name in case.grads]
    return lambda: torch.autograd.grad(case.call(t), inputs)


def paired_times(a: Callable[[], None], b: Callable[[], None], repeats: int, warmup: int = 3):
    for _ in range(warmup):
        a()
        b()
    ta, tb = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a()
        t1 = time.perf_counter()
        b()
        t2 = time.perf_counter()
        ta.append(t1 - t0)
        tb.append(t2 - t1)
    return ta, tb


def rss_growth(name: str, n: int, d: int, m: int) -> float | None:
    """Peak-RSS growth (MiB) of one forward + backward, in a fresh process whose allocator
    returns every block of 64 KiB or more to the system when freed (so RSS follows live memory)."""
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); import bench.losses as b; "
        f"b._rss_child({name!r}, {n}, {d}, {m})"
    )
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    try:
        return float(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key):
                return int(line.split()[1])
    raise KeyError(key)


def _rss_child(name: str, n: int, d: int, m: int) -> None:
    torch.set_num_threads(2)
    small, t = make_inputs(8, d, min(m, 8192), seed=1), make_inputs(n, d, m)
    if name.startswith("bound-"):
        kind = IN_BATCH if name == "bound-in-batch" else QUEUE
        run_small, run = bound_fn(kind, small), bound_fn(kind, t)
    elif name == "reference":
        run_small, run = reference_fn(small), reference_fn(t)
    else:
        case = next(c for c in CASES if c.name == name)
        run_small, run = loss_fn(case, small), loss_fn(case, t)
    run_small()  # libraries and thread pools initialised outside the measurement
    try:  # reset the peak-RSS mark (Linux >= 4.0), then measure VmHWM against VmRSS
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        before = _status_kib("VmRSS:")
        run()
        after = _status_kib("VmHWM:")
    except OSError:  # no /proc: the lifetime maximum (an upper bound on the growth)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        run()
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print((after - before) / 1024.0)  # KiB -> MiB


# glibc tunables read at process start: large blocks from the heap, freed memory kept, so a
# fresh 4 MiB matrix is not page-faulted in again at every call (1-2 ms here, which moves the
# in-batch ratios by up to 0.3 between runs under the default policy)
_KEEP_HEAP = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=512, help="pairs (in-batch: 2N rows)")
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--queue", type=int, default=65536, help="queue / memory bank rows")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--only", nargs="*", help="loss names to run")
    ap.add_argument("--no-memory", action="store_true", help="skip the per-loss RSS processes")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (the targets: 2)")
    ap.add_argument(
        "--keep-heap", action="store_true", help="rerun under glibc malloc that keeps freed memory (no mmap, no trim)"
    )
    args = ap.parse_args()
    print(machine_line(), flush=True)  # CPU model, capability, native bf16 or not
    if args.keep_heap and _KEEP_HEAP[0] not in os.environ:
        env = dict(os.environ, **{k: str(2**30) for k in _KEEP_HEAP})
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    heap = "kept (no mmap/trim)" if _KEEP_HEAP[0] in os.environ else "glibc default"
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    t = make_inputs(args.n, args.d, args.queue)
    cases = [c for c in CASES if not args.only or c.name in args.only]
    mib_in = (2 * args.n) ** 2 * 4 / 2**20
    mib_q = args.n * args.queue * 4 / 2**20
    print(
        f"N={args.n} pairs, d={args.d}, queue={args.queue}, threads={args.threads}, "
        f"repeats={args.repeats}, malloc {heap}; "
        f"similarity matrix {mib_in:.0f} MiB (in-batch) / {mib_q:.0f} MiB (queue)"
    )
    ref_ms = None
    if any(c.against == "ref" for c in cases):
        tb, tr = paired_times(bound_fn(QUEUE, t), reference_fn(t), args.repeats)
        ref_ms = statistics.median(tr) * 1e3
        print(
            f"queue bound {statistics.median(tb) * 1e3:.1f} ms; plain cross-entropy reference "
            f"{ref_ms:.1f} ms ({statistics.median(r / b for r, b in zip(tr, tb)):.2f}x bound)"
        )
    mem_base = {}
    if not args.no_memory:
        mem_base = {
            IN_BATCH: rss_growth("bound-in-batch", args.n, args.d, args.queue),
            QUEUE: rss_growth("bound-queue", args.n, args.d, args.queue),
            "ref": rss_growth("reference", args.n, args.d, args.queue),
        }
        print(
            "peak-RSS growth of the baselines (MiB): "
            + ", ".join(f"{k} {v:.1f}" for k, v in mem_base.items() if v is not None)
        )
    head = (
        f"{'loss':24s}{'kind':>9s}{'ms':>9s}{'base ms':>10s}{'x bound':>9s}{'x ref':>7s}"
        f"{'target':>10s}{'':>6s}{'min/min':>9s}{'peak MiB':>10s}{'x sim':>7s}"
    )
    print(head)
    print("-" * len(head))
    failed = []
    for case in cases:
        if not hasattr(LF, case.function):
            print(f"{case.name:24s}{case.kind:>9s}{'missing':>9s}")
            continue
        if case.against == "ref":
            ref_run = reference_fn(t)

            def base(f=ref_run, v=case.views):
                return [f() for _ in range(v)]

        else:
            base = bound_fn(case.kind, t)
        tl, tb = paired_times(loss_fn(case, t), base, args.repeats)
        ms = statistics.median(tl) * 1e3
        ratio = statistics.median(a / b for a, b in zip(tl, tb))
        best = min(tl) / min(tb)  # best-of ratio: the least disturbed repeats of each
        if case.against == "ref":
            x_ref, x_bound = ratio, float("nan")
        else:
            x_ref, x_bound = float("nan"), ratio
        verdict, target = "", ""
        if case.target is not None:
            target = f"{case.target:.1f}x {case.against}"
            verdict = "PASS" if ratio <= case.target else "FAIL"
            if verdict == "FAIL":
                failed.append(case.name)
        peak, x_sim = "", ""
        if not args.no_memory:
            grow = rss_growth(case.name, args.n, args.d, args.queue)
            if grow is not None:
                peak = f"{grow:.1f}"
                x_sim = f"{grow / (mib_in if case.kind == IN_BATCH else mib_q):.1f}"
        bms = statistics.median(tb) * 1e3
        print(
            f"{case.name:24s}{case.kind:>9s}{ms:9.1f}{bms:10.1f}"
            f"{'' if x_bound != x_bound else f'{x_bound:.2f}':>9s}"
            f"{'' if x_ref != x_ref else f'{x_ref:.2f}':>7s}{target:>10s}{verdict:>6s}"
            f"{best:9.2f}{peak:>10s}{x_sim:>7s}"
        )
    print(
        "x bound / x ref: median of per-repeat ratios (the verdict); min/min: fastest loss "
        "repeat over fastest baseline repeat (robust to a busy machine)."
    )
    print("cacr_moco runs V=2 query views; its reference is the cross-entropy once per view.")
    print("all targets met" if not failed else f"missed targets: {', '.join(failed)}")


if __name__ == "__main__":
    main()
