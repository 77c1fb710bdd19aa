"""Lowerings that need no kernel of their own: aliases that vanish in a
functional graph, tuple access, and copies."""
import operator

from . import Unsupported, aten, lowering


@lowering(aten.alias.default, aten.detach.default, aten.lift_fresh_copy.default)
def _alias(ctx, node, x):
    return ctx.value(x)


@lowering(aten.clone.default)
def _clone(ctx, node, x, memory_format=None):
    return ctx.emit("clone", [ctx.value(x)])


@lowering(operator.getitem)
def _getitem(ctx, node, src, index):
    v = ctx.env.get(src)
    if not isinstance(v, list):
        raise Unsupported("getitem on something that is not a tuple of engine values")
    if v[index] is None:
        raise Unsupported(f"output {index} of {src.name} is not computed by the engine")
    return v[index]
