"""Reductions, argmax/argmin, max/min with indices, softmax, log_softmax, cumsum:
compiled natively (no fallback) and compared with eager PyTorch."""
import pytest
import torch
import torch.nn.functional as F

import airgraph
from conftest import assert_close, check, compile_native

FLOATS = [torch.float32, torch.bfloat16]


def rand(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


# (dims, keepdim) covering: all, innermost (Inner path), outer (Outer path), mixed (General path)
DIMS = [(None, False), ([-1], False), ([0], True), ([1], False), ([0, 2], False), ([1, 2], True), ([0, 1], False)]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dims,keepdim", DIMS)
def test_float_reductions(dims, keepdim, dtype):
    x = rand(4, 5, 37, dtype=dtype)

    def fn(x):
        if dims is None:
            return torch.sum(x), torch.mean(x), torch.amax(x), torch.amin(x), torch.var(x)
        return (torch.sum(x, dims, keepdim=keepdim), torch.mean(x, dims, keepdim=keepdim),
                torch.amax(x, dims, keepdim=keepdim), torch.amin(x, dims, keepdim=keepdim),
                torch.var(x, dim=dims, keepdim=keepdim))

    check(fn, x)


@pytest.mark.parametrize("dtype", FLOATS)
def test_prod(dtype):
    x = (torch.rand(3, 6, 5) + 0.5).to(dtype)
    check(lambda x: (x.prod(), x.prod(1), x.prod(-1, keepdim=True), x.prod(0)), x)


def test_large_sums_accurate():
    # long rows (split across threads) and long columns (row split of the Outer path)
    x = torch.randn(300000)
    check(lambda x: (x.sum(), x.mean()), x, atol=1e-3)
    y = torch.randn(20000, 3)
    check(lambda y: (y.sum(0), y.mean(0), y.amax(0)), y, atol=1e-3)


@pytest.mark.parametrize("correction", [0, 1, 2.5])
def test_var_correction(correction):
    x = torch.randn(3, 7, 4)
    check(lambda x: (torch.var(x, 1, correction=correction), torch.var(x, (0, 2), correction=correction,
                                                                          keepdim=True)), x)
    # the std decomposition uses var.correction too
    check(lambda x: torch.std(x, -1), x)


def test_var_mean_decomposed():
    # var_mean decomposes into prims.var / prims.sum (ours) and prims.div (another family's)
    x = torch.randn(4, 9)
    fn = lambda x: torch.var_mean(x, 1)  # noqa: E731
    rep = airgraph.explain(fn, x)
    native = {n.target for n in rep.nodes if n.native}
    assert {"prims.var.default", "prims.sum.default"} <= native, native
    with torch.no_grad():
        got = torch.compile(fn, backend="airgraph")(x)
    assert_close(got, fn(x), msg="var_mean")


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int8, torch.bool])
def test_int_sum_prod(dtype):
    x = torch.randint(-3, 4, (4, 6, 5)).to(dtype)
    check(lambda x: (x.sum(), x.sum(1), x.sum((0, 2), keepdim=True), x.prod(2), x.prod()), x)


def test_sum_dtype_kwarg():
    xb = rand(4, 33, dtype=torch.bfloat16)
    check(lambda x: (x.sum(1, dtype=torch.float32), x.mean(0, dtype=torch.float32), x.sum(dtype=torch.float64)),
          xb)
    xi = torch.randint(-100, 100, (5, 7), dtype=torch.int32)
    check(lambda x: (x.sum(1, dtype=torch.int32), x.sum(0, dtype=torch.int64), x.cumsum(1, dtype=torch.int32)), xi)
    xi8 = torch.randint(-100, 100, (5, 40), dtype=torch.int8)
    check(lambda x: x.sum(1, dtype=torch.int8), xi8)  # wraps like torch


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool])
def test_int_extremes(dtype):
    x = torch.randint(0, 9, (5, 7, 3)).to(dtype)
    check(lambda x: (x.amax(1), x.amin((0, 2)), x.max(), x.min(), x.max(-1), x.min(0)), x)


def test_nan_propagation():
    x = torch.randn(4, 6, 5)
    x[1, 2, 3] = float("nan")
    x[3, :, 0] = float("nan")
    check(lambda x: (x.amax(-1), x.amin(1), x.max(), x.sum(0), x.argmax(-1), x.argmin(1), x.max(1),
                         x.min(-1), x.argmax()), x)
    check(lambda x: (x.amax(0), x.amin(0), x.argmax(0), x.argmin(0)), x.bfloat16())


def test_argmax_ties_first_index():
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [-1.0, -5.0, -5.0, 7.0]])
    check(lambda x: (x.argmax(1), x.argmin(1), x.argmax(0), x.argmin(0, keepdim=True), x.argmax(),
                     x.argmin(), x.max(1), x.min(0)), x)


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.int32])
@pytest.mark.parametrize("shape", [(7,), (4, 9), (3, 70, 5)])
def test_argmax_argmin(dtype, shape):
    x = (torch.randn(*shape) * 100).to(dtype)
    check(lambda x: (x.argmax(), x.argmin(), x.argmax(-1), x.argmin(0, keepdim=True), x.argmax(0, keepdim=True),
                     torch.max(x, -1), torch.min(x, 0, keepdim=True)), x)


