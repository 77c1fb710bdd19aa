"""Lowerings: strided windows (as_strided, as_strided_scatter, unfold, im2col).

Engine values are contiguous, so a window is given by sizes/strides/offset over
the value's own elements (csrc/kernels/view.cpp):
  as_strided{size, stride, storage_offset}       strided copy
  as_strided_view{...}                           zero-copy alias (contiguous result)
  as_strided_scatter(self, src){...}             out = self, window := src
as_strided addresses the input's *storage*, so it is taken only when the traced
input is its own contiguous storage (offset 0) and the window stays inside it.
"""
import torch

from . import Unsupported, aten, lowering
from .shape import _ints, reshape


def _contig(shape):
    st, acc = [], 1
    for s in reversed(shape):
        st.append(acc)
        acc *= s
    return st[::-1]


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _check_storage(x):
    t = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    if not isinstance(t, torch.Tensor):
        raise Unsupported("as_strided input without a traced tensor")
    if not t.is_contiguous() or t.storage_offset() != 0:
        raise Unsupported("as_strided of a view (non-contiguous or offset input): depends on its storage")
    return t


def _window(ctx, v, size, stride, offset):
    if len(size) != len(stride) or offset < 0 or any(s < 0 for s in size) or any(s < 0 for s in stride):
        raise Unsupported("as_strided: invalid size/stride/offset")
    if _numel(size) and offset + sum((n - 1) * s for n, s in zip(size, stride)) >= _numel(ctx.shape(v)):
        raise Unsupported("as_strided window reaches outside the input's elements")


def as_strided(ctx, v, size, stride, offset=0):
    """Window of the contiguous engine value v: an alias when it is contiguous."""
    _window(ctx, v, size, stride, offset)
    attrs = {"size": list(size), "stride": list(stride), "storage_offset": offset}
    cs = _contig(size)
    if all(n <= 1 or s == c for n, s, c in zip(size, stride, cs)):
        if offset == 0 and _numel(size) == _numel(ctx.shape(v)):
            return reshape(ctx, v, size)
        return ctx.emit("as_strided_view", [v], attrs)
    return ctx.emit("as_strided", [v], attrs)


@lowering(aten.as_strided.default, aten.as_strided_copy.default)
def _as_strided(ctx, node, x, size, stride, storage_offset=None):
    _check_storage(x)
    off = 0 if storage_offset is None else _ints([storage_offset], "storage_offset")[0]
    return as_strided(ctx, ctx.value(x), _ints(size), _ints(stride, "stride"), off)


def _no_overlap(size, stride):
    dims = sorted((s, n) for n, s in zip(size, stride) if n > 1)
    extent = 1
    for s, n in dims:
        if s < extent:
            return False
        extent = s * (n - 1) + extent
    return True


@lowering(aten.as_strided_scatter.default)
def _as_strided_scatter(ctx, node, x, src, size, stride, storage_offset=None):
    _check_storage(x)
    v = ctx.value(x)
    size, stride = _ints(size), _ints(stride, "stride")
    off = 0 if storage_offset is None else _ints([storage_offset], "storage_offset")[0]
    _window(ctx, v, size, stride, off)
    if not _no_overlap(size, stride):
        raise Unsupported("as_strided_scatter with an overlapping window")
    s = ctx.cast(ctx.value(src), ctx.dtype(v))
    if ctx.shape(s) != size:
        raise Unsupported(f"as_strided_scatter: src shape {ctx.shape(s)} is not {size}")
    return ctx.emit("as_strided_scatter", [v, s], {"size": size, "stride": stride, "storage_offset": off})


@lowering(aten.unfold.default, aten.unfold_copy.default)
def _unfold(ctx, node, x, dimension, size, step):
    v = ctx.value(x)
    shape = ctx.shape(v)
    dimension, size, step = _ints([dimension, size, step])
    if step <= 0:
        raise Unsupported("unfold with a non-positive step")
    if not shape:  # a 0-d tensor unfolds to [size] with size 0 or 1
        if size not in (0, 1) or dimension not in (0, -1):
            raise Unsupported("unfold of a 0-d tensor")
        return reshape(ctx, v, [1]) if size == 1 else ctx.emit("as_strided", [v], {"size": [0], "stride": [1],
                                                                                    "storage_offset": 0})
    d = dimension % len(shape)
    if not 0 <= size <= shape[d]:
        raise Unsupported("unfold size larger than the dimension")
    cs = _contig(shape)
    osize = list(shape)
    osize[d] = (shape[d] - size) // step + 1
    ostride = list(cs)
    ostride[d] = cs[d] * step
    return as_strided(ctx, v, osize + [size], ostride + [cs[d]], 0)


@lowering(aten.im2col.default)
def _im2col(ctx, node, x, kernel_size, dilation, padding, stride):
    v = ctx.value(x)
    shape = ctx.shape(v)
    if len(shape) == 3:
        v = reshape(ctx, v, [1] + shape)
        shape = [1] + shape
    if len(shape) != 4:
        raise Unsupported("im2col needs a 3-D or 4-D input")
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = (_ints(a) for a in (kernel_size, dilation, padding, stride))
    n, c, h, w = shape
    if ph or pw:
        v = ctx.emit("pad", [v], {"pads": [pw, pw, ph, ph], "value": 0.0 if ctx.dtype(v).startswith(("float", "bfloat"))
                                  else 0})
        h, w = h + 2 * ph, w + 2 * pw
    oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (w - dw * (kw - 1) - 1) // sw + 1
    if oh <= 0 or ow <= 0 or min(kh, kw, dh, dw, sh, sw) <= 0:
        raise Unsupported("im2col: empty output or invalid parameters")
    win = as_strided(ctx, v, [n, c, kh, kw, oh, ow], [c * h * w, h * w, dh * w, dw, sh * w, sw], 0)
    out = static = [n, c * kh * kw, oh * ow]
    if len(ctx.shape(ctx.value(x))) == 3:
        out = static[1:]
    return reshape(ctx, win, out)
