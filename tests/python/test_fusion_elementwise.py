"""Elementwise fusion (fuse_elementwise pass): elementwise-heavy functions
compiled with airgraph against eager PyTorch, and against the same compile with
the pass disabled; the compiled graph must show the fusion.

Numerics: the fused kernel computes in float32 with the single-op kernels'
functions and rounds every bfloat16/float16 result where the unfused graph
stores it, so fused == unfused bit for bit (asserted with torch.equal), and
fused vs eager uses the usual per-dtype tolerances of conftest (eager also
rounds every bf16 intermediate)."""
import math

import pytest
import torch

import airgraph
from conftest import assert_close, compile_native

DTYPES = [torch.float32, torch.bfloat16]


def graph_text(fn, *inputs, **cfg):
    rep = airgraph.explain(fn, *inputs, config=airgraph.CompilerConfig(fallback=False, **cfg))
    return "\n".join(g.graph_text for r in rep.reports for g in r.graphs)


def same(a, b, msg):
    a = a if isinstance(a, (list, tuple)) else [a]
    b = b if isinstance(b, (list, tuple)) else [b]
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        assert x.dtype == y.dtype and x.shape == y.shape, f"{msg} output {i}"
        if x.is_floating_point():
            eq = (x == y) | (x.isnan() & y.isnan())
            assert bool(eq.all()), f"{msg} output {i}: {(~eq).sum().item()} elements differ"
        else:
            assert torch.equal(x, y), f"{msg} output {i}"


def check_fused(fn, *inputs, fused_nodes=1, absent=(), atol=None, rtol=None, check_off=False):
    """Fused vs eager (tolerance), fused vs unfused (exact); then graph assertions."""
    with torch.no_grad():
        want = fn(*inputs)
        got = compile_native(fn)(*inputs)
        unfused = compile_native(fn, disable_passes=["fuse_elementwise"])(*inputs)
    assert_close(got, want, atol, rtol, msg="fused vs eager")
    same(got, unfused, "fused vs unfused")
    text = graph_text(fn, *inputs)
    if fused_nodes is not None:
        assert text.count("= fused_elementwise(") == fused_nodes, text
    for a in absent:
        assert f"= {a}(" not in text, f"{a} node left unfused:\n{text}"
    if check_off:
        off = graph_text(fn, *inputs, disable_passes=["fuse_elementwise"])
        assert "fused_elementwise" not in off
    return text


def gelu_tanh_by_hand(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def silu_by_hand(x):
    return x * torch.sigmoid(x)


def leaky_where(x):
    return torch.where(x > 0, x, 0.1 * x)


def used_twice(x):
    y = torch.exp(x * 0.25)
    return torch.sin(y * y + y) - y


SHAPES = [(7,), (3, 2, 1000)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("fn", [gelu_tanh_by_hand, silu_by_hand, leaky_where, used_twice],
                         ids=lambda f: f.__name__)
def test_unary_chains(fn, shape, dtype):
    x = (torch.randn(shape) * 3).to(dtype)
    check_fused(fn, x, absent=("tanh", "sigmoid", "where", "exp", "sin", "mul"))


@pytest.mark.parametrize("dtype", DTYPES + [torch.float16])
def test_broadcast_arith(dtype):
    def f(a, b, c, d):
        return (a + b) * c - d

    a = torch.randn(4, 1, 6).to(dtype)
    b = torch.randn(5, 1).to(dtype)
    c = torch.randn(6).to(dtype)
    d = torch.randn(4, 5, 6).to(dtype)
    check_fused(f, a, b, c, d, absent=("add", "mul", "sub"), check_off=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_multi_output_group(dtype):
    def f(x, y):
        a = torch.sigmoid(x) * y
        b = torch.tanh(a) + 1.0
        return a, b.clamp(-0.5, 1.5)

    x, y = torch.randn(8, 100).to(dtype), torch.randn(8, 100).to(dtype)
    check_fused(f, x, y)


@pytest.mark.parametrize("dtype", DTYPES)
def test_compare_logical_convert(dtype):
    def f(x, y):
        m = (x > y) & ~torch.isnan(x) | (y < -1)
        z = torch.where(m, x * 2, y.abs().sqrt())
        return z.float().exp().to(dtype), m

    x, y = torch.randn(300, 17).to(dtype), torch.randn(300, 17).to(dtype)
    x[0, 0] = float("nan")
    check_fused(f, x, y)


def test_bf16_chain_matches_eager_rounding():
    # a long bf16 chain: eager rounds every intermediate to bf16, so do the fused and the
    # unfused kernels; differences vs eager come only from the float32 math functions
    def f(x):
        y = x
        for i in range(12):
            y = torch.tanh(y * 1.5 + 0.25) - y * 0.5
        return y

    x = torch.randn(64, 257).to(torch.bfloat16)
    check_fused(f, x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["t", "step", "permute_inside"])
def test_non_contiguous_inputs(layout, dtype):
    base = torch.randn(40, 66).to(dtype)
    y = torch.randn(33).to(dtype)
    if layout == "t":
        x = torch.randn(33, 40).to(dtype).t()  # (40, 33) transposed
        fn = lambda x, y: torch.sigmoid(x * y) + x
    elif layout == "step":
        x = base[:, ::2]  # (40, 33) strided
        fn = lambda x, y: torch.sigmoid(x * y) + x
    else:
        x = base[:, :33].contiguous()

        def fn(x, y):
            z = x.permute(1, 0)
            return torch.relu(z * y[:, None] - 0.5) * z

    check_fused(fn, x, y)


@pytest.mark.parametrize("dtype", DTYPES)
def test_zero_size(dtype):
    def f(x, y):
        return torch.sigmoid(x + y) * x

    x, y = torch.randn(0, 5).to(dtype), torch.randn(5).to(dtype)
    check_fused(f, x, y)


def test_long_chain_single_node():
    def f(x):
        for i in range(50):
            x = torch.sin(x) * 1.01 + 0.01
        return x

    check_fused(f, torch.randn(1000), fused_nodes=1, absent=("sin", "mul", "add"))


def test_integer_chain_stays_unfused_and_correct():
    # integer math is not fused: the nodes run unfused (default config) and match eager
    def f(x):
        return (x + 3) * 2 - x // 2

    x = torch.randint(-100, 100, (50,))
    with torch.no_grad():
        got = torch.compile(f, backend="airgraph")(x)
    assert torch.equal(got, f(x))
    text = graph_text(f, x)
    assert "fused_elementwise" not in text


def test_float64_chain_unfused_default_config():
    def f(x):
        return torch.exp(x) * torch.sin(x) + 1

    x = torch.randn(20, dtype=torch.float64)
    with torch.no_grad():
        got = torch.compile(f, backend="airgraph")(x)
    torch.testing.assert_close(got, f(x))
