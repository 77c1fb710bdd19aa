"""Per-call cost of airgraph's weight checks on BERT-base (zoo "bert", size "full", batch 1).

    .venv/bin/python bench/weight_checks.py [ROUNDS] [--eager] [--small]

(--small: the small BERT config, a quick smoke run.)

1. the check alone: WeightGuard.check(args) on the argument list one call gets, timeit over many
   calls (the C++ guard on its default path, the same guard through torch's _version getter, and
   the Python fallback guard for comparison);
2. whole calls, checks on (default) vs frozen_parameters=True, interleaved in rounds.
A benchmark, not a test: it reads airgraph's internals (the binding of the compiled graph).
"""
import copy
import statistics
import sys
import time
import timeit

import torch

import airgraph
import airgraph.backend as be
import airgraph.compiler as comp
from airgraph import zoo

torch.set_num_threads(2)
with open("/proc/cpuinfo") as f:
    info = f.read()
cpu = next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name")), "?")
isa = " ".join(x for x in ("avx2", "avx512f", "avx512_bf16", "amx_tile") if f" {x}" in info)
print(f"{cpu}, {torch.get_num_threads()} threads, ISA {isa}; torch {torch.__version__}")
model, args, kwargs = zoo.build("bert", "small" if "--small" in sys.argv else "full", batch=1)
frozen_model = copy.deepcopy(model)

runs = []
orig = be.compile_aten_graph


def spy(*a, **k):
    r = orig(*a, **k)
    runs.append(r)
    return r


be.compile_aten_graph = spy
checked = torch.compile(model, backend="airgraph")
frozen = torch.compile(frozen_model, backend="airgraph", options={"frozen_parameters": True})
with torch.no_grad():
    checked(*args, **kwargs)
    frozen(*args, **kwargs)
be.compile_aten_graph = orig
binder = runs[0].binder
b = binder.binding
print(f"graphs compiled: {len(runs)}; bound tensors checked per call: {len(b.guard)}; "
      f"guard {type(b.guard).__module__}.{type(b.guard).__name__} fast={b.guard.fast}")
print(f"parameters+buffers in the model: {sum(1 for _ in model.parameters()) + sum(1 for _ in model.buffers())}")

# capture the argument list one call gets
captured = []
real_run = b.run
b.run = lambda a: (captured.append(list(a)), real_run(a))[1]
with torch.no_grad():
    checked(*args, **kwargs)
b.run = real_run
call_args = captured[0]
assert b.guard.check(call_args) == -1

n = 200_000
guards = (("C++ WeightGuard (default: direct count read)", b.guard),
          ("C++ WeightGuard via torch's _version getter  ",
           airgraph._C.WeightGuard(b.positions, b.tensors, comp._DATA_PTR_FN, (-1, -1))),
          ("Python guard (extension without weights.cpp) ", comp._PyWeightGuard(b.positions, b.tensors)))
print("version layout:", comp._version_layout(), " fast:", [g.fast for _, g in guards])
for name, g in guards:
    assert g.check(call_args) == -1
    nn = n if name.startswith("C") else 2000
    ts = [t / nn * 1e9 for t in timeit.repeat(lambda: g.check(call_args), number=nn, repeat=7)]
    print(f"check alone, {name}: min {min(ts):7.0f} ns  median {statistics.median(ts):7.0f} ns  "
          f"max {max(ts):7.0f} ns  per call ({len(b.guard)} tensors)")

def front_check():  # what the compiled callable does before running the engine
    bb = binder.binding
    return bb.guard is not None and bb.guard.check(call_args) >= 0


ts = [t / n * 1e9 for t in timeit.repeat(front_check, number=n, repeat=7)]
print(f"check as the compiled callable does it (binding lookup + guard): min {min(ts):.0f} ns  "
      f"median {statistics.median(ts):.0f} ns")

# whole calls, interleaved
rounds, per = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 10, 5
res = {"checks on (default)": [], "frozen_parameters=True": []}
fns = {"checks on (default)": checked, "frozen_parameters=True": frozen}
if "--eager" in sys.argv:
    res["eager"] = []
    fns["eager"] = model
with torch.no_grad():
    for _ in range(3):
        for f in fns.values():
            f(*args, **kwargs)
    for r in range(rounds):
        order = list(fns) if r % 2 == 0 else list(fns)[::-1]
        for k in order:
            f = fns[k]
            t0 = time.perf_counter()
            for _ in range(per):
                f(*args, **kwargs)
            res[k].append((time.perf_counter() - t0) / per * 1e3)
for k, v in res.items():
    print(f"whole call, {k:24s}: min {min(v):.3f}  median {statistics.median(v):.3f}  max {max(v):.3f} ms "
          f"({rounds} rounds x {per} calls)")
d = [a - b for a, b in zip(res["checks on (default)"], res["frozen_parameters=True"])]
print(f"difference per round (checks - frozen): median {statistics.median(d)*1e3:+.1f} us, "
      f"min {min(d)*1e3:+.1f}, max {max(d)*1e3:+.1f} us")
print(f"engine rebuilds during the run: {binder.report.rebuilds}; sequence shape {[tuple(a.shape) for a in args]}")
