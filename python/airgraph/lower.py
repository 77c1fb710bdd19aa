"""From an ATen FX graph to an engine graph (`Lowered`): each FX node becomes one builder call
into the C++ core through the lowering tables (lowering/), checked against the dtype and shape
PyTorch traced (never a silent wrong result).

- `node_support(node)`: can the engine run this node? (lowers it alone into a scratch graph)
- `lower_graph(gm, consts)`: lowers every node; placeholders at `consts` become constants.
- `take_input_writes(gm)`: takes an inference graph's writes to its inputs out of it, as extra
  outputs the engine may compute in the input's own memory.
"""
from __future__ import annotations

import logging
import operator

import torch
import torch.fx

from ._core import C, EngineError
from .custom_ops import LoweringError
from .graph_types import Lowered, NodeReport, get_attr_tensor, is_tensor_meta, source_line, target_name
from .lowering import (LOWERINGS, LowerCtx, Unsupported, concrete, concrete_arg, engine_dtype, is_symbolic,
                       static_shape, torch_dtype)
from .lowering import families  # noqa: F401  (imports every family file: their table rows register)

log = logging.getLogger("airgraph")


def _check_against_meta(ctx: LowerCtx, node: torch.fx.Node, res):
    """The engine's inferred types must equal what PyTorch traced: never a silent wrong result."""
    val = node.meta.get("val")
    if isinstance(res, list):
        vals = list(val) if isinstance(val, (list, tuple)) else [val]
        pairs = [(r, v) for r, v in zip(res, vals) if r is not None and is_tensor_meta(v)]
    else:
        pairs = [(res, val)] if is_tensor_meta(val) else []
    for vid, v in pairs:
        dt, shape = ctx.value_type(vid)
        want_dt, want_shape = engine_dtype(v.dtype), static_shape(v)
        sym_shape = want_shape
        if ctx.rec is not None:  # compare at the hint; the shape is checked again at every size
            want_shape = [getattr(d, "hint", d) for d in want_shape]
        if dt != want_dt or list(shape) != want_shape:
            raise Unsupported(
                f"engine infers {dt}{list(shape)} but PyTorch traced {want_dt}{want_shape} for {node.name}"
            )
        if ctx.rec is not None:
            ctx.set_sym_shape(vid, sym_shape)


def _needs_sizes(node: torch.fx.Node) -> bool:
    """Does the node take symbolic scalars (sizes) as arguments? (computed once per node)"""
    r = node.meta.get("_airgraph_sym_args")
    if r is None:
        r = any(is_symbolic(a.meta.get("val")) for a in node.all_input_nodes) or any(
            is_symbolic(x) for x in torch.fx.node.map_aggregate((node.args, node.kwargs), lambda x: x)
            if not isinstance(x, (tuple, list, dict)))
        node.meta["_airgraph_sym_args"] = r
    return r


def lower_node(ctx: LowerCtx, node: torch.fx.Node):
    fn = LOWERINGS.get(node.target)
    if fn is None:
        raise Unsupported(f"no lowering for {target_name(node)}")
    ctx.node = node
    ctx._emitted = None
    if _needs_sizes(node):
        res = fn(ctx, node, *concrete_arg(node.args), **{k: concrete_arg(v) for k, v in node.kwargs.items()})
    else:
        res = fn(ctx, node, *node.args, **node.kwargs)
    _check_against_meta(ctx, node, res)
    return res


def _scalar_kind(val):
    """The engine dtype of a scalar graph input (a Python or symbolic bool/int/float), else None."""
    for py, sym, dt in ((bool, torch.SymBool, "bool"), (int, torch.SymInt, "int64"), (float, torch.SymFloat, "float64")):
        if isinstance(val, (py, sym)):
            return dt
    return None


def _scratch_input(ctx: LowerCtx, n: torch.fx.Node):
    val = n.meta.get("val")
    if n.op == "get_attr":
        val = get_attr_tensor(n)
    scalar = _scalar_kind(val)
    if scalar is not None:
        return ctx.g.add_input(scalar, [], n.name)
    if is_tensor_meta(val):
        return ctx.g.add_input(engine_dtype(val.dtype), static_shape(val), n.name)
    if isinstance(val, (list, tuple)) and all(is_tensor_meta(v) or v is None for v in val):
        return [
            ctx.g.add_input(engine_dtype(v.dtype), static_shape(v), f"{n.name}.{i}") if v is not None else None
            for i, v in enumerate(val)
        ]
    raise Unsupported(f"input {n.name} is not a tensor ({type(val).__name__})")


