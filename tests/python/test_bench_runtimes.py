"""bench/runtimes.py (ONNX Runtime and OpenVINO as users deploy them, issue 35) and bench/run.py's block timing
and its "vs runtimes" figures: the runtimes' outputs against eager on small zoo models, inputs given by keyword
mapped by name, a model the exporter cannot take recorded with its reason, the blocks' structure on cheap
callables (no wall-clock assertions beyond each block's minimum length), and the target's verdicts."""
import time

import pytest
import torch

F32 = ("onnxruntime", "openvino")


@pytest.fixture(scope="module")
def rt(bench):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    pytest.importorskip("openvino")
    torch.set_num_threads(2)
    return bench.runtimes


@pytest.mark.parametrize("runtime", F32)
@pytest.mark.parametrize("model_name", ["bert", "mobilenetv2"])
def test_runtime_matches_eager_on_zoo(rt, model_name, runtime):
    from airgraph import zoo

    model, args, kwargs = zoo.build(model_name, size="small", batch=1)
    with torch.no_grad():
        want = model(*args, **kwargs)
    fn, why = rt.try_prepare(runtime, model, args, kwargs, want)
    assert why is None and fn is not None, why
    got = fn(*args, **kwargs)
    assert type(got) is type(want)  # the eager output's structure: a tensor, or a tuple (bert: two outputs)
    if isinstance(want, tuple):
        assert len(got) == len(want) and all(isinstance(t, torch.Tensor) for t in got)
    assert rt.rel_diff(got, want) < rt.TOLERANCE[runtime]
    # other inputs of the same shapes: the compiled graph reads them (nothing was frozen at export)
    torch.manual_seed(1)
    args2 = tuple(torch.randint_like(a, 1, 100) if not a.is_floating_point() and a.max() > 1 else
                  a if not a.is_floating_point() else torch.randn_like(a) for a in args)
    with torch.no_grad():
        assert rt.rel_diff(fn(*args2, **kwargs), model(*args2, **kwargs)) < rt.TOLERANCE[runtime]


class _Keywords(torch.nn.Module):
    def forward(self, x, y=None, z=None, unused=None):
        return x + 2 * y, 3 * z - x


@pytest.mark.parametrize("runtime", F32)
def test_keyword_inputs_map_by_name(rt, runtime):
    torch.manual_seed(0)
    model = _Keywords().eval()
    x, y, z, u = (torch.randn(2, 3) for _ in range(4))
    fn = rt.prepare(runtime, model, (x,), dict(z=z, y=y, unused=u))  # keywords out of the signature's order
    x2, y2, z2 = (torch.randn(2, 3) for _ in range(3))
    got = fn(x2, unused=u, y=y2, z=z2)  # and called in yet another order
    want = model(x2, y=y2, z=z2)
    assert rt.rel_diff(got, want) < 1e-6, (got, want)


@torch.library.custom_op("airgraph_test_bench::twice", mutates_args=())
def _twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@_twice.register_fake
def _(x):
    return torch.empty_like(x)


class _CustomOp(torch.nn.Module):  # an op neither ONNX nor OpenVINO has a translation for
    def forward(self, x):
        return _twice(x) + 1


class _DataDependent(torch.nn.Module):  # control flow on a value: torch.export (the ONNX exporter's) refuses it
    def forward(self, x):
        return x * 2 if x.sum() > 0 else x - 1


@pytest.mark.parametrize("runtime", F32)
def test_model_a_runtime_cannot_take_gives_a_reason(rt, runtime):
    fn, why = rt.try_prepare(runtime, _CustomOp().eval(), (torch.randn(4),), {})
    stage = "export" if runtime == "onnxruntime" else "convert"
    assert fn is None and why.startswith(f"{stage}: ") and "\n" not in why and len(why) <= 200, why
    assert "twice" in why or "No conversion rule" in why or "OpConversionFailure" in why, why
    if runtime == "onnxruntime":
        fn, why = rt.try_prepare(runtime, _DataDependent().eval(), (torch.randn(4),), {})
        assert fn is None and why.startswith("export: ") and "data-dependent" in why, why


def test_wrong_result_gives_a_reason(rt):
    model = torch.nn.Linear(4, 3).eval()
    x = torch.randn(2, 4)
    with torch.no_grad():
        want = model(x) + 1.0  # not what the model computes
    for runtime in F32:
        fn, why = rt.try_prepare(runtime, model, (x,), {}, want)
        assert fn is None and why.startswith("wrong result: max diff"), (runtime, why)
    with pytest.raises(rt.Unavailable):
        rt.prepare("onnxruntime", model, (x,), {}, want)


