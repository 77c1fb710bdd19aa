"""Lowerings: elementwise math (trigonometric, hyperbolic, special functions,
predicates) and activations that reach the ATen graph as one op. The engine ops
are the lists in csrc/kernels/elementwise_ops.h; type promotion happens here as
in elementwise.py (every engine op gets one dtype)."""
import math

import torch

from . import Unsupported, aten, lowering
from .elementwise import _FLOATS, _HALF, _INTS, _binary, _is_scalar, _out_dtype, _RANGES, _unary

# ---- unary, floating result (ints promote to the default float dtype) -------------------
for _op, _targets in {
    "acos": [aten.acos.default],
    "asin": [aten.asin.default],
    "atan": [aten.atan.default],
    "acosh": [aten.acosh.default],
    "asinh": [aten.asinh.default],
    "atanh": [aten.atanh.default],
    "sinh": [aten.sinh.default],
    "cosh": [aten.cosh.default],
    "tan": [aten.tan.default],
    "log2": [aten.log2.default],
    "log10": [aten.log10.default],
    "exp2": [aten.exp2.default],
    "erfc": [aten.erfc.default, aten.special_erfc.default],
    "erfinv": [aten.erfinv.default, aten.special_erfinv.default],
    "lgamma": [aten.lgamma.default, aten.special_gammaln.default],
    "digamma": [aten.digamma.default, aten.special_psi.default, aten.special_digamma.default],
    "sinc": [aten.sinc.default, aten.special_sinc.default],
    "frac": [aten.frac.default],
    "entr": [aten.special_entr.default],
    "erfcx": [aten.special_erfcx.default],
    "log_ndtr": [aten.special_log_ndtr.default],
    "ndtri": [aten.special_ndtri.default],
    "i0": [aten.i0.default, aten.special_i0.default, aten.special_modified_bessel_i0.default],
    "i0e": [aten.special_i0e.default],
    "i1": [aten.special_i1.default, aten.special_modified_bessel_i1.default],
    "i1e": [aten.special_i1e.default],
}.items():
    def _float_unary(ctx, node, x, _op=_op):
        if _out_dtype(ctx) not in _FLOATS:
            raise Unsupported(f"{_op} producing {_out_dtype(ctx)}")
        return _unary(_op)(ctx, node, x)

    lowering(*_targets)(_float_unary)

# predicates: any input dtype, bool result
for _op in ("isinf", "isposinf", "isneginf", "signbit"):
    lowering(getattr(aten, _op).default)(_unary(_op, to_out_dtype=False))


@lowering(aten.sgn.default)
def _sgn(ctx, node, x):
    if _out_dtype(ctx) == "bool":
        raise Unsupported("sgn on bool")
    return _unary("sign")(ctx, node, x)


def _scaled(ctx, x, k):
    """x * k for a Python float k, like PyTorch's mul by a wrapped double scalar
    (bf16/f16 computed in float32 with k rounded to float32, rounded once)."""
    dt = _out_dtype(ctx)
    if dt not in _FLOATS:
        raise Unsupported(f"scaling producing {dt}")
    c = ctx.const(k, "float32" if dt in _HALF else dt)
    return ctx.emit("mul", [ctx.cast(ctx.value(x), dt), c])


@lowering(aten.deg2rad.default)
def _deg2rad(ctx, node, x):
    return _scaled(ctx, x, math.pi / 180.0)


@lowering(aten.rad2deg.default)
def _rad2deg(ctx, node, x):
    return _scaled(ctx, x, 180.0 / math.pi)


def _float_input(ctx, x, what):
    dt = _out_dtype(ctx)
    if dt not in _FLOATS:
        raise Unsupported(f"{what} producing {dt}")
    return ctx.cast(ctx.value(x), dt), dt


