"""Lowerings: views, data movement and creation ops (see lowering/__init__.py).

Engine values are contiguous, so every view op (view, squeeze, unsqueeze,
flatten...) is a zero-copy "reshape"; slice/select become zero-copy
"slice_view"/"select_view" when the region is contiguous in memory and a
strided copy otherwise. Creation ops become "full"/"arange" nodes that the
constant folder usually turns into constants.
"""
import torch

from . import Unsupported, aten, engine_dtype, lowering, static_shape
from .sizes import SymSize, known_equal, known_one

_INT64_MAX = 2**63 - 1
_INTS = {"int64", "int32", "int16", "int8", "uint8"}


def _ints(seq, what="size") -> list[int]:
    out = []
    for s in seq:
        if isinstance(s, SymSize):  # lowering once for every size: the size keeps its expression
            out.append(s)
            continue
        if isinstance(s, torch.fx.Node) or not isinstance(s, (int, torch.SymInt)) or isinstance(s, bool):
            raise Unsupported(f"{what} {s!r} is not a static int")
        try:
            out.append(int(s))
        except Exception as e:
            raise Unsupported(f"symbolic {what} {s}") from e
    return out


def _int(v, what="argument") -> int:
    return _ints([v], what)[0]


def _norm_dim(d: int, rank: int) -> int:
    r = max(rank, 1)
    if not -r <= d < r:
        raise Unsupported(f"dim {d} out of range for rank {rank}")
    return d % r


def reshape(ctx, vid: int, shape) -> int:
    shape = list(shape)
    if known_equal(ctx.shape(vid), shape):
        return vid
    return ctx.emit("reshape", [vid], {"shape": shape})


def _meta_reshape(ctx, x):
    return reshape(ctx, ctx.value(x), static_shape(ctx.out_meta()))


