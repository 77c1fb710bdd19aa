"""GEMMs at the roofline: the engine's linear against the field's best on the zoo's shapes.

    python bench/gemm.py                     # every shape below, M = 8 .. 4096 (~4 min, 2 cores)
    python bench/gemm.py --m 1024,1576 --shapes 768x768,768x3072   # a few

For each weight shape K x N of the zoo's linears (BERT/ViT base: 768x768, 768x3072, 3072x768, and
the fused QKV 768x2304 that a merged GEMM would run; the 0.5B decoder's 896x4864 and 4864x896) and
M rows (batch x tokens: 8 is batched decode, 1024 BERT base b8 at 128 tokens, 1576 ViT base b8),
one f32 `y = x @ W^T + b` per call, 2 threads, through:

  mkl        torch's F.linear (aten addmm: MKL's sgemm on this build)
  onednn     oneDNN with the weight packed once for M (torch.ops.mkldnn._linear_pointwise, what
             Inductor's freezing runs)
  inductor   torch.compile(nn.Linear) with Inductor's defaults
  airgraph   torch.compile(nn.Linear, backend="airgraph") (its own oneDNN matmul; the weight packed
             or read in place as its heuristic decides)

Rounds call every backend once in a rotated order (the VM drifts 10-20% in minutes); the table shows
each one's median GFLOP/s (2*M*N*K per call) and airgraph's ratio to the best of the others. The
machine's roof is bench/run.py's (the best square GEMM).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

SHAPES = ["768x768", "768x2304", "768x3072", "3072x768", "896x4864", "4864x896"]
MS = [8, 64, 256, 1024, 1576, 4096]


def _backends(k: int, n: int, m: int):
    import airgraph  # noqa: F401  (registers the backend)

    torch.manual_seed(0)
    lin = torch.nn.Linear(k, n).eval()
    w, b = lin.weight.detach(), lin.bias.detach()
    out = {"mkl": lambda x: torch.nn.functional.linear(x, w, b)}
    if torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise"):
        packed = torch.ops.mkldnn._reorder_linear_weight(w, m)
        out["onednn"] = lambda x: torch.ops.mkldnn._linear_pointwise(x, packed, b, "none", [], "")
    out["inductor"] = torch.compile(lin, dynamic=False)
    out["airgraph"] = torch.compile(lin, backend="airgraph", dynamic=False)
    return out


def run_cell(k: int, n: int, m: int, rounds: int, min_seconds: float) -> dict:
    fns = _backends(k, n, m)
    x = torch.randn(m, k)
    times = {name: [] for name in fns}
    with torch.no_grad():
        want = fns["mkl"](x)
        for name, f in fns.items():  # compile, pack, warm up; every result checked
            for _ in range(3):
                got = f(x)
            torch.testing.assert_close(got, want, atol=1e-3, rtol=1e-3)
        reps = max(1, int(2e9 / (2 * m * n * k)))  # calls per sample: ~2 GFLOP
        names = list(fns)
        t_end, r = time.perf_counter() + min_seconds, 0
        while r < rounds or time.perf_counter() < t_end:
            for name in names[r % len(names):] + names[: r % len(names)]:
                f = fns[name]
                t0 = time.perf_counter()
                for _ in range(reps):
                    f(x)
                times[name].append((time.perf_counter() - t0) / reps)
            r += 1
    flops = 2.0 * m * n * k
    return {name: flops / statistics.median(ts) / 1e9 for name, ts in times.items()}


def _gflops(v: float) -> str:
    # whole numbers at the rates the table is about; two decimals below 10 GFLOP/s (a tiny shape on a loaded
    # machine) so that a slow cell reads as slow, never as 0
    return f"{v:.0f}" if v >= 10 else f"{v:.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=",".join(SHAPES), help="KxN weight shapes")
    ap.add_argument("--m", default=",".join(map(str, MS)), help="rows")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--min-seconds", type=float, default=1.0)
    a = ap.parse_args()
    torch.set_num_threads(2)
    torch._dynamo.config.recompile_limit = 256
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    print(f"GEMM f32, 2 threads, {cpu}, torch {torch.__version__}; median GFLOP/s over interleaved rounds\n")
    head = None
    for shape in a.shapes.split(","):
        k, n = (int(v) for v in shape.split("x"))
        for m in (int(v) for v in a.m.split(",")):
            g = run_cell(k, n, m, a.rounds, a.min_seconds)
            if head is None:
                head = list(g)
                print("| K x N | M | " + " | ".join(head) + " | airgraph / best other |")
                print("|---|---|" + "---|" * (len(head) + 1))
            best = max(v for name, v in g.items() if name != "airgraph")
            print(f"| {k} x {n} | {m} | " + " | ".join(_gflops(g[h]) for h in head) +
                  f" | {g['airgraph'] / best:.2f} |", flush=True)
            torch._dynamo.reset()


if __name__ == "__main__":
    main()
