"""Per-model report for the zoo: ATen nodes, fallback nodes, max difference vs
eager, eager and airgraph latency (median of N runs), and compile time.

    python bench/zoo_report.py --size full --runs 20 [--models bert,gpt2] [--out bench/results/zoo.md]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

import airgraph  # noqa: E402
from airgraph import zoo  # noqa: E402


def _flat(o):
    if isinstance(o, torch.Tensor):
        return [o]
    if isinstance(o, (list, tuple)):
        return [t for x in o for t in _flat(x)]
    return []


def median_ms(fn, runs: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1000)
    return statistics.median(ts)


def report(name: str, size: str, batch: int, runs: int) -> dict:
    model, args, kwargs = zoo.build(name, size=size, batch=batch)
    with torch.no_grad():
        want = model(*args, **kwargs)
        eager_ms = median_ms(lambda: model(*args, **kwargs), runs)
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="airgraph")
        t0 = time.perf_counter()
        got = compiled(*args, **kwargs)
        compile_s = time.perf_counter() - t0
        ag_ms = median_ms(lambda: compiled(*args, **kwargs), runs)
    diff = max((a.float() - b.float()).abs().max().item() for a, b in zip(_flat(got), _flat(want)))
    scale = max(b.float().abs().max().item() for b in _flat(want))
    rep = airgraph.explain(model, *args, **kwargs)
    return dict(model=name, nodes=rep.total_nodes, fallback=rep.fallback_nodes, max_diff=diff, scale=scale,
                eager_ms=eager_ms, airgraph_ms=ag_ms, compile_s=compile_s, engine_compile_ms=rep.compile_ms)


def row_text(r: dict) -> str:
    return (f"| {r['model']} | {r['nodes']} | {r['fallback']} | {r['max_diff']:.2e} ({r['scale']:.2g}) | "
            f"{r['eager_ms']:.2f} | {r['airgraph_ms']:.2f} | {r['eager_ms'] / r['airgraph_ms']:.2f}x | "
            f"{r['compile_s']:.2f} ({r['engine_compile_ms']:.0f}) |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="full", choices=zoo.SIZES)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--models", default=",".join(zoo.names()))
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    torch.manual_seed(0)
    rows = []
    head = ("| model | ATen nodes | fallback | max diff vs eager (output scale) | eager ms | airgraph ms | "
            "speedup | cold compile s (engine part ms) |\n|---|---|---|---|---|---|---|---|")
    print(f"zoo report: size={a.size} batch={a.batch} threads={torch.get_num_threads()} runs={a.runs}")
    print(head)
    for name in a.models.split(","):
        r = report(name, a.size, a.batch, a.runs)
        rows.append(r)
        print(row_text(r), flush=True)
    if a.out:
        with open(a.out, "w") as f:
            f.write(f"size={a.size} batch={a.batch} threads={torch.get_num_threads()} runs={a.runs}\n\n{head}\n")
            f.writelines(row_text(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
