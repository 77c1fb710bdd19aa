"""PyTorch's OpInfo database (op_db) as airgraph's parity suite.

Every sample of an op is run eagerly and through torch.compile(backend="airgraph") and sorted:

  pass      the result matches eager and every node of the graph ran on the engine
  fallback  the result matches eager, but some node ran in PyTorch (or Dynamo made no graph)
  wrong     the result differs from eager (beyond torch.testing's tolerances, and further
            from the float64 result than eager itself is)
  crash     the compiled call raised where eager did not, or the process died
  skip      eager itself raised on the sample (nothing to compare)

An op is *native* when all of its samples pass. The full sweep (every CPU float32 op, three
samples each, in worker processes that a crash cannot take down):

    .venv/bin/python tests/python/opinfo_sweep.py               # float32
    .venv/bin/python tests/python/opinfo_sweep.py --dtype bfloat16 --only-native

prints the pass / fallback / wrong / crash counts, the native-op ratio and what still falls
back (the ATen ops most often responsible first); --write-native records the native list in
tests/python/opinfo_native_<dtype>.txt, which test_opinfo.py checks in the test command.
"""
from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def native_file(dtype_name: str = "float32") -> str:
    """The list of op_db ops that run natively in this dtype (what test_opinfo.py checks)."""
    return os.path.join(HERE, f"opinfo_native_{dtype_name}.txt")

# Ops whose result is uninitialized memory or random: only shapes and dtypes are compared.
UNCHECKED_VALUES = {
    "empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided", "empty_permuted",
    "bernoulli", "cauchy", "exponential", "geometric", "log_normal", "normal", "uniform", "multinomial",
    "rand_like", "randn_like", "randint_like", "randint", "randn", "rand", "nn.functional.dropout",
    "nn.functional.dropout2d", "nn.functional.dropout3d", "nn.functional.alpha_dropout",
    "nn.functional.feature_alpha_dropout", "nn.functional.rrelu", "torch._C._nn._random_samples",
    "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d",
}


def op_id(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def cpu_ops(dtype):
    from torch.testing._internal.common_methods_invocations import op_db

    return [o for o in op_db if dtype in o.supported_dtypes("cpu")]


def _tensors(x):
    import torch

    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for o in x for t in _tensors(o)]
    if isinstance(x, dict):
        return [t for o in x.values() for t in _tensors(o)]
    return []


def _clone(x):
    import torch

    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, (list, tuple)):
        return type(x)(_clone(o) for o in x) if not hasattr(x, "_fields") else type(x)(*(_clone(o) for o in x))
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    return x


def _to64(x):
    import torch

    if isinstance(x, torch.Tensor):
        return x.detach().to(torch.float64) if x.is_floating_point() else x.detach().clone()
    if isinstance(x, (list, tuple)):
        return type(x)(_to64(o) for o in x) if not hasattr(x, "_fields") else type(x)(*(_to64(o) for o in x))
    if isinstance(x, dict):
        return {k: _to64(v) for k, v in x.items()}
    return x


def _compare(name: str, got, want, ref64) -> str:
    """'' when `got` matches `want`, else why not."""
    import torch

    g, w = _tensors(got), _tensors(want)
    if len(g) != len(w):
        return f"{len(g)} tensor outputs vs {len(w)} eager"
    if not g and got != want and not (got != got and want != want):
        return f"{got!r} vs eager {want!r}"
    r = _tensors(ref64) if ref64 is not None else [None] * len(w)
    for i, (a, b, c) in enumerate(zip(g, w, r)):
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"output {i}: {a.dtype}{list(a.shape)} vs eager {b.dtype}{list(b.shape)}"
        if name in UNCHECKED_VALUES:
            continue
        try:
            torch.testing.assert_close(a, b, equal_nan=True, check_stride=False)
            continue
        except AssertionError as e:
            first = str(e).strip().splitlines()
            why = f"output {i}: " + " ".join(first[:3])
        # As accurate as eager: compare both with the float64 result.
        if c is None or not a.is_floating_point() or c.shape != a.shape:
            return why
        err_ours = (a.double() - c).abs().nan_to_num(0.0)
        err_eager = (b.double() - c).abs().nan_to_num(0.0)
        fin = torch.isfinite(c)
        same_nonfinite = torch.equal(torch.isnan(a), torch.isnan(b)) and torch.equal(
            a[~fin & ~torch.isnan(c)], b[~fin & ~torch.isnan(c)])
        tol = torch.finfo(a.dtype).eps * 4 * c.abs() + 1e-5
        if not same_nonfinite or bool((err_ours > 2 * err_eager + tol).any()):
            return why
    return ""