def _is_size_node(node: torch.fx.Node) -> bool:
    """A node that computes a symbolic size (sym_size, arithmetic on SymInts): no engine work; its
    value is substituted into the arguments of the nodes that use it, per size binding."""
    return node.op == "call_function" and is_symbolic(node.meta.get("val"))


def node_support(node: torch.fx.Node) -> tuple[bool, str]:
    """Can the engine run this node? Lowers it alone into a scratch graph."""
    if _is_size_node(node):
        try:
            concrete(node.meta["val"])
            return True, ""
        except Unsupported as e:
            return False, str(e)
    if node.target not in LOWERINGS:
        return False, "no lowering"
    ctx = LowerCtx(C.Graph())
    try:
        for inp in node.all_input_nodes:
            ctx.env[inp] = _scratch_input(ctx, inp)
        val = node.meta.get("val")
        if not (is_tensor_meta(val) or isinstance(val, (list, tuple))):
            raise Unsupported(f"output is {type(val).__name__}, not a tensor")
        lower_node(ctx, node)
    except Unsupported as e:
        return False, str(e)
    except LoweringError:  # a user's lowering (custom_ops.py) failed: the user must see it
        raise
    except EngineError as e:
        return False, str(e).split("\n")[0]
    except Exception as e:  # a bug in a lowering must not break the user's compile
        scalars = [a.name for a in node.all_input_nodes if _scalar_kind(a.meta.get("val")) is not None]
        if scalars:  # a lowering that needs a static value (a size, a dim) got a graph input
            return False, f"needs the value of graph input {scalars[0]} at compile time"
        log.warning("airgraph: lowering %s (%s) raised %s: %s; it runs in PyTorch", node.name, target_name(node),
                    type(e).__name__, e)
        return False, f"internal error in lowering: {type(e).__name__}: {e}"
    return True, ""


def program_value(v, dtype) -> torch.Tensor:
    """A scalar input's value as a constant of one program (a binding's key holds it): not a weight,
    so the passes may read it (a norm's eps)."""
    t = torch.tensor(v, dtype=dtype)
    t._airgraph_program_value = True
    return t


