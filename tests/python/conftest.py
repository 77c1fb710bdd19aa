"""Shared helpers for the Python tests.

check(fn, *inputs): compiles `fn` with airgraph (fallback off, so every node
must run natively), runs it, and compares every output with eager PyTorch (a NaN
must stand where eager has one: equal_nan=True, the default; pass equal_nan=False
for outputs that must hold no NaN at all). It is the one entry for op tests.
"""
import atexit
import os
import shutil
import tempfile

# The compile cache stays on in the tests, as for users, but in a folder of this test process's own,
# never the user's ~/.cache (set before airgraph reads it), removed when the process ends
if "AIRGRAPH_CACHE_DIR" not in os.environ:
    os.environ["AIRGRAPH_CACHE_DIR"] = tempfile.mkdtemp(prefix="airgraph-test-cache-")
    atexit.register(shutil.rmtree, os.environ["AIRGRAPH_CACHE_DIR"], True)

import pytest  # noqa: E402
import torch  # noqa: E402

import airgraph  # noqa: E402

TOL = {
    torch.float32: (1e-5, 1e-4),
    torch.float64: (1e-9, 1e-7),
    torch.bfloat16: (1.6e-2, 2e-2),
    torch.float16: (1e-3, 2e-3),
}


def _flat(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _flat(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in _flat(o)]
    if hasattr(out, "to_tuple"):
        return _flat(out.to_tuple())
    return []


def assert_close(got, want, atol=None, rtol=None, msg="", equal_nan=True):
    g, w = _flat(got), _flat(want)
    assert len(g) == len(w), f"{msg}: {len(g)} outputs vs {len(w)} eager"
    for i, (a, b) in enumerate(zip(g, w)):
        assert a.shape == b.shape, f"{msg} output {i}: shape {tuple(a.shape)} vs eager {tuple(b.shape)}"
        assert a.dtype == b.dtype, f"{msg} output {i}: dtype {a.dtype} vs eager {b.dtype}"
        if a.dtype.is_floating_point:
            at, rt = TOL.get(a.dtype, (1e-5, 1e-4))
            torch.testing.assert_close(a, b, atol=atol if atol is not None else at,
                                       rtol=rtol if rtol is not None else rt, equal_nan=equal_nan,
                                       msg=lambda m: f"{msg} output {i}: {m}")
        else:
            assert torch.equal(a, b), f"{msg} output {i}: integer/bool results differ"


def compile_native(fn, **cfg):
    """torch.compile with airgraph, fallback disabled: any unsupported node raises."""
    torch._dynamo.reset()
    config = airgraph.CompilerConfig(fallback=False, **cfg)
    return torch.compile(fn, backend=airgraph.get_backend(config), dynamic=False)


def check(fn, *inputs, atol=None, rtol=None, equal_nan=True, **cfg):
    """Runs fn eagerly and through airgraph (all nodes native) and compares: floats within the
    dtype's tolerance (NaN matching NaN unless equal_nan=False), integers and bools exactly."""
    with torch.no_grad():
        want = fn(*inputs)
        got = compile_native(fn, **cfg)(*inputs)
    assert_close(got, want, atol, rtol, msg=getattr(fn, "__name__", "fn"), equal_nan=equal_nan)
    return got


@pytest.fixture(autouse=True)
def _reset_dynamo():
    torch._dynamo.reset()
    yield


@pytest.fixture
def engine_graphs(monkeypatch):
    """The engine graphs (EngineGraph: .exe.instructions(), .exe.stats()) compiled during the test."""
    import airgraph.backend as backend
    graphs = []
    real = backend.compile_aten_graph

    def spy(*a, **k):
        run = real(*a, **k)
        graphs.extend(getattr(run, "engine_graphs", []))
        return run

    monkeypatch.setattr(backend, "compile_aten_graph", spy)
    return graphs


@pytest.fixture(scope="module")
def bench():
    """bench/run.py as a module (its workers, tables and target checks, for the bench tests)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("airgraph_bench_run", Path(__file__).resolve().parents[2] / "bench" / "run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
