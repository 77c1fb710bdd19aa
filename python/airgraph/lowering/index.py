"""Lowerings: indexing ops (see lowering/__init__.py for the API).

Integer (int64/int32) index tensors only: boolean masks give data-dependent
shapes and fall back to PyTorch. Index range errors are checked at run time by
the kernels (an ag::Error, never an out-of-bounds read).
"""
import torch

from . import Unsupported, aten, lowering

_IDX = {"int64", "int32"}


def _index_value(ctx, idx) -> int:
    v = ctx.value(idx)
    dt = ctx.dtype(v)
    if dt not in _IDX:
        raise Unsupported(f"index tensor of dtype {dt} (only int64/int32; bool masks have data-dependent shapes)")
    return v


def _dim(d) -> int:
    if isinstance(d, torch.fx.Node) or isinstance(d, bool):
        raise Unsupported(f"dim {d!r}")
    return int(d)


@lowering(aten.embedding.default)
def _embedding(ctx, node, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    # padding_idx only changes the gradient
    return ctx.emit("embedding", [ctx.value(weight), _index_value(ctx, indices)])


@lowering(aten.index_select.default)
def _index_select(ctx, node, x, dim, index):
    v = ctx.value(x)
    if ctx.rank(v) == 0:
        raise Unsupported("index_select on a 0-d tensor")
    return ctx.emit("index_select", [v, _index_value(ctx, index)], {"dim": _dim(dim)})


@lowering(aten.gather.default)
def _gather(ctx, node, x, dim, index, sparse_grad=False):
    return ctx.emit("gather", [ctx.value(x), _index_value(ctx, index)], {"dim": _dim(dim)})


@lowering(aten.index.Tensor)
def _index(ctx, node, x, indices):
    v = ctx.value(x)
    dims, vids = [], []
    for d, idx in enumerate(indices):
        if idx is None:
            continue
        dims.append(d)
        vids.append(_index_value(ctx, idx))
    if not vids:
        return v
    if dims[-1] >= ctx.rank(v):
        raise Unsupported("too many indices")
    return ctx.emit("index", [v] + vids, {"dims": dims})


def _index_shape(xshape, dims, ishapes):
    b = list(torch.broadcast_shapes(*[tuple(s) for s in ishapes]))
    if dims[-1] - dims[0] == len(dims) - 1:
        return xshape[:dims[0]] + b + xshape[dims[-1] + 1:]
    return b + [s for d, s in enumerate(xshape) if d not in dims]


@lowering(aten.index_put.default)
def _index_put(ctx, node, x, indices, values, accumulate=False):
    if accumulate:
        raise Unsupported("index_put with accumulate=True")
    v = ctx.value(x)
    dims, vids = [], []
    for d, idx in enumerate(indices):
        if idx is None:
            continue
        dims.append(d)
        vids.append(_index_value(ctx, idx))
    if not vids or dims[-1] >= ctx.rank(v):
        raise Unsupported("index_put without index tensors")
    try:
        shape = _index_shape(ctx.shape(v), dims, [ctx.shape(i) for i in vids])
    except RuntimeError as e:
        raise Unsupported(f"index tensors do not broadcast: {e}") from e
    vals = ctx.cast(ctx.value(values), ctx.dtype(v))
    if ctx.shape(vals) != shape:
        vals = ctx.emit("expand", [vals], {"shape": shape})
    return ctx.emit("index_put", [v, vals] + vids, {"dims": dims})
