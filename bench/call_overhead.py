"""What one call costs beyond the engine run (issue 35, item 5), on three models:

  tiny   a chain of 50 x (Linear(16, 16) + ReLU), batch 1: ~100 tiny ops, 100 parameters
  vit    the zoo's small ViT config (ViTModel: 32x32 image, 2 layers, 64 wide), batch 1: 40 parameters
  mobilenetv2  the zoo's small MobileNetV2 config, batch 1: 262 parameters and buffers, each a graph
         input Dynamo fetches from the module tree and guards on every call (the many-weights case)

For each model, interleaved blocks of calls (one block of each variant per round, the order rotated
every round), the median over rounds of each block's time per call, in microseconds:

  engine         the EngineGraph's run of an `airgraph.load`ed file (the lowest-level run entry)
  load           the loaded file's callable (airgraph.load(path)(x))
  compile        torch.compile(model, backend="airgraph")(x), the graph compiled in this process
  compile.inner  what torch.compile's Dynamo calls (our callable), fed the argument list of a real
                 call (parameters + input): Dynamo's guards and frame are the difference
  compile.hit    torch.compile of a copy of the model whose graph came from airgraph's compile cache
                 (a second phase, after torch._dynamo.reset(), with engine, load and cache_compile.loaded)
  cache_compile  airgraph.cache_compile(model.forward)(x), replaying the entry traced in this process
  cache_compile.loaded  the same entry loaded from its folder (what a later process replays)
  cache_compile.engine  that entry's engine graph run alone (programs from bound weights can differ
                 from the loaded file's: the part of the gap to `load` that is not the call path)
  eager          model(x)

    .venv/bin/python bench/call_overhead.py [--rounds N] [--models tiny,vit,mobilenetv2] [--json PATH]

A benchmark, not a test: compile.inner reads airgraph's internals. Everything runs under
torch.no_grad() with the default config (weights checked on every call).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import tempfile
import time

import torch

import airgraph
import airgraph.backend as be
from airgraph import zoo


class Tiny(torch.nn.Module):
    def __init__(self, layers: int = 50, width: int = 16):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(layers))

    def forward(self, x):
        for lin in self.layers:
            x = torch.relu(lin(x))
        return x


def build(name: str):
    torch.manual_seed(0)
    if name == "tiny":
        return Tiny().eval(), (torch.randn(1, 16),)
    model, args, kwargs = zoo.build(name, "small", batch=1)
    assert not kwargs
    return model.eval(), args


def cpu_line() -> str:
    with open("/proc/cpuinfo") as f:
        info = f.read()
    cpu = next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name")), "?")
    isa = " ".join(x for x in ("avx2", "avx512f", "avx512_bf16", "amx_tile") if f" {x}" in info)
    return f"{cpu} ({os.cpu_count()} cores), ISA {isa}; torch {torch.__version__}, {torch.get_num_threads()} threads"


def variants(name: str, folder: str) -> dict:
    model, args = build(name)
    out: dict = {}
    with torch.no_grad():
        want = model(*args)
        out["eager"] = lambda: model(*args)

        path = os.path.join(folder, f"{name}.airgraph")
        airgraph.export(model, args, path)
        loaded = airgraph.load(path)
        loaded(*args)
        eg = loaded._static
        xs = list(args)
        out["engine"] = lambda: eg.run(xs)
        out["load"] = lambda: loaded(*args)

        # torch.compile: the first compile of a graph misses airgraph's compile cache (AOTAutograd's
        # runtime wrapper around our callable); a later one (another process, here a copy of the
        # model after torch._dynamo.reset) hits it
        inner = []
        orig = be.airgraph_backend

        def spy(gm, example_inputs, **kw):
            fn = orig(gm, example_inputs, **kw)
            inner.append(fn)
            return fn

        torch._dynamo.reset()
        compiled = torch.compile(model, backend=spy)
        compiled(*args)
        out["compile"] = lambda: compiled(*args)
        gm_args = _dynamo_args(compiled, args, inner[0])
        inner_fn = inner[0]
        if gm_args is not None:
            # compile.inner: what Dynamo's bytecode calls, with the argument list of a real call
            out["compile.inner"] = lambda: inner_fn(*gm_args)

        # cache_compile: the entry traced in this process, and the same entry loaded from the folder
        cc_folder = os.path.join(folder, "cc_" + name)
        cc = airgraph.cache_compile(model.forward, cache_dir=cc_folder)
        cc(*args)
        cc(*args)
        out["cache_compile"] = lambda: cc(*args)
        model3 = copy.deepcopy(model)
        cc2 = airgraph.cache_compile(model3.forward, cache_dir=cc_folder)
        cc2(*args)
        assert cc2.counts["loaded"] == 1 and cc2.counts["traces"] == 0, cc2.counts
        out["cache_compile.loaded"] = lambda: cc2(*args)
        # cache_compile.engine: the loaded entry's engine graph alone (its program is built from bound
        # weights, the loaded file's from the file's: the engine run itself may differ)
        entry, saved_eg, graph_args = cc2.entries[0], None, None
        code = getattr(entry, "replay_fast", entry.replay).__code__  # (replay_fast: since 753be17)
        raw = next((v for k, v in code and entry.replay.__globals__.items()
                    if k in code.co_names and k.startswith("__airgraph_") and "compiled_fn" in k), None)
        raw = getattr(raw, "_torchdynamo_orig_callable", raw)
        if raw is not None and hasattr(raw, "_run"):
            graph_args = _caught_args(raw, lambda: cc2(*args))
            graphs = raw._run.binder.binding.graphs if hasattr(raw._run, "binder") else []
            saved_eg = graphs[0] if graphs and hasattr(graphs[0], "run") else None  # (not a sized graph)
        if saved_eg is not None and graph_args is not None:
            out["cache_compile.engine"] = lambda: saved_eg.run(graph_args)
        for k in ("compile", "cache_compile", "cache_compile.loaded", "load"):
            o = out[k]()
            a, b = (o[0] if isinstance(o, (tuple, list)) else o), (want[0] if isinstance(want, (tuple, list)) else want)
            assert torch.allclose(a, b, atol=1e-4, rtol=1e-4), k
    return out, lambda: _hit_variants(model, args, out)


def _hit_variants(model, args, out: dict) -> dict:
    """The second phase: torch.compile of a copy of the model whose graph comes from airgraph's
    compile cache. Measured after torch._dynamo.reset(), alone with the variants that need no
    Dynamo cache entry: two compiled copies of one model share the code object Dynamo keys its cache
    on, and a call would then check the other copy's guards first."""
    torch._dynamo.reset()
    with torch.no_grad():
        model2 = copy.deepcopy(model)
        compiled2 = torch.compile(model2, backend="airgraph")
        got = compiled2(*args)
        want = model(*args)
        assert torch.allclose(got[0] if isinstance(got, (tuple, list)) else got,
                              want[0] if isinstance(want, (tuple, list)) else want, atol=1e-4, rtol=1e-4)
    return {"engine": out["engine"], "load": out["load"], "compile.hit": lambda: compiled2(*args),
            "cache_compile.loaded": out["cache_compile.loaded"]}


