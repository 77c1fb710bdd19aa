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


_BACKEND_S = [0.0]  # seconds spent inside the backend compiler (after Dynamo's tracing)


def _timed(fn):
    def backend(gm, example_inputs, **kw):
        t0 = time.perf_counter()
        try:
            return fn(gm, example_inputs, **kw)
        finally:
            _BACKEND_S[0] += time.perf_counter() - t0

    return backend


def _compile(model, backend: str, **airgraph_config):
    import torch

    if backend == "eager":
        return model
    if backend == "inductor":
        from torch._inductor.compile_fx import compile_fx

        return torch.compile(model, backend=_timed(compile_fx))
    if backend == "airgraph":
        import airgraph

        return torch.compile(model, backend=_timed(airgraph.get_backend(airgraph.CompilerConfig(**airgraph_config))))
    if backend == "openvino":
        import openvino.torch  # noqa: F401  (registers the backend)
        from torch._dynamo import lookup_backend

        ov = lookup_backend("openvino")
        return torch.compile(model, backend=_timed(lambda gm, ex: ov(gm, ex, options={"device": "CPU"})))
    raise ValueError(backend)


def worker(model_name: str, backend: str, batch: int, runs: int, size: str) -> dict:
    import tempfile

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # cold means cold: no Inductor/AOT caches on disk from earlier runs
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="airgraph_bench_inductor_")
    import torch

    torch.set_num_threads(2)
    from airgraph import backend as ag_backend, zoo

    model, args, kwargs = zoo.build(model_name, size=size, batch=batch)
    res = dict(model=model_name, backend=backend, batch=batch)
    reports = []
    ag_backend._REPORT_SINKS.append(reports)
    with torch.no_grad():
        want = model(*args, **kwargs)
        t0 = time.perf_counter()
        fn = _compile(model, backend)
        out = fn(*args, **kwargs)
        res["cold_compile_s"] = time.perf_counter() - t0 if backend != "eager" else 0.0
        res["backend_s"] = _BACKEND_S[0]
        res["engine_ms"] = sum(r.compile_ms for r in reports)
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
            try:
                _compile(model, backend)(*args, **kwargs)
                res["warm_compile_s"] = time.perf_counter() - t0
            except Exception as e:  # a backend that cannot compile twice in one process
                res["warm_compile_s"] = float("nan")
                res["warm_error"] = f"{type(e).__name__}: {e}"[:200]
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


def _call_ns(fn, x, runs: int) -> float:
    for _ in range(10):
        fn(x)
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        fn(x)
        ts.append(time.perf_counter_ns() - t0)
    return statistics.median(ts)


def _chain(steps: int):
    def chain(x):
        for i in range(steps):
            x = x * 1.0001 + 0.0001 if i % 2 == 0 else torch.relu(x)
        return x

    import torch

    return chain, steps + (steps + 1) // 2  # mul+add on even steps, relu on odd


MICRO_BACKENDS = [("eager", {}), ("inductor", {}), ("airgraph", {}),
                  ("airgraph (fusion off)", {"disable_passes": ["fuse_elementwise"]})]


def chain_worker(backend_index: int, steps: int, numel: int, runs: int) -> dict:
    """One chain measurement in a fresh process: Dynamo's per-code-object caches
    from earlier compiles would otherwise add guard checks to every call."""
    import torch

    torch.set_num_threads(2)
    name, cfg = MICRO_BACKENDS[backend_index]
    chain, nodes = _chain(steps)
    fn = chain if name == "eager" else _compile(chain, name.split()[0], **cfg)
    with torch.no_grad():
        return dict(backend=name, nodes=nodes, numel=numel, call_ns=_call_ns(fn, torch.randn(numel), runs))


