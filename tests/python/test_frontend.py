"""The front end: backend registration, config, fallback partitioning, errors,
parameter binding, dynamic shapes, grad mode and output ownership."""
import pytest
import torch

import airgraph
from conftest import assert_close, check, compile_native


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x))) + 1.0


def test_backend_name_is_registered():
    assert "airgraph" in torch._dynamo.list_backends()
    m = MLP().eval()
    x = torch.randn(3, 8)
    with torch.no_grad():
        assert_close(torch.compile(m, backend="airgraph")(x), m(x))


def test_options_through_torch_compile():
    m = MLP().eval()
    x = torch.randn(2, 8)
    with torch.no_grad():
        c = torch.compile(m, backend="airgraph", options={"disable_passes": ["cse"], "allow_inplace": False})
        assert_close(c(x), m(x))
    with pytest.raises(Exception, match="unknown airgraph options"):
        torch._dynamo.reset()
        with torch.no_grad():
            torch.compile(m, backend="airgraph", options={"no_such_option": 1})(x)


def test_a_misspelled_pass_name_is_refused_with_the_valid_names():
    with pytest.raises(ValueError, match="'fuse_epilogue' is no pass.*fuse_epilogues") as e:
        airgraph.CompilerConfig(disable_passes=["cse", "fuse_epilogue"])
    assert all(p in str(e.value) for p in airgraph.pass_names() if p != "materialize_outputs")
    with pytest.raises(ValueError, match="materialize_outputs' cannot be switched off"):
        airgraph.CompilerConfig(disable_passes=["materialize_outputs"])
    with pytest.raises(TypeError, match="a list of pass names"):
        airgraph.CompilerConfig(disable_passes="cse")
    with pytest.raises(Exception, match="'no_such_pass' is no pass"):  # through torch.compile's options too
        torch._dynamo.reset()
        with torch.no_grad():
            torch.compile(MLP().eval(), backend="airgraph", options={"disable_passes": ["no_such_pass"]})(
                torch.randn(2, 8))
    assert airgraph.CompilerConfig(disable_passes=list(airgraph.pass_names())[:-1]).disable_passes


def test_parameters_are_bound_once_as_constants():
    m = MLP().eval()
    x = torch.randn(2, 8)
    rep = airgraph.explain(m, x)
    assert rep.fallback_nodes == 0, str(rep)
    stats = rep.reports[0].exec_stats[0]
    n_param_bytes = sum(p.numel() * 4 for p in m.parameters())
    assert stats["const_bytes"] >= n_param_bytes
    # only x is a runtime input of the engine graph
    assert stats["nodes"] >= 2  # two linears (relu and the +1 fuse into them)


def _unsupported(x):
    # torch.special.bessel_j0 has no engine kernel: it must fall back to PyTorch
    y = torch.relu(x) * 2.0
    z = torch.special.bessel_j0(y)
    return torch.tanh(z) + y


def test_fallback_partitions_and_matches_eager():
    x = torch.randn(4, 5)
    with torch.no_grad():
        got = torch.compile(_unsupported, backend="airgraph")(x)
    assert_close(got, _unsupported(x))
    rep = airgraph.explain(_unsupported, x)
    assert rep.fallback_nodes == 1, str(rep)
    assert rep.native_nodes >= 3
    assert "aten.special_bessel_j0.default" in rep.counts()
    assert rep.counts()["aten.special_bessel_j0.default"] == (0, 1)
    csv = rep.to_csv()
    assert csv.splitlines()[0] == "op,native,fallback,reason"
    assert "special_bessel_j0" in str(rep)


def test_fallback_disabled_names_node_op_and_source():
    x = torch.randn(4, 5)
    with pytest.raises(Exception) as ei:
        with torch.no_grad():
            compile_native(_unsupported)(x)
    msg = str(ei.value)
    assert "special_bessel_j0" in msg
    assert "test_frontend.py" in msg and "bessel_j0(y)" in msg


def test_unsupported_dtype_falls_back():
    def f(x):
        return x * 2

    x = torch.randn(3, dtype=torch.complex64)
    with torch.no_grad():
        got = torch.compile(f, backend="airgraph")(x)
    assert torch.equal(got, f(x))


