"""Lowerings: matmul ops (see lowering/__init__.py for the API).

Engine ops: "matmul"(a, b[, bias]) for rank >= 2 with torch.matmul's batch
broadcasting, "linear"(x, w[, bias]) with w in PyTorch's [out, in] layout, and
"conv"(x, w[, bias]){stride, padding, dilation, groups} for 1-D/2-D/3-D, and
"conv_transpose"(x, w[, bias]){stride, padding, output_padding, dilation, groups}
with w in PyTorch's transposed layout [C, O / groups, *k].
The C++ canonicalize pass turns matmul(x, permute(w, [1, 0])[, bias]) into
linear(x, w[, bias]), so addmm(b, x, t(w)) from nn.Linear runs as linear.
"""
from . import Unsupported, aten, lowering

_FLOAT = ("float32", "bfloat16", "float16")


def _float_operands(ctx, *args):
    vids = [ctx.value(a) for a in args]
    dts = {ctx.dtype(v) for v in vids}
    if len(dts) != 1:
        raise Unsupported(f"mixed dtypes {sorted(dts)}")
    dt = dts.pop()
    if dt not in _FLOAT:
        raise Unsupported(f"dtype {dt} is not supported by the engine's matmul (float32/bfloat16/float16)")
    return vids


def _is_one(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == 1


def _is_zero(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == 0


@lowering(aten.mm.default)
def _mm(ctx, node, a, b):
    return ctx.emit("matmul", _float_operands(ctx, a, b))


@lowering(aten.bmm.default)
def _bmm(ctx, node, a, b):
    va, vb = _float_operands(ctx, a, b)
    if ctx.rank(va) != 3 or ctx.rank(vb) != 3:
        raise Unsupported("bmm takes 3-D tensors")
    return ctx.emit("matmul", [va, vb])


@lowering(aten.matmul.default)
def _matmul(ctx, node, a, b):
    va, vb = _float_operands(ctx, a, b)
    if ctx.rank(va) < 2 or ctx.rank(vb) < 2:
        raise Unsupported("matmul with a 1-D operand")
    return ctx.emit("matmul", [va, vb])


@lowering(aten.addmm.default)
def _addmm(ctx, node, bias, a, b, *, beta=1, alpha=1):
    if _is_zero(beta):  # torch ignores the bias entirely (even NaN/inf in it)
        out = ctx.emit("matmul", _float_operands(ctx, a, b))
        return out if _is_one(alpha) else ctx.emit("mul", [out, ctx.const(alpha, ctx.dtype(out))])
    va, vb, vbias = _float_operands(ctx, a, b, bias)
    if _is_one(alpha) and _is_one(beta):
        return ctx.emit("matmul", [va, vb, vbias])
    # beta * bias + alpha * (a @ b), as eager computes it for these scalars
    dt = ctx.dtype(va)
    prod = ctx.emit("matmul", [va, vb])
    if not _is_one(alpha):
        prod = ctx.emit("mul", [prod, ctx.const(alpha, dt)])
    if not _is_one(beta):
        vbias = ctx.emit("mul", [vbias, ctx.const(beta, dt)])
    return ctx.emit("add", [vbias, prod])


@lowering(aten.linear.default)
def _linear(ctx, node, x, w, b=None):
    vids = _float_operands(ctx, x, w) if b is None else _float_operands(ctx, x, w, b)
    return ctx.emit("linear", vids)


@lowering(aten._weight_int8pack_mm.default)
def _weight_int8pack_mm(ctx, node, x, w, scales):
    """torch's weight-only int8 matmul (gpt-fast, older torchao): x [M, K] @ w[N, K]^T * scales[N]. Emitted as
    matmul(x, convert(permute(w))) * scales, which canonicalize turns into linear(x, w_int8) (the
    int8 bytes read in place) when w is a constant, and which runs as written otherwise."""
    vx, vw, vs = ctx.value(x), ctx.value(w), ctx.value(scales)
    dt = ctx.dtype(vx)
    if dt not in _FLOAT or ctx.dtype(vw) != "int8" or ctx.dtype(vs) != dt or ctx.rank(vx) != 2 or ctx.rank(vw) != 2:
        raise Unsupported(f"_weight_int8pack_mm of {dt} x, {ctx.dtype(vw)} weights, {ctx.dtype(vs)} scales")
    wt = ctx.emit("convert", [ctx.emit("permute", [vw], {"dims": [1, 0]})], {"dtype": dt})
    return ctx.emit("mul", [ctx.emit("matmul", [vx, wt]), vs])


@lowering(aten.convolution.default)
def _convolution(ctx, node, x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    vids = _float_operands(ctx, x, w) if bias is None else _float_operands(ctx, x, w, bias)
    rx, rw = ctx.rank(vids[0]), ctx.rank(vids[1])
    if rx != rw or rx not in (3, 4, 5):
        raise Unsupported(f"convolution of a rank-{rx} input with a rank-{rw} weight")
    sp = rx - 2
    ints = []
    for name, v in (("stride", stride), ("padding", padding), ("dilation", dilation)):
        v = [int(e) for e in v]
        if len(v) == 1 and sp > 1:
            v = v * sp
        if len(v) != sp:
            raise Unsupported(f"{name} {v} for {sp} spatial dims")
        ints.append(v)
    if transposed:
        op = [int(e) for e in output_padding]
        if len(op) == 1 and sp > 1:
            op = op * sp
        if len(op) != sp:
            raise Unsupported(f"output_padding {op} for {sp} spatial dims")
        return ctx.emit("conv_transpose", vids, {"stride": ints[0], "padding": ints[1], "output_padding": op,
                                                 "dilation": ints[2], "groups": int(groups)})
    return ctx.emit("conv", vids, {"stride": ints[0], "padding": ints[1], "dilation": ints[2],
                                   "groups": int(groups)})
