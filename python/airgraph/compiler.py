"""From an ATen FX graph to a callable that runs on the C++ engine.

1. Every call_function node is checked on its own: can it be lowered, and does
   the engine infer the dtype and shape PyTorch traced? (`node_support`)
2. If all are supported the whole graph becomes one engine graph. Otherwise the
   supported nodes are grouped into maximal regions (torch.fx's
   CapabilityBasedPartitioner); each region runs on the engine and the rest of
   the graph stays in PyTorch.
3. Each engine graph is optimized by the C++ pass pipeline and compiled into an
   executable; parameters are bound once as constants (zero-copy DLPack).
"""
from __future__ import annotations

import collections
import itertools
import logging
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupport

from ._core import C, EngineError
from .config import CompilerConfig
from .debug import dump as _dump
from .lowering import (LOWERINGS, LowerCtx, Unsupported, engine_dtype, load_all, source_line, static_shape,
                       torch_dtype)

log = logging.getLogger("airgraph")
load_all()
_GRAPH_IDS = itertools.count()


@dataclass
class NodeReport:
    name: str
    target: str
    native: bool
    reason: str = ""
    source: str = ""


@dataclass
class CompileReport:
    """What happened to each node of one compiled graph (airgraph.explain reads it)."""

    nodes: list[NodeReport] = field(default_factory=list)
    engine_graphs: int = 0
    compile_ms: float = 0.0
    pass_stats: list = field(default_factory=list)
    exec_stats: list = field(default_factory=list)
    graphs: list = field(default_factory=list)  # the EngineGraph objects (debug tools read them)


def target_name(node: torch.fx.Node) -> str:
    t = node.target
    if isinstance(t, torch._ops.OpOverload):
        return str(t)
    return getattr(t, "__name__", str(t))


def _is_tensor_meta(v) -> bool:
    return isinstance(v, torch.Tensor)


def _check_against_meta(ctx: LowerCtx, node: torch.fx.Node, res):
    """The engine's inferred types must equal what PyTorch traced: never a silent wrong result."""
    val = node.meta.get("val")
    if isinstance(res, list):
        vals = list(val) if isinstance(val, (list, tuple)) else [val]
        pairs = [(r, v) for r, v in zip(res, vals) if r is not None and _is_tensor_meta(v)]
    else:
        pairs = [(res, val)] if _is_tensor_meta(val) else []
    for vid, v in pairs:
        dt, shape = ctx.g.value_type(vid)
        want_dt, want_shape = engine_dtype(v.dtype), static_shape(v)
        if dt != want_dt or list(shape) != want_shape:
            raise Unsupported(
                f"engine infers {dt}{list(shape)} but PyTorch traced {want_dt}{want_shape} for {node.name}"
            )


def lower_node(ctx: LowerCtx, node: torch.fx.Node):
    fn = LOWERINGS.get(node.target)
    if fn is None:
        raise Unsupported(f"no lowering for {target_name(node)}")
    ctx.node = node
    ctx._emitted = None
    res = fn(ctx, node, *node.args, **node.kwargs)
    _check_against_meta(ctx, node, res)
    return res


def _scratch_input(ctx: LowerCtx, n: torch.fx.Node):
    val = n.meta.get("val")
    if _is_tensor_meta(val):
        return ctx.g.add_input(engine_dtype(val.dtype), static_shape(val), n.name)
    if isinstance(val, (list, tuple)) and all(_is_tensor_meta(v) or v is None for v in val):
        return [
            ctx.g.add_input(engine_dtype(v.dtype), static_shape(v), f"{n.name}.{i}") if v is not None else None
            for i, v in enumerate(val)
        ]
    raise Unsupported(f"input {n.name} is not a tensor ({type(val).__name__})")