@lowering(aten.logit.default, aten.special_logit.default)
def _logit(ctx, node, x, eps=None):
    # clamped to [eps, 1 - eps], both in the tensor's dtype (PyTorch's kernel rounds them); eps < 0: no clamp
    v, dt = _float_input(ctx, x, "logit")
    if eps is None or float(eps) < 0:
        return ctx.emit("logit", [v], {"lo": -1.0, "hi": -1.0})
    tdt = ctx.out_meta().dtype
    lo = torch.tensor(float(eps), dtype=tdt)
    hi = torch.tensor(1.0, dtype=tdt) - lo
    return ctx.emit("logit", [v], {"lo": float(lo), "hi": float(hi)})


@lowering(aten.nan_to_num.default)
def _nan_to_num(ctx, node, x, nan=None, posinf=None, neginf=None):
    dt = _out_dtype(ctx)
    if dt not in _FLOATS:  # integers and bools have nothing to replace
        return ctx.emit("clone", [ctx.value(x)])
    fi = torch.finfo(ctx.out_meta().dtype)
    attrs = {"nan": 0.0 if nan is None else float(nan), "posinf": fi.max if posinf is None else float(posinf),
             "neginf": fi.min if neginf is None else float(neginf)}
    return ctx.emit("nan_to_num", [ctx.value(x)], attrs)


@lowering(aten.polygamma.default, aten.special_polygamma.default)
def _polygamma(ctx, node, n, x):
    if not isinstance(n, int) or n < 0 or n > 1000:
        raise Unsupported(f"polygamma order {n!r}")
    v, _ = _float_input(ctx, x, "polygamma")
    return ctx.emit("polygamma", [v], {"n": n})


@lowering(aten.celu.default)
def _celu(ctx, node, x, alpha=1.0):
    if not _is_scalar(alpha) or float(alpha) == 0.0:
        raise Unsupported(f"celu alpha={alpha!r}")
    v, _ = _float_input(ctx, x, "celu")
    return ctx.emit("elu", [v], {"alpha": float(alpha), "scale": 1.0, "input_scale": 1.0 / float(alpha)})


# ---- unary with numeric attributes, floating result: one row per op (engine op, ATen targets, the
# ATen op's numeric arguments after x with their defaults, which the engine op takes as attributes of
# the same names); a C++ row of AG_EW_UNARY_PARAM_OPS computes it.
for _op, _targets, _params in [
    ("elu", [aten.elu.default], {"alpha": 1.0, "scale": 1.0, "input_scale": 1.0}),
    ("hardshrink", [aten.hardshrink.default], {"lambd": 0.5}),
]:
    def _float_param_unary(ctx, node, x, *args, _op=_op, _params=_params, **kwargs):
        vals = dict(_params)
        vals.update(zip(_params, args))
        vals.update(kwargs)
        if not all(_is_scalar(v) for v in vals.values()):
            raise Unsupported(f"{_op} with non-number arguments")
        v, _ = _float_input(ctx, x, _op)
        return ctx.emit(_op, [v], {k: float(val) for k, val in vals.items()})

    lowering(*_targets)(_float_param_unary)


@lowering(aten.threshold.default)
def _threshold(ctx, node, x, threshold, value):
    dt = _out_dtype(ctx)
    if not (_is_scalar(threshold) and _is_scalar(value)):
        raise Unsupported("threshold with non-number bounds")
    if dt in _FLOATS:
        attrs = {"threshold": float(threshold), "value": float(value)}
    elif dt in _INTS:
        lo, hi = _RANGES[dt]
        for v in (threshold, value):
            if isinstance(v, float) and not v.is_integer() or not lo <= int(v) <= hi:
                raise Unsupported(f"threshold {v} on {dt}")
        attrs = {"threshold": int(threshold), "value": int(value)}
    else:
        raise Unsupported(f"threshold on {dt}")
    return ctx.emit("threshold", [ctx.cast(ctx.value(x), dt)], attrs)


@lowering(aten.log_sigmoid_forward.default)
def _log_sigmoid_forward(ctx, node, x):
    # (output, buffer); the buffer (exp(-|x|)) only feeds the backward: a getitem of it falls back
    dt = ctx.out_dtype(0)
    if dt not in _FLOATS:
        raise Unsupported(f"log_sigmoid producing {dt}")
    return [ctx.emit("log_sigmoid", [ctx.cast(ctx.value(x), dt)]), None]