@pytest.mark.parametrize("dtype", [torch.bool, torch.float32, torch.int64])
def test_any_all(dtype):
    x = (torch.randint(0, 3, (4, 5, 6)) == 0).to(dtype)
    x[1] = 1
    x[2] = 0
    check(lambda x: (x.any(), x.all(), x.any(1), x.all(-1, keepdim=True), x.any((0, 2)), x.all((1, 2))), x)
    # an explicit empty dim list reduces nothing for any/all (but everything for sum)
    check(lambda x: (torch.any(x, dim=()), torch.all(x, dim=()), torch.sum(x, dim=())), x)


def test_any_all_float_special_values():
    x = torch.tensor([[0.0, -0.0, 0.0], [0.0, float("nan"), 0.0], [1.0, 2.0, -0.0], [1.0, float("inf"), -3.0]])
    check(lambda x: (x.any(1), x.all(1), x.any(0), x.all(0), x.any(), x.all()), x)
    check(lambda x: (x.any(1), x.all(0)), x.bfloat16())


@pytest.mark.parametrize("dtype", FLOATS)
def test_noncontiguous_inputs(dtype):
    x = rand(6, 10, dtype=dtype)
    check(lambda a: (a.sum(0), a.amax(1), a.mean(), a.argmax(1), F.softmax(a, -1), a.cumsum(0)), x.t())
    check(lambda a: (a.sum(-1), a.var(0), F.log_softmax(a, 0)), x[:, ::2])
    y = rand(3, 4, 5, dtype=dtype)
    check(lambda a: (a.permute(2, 0, 1).sum(1), a.permute(1, 2, 0).amax((0, 2)),
                     F.softmax(a.permute(2, 1, 0), 1), a.transpose(0, 2).cumsum(-1)), y)


def test_zero_size():
    x = torch.randn(0, 5, 3)
    check(lambda x: (x.sum(0), x.mean(0), x.prod(0), x.sum(1), x.amax(1), x.amin(-1), x.var(0),
                         x.cumsum(0), F.softmax(x, 1), x.argmax(1), x.sum(), x.mean()), x)
    check(lambda x: (x.var(1, correction=5), x.var(-1, correction=3)), torch.randn(2, 3, 3))
    b = torch.zeros(0, 3, dtype=torch.bool)
    check(lambda b: (b.any(1), b.all(1), b.any(0), b.all(0), b.any(), b.all()), b)


def test_scalar_input():
    x = torch.tensor(2.5)
    check(lambda x: (x.sum(), x.amax(), x.argmax(), x.mean(0), x.cumsum(0), F.softmax(x, 0)), x)


@pytest.mark.parametrize("dtype", FLOATS + [torch.float64])
@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_softmax(dim, dtype):
    x = (torch.randn(5, 130, 7) * 4).to(dtype)
    check(lambda x: (F.softmax(x, dim), F.log_softmax(x, dim)), x)


def test_softmax_extremes():
    x = torch.randn(4, 8) * 30
    x[0, 3] = float("inf")
    x[1] = float("-inf")
    x[2, 1] = float("-inf")
    x[3, 2] = float("nan")
    check(lambda x: (F.softmax(x, -1), F.log_softmax(x, -1), F.softmax(x, 0), F.log_softmax(x, 0)), x)
    big = torch.tensor([[1000.0, 999.0, -1000.0], [-80.0, -100.0, -120.0]])
    check(lambda x: (F.softmax(x, 1), F.log_softmax(x, 1)), big)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim", [-1, 0])
def test_safe_softmax_dead_rows_give_zero(dim, dtype):
    x = (torch.randn(4, 9) * 3).to(dtype)
    x[1] = float("-inf")  # a dead row (dim -1)
    x[:, 2] = float("-inf")  # a dead column (dim 0)
    x[3, 5] = float("-inf")
    check(lambda x: torch.ops.aten._safe_softmax(x, dim), x)


def test_softmax_dtype_kwarg_and_long_rows():
    x = rand(4, 16, dtype=torch.bfloat16)
    check(lambda x: F.softmax(x, -1, dtype=torch.float32), x)
    # 16-bit rows longer than the kernel's float row buffer
    check(lambda x: (F.softmax(x, -1), F.log_softmax(x, -1)), rand(3, 5000, dtype=torch.bfloat16) * 3)


@pytest.mark.parametrize("dtype", FLOATS + [torch.int32, torch.int64, torch.bool])
def test_cumsum(dtype):
    x = (torch.randn(4, 9, 70) * 3).to(dtype)
    check(lambda x: (x.cumsum(0), x.cumsum(1), x.cumsum(-1)), x)


def test_fallback_unsupported_variants():
    # integer max_pool2d is not done by the engine: it runs in PyTorch, the sum still natively
    x = torch.randint(-5, 5, (1, 2, 4, 4))

    def fn(x):
        return F.max_pool2d(x, 2).sum((-1, -2)), F.softmax(x.float(), -1)

    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(fn, backend="airgraph")(x)
    assert_close(got, fn(x), msg="fallback")
    with pytest.raises(Exception, match="max_pool2d"):
        compile_native(fn)(x)


def test_explain_reports_fallback_reason():
    x = torch.randint(-5, 5, (1, 2, 4, 4))
    rep = airgraph.explain(lambda x: F.max_pool2d(x, 2), x)
    fb = rep.fallbacks()
    assert any("max_pool2d" in n.target and "floating" in n.reason for n in fb), [(n.target, n.reason) for n in fb]
