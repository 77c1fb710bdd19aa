"""torch's ahead-of-time path with backend="airgraph" (torch.compile(...).aot_compile, then
save_compiled_function / torch.compiler.load_compiled_function, experimental in torch): the
artifacts load in a new process that compiles no Dynamo frame and runs no AOTAutograd, and give
eager's answer; the loaded function binds the parameters it is called with and sees them change;
graphs the engine cannot run whole (fallback nodes, symbolic sizes, training) are refused at save
time with the reason."""
import os
import subprocess
import sys

import pytest
import torch

import airgraph  # noqa: F401  (backend="airgraph" by name works either way)
from airgraph import zoo

pytest.importorskip("torch._dynamo.aot_compile_types")


def mlp_fn(model, x):
    return model(x).softmax(-1)


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).eval()


def _save(fn, args, path):
    with torch.no_grad():
        c = torch.compile(fn, backend="airgraph", fullgraph=True).aot_compile((args, {}))
        torch.testing.assert_close(c(*args), fn(*args), rtol=1e-5, atol=1e-6)
        c.save_compiled_function(str(path))


LOAD = """
import sys, torch
from torch._dynamo.utils import counters
sys.path.insert(0, {tests!r})
import test_aot_compile as t
io = torch.load({io!r}, weights_only=False)
with open({path!r}, "rb") as f:
    fn = torch.compiler.load_compiled_function(f)
with torch.no_grad():
    got = fn(*io["args"])
    torch.testing.assert_close(got, io["want"], rtol=1e-4, atol=1e-5)
    model = io["args"][0]
    for p in model.parameters():  # the loaded function sees the caller's weights change
        p.mul_(0.5)
    torch.testing.assert_close(fn(*io["args"]), t.{fn}(*io["args"]), rtol=1e-4, atol=1e-5)
assert not counters["frames"], dict(counters["frames"])
assert not counters["aot_autograd"], dict(counters["aot_autograd"])
print("loaded and ran without tracing")
"""


def _load_in_new_process(tmp_path, path, args, fn_name):
    fn = globals()[fn_name]
    with torch.no_grad():
        torch.save({"args": args, "want": fn(*args)}, tmp_path / "io.pt")
    code = LOAD.format(tests=os.path.dirname(__file__), io=str(tmp_path / "io.pt"), path=str(path), fn=fn_name)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0 and "without tracing" in r.stdout, r.stdout[-2000:] + r.stderr[-4000:]


def test_mlp_saved_and_loaded_in_a_new_process(tmp_path):
    args = (_mlp(), torch.randn(3, 8))
    _save(mlp_fn, args, tmp_path / "mlp.aot")
    _load_in_new_process(tmp_path, tmp_path / "mlp.aot", args, "mlp_fn")


def test_a_compile_served_by_the_compile_cache_is_saved_too(tmp_path):
    # the second aot_compile of the same function is a compile cache hit (no AOTAutograd): what it
    # saves is the cache entry's lowered graph, and it loads and runs like the first one's
    args = (_mlp(), torch.randn(3, 8))
    hits = []
    for k in range(2):
        torch._dynamo.reset()
        _save(mlp_fn, args, tmp_path / f"mlp{k}.aot")
        hits.append(airgraph.cache_info()["dynamo_hits"])
    assert hits[1] == hits[0] + 1, hits
    _load_in_new_process(tmp_path, tmp_path / "mlp1.aot", args, "mlp_fn")


def model_fn(model, *args):
    return model(*args)


def test_zoo_resnet50_saved_and_loaded(tmp_path):
    # (transformers models do not get this far with any backend in torch 2.13: Dynamo's guards on
    # them include ID_MATCH guards, which torch's aot_compile cannot serialize; Inductor fails alike)
    model, args, _ = zoo.build("resnet50", size="small", batch=2)
    full = (model, *args)
    _save(model_fn, full, tmp_path / "resnet50.aot")
    _load_in_new_process(tmp_path, tmp_path / "resnet50.aot", full, "model_fn")