@lowering(aten._prelu_kernel.default)
def _prelu(ctx, node, x, weight):
    dt = _out_dtype(ctx)
    if dt not in _FLOATS:
        raise Unsupported(f"prelu on {dt}")
    return _binary(ctx, "prelu", x, weight, dtype=dt)


# ---- binary -------------------------------------------------------------------------------

def _float_binary(op, dtypes=_FLOATS):
    def fn(ctx, node, a, b):
        dt = _out_dtype(ctx)
        if dt not in dtypes:
            raise Unsupported(f"{op} producing {dt}")
        return _binary(ctx, op, a, b, dtype=dt)

    return fn


lowering(aten.hypot.default)(_float_binary("hypot"))
lowering(aten.copysign.Tensor, aten.copysign.Scalar)(_float_binary("copysign"))
lowering(aten.logaddexp.default)(_float_binary("logaddexp"))
lowering(aten.logaddexp2.default)(_float_binary("logaddexp2"))
lowering(aten.nextafter.default)(_float_binary("nextafter", {"float32", "float64"}))
lowering(aten.xlogy.Tensor, aten.xlogy.Scalar_Self, aten.xlogy.Scalar_Other, aten.special_xlogy.default,
         aten.special_xlogy.self_scalar, aten.special_xlogy.other_scalar)(_float_binary("xlogy"))
lowering(aten.special_zeta.default, aten.special_zeta.self_scalar,
         aten.special_zeta.other_scalar)(_float_binary("zeta"))
lowering(aten.special_xlog1py.default, aten.special_xlog1py.self_scalar,
         aten.special_xlog1py.other_scalar)(_float_binary("xlog1py"))


def _promoted_binary(op, kinds):
    """op on the promoted dtype, which must be one of `kinds` ("float", "int", "bool")."""
    def fn(ctx, node, a, b):
        dt = _out_dtype(ctx)
        kind = "float" if dt in _FLOATS else "int" if dt in _INTS else "bool"
        if kind not in kinds:
            raise Unsupported(f"{op} on {dt}")
        return _binary(ctx, op, a, b, dtype=dt)

    return fn


lowering(aten.fmod.Tensor, aten.fmod.Scalar)(_promoted_binary("fmod", ("float", "int")))
lowering(aten.fmax.default)(_promoted_binary("fmax", ("float", "int")))
lowering(aten.fmin.default)(_promoted_binary("fmin", ("float", "int")))
lowering(aten.heaviside.default)(_promoted_binary("heaviside", ("float", "int", "bool")))
lowering(aten.gcd.default)(_promoted_binary("gcd", ("int",)))
lowering(aten.lcm.default)(_promoted_binary("lcm", ("int",)))
lowering(aten.bitwise_left_shift.Tensor, aten.bitwise_left_shift.Tensor_Scalar,
         aten.bitwise_left_shift.Scalar_Tensor, aten.__lshift__.Tensor,
         aten.__lshift__.Scalar)(_promoted_binary("bitwise_left_shift", ("int",)))
lowering(aten.bitwise_right_shift.Tensor, aten.bitwise_right_shift.Tensor_Scalar,
         aten.bitwise_right_shift.Scalar_Tensor, aten.__rshift__.Tensor,
         aten.__rshift__.Scalar)(_promoted_binary("bitwise_right_shift", ("int",)))


@lowering(aten.ldexp.Tensor)
def _ldexp(ctx, node, x, other):
    # PyTorch: x * 2 ** other, in the result dtype
    dt = _out_dtype(ctx)
    if dt not in _FLOATS:
        raise Unsupported(f"ldexp producing {dt}")
    p = ctx.emit("pow", [ctx.const(2.0, dt), ctx.cast(ctx.value(other), dt)])
    return ctx.emit("mul", [ctx.cast(ctx.value(x), dt), p])
