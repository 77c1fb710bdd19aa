"""Lowerings: vision ops (see lowering/__init__.py for the API).

F.interpolate's nearest / linear / bilinear / trilinear / bicubic modes reach
the backend already decomposed by PyTorch (the .vec overloads have Python
decompositions that run while tracing) into index arithmetic on constants
(arange, mul, clamp: constant-folded) and aten._unsafe_index gathers, which run
on the engine's "index" kernel (its range check never fires for these indices).

reflection_pad / replication_pad{1,2,3}d are one "index" gather with constant
index tensors (one per padded dim, shaped to broadcast into the output);
pixel_shuffle / pixel_unshuffle are reshape -> permute -> reshape.
"""
import torch

from . import Unsupported, aten, lowering
from .index import _index
from .shape import _int, _ints, permute, reshape


@lowering(aten._unsafe_index.Tensor)
def _unsafe_index(ctx, node, x, indices):
    return _index(ctx, node, x, indices)


# ---- reflection / replication padding -------------------------------------------------
def _pad_gather(ctx, x, padding, nd, mode):
    v = ctx.value(x)
    shape = ctx.shape(v)
    pads = _ints(padding, "padding")
    if len(pads) != 2 * nd or len(shape) not in (nd + 1, nd + 2):
        raise Unsupported(f"{mode}_pad{nd}d with padding {pads} of a rank-{len(shape)} input")
    if not any(pads):
        return v
    first = len(shape) - nd
    idx = []
    for k in range(nd):
        d = first + k
        n = shape[d]
        lo, hi = pads[2 * (nd - 1 - k)], pads[2 * (nd - 1 - k) + 1]  # pads list the last dim first
        out = n + lo + hi
        if n <= 0 or out <= 0:
            raise Unsupported(f"{mode} padding {pads} of shape {shape}")
        i = torch.arange(out, dtype=torch.int64) - lo
        if mode == "reflection":
            if lo >= n or hi >= n:
                raise Unsupported(f"reflection padding {pads} not smaller than the input dims {shape}")
            i = i.abs()
            i = torch.where(i >= n, 2 * (n - 1) - i, i)
        else:
            i = i.clamp(0, n - 1)
        idx.append(ctx.const(i.reshape([out] + [1] * (nd - 1 - k)), "int64"))
    return ctx.emit("index", [v] + idx, {"dims": list(range(first, first + nd))})


def _pad_lowering(nd, mode):
    def fn(ctx, node, x, padding):
        return _pad_gather(ctx, x, padding, nd, mode)

    return fn


for _nd in (1, 2, 3):
    lowering(getattr(aten, f"reflection_pad{_nd}d").default)(_pad_lowering(_nd, "reflection"))
    lowering(getattr(aten, f"replication_pad{_nd}d").default)(_pad_lowering(_nd, "replication"))


# ---- pixel shuffle --------------------------------------------------------------------
@lowering(aten.pixel_shuffle.default)
def _pixel_shuffle(ctx, node, x, upscale_factor):
    v = ctx.value(x)
    s, f = ctx.shape(v), _int(upscale_factor, "upscale_factor")
    if len(s) < 3 or f <= 0 or s[-3] % (f * f):
        raise Unsupported(f"pixel_shuffle of {s} by {f}")
    b, (c, h, w) = s[:-3], s[-3:]
    nb = len(b)
    t = reshape(ctx, v, b + [c // (f * f), f, f, h, w])
    t = permute(ctx, t, list(range(nb)) + [nb + i for i in (0, 3, 1, 4, 2)])
    return reshape(ctx, t, b + [c // (f * f), h * f, w * f])


@lowering(aten.pixel_unshuffle.default)
def _pixel_unshuffle(ctx, node, x, downscale_factor):
    v = ctx.value(x)
    s, f = ctx.shape(v), _int(downscale_factor, "downscale_factor")
    if len(s) < 3 or f <= 0 or s[-2] % f or s[-1] % f:
        raise Unsupported(f"pixel_unshuffle of {s} by {f}")
    b, (c, h, w) = s[:-3], s[-3:]
    nb = len(b)
    t = reshape(ctx, v, b + [c, h // f, f, w // f, f])
    t = permute(ctx, t, list(range(nb)) + [nb + i for i in (0, 2, 4, 1, 3)])
    return reshape(ctx, t, b + [c * f * f, h // f, w // f])