def test_graphs_the_engine_cannot_run_whole_are_refused_with_the_reason(tmp_path):
    def spectrum(x):
        return torch.fft.rfft(x).abs() + 1  # rfft runs in PyTorch

    with torch.no_grad():
        c = torch.compile(spectrum, backend="airgraph", fullgraph=True).aot_compile(((torch.randn(4, 8),), {}))
        with pytest.raises(RuntimeError, match=r"does not run whole on the engine \(PyTorch fallback nodes\)"):
            c.save_compiled_function(str(tmp_path / "x.aot"))
        m = _mlp()
        d = torch.compile(mlp_fn, backend="airgraph", fullgraph=True, dynamic=True).aot_compile(
            ((m, torch.randn(5, 8)), {}))
        with pytest.raises(RuntimeError, match="symbolic sizes .*automatic_dynamic_shapes = False"):
            d.save_compiled_function(str(tmp_path / "y.aot"))
    m = _mlp().train()
    t = torch.compile(mlp_fn, backend="airgraph", fullgraph=True).aot_compile(((m, torch.randn(3, 8)), {}))
    with pytest.raises(RuntimeError, match="training graph"):
        t.save_compiled_function(str(tmp_path / "z.aot"))


LOAD_MODULE = """
import torch
import torch._dynamo.config as dc
from torch._dynamo.utils import counters
dc.enable_aot_compile = True
io = torch.load({io!r}, weights_only=False)
m = io["model"]
c = torch.compile(m, backend="airgraph", fullgraph=True)
with open({path!r}, "rb") as f:
    c._load_aot_compiled_module(f.read())
with torch.no_grad():
    for x, want in zip(io["xs"], io["wants"]):
        torch.testing.assert_close(c(x), want, rtol=1e-4, atol=1e-5)
assert not counters["frames"], dict(counters["frames"])
assert not counters["aot_autograd"], dict(counters["aot_autograd"])
print("loaded and ran without tracing")
"""


def test_module_variant_with_one_static_graph_per_input_size(tmp_path):
    """torch's module variant (_aot_compile with several ModelInputs, _save_aot_compiled_module /
    _load_aot_compiled_module): with automatic dynamic shapes off, each input size is its own static
    graph, all saved; a new process runs both sizes with no tracing. With it on, the second size is
    symbolic and the save is refused with that advice."""
    from torch._dynamo.aot_compile import ModelInput

    m, xs = _mlp(), [torch.randn(2, 8), torch.randn(5, 8)]
    inputs = [ModelInput((x,), {}, []) for x in xs]
    # (torch's config.patch, not monkeypatch: undoing a setattr on torch's config module hides the
    # option from every later torch.compile in this process)
    with torch.no_grad(), torch._dynamo.config.patch(enable_aot_compile=True):
        torch._dynamo.reset()
        with torch._dynamo.config.patch(automatic_dynamic_shapes=True):
            c = torch.compile(m, backend="airgraph", fullgraph=True)
            c._aot_compile(inputs)
            with pytest.raises(RuntimeError, match="automatic_dynamic_shapes = False"):
                c._save_aot_compiled_module(str(tmp_path / "dyn.aotm"))
        torch._dynamo.reset()
        with torch._dynamo.config.patch(automatic_dynamic_shapes=False):
            c = torch.compile(m, backend="airgraph", fullgraph=True)
            c._aot_compile(inputs)
            wants = [m(x) for x in xs]
            for x, want in zip(xs, wants):
                torch.testing.assert_close(c(x), want, rtol=1e-5, atol=1e-6)
            c._save_aot_compiled_module(str(tmp_path / "mlp.aotm"))
    torch.save({"model": m, "xs": xs, "wants": wants}, tmp_path / "io.pt")
    code = LOAD_MODULE.format(io=str(tmp_path / "io.pt"), path=str(tmp_path / "mlp.aotm"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0 and "without tracing" in r.stdout, r.stdout[-2000:] + r.stderr[-4000:]
