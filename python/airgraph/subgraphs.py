"""Repeated blocks traced once: `invoke_subgraph` calls inlined before lowering.

Dynamo's hierarchical compilation (`torch.compiler.nested_compile_region`) traces a marked block
(a transformer layer) once and calls it N times through the `invoke_subgraph` higher-order op:

    repeated_subgraph0 = self.repeated_subgraph0
    invoke_subgraph = torch.ops.higher_order.invoke_subgraph(repeated_subgraph0, 'subgraph_0', x, w0, ...)
    getitem = invoke_subgraph[0]

Dynamo and AOTAutograd then trace the block once instead of N times (a 12-layer RoBERTa's first
call: AOTAutograd 1.03 -> 0.43 s, Dynamo 1.73 -> 1.35 s). The engine has no call op: each call is
replaced here by a copy of its subgraph's nodes (placeholders mapped to the call's operands, the
output tuple to the call's getitem users; nested calls inlined the same way), so that the graph the
lowering sees is the one the unmarked model gives, and a node the engine cannot run inside a block
falls back alone, as it would without the marking.
"""
from __future__ import annotations

import logging
import operator

import torch
import torch.fx
from torch.utils import _pytree as pytree

log = logging.getLogger("airgraph")

_HOP = getattr(torch.ops.higher_order, "invoke_subgraph", None)


def is_subgraph_call(n: torch.fx.Node) -> bool:
    return _HOP is not None and n.op == "call_function" and n.target is _HOP


def has_subgraph_calls(gm: torch.fx.GraphModule) -> bool:
    return _HOP is not None and any(is_subgraph_call(n) for n in gm.graph.nodes)


def _attr(gm: torch.nn.Module, target: str):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _same_meta(a, b) -> bool:
    """Whether an operand's traced value `a` is the one the subgraph was traced with (`b`): then the
    subgraph's own metadata holds for this call as it stands."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.dtype == b.dtype and a.device == b.device and \
            [str(d) for d in a.shape] == [str(d) for d in b.shape] and \
            [str(s) for s in a.stride()] == [str(s) for s in b.stride()]
    if isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)) and \
            isinstance(b, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)):
        return type(a) is type(b) and str(a) == str(b)
    return a is None and b is None


def _is_tensor(a) -> bool:
    v = a.meta.get("val", a.meta.get("example_value")) if isinstance(a, torch.fx.Node) else a
    return isinstance(v, torch.Tensor)


def _fresh_name(gm: torch.nn.Module, base: str) -> str:
    base = base.replace(".", "_")
    name, k = base, 0
    while hasattr(gm, name):
        k += 1
        name = f"{base}_{k}"
    return name


def _inline_call(gm: torch.fx.GraphModule, call: torch.fx.Node) -> str | None:
    """Replaces one invoke_subgraph node by its subgraph's nodes; None when done, else why not."""
    sub_node, operands = call.args[0], call.args[2:]
    if call.kwargs or not isinstance(sub_node, torch.fx.Node) or sub_node.op != "get_attr":
        return "its subgraph is not an attribute of the graph"
    sub = _attr(gm, sub_node.target)
    if not isinstance(sub, torch.fx.GraphModule):
        return f"its subgraph is a {type(sub).__name__}"
    users = list(call.users)
    if not all(u.op == "call_function" and u.target is operator.getitem and isinstance(u.args[1], int)
               and not u.kwargs for u in users):
        return "its result is used other than by indexing"
    phs = [n for n in sub.graph.nodes if n.op == "placeholder"]
    if len(phs) != len(operands):
        return f"{len(operands)} operands for {len(phs)} placeholders"
    # the subgraph's metadata ("val") is its first caller's: another call whose operands differ
    # (other symbolic sizes) gets its nodes' values computed again from its own operands
    same = all(_same_meta(a.meta.get("val") if isinstance(a, torch.fx.Node) else a, p.meta.get("val"))
               for a, p in zip(operands, phs))
    env: dict[torch.fx.Node, object] = dict(zip(phs, operands))
    outs = None
    new_nodes = []
    with gm.graph.inserting_before(call):
        for n in sub.graph.nodes:
            if n.op == "placeholder":
                continue
            if n.op == "output":
                outs = torch.fx.node.map_arg(n.args[0], lambda a: env[a])
                continue
            if n.op == "get_attr":
                value = _attr(sub, n.target)
                name = _fresh_name(gm, f"_inlined_{n.target}")
                if isinstance(value, torch.nn.Module):
                    gm.add_submodule(name, value)
                else:
                    setattr(gm, name, value)
                new = gm.graph.get_attr(name)
                new.meta = dict(n.meta)
            elif n.op == "call_method" and n.target == "item" and len(n.args) == 1 and not _is_tensor(env[n.args[0]]):
                # (a Dynamo graph: Dynamo's later calls of a block pass a Python float's value where its
                # first call passed the 0-d tensor the block reads with .item())
                env[n] = env[n.args[0]]
                continue
            else:
                new = gm.graph.node_copy(n, lambda a: env[a])
            env[n] = new
            new_nodes.append(new)
    if not same:
        why = _propagate(new_nodes)
        if why is not None:
            for n in reversed(new_nodes):
                gm.graph.erase_node(n)
            return why
    outs = outs if isinstance(outs, (list, tuple)) else (outs,)
    for u in users:
        value = outs[u.args[1]]
        if isinstance(value, torch.fx.Node):
            u.replace_all_uses_with(value)
        else:  # (a constant output: put where the getitem was read)
            for r in list(u.users):
                r.args = pytree.tree_map(lambda a: value if a is u else a, r.args)
                r.kwargs = pytree.tree_map(lambda a: value if a is u else a, r.kwargs)
        gm.graph.erase_node(u)
    gm.graph.erase_node(call)
    if not sub_node.users:
        gm.graph.erase_node(sub_node)
    return None