def run_sample(op, sample, dtype) -> tuple[str, str, list[str]]:
    """(status, reason, fallback reasons) for one sample."""
    import torch

    import airgraph
    from airgraph.backend import collect_reports

    name = op.name
    inp, args, kwargs = sample.input, sample.args, sample.kwargs
    try:
        with torch.no_grad():
            want = op(*_clone((inp,) + tuple(args)), **_clone(kwargs))
    except Exception as e:  # eager rejects the sample: nothing to compare
        return "skip", f"eager raised {type(e).__name__}", []
    ref64 = None
    if dtype != torch.float64:
        try:
            with torch.no_grad():
                ref64 = op(*_to64((inp,) + tuple(args)), **_to64(kwargs))
        except Exception:
            ref64 = None

    def f(inp, args, kwargs):
        return op(inp, *args, **kwargs)

    torch._dynamo.reset()
    cf = torch.compile(f, backend="airgraph", dynamic=False)
    try:
        with torch.no_grad(), collect_reports() as reports:
            got = cf(*_clone((inp, tuple(args), kwargs)))
    except Exception as e:
        msg = str(e).strip().splitlines()
        return "crash", f"{type(e).__name__}: {msg[0][:300] if msg else ''}", []
    why = _compare(name, got, want, ref64)
    if why:
        return "wrong", why, []
    falls = [f"{n.target}: {n.reason}" for r in reports for n in r.nodes if not n.native]
    if not reports:
        return "fallback", "Dynamo made no graph", ["(no graph)"]
    if falls:
        return "fallback", falls[0], falls
    return "pass", "", []


def run_op(op, dtype, nsamples: int) -> dict:
    import torch

    res = {"op": op_id(op), "samples": [], "falls": []}
    try:
        samples = list(op.sample_inputs("cpu", dtype, requires_grad=False))[:nsamples]
    except Exception as e:
        res.update(status="skip", reason=f"sample_inputs raised {type(e).__name__}")
        return res
    for s in samples:
        torch.manual_seed(0)
        st, why, falls = run_sample(op, s, dtype)
        res["samples"].append([st, why])
        res["falls"] += falls
    sts = [s[0] for s in res["samples"]]
    for worst in ("crash", "wrong", "fallback"):
        if worst in sts:
            res.update(status=worst, reason=next(w for s, w in res["samples"] if s == worst))
            break
    else:
        ran = [s for s in sts if s == "pass"]
        res.update(status="pass" if ran else "skip", reason="" if ran else "eager raised on every sample")
    return res


def _worker(dtype_name: str, nsamples: int):
    """Reads op ids on stdin, writes one JSON result per line."""
    import torch

    logging.getLogger("airgraph").setLevel(logging.ERROR)
    logging.getLogger("torch").setLevel(logging.ERROR)
    import warnings

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    dtype = getattr(torch, dtype_name)
    ops = {op_id(o): o for o in cpu_ops(dtype)}
    print("ready", flush=True)
    for line in sys.stdin:
        oid = line.strip()
        if not oid:
            continue
        try:
            res = run_op(ops[oid], dtype, nsamples)
        except Exception as e:  # the harness itself failed on this op
            res = {"op": oid, "status": "crash", "reason": f"harness: {type(e).__name__}: {e}", "samples": [],
                   "falls": []}
        print(json.dumps(res), flush=True)


