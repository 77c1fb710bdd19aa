"""Varying shapes: an encoder served with 16 sequence lengths x 3 batch sizes, side by side.

    python bench/varying_shapes.py --size small      # zoo BERT small (~2 min)
    python bench/varying_shapes.py --size full       # zoo BERT base (~10 min)

Backends, all in one process with 2 threads: eager; Inductor (torch.compile, dynamic=None:
automatic dynamic shapes after the second size); airgraph with the same default; airgraph with
set_dim_gears on the sequence dim (the 16 lengths, built when compiling); and airgraph static
(dynamic=False: one compile per size, made for the three steady sizes only: the reference for
steady latency).

Total: the 48 calls (16 lengths x 3 batches) of one pass over every (length, batch) in serving order, compiles included,
each backend compiled fresh (torch._dynamo.reset) before its pass. Steady latency: after every
backend has seen every size, rounds over three sizes call each backend in a rotated order
(interleaved, so the VM's drift hits all alike); medians per size. Dynamo graphs: how many graphs
Dynamo handed the backend. Engine work: airgraph's per-size program builds (ms each).

Inductor compiles with an empty cache directory (TORCHINDUCTOR_CACHE_DIR, a fresh temporary
folder per run), as on a user's first run: its on-disk caches (FX graphs, kernels) would otherwise
make a second run of this benchmark report a fraction of the first run's compile time. Pass
--inductor-cache to keep the usual cache (what a process restart on the same machine sees).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
if "--inductor-cache" not in sys.argv:  # a cold Inductor: a cache folder of its own, removed at exit
    import atexit
    import shutil
    import tempfile

    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor_cold_")
    atexit.register(shutil.rmtree, os.environ["TORCHINDUCTOR_CACHE_DIR"], True)
import torch  # noqa: E402

torch._dynamo.config.recompile_limit = 64  # the static reference compiles once per size

THREADS = 2


def _inputs(batch, seq, vocab):
    g = torch.Generator().manual_seed(batch * 1000 + seq)
    ids = torch.randint(1, vocab, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[0, -max(1, seq // 4):] = 0
    return ids, mask


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="small", choices=("small", "full"))
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--json", default="")
    ap.add_argument("--lengths", type=int, default=16, help="how many sequence lengths (a smoke run uses fewer)")
    ap.add_argument("--backends", default="eager,inductor,airgraph,airgraph-gears,airgraph-static")
    ap.add_argument("--inductor-cache", action="store_true",
                    help="keep Inductor's usual on-disk cache (default: a fresh, empty one)")
    a = ap.parse_args()
    torch.set_num_threads(THREADS)
    import airgraph
    from airgraph import zoo
    from airgraph.backend import collect_reports
    from torch._inductor.compile_fx import compile_fx

    model, _, _ = zoo.build("bert", a.size)
    vocab = 1000 if a.size == "small" else 30522
    step = 4 if a.size == "small" else 8
    lengths = [step * (i + 1) for i in range(16)][16 - a.lengths:]
    batches = [1, 2, 4]
    order = [(b, s) for s in lengths for b in batches]
    steady = [(1, lengths[len(lengths) // 4]), (2, lengths[len(lengths) * 5 // 8]), (4, lengths[-1])]

    def counting(be):
        n = [0]

        def backend(gm, ex):
            n[0] += 1
            return be(gm, ex)

        return backend, n

    results = {}
    compiled = {}
    sinks = {}
    for name in a.backends.split(","):
        torch._dynamo.reset()
        if name == "eager":
            fn, n = model, [0]
        elif name == "inductor":
            be, n = counting(compile_fx)
            fn = torch.compile(model, backend=be)
        else:
            be, n = counting(airgraph.get_backend())
            fn = torch.compile(model, backend=be, dynamic=False if name == "airgraph-static" else None)
        cm = collect_reports()
        sink = cm.__enter__()
        t0 = time.perf_counter()
        with torch.no_grad():
            # the static reference is compiled at the steady sizes only (a compile per size)
            for b, s in (steady if name == "airgraph-static" else order):
                ids, mask = _inputs(b, s, vocab)
                if name == "airgraph-gears":
                    airgraph.set_dim_gears(ids, {1: lengths})
                    airgraph.set_dim_gears(mask, {1: lengths})
                fn(ids, mask)
        total = time.perf_counter() - t0
        cm.__exit__(None, None, None)
        builds = [ms for r in sink for g in r.symbolic for ms in g.build_ms]
        results[name] = dict(total_s=total, dynamo_graphs=n[0], engine_builds=len(builds),
                             engine_build_ms_median=statistics.median(builds) if builds else None)
        compiled[name] = fn
        sinks[name] = sink
        print(f"{name:16s} total {total:7.2f} s  Dynamo graphs {n[0]}"
              + (f"  engine programs {len(builds)}, median {statistics.median(builds):.1f} ms" if builds else ""),
              flush=True)
    # steady latency, interleaved
    names = list(compiled)
    lat = {nm: {f"{b}x{s}": [] for b, s in steady} for nm in names}
    with torch.no_grad():
        inputs = {(b, s): _inputs(b, s, vocab) for b, s in steady}
        for r in range(a.rounds):
            for b, s in steady:
                rot = names[r % len(names):] + names[: r % len(names)]
                for nm in rot:
                    t0 = time.perf_counter()
                    compiled[nm](*inputs[(b, s)])
                    lat[nm][f"{b}x{s}"].append((time.perf_counter() - t0) * 1000)
    for nm in names:
        results[nm]["steady_ms"] = {k: statistics.median(v) for k, v in lat[nm].items()}
    cpu = open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0].strip(": \t")
    print(f"\nVarying shapes: zoo BERT {a.size}, {len(lengths)} lengths ({lengths[0]}..{lengths[-1]}) "
          f"x batch {batches}, {len(order)} calls; {cpu}, {THREADS} threads, torch {torch.__version__}; "
          f"Inductor's cache: {'the usual one' if a.inductor_cache else 'empty (a first run)'}\n")
    hdr = "| backend | total, compiles included (s) | Dynamo graphs | engine programs (median ms each) | " + \
        " | ".join(f"steady {k} (ms)" for k in lat[names[0]]) + " |"
    print(hdr)
    print("|" + "---|" * (4 + len(steady)))
    for nm in names:
        r = results[nm]
        eb = f"{r['engine_builds']} ({r['engine_build_ms_median']:.1f})" if r["engine_builds"] else "-"
        total = f"{r['total_s']:.2f}" if nm != "airgraph-static" else f"({r['total_s']:.2f} for 3 sizes)"
        print(f"| {nm} | {total} | {r['dynamo_graphs'] if nm != 'eager' else '-'} | {eb} | "
              + " | ".join(f"{v:.2f}" for v in r["steady_ms"].values()) + " |")
    for nm in ("airgraph", "airgraph-gears"):
        if nm not in results or "airgraph-static" not in results:
            continue
        r = results[nm]
        ratio = [r["steady_ms"][k] / results["airgraph-static"]["steady_ms"][k] for k in r["steady_ms"]]
        vs = f"total {r['total_s'] / results['inductor']['total_s']:.2f}x Inductor's; " if "inductor" in results else ""
        print(f"\n{nm}: {vs}steady latency / static: " + ", ".join(f"{x:.2f}" for x in ratio))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(size=a.size, cpu=cpu, results=results), f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