def test_time_blocks_structure(bench):
    calls = {"a": 0, "b": 0, "c": 0}

    def make(name, s):
        def fn():
            calls[name] += 1
            time.sleep(s)
        return fn

    fns = {"a": make("a", 0.0), "b": make("b", 0.002), "c": make("c", 0.03)}
    block_s, rounds, warmup = 0.02, 4, 1
    t0 = time.perf_counter()
    r = bench.time_blocks(fns, rounds=rounds, warmup=warmup, min_seconds=0.0, block_s=block_s, idle_s=0.01)
    assert time.perf_counter() - t0 >= (rounds + warmup) * len(fns) * (0.01 + block_s)  # an idle gap before each
    assert r["rounds"] == rounds and r["measure_s"] > 0
    blocks = r["blocks"]
    assert len(blocks) == (rounds + warmup) * len(fns)
    assert sum(b[2] for b in blocks) == sum(calls.values())  # every call is in a block
    for i in range(rounds + warmup):
        rnd = blocks[i * len(fns):(i + 1) * len(fns)]
        assert {b[0] for b in rnd} == {i - warmup}  # rounds in order, warm-up ones negative
        assert sorted(b[1] for b in rnd) == sorted(fns)  # one block of each backend per round ...
        assert [b[1] for b in rnd] == list(fns)[i % 3:] + list(fns)[:i % 3]  # ... in a rotated order
    for a, b in zip(blocks, blocks[1:]):
        assert a[1] != b[1]  # blocks alternate: never two of one backend in a row
    for _, name, n, s in blocks:
        assert n >= 1 and s >= block_s
    assert [b[2] for b in blocks if b[1] == "c"] and all(b[2] == 1 for b in blocks if b[1] == "c")  # slow: 1 call
    for name in fns:
        measured = [b for b in blocks if b[1] == name and b[0] >= 0]
        assert r["calls"][name] == [b[2] for b in measured]
        assert r["times_ms"][name] == pytest.approx([b[3] * 1000 / b[2] for b in measured])
    # min_seconds keeps adding rounds
    r = bench.time_blocks({"a": make("a", 0.0)}, rounds=1, warmup=0, min_seconds=0.05, block_s=0.01, idle_s=0.0)
    assert r["rounds"] >= 3 and r["measure_s"] >= 0.05


def test_vs_runtimes_and_target(bench):
    n = 12
    times = {"airgraph": [1.0] * n, "onnxruntime": [2.0] * n, "openvino": [1.5] * n}
    v = bench.vs_runtimes(times, ["onnxruntime", "openvino"])
    assert v["runtime"] == "openvino" and v["ratio"] == pytest.approx(1.5) and v["wins"] == n and v["clear"]
    assert v["slower_than"] == [] and v["missing"] == []
    assert bench.vs_runtimes(times, []) is None and bench.vs_runtimes({"eager": [1.0]}, ["openvino"]) is None
    one = bench.vs_runtimes({"airgraph": [1.0] * n, "openvino": [0.8] * n}, ["onnxruntime", "openvino"])
    assert one["runtime"] == "openvino" and one["missing"] == ["onnxruntime"] and one["slower_than"] == ["openvino"]

    def cell(m, v):
        return dict(model=m, batch=1, airgraph_vs_runtimes=v, backends={"onnxruntime": {"error": "export: X"}})

    (t,) = bench._runtime_targets([cell("a", v), cell("b", v)])
    assert t["status"] == "met" and "1.50x over 2 cells" in t["detail"], t
    (t,) = bench._runtime_targets([cell("a", v), cell("b", one)])
    assert t["status"] == "missed" and "slower than either runtime in 1" in t["detail"] and "b b1" in t["detail"], t
    assert "vs openvino" in bench._vs_runtimes_text(cell("b", one))
    assert "onnxruntime: error: export: X" in bench._vs_runtimes_text(cell("b", one))
    (t,) = bench._runtime_targets([dict(model="a", batch=1, backends={})])
    assert t["status"] == "not evaluated"
    assert bench._runtime_targets([]) == []


def test_generation_backends(bench):
    assert bench.generation_backends(["eager", "airgraph", "onnxruntime", "openvino", "openvino-default",
                                      "openvino-tc"]) == ["eager", "airgraph", "openvino-tc"]


def test_airgraph_export_backend_matches_eager(bench):
    # bench/run.py's airgraph-export: airgraph as deployed (export, then load), beside the runtimes
    from airgraph import zoo

    model, args, kwargs = zoo.build("mobilenetv2", size="small", batch=1)
    with torch.no_grad():
        want = model(*args, **kwargs)
        before = bench._BACKEND_S[0]
        fn = bench._prepare(model, "airgraph-export", args, kwargs, want)
        assert bench._BACKEND_S[0] > before  # (the export counts as the backend's compile time)
        assert not isinstance(fn, torch.nn.Module)  # the loaded file, not the module
        assert bench._max_diff(fn(*args, **kwargs), want) < 1e-4
        x2 = torch.randn_like(args[0])
        assert bench._max_diff(fn(x2), model(x2)) < 1e-4
