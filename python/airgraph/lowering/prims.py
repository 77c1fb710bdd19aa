"""prims ops that PyTorch's decompositions leave behind, and diagonal views.

  prims.broadcast_in_dim(a, shape, broadcast_dimensions)  -> reshape (1s in the new dims) + expand
  prims.div(a, b)                                          -> true division (floats), truncation (ints)
  aten.diagonal(x, offset, dim1, dim2)                     -> permute + slice + reshape + strided slice
"""
from __future__ import annotations

import torch

from . import LOWERINGS, Unsupported, lowering, static_shape
from .shape import _norm_dim, permute, reshape, slice_

aten = torch.ops.aten
prims = torch.ops.prims


@lowering(prims.broadcast_in_dim.default)
def _broadcast_in_dim(ctx, node, a, shape, broadcast_dimensions):
    v = ctx.value(a)
    out = static_shape(ctx.out_meta())
    src = ctx.shape(v)
    if len(src) != len(broadcast_dimensions):
        raise Unsupported("broadcast_in_dim: one broadcast dimension per input dim")
    mid = [1] * len(out)
    for d, size in zip(broadcast_dimensions, src):
        mid[d] = size
    v = reshape(ctx, v, mid)
    if mid == out:
        return v
    return ctx.emit("expand", [v], {"shape": out})


@lowering(prims.div.default)
def _prims_div(ctx, node, a, b):
    mode = None if ctx.out_meta().dtype.is_floating_point else "trunc"
    return LOWERINGS[aten.div.Tensor_mode](ctx, node, a, b, rounding_mode=mode)


# prims ops whose semantics equal an ATen op the engine lowers (same arguments, same promotion:
# the decompositions that emit them have already made the dtypes match)
_SAME_AS_ATEN = {
    "add": aten.add.Tensor, "sub": aten.sub.Tensor, "mul": aten.mul.Tensor, "neg": aten.neg.default,
    "abs": aten.abs.default, "round": aten.round.default, "floor": aten.floor.default, "ceil": aten.ceil.default,
    "trunc": aten.trunc.default, "exp": aten.exp.default, "log": aten.log.default, "sqrt": aten.sqrt.default,
    "rsqrt": aten.rsqrt.default, "sin": aten.sin.default, "cos": aten.cos.default, "tanh": aten.tanh.default,
    "maximum": aten.maximum.default, "minimum": aten.minimum.default, "where": aten.where.self,
}


def _same_as(target):
    def lower(ctx, node, *args, **kwargs):
        return LOWERINGS[target](ctx, node, *args, **kwargs)

    return lower


for _name, _target in _SAME_AS_ATEN.items():
    lowering(getattr(prims, _name).default)(_same_as(_target))


def diagonal(ctx, v, offset=0, dim1=0, dim2=1):
    shape = ctx.shape(v)
    r = len(shape)
    if r < 2:
        raise Unsupported("diagonal of a tensor with fewer than 2 dims")
    d1, d2 = _norm_dim(dim1, r), _norm_dim(dim2, r)
    if d1 == d2:
        raise Unsupported("diagonal with dim1 == dim2")
    rest = [d for d in range(r) if d not in (d1, d2)]
    v = permute(ctx, v, rest + [d1, d2])
    n1, n2 = shape[d1], shape[d2]
    length = max(0, min(n1 - max(0, -offset), n2 - max(0, offset)))
    if length == 0:
        raise Unsupported("empty diagonal")
    if offset > 0:
        v = slice_(ctx, v, r - 1, offset, offset + length)
    elif offset < 0:
        v = slice_(ctx, v, r - 2, -offset, -offset + length)
    v = slice_(ctx, slice_(ctx, v, r - 2, 0, length), r - 1, 0, length)
    outer = [shape[d] for d in rest]
    v = reshape(ctx, v, outer + [length * length])
    return slice_(ctx, v, r - 2, 0, length * length, length + 1)


@lowering(aten.diagonal.default)
def _diagonal(ctx, node, x, offset=0, dim1=0, dim2=1):
    return diagonal(ctx, ctx.value(x), offset, dim1, dim2)


# The *_copy variants (what functionalization and torch.export emit for views): the engine's
# views already give their results as new values, so each copy op lowers as its view does.
_COPIES = {
    "view_copy.default": "view.default", "permute_copy.default": "permute.default",
    "narrow_copy.default": "narrow.default", "unbind_copy.int": "unbind.int",
    "squeeze_copy.default": "squeeze.default", "squeeze_copy.dim": "squeeze.dim",
    "squeeze_copy.dims": "squeeze.dims", "unsqueeze_copy.default": "unsqueeze.default",
    "transpose_copy.int": "transpose.int", "t_copy.default": "t.default", "expand_copy.default": "expand.default",
    "alias_copy.default": "alias.default", "split_with_sizes_copy.default": "split_with_sizes.default",
    "split_copy.Tensor": "split.Tensor", "diagonal_copy.default": "diagonal.default",
    "detach_copy.default": "detach.default", "slice_copy.Tensor": "slice.Tensor", "select_copy.int": "select.int",
    "unfold_copy.default": "unfold.default", "as_strided_copy.default": "as_strided.default",
}


def _overload(name: str):
    op, ov = name.split(".")
    return getattr(getattr(aten, op), ov)


def register_copies():
    """Called once every family is loaded: a copy op lowers like its view where that has a lowering."""
    for copy, view in _COPIES.items():
        c, v = _overload(copy), _overload(view)
        if c not in LOWERINGS and v in LOWERINGS:
            LOWERINGS[c] = LOWERINGS[v]


@lowering(prims.convert_element_type.default)
def _prims_convert(ctx, node, x, dtype):
    if isinstance(x, torch.fx.Node):
        return ctx.cast(ctx.value(x), dtype)
    return ctx.const(x, dtype)