def lower_graph(gm: torch.fx.GraphModule, consts: dict[int, torch.Tensor]) -> Lowered:
    """Lowers every node of `gm` (placeholders at `consts` positions become constants)."""
    g = C.Graph()
    ctx = LowerCtx(g)
    input_positions: list[int] = []
    scalar_inputs: dict[int, torch.dtype] = {}
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, n in enumerate(phs):
        val = n.meta.get("val")
        if i in consts:
            t = consts[i].detach()
            if not t.is_contiguous():
                t = t.contiguous()
            ctx.env[n] = ctx.add_const(t, n.name, weights=not getattr(consts[i], "_airgraph_program_value", False))
        elif is_tensor_meta(val):
            ctx.env[n] = ctx.add_input(engine_dtype(val.dtype), static_shape(val), n.name)
            input_positions.append(i)
        elif (dt := _scalar_kind(val)) is not None:
            if is_symbolic(val) and concrete_arg(n) is not n:
                continue  # a size of this binding: its value is substituted where it is used
            if not n.users:
                continue  # a size or flag the trace already specialized on
            ctx.env[n] = ctx.add_input(dt, [], n.name)  # a 0-d tensor made from the argument per call
            input_positions.append(i)
            scalar_inputs[i] = torch_dtype(dt)
        else:
            raise Unsupported(f"graph input {n.name} is a {type(val).__name__}")
    out_ids: list[int] = []
    for n in gm.graph.nodes:
        if n.op == "call_function":
            if _is_size_node(n):
                continue
            try:
                ctx.env[n] = lower_node(ctx, n)
            except LoweringError:
                raise
            except EngineError as e:
                raise EngineError(f"{e}\n  while lowering FX node {n.name} ({target_name(n)})") from None
        elif n.op == "get_attr":
            t = get_attr_tensor(n)
            if not isinstance(t, torch.Tensor):
                raise Unsupported(f"FX node {n.name} reads a {type(t).__name__}, not a tensor")
            ctx.env[n] = ctx.add_const(t.detach().contiguous(), n.name)
        elif n.op == "output":
            outs = n.args[0]
            outs = outs if isinstance(outs, (list, tuple)) else [outs]
            for o in outs:
                if not isinstance(o, torch.fx.Node):
                    raise Unsupported(f"graph output {o!r} is not a tensor")
                out_ids.append(ctx.value(o))
        elif n.op != "placeholder":
            raise Unsupported(f"FX node {n.name} of kind {n.op}")
    g.set_outputs(out_ids)
    # inputs the graph writes (take_input_writes) whose new value has the input's type: the engine
    # computes it in the input's bytes where its memory plan allows
    writes = []
    for pos, k in gm.meta.get("airgraph_input_writes", ()):
        if pos in input_positions and pos not in scalar_inputs:
            j = input_positions.index(pos)
            if g.value_type(out_ids[k]) == g.value_type(ctx.env[phs[pos]]) and all(j != w[0] for w in writes):
                writes.append((j, k))  # (a second write of one input is left to the copy-back, in order)
    if writes:
        g.set_input_writes(writes)
    fx_names = {v: n.name for n, v in ctx.env.items() if isinstance(v, int) and n.op == "call_function"}
    return Lowered(g, input_positions, scalar_inputs, len(out_ids), fx_names)


def take_input_writes(gm: torch.fx.GraphModule) -> list[tuple[int, int]]:
    """Takes the graph's writes to its inputs out of it: AOTAutograd keeps an inference graph's input
    mutations inside it (keep_inference_input_mutations: `copy_(input, new value)` at the end, a
    static KV cache's update). Each new value becomes an extra graph output and the write is
    returned as (argument position, output index): the graph stays functional for lowering,
    partitioning and eager runs, and the engine computes such an output in the input's own bytes
    where the plan allows (C++ Graph::input_writes; `_writing_inputs` copies the rest back)."""
    phs = {n: i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")}
    copies = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is torch.ops.aten.copy_.default
              and n.args[0] in phs and len(n.args) == 2 and not n.kwargs]
    if not copies:
        return []
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    taken = []
    for c in copies:
        dst, src = c.args
        if not isinstance(src, torch.fx.Node):
            continue
        dv, sv = dst.meta.get("val"), src.meta.get("val")
        if c.users and not (is_tensor_meta(dv) and is_tensor_meta(sv) and dv.dtype == sv.dtype
                            and dv.shape == sv.shape):
            continue  # its result is read and is not src's value as it stands: it stays (and falls back)
        c.replace_all_uses_with(src)  # after the copy the input holds src's value
        gm.graph.erase_node(c)
        taken.append((phs[dst], src))
    if not taken:
        return []
    outs = list(out_node.args[0]) if isinstance(out_node.args[0], (list, tuple)) else [out_node.args[0]]
    writes = [(pos, len(outs) + i) for i, (pos, _) in enumerate(taken)]
    out_node.args = (tuple(outs + [src for _, src in taken]),)
    gm.meta["airgraph_input_writes"] = writes
    gm.recompile()
    return writes


# The size arithmetic a size output may be computed with (size_program): FX targets by the names a
# program records, and what each does on the call's numbers.
_SIZE_OPS = {
    "add": (operator.add, 2), "sub": (operator.sub, 2), "mul": (operator.mul, 2), "floordiv": (operator.floordiv, 2),
    "mod": (operator.mod, 2), "neg": (operator.neg, 1), "sym_max": (max, 2), "sym_min": (min, 2),
    "sym_size": (lambda t, d: t.size(d), 2), "sym_stride": (lambda t, d: t.stride(d), 2),
    "sym_numel": (lambda t: t.numel(), 1), "sym_storage_offset": (lambda t: t.storage_offset(), 1),
}
_SIZE_TARGETS = {
    operator.add: "add", operator.sub: "sub", operator.mul: "mul", operator.floordiv: "floordiv",
    operator.mod: "mod", operator.neg: "neg", torch.sym_max: "sym_max", torch.sym_min: "sym_min",
    torch.ops.aten.sym_size.int: "sym_size", torch.ops.aten.sym_stride.int: "sym_stride",
    torch.ops.aten.sym_numel.default: "sym_numel", torch.ops.aten.sym_storage_offset.default: "sym_storage_offset",
}