def _caught_args(obj, call):
    """The arguments `obj` (an instance of a class of ours) is called with during `call()`."""
    cls, caught = type(obj), []
    orig = cls.__call__

    def spy(self, *a, **k):
        if self is obj:
            caught.append(a)
        return orig(self, *a, **k)

    cls.__call__ = spy
    try:
        with torch.no_grad():
            call()
    finally:
        cls.__call__ = orig
    return caught[0] if caught else None


def _dynamo_args(compiled, args, fn):
    """The arguments Dynamo passes to the backend's callable on a call: caught by wrapping its
    __call__ for one call (AirgraphCompiled is a class of ours)."""
    cls = type(fn)
    caught = []
    orig = cls.__call__

    def call(self, *a, **k):
        if self is fn:
            caught.append(a)
        return orig(self, *a, **k)

    cls.__call__ = call
    try:
        with torch.no_grad():
            compiled(*args)
    finally:
        cls.__call__ = orig
    return caught[0] if caught else None


def measure(fns: dict, rounds: int, block_s: float = 0.02) -> dict:
    names = list(fns)
    # calls per block: about block_s of the slowest variant's time
    per = {}
    for k in names:
        t0 = time.perf_counter()
        for _ in range(20):
            fns[k]()
        per[k] = (time.perf_counter() - t0) / 20
    n = max(20, int(block_s / max(per.values())))
    times = {k: [] for k in names}
    with torch.no_grad():
        for r in range(rounds):
            order = names[r % len(names):] + names[: r % len(names)]
            for k in order:
                f = fns[k]
                t0 = time.perf_counter_ns()
                for _ in range(n):
                    f()
                times[k].append((time.perf_counter_ns() - t0) / n / 1000)
    return {k: statistics.median(v) for k, v in times.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--models", default="tiny,vit,mobilenetv2")
    ap.add_argument("--json")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (default 1: the per-call cost is host work; fewer threads, less noise)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(cpu_line())
    res = {}
    with tempfile.TemporaryDirectory() as folder:
        os.environ["AIRGRAPH_CACHE_DIR"] = os.path.join(folder, "cache")  # (a fresh compile cache)
        for name in a.models.split(","):
            fns, phase2 = variants(name, folder)
            med = measure(fns, a.rounds)
            try:
                med2 = measure(phase2(), a.rounds)
            except Exception as e:  # (an older tree: cache_compile's in-process entry and torch._dynamo.reset)
                print(f"{name}: phase 2 failed: {type(e).__name__}: {str(e)[:200]}")
                med2 = {"engine": 1.0, "load": 1.0, "compile.hit": float("nan"), "cache_compile.loaded": 1.0}
            res[name] = {"phase1": med, "phase2": med2}
            for title, m in (("", med), (" (phase 2: compile-cache hit)", med2)):
                e = m["engine"]
                print(f"\n{name}{title}: median us per call over {a.rounds} interleaved rounds")
                for k, v in m.items():
                    print(f"  {k:21s} {v:9.1f}   engine + {v - e:7.1f}   load + {v - m['load']:7.1f}")
            print(f"  compile / cache_compile.loaded = {med['compile'] / med['cache_compile.loaded']:.3f}; "
                  f"compile.hit / cache_compile.loaded = {med2['compile.hit'] / med2['cache_compile.loaded']:.3f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cpu": cpu_line(), "results": res}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
