"""Lowerings: normalizations and pooling.

Engine ops (csrc/kernels/norm.cpp, pool.cpp):
  layer_norm(x, weight?, bias?){normalized_ndim, eps, has_weight, has_bias}
  rms_norm(x, weight?){normalized_ndim, eps, has_weight}
  batch_norm(x, mean, var, weight?, bias?){eps, has_weight, has_bias}   inference, channel dim 1
  group_norm(x, weight?, bias?){groups, eps, has_weight, has_bias}      x [N, C, *]
  max_pool2d{kernel, stride, padding, dilation, ceil_mode, indices}     values (+ int64 indices)
  avg_pool2d{kernel, stride, padding, ceil_mode, count_include_pad, divisor_override}
  adaptive_avg_pool2d{output_size}
  max_pool3d / avg_pool3d / adaptive_avg_pool3d: the 3-D forms (csrc/kernels/pool3d.cpp)
  adaptive_max_pool{output_size (2 or 3 sizes), indices}                values (+ int64 indices)
Parameters must have the input's dtype, or float32 for a bf16/f16 input; other
mixes fall back. The mean/rstd outputs of native_layer_norm / native_group_norm and
the save_* outputs of batch norm are not computed (getitem of them falls back).
"""
import operator

import torch

from . import Unsupported, aten, lowering

_FLOATS = ("float32", "float64", "bfloat16", "float16")


def _params(ctx, x, params, op):
    """Engine values of the optional parameter tensors, checked for dtype."""
    xd = ctx.dtype(x)
    if xd not in _FLOATS:
        raise Unsupported(f"{op} of {xd}")
    vals = [ctx.value(p) for p in params if p is not None]
    dts = {ctx.dtype(v) for v in vals}
    if len(dts) > 1:
        raise Unsupported(f"{op}: parameters of mixed dtypes {sorted(dts)}")
    if dts and dts != {xd} and not (dts == {"float32"} and xd in ("bfloat16", "float16")):
        raise Unsupported(f"{op}: {xd} input with {dts.pop()} parameters")
    return vals


@lowering(aten.native_layer_norm.default)
def _native_layer_norm(ctx, node, x, normalized_shape, weight, bias, eps):
    xv = ctx.value(x)
    vals = _params(ctx, xv, [weight, bias], "layer_norm")
    nd = len(normalized_shape)
    if list(ctx.shape(xv)[len(ctx.shape(xv)) - nd:]) != [int(s) for s in normalized_shape]:
        raise Unsupported("normalized_shape does not match the input")
    out = ctx.emit("layer_norm", [xv] + vals, {"normalized_ndim": nd, "eps": float(eps),
                                               "has_weight": weight is not None, "has_bias": bias is not None})
    return [out, None, None]


def _rms(ctx, node, x, normalized_shape, weight, eps):
    xv = ctx.value(x)
    vals = _params(ctx, xv, [weight], "rms_norm")
    if eps is None:
        eps = torch.finfo(x.meta["val"].dtype).eps
    return ctx.emit("rms_norm", [xv] + vals, {"normalized_ndim": len(normalized_shape), "eps": float(eps),
                                              "has_weight": weight is not None})


@lowering(aten.rms_norm.default)
def _rms_norm(ctx, node, x, normalized_shape, weight=None, eps=None):
    return _rms(ctx, node, x, normalized_shape, weight, eps)


@lowering(aten._fused_rms_norm.default)
def _fused_rms_norm(ctx, node, x, normalized_shape, weight, eps):
    return [_rms(ctx, node, x, normalized_shape, weight, eps), None]


@lowering(aten._native_batch_norm_legit_no_training.default)
def _batch_norm(ctx, node, x, weight, bias, running_mean, running_var, momentum, eps):
    xv = ctx.value(x)
    if not 2 <= ctx.rank(xv) <= 5:
        raise Unsupported(f"batch_norm of rank {ctx.rank(xv)}")
    vals = _params(ctx, xv, [running_mean, running_var, weight, bias], "batch_norm")
    out = ctx.emit("batch_norm", [xv] + vals, {"eps": float(eps), "has_weight": weight is not None,
                                               "has_bias": bias is not None})
    return [out, None, None]


@lowering(aten.native_group_norm.default)
def _native_group_norm(ctx, node, x, weight, bias, N, C, HxW, group, eps):
    xv = ctx.value(x)
    if ctx.rank(xv) < 2:
        raise Unsupported(f"group_norm of rank {ctx.rank(xv)}")
    vals = _params(ctx, xv, [weight, bias], "group_norm")
    out = ctx.emit("group_norm", [xv] + vals, {"groups": int(group), "eps": float(eps),
                                               "has_weight": weight is not None, "has_bias": bias is not None})
    return [out, None, None]


@lowering(aten._native_batch_norm_legit.no_stats)
def _batch_norm_batch_stats(ctx, node, x, weight, bias, training, momentum, eps):
    # Batch statistics without running stats. With a batch of one (what instance_norm
    # reshapes its input to) every channel is its own group: group_norm(groups=C).
    xv = ctx.value(x)
    s = ctx.shape(xv)
    if len(s) < 2 or s[0] != 1:
        raise Unsupported(f"batch_norm with batch statistics of shape {s} (only a batch of 1)")
    vals = _params(ctx, xv, [weight, bias], "batch_norm")
    out = ctx.emit("group_norm", [xv] + vals, {"groups": s[1], "eps": float(eps),
                                               "has_weight": weight is not None, "has_bias": bias is not None})
    return [out, None, None]


