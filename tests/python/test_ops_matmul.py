"""matmul family: mm / bmm / addmm / matmul / linear / convolution against eager."""
import pytest
import torch
import torch.nn.functional as F

import airgraph
from conftest import check, compile_native

DTYPES = [torch.float32, torch.bfloat16]


def r(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("a,b", [((3, 8), (8, 5)), ((1, 64), (64, 33)), ((0, 4), (4, 5))])
def test_mm(dtype, a, b):
    check(torch.mm, r(*a, dtype=dtype), r(*b, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_zero_size_inside(dtype):
    # zero-size operands made inside the function (N = 0, K = 0: the result is the bias)
    check(lambda a, b: torch.mm(a, b[:, :0]), r(4, 3, dtype=dtype), r(3, 5, dtype=dtype))
    check(lambda c, a, b: torch.addmm(c, a[:, :0], b[:0]), r(5, dtype=dtype), r(4, 3, dtype=dtype),
          r(3, 5, dtype=dtype))
    check(lambda a, b: torch.matmul(a[:, :0], b), r(2, 3, 3, 4, dtype=dtype), r(4, 5, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("a,b", [
    ((2, 3, 8), (2, 8, 5)),       # bmm
    ((2, 3, 8), (8, 5)),          # 3-D @ 2-D
    ((2, 2, 3, 8), (2, 1, 8, 4)),  # 4-D with batch broadcasting
    ((3, 1, 4, 6), (5, 6, 2)),    # rank and batch broadcasting
])
def test_matmul(dtype, a, b):
    check(torch.matmul, r(*a, dtype=dtype), r(*b, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias", [(5,), (3, 1), (3, 5), (1, 5)])
def test_addmm(dtype, bias):
    check(torch.addmm, r(*bias, dtype=dtype), r(3, 8, dtype=dtype), r(8, 5, dtype=dtype))


def test_addmm_beta_zero_ignores_nan_bias():
    bias = torch.full((5,), float("nan"))
    got = check(lambda b, x, y: torch.addmm(b, x, y, beta=0), bias, r(3, 8), r(8, 5))
    assert not got.isnan().any()


def test_noncontiguous_inputs():
    a, b = r(8, 3), r(5, 8)
    check(torch.mm, a.t(), b.t())            # transposed inputs
    check(torch.mm, r(3, 16)[:, ::2], r(8, 5))  # strided slice


@pytest.mark.parametrize("dtype", DTYPES)
def test_permute_inside(dtype):
    def f(x, w):
        return x @ w.t() + 1.0
    check(f, r(2, 3, 8, dtype=dtype), r(4, 8, dtype=dtype))
    check(lambda x, y: torch.matmul(x.transpose(-1, -2), y), r(2, 8, 3, dtype=dtype), r(2, 8, 5, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("xshape", [(3, 64), (1, 64), (2, 5, 64), (0, 64), (2, 1, 1, 64)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_module(dtype, xshape, bias):
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 48, bias=bias).to(dtype)
    check(lin, r(*xshape, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_linear_weights_as_inputs(dtype):
    check(F.linear, r(4, 16, dtype=dtype), r(12, 16, dtype=dtype), r(12, dtype=dtype))
    check(F.linear, r(2, 3, 16, dtype=dtype), r(12, 16, dtype=dtype))


def _engine_instructions(fn, *args, monkeypatch):
    """Compiles fn natively and returns [(fx name, engine op, kernel name)] of its engine graphs."""
    import airgraph.backend as be
    graphs = []

    def spy(*a, **k):
        run = be_compile(*a, **k)
        graphs.extend(getattr(run, "engine_graphs", []))
        return run

    be_compile = be.compile_aten_graph
    monkeypatch.setattr(be, "compile_aten_graph", spy)
    with torch.no_grad():
        torch.testing.assert_close(compile_native(fn)(*args), fn(*args), atol=1e-5, rtol=1e-4)
    return [i for g in graphs for i in g.exe.instructions()]


@pytest.mark.parametrize("bias", [True, False])
def test_linear_module_runs_as_prepacked_linear(bias, monkeypatch):
    lin = torch.nn.Linear(32, 16, bias=bias)
    ins = _engine_instructions(lin, r(2, 4, 32), monkeypatch=monkeypatch)
    ops = [op for _, op, _ in ins]
    assert ops.count("linear") == 1 and "matmul" not in ops and "permute" not in ops, ins


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,k,n", [(1, 1024, 1003), (2, 37, 7), (3, 8, 4), (4, 16, 33), (1, 5, 6), (1, 2816, 130)])
@pytest.mark.parametrize("bias", [True, False])
def test_gemv_few_rows_constant_weights(dtype, m, k, n, bias, monkeypatch):
    """At most four rows against constant weights run the GEMV kernel (a decode step's linears):
    four weight rows per block plus the rows left over, K tails, bias and a fused activation."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(k, n, bias=bias).to(dtype)
    fn = lambda x: torch.nn.functional.silu(lin(x))  # noqa: E731
    x = r(m, k, dtype=dtype)
    if dtype == torch.float32:
        ins = _engine_instructions(fn, x, monkeypatch=monkeypatch)
        assert any(kern.startswith("gemv_float32") for _, _, kern in ins), ins
    check(fn, x, atol=1e-4 if dtype == torch.float32 else None)


@pytest.mark.parametrize("dtype", DTYPES)
def test_mlp_two_layers(dtype):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Linear(64, 16)).to(dtype)
    check(m, r(2, 7, 32, dtype=dtype))


# ----------------------------------------------------------------------------- convolution

CONVS = [
    (torch.nn.Conv1d, dict(in_channels=4, out_channels=6, kernel_size=3, padding=2, dilation=2, groups=2), (2, 4, 10)),
    (torch.nn.Conv1d, dict(in_channels=3, out_channels=5, kernel_size=3, padding="same"), (1, 3, 9)),
    (torch.nn.Conv2d, dict(in_channels=4, out_channels=8, kernel_size=3, stride=2, padding=1), (1, 4, 9, 9)),
    (torch.nn.Conv2d, dict(in_channels=8, out_channels=8, kernel_size=3, padding=1, groups=8, bias=False), (2, 8, 6, 7)),
    (torch.nn.Conv2d, dict(in_channels=3, out_channels=4, kernel_size=(3, 5), stride=(2, 1), dilation=(1, 2)),
     (2, 3, 11, 12)),
    (torch.nn.Conv2d, dict(in_channels=3, out_channels=4, kernel_size=1), (0, 3, 5, 5)),
    (torch.nn.Conv3d, dict(in_channels=2, out_channels=4, kernel_size=3, padding=1), (1, 2, 5, 5, 5)),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cls,kw,shape", CONVS)
def test_conv_module(dtype, cls, kw, shape):
    torch.manual_seed(0)
    m = cls(**kw).to(dtype)
    check(m, r(*shape, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_conv_weights_as_inputs(dtype):
    check(lambda x, w, b: F.conv2d(x, w, b, padding=1, groups=2), r(2, 4, 6, 6, dtype=dtype),
          r(6, 2, 3, 3, dtype=dtype), r(6, dtype=dtype))


def test_conv_noncontiguous_input():
    x = r(1, 8, 8, 3).permute(0, 3, 1, 2)  # channels-last storage
    check(lambda x, w: F.conv2d(x, w), x, r(4, 3, 3, 3))
    check(lambda x, w: F.conv2d(x.transpose(2, 3), w), r(1, 3, 8, 6), r(4, 3, 3, 3))


# ----------------------------------------------------------------------------- fallback / errors

def _fallback_equal(fn, *args):
    torch._dynamo.reset()
    with torch.no_grad():
        want = fn(*args)
        got = torch.compile(fn, backend="airgraph", dynamic=False)(*args)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_unsupported_falls_back():
    _fallback_equal(lambda b, x, y: torch.addmm(b, x, y, alpha=2.0), r(5), r(3, 8), r(8, 5))
    _fallback_equal(lambda x, w: F.conv_transpose2d(x, w, stride=2), r(1, 4, 5, 5), r(4, 3, 3, 3))
    _fallback_equal(torch.mm, r(3, 4, dtype=torch.float64), r(4, 2, dtype=torch.float64))
    _fallback_equal(torch.mm, torch.randint(0, 5, (3, 4)), torch.randint(0, 5, (4, 2)))


def test_unsupported_raises_without_fallback():
    ints = [torch.ones(3, 8, dtype=torch.int64), torch.ones(8, 5, dtype=torch.int64)]
    with pytest.raises(Exception, match="cannot run on the engine"):
        with torch.no_grad():
            compile_native(lambda x, y: torch.mm(x, y))(*ints)