def node_support(node: torch.fx.Node) -> tuple[bool, str]:
    """Can the engine run this node? Lowers it alone into a scratch graph."""
    if node.target not in LOWERINGS:
        return False, "no lowering"
    ctx = LowerCtx(C.Graph())
    try:
        for inp in node.all_input_nodes:
            ctx.env[inp] = _scratch_input(ctx, inp)
        val = node.meta.get("val")
        if not (_is_tensor_meta(val) or isinstance(val, (list, tuple))):
            raise Unsupported(f"output is {type(val).__name__}, not a tensor")
        lower_node(ctx, node)
    except Unsupported as e:
        return False, str(e)
    except EngineError as e:
        return False, str(e).split("\n")[0]
    except Exception as e:  # a bug in a lowering must not break the user's compile
        log.warning("airgraph: lowering %s (%s) raised %s: %s; it runs in PyTorch", node.name, target_name(node),
                    type(e).__name__, e)
        return False, f"internal error in lowering: {type(e).__name__}: {e}"
    return True, ""


class EngineGraph:
    """One engine executable plus how to feed it from the FX graph's arguments."""

    def __init__(self, gm: torch.fx.GraphModule, consts: dict[int, torch.Tensor], config: CompilerConfig,
                 report: CompileReport):
        t0 = time.perf_counter()
        self.gid = next(_GRAPH_IDS)
        self.gm = gm
        self.config = config
        g = C.Graph()
        ctx = LowerCtx(g)
        self.input_positions: list[int] = []
        phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
        for i, n in enumerate(phs):
            val = n.meta.get("val")
            if i in consts:
                t = consts[i].detach()
                if not t.is_contiguous():
                    t = t.contiguous()
                ctx.env[n] = g.add_const(t, n.name)
            elif _is_tensor_meta(val):
                ctx.env[n] = g.add_input(engine_dtype(val.dtype), static_shape(val), n.name)
                self.input_positions.append(i)
            else:
                raise Unsupported(f"graph input {n.name} is not a tensor")
        out_ids: list[int] = []
        for n in gm.graph.nodes:
            if n.op == "call_function":
                try:
                    ctx.env[n] = lower_node(ctx, n)
                except EngineError as e:
                    raise EngineError(f"{e}\n  while lowering FX node {n.name} ({target_name(n)})") from None
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
        self.num_outputs = len(out_ids)
        # engine value id -> the FX node whose result it is (for data dumps and compare)
        self.fx_names = {v: n.name for n, v in ctx.env.items() if isinstance(v, int) and n.op == "call_function"}
        self.dumper = None
        after_pass = None
        if config.dump_graph:
            self.dumper = _dump.GraphDumper(os.path.join(config.dump_dir, f"graph_{self.gid}"), g)
            self.dumper.write_fx(gm)
            self.dumper.stage_dump("lowered", g.describe())
            after_pass = self.dumper.stage_dump
        stats = g.optimize(set(config.disable_passes), config.fold_max_bytes, after_pass)
        self.dump_entries: list[dict] = []
        if config.dump_data:
            self._expose_for_dump(g)
        self.graph_text = str(g)
        self.exe = g.compile(config.allow_inplace, config.fault_node)
        self.exe.set_profiling(config.profile)
        self._plan_call()
        self.profiles = collections.deque(maxlen=1000)  # (starts ns, durations ns) per call
        self.threads = config.num_threads
        self.calls = 0
        self.first_args: list | None = None
        self.dumped: list[tuple[dict, torch.Tensor]] = []
        report.engine_graphs += 1
        report.graphs.append(self)
        report.pass_stats.append(stats)
        report.exec_stats.append(self.exe.stats())
        report.compile_ms += (time.perf_counter() - t0) * 1000
        log.debug("airgraph: graph_%d compiled: %s; passes %s", self.gid, self.exe.stats(), stats)

    def _expose_for_dump(self, g):
        desc = g.describe()
        # A dumped value is attributed to an FX node only when it is provably that node's
        # result: the value the lowering produced, or the single result of a fused node
        # (the value of the last op it absorbed). Values that passes rebuilt under an
        # old name (a reshape moved behind a fused GEMM, say) are dumped unattributed.
        fx_meta = {n.name: n.meta.get("val") for n in self.gm.graph.nodes if n.op == "call_function"}
        entries = []
        for n in desc["nodes"]:
            fused = [x for x in str(n["attrs"].get("fused", "")).split(",") if x]
            for o in n["outputs"]:
                fx = self.fx_names.get(o["id"])
                if fx is None and fused and len(n["outputs"]) == 1:
                    fx = fused[-1]
                    val = fx_meta.get(fx)  # a GEMM fused through a reshape has the pre-reshape shape
                    if not (_is_tensor_meta(val) and list(val.shape) == list(o["shape"])):
                        fx = None
                entries.append(dict(name=o["name"], fx_name=fx, op=n["op"], dtype=o["dtype"], fused=fused,
                                    shape=list(o["shape"]), source=n["source"], value_id=o["id"]))
        self.dump_entries = _dump.select(entries, self.config.dump_filter)
        g.expose([e["value_id"] for e in self.dump_entries])

    def _plan_call(self):
        """Precomputes the call boundary: expected inputs, and how to allocate outputs
        as torch tensors the engine writes into (no copies, no DLPack per call)."""
        lay = self.exe.layout()
        self.in_specs = [(torch.Size(shape), torch_dtype(dt)) for dt, shape in lay["inputs"]]
        self.root_bytes = list(lay["roots"])
        users = collections.Counter(o[0] for o in lay["outputs"])
        self.out_plan = []
        for root, offset, dt, shape in lay["outputs"]:
            dtype = torch_dtype(dt)
            nbytes = math.prod(shape) * dtype.itemsize
            direct = users[root] == 1 and offset == 0 and nbytes == self.root_bytes[root]
            self.out_plan.append((root, offset, dtype, tuple(shape), direct))

    def run(self, args) -> list[torch.Tensor]:
        ptrs, ins = [], []
        for i, (shape, dtype) in zip(self.input_positions, self.in_specs):
            a = args[i]
            if a.dtype != dtype or a.shape != shape:
                raise EngineError(f"graph_{self.gid} input {i} is {a.dtype}{list(a.shape)} but was compiled for "
                                  f"{dtype}{list(shape)}")
            if not a.is_contiguous():
                a = a.contiguous()
            ins.append(a)  # keeps contiguous copies alive through the call
            ptrs.append(a.data_ptr())
        roots = [0] * len(self.root_bytes)
        outs, bufs = [], {}
        for root, offset, dtype, shape, direct in self.out_plan:
            if direct:
                t = torch.empty(shape, dtype=dtype)
                roots[root] = t.data_ptr()
            else:
                buf = bufs.get(root)
                if buf is None:
                    buf = bufs[root] = torch.empty(self.root_bytes[root], dtype=torch.uint8)
                    roots[root] = buf.data_ptr()
                n = math.prod(shape) * dtype.itemsize
                t = buf[offset: offset + n].view(dtype).view(shape)
            outs.append(t)
        for r, b in enumerate(self.root_bytes):
            if roots[r] == 0:  # a root no output covers from its start (never expected)
                buf = bufs[r] = torch.empty(b, dtype=torch.uint8)
                roots[r] = buf.data_ptr()
        self.exe.run_ptrs(ptrs, roots, self.threads or torch.get_num_threads())
        self.calls += 1
        if self.config.profile:
            self.profiles.append((self.exe.last_starts_ns(), self.exe.last_times_ns()))
        if self.calls == 1:
            if self.dumper is not None:
                self.dumper.save_inputs(ins)
            if self.dump_entries:
                folder = os.path.join(self.config.dump_dir, f"data_{self.gid}")
                extra = outs[self.num_outputs:]
                _dump.write_data(folder, self.dump_entries, extra, self.config.dump_format)
                self.dumped = list(zip(self.dump_entries, extra))
                self.first_args = list(args)
                log.info("airgraph: dumped %d tensors to %s", len(self.dump_entries), folder)
        return outs[: self.num_outputs] if self.dump_entries else outs


