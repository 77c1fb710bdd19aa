"""Lowerings: elementwise ops (see lowering/__init__.py for the API).

Type promotion happens here: every engine binary op gets inputs of one dtype
(ctx.promote), except where PyTorch's CPU kernels use a scalar operand in
float32 with a bf16/f16 tensor (mul by a scalar, division by a scalar): there
the engine gets a 0-d float32 operand and computes in float32, rounding once,
as PyTorch does. Elsewhere (add/sub, comparisons, remainder, where) PyTorch
rounds the scalar to the tensor's dtype first, and so do we.
"""
import torch

from . import BoundSize, Unsupported, aten, engine_dtype, lowering, static_shape
from .sizes import SymSize

_FLOATS = {"float32", "float64", "bfloat16", "float16"}
_HALF = {"bfloat16", "float16"}
_INTS = {"int64", "int32", "int16", "int8", "uint8"}
_RANGES = {
    "int64": (-(2**63), 2**63 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int8": (-128, 127),
    "uint8": (0, 255),
}


def _is_scalar(a) -> bool:
    return isinstance(a, (bool, int, float)) and not isinstance(a, torch.fx.Node)


def _scalar_const(ctx, value, dtype: str) -> int:
    if dtype in _RANGES:
        if isinstance(value, float) and not value.is_integer():
            raise Unsupported(f"scalar {value} cannot be represented exactly as {dtype}")
        lo, hi = _RANGES[dtype]
        if not lo <= int(value) <= hi:
            raise Unsupported(f"scalar {value} is out of range for {dtype}")
    return ctx.const(value, dtype)


def _operand(ctx, a, dtype: str) -> int:
    """Tensor cast to dtype, or a Python scalar as a 0-d constant."""
    if isinstance(a, torch.fx.Node):
        return ctx.cast(ctx.value(a), dtype)
    if isinstance(a, (SymSize, BoundSize)):
        return ctx.size_scalar(a, dtype)
    if _is_scalar(a):
        return _scalar_const(ctx, a, dtype)
    raise Unsupported(f"unsupported operand {a!r}")


def _is_cpu_scalar(ctx, a, allow_tensor: bool) -> bool:
    if _is_scalar(a):
        return True
    if allow_tensor and isinstance(a, torch.fx.Node):
        m = a.meta.get("val")
        return isinstance(m, torch.Tensor) and m.dim() == 0 and m.dtype.is_floating_point
    return False


def _opmath_binary(ctx, op, a, b, dt, scalar_first: bool):
    """op(a, b) where PyTorch computes a bf16/f16 tensor with a scalar in float32.
    The scalar may be second (a Python number or a 0-d float tensor) or, when
    `scalar_first`, a Python number first."""
    if dt in _HALF:
        ta, tb = _tensor_meta(a), _tensor_meta(b)
        if ta is not None and ta.dtype == ctx_torch_dtype(dt) and ta.dim() > 0 and _is_cpu_scalar(ctx, b, True):
            sb = ctx.const(float(b), "float32") if _is_scalar(b) else ctx.cast(ctx.value(b), "float32")
            return ctx.emit(op, [ctx.value(a), sb])
        if scalar_first and tb is not None and tb.dtype == ctx_torch_dtype(dt) and tb.dim() > 0 and _is_scalar(a):
            return ctx.emit(op, [ctx.const(float(a), "float32"), ctx.value(b)])
    return _binary(ctx, op, a, b, dtype=dt)


def ctx_torch_dtype(name: str) -> torch.dtype:
    return {"bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def _tensor_meta(a):
    if isinstance(a, torch.fx.Node):
        v = a.meta.get("val")
        if not isinstance(v, torch.Tensor):
            raise Unsupported(f"{a.name} is not a tensor")
        return v
    return None


def _binary(ctx, op, a, b, attrs=None, dtype=None):
    dt = dtype or ctx.promote(a, b)
    return ctx.emit(op, [_operand(ctx, a, dt), _operand(ctx, b, dt)], attrs)


def _out_dtype(ctx) -> str:
    return engine_dtype(ctx.out_meta().dtype)


# ---- unary ---------------------------------------------------------------------------

def _unary(op, to_out_dtype=True):
    def fn(ctx, node, x):
        v = ctx.value(x)
        if to_out_dtype:
            v = ctx.cast(v, _out_dtype(ctx))
        return ctx.emit(op, [v])

    return fn


for _op, _targets in {
    "neg": [aten.neg.default],
    "abs": [aten.abs.default],
    "relu": [aten.relu.default],
    "silu": [aten.silu.default],
    "tanh": [aten.tanh.default],
    "sigmoid": [aten.sigmoid.default],
    "erf": [aten.erf.default],
    "exp": [aten.exp.default],
    "log": [aten.log.default],
    "log1p": [aten.log1p.default],
    "expm1": [aten.expm1.default],
    "rsqrt": [aten.rsqrt.default],
    "sqrt": [aten.sqrt.default],
    "sin": [aten.sin.default],
    "cos": [aten.cos.default],
    "reciprocal": [aten.reciprocal.default],
    "floor": [aten.floor.default],
    "ceil": [aten.ceil.default],
    "round": [aten.round.default],
    "trunc": [aten.trunc.default],
    "sign": [aten.sign.default],
    "bitwise_not": [aten.bitwise_not.default],
}.items():
    lowering(*_targets)(_unary(_op))

lowering(aten.logical_not.default)(_unary("logical_not", to_out_dtype=False))
lowering(aten.isnan.default)(_unary("isnan", to_out_dtype=False))


@lowering(aten.gelu.default)
def _gelu(ctx, node, x, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise Unsupported(f"gelu approximate={approximate!r}")
    return ctx.emit("gelu", [ctx.cast(ctx.value(x), _out_dtype(ctx))], {"approximate": approximate})


@lowering(aten.leaky_relu.default)
def _leaky_relu(ctx, node, x, negative_slope=0.01):
    if not _is_scalar(negative_slope):
        raise Unsupported("non-scalar negative_slope")
    dt = _out_dtype(ctx)
    if dt not in _FLOATS:
        raise Unsupported(f"leaky_relu on {dt}")
    return ctx.emit("leaky_relu", [ctx.cast(ctx.value(x), dt)], {"negative_slope": float(negative_slope)})


def _clamp_scalar(ctx, x, lo, hi):
    dt = _out_dtype(ctx)
    attrs = {}
    for k, v in (("min", lo), ("max", hi)):
        if v is None:
            continue
        if not _is_scalar(v):
            raise Unsupported(f"clamp bound {v!r} is not a number")
        if dt in _FLOATS:
            attrs[k] = float(v)
        else:
            if isinstance(v, float) and not v.is_integer():
                raise Unsupported(f"clamp bound {v} on {dt}")
            lo_r, hi_r = _RANGES.get(dt, (0, 1))
            if not lo_r <= int(v) <= hi_r:
                raise Unsupported(f"clamp bound {v} out of range of {dt}")
            attrs[k] = int(v)
    if dt == "bool":
        raise Unsupported("clamp on bool")
    v = ctx.cast(ctx.value(x), dt)
    if not attrs:
        raise Unsupported("clamp without bounds")
    return ctx.emit("clamp", [v], attrs)


@lowering(aten.clamp.default)
def _clamp(ctx, node, x, min=None, max=None):
    return _clamp_scalar(ctx, x, min, max)


@lowering(aten.clamp_min.default)
def _clamp_min(ctx, node, x, min):
    return _clamp_scalar(ctx, x, min, None)


@lowering(aten.clamp_max.default)
def _clamp_max(ctx, node, x, max):
    return _clamp_scalar(ctx, x, None, max)


@lowering(aten.hardtanh.default)
def _hardtanh(ctx, node, x, min_val=-1.0, max_val=1.0):
    return _clamp_scalar(ctx, x, min_val, max_val)


def _clamp_tensor(ctx, x, lo, hi):
    # torch: NaN in x or a bound gives NaN, which is what maximum/minimum do.
    dt = _out_dtype(ctx)
    if dt == "bool":
        raise Unsupported("clamp on bool")
    v = ctx.cast(ctx.value(x), dt)
    if lo is not None:
        v = ctx.emit("maximum", [v, _operand(ctx, lo, dt)])
    if hi is not None:
        v = ctx.emit("minimum", [v, _operand(ctx, hi, dt)])
    if lo is None and hi is None:
        raise Unsupported("clamp without bounds")
    return v


@lowering(aten.clamp.Tensor)
def _clamp_t(ctx, node, x, min=None, max=None):
    return _clamp_tensor(ctx, x, min, max)


@lowering(aten.clamp_min.Tensor)
def _clamp_min_t(ctx, node, x, min):
    return _clamp_tensor(ctx, x, min, None)


@lowering(aten.clamp_max.Tensor)
def _clamp_max_t(ctx, node, x, max):
    return _clamp_tensor(ctx, x, None, max)


# ---- binary arithmetic ------------------------------------------------------------------

def _alpha_attrs(alpha, dt):
    if alpha is None or alpha == 1:
        return {}
    if not _is_scalar(alpha):
        raise Unsupported(f"alpha {alpha!r}")
    if dt in _FLOATS:
        return {"alpha": float(alpha)}
    if isinstance(alpha, float) and not alpha.is_integer():
        raise Unsupported(f"alpha {alpha} for {dt}")
    if dt == "bool":
        raise Unsupported("alpha for bool")
    return {"alpha": int(alpha)}


@lowering(aten.add.Tensor, aten.add.Scalar)
def _add(ctx, node, a, b, alpha=1):
    dt = ctx.promote(a, b)
    return _binary(ctx, "add", a, b, _alpha_attrs(alpha, dt), dt)


@lowering(aten.sub.Tensor, aten.sub.Scalar)
def _sub(ctx, node, a, b, alpha=1):
    dt = ctx.promote(a, b)
    if dt == "bool":
        raise Unsupported("sub on bool")
    return _binary(ctx, "sub", a, b, _alpha_attrs(alpha, dt), dt)


@lowering(aten.rsub.Scalar, aten.rsub.Tensor)
def _rsub(ctx, node, a, b, alpha=1):
    dt = ctx.promote(a, b)
    if dt == "bool":
        raise Unsupported("rsub on bool")
    return _binary(ctx, "sub", b, a, _alpha_attrs(alpha, dt), dt)


@lowering(aten.mul.Tensor, aten.mul.Scalar)
def _mul(ctx, node, a, b):
    return _opmath_binary(ctx, "mul", a, b, ctx.promote(a, b), scalar_first=True)


def _div_mode(ctx, a, b, rounding_mode):
    if rounding_mode is None:
        dt = _out_dtype(ctx)  # true division: ints promote to float
        if dt not in _FLOATS:
            raise Unsupported(f"true division producing {dt}")
        return _opmath_binary(ctx, "div", a, b, dt, scalar_first=False)
    if rounding_mode not in ("trunc", "floor"):
        raise Unsupported(f"rounding_mode={rounding_mode!r}")
    dt = ctx.promote(a, b)
    if dt == "bool":
        raise Unsupported("div with rounding on bool")
    return _binary(ctx, "div", a, b, {"rounding_mode": rounding_mode}, dt)


@lowering(aten.div.Tensor, aten.div.Scalar, aten.true_divide.Tensor, aten.true_divide.Scalar)
def _div(ctx, node, a, b):
    return _div_mode(ctx, a, b, None)


@lowering(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_m(ctx, node, a, b, rounding_mode=None):
    return _div_mode(ctx, a, b, rounding_mode)


@lowering(aten.floor_divide.default, aten.floor_divide.Scalar)
def _floor_divide(ctx, node, a, b):
    dt = ctx.promote(a, b)
    if dt == "bool":
        raise Unsupported("floor_divide on bool")
    return _binary(ctx, "floor_divide", a, b, dtype=dt)


@lowering(aten.remainder.Tensor, aten.remainder.Scalar, aten.remainder.Scalar_Tensor)
def _remainder(ctx, node, a, b):
    dt = ctx.promote(a, b)
    if dt == "bool":
        raise Unsupported("remainder on bool")
    return _binary(ctx, "remainder", a, b, dtype=dt)


@lowering(aten.pow.Tensor_Scalar)
def _pow_ts(ctx, node, x, e):
    if not _is_scalar(e):
        raise Unsupported(f"exponent {e!r}")
    dt = _out_dtype(ctx)
    if dt == "bool":
        raise Unsupported("pow on bool")
    if dt not in _FLOATS:
        if isinstance(e, float) or e < 0:
            raise Unsupported(f"integer pow with exponent {e}")
        return ctx.emit("pow_scalar", [ctx.cast(ctx.value(x), dt)], {"exponent": int(e)})
    return ctx.emit("pow_scalar", [ctx.cast(ctx.value(x), dt)], {"exponent": float(e)})


@lowering(aten.pow.Tensor_Tensor, aten.pow.Scalar)
def _pow(ctx, node, a, b):
    dt = _out_dtype(ctx)
    if dt == "bool":
        raise Unsupported("pow on bool")
    return _binary(ctx, "pow", a, b, dtype=dt)


@lowering(aten.maximum.default)
def _maximum(ctx, node, a, b):
    return _binary(ctx, "maximum", a, b)


@lowering(aten.minimum.default)
def _minimum(ctx, node, a, b):
    return _binary(ctx, "minimum", a, b)


@lowering(aten.atan2.default)
def _atan2(ctx, node, a, b):
    dt = _out_dtype(ctx)
    if dt not in _FLOATS:
        raise Unsupported(f"atan2 producing {dt}")
    return _binary(ctx, "atan2", a, b, dtype=dt)


# ---- comparisons, logical, bitwise ------------------------------------------------------

def _compare(op):
    def fn(ctx, node, a, b):
        return _binary(ctx, op, a, b)

    return fn


for _op in ("eq", "ne", "lt", "le", "gt", "ge"):
    lowering(getattr(aten, _op).Tensor, getattr(aten, _op).Scalar)(_compare(_op))


def _logical(op):
    def fn(ctx, node, a, b):
        # nonzero tests: cast both to bool (x != 0), any input dtypes
        return ctx.emit(op, [_operand(ctx, a, "bool"), _operand(ctx, b, "bool")])

    return fn


for _op in ("logical_and", "logical_or", "logical_xor"):
    lowering(getattr(aten, _op).default)(_logical(_op))


def _bitwise(op):
    def fn(ctx, node, a, b):
        dt = ctx.promote(a, b)
        if dt in _FLOATS:
            raise Unsupported(f"{op} on {dt}")
        return _binary(ctx, op, a, b, dtype=dt)

    return fn


for _op in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    lowering(getattr(aten, _op).Tensor, getattr(aten, _op).Scalar)(_bitwise(_op))


# ---- addcmul, addcdiv, lerp: rounded as eager's CPU kernels --------------------------------
# Eager computes (aten/src/ATen/native/cpu/PointwiseOpsKernel.cpp, LerpKernel.cpp) in float32
# for bfloat16/float16 and rounds once at the end; its multiply-adds are fused:
#   addcmul(x, t1, t2, value) = fma(value * t1, t2, x)
#   addcdiv(x, t1, t2, value) = x + (value * t1) / t2
#   lerp(a, b, w) = fma(w, b - a, a) where |w| < 0.5, else fma(w - 1, b - a, b)
# PyTorch's decompositions round the same expressions differently (no FMA, value * (t1 / t2)):
# these lowerings build eager's, with the engine's "fma" (one rounding).

def _compute_dtype(dt: str) -> str:
    if dt not in _FLOATS:
        raise Unsupported(f"{dt} (floating dtypes only)")
    return "float32" if dt in _HALF else dt


def _scaled(ctx, t, value, cd: str) -> int:
    v = _operand(ctx, t, cd)
    return v if value == 1 else ctx.emit("mul", [v, ctx.const(float(value), cd)])


def _addc(combine):
    """addcmul/addcdiv: combine(ctx, x, value * t1, t2) in the compute dtype, rounded once."""
    def fn(ctx, node, x, t1, t2, value=1):
        dt = _out_dtype(ctx)
        cd = _compute_dtype(dt)
        if not _is_scalar(value):
            raise Unsupported(f"value {value!r}")
        vx, vt2 = _operand(ctx, x, cd), _operand(ctx, t2, cd)
        return ctx.cast(combine(ctx, vx, _scaled(ctx, t1, value, cd), vt2), dt)

    return fn


lowering(aten.addcmul.default)(_addc(lambda ctx, x, a, b: ctx.emit("fma", [a, b, x])))
lowering(aten.addcdiv.default)(_addc(lambda ctx, x, a, b: ctx.emit("add", [x, ctx.emit("div", [a, b])])))


@lowering(aten.lerp.Scalar, aten.lerp.Tensor)
def _lerp(ctx, node, a, b, w):
    dt = _out_dtype(ctx)
    cd = _compute_dtype(dt)
    va, vb = _operand(ctx, a, cd), _operand(ctx, b, cd)
    diff = ctx.emit("sub", [vb, va])
    if _is_scalar(w):  # the branch is known now (w - 1 rounded in the compute dtype, as eager)
        wf = float(w)
        if abs(wf) < 0.5:
            return ctx.cast(ctx.emit("fma", [ctx.const(wf, cd), diff, va]), dt)
        w1 = float(torch.tensor(wf, dtype=_TORCH_FLOAT[cd]) - 1)
        return ctx.cast(ctx.emit("fma", [ctx.const(w1, cd), diff, vb]), dt)
    vw = _operand(ctx, w, cd)
    small = ctx.emit("lt", [ctx.emit("abs", [vw]), ctx.const(0.5, cd)])
    coeff = ctx.emit("where", [small, vw, ctx.emit("sub", [vw, ctx.const(1.0, cd)])])
    base = ctx.emit("where", [small, va, vb])
    return ctx.cast(ctx.emit("fma", [coeff, diff, base]), dt)


_TORCH_FLOAT = {"float32": torch.float32, "float64": torch.float64}


# ---- where, masked_fill -------------------------------------------------------------------

def _where(ctx, cond, a, b):
    m = _tensor_meta(cond)
    if m is None or m.dtype != torch.bool:
        raise Unsupported("where: condition must be a bool tensor")
    dt = _out_dtype(ctx)
    return ctx.emit("where", [ctx.value(cond), _operand(ctx, a, dt), _operand(ctx, b, dt)])


@lowering(aten.where.self, aten.where.ScalarOther, aten.where.ScalarSelf, aten.where.Scalar)
def _where_l(ctx, node, cond, a, b):
    return _where(ctx, cond, a, b)


@lowering(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(ctx, node, x, mask, value):
    xm = _tensor_meta(x)
    if isinstance(value, torch.fx.Node):
        vm = _tensor_meta(value)
        if vm.dim() != 0:
            raise Unsupported("masked_fill value must be 0-d")
    if static_shape(xm) != static_shape(ctx.out_meta()):
        raise Unsupported("masked_fill mask broadcasts beyond the input")
    return _where(ctx, mask, value, x)


# ---- dtype conversion ----------------------------------------------------------------------

@lowering(aten._to_copy.default)
def _to_copy(ctx, node, x, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
             memory_format=None):
    xm = _tensor_meta(x)
    if layout is not None and layout != torch.strided:
        raise Unsupported(f"_to_copy to layout {layout}")
    if device is not None and torch.device(device) != xm.device:
        raise Unsupported(f"_to_copy to device {device}")
    if pin_memory:
        raise Unsupported("_to_copy with pin_memory")
    if memory_format not in (None, torch.preserve_format, torch.contiguous_format):
        raise Unsupported(f"_to_copy to {memory_format}")
    v = ctx.value(x)
    if dtype is None or engine_dtype(dtype) == ctx.dtype(v):
        return ctx.emit("clone", [v])
    return ctx.emit("convert", [v], {"dtype": engine_dtype(dtype)})