def size_program(out: torch.fx.Node, phs: dict) -> list | None:
    """The steps that compute the integer size output `out` from the graph's arguments, or None where
    one of them is not plain size arithmetic (size_value runs them). A step is [op name, operands];
    an operand is ["a", argument position], ["s", an earlier step] or a Python int."""
    steps: list = []
    done: dict = {}

    def operand(a):
        if isinstance(a, torch.fx.Node):
            if a in phs:
                return ["a", phs[a]]
            k = visit(a)
            return None if k is None else ["s", k]
        return a if type(a) is int else None  # (a float or a flag: not size arithmetic)

    def visit(n):
        if n in done:
            return done[n]
        name = _SIZE_TARGETS.get(n.target) if n.op == "call_function" and not n.kwargs else None
        if name is None or len(n.args) != _SIZE_OPS[name][1]:
            return None
        ops = [operand(a) for a in n.args]
        if any(o is None for o in ops):
            return None
        steps.append([name, ops])
        done[n] = len(steps) - 1
        return done[n]

    if not isinstance(out.meta.get("val"), (torch.SymInt, int)) or visit(out) is None:
        return None
    return steps


def size_value(steps: list, args) -> int:
    """The value of a size_program for the call's arguments."""
    vals: list = []
    for name, ops in steps:
        xs = [o if not isinstance(o, list) else args[o[1]] if o[0] == "a" else vals[o[1]] for o in ops]
        vals.append(_SIZE_OPS[name][0](*xs))
    return vals[-1]


def take_passthrough_outputs(gm: torch.fx.GraphModule) -> list[tuple[int, int | list]]:
    """Takes out of the graph's outputs the numbers it returns (the engine holds tensors only, so such
    an output would put the whole graph in PyTorch's hands): inputs returned as they came (a size: a
    static-cache prefill returns one), and integer sizes computed from the arguments' sizes and
    numbers (a sliding-window cache layer's `cumulative_length += seq_len`: `s0 + s1`). Returns
    (output index, argument position or size_program) pairs, kept in gm.meta["airgraph_passthrough"];
    the caller puts the values back (compiler.with_passthrough). The input writes' output indices
    (gm.meta["airgraph_input_writes"]) are renumbered to match."""
    phs = {n: i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")}
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    if not isinstance(out_node.args[0], (list, tuple)):
        return []
    outs = list(out_node.args[0])
    taken = []
    for k, o in enumerate(outs):
        if not isinstance(o, torch.fx.Node) or is_tensor_meta(o.meta.get("val")) or o.meta.get("val") is None:
            continue
        if o in phs:
            taken.append((k, phs[o]))
        elif (steps := size_program(o, phs)) is not None:
            taken.append((k, steps))
    if not taken:
        return []
    gone = {k for k, _ in taken}
    out_node.args = (tuple(o for k, o in enumerate(outs) if k not in gone),)
    writes = gm.meta.get("airgraph_input_writes")
    if writes:
        gm.meta["airgraph_input_writes"] = [(p, k - sum(1 for g in gone if g < k)) for p, k in writes]
    gm.meta["airgraph_passthrough"] = taken
    gm.recompile()
    return taken


def check_support(gm: torch.fx.GraphModule) -> tuple[list[NodeReport], set[torch.fx.Node]]:
    """Every call node's report (runs on the engine, or why not) and the set of nodes the engine
    takes. (A graph with symbolic sizes is decided at its traced sizes: the caller binds them.)"""
    reports, supported = [], set()
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        ok, why = node_support(n)
        reports.append(NodeReport(n.name, target_name(n), ok, why, source_line(n)))
        if ok:
            supported.add(n)
    return reports, supported
