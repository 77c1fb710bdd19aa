"""Lowerings: vision ops (see lowering/__init__.py for the API).

F.interpolate's 2-D nearest / nearest-exact / bilinear / bicubic modes on a 4-D
input of a dtype the engine's resize2d takes (float32/bfloat16/float16; the
nearest modes any engine dtype but bool) run as one "resize2d" node
(kernels/resize.cpp: torch's coordinate math, a separable pass). PyTorch would
decompose them while tracing (their .vec overloads carry Python decompositions
that run before any decomposition table is asked), so `keep_resizes_whole`
rewrites such calls in the graph Dynamo (or torch.export) hands over into the
op `airgraph::interpolate2d` first: an ordinary custom op that runs
F.interpolate itself in eager code (a fallback partition, torch's own run of
the graph) and that AOTAutograd traces as one node. Every other mode, rank and
dtype (linear, trilinear, antialiasing, float64 or uint8 bilinear) still
reaches the backend decomposed into index arithmetic on constants (arange, mul,
clamp: constant-folded) and aten._unsafe_index gathers, which run on the
engine's "index" kernel (its range check never fires for these indices) and
fuse into the arithmetic that reads them (passes/fuse_gathers.cpp).

reflection_pad / replication_pad{1,2,3}d are one "index" gather with constant
index tensors (one per padded dim, shaped to broadcast into the output);
pixel_shuffle / pixel_unshuffle are reshape -> permute -> reshape.
"""
import inspect
from typing import Optional

import torch
import torch.nn.functional as F

from . import _DTYPES, Unsupported, aten, concrete, lowering, static_shape
from .index import _index
from .shape import _int, _ints, permute, reshape


@lowering(aten._unsafe_index.Tensor)
def _unsafe_index(ctx, node, x, indices):
    return _index(ctx, node, x, indices)


# ---- resize: F.interpolate's 2-D modes, kept whole -----------------------------------------
_RESIZE_MODES = {"nearest": "nearest", "nearest-exact": "nearest_exact", "bilinear": "bilinear",
                 "bicubic": "bicubic"}
_INTERP_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@torch.library.custom_op("airgraph::interpolate2d", mutates_args=())
def interpolate2d(x: torch.Tensor, size: Optional[list[int]], scale_factor: Optional[list[float]], mode: str,
                  align_corners: Optional[bool], recompute_scale_factor: Optional[bool]) -> torch.Tensor:
    """F.interpolate of a 4-D tensor, as one op that tracing does not decompose (see the module's
    docstring); in eager code it is F.interpolate."""
    return F.interpolate(x, size=size, scale_factor=scale_factor, mode=mode, align_corners=align_corners,
                         recompute_scale_factor=recompute_scale_factor)


@interpolate2d.register_fake
def _interpolate2d_fake(x, size, scale_factor, mode, align_corners, recompute_scale_factor):
    return F.interpolate(x, size=size, scale_factor=scale_factor, mode=mode, align_corners=align_corners,
                         recompute_scale_factor=recompute_scale_factor)


def resize_is_native(mode, x) -> bool:
    """Whether resize2d runs F.interpolate(x, mode=mode) (x a tensor or FakeTensor; only its rank and
    dtype are read, so no shape guard is added)."""
    if mode not in _RESIZE_MODES or not isinstance(x, torch.Tensor) or x.dim() != 4:
        return False
    if mode.startswith("nearest"):
        return x.dtype in _DTYPES and x.dtype != torch.bool
    return x.dtype in _INTERP_DTYPES


_INTERPOLATE_ARGS = inspect.signature(F.interpolate)
_UPSAMPLE_VEC = {aten.upsample_nearest2d.vec: "nearest", aten._upsample_nearest_exact2d.vec: "nearest-exact",
                 aten.upsample_bilinear2d.vec: "bilinear", aten.upsample_bicubic2d.vec: "bicubic"}


def _pair(v):
    """A size or scale argument as a 2-list (a single value repeated), None kept; a graph node (a
    traced torch.Size) kept as it is."""
    if v is None or isinstance(v, torch.fx.Node):
        return v
    if isinstance(v, (list, tuple, torch.Size)):
        return list(v)
    return [v, v]


def _interpolate_call(node):
    """(input, size, scale_factor, mode, align_corners, recompute_scale_factor) of an F.interpolate
    call (Dynamo's graph) or an upsample .vec op (torch.export's), or None for other nodes."""
    if node.op != "call_function":
        return None
    if node.target is F.interpolate:
        try:
            a = _INTERPOLATE_ARGS.bind(*node.args, **node.kwargs)
        except TypeError:
            return None
        a.apply_defaults()
        a = a.arguments
        if a["antialias"] is not False:
            return None
        return (a["input"], a["size"], a["scale_factor"], a["mode"], a["align_corners"],
                a["recompute_scale_factor"])
    mode = _UPSAMPLE_VEC.get(node.target)
    if mode is None:
        return None
    args = list(node.args) + [None] * 4
    if mode in ("bilinear", "bicubic"):  # .vec(input, output_size, align_corners, scale_factors)
        return args[0], args[1], args[3], mode, args[2], None
    return args[0], args[1], args[2], mode, None, None  # .vec(input, output_size, scale_factors)


def keep_resizes_whole(gm: torch.fx.GraphModule) -> int:
    """Rewrites the F.interpolate calls (and upsample .vec ops) of `gm` that resize2d runs into
    airgraph::interpolate2d, in place; returns how many."""
    done = 0
    for node in gm.graph.nodes:
        call = _interpolate_call(node)
        if call is None:
            continue
        x, size, scale, mode, align, recompute = call
        val = x.meta.get("example_value", x.meta.get("val")) if isinstance(x, torch.fx.Node) else None
        size, scale = _pair(size), _pair(scale)
        if (not isinstance(mode, str) or not resize_is_native(mode, val) or not isinstance(align, (bool, type(None)))
                or not isinstance(recompute, (bool, type(None))) or (size is None) == (scale is None)
                or isinstance(scale, torch.fx.Node)):
            continue
        if isinstance(size, list) and len(size) != 2 or isinstance(scale, list) and len(scale) != 2:
            continue
        if isinstance(scale, list):
            if not all(isinstance(s, (int, float)) for s in scale):
                continue
            scale = [float(s) for s in scale]
        node.target = torch.ops.airgraph.interpolate2d.default
        node.args, node.kwargs = (x, size, scale, mode, align, recompute), {}
        done += 1
    if done:
        gm.recompile()
    return done


@lowering(torch.ops.airgraph.interpolate2d.default)
def _interpolate2d(ctx, node, x, size, scale_factor, mode, align_corners, recompute_scale_factor):
    xv = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    if not resize_is_native(mode, xv):  # (keep_resizes_whole asked the same)
        raise Unsupported(f"F.interpolate mode {mode!r} of {getattr(xv, 'dtype', None)}: resize2d takes 4-D "
                          "float32/bfloat16/float16 inputs (the nearest modes: any dtype but bool)")
    out = static_shape(node.meta["val"])
    # the kernel maps coordinates by the given scales only where ATen's would: scale_factor given
    # and not recomputed into a size
    scales = [0.0, 0.0]
    if size is None and not recompute_scale_factor:
        scales = [float(concrete(s)) for s in scale_factor]
    attrs = {"mode": _RESIZE_MODES[mode], "output_size": out[2:], "scales": scales}
    if mode in ("bilinear", "bicubic"):
        attrs["align_corners"] = bool(align_corners)
    vid = ctx.emit("resize2d", [ctx.value(x)], attrs)
    if ctx.rec is not None:
        ctx.set_sym_shape(vid, out)
    return vid


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