def test_dynamic_shapes_specialize_per_shape():
    m = MLP().eval()
    c = torch.compile(m, backend="airgraph", dynamic=True)
    with torch.no_grad():
        for b in (1, 3, 5, 3):
            x = torch.randn(b, 8)
            assert_close(c(x), m(x))


def test_grad_mode_forward_on_engine_backward_in_torch():
    m = MLP()
    x = torch.randn(2, 8)
    c = torch.compile(m, backend="airgraph")
    out = c(x)
    assert_close(out.detach(), m(x).detach())
    out.sum().backward()
    assert m.fc1.weight.grad is not None and m.fc1.weight.grad.abs().sum() > 0


def test_outputs_are_fresh_tensors():
    def f(x):
        return torch.relu(x) + 1

    c = compile_native(f)
    x = torch.randn(4)
    with torch.no_grad():
        a = c(x)
        b = c(x)
    assert a.data_ptr() != b.data_ptr()
    a.add_(100)
    assert_close(b, f(x))


def test_returning_an_input_and_a_duplicate():
    def f(x):
        y = x + 1
        return x, y, y

    check(f, torch.randn(3))


def test_non_contiguous_inputs():
    def f(x):
        return torch.relu(x) * 3

    base = torch.randn(6, 8)
    check(f, base.t())
    check(f, base[:, ::2])


def test_engine_error_is_exported():
    assert issubclass(airgraph.EngineError, Exception)
    g = airgraph._C.Graph()
    x = g.add_input("float32", [2, 3], "x")
    with pytest.raises(airgraph.EngineError, match=r"(?s)reshape_1.*float32\[2, 3\].*model.py:1"):
        g.add_node("reshape", [x], {"shape": [4]}, "reshape_1", "model.py:1 in forward: x.view(4)")


@pytest.mark.parametrize("p", [2, 1])
def test_decomposed_vector_norm(p):
    def f(x):
        return torch.nn.functional.normalize(x, p=p, dim=-1), torch.linalg.vector_norm(x, dim=0)

    check(f, torch.randn(3, 8))


def test_a_crashing_lowering_falls_back(monkeypatch):
    from airgraph import lowering

    def broken(ctx, node, *args, **kwargs):
        raise ValueError("simulated bug in a lowering")

    monkeypatch.setitem(lowering.LOWERINGS, torch.ops.aten.tanh.default, broken)

    def f(x):
        return torch.tanh(torch.relu(x)) + 1

    x = torch.randn(5)
    with torch.no_grad():
        got = torch.compile(f, backend="airgraph")(x)
    assert_close(got, f(x))
    rep = airgraph.explain(f, x)
    fb = rep.fallbacks()
    assert [n.target for n in fb] == ["aten.tanh.default"], str(rep)
    assert "simulated bug" in fb[0].reason


def test_cpu_without_avx2_is_refused_with_a_clear_error(monkeypatch):
    import builtins
    import io

    from airgraph import _core

    real_open = builtins.open

    def fake_open(path, *a, **k):
        if path == "/proc/cpuinfo":
            return io.StringIO("processor\t: 0\nflags\t\t: fpu sse sse2 ssse3 sse4_1 sse4_2 avx fma\n")
        return real_open(path, *a, **k)

    monkeypatch.setattr(builtins, "open", fake_open)
    with pytest.raises(ImportError, match="lacks avx2, f16c, bmi2"):
        _core._check_cpu()
    monkeypatch.setattr(builtins, "open", real_open)
    _core._check_cpu()  # this machine has them (the extension loaded)


def _native_report(fn, *args):
    """Compiles fn with airgraph (fallbacks allowed), runs it, returns (result, reports)."""
    from airgraph.backend import collect_reports

    torch._dynamo.reset()
    with torch.no_grad(), collect_reports() as reports:
        out = torch.compile(fn, backend="airgraph", dynamic=False)(*args)
    return out, reports


def test_tensor_constants_made_in_forward_are_engine_constants():
    # torch.tensor(...) inside forward is a get_attr node in the traced graph (as transformers'
    # masks and RoPE tables are): it must not send the whole graph to PyTorch
    def f(x):
        return (x + torch.tensor([1.0, -2.0, 3.0])) * torch.tensor(0.5)

    x = torch.randn(4, 3)
    out, reports = _native_report(f, x)
    assert_close(out, f(x))
    nodes = [n for r in reports for n in r.nodes]
    assert nodes and all(n.native for n in nodes), [(n.name, n.reason) for n in nodes if not n.native]
    assert sum(r.engine_graphs for r in reports) == 1