def _pair(v, default=None):
    if v is None or (isinstance(v, (list, tuple)) and len(v) == 0):
        return default
    if isinstance(v, int):
        return [v, v]
    v = [int(a) for a in v]
    return v * 2 if len(v) == 1 else v


def _max_pool(ctx, node, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    k = _pair(kernel_size)
    attrs = {"kernel": k, "stride": _pair(stride, k), "padding": _pair(padding, [0, 0]),
             "dilation": _pair(dilation, [1, 1]), "ceil_mode": bool(ceil_mode), "indices": indices}
    return ctx.emit("max_pool2d", [ctx.value(x)], attrs, nout=2 if indices else 1)


@lowering(aten.max_pool2d_with_indices.default)
def _max_pool2d_with_indices(ctx, node, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    # Compute the indices only when something reads them.
    if any(not (u.target is operator.getitem and u.args[1] == 0) for u in node.users):
        return list(_max_pool(ctx, node, x, kernel_size, stride, padding, dilation, ceil_mode, True))
    return [_max_pool(ctx, node, x, kernel_size, stride, padding, dilation, ceil_mode, False), None]


@lowering(aten.max_pool2d.default)
def _max_pool2d(ctx, node, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool(ctx, node, x, kernel_size, stride, padding, dilation, ceil_mode, False)


@lowering(aten.avg_pool2d.default)
def _avg_pool2d(ctx, node, x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                divisor_override=None):
    if divisor_override is not None and divisor_override <= 0:
        raise Unsupported("divisor_override must be positive")
    k = _pair(kernel_size)
    attrs = {"kernel": k, "stride": _pair(stride, k), "padding": _pair(padding, [0, 0]),
             "ceil_mode": bool(ceil_mode), "count_include_pad": bool(count_include_pad),
             "divisor_override": int(divisor_override or 0)}
    return ctx.emit("avg_pool2d", [ctx.value(x)], attrs)


@lowering(aten._adaptive_avg_pool2d.default, aten.adaptive_avg_pool2d.default)
def _adaptive_avg_pool2d(ctx, node, x, output_size):
    os = _pair(output_size)
    if os is None:
        raise Unsupported(f"output_size {output_size!r}")
    return ctx.emit("adaptive_avg_pool2d", [ctx.value(x)], {"output_size": os})


def _triple(v, default=None):
    if v is None or (isinstance(v, (list, tuple)) and len(v) == 0):
        return default
    if isinstance(v, int):
        return [v] * 3
    v = [int(a) for a in v]
    return v * 3 if len(v) == 1 else v


def _wants_indices(node):
    return any(not (u.target is operator.getitem and u.args[1] == 0) for u in node.users)


@lowering(aten.max_pool3d_with_indices.default)
def _max_pool3d_with_indices(ctx, node, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    k = _triple(kernel_size)
    idx = _wants_indices(node)
    attrs = {"kernel": k, "stride": _triple(stride, k), "padding": _triple(padding, [0] * 3),
             "dilation": _triple(dilation, [1] * 3), "ceil_mode": bool(ceil_mode), "indices": idx}
    out = ctx.emit("max_pool3d", [ctx.value(x)], attrs, nout=2 if idx else 1)
    return list(out) if idx else [out, None]


@lowering(aten.avg_pool3d.default)
def _avg_pool3d(ctx, node, x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                divisor_override=None):
    if divisor_override is not None and divisor_override <= 0:
        raise Unsupported("divisor_override must be positive")
    k = _triple(kernel_size)
    attrs = {"kernel": k, "stride": _triple(stride, k), "padding": _triple(padding, [0] * 3),
             "ceil_mode": bool(ceil_mode), "count_include_pad": bool(count_include_pad),
             "divisor_override": int(divisor_override or 0)}
    return ctx.emit("avg_pool3d", [ctx.value(x)], attrs)


@lowering(aten._adaptive_avg_pool3d.default, aten.adaptive_avg_pool3d.default)
def _adaptive_avg_pool3d(ctx, node, x, output_size):
    os = _triple(output_size)
    if os is None or any(not isinstance(o, int) for o in os):
        raise Unsupported(f"output_size {output_size!r}")
    return ctx.emit("adaptive_avg_pool3d", [ctx.value(x)], {"output_size": os})


def _adaptive_max(ctx, node, x, output_size, sp):
    os = _pair(output_size) if sp == 2 else _triple(output_size)
    if os is None or len(os) != sp:
        raise Unsupported(f"output_size {output_size!r}")
    idx = _wants_indices(node)
    out = ctx.emit("adaptive_max_pool", [ctx.value(x)], {"output_size": os, "indices": idx},
                   nout=2 if idx else 1)
    return list(out) if idx else [out, None]


@lowering(aten.adaptive_max_pool2d.default)
def _adaptive_max_pool2d(ctx, node, x, output_size):
    return _adaptive_max(ctx, node, x, output_size, 2)


@lowering(aten.adaptive_max_pool3d.default)
def _adaptive_max_pool3d(ctx, node, x, output_size):
    return _adaptive_max(ctx, node, x, output_size, 3)