def _propagate(nodes: list[torch.fx.Node]) -> str | None:
    """Computes the copied nodes' "val" from their arguments' (with the fake mode of the values)."""
    from torch._guards import detect_fake_mode

    vals = [a.meta.get("val") for n in nodes for a in n.all_input_nodes]
    mode = detect_fake_mode([v for v in vals if isinstance(v, torch.Tensor)])
    if mode is None:
        return "no fake mode to recompute the subgraph's shapes with"
    try:
        with mode:
            for n in nodes:
                if n.op == "get_attr":
                    v = n.meta.get("val")
                    if v is None:
                        t = _attr(n.graph.owning_module, n.target)
                        if isinstance(t, torch.Tensor):
                            n.meta["val"] = mode.from_tensor(t, static_shapes=True)
                    continue
                args, kwargs = torch.fx.node.map_arg((n.args, n.kwargs), lambda a: a.meta["val"])
                n.meta["val"] = n.target(*args, **kwargs)
    except Exception as e:  # (an op the fake mode cannot run: the call stays, and falls back)
        return f"its shapes could not be recomputed for these operands ({type(e).__name__}: {e})"
    return None


def inline_subgraphs(gm: torch.fx.GraphModule) -> int:
    """Inlines every invoke_subgraph call of `gm` (nested ones too), in place; returns how many calls
    were inlined. A call that cannot be (logged at INFO) stays, and runs in PyTorch."""
    if _HOP is None:
        return 0
    done, failed = 0, set()
    while True:
        calls = [n for n in gm.graph.nodes if is_subgraph_call(n) and n not in failed]
        if not calls:
            break
        for call in calls:
            why = _inline_call(gm, call)
            if why is None:
                done += 1
            else:
                failed.add(call)
                log.info("airgraph: %s (invoke_subgraph %s) is not inlined: %s", call.name,
                         call.args[1] if len(call.args) > 1 else "?", why)
    if done:
        gm.delete_all_unused_submodules()
        gm.graph.lint()
        gm.recompile()
        log.debug("airgraph: %d invoke_subgraph call(s) inlined", done)
    return done