def test_tensor_constant_beside_a_fallback_node_is_a_region_constant():
    def f(x):
        y = x * torch.tensor([2.0, 3.0, 4.0])
        y = torch.special.airy_ai(y)  # no lowering: runs in PyTorch, the rest on the engine
        return y + torch.tensor([1.0, 1.5, 2.0])

    x = torch.rand(5, 3) + 1.0
    out, reports = _native_report(f, x)
    assert_close(out, f(x))
    nodes = {n.target: n.native for r in reports for n in r.nodes}
    assert nodes["aten.mul.Tensor"] and nodes["aten.add.Tensor"] and not nodes["aten.special_airy_ai.default"]


def test_non_tensor_outputs_do_not_send_the_graph_to_pytorch():
    def f(x):
        return x.sum(0), None, x.shape[0] * 2

    x = torch.randn(3, 5)
    out, reports = _native_report(f, x)
    assert out[1] is None and out[2] == 6
    assert_close(out[0], x.sum(0))
    nodes = [n for r in reports for n in r.nodes]
    assert nodes and all(n.native for n in nodes)


def test_scalar_graph_input_runs_natively():
    # a changing Python int becomes a graph input (a SymInt): the nodes that use it as a value
    # run on the engine, fed a 0-d tensor per call
    def f(x, n: int):
        return x * n + 1

    from airgraph.backend import collect_reports

    torch._dynamo.reset()
    cf = torch.compile(f, backend="airgraph")
    x = torch.randn(2, 3)
    with torch.no_grad(), collect_reports() as reports:
        for n in (2, 3, 7):
            assert_close(cf(x, n), f(x, n))
    nodes = [n for r in reports for n in r.nodes]
    assert nodes and all(n.native for n in nodes), [(n.name, n.reason) for n in nodes if not n.native]


def test_region_fed_another_dtype_than_traced_runs_in_pytorch():
    # bf16 training-mode batch norm: eager returns bf16 running stats where PyTorch's trace says
    # float32, so an engine region after it is handed other dtypes than it was compiled for
    def f(x, rm, rv, w, b):
        y = torch.nn.functional.batch_norm(x, rm, rv, w, b, training=True)
        return y * 2 + 1, rm * 3

    args = [torch.randn(4, 5, dtype=torch.bfloat16), torch.zeros(5, dtype=torch.bfloat16),
            torch.ones(5, dtype=torch.bfloat16), torch.randn(5, dtype=torch.bfloat16),
            torch.randn(5, dtype=torch.bfloat16)]
    want_args = [a.clone() for a in args]
    want = f(*want_args)
    got, _ = _native_report(f, *args)
    assert_close(got, want)
    assert_close(args[1], want_args[1])  # the running mean was updated as eager updates it


def test_thin_call_path_matches_the_checked_one():
    """After a first checked call, a graph's calls take the thin path (one C check of the inputs'
    dtypes, sizes and strides; the engine reads the data pointers itself). Every call must give
    eager's result: repeated sizes, a new size, and other strides (a transposed input: Dynamo
    traces it again, and its first call takes the checked path, which copies it)."""
    from airgraph.backend import collect_reports

    def f(x, y):
        return (x * x.shape[0] + y).relu(), x.sum(0) * x.shape[1]

    torch._dynamo.reset()
    comp = torch.compile(f, backend=airgraph.get_backend(airgraph.CompilerConfig(fallback=False)), dynamic=True)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad(), collect_reports() as reps:
        for shape in [(5, 3), (5, 3), (5, 3), (7, 3), (7, 3)]:
            x, y = torch.randn(*shape, generator=g), torch.randn(*shape, generator=g)
            for got, want in zip(comp(x, y), f(x, y)):
                torch.testing.assert_close(got, want)
        xt = torch.randn(3, 7, generator=g).t()  # sizes seen before, other strides
        for got, want in zip(comp(xt, y), f(xt, y)):
            torch.testing.assert_close(got, want)
    graphs = [eg for r in reps for s in r.symbolic for eg in s.programs.values()]
    assert sorted(eg.calls for eg in graphs) == [1, 2, 3], [eg.calls for eg in graphs]
    assert all((eg._guard is not None) == (eg.calls > 1) for eg in graphs)  # thin from the second call on
