"""layer_norm, batch_norm (inference), rms_norm and 2-D pooling: compiled natively
(no fallback) and compared with eager PyTorch."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import airgraph
from conftest import _flat, assert_close, check, compile_native

FLOATS = [torch.float32, torch.bfloat16]


def rand(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


# ---- layer_norm ------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("affine", ["both", "weight", "bias", "none"])
def test_layer_norm(affine, dtype):
    x = (rand(3, 5, 48) * 3 + 1).to(dtype)
    w = rand(48, dtype=dtype) if affine in ("both", "weight") else None
    b = rand(48, dtype=dtype) if affine in ("both", "bias") else None
    check(lambda x: F.layer_norm(x, (48,), w, b, 1e-5), x)
    check(lambda x: F.layer_norm(x, (5, 48), None, None, 1e-3), x)


def test_layer_norm_module_and_mixed_params():
    m = nn.LayerNorm(64).eval()
    with torch.no_grad():
        m.weight.normal_()
        m.bias.normal_()
    check(m, torch.randn(2, 7, 64))
    # bf16 activations with float32 parameters (a mixed-precision model)
    x = rand(4, 64, dtype=torch.bfloat16)
    check(lambda x: F.layer_norm(x, (64,), m.weight, m.bias), x)


def test_layer_norm_noncontiguous_and_zero():
    x = torch.randn(16, 6)
    w, b = torch.randn(16), torch.randn(16)
    check(lambda x: F.layer_norm(x, (16,), w, b), x.t())
    check(lambda x: F.layer_norm(x.permute(0, 2, 1), (16,), w, b), torch.randn(2, 16, 5))
    check(lambda x: F.layer_norm(x, (16,), w, b), torch.randn(0, 16))
    check(lambda x: F.layer_norm(x, (6,)), x[::2])


# ---- batch_norm ------------------------------------------------------------------
def _bn(mod, c, dtype):
    m = mod(c).eval()
    with torch.no_grad():
        m.running_mean.normal_()
        m.running_var.uniform_(0.5, 2.0)
        if m.weight is not None:
            m.weight.normal_()
            m.bias.normal_()
    return m.to(dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mod,shape", [(nn.BatchNorm1d, (6, 5)), (nn.BatchNorm1d, (2, 5, 9)),
                                       (nn.BatchNorm2d, (2, 5, 7, 6)), (nn.BatchNorm3d, (1, 5, 3, 4, 2))])
def test_batch_norm(mod, shape, dtype):
    m = _bn(mod, 5, dtype)
    check(m, rand(*shape, dtype=dtype))


def test_batch_norm_functional_variants():
    x = torch.randn(2, 4, 5, 5)
    mean, var = torch.randn(4), torch.rand(4) + 0.5
    w, b = torch.randn(4), torch.randn(4)
    check(lambda x: F.batch_norm(x, mean, var, w, None, False, 0.1, 1e-3), x)
    check(lambda x: F.batch_norm(x, mean, var, None, b, False), x)
    check(lambda x: F.batch_norm(x, mean, var), x)
    # bf16 activations, f32 statistics
    check(lambda x: F.batch_norm(x, mean, var, w, b), x.bfloat16())
    check(lambda x: F.batch_norm(x.permute(0, 3, 1, 2), mean[:1].expand(5), var[:1].expand(5)), x)
    check(lambda x: F.batch_norm(x, mean, var, w, b), torch.randn(0, 4, 3, 3))


# ---- rms_norm ------------------------------------------------------------------------
def test_rms_norm():
    # F.rms_norm decomposes into pow/mean/rsqrt/mul, so the mean reduction is ours
    # and the rest belongs to other families: run with fallback allowed and compare.
    x = torch.randn(4, 32)
    w = torch.randn(32)
    fn = lambda x: F.rms_norm(x, (32,), w, 1e-6)  # noqa: E731
    with torch.no_grad():
        got = torch.compile(fn, backend="airgraph")(x)
    assert_close(got, fn(x), msg="rms_norm")


# ---- pooling -------------------------------------------------------------------------
MAXPOOL_CASES = [  # kernel, stride, padding, dilation, ceil_mode
    (2, None, 0, 1, False),
    (3, 2, 1, 1, False),
    (3, 2, 1, 1, True),
    ((3, 2), (2, 1), (1, 0), 1, False),
    (3, 1, 1, 2, False),
    (2, 3, 0, 1, True),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("k,s,p,d,ceil", MAXPOOL_CASES)
def test_max_pool2d(k, s, p, d, ceil, dtype):
    x = rand(2, 3, 11, 10, dtype=dtype)
    check(lambda x: F.max_pool2d(x, k, s, p, d, ceil_mode=ceil), x)
    # with indices (flat h*W+w, first max wins), and a 3-D input
    check(lambda x: F.max_pool2d(x, k, s, p, d, ceil_mode=ceil, return_indices=True), x[0])


def test_max_pool2d_ties_nan_inf():
    x = torch.zeros(1, 2, 6, 6)
    x[0, 0, 1, 1] = float("nan")
    x[0, 0, 4, 4] = float("nan")
    x[0, 0, 4, 5] = float("nan")
    x[0, 1] = float("-inf")
    x[0, 1, 0, 0] = 3.0
    x[0, 1, 0, 1] = 3.0
    fn = lambda x: F.max_pool2d(x, 2, return_indices=True)  # noqa: E731
    with torch.no_grad():
        want = fn(x)
        got = compile_native(fn)(x)
    torch.testing.assert_close(got[0], want[0], equal_nan=True)
    assert torch.equal(got[1], want[1]), (got[1], want[1])
    check(lambda x: F.max_pool2d(x, 3, 2, 1), x[:, 1:])


def test_max_pool_module_and_1d():
    check(nn.MaxPool2d(3, 2, 1), torch.randn(1, 4, 9, 9))
    check(lambda x: F.max_pool1d(x, 3, 2, 1), torch.randn(2, 4, 17))
    check(lambda x: F.max_pool2d(x.permute(0, 3, 1, 2), 2), torch.randn(1, 8, 8, 3))
    check(lambda x: F.max_pool2d(x, 2), torch.randn(0, 3, 4, 4))


AVGPOOL_CASES = [  # kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
    (2, None, 0, False, True, None),
    (3, 2, 1, False, True, None),
    (3, 2, 1, True, False, None),
    (3, 2, 1, True, True, None),
    ((3, 2), (2, 1), (1, 1), False, False, None),
    (3, 2, 1, False, True, 5),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("k,s,p,ceil,cip,div", AVGPOOL_CASES)
def test_avg_pool2d(k, s, p, ceil, cip, div, dtype):
    x = rand(2, 3, 11, 10, dtype=dtype)
    check(lambda x: F.avg_pool2d(x, k, s, p, ceil, cip, div), x)


def test_avg_pool_1d_and_noncontiguous():
    check(lambda x: F.avg_pool1d(x, 4, 2, 1, ceil_mode=True), torch.randn(2, 3, 19))
    check(lambda x: F.avg_pool2d(x, 2), torch.randn(1, 9, 9, 4).permute(0, 3, 1, 2))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("out", [(1, 1), (3, 5), (7, 7), (4, 3), (11, 13)])
def test_adaptive_avg_pool2d(out, dtype):
    x = rand(2, 3, 11, 10, dtype=dtype)
    check(lambda x: F.adaptive_avg_pool2d(x, out), x)
    check(lambda x: F.adaptive_avg_pool2d(x, out), x[0])


def test_adaptive_module_and_1d():
    check(nn.AdaptiveAvgPool2d((None, 2)), torch.randn(1, 3, 5, 7))
    check(lambda x: F.adaptive_avg_pool1d(x, 4), torch.randn(2, 3, 10))
    check(lambda x: F.adaptive_avg_pool2d(x, 2), torch.randn(0, 3, 5, 5))


def test_small_cnn_head():
    m = nn.Sequential(nn.BatchNorm2d(4), nn.MaxPool2d(2), nn.AdaptiveAvgPool2d(1)).eval()
    check(m, torch.randn(2, 4, 8, 8))


# ---- fallback --------------------------------------------------------------------------
def test_unsupported_norm_falls_back():
    # f64 layer-norm parameters with a f32 input are not taken by the engine (torch itself
    # rejects that mix), while a f64 input with f32 params falls back too; int pooling as well.
    x = torch.randint(-9, 9, (1, 2, 6, 6))
    fn = lambda x: F.avg_pool2d(x.float(), 2) + F.max_pool2d(x, 2)  # noqa: E731
    with torch.no_grad():
        got = torch.compile(fn, backend="airgraph")(x)
    assert_close(got, fn(x), msg="fallback")
    rep = airgraph.explain(fn, x)
    fb = {n.target for n in rep.fallbacks()}
    assert any("max_pool2d" in t for t in fb), fb
    assert not any("avg_pool2d" in t for t in fb), fb
    with pytest.raises(Exception, match="max_pool2d"):
        compile_native(fn)(x)


def test_layer_norm_stats_outputs_fall_back():
    # mean/rstd outputs of native_layer_norm are not computed by the engine
    def fn(x):
        out, mean, rstd = torch.ops.aten.native_layer_norm(x, [8], None, None, 1e-5)
        return out, mean, rstd

    x = torch.randn(3, 8)
    with torch.no_grad():
        got = torch.compile(fn, backend="airgraph")(x)
    assert_close(_flat(got), _flat(fn(x)), msg="stats")


# ---- 3-D and adaptive max pooling --------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("k,s,p,d,ceil", [(2, None, 0, 1, False), (3, 2, 1, 1, True), ((3, 2, 1), (2, 1, 1), (1, 1, 0), (1, 2, 1), False),
                                          (3, 2, 1, 2, True)])
def test_max_pool3d(k, s, p, d, ceil, dtype):
    x = rand(2, 3, 7, 8, 9, dtype=dtype)
    check(lambda x: F.max_pool3d(x, k, s, p, d, ceil), x)
    check(lambda x: F.max_pool3d(x, k, s, p, d, ceil, return_indices=True), x[0])


def test_max_pool3d_nan_and_noncontiguous():
    x = torch.randn(1, 2, 4, 4, 4)
    x[0, 0, 1, 1, 1] = float("nan")
    x[0, 1, :2, :2, :2] = float("-inf")
    check(lambda x: F.max_pool3d(x, 2, return_indices=True), x)
    check(lambda x: F.max_pool3d(x.transpose(2, 4), 2), torch.randn(1, 2, 5, 6, 4))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])  # eager has no bf16 avg_pool3d
@pytest.mark.parametrize("k,s,p,ceil,cip,div", [(2, None, 0, False, True, None), (3, 2, 1, True, False, None),
                                                ((3, 2, 3), (2, 1, 2), (1, 1, 1), True, True, None),
                                                (3, 2, 1, False, True, 7)])
def test_avg_pool3d(k, s, p, ceil, cip, div, dtype):
    x = rand(2, 3, 7, 8, 9, dtype=dtype)
    check(lambda x: F.avg_pool3d(x, k, s, p, ceil, cip, div), x)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("out", [(1, 1, 1), (3, 2, 5), (7, 8, 9), (4, 11, 2)])
def test_adaptive_avg_pool3d(out, dtype):
    x = rand(2, 3, 7, 8, 9, dtype=dtype)
    check(lambda x: F.adaptive_avg_pool3d(x, out), x)
    check(lambda x: F.adaptive_avg_pool3d(x, out), x[0])


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("out", [(1, 1), (3, 5), (11, 10), (4, 13)])
def test_adaptive_max_pool2d(out, dtype):
    x = rand(2, 3, 11, 10, dtype=dtype)
    check(lambda x: F.adaptive_max_pool2d(x, out), x)
    check(lambda x: F.adaptive_max_pool2d(x, out, return_indices=True), x[0])


def test_adaptive_max_pool_1d_3d_and_nan():
    check(lambda x: F.adaptive_max_pool1d(x, 4, return_indices=True), torch.randn(2, 3, 10))
    check(lambda x: F.adaptive_max_pool3d(x, (2, 3, 1), return_indices=True), torch.randn(1, 2, 5, 6, 4))
    x = torch.randn(1, 2, 6, 6)
    x[0, 0, 0, 0] = float("nan")
    check(lambda x: F.adaptive_max_pool2d(x, 3, return_indices=True), x)
    check(nn.AdaptiveMaxPool2d((None, 2)), torch.randn(1, 3, 5, 7))