# ---- views ------------------------------------------------------------------------
@lowering(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def _view(ctx, node, x, shape):
    return reshape(ctx, ctx.value(x), static_shape(ctx.out_meta()))


@lowering(aten.view.dtype)
def _view_dtype(ctx, node, x, dtype):
    v = ctx.value(x)
    if ctx.dtype(v) != engine_dtype(dtype):
        raise Unsupported("view as a different dtype (bit reinterpretation) is not supported")
    return v


@lowering(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.unsqueeze.default,
          aten.flatten.using_ints, aten.unflatten.int)
def _squeeze(ctx, node, x, *args):
    return _meta_reshape(ctx, x)


@lowering(aten.expand.default)
def _expand(ctx, node, x, size, implicit=False):
    v = ctx.value(x)
    shape = _ints(size)
    if known_equal(ctx.shape(v), shape):
        return v
    return ctx.emit("expand", [v], {"shape": shape})


@lowering(aten.permute.default)
def _permute(ctx, node, x, dims):
    v = ctx.value(x)
    r = ctx.rank(v)
    dims = [_norm_dim(d, r) for d in _ints(dims, "dim")]
    return permute(ctx, v, dims)


def permute(ctx, v, dims):
    if dims == list(range(len(dims))):
        return v
    # moving only size-1 dims around keeps the element order: a reshape
    shape = ctx.shape(v)
    if [d for d in dims if not known_one(shape[d])] == sorted(d for d in dims if not known_one(shape[d])):
        return reshape(ctx, v, [shape[d] for d in dims])
    return ctx.emit("permute", [v], {"dims": dims})


@lowering(aten.transpose.int)
def _transpose(ctx, node, x, d0, d1):
    v = ctx.value(x)
    r = ctx.rank(v)
    if r == 0:
        return v
    d0, d1 = _norm_dim(_int(d0), r), _norm_dim(_int(d1), r)
    dims = list(range(r))
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return permute(ctx, v, dims)


@lowering(aten.t.default, aten.numpy_T.default)
def _t(ctx, node, x):
    v = ctx.value(x)
    r = ctx.rank(v)
    return permute(ctx, v, list(range(r))[::-1])


# ---- slice / select --------------------------------------------------------------------
def slice_(ctx, v, dim, start, end, step=1):
    shape = ctx.shape(v)
    if not shape:
        raise Unsupported("slice of a 0-d tensor")
    dim = _norm_dim(dim, len(shape))
    size = shape[dim]
    if step <= 0:
        raise Unsupported(f"slice step {step} must be positive")
    start = 0 if start is None else start
    end = _INT64_MAX if end is None else end
    s = start + size if start < 0 else start
    e = end + size if end < 0 else end
    s, e = min(max(s, 0), size), min(max(e, 0), size)
    e = max(e, s)
    n = (e - s + step - 1) // step
    if known_equal(s, 0) and known_equal(n, size):
        return v
    attrs = {"dim": dim, "start": s, "end": e, "step": step}
    contiguous = all(known_one(d) for d in shape[:dim]) and (step == 1 or known_one(n) or known_equal(n, 0))
    return ctx.emit("slice_view" if contiguous else "slice", [v], attrs)


def select(ctx, v, dim, index):
    shape = ctx.shape(v)
    if not shape:
        raise Unsupported("select from a 0-d tensor")
    dim = _norm_dim(dim, len(shape))
    if not -shape[dim] <= index < shape[dim]:
        raise Unsupported(f"select index {index} out of range for size {shape[dim]}")
    index %= shape[dim]
    if known_one(shape[dim]):
        return reshape(ctx, v, shape[:dim] + shape[dim + 1:])
    contiguous = all(known_one(d) for d in shape[:dim])
    return ctx.emit("select_view" if contiguous else "select", [v], {"dim": dim, "index": index})


@lowering(aten.slice.Tensor)
def _slice(ctx, node, x, dim=0, start=None, end=None, step=1):
    start = None if start is None else _int(start)
    end = None if end is None else _int(end)
    return slice_(ctx, ctx.value(x), _int(dim), start, end, _int(step))


@lowering(aten.narrow.default)
def _narrow(ctx, node, x, dim, start, length):
    v = ctx.value(x)
    dim, start, length = _int(dim), _int(start), _int(length)
    size = ctx.shape(v)[_norm_dim(dim, ctx.rank(v))]
    if start < 0:
        start += size
    return slice_(ctx, v, dim, start, start + length)


@lowering(aten.select.int)
def _select(ctx, node, x, dim, index):
    return select(ctx, ctx.value(x), _int(dim), _int(index))


@lowering(aten.split.Tensor)
def _split(ctx, node, x, split_size, dim=0):
    v = ctx.value(x)
    shape = ctx.shape(v)
    dim = _norm_dim(_int(dim), len(shape))
    ss = _int(split_size)
    size = shape[dim]
    if ss <= 0:
        if size == 0 and ss == 0:
            return [v]
        raise Unsupported(f"split size {ss}")
    n = max(1, (size + ss - 1) // ss)
    return [slice_(ctx, v, dim, i * ss, min(size, (i + 1) * ss)) for i in range(n)]


@lowering(aten.split_with_sizes.default)
def _split_with_sizes(ctx, node, x, split_sizes, dim=0):
    v = ctx.value(x)
    dim = _norm_dim(_int(dim), ctx.rank(v))
    out, off = [], 0
    for s in _ints(split_sizes):
        out.append(slice_(ctx, v, dim, off, off + s))
        off += s
    return out


@lowering(aten.unbind.int)
def _unbind(ctx, node, x, dim=0):
    v = ctx.value(x)
    shape = ctx.shape(v)
    dim = _norm_dim(_int(dim), len(shape))
    return [select(ctx, v, dim, i) for i in range(shape[dim])]


# ---- cat / stack ------------------------------------------------------------------------
@lowering(aten.cat.default)
def _cat(ctx, node, tensors, dim=0):
    dt = ctx.promote(*tensors)
    vids = [ctx.cast(ctx.value(t), dt) for t in tensors]
    kept = [v for v in vids if ctx.shape(v) != [0]]
    if len(kept) == 1 and known_equal(ctx.shape(kept[0]), static_shape(ctx.out_meta())):
        return kept[0]
    return ctx.emit("cat", vids, {"dim": _int(dim)})


@lowering(aten.stack.default)
def _stack(ctx, node, tensors, dim=0):
    dt = ctx.promote(*tensors)
    vids = [ctx.cast(ctx.value(t), dt) for t in tensors]
    shape = ctx.shape(vids[0])
    d = _norm_dim(_int(dim), len(shape) + 1)
    us = [reshape(ctx, v, shape[:d] + [1] + shape[d:]) for v in vids]
    if len(us) == 1:
        return us[0]
    return ctx.emit("cat", us, {"dim": d})


# ---- pad / flip / repeat / roll / tril / triu ----------------------------------------------------
def _scalar_attr(value, dtype: str):
    """A fill value as an attribute, exact for integer dtypes."""
    if isinstance(value, torch.fx.Node):
        raise Unsupported("fill value is a tensor")
    if dtype == "bool":
        return bool(value)
    if dtype in _INTS:
        if isinstance(value, float) and not value.is_integer():
            raise Unsupported(f"fill value {value} is not an integer for {dtype}")
        return int(value)
    return float(value)


@lowering(aten.constant_pad_nd.default)
def _pad(ctx, node, x, pad, value=0):
    v = ctx.value(x)
    pads = _ints(pad, "pad")
    if not any(pads):
        return v
    return ctx.emit("pad", [v], {"pads": pads, "value": _scalar_attr(value, ctx.dtype(v))})


@lowering(aten.flip.default)
def _flip(ctx, node, x, dims):
    v = ctx.value(x)
    shape = ctx.shape(v)
    dims = [_norm_dim(d, len(shape)) for d in _ints(dims, "dim")]
    if len(set(dims)) != len(dims):
        raise Unsupported("flip with repeated dims")
    dims = [d for d in dims if shape and shape[d] > 1]
    if not dims:
        return v
    return ctx.emit("flip", [v], {"dims": dims})


@lowering(aten.repeat.default)
def _repeat(ctx, node, x, repeats):
    return ctx.emit("repeat", [ctx.value(x)], {"repeats": _ints(repeats, "repeat")})


@lowering(aten.roll.default)
def _roll(ctx, node, x, shifts, dims=()):
    v = ctx.value(x)
    shifts, dims = _ints(shifts, "shift"), _ints(dims, "dim")
    shape = ctx.shape(v)
    if not dims:
        if len(shifts) != 1:
            raise Unsupported("roll without dims takes one shift")
        n = 1
        for s in shape:
            n *= s
        flat = reshape(ctx, v, [n])
        if n == 0:
            return v
        return reshape(ctx, ctx.emit("roll", [flat], {"shifts": shifts, "dims": [0]}), shape)
    if len(shifts) != len(dims):
        raise Unsupported("roll: shifts and dims differ in length")
    return ctx.emit("roll", [v], {"shifts": shifts, "dims": [_norm_dim(d, len(shape)) for d in dims]})


@lowering(aten.tril.default)
def _tril(ctx, node, x, diagonal=0):
    return ctx.emit("tril", [ctx.value(x)], {"diagonal": _int(diagonal)})


@lowering(aten.triu.default)
def _triu(ctx, node, x, diagonal=0):
    return ctx.emit("triu", [ctx.value(x)], {"diagonal": _int(diagonal)})


# ---- scatters into a slice -------------------------------------------------------------
@lowering(aten.slice_scatter.default)
def _slice_scatter(ctx, node, x, src, dim=0, start=None, end=None, step=1):
    v = ctx.value(x)
    s = ctx.cast(ctx.value(src), ctx.dtype(v))
    shape = ctx.shape(v)
    d = _norm_dim(_int(dim), len(shape))
    attrs = {"dim": d, "start": 0 if start is None else _int(start),
             "end": _INT64_MAX if end is None else _int(end), "step": _int(step)}
    return ctx.emit("slice_scatter", [v, s], attrs)


@lowering(aten.select_scatter.default)
def _select_scatter(ctx, node, x, src, dim, index):
    v = ctx.value(x)
    s = ctx.cast(ctx.value(src), ctx.dtype(v))
    shape = ctx.shape(v)
    d = _norm_dim(_int(dim), len(shape))
    i = _int(index)
    if not -shape[d] <= i < shape[d]:
        raise Unsupported(f"select_scatter index {i} out of range for size {shape[d]}")
    i %= shape[d]
    s = reshape(ctx, s, shape[:d] + [1] + shape[d + 1:])
    return ctx.emit("slice_scatter", [v, s], {"dim": d, "start": i, "end": i + 1, "step": 1})


# ---- creation -------------------------------------------------------------------------------
def full(ctx, shape, value, dtype: str) -> int:
    return ctx.emit("full", [], {"shape": list(shape), "value": _scalar_attr(value, dtype), "dtype": dtype})


@lowering(aten.full.default)
def _full(ctx, node, size, fill_value, **kw):
    return full(ctx, _ints(size), fill_value, ctx.out_dtype())


@lowering(aten.zeros.default, aten.empty.memory_format, aten.new_empty.default, aten.zero.default,
          aten.new_zeros.default)
def _zeros(ctx, node, *args, **kw):
    # empty's contents are undefined: zeros are as good as any
    return full(ctx, static_shape(ctx.out_meta()), 0, ctx.out_dtype())


@lowering(aten.ones.default, aten.new_ones.default)
def _ones(ctx, node, *args, **kw):
    return full(ctx, static_shape(ctx.out_meta()), 1, ctx.out_dtype())


@lowering(aten.full_like.default)
def _full_like(ctx, node, x, fill_value, **kw):
    return full(ctx, static_shape(ctx.out_meta()), fill_value, ctx.out_dtype())


@lowering(aten.new_full.default)
def _new_full(ctx, node, x, size, fill_value, **kw):
    return full(ctx, static_shape(ctx.out_meta()), fill_value, ctx.out_dtype())


@lowering(aten.scalar_tensor.default)
def _scalar_tensor(ctx, node, s, **kw):
    return full(ctx, [], s, ctx.out_dtype())


@lowering(aten.fill.Scalar)
def _fill_scalar(ctx, node, x, value):
    return full(ctx, static_shape(ctx.out_meta()), value, ctx.out_dtype())


@lowering(aten.fill.Tensor)
def _fill_tensor(ctx, node, x, value):
    shape = static_shape(ctx.out_meta())
    v = ctx.cast(ctx.value(value), ctx.out_dtype())
    return ctx.emit("expand", [v], {"shape": shape}) if shape else v


@lowering(aten.copy.default)
def _copy(ctx, node, dst, src, non_blocking=False):
    shape = static_shape(ctx.out_meta())
    v = ctx.cast(ctx.value(src), ctx.out_dtype())
    if known_equal(ctx.shape(v), shape):
        return v
    return ctx.emit("expand", [v], {"shape": shape})


def _num(v):
    if isinstance(v, torch.fx.Node) or isinstance(v, bool):
        raise Unsupported(f"arange bound {v!r}")
    if isinstance(v, (int, float, SymSize)):
        return v
    try:
        return int(v)
    except Exception as e:
        raise Unsupported(f"symbolic arange bound {v}") from e


def _arange(ctx, start, end, step):
    start, end, step = _num(start), _num(end), _num(step)
    dt = ctx.out_dtype()
    attrs = {"start": start, "end": end, "step": step, "dtype": dt}
    if dt in _INTS:
        # torch computes integer ranges exactly: only pass through integral bounds
        if not all(isinstance(a, int) for a in (start, step)):
            raise Unsupported("integer arange with float start/step")
    else:  # integral bounds stay ints (sizes may be symbolic); the kernel reads them as doubles
        attrs = {k: v if isinstance(v, (int, SymSize)) and not isinstance(v, bool) else float(v)
                 for k, v in (("start", start), ("end", end), ("step", step))}
        attrs["dtype"] = dt
    return ctx.emit("arange", [], attrs)


@lowering(aten.arange.default)
def _arange_default(ctx, node, end, **kw):
    return _arange(ctx, 0, end, 1)


@lowering(aten.arange.start)
def _arange_start(ctx, node, start, end, **kw):
    return _arange(ctx, start, end, 1)


@lowering(aten.arange.start_step)
def _arange_start_step(ctx, node, start, end, step=1, **kw):
    return _arange(ctx, start, end, step)
