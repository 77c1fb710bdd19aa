"""The zoo with dynamic shapes: each model compiled with dynamic=True, called at three sizes,
compared with eager, and its steady latency compared with a static compile at the same size.

    python bench/zoo_dynamic.py                 # small configs, every zoo model (~5 min)
    python bench/zoo_dynamic.py --models bert,gpt2 --size full

Sizes: NLP models grow the sequence length (+0, +3, +1 tokens), vision models the batch
(2, 5, 3). swin, mobilenetv2 and upernet mark only the batch dynamic (torch._dynamo.mark_dynamic):
with dynamic=True Dynamo also makes their height and width symbolic, and tracing their window
partitioning and TF-style padding symbolically takes Dynamo minutes. Latency: the dynamic and the
static compile called alternately at the last size, median of --rounds calls each (2 threads).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="")
    ap.add_argument("--size", default="small", choices=("small", "full"))
    ap.add_argument("--rounds", type=int, default=30)
    a = ap.parse_args()
    torch.set_num_threads(2)
    torch._dynamo.config.recompile_limit = 64
    import airgraph
    from airgraph import zoo
    from airgraph.backend import collect_reports
    from conftest import _flat

    names = [m for m in a.models.split(",") if m] or zoo.names()
    cpu = open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0].strip(": \t")
    print(f"zoo with dynamic shapes: {a.size} configs; {cpu}, 2 threads, torch {torch.__version__}\n")
    print("| model | sizes | Dynamo graphs | fallback nodes | max abs diff vs eager (3 sizes) "
          "| engine work per new size (ms) | dynamic ms | static ms | dynamic / static |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in names:
        kind = zoo.MODELS[name].kind
        model, args, kw = zoo.build(name, a.size, batch=2 if kind == "vision" else 1)
        n = [0]
        be = airgraph.get_backend()

        def counting(gm, ex):
            n[0] += 1
            return be(gm, ex)

        torch._dynamo.reset()
        dyn = name not in zoo.DYNAMIC_BATCH_ONLY
        c = torch.compile(model, backend=counting, dynamic=True if dyn else None)
        diffs, sizes = [], []
        with torch.no_grad(), collect_reports() as reps:
            for k in (0, 3, 1):
                x = zoo.resized_inputs(args, k)
                if not dyn:
                    torch._dynamo.mark_dynamic(x[0], 0)
                got, want = _flat(c(*x, **kw)), _flat(model(*x, **kw))
                diffs.append(max(float((g.float() - w.float()).abs().max()) if g.numel() else 0.0
                                 for g, w in zip(got, want)))
                sizes.append("x".join(str(s) for s in x[0].shape[:2]))
        fb = sum(1 for r in reps for nd in r.nodes if not nd.native)
        builds = [ms for r in reps for g in r.symbolic for ms in g.build_ms[1:]]
        static = torch.compile(model, backend=airgraph.get_backend(), dynamic=False)
        x = zoo.resized_inputs(args, 1)
        lat = {"d": [], "s": []}
        with torch.no_grad():
            static(*x, **kw)
            c(*x, **kw)
            for i in range(a.rounds):
                for key, fn in ((("d", c), ("s", static)) if i % 2 == 0 else (("s", static), ("d", c))):
                    t0 = time.perf_counter()
                    fn(*x, **kw)
                    lat[key].append((time.perf_counter() - t0) * 1000)
        d, s = statistics.median(lat["d"]), statistics.median(lat["s"])
        eng = f"{statistics.median(builds):.1f}" if builds else "-"
        print(f"| {name} | {', '.join(sizes)} | {n[0]} | {fb} | {max(diffs):.1e} | {eng} | {d:.2f} | {s:.2f} | "
              f"{d / s:.2f} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