def sweep(op_ids: list[str], dtype_name: str, nsamples: int, jobs: int, progress=True) -> list[dict]:
    """Runs the ops in `jobs` worker processes; a worker that dies marks its op 'crash' and is replaced."""
    import selectors

    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    todo = collections.deque(op_ids)
    results = []
    sel = selectors.DefaultSelector()

    def start():
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", "--dtype", dtype_name,
                              "--samples", str(nsamples)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True, env=env, bufsize=1)
        assert p.stdout.readline().strip() == "ready"
        w = {"p": p, "op": None}
        sel.register(p.stdout, selectors.EVENT_READ, w)
        feed(w)
        return w

    def feed(w):
        if todo:
            w["op"] = todo.popleft()
            w["p"].stdin.write(w["op"] + "\n")
            w["p"].stdin.flush()
        else:
            w["op"] = None
            w["p"].stdin.close()

    workers = [start() for _ in range(min(jobs, len(todo)))]
    t0 = time.time()
    while any(w["op"] is not None for w in workers):
        for key, _ in sel.select():
            w = key.data
            line = w["p"].stdout.readline()
            if line:
                results.append(json.loads(line))
                feed(w)
            else:  # the worker died on w["op"]
                sel.unregister(w["p"].stdout)
                w["p"].wait()
                results.append({"op": w["op"], "status": "crash", "samples": [], "falls": [],
                                "reason": f"worker process died (exit {w['p'].returncode})"})
                workers.remove(w)
                workers.append(start()) if todo else None
            if progress and len(results) % 25 == 0:
                print(f"  {len(results)}/{len(op_ids)} ops, {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    for w in workers:
        w["p"].wait()
    order = {o: i for i, o in enumerate(op_ids)}
    return sorted(results, key=lambda r: order.get(r["op"], 0))


def summarize(results: list[dict], total_ops: int) -> str:
    by = collections.Counter(r["status"] for r in results)
    samples = collections.Counter(s[0] for r in results for s in r["samples"])
    lines = [
        f"ops: {len(results)}  native (all samples pass): {by['pass']}  fallback: {by['fallback']}  "
        f"wrong: {by['wrong']}  crash: {by['crash']}  skip: {by['skip']}",
        f"samples: pass {samples['pass']}  fallback {samples['fallback']}  wrong {samples['wrong']}  "
        f"crash {samples['crash']}  skip {samples['skip']}",
        f"native ratio: {by['pass']}/{total_ops} = {by['pass'] / max(total_ops, 1):.1%}",
    ]
    for st in ("wrong", "crash"):
        for r in results:
            if r["status"] == st:
                lines.append(f"  {st.upper()} {r['op']}: {r['reason']}")
    culprits = collections.Counter()
    for r in results:
        if r["status"] == "fallback":
            for f in set(x.split(":")[0] for x in r["falls"]):
                culprits[f] += 1
    lines.append("what falls back most (ATen op: ops it keeps from native):")
    lines += [f"  {n:4d}  {t}" for t, n in culprits.most_common(60)]
    lines.append("ops that fall back: " + " ".join(r["op"] for r in results if r["status"] == "fallback"))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    ap.add_argument("--ops", nargs="*", help="only these op ids (name or name.variant)")
    ap.add_argument("--only-native", action="store_true", help="only the ops in opinfo_native_float32.txt")
    ap.add_argument("--json", help="write every result to this file")
    ap.add_argument("--write-native", action="store_true", help="write the native ops to opinfo_native_<dtype>.txt")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return _worker(a.dtype, a.samples)
    import torch

    all_ids = [op_id(o) for o in cpu_ops(getattr(torch, a.dtype))]
    ids = all_ids
    if a.ops:
        ids = [o for o in all_ids if o in a.ops or o.split(".")[0] in a.ops]
    if a.only_native:
        native = set(read_native("float32"))
        ids = [o for o in ids if o in native]
    t0 = time.time()
    results = sweep(ids, a.dtype, a.samples, a.jobs)
    print(f"op_db sweep, CPU {a.dtype}, up to {a.samples} samples per op, {time.time() - t0:.0f} s, "
          f"torch {torch.__version__}")
    print(summarize(results, len(all_ids) if not (a.ops or a.only_native) else len(ids)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    if a.write_native:
        with open(native_file(a.dtype), "w") as f:
            f.write(f"# op_db ops whose CPU {a.dtype} samples all run natively and match eager "
                    f"(written by opinfo_sweep.py --write-native)\n")
            f.writelines(r["op"] + "\n" for r in results if r["status"] == "pass")
    bad = sum(r["status"] in ("wrong", "crash") for r in results)
    return 1 if bad else 0


def read_native(dtype_name: str = "float32") -> list[str]:
    path = native_file(dtype_name)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]


if __name__ == "__main__":
    sys.exit(main())
