"""The benchmark: every zoo model on every backend, side by side, in one run.

    python bench/run.py                      # full configs, all models, all backends
    python bench/run.py --models bert,gpt2 --backends eager,airgraph --runs 10

Backends: eager, inductor (torch.compile default), airgraph, openvino
(OpenVINO's torch.compile backend). Each (model, backend, batch) runs in its own
process so that peak memory (ru_maxrss) and cold compile time are its own; all
use 2 threads. Reports median latency, speedup over eager, cold compile time
(first call after a fresh process), warm compile time (compiling again in the
same process after torch._dynamo.reset()), and peak RSS. Writes
bench/results/latest.md, latest.json and latest.png.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
BACKENDS = ["eager", "inductor", "airgraph", "openvino"]
BATCH8 = {"bert", "vit", "resnet50", "mobilenetv2", "minilm"}  # encoders and CNNs


def _compile(model, backend: str):
    import torch

    if backend == "eager":
        return model
    if backend == "inductor":
        return torch.compile(model)
    if backend == "airgraph":
        return torch.compile(model, backend="airgraph")
    if backend == "openvino":
        import openvino.torch  # noqa: F401  (registers the backend)

        return torch.compile(model, backend="openvino", options={"device": "CPU"})
    raise ValueError(backend)


def worker(model_name: str, backend: str, batch: int, runs: int, size: str) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.set_num_threads(2)
    from airgraph import zoo

    model, args, kwargs = zoo.build(model_name, size=size, batch=batch)
    res = dict(model=model_name, backend=backend, batch=batch)
    with torch.no_grad():
        want = model(*args, **kwargs)
        t0 = time.perf_counter()
        fn = _compile(model, backend)
        out = fn(*args, **kwargs)
        res["cold_compile_s"] = time.perf_counter() - t0 if backend != "eager" else 0.0
        for _ in range(3):
            fn(*args, **kwargs)
        ts = []
        for _ in range(runs):
            t0 = time.perf_counter()
            fn(*args, **kwargs)
            ts.append((time.perf_counter() - t0) * 1000)
        res["median_ms"] = statistics.median(ts)
        res["max_diff"] = _max_diff(out, want)
        res["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        if backend != "eager":
            torch._dynamo.reset()
            t0 = time.perf_counter()
            _compile(model, backend)(*args, **kwargs)
            res["warm_compile_s"] = time.perf_counter() - t0
        else:
            res["warm_compile_s"] = 0.0
    return res


def _max_diff(a, b) -> float:
    import torch

    def flat(o):
        if isinstance(o, torch.Tensor):
            return [o]
        if isinstance(o, (list, tuple)):
            return [t for x in o for t in flat(x)]
        return []

    return max(((x.float() - y.float()).abs().max().item() if x.numel() else 0.0)
               for x, y in zip(flat(a), flat(b)))


def micro(n_ops: int = 200, numel: int = 16, runs: int = 200) -> list[dict]:
    """Host overhead: N chained tiny elementwise ops; time per node."""
    import torch

    torch.set_num_threads(2)

    def chain(x):
        for i in range(n_ops):
            x = x * 1.0001 + 0.0001 if i % 2 == 0 else torch.relu(x)
        return x

    n_nodes = n_ops + n_ops // 2  # mul+add on even steps, relu on odd
    x = torch.randn(numel)
    rows = []
    for backend in ["eager", "inductor", "airgraph"]:
        torch._dynamo.reset()
        fn = chain if backend == "eager" else _compile(chain, backend)
        with torch.no_grad():
            for _ in range(5):
                fn(x)
            ts = []
            for _ in range(runs):
                t0 = time.perf_counter_ns()
                fn(x)
                ts.append(time.perf_counter_ns() - t0)
        med = statistics.median(ts)
        rows.append(dict(backend=backend, nodes=n_nodes, call_us=med / 1000, ns_per_node=med / n_nodes))
    return rows


def engine_overhead(n_ops: int = 200, numel: int = 16, runs: int = 2000) -> dict:
    """The engine's own per-node cost (C++ run loop, no Python): one call of an
    N-node graph of tiny ops through the C++ executor, minus nothing."""
    import torch

    import airgraph

    g = airgraph._C.Graph()
    v = g.add_input("float32", [numel], "x")
    for i in range(n_ops):
        v = g.add_node("relu" if i % 2 else "neg", [v], {}, f"n{i}", "")[0]
    g.set_outputs([v])
    g.optimize()
    exe = g.compile()
    x = torch.randn(numel)
    for _ in range(10):
        exe.run([x])
    t0 = time.perf_counter_ns()
    for _ in range(runs):
        exe.run([x])
    per_call = (time.perf_counter_ns() - t0) / runs
    exe.set_profiling(True)
    exe.run([x])
    kernel_ns = sum(exe.last_times_ns())
    return dict(nodes=n_ops, call_ns=per_call, ns_per_node=per_call / n_ops,
                kernel_ns_per_node=kernel_ns / n_ops)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="")
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--size", default="full")
    ap.add_argument("--worker", nargs=3, metavar=("MODEL", "BACKEND", "BATCH"))
    ap.add_argument("--timeout", type=int, default=1800)
    a = ap.parse_args()
    if a.worker:
        print("RESULT " + json.dumps(worker(a.worker[0], a.worker[1], int(a.worker[2]), a.runs, a.size)))
        return
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
    from airgraph import zoo

    models = a.models.split(",") if a.models else zoo.names()
    backends = a.backends.split(",")
    os.makedirs(RESULTS, exist_ok=True)
    rows = []
    for m in models:
        for batch in ([1, 8] if m in BATCH8 else [1]):
            for b in backends:
                cmd = [sys.executable, __file__, "--worker", m, b, str(batch), "--runs", str(a.runs), "--size",
                       a.size]
                try:
                    p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
                    line = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
                    if line:
                        r = json.loads(line[-1][7:])
                    else:
                        err = (p.stderr.strip().splitlines() or ["no output"])[-1]
                        r = dict(model=m, backend=b, batch=batch, error=err[:200])
                except subprocess.TimeoutExpired:
                    r = dict(model=m, backend=b, batch=batch, error=f"timeout after {a.timeout}s")
                rows.append(r)
                print(json.dumps(r), flush=True)
    micro_rows = micro() if "airgraph" in backends else []
    eng = engine_overhead() if "airgraph" in backends else {}
    write_results(rows, micro_rows, eng, a)


def write_results(rows, micro_rows, eng, a):
    import platform

    import torch

    eager = {(r["model"], r["batch"]): r.get("median_ms") for r in rows if r["backend"] == "eager"}
    ind = {(r["model"], r["batch"]): r for r in rows if r["backend"] == "inductor"}
    lines = [
        f"# airgraph benchmark ({time.strftime('%Y-%m-%d %H:%M')})",
        "",
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"2 threads, {a.size} configs, median of {a.runs} runs. OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '')} "
        "(GEMM/conv: oneDNN for airgraph; PyTorch's own oneDNN/MKL paths for eager and Inductor).",
        "",
        "| model | batch | backend | median ms | speedup vs eager | cold compile s | warm compile s | peak RSS MB | max diff |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['batch']} | {r['backend']} | error: {r['error']} | | | | | |")
            continue
        e = eager.get((r["model"], r["batch"]))
        sp = f"{e / r['median_ms']:.2f}x" if e else ""
        lines.append(f"| {r['model']} | {r['batch']} | {r['backend']} | {r['median_ms']:.2f} | {sp} | "
                     f"{r['cold_compile_s']:.1f} | {r['warm_compile_s']:.1f} | {r['peak_rss_mb']:.0f} | "
                     f"{r['max_diff']:.1e} |")
    # geometric mean of airgraph over inductor
    ratios = []
    for r in rows:
        i = ind.get((r["model"], r["batch"]))
        if r["backend"] == "airgraph" and "error" not in r and i and "error" not in i:
            ratios.append(i["median_ms"] / r["median_ms"])
    if ratios:
        gm = 1.0
        for x in ratios:
            gm *= x
        gm **= 1 / len(ratios)
        lines += ["", f"Geometric-mean speedup of airgraph over Inductor: {gm:.2f}x over {len(ratios)} model/batch pairs."]
    if micro_rows:
        lines += ["", "Host overhead: 200 chained elementwise steps (300 ATen nodes) on 16-element tensors", "",
                  "| backend | call us | ns per node |", "|---|---|---|"]
        for m in micro_rows:
            lines.append(f"| {m['backend']} | {m['call_us']:.1f} | {m['ns_per_node']:.0f} |")
    if eng:
        lines += ["", f"Engine run loop alone (C++ executor, 200-node graph, called from Python): "
                      f"{eng['call_ns'] / 1000:.1f} us per call, {eng['ns_per_node']:.0f} ns per node, of which "
                      f"{eng['kernel_ns_per_node']:.0f} ns in the kernels."]
    text = "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(RESULTS, "latest.md"), "w") as f:
        f.write(text)
    with open(os.path.join(RESULTS, "latest.json"), "w") as f:
        json.dump(dict(rows=rows, micro=micro_rows, engine=eng), f, indent=1)
    _chart(rows)


def _chart(rows):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    keys = sorted({(r["model"], r["batch"]) for r in rows}, key=lambda k: (k[0], k[1]))
    backends = [b for b in BACKENDS if any(r["backend"] == b for r in rows)]
    eager = {(r["model"], r["batch"]): r.get("median_ms") for r in rows if r["backend"] == "eager"}
    fig, ax = plt.subplots(figsize=(max(8, len(keys) * 1.2), 4.5))
    w = 0.8 / max(1, len(backends))
    for j, b in enumerate(backends):
        ys = []
        for k in keys:
            r = next((r for r in rows if (r["model"], r["batch"]) == k and r["backend"] == b), None)
            ys.append(eager[k] / r["median_ms"] if r and "median_ms" in r and eager.get(k) else 0)
        ax.bar([i + j * w for i in range(len(keys))], ys, w, label=b)
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xticks([i + w * (len(backends) - 1) / 2 for i in range(len(keys))])
    ax.set_xticklabels([f"{m}\nb{bt}" for m, bt in keys], fontsize=8)
    ax.set_ylabel("speedup over eager")
    ax.set_title("airgraph benchmark: speedup over eager PyTorch (2 threads)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(RESULTS, "latest.png"), dpi=110)


if __name__ == "__main__":
    main()