class _Support(OperatorSupport):
    def __init__(self, supported: set[torch.fx.Node]):
        super().__init__()
        self.supported = supported

    def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:
        return node in self.supported


class _EngineModule(torch.nn.Module):
    def __init__(self, eg: EngineGraph, single: bool):
        super().__init__()
        self.eg = eg
        self.single = single

    def forward(self, *args):
        outs = self.eg.run(args)
        return outs[0] if self.single else tuple(outs)


def compile_aten_graph(gm: torch.fx.GraphModule, consts: dict[int, torch.Tensor], config: CompilerConfig,
                       report: CompileReport):
    """Returns a boxed callable (takes a list of args) that runs `gm`."""
    # AOTAutograd may call us with its fake mode active; constants we make must be real.
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        return _compile_aten_graph(gm, consts, config, report)


def _compile_aten_graph(gm, consts, config, report):
    t0 = time.perf_counter()
    if config.run_eagerly:
        from .debug.eager import eager_runner

        return eager_runner(gm, config, report)
    supported: set[torch.fx.Node] = set()
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        ok, why = node_support(n)
        report.nodes.append(NodeReport(n.name, target_name(n), ok, why, source_line(n)))
        if ok:
            supported.add(n)
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    unsupported = [n for n in calls if n not in supported]
    if unsupported and not config.fallback:
        n = unsupported[0]
        r = next(r for r in report.nodes if r.name == n.name)
        raise EngineError(f"FX node {n.name} ({r.target}) cannot run on the engine: {r.reason}\n  at {r.source}")

    if not unsupported:
        try:
            eg = EngineGraph(gm, consts, config, report)
        except Unsupported as e:
            # a whole-graph problem (a non-tensor input or output): run it in PyTorch
            for r in report.nodes:
                r.native, r.reason = False, str(e)
            log.warning("airgraph: graph runs in PyTorch: %s", e)
            return _boxed(gm)
        report.compile_ms = (time.perf_counter() - t0) * 1000

        def run(args):
            return eg.run(args)

        run._boxed_call = True
        run.engine_graphs = [eg]
        return run

    for n in unsupported:
        r = next(r for r in report.nodes if r.name == n.name)
        log.info("airgraph: %s (%s) falls back to PyTorch: %s", n.name, r.target, r.reason)
    partitioner = CapabilityBasedPartitioner(gm, _Support(supported), allows_single_node_partition=True)
    parts = partitioner.propose_partitions()
    fused = partitioner.fuse_partitions(parts)
    outer_ph = [n for n in fused.graph.nodes if n.op == "placeholder"]
    const_nodes = {outer_ph[i]: t for i, t in consts.items() if i < len(outer_ph)}
    engine_graphs = []
    for node in list(fused.graph.nodes):
        if node.op != "call_module" or not node.target.startswith("fused_"):
            continue
        sub = getattr(fused, node.target)
        sub_consts = {i: const_nodes[a] for i, a in enumerate(node.args) if a in const_nodes}
        try:
            eg = EngineGraph(sub, sub_consts, config, report)
        except Unsupported as e:
            log.warning("airgraph: region %s runs in PyTorch: %s", node.target, e)
            continue
        single = not isinstance(next(n for n in sub.graph.nodes if n.op == "output").args[0], (list, tuple))
        setattr(fused, node.target, _EngineModule(eg, single))
        engine_graphs.append(eg)
    fused.recompile()
    report.compile_ms = (time.perf_counter() - t0) * 1000
    run = _boxed(fused)
    run.engine_graphs = engine_graphs
    return run


def _boxed(gm):
    def run(args):
        return gm(*args)

    run._boxed_call = True
    return run