def _chain_cell(i: int, steps: int, numel: int, runs: int) -> dict:
    cmd = [sys.executable, __file__, "--chain-worker", str(i), str(steps), str(numel), str(runs)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    line = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    if not line:
        raise RuntimeError(f"chain worker {cmd} failed: {(p.stderr.strip().splitlines() or ['no output'])[-1]}")
    return json.loads(line[-1][7:])


def micro(sizes=(20, 200), numel: int = 16, runs: int = 1000) -> list[dict]:
    """Host overhead: chains of tiny elementwise ops (16 elements) at two lengths.
    Per call, and per node as the slope between the two lengths (the fixed cost
    of a call -- Dynamo's guards, AOTAutograd's wrapper, the boundary -- cancels)."""
    rows = []
    for i, (name, _) in enumerate(MICRO_BACKENDS):
        pts = [_chain_cell(i, steps, numel, runs) for steps in sizes]
        (n0, t0), (n1, t1) = [(p["nodes"], p["call_ns"]) for p in pts]
        rows.append(dict(backend=name, nodes=[n0, n1], call_us=[t0 / 1000, t1 / 1000],
                         ns_per_node=(t1 - t0) / (n1 - n0)))
    return rows


def fusion(steps: int = 100, numel: int = 1 << 23, runs: int = 5) -> list[dict]:
    """An elementwise chain on a tensor larger than the caches (32 MiB): one pass over memory
    (fused) or one pass per op."""
    rows = []
    for i, (name, _) in enumerate(MICRO_BACKENDS):
        p = _chain_cell(i, steps, numel, runs)
        rows.append(dict(backend=name, nodes=p["nodes"], numel=numel, ms=p["call_ns"] / 1e6))
    return rows


def engine_overhead(sizes=(20, 200), numel: int = 16, runs: int = 3000) -> dict:
    """The C++ executor's cost per instruction: graphs of N unfused tiny ops (neg,
    relu alternating) run from Python; per-node cost is the slope between two N."""
    import torch

    import airgraph

    x = torch.randn(numel)
    pts = []
    for n_ops in sizes:
        g = airgraph._C.Graph()
        v = g.add_input("float32", [numel], "x")
        for i in range(n_ops):
            v = g.add_node("relu" if i % 2 else "neg", [v], {}, f"n{i}", "")[0]
        g.set_outputs([v])
        g.optimize({"fuse_elementwise"})
        exe = g.compile()
        pts.append(_call_ns(lambda t: exe.run([t]), x, runs))
    (n0, n1), (t0, t1) = sizes, pts
    return dict(nodes=list(sizes), call_ns=pts, ns_per_node=(t1 - t0) / (n1 - n0))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="")
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--size", default="full")
    ap.add_argument("--worker", nargs=3, metavar=("MODEL", "BACKEND", "BATCH"))
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--no-micro", action="store_true", help="skip the host-overhead and fusion micro-benchmarks")
    ap.add_argument("--micro-only", action="store_true", help="only the micro-benchmarks")
    ap.add_argument("--chain-worker", nargs=4, type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.chain_worker:
        print("RESULT " + json.dumps(chain_worker(*a.chain_worker)))
        return
    if a.worker:
        print("RESULT " + json.dumps(worker(a.worker[0], a.worker[1], int(a.worker[2]), a.runs, a.size)))
        return
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
    from airgraph import zoo

    models = [] if a.micro_only else ([m for m in a.models.split(",") if m] or zoo.names())
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
    micro_rows, fusion_rows, eng = [], [], {}
    if "airgraph" in backends and not a.no_micro:
        micro_rows, fusion_rows, eng = micro(), fusion(), engine_overhead()
    write_results(rows, micro_rows, fusion_rows, eng, a)


def _geomean(xs):
    g = 1.0
    for x in xs:
        g *= x
    return g ** (1 / len(xs)) if xs else float("nan")


def write_results(rows, micro_rows, fusion_rows, eng, a):
    import platform

    import torch

    ok = [r for r in rows if "error" not in r]
    by = {(r["model"], r["batch"], r["backend"]): r for r in ok}
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    lines = [
        f"# airgraph benchmark ({time.strftime('%Y-%m-%d %H:%M')})",
        "",
        f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__}, 2 threads, {a.size} configs, "
        f"median of {a.runs} runs, each (model, batch, backend) in its own process. Cold compile: the first "
        "call in a fresh process (Dynamo + the backend; Inductor with an empty cache dir); backend: the part "
        "inside the backend compiler (after Dynamo's tracing; for airgraph and Inductor it includes "
        "AOTAutograd), in brackets airgraph's own part (lowering, passes, planning, kernel creation). "
        "Warm compile: again in the same process after torch._dynamo.reset(). Peak RSS: ru_maxrss of the "
        "process (model, inputs, eager reference output included).",
        "",
        "| model | batch | backend | median ms | vs eager | cold compile s | backend s | warm compile s "
        "| peak RSS MB | max diff |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['batch']} | {r['backend']} | error: {r['error']} | | | | | | |")
            continue
        e = by.get((r["model"], r["batch"], "eager"))
        sp = f"{e['median_ms'] / r['median_ms']:.2f}x" if e else ""
        bk = f"{r.get('backend_s', 0):.1f}" if r["backend"] != "eager" else ""
        if r["backend"] == "airgraph":
            bk += f" ({r.get('engine_ms', 0) / 1000:.2f})"
        lines.append(f"| {r['model']} | {r['batch']} | {r['backend']} | {r['median_ms']:.2f} | {sp} | "
                     f"{r['cold_compile_s']:.1f} | {bk} | {r['warm_compile_s']:.1f} | {r['peak_rss_mb']:.0f} | "
                     f"{r['max_diff']:.1e} |")
    # the targets
    ag = [r for r in ok if r["backend"] == "airgraph"]
    summary = []
    over_ind = [(r, by[(r["model"], r["batch"], "inductor")]) for r in ag if (r["model"], r["batch"], "inductor") in by]
    if over_ind:
        gm = _geomean([i["median_ms"] / r["median_ms"] for r, i in over_ind])
        summary.append(f"- geometric-mean speedup of airgraph over Inductor: **{gm:.2f}x** over {len(over_ind)} "
                       "model/batch pairs (target >= 1.2x)")
        ratios = [(r["model"], r["batch"], r["cold_compile_s"] / i["cold_compile_s"]) for r, i in over_ind
                  if i["cold_compile_s"]]
        if ratios:
            summary.append("- cold compile, airgraph / Inductor (target <= 0.05): " + ", ".join(
                f"{m} b{b} {x:.2f}" for m, b, x in ratios))
    vs_eager = [(r, by[(r["model"], r["batch"], "eager")]) for r in ag if (r["model"], r["batch"], "eager") in by]
    if vs_eager:
        slow = [f"{r['model']} b{r['batch']} {e['median_ms'] / r['median_ms']:.2f}x" for r, e in vs_eager
                if r["median_ms"] >= e["median_ms"]]
        b1 = [(r, e) for r, e in vs_eager if r["batch"] == 1]
        summary.append(f"- faster than eager at batch 1: {sum(r['median_ms'] < e['median_ms'] for r, e in b1)} of "
                       f"{len(b1)} models; not faster: {', '.join(slow) or 'none'}")
        summary.append(f"- geometric-mean speedup over eager: {_geomean([e['median_ms'] / r['median_ms'] for r, e in vs_eager]):.2f}x")
        mem = [f"{r['model']} b{r['batch']} +{r['peak_rss_mb'] - e['peak_rss_mb']:.0f} MB" for r, e in vs_eager
               if r["peak_rss_mb"] > e["peak_rss_mb"]]
        summary.append(f"- peak RSS above eager's: {', '.join(mem) or 'none'}")
    if summary:
        lines += ["", "Targets:", ""] + summary
    if micro_rows:
        n0, n1 = micro_rows[0]["nodes"]
        lines += ["", f"Host overhead: chained elementwise ops on 16-element tensors, {n0} and {n1} ATen nodes; "
                      "per node = the slope between the two (fixed per-call costs cancel)", "",
                  f"| backend | call us ({n0} nodes) | call us ({n1} nodes) | ns per node |", "|---|---|---|---|"]
        for m in micro_rows:
            lines.append(f"| {m['backend']} | {m['call_us'][0]:.1f} | {m['call_us'][1]:.1f} | "
                         f"{m['ns_per_node']:.0f} |")
    if eng:
        lines += ["", f"Engine run loop alone (C++ executor, unfused graphs of {eng['nodes'][0]} and {eng['nodes'][1]} "
                      f"tiny ops called from Python): {eng['call_ns'][0] / 1000:.1f} / {eng['call_ns'][1] / 1000:.1f} "
                      f"us per call, {eng['ns_per_node']:.0f} ns per instruction (kernel included)."]
    if fusion_rows:
        f0 = fusion_rows[0]
        lines += ["", f"Fusion: the same chain ({f0['nodes']} ATen nodes) on {f0['numel']} float32 elements", "",
                  "| backend | ms |", "|---|---|"]
        for f in fusion_rows:
            lines.append(f"| {f['backend']} | {f['ms']:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(RESULTS, "latest.md"), "w") as f:
        f.write(text)
    with open(os.path.join(RESULTS, "latest.json"), "w") as f:
        json.dump(dict(rows=rows, micro=micro_rows, fusion=fusion_rows, engine=eng), f, indent=1)
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
