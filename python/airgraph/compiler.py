"""From an ATen FX graph to a callable that runs on the C++ engine.

1. Every call_function node is checked on its own: can it be lowered, and does
   the engine infer the dtype and shape PyTorch traced? (`node_support`)
2. If all are supported the whole graph becomes one engine graph. Otherwise the
   supported nodes are grouped into maximal regions (torch.fx's
   CapabilityBasedPartitioner); each region runs on the engine and the rest of
   the graph stays in PyTorch.
3. Each engine graph is optimized by the C++ pass pipeline and compiled into an
   executable; parameters are bound as constants (zero-copy DLPack).
4. Unless the user promised frozen_parameters, every call checks that the bound
   parameters and buffers are unchanged and rebuilds the engine graph(s) that
   use a changed one ("Bound weights" below).
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import logging
import math
import operator
import os
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupport

from ._core import C, EngineError

try:  # torch's C helpers for Inductor's generated code: the thin call path (EngineGraph.run) uses them
    from torch._C._dynamo.guards import TensorGuards as _TensorGuards, _empty_strided_cpu
except ImportError:  # another torch: every call takes the checked path
    _TensorGuards = _empty_strided_cpu = None
from . import cache as _cache
from .config import CompilerConfig
from .debug import dump as _dump
from .lowering.sizes import Recorder, recording
from .lowering import (LOWERINGS, LowerCtx, Unsupported, bound_sizes, concrete, concrete_arg, engine_dtype,
                       is_symbolic, load_all, source_line, static_shape, sympy_binding, torch_dtype)

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
    rebuilds: int = 0  # engine rebuilds because a bound parameter or buffer changed
    symbolic: list = field(default_factory=list)  # SymbolicEngineGraph objects (graphs with symbolic sizes)


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


def get_attr_tensor(n: torch.fx.Node):
    """The tensor a get_attr node reads (a constant the traced code created: torch.tensor(...), a mask)."""
    obj = n.graph.owning_module
    for part in str(n.target).split("."):
        obj = getattr(obj, part)
    return obj


def _scratch_input(ctx: LowerCtx, n: torch.fx.Node):
    val = n.meta.get("val")
    if n.op == "get_attr":
        val = get_attr_tensor(n)
    scalar = _scalar_kind(val)
    if scalar is not None:
        return ctx.g.add_input(scalar, [], n.name)
    if _is_tensor_meta(val):
        return ctx.g.add_input(engine_dtype(val.dtype), static_shape(val), n.name)
    if isinstance(val, (list, tuple)) and all(_is_tensor_meta(v) or v is None for v in val):
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
        if not (_is_tensor_meta(val) or isinstance(val, (list, tuple))):
            raise Unsupported(f"output is {type(val).__name__}, not a tensor")
        lower_node(ctx, node)
    except Unsupported as e:
        return False, str(e)
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


@dataclass
class Lowered:
    """An FX graph lowered into an engine graph (before the passes), and how to feed it."""

    g: Any
    input_positions: list
    scalar_inputs: dict  # argument position -> dtype of its 0-d tensor
    num_outputs: int
    fx_names: dict  # engine value id -> the FX node whose result it is (for data dumps and compare)

    def instance(self, sizes: list[int]) -> "Lowered":
        """The same lowering at other sizes (a graph lowered once for every size)."""
        return dataclasses.replace(self, g=self.g.instantiate(list(sizes)))

    def feeding(self) -> dict:
        """How to feed the graph, as JSON-ready data (saved beside the graph in an airgraph file)."""
        return {"input_positions": list(self.input_positions),
                "scalar_inputs": {str(k): str(v).replace("torch.", "") for k, v in self.scalar_inputs.items()},
                "num_outputs": self.num_outputs, "fx_names": {str(k): v for k, v in self.fx_names.items()}}

    @classmethod
    def from_feeding(cls, g, d: dict) -> "Lowered":
        return cls(g, list(d["input_positions"]), {int(k): getattr(torch, v) for k, v in d["scalar_inputs"].items()},
                   d["num_outputs"], {int(k): v for k, v in d.get("fx_names", {}).items()})


def graph_without_fx(input_writes=()) -> torch.fx.GraphModule:
    """The FX graph an EngineGraph keeps (for dumps and its input writes) when it is built from a
    loaded airgraph file: an empty one, with the file's input writes."""
    gm = torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph())
    gm.meta = {"airgraph_input_writes": list(input_writes)} if input_writes else {}
    return gm


def const_resolver(by_name: dict):
    """For C.load_graph_bytes: a constant written by name -> this process's tensor of that name."""

    def resolve(name, dtype, shape):
        t = by_name.get(name)
        if t is None:
            return None
        t = t.detach()
        return t if t.is_contiguous() else t.contiguous()

    return resolve


def _program_value(v, dtype) -> torch.Tensor:
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
        elif _is_tensor_meta(val):
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


def _key_function(getters, values):
    """args -> a symbolic graph's binding key (each symbol's value, read from an int argument or an
    input's dim, or solved from a dim a * symbol + b (floor division: a dim that is no such size
    fails the program's input check), then each value input's number), as one generated lambda: no
    generator or loop on the per-call path. Every number in its text is an int."""
    parts = []
    for i, d, *ab in getters:
        p = f"args[{int(i)}]" if d < 0 else f"args[{int(i)}].shape[{int(d)}]"
        if ab and tuple(ab) != (1, 0):
            p = f"(({p} - ({int(ab[1])})) // ({int(ab[0])}))"
        parts.append(p)
    parts += [f"args[{int(i)}].item()" for i in values]
    return eval("lambda args: (" + "".join(p + ", " for p in parts) + ")")  # noqa: S307 (ints only)


def _picker(positions):
    """args -> the tuple of args[i] for i in positions (itemgetter, which returns a bare item for one)."""
    pos = list(positions)
    if len(pos) >= 2:
        return operator.itemgetter(*pos)
    return (lambda args: (args[pos[0]],)) if pos else (lambda args: ())


def _contiguous_strides(shape) -> tuple:
    strides, n = [], 1
    for d in reversed(shape):
        strides.append(n)
        n *= max(int(d), 1)
    return tuple(reversed(strides))


class EngineGraph:
    """One engine executable plus how to feed it from the FX graph's arguments."""

    def __init__(self, gm: torch.fx.GraphModule, consts: dict[int, torch.Tensor], config: CompilerConfig,
                 report: CompileReport, prepack_cache=None, arena=None, keep_text: bool = True,
                 lowered: "Lowered | None" = None, optimized: bool = False, kernel_cache=None):
        t0 = time.perf_counter()
        self.gid = next(_GRAPH_IDS)
        self.gm = gm
        self.config = config
        stats = [] if optimized else None  # (a symbolic graph's template was optimized once, for every size)
        # the graphs before and after the passes, for the compile cache's Dynamo-level entry (the
        # backend writes it, or not, and drops them)
        self.lowered_graph = self.optimized_graph = None
        cached = False
        if lowered is not None:
            low = lowered
        elif (config.cache_dir and not graph_symbols(gm)  # (a symbolic graph lowered per size is not kept)
              and not (config.dump_graph or config.dump_data or config.fault_node)):  # (they see every pass)
            low, stats, self.lowered_graph = _cache.compiled(gm, consts, config.cache_dir,
                                                             (sorted(config.disable_passes), config.fold_max_bytes),
                                                             lambda: lower_graph(gm, consts), self._optimize)
            cached = True
        else:
            low = lower_graph(gm, consts)
        g = low.g
        self.input_positions, self.scalar_inputs = low.input_positions, low.scalar_inputs
        self.num_outputs, self.fx_names = low.num_outputs, low.fx_names
        self.dumper = None
        after_pass = None
        if config.dump_graph:
            self.dumper = _dump.GraphDumper(os.path.join(config.dump_dir, f"graph_{self.gid}"), g)
            self.dumper.write_fx(gm)
            self.dumper.stage_dump("lowered", g.describe())
            after_pass = self.dumper.stage_dump
        if stats is None:
            stats = self._optimize(g, after_pass)
        self.dump_entries: list[dict] = []
        if config.dump_data:
            self._expose_for_dump(g)
        # the optimized graph as text (tests and debugging; the other sizes of a symbolic graph skip it)
        self.graph_text = str(g) if keep_text else ""
        if cached:
            self.optimized_graph = g
        self.exe = g.compile(config.allow_inplace, config.fault_node, prepack_cache, arena, kernel_cache,
                             config.background_packing)
        self.exe.set_profiling(config.profile)
        self._plan_call()
        self.profiles = collections.deque(maxlen=1000)  # (starts ns, durations ns) per call
        self.threads = config.num_threads
        self.calls = 0
        self._fast = self._plan_fast()
        self._guard = None  # the thin path's check of the inputs, made from the first call's
        self.first_args: list | None = None
        self.dumped: list[tuple[dict, torch.Tensor]] = []
        report.engine_graphs += 1
        report.graphs.append(self)
        report.pass_stats.append(stats)
        report.exec_stats.append(self.exe.stats())
        report.compile_ms += (time.perf_counter() - t0) * 1000
        log.debug("airgraph: graph_%d compiled: %s; passes %s", self.gid, self.exe.stats(), stats)

    def _optimize(self, g, after_pass=None):
        return g.optimize(set(self.config.disable_passes), self.config.fold_max_bytes, after_pass)

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
            if root < 0:  # an input the graph writes, computed in place: the input is the output
                self.out_plan.append((root, 0, None, (), False))
                continue
            dtype = torch_dtype(dt)
            nbytes = math.prod(shape) * dtype.itemsize
            direct = users[root] == 1 and offset == 0 and nbytes == self.root_bytes[root]
            self.out_plan.append((root, offset, dtype, tuple(shape), direct))

    def _plan_fast(self):
        """The thin call path, where it applies: every output a whole buffer of its own (or an input
        written in place), no dumps or profiles. Returns what it allocates per
        external root (shape, strides, dtype), or None."""
        if (_TensorGuards is None or not _DATA_PTR_FN or self.config.profile or self.dumper is not None
                or self.dump_entries):
            return None
        allocs = [None] * len(self.root_bytes)
        for root, _, dtype, shape, direct in self.out_plan:
            if root >= 0:
                if not direct:
                    return None
                allocs[root] = (shape, _contiguous_strides(shape), dtype)
        if any(a is None for a in allocs):
            return None
        self._out_roots = [p[0] for p in self.out_plan]
        writes = self.gm.meta.get("airgraph_input_writes", ())
        self._user_outputs = writes[0][1] if writes else len(self._out_roots)
        self._writes_in_place = bool(writes) and all(r < 0 for r in self._out_roots[self._user_outputs:])
        self._pick = _picker(self.input_positions)
        # numbers (sizes the graph uses as values) go to the engine as they are; tensors are checked
        self._tensor_pick = _picker([i for i in self.input_positions if i not in self.scalar_inputs]) \
            if self.scalar_inputs else None
        return allocs

    def run(self, args) -> list[torch.Tensor]:
        if self._guard is not None:
            # the thin path: one C check of every input's dtype, sizes and strides (torch's
            # TensorGuards, as Dynamo's guards do it), outputs from Inductor's allocator, and the
            # engine reads the data pointers itself
            ins = self._pick(args)
            if self._guard.check(*(ins if self._tensor_pick is None else self._tensor_pick(args))):
                roots = [_empty_strided_cpu(shape, stride, dtype) for shape, stride, dtype in self._fast]
                self.exe.run_tensors(ins, roots, self.threads or torch.get_num_threads(), _DATA_PTR_FN,
                                     torch.Tensor)
                self.calls += 1
                if self._writes_in_place:  # the caller's input writes are done: the user's outputs only
                    return [roots[r] for r in self._out_roots[:self._user_outputs]]
                return [roots[r] if r >= 0 else ins[-1 - r] for r in self._out_roots]
        return self._run_checked(args)

    def _run_checked(self, args) -> list[torch.Tensor]:
        ptrs, ins = [], []
        copied = False
        for i, (shape, dtype) in zip(self.input_positions, self.in_specs):
            a = args[i]
            if self.scalar_inputs and i in self.scalar_inputs:
                a = torch.tensor(a, dtype=dtype)
            if a.dtype != dtype or a.shape != shape:
                raise InputMismatch(f"graph_{self.gid} input {i} is {a.dtype}{list(a.shape)} but was compiled for "
                                  f"{dtype}{list(shape)}")
            if not a.is_contiguous():
                a = a.contiguous()
                copied = True
            ins.append(a)  # keeps contiguous copies alive through the call
            ptrs.append(a.data_ptr())
        roots = [0] * len(self.root_bytes)
        outs, bufs = [], {}
        for root, offset, dtype, shape, direct in self.out_plan:
            if root < 0:
                outs.append(ins[-1 - root])
                continue
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
        if self._fast is not None and self._guard is None and not copied and all(
                isinstance(args[i], (int, float)) for i in self.scalar_inputs):
            # later calls whose tensors match these in dtype, sizes and strides take the thin path
            ts = [a for i, a in zip(self.input_positions, ins) if i not in self.scalar_inputs]
            self._guard = _TensorGuards(*ts, dynamic_dims_sizes=[list(a.shape) for a in ts],
                                        dynamic_dims_strides=[list(a.stride()) for a in ts])
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


# ----------------------------------------------------------------------------- dynamic shapes
#
# A graph traced with symbolic sizes (dynamic=True, Dynamo's automatic dynamic shapes after a
# second size, mark_dynamic, set_dim_gears) is traced by Dynamo and AOTAutograd once. Each call
# binds the symbols from its inputs' sizes (a few attribute reads); the first call with a new
# binding lowers the ATen graph for those sizes and builds a static engine program for them
# (passes, memory plan, kernels; weights are packed once and shared by every size), so every
# size runs with the static program's speed and its exact memory plan.


@dataclass
class ShapeSpec:
    """What the backend knows beyond the ATen graph: gears (Symbol -> allowed sizes, from
    set_dim_gears) and value inputs (argument position -> example value: Python floats that Dynamo
    passes as 0-d tensors under dynamic=True, such as a norm's eps; each program binds their value as
    a constant, so that folding and fusion see them, and a new value builds a new program)."""

    gears: dict = field(default_factory=dict)
    values: dict = field(default_factory=dict)
    names: dict = field(default_factory=dict)  # argument position -> the user's name (input_ids), for messages
    # Symbol -> the user's name of that size (torch.export.Dim's), for the graph's symbols and messages
    symbol_names: dict = field(default_factory=dict)


def _symbol_rules(gm: torch.fx.GraphModule, names: dict | None = None):
    """How each symbol is read from the arguments: [(position, dim or -1 for a scalar, Symbol, hint)],
    the first place it appears as a whole size, or else (torch.export's derived Dims: 2 * n, n + 1)
    the first input dim that is a * symbol + b with no other symbol; every placeholder's expected
    sizes [(position, name, dim, expr)]; Symbol -> the first tensor dim it sizes, for messages; and
    Symbol -> (a, b) for the symbols read from a derived dim."""
    rules, seen, expected, where, derived = [], set(), [], {}, []
    names = names or {}
    for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder"):
        val = n.meta.get("val")
        name = names.get(i)
        label = name or f"input {i} ({n.name})"
        name = name or n.name
        if isinstance(val, torch.SymInt):
            sizes = [(-1, val)]
        elif isinstance(val, torch.Tensor):
            sizes = list(enumerate(val.shape))
        else:
            continue
        for d, s in sizes:
            if not isinstance(s, torch.SymInt):
                continue
            e = s.node.expr
            if e.is_Symbol and e not in seen:
                seen.add(e)
                rules.append((i, d, e, _hint(s)))
            expected.append((i, label, d, e))
            if e.is_Symbol and d >= 0 and e not in where:
                where[e] = f"{label} dim {d}"
            if not e.is_Symbol and d >= 0:
                derived.append((i, label, d, e, s))
    affine = {}
    for i, label, d, e, s in derived:
        free = e.free_symbols
        sym = next(iter(free)) if len(free) == 1 else None
        if sym is None or sym in seen:
            continue
        ab = _affine(e, sym)
        if ab is None:
            continue
        seen.add(sym)
        h = _hint(s)
        rules.append((i, d, sym, None if h is None else (h - ab[1]) // ab[0]))
        affine[sym] = ab
        where[sym] = f"{label} dim {d} ({e})"
    for _, _, e, _ in rules:
        where.setdefault(e, "")
    return rules, expected, where, affine


def _affine(e, sym) -> tuple[int, int] | None:
    """(a, b) when e is a * sym + b with integers a != 0 and b, else None."""
    import sympy

    try:
        p = sympy.Poly(e, sym)
    except sympy.PolynomialError:
        return None
    if p.degree() != 1:
        return None
    a, b = p.coeff_monomial(sym), p.coeff_monomial(1)
    if not (a.is_Integer and b.is_Integer) or a == 0:
        return None
    return int(a), int(b)


def _hint(s: torch.SymInt) -> int | None:
    h = getattr(s.node, "hint", None)
    if h is None:
        h = s.node.shape_env.var_to_val.get(s.node.expr)
    return None if h is None else int(h)


def graph_symbols(gm: torch.fx.GraphModule) -> bool:
    """Does the graph carry symbolic sizes?"""
    for n in gm.graph.nodes:
        v = n.meta.get("val")
        if is_symbolic(v) or (isinstance(v, torch.Tensor) and any(not isinstance(s, int) for s in v.shape)):
            return True
    return False


def hint_sizes(gm: torch.fx.GraphModule) -> dict:
    """The binding of the sizes the graph was traced with."""
    return {sym: h for _, _, sym, h in _symbol_rules(gm)[0] if h is not None}


class SymbolicEngineGraph:
    """A graph with symbolic sizes: one static engine program (EngineGraph) per binding of its
    symbols, built on the first call that needs it and kept (up to config.dynamic_sizes bindings,
    least recently used first out). `gears` (Symbol -> allowed sizes) restricts a symbol to a set of
    sizes, all built now; any other size is an error."""

    def __init__(self, gm, consts, config: CompilerConfig, report: CompileReport, spec: ShapeSpec | None = None):
        spec = spec or ShapeSpec()
        self.gm, self.consts, self.config, self.report = gm, consts, config, report
        self.rules, self.expected, self.where, affine = _symbol_rules(gm, spec.names)
        self.symbols = [sym for _, _, sym, _ in self.rules]
        # (position, dim) of each symbol's size, or (position, dim, a, b) for a * symbol + b
        self.getters = [(i, d, *affine.get(sym, ())) for i, d, sym, _ in self.rules]
        phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.values = sorted(i for i in spec.values if i not in consts and i < len(phs)
                             and _is_tensor_meta(phs[i].meta.get("val")) and phs[i].meta["val"].dim() == 0)
        self.value_dtypes = [phs[i].meta["val"].dtype for i in self.values]
        self._key = _key_function(self.getters, self.values)
        self.gears = {s: sorted(set(v)) for s, v in spec.gears.items() if s in self.symbols}
        self.symbol_names = {s: n for s, n in spec.symbol_names.items() if s in self.symbols}
        self.prepack_cache = C.PrepackCache()  # weights packed once for every size
        self.kernel_cache = C.KernelCache()  # a kernel whose node and shapes were seen before is reused
        self.arena = C.ArenaSource()  # one arena (of the largest size seen) per concurrent caller
        self.instances: collections.OrderedDict = collections.OrderedDict()
        self.lock = threading.Lock()
        self.gid = next(_GRAPH_IDS)
        self.build_ms: list[float] = []  # engine work per new binding
        self.fallback_sizes = 0
        self.template: Lowered | None = None  # the graph lowered once for every size
        self.template_reason = "off (config.lower_once)"  # why there is none
        self.template_builds = 0
        self.optimized = None  # the template after the passes, when they decide alike at every size checked
        self.optimized_reason = "no template"
        self.optimized_builds = 0
        self.cache_key, self.from_cache = None, False  # the compile cache's entry for the template
        report.symbolic.append(self)
        hint = tuple(h for _, _, _, h in self.rules)
        if any(h is None for h in hint):
            raise Unsupported("a symbolic input size has no example value")
        vals = tuple(spec.values[i] for i in self.values)
        keys = [hint + vals]
        if self.gears:
            keys = []
            for combo in itertools.product(*[self.gears.get(s, [h]) for s, h in zip(self.symbols, hint)]):
                keys.append(tuple(combo) + vals)
        if config.lower_once and not self._cached_template(hint, vals):
            self._record(hint + vals)
        for k in keys:
            self._build(k, first=(k is keys[0]))

    def describe(self) -> str:
        return ", ".join(f"{sym} = " + (self.where[sym] or f"input {i}" + (f" dim {d}" if d >= 0 else ""))
                         for i, d, sym, _ in self.rules)

    def _env(self, key) -> dict:
        return dict(zip(self.symbols, key))

    def _consts(self, key) -> dict:
        if not self.values:
            return self.consts
        vals = key[len(self.symbols):]  # this program's values of the scalar inputs, as constants
        return {**self.consts, **{i: _program_value(v, dt) for i, v, dt in zip(self.values, vals, self.value_dtypes)}}

    def _record(self, key):
        """Lowers the graph once for every size (lowering/sizes.py) and checks the recording against
        a lowering at other sizes; on any doubt there is no template and every size is lowered."""
        n = len(self.symbols)
        rec = Recorder(self.symbols, list(key[:n]), self.symbol_names)
        consts = self._consts(key)
        try:
            with bound_sizes(self._env(key)), recording(rec):
                low = lower_graph(self.gm, consts)
            rec.compile_guards(low.g)
            probe = self._check_recording(low, rec, key, consts)
        except Exception as e:
            where = [f for f in traceback.extract_tb(e.__traceback__)
                     if "airgraph" in f.filename and not f.filename.endswith("sizes.py")]
            at = f" (at {os.path.basename(where[-1].filename)}:{where[-1].lineno})" if where else ""
            self.template_reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}{at}"
            log.debug("airgraph: graph_%d is lowered per size: %s", self.gid, self.template_reason)
            return
        self.template, self.template_rec, self.template_vals = low, rec, key[n:]
        self.template_reason = ""
        self._optimize_template(probe)
        if self.cache_key is not None:
            _cache.store_symbolic(self.config.cache_dir, self.cache_key, self.gm, self.consts, low, self.optimized,
                                  probe, list(self.template_vals))
        if self.config.dump_graph:  # the graph lowered once, with its size expressions and guards
            folder = os.path.join(self.config.dump_dir, f"graph_{self.gid}_symbolic")
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, "lowered_once.txt"), "w") as f:
                f.write(f"# symbols: {self.describe()}\n")
                f.write("".join(f"# guard: {rel} is {out}\n" for rel, out in rec.guards.items()))
                f.write(str(low.g))

    def _cached_template(self, hint, vals) -> bool:
        """Takes the template (and its optimized graph) from the compile cache; False on a miss,
        after which _record writes the entry. Not while dumping or testing (they see every pass)."""
        c = self.config
        self.cache_key = None
        if not c.cache_dir or c.dump_graph or c.dump_data or c.fault_node:
            return False
        self.cache_key = _cache.graph_key(
            self.gm, self.consts, ("symbolic", sorted(c.disable_passes), c.fold_max_bytes, self.values,
                                   sorted((str(k), v) for k, v in self.symbol_names.items())))
        hit = _cache.load_symbolic(c.cache_dir, self.cache_key, self.gm, self.consts, list(hint), list(vals))
        if hit is None:
            return False
        self.template, self.optimized, probe = hit
        self.template_vals, self.template_reason = tuple(vals), ""
        self.optimized_reason = "" if self.optimized is not None else "passes not cached (other weights)"
        if self.optimized is None:
            self._optimize_template(probe)
        self.from_cache = True
        return True

    def _check_recording(self, low: Lowered, rec, key, consts):
        """The recorded graph, instantiated at other sizes, must equal the FX graph lowered at those
        sizes (same nodes, shapes and attributes). Candidates: every symbol different (a size taken
        from the wrong symbol shows), then all shifted together (symbols the model keeps equal, such
        as a KV cache's key and value lengths, stay equal); the first whose lowering succeeds and
        where the recorded decisions hold is compared."""
        hint = key[: len(self.symbols)]
        candidates = ([h + 1 + i for i, h in enumerate(hint)], [2 * h + 3 + i for i, h in enumerate(hint)],
                      [h + 1 for h in hint], [2 * h for h in hint], [h + 8 for h in hint])
        for sizes in candidates:
            if not rec.holds_at(sizes):
                continue
            try:
                with bound_sizes(dict(zip(self.symbols, sizes))):
                    want = str(lower_graph(self.gm, consts).g)
            except Exception:  # sizes the model does not allow (symbols that must agree)
                continue
            if str(low.instance(sizes).g) != want:
                raise Unsupported(f"the recorded graph differs from a lowering at sizes {sizes}")
            return sizes
        raise Unsupported("no other sizes to check the recorded graph at")

    def _optimize(self, g):
        return g.optimize(set(self.config.disable_passes), self.config.fold_max_bytes)

    def _optimize_template(self, probe):
        """Runs the passes once, on the recorded graph (they decide at the traced sizes and carry
        the size attributes of the nodes they rewrite). Used for every size only if, at the checked
        sizes, its instance equals the passes run on the template's instance there: a decision that
        holds only at the traced sizes shows as a difference, and every size runs the passes."""
        if self.config.dump_graph or self.config.dump_data or self.config.fault_node:
            self.optimized_reason = "off while dumping or testing (every size runs the passes)"
            return
        try:
            opt = self.template.g.clone()
            self._optimize(opt)
            want = self.template.g.instantiate(list(probe))
            self._optimize(want)
            if str(opt.instantiate(list(probe))) != str(want):
                raise Unsupported(f"the passes decide differently at sizes {list(probe)}")
        except Exception as e:
            self.optimized_reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            log.debug("airgraph: graph_%d runs the passes per size: %s", self.gid, self.optimized_reason)
            return
        self.optimized, self.optimized_reason = opt, ""

    def _lowered_at(self, key, use_optimized=True):
        """The template's instance at these sizes, when the template serves them, and whether it is
        the optimized template's (the passes are done)."""
        n = len(self.symbols)
        if self.template is None or key[n:] != self.template_vals or \
                self.template.g.failed_guard(list(key[:n])) is not None:
            return None, False
        try:
            if self.optimized is not None and use_optimized:
                try:
                    low = dataclasses.replace(self.template, g=self.optimized.instantiate(list(key[:n])))
                    return low, True
                except EngineError as e:
                    log.info("airgraph: graph_%d at sizes %s runs the passes again: %s", self.gid,
                             self._key_text(key), str(e).splitlines()[0])
            return self.template.instance(key[:n]), False
        except EngineError as e:  # a size check failed: lower this size from the FX graph
            log.info("airgraph: graph_%d at sizes %s is lowered again: %s", self.gid, self._key_text(key),
                     str(e).splitlines()[0])
            return None, False

    def _build(self, key, first=False):
        t0 = time.perf_counter()
        env = self._env(key)
        report = self.report if first else CompileReport()
        consts = self._consts(key)
        try:
            # (the first build runs the passes itself: its report and graph text show them)
            low, optimized = self._lowered_at(key, use_optimized=not first or self.from_cache)
            how = "lowered and optimized once" if optimized else "lowered once" if low is not None else "lowered per size"
            if low is not None:
                self.template_builds += 1
                self.optimized_builds += optimized
            with bound_sizes(env):
                eg = EngineGraph(self.gm, consts, self.config, report, self.prepack_cache, self.arena,
                                 keep_text=first, lowered=low, optimized=optimized, kernel_cache=self.kernel_cache)
        except Exception as e:  # a size the engine cannot take (or a lowering bug at this size) runs in PyTorch
            if first or not self.config.fallback:
                raise
            how = "in PyTorch"
            log.warning("airgraph: graph_%d at sizes %s runs in PyTorch: %s: %s", self.gid, self._key_text(key),
                        type(e).__name__, str(e).split("\n")[0])
            self.fallback_sizes += 1
            eg = None
        run = eg.run if eg is not None else self._eager
        ms = (time.perf_counter() - t0) * 1000
        self.build_ms.append(ms)
        self.instances[key] = run
        while len(self.instances) > max(1, self.config.dynamic_sizes):
            self.instances.popitem(last=False)
        if not first and log.isEnabledFor(logging.INFO):  # (the sizes' text costs more than a build's Python)
            log.info("airgraph: graph_%d: new sizes %s: engine program built in %.1f ms (%d sizes built so far; "
                     "%s)", self.gid, self._key_text(key), ms, len(self.build_ms),
                     how)
        return run

    def _key_text(self, key) -> str:
        phs = [n.name for n in self.gm.graph.nodes if n.op == "placeholder"]
        return ", ".join([f"{s}={v}" for s, v in zip(self.symbols, key)]
                         + [f"{phs[i]}={v:g}" for i, v in zip(self.values, key[len(self.symbols):])])

    def _eager(self, args):
        out = self.gm(*args)
        return list(out) if isinstance(out, (list, tuple)) else [out]

    def _check(self, key, args):
        """A clear error for inputs whose sizes disagree with each other or with the gears."""
        env = sympy_binding(self._env(key))
        for (i, d, sym, _), v in zip(self.rules, key):
            allowed = self.gears.get(sym)
            if allowed is not None and v not in allowed:
                at = self.where[sym] or f"input {i}" + (f" dim {d}" if d >= 0 else "")
                raise EngineError(f"graph_{self.gid}: {at} is {v}, but airgraph.set_dim_gears allows only "
                                  f"{allowed} for it ({sym})")
        for i, name, d, expr in self.expected:
            a = args[i]
            got = a if d < 0 else a.shape[d] if isinstance(a, torch.Tensor) and d < a.dim() else None
            want = env[expr] if expr in env else expr.xreplace(env)
            if got is None or (want.is_number and int(want) != got):
                src = ", ".join(self.where[s] or str(s) for s in self.symbols if s in expr.free_symbols)
                raise EngineError(f"graph_{self.gid}: {name} dim {d} is {got}, but the graph needs "
                                  f"{expr} = {want} with {self._key_text(key)} (bound from {src})")

    def run(self, args):
        try:
            key = self._key(args)
        except (IndexError, AttributeError) as e:
            raise EngineError(f"graph_{self.gid}: the arguments do not match the traced graph ({e})") from None
        run = self.instances.get(key)
        if run is not None:
            try:
                self.instances.move_to_end(key)  # least recently used goes first
            except KeyError:
                pass  # evicted by a concurrent build just now: the program still runs this call
        else:
            with self.lock:
                run = self.instances.get(key)
                if run is None:
                    self._check(key, args)
                    run = self._build(key)
        try:
            return run(args)
        except InputMismatch:
            self._check(key, args)
            raise


def make_engine_graph(gm, consts, config, report, spec: ShapeSpec | None = None):
    """An EngineGraph, or a SymbolicEngineGraph when `gm` carries symbolic sizes (or value inputs)."""
    if graph_symbols(gm) or (spec is not None and spec.values):
        return SymbolicEngineGraph(gm, consts, config, report, spec)
    return EngineGraph(gm, consts, config, report)


class InputMismatch(EngineError):
    """An engine graph got an input of another dtype or shape than it was compiled for."""


class _Support(OperatorSupport):
    def __init__(self, supported: set[torch.fx.Node]):
        super().__init__()
        self.supported = supported

    def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:
        return node in self.supported


class _EngineModule(torch.nn.Module):
    """A region of a partitioned graph on the engine. A PyTorch node before it can hand it a tensor
    of another dtype or shape than PyTorch's own trace promised (eager and meta kernels disagree for
    a few ops: training-mode batch norm in bfloat16, say); the region then runs in PyTorch too."""

    def __init__(self, eg: EngineGraph, single: bool, sub: torch.fx.GraphModule):
        super().__init__()
        self.eg = eg
        self.single = single
        self.sub = sub
        self.warned = False

    def forward(self, *args):
        try:
            outs = self.eg.run(args)
        except InputMismatch as e:
            if not self.warned:
                self.warned = True
                log.warning("airgraph: %s; this region runs in PyTorch for such inputs", e)
            return self.sub(*args)
        return outs[0] if self.single else tuple(outs)


# ----------------------------------------------------------------------------- bound weights
#
# Parameters and buffers are bound as engine constants: zero-copy, and the passes may fold
# them, prepack them into oneDNN layouts or fold a BatchNorm into a convolution's weights,
# so an engine graph is right only for the weights it was built with. Dynamo passes them
# as graph inputs on every call (the very Parameter objects), so each call can check them:
# the WeightGuard (csrc/bindings/weights.cpp) compares each bound tensor's data pointer and
# version counter with the ones it was built with, in one C call, and a change rebuilds the
# engine graph(s) that use it. frozen_parameters=True skips the check.


def _torch_data_ptr_fn() -> int:
    """Address of torch's `void* (PyObject*)` data-pointer function, which torch exports for
    Inductor's generated C++; 0 where this torch lacks it (the guard then calls .data_ptr())."""
    try:
        return int(torch._C._dynamo.guards._torchinductor_pyobject_tensor_data_ptr)
    except (AttributeError, TypeError, ValueError):
        return 0


_DATA_PTR_FN = _torch_data_ptr_fn()


@functools.cache
def _version_layout() -> tuple[int, int]:
    """Where torch keeps a tensor's version count (weights.cpp reads it without calling torch's
    ~40 ns getter): found on probe tensors, then verified by in-place writes through a tensor, a
    detached alias and a Parameter. (-1, -1) when not found: the guard then uses the getter."""
    probe = getattr(C, "probe_version_layout", None)
    if probe is None:
        return (-1, -1)
    try:
        set_version = torch._C._autograd._unsafe_set_version_counter
        a = torch.zeros(4)
        b, c, p = a.detach(), torch.zeros(4), torch.nn.Parameter(torch.zeros(4), requires_grad=False)
        set_version((a, c, p), (0x5EC7A5, 0x2B1D63, 0x1F00D5))
        found = probe(a._cdata, b._cdata, c._cdata, a._version, c._version)
        if found is None:
            return (-1, -1)
        with torch.no_grad():
            b.add_(1)
            c.mul_(2)
            p.sub_(1)
        read = C.read_version_at
        ok = (read(a._cdata, *found) == a._version == 0x5EC7A6 and read(b._cdata, *found) == b._version
              and read(c._cdata, *found) == c._version == 0x2B1D64 and read(p._cdata, *found) == p._version == 0x1F00D6)
        if not ok:
            log.debug("airgraph: version-counter probe %s did not verify; the weight check uses torch's getter", found)
        return tuple(found) if ok else (-1, -1)
    except Exception as e:  # a torch without these internals: the getter path is still exact
        log.debug("airgraph: version-counter probe failed (%s); the weight check uses torch's getter", e)
        return (-1, -1)


class _PyWeightGuard:
    """The extension's WeightGuard in Python (same contract), for an extension built without
    csrc/bindings/weights.cpp: about 0.25 us per tensor (50 us for BERT-base) instead of 10 ns."""

    fast = False

    def __init__(self, positions, tensors, data_ptr_fn=0):
        self.positions = list(positions)
        self.tensors = list(tensors)
        self.data_ptrs = [t.data_ptr() for t in self.tensors]
        self.versions = [t._version for t in self.tensors]

    def __len__(self):
        return len(self.tensors)

    def check(self, args) -> int:
        n = len(args)
        for k, (i, ptr, ver) in enumerate(zip(self.positions, self.data_ptrs, self.versions)):
            if i >= n:
                return k
            a = args[i]
            try:
                if a.data_ptr() != ptr or a._version != ver:
                    return k
            except (AttributeError, RuntimeError):
                return k
        return -1


def make_weight_guard(positions: list[int], tensors: list[torch.Tensor]):
    """A guard over `tensors`, bound at argument `positions`; reads their state now."""
    cls = getattr(C, "WeightGuard", None)
    if cls is None:
        return _PyWeightGuard(positions, tensors)
    return cls(positions, tensors, _DATA_PTR_FN, _version_layout())


def _describe_change(bound: torch.Tensor, ptr: int, version: int, a) -> str | None:
    """What happened to a bound tensor, seeing the argument now at its position (None: nothing)."""
    if not isinstance(a, torch.Tensor):
        return f"is now {type(a).__name__}, not a tensor"
    if a.data_ptr() != ptr:
        return "had its storage replaced (.data = or set_)" if a is bound else "was replaced by another tensor"
    try:
        v = a._version
    except RuntimeError:
        return "is now an inference tensor (no version counter)"
    if v != version:
        return f"was updated in place (version {version} -> {v})"
    return None


def _names_text(names: list[str], limit: int = 3) -> str:
    more = len(names) - limit
    return "; ".join(names[:limit]) + (f"; and {more} more" if more > 0 else "")


@dataclass
class _Binding:
    """The engine graph(s) built for one set of bound weights, and the check of those weights."""

    run: Callable  # boxed: takes the argument list
    graphs: list  # the EngineGraph objects
    guard: Any  # WeightGuard, or None (nothing bound, or frozen_parameters)
    positions: list[int]  # argument positions of the bound tensors, in guard order
    tensors: list  # the bound tensors


class _Binder:
    """Owns a compiled graph's current binding and rebuilds it when a bound weight changes.

    `build(consts, changed, prev, report)` builds engine graph(s) for `consts` (argument
    position -> tensor) and returns (boxed run, engine graphs); `changed` (positions) and
    `prev` (the binding being replaced) are None on the first build. Callers read `binding`
    once per call; a rebuild happens under the lock and is published by one assignment, so
    concurrent callers see the old binding or the new one, never half of one.
    """

    def __init__(self, build, consts: dict[int, torch.Tensor], names: dict[int, str] | None,
                 config: CompilerConfig, report: CompileReport):
        self.build = build
        self.names = names or {}
        self.config = config
        self.report = report
        self.lock = threading.Lock()
        self.graphs: list = []  # the current engine graphs (the list object is kept; its items are replaced)
        self.binding = self._bind(consts, None, None, report)

    def _bind(self, consts, changed, prev, report) -> _Binding:
        positions = sorted(consts)
        tensors = [consts[i] for i in positions]
        guard = None
        if positions and not self.config.frozen_parameters:
            guard = make_weight_guard(positions, tensors)  # before building: a write during the build is seen
        run, graphs = self.build(consts, changed, prev, report)
        self.graphs[:] = graphs
        return _Binding(run, graphs, guard, positions, tensors)

    def rebind(self, args) -> _Binding:
        with self.lock:
            b = self.binding
            if b.guard.check(args) < 0:
                return b  # another thread rebuilt it already
            changed = {}
            ptrs, vers = list(b.guard.data_ptrs), list(b.guard.versions)
            for k, (i, t) in enumerate(zip(b.positions, b.tensors)):
                what = _describe_change(t, ptrs[k], vers[k], args[i] if i < len(args) else None)
                if what:
                    changed[i] = what
            if not changed:  # the guard saw a change that the description did not: rebuild everything
                changed = {i: "changed" for i in b.positions}
            consts = {}
            for i in b.positions:
                a = args[i] if i < len(args) else None
                if isinstance(a, torch.Tensor) and not a.is_inference():
                    consts[i] = a
            t0 = time.perf_counter()
            scratch = CompileReport()
            new = self._bind(consts, set(changed), b, scratch)
            old_ids = {id(g) for g in b.graphs}
            kept = [g for g in self.report.graphs if id(g) not in old_ids or g in new.graphs]
            kept += [g for g in new.graphs if g not in kept]
            self.report.graphs[:] = kept
            self.report.rebuilds += 1
            self.binding = new
            rebuilt = [f"graph_{g.gid}" for g in new.graphs if id(g) not in old_ids]
            log.info("airgraph: %s since the engine was built: %s; rebuilt %s in %.0f ms",
                     "a bound parameter changed" if len(changed) == 1 else f"{len(changed)} bound parameters changed",
                     _names_text([f"{self.names.get(i, f'input {i}')} {what}" for i, what in changed.items()]),
                     ", ".join(rebuilt) or "nothing (it runs in PyTorch)", (time.perf_counter() - t0) * 1000)
            return new


def _checked(binder: _Binder):
    """The boxed callable: checks the bound weights, then runs the current binding."""

    def run(args):
        b = binder.binding
        if b.guard is not None and b.guard.check(args) >= 0:
            b = binder.rebind(args)
        return b.run(args)

    run._boxed_call = True
    run.engine_graphs = binder.graphs
    run.binder = binder
    return run


def engine_runner(writes, consts: dict, names: dict, config: CompilerConfig, report: CompileReport, lowered_for):
    """The boxed callable of a graph that comes from a file, not from an FX graph (torch's
    aot_compile artifacts, the compile cache): `lowered_for(consts)` gives (Lowered, whether its
    passes have run) for a binding of the weights (called again when a bound weight changes)."""
    gm = graph_without_fx(writes)

    def build(consts, changed, prev, report):
        low, optimized = lowered_for(consts)
        eg = EngineGraph(gm, consts, config, report, lowered=low, optimized=optimized)
        return eg.run, [eg]

    run = _checked(_Binder(build, consts, names, config, report))
    return _writing_inputs(run, writes) if writes else run


# ----------------------------------------------------------------------------- compile


def compile_aten_graph(gm: torch.fx.GraphModule, consts: dict[int, torch.Tensor], config: CompilerConfig,
                       report: CompileReport, const_names: dict[int, str] | None = None,
                       spec: ShapeSpec | None = None):
    """Returns a boxed callable (takes a list of args) that runs `gm`.

    consts: argument position -> parameter or buffer to bind as a constant (checked on every
    call unless config.frozen_parameters); const_names: position -> name, for log messages."""
    # AOTAutograd may call us with its fake mode active; constants we make must be real.
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        writes = take_input_writes(gm)
        run = _compile_aten_graph(gm, consts, config, report, const_names, spec)
    return _writing_inputs(run, writes) if writes else run


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
        if c.users and not (_is_tensor_meta(dv) and _is_tensor_meta(sv) and dv.dtype == sv.dtype
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


def _writing_inputs(run, writes):
    """The boxed callable of a graph whose input writes were taken out (take_input_writes): runs it,
    copies each written input's new value into it (unless the engine computed it there) and
    returns the user's outputs."""
    n = writes[0][1]

    def call(args):
        outs = run(args)  # (no callee of ours clears the boxed argument list)
        if len(outs) == n:  # the engine made every write in the input's memory
            return outs
        for p, k in writes:
            t, o = args[p], outs[k]
            if o is not t:
                t.copy_(o)
        return list(outs[:n])

    call._boxed_call = True
    for attr in ("engine_graphs", "binder"):
        if hasattr(run, attr):
            setattr(call, attr, getattr(run, attr))
    return call


def _compile_aten_graph(gm, consts, config, report, const_names, spec=None):
    t0 = time.perf_counter()
    if graph_symbols(gm):
        # which nodes the engine takes is decided at the traced sizes
        with bound_sizes(hint_sizes(gm)):
            return _compile_aten_graph_at(gm, consts, config, report, const_names, spec, t0)
    return _compile_aten_graph_at(gm, consts, config, report, const_names, spec, t0)


def _compile_aten_graph_at(gm, consts, config, report, const_names, spec, t0):
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
            binder = _Binder(_whole_graph_builder(gm, config, spec), consts, const_names, config, report)
            report.compile_ms = (time.perf_counter() - t0) * 1000
            return _checked(binder)
        except Unsupported as e:
            # the graph's boundary (an output that is not a tensor, say): every node is supported, so
            # one region holds them all and the FX graph around it passes the rest through
            log.info("airgraph: the graph runs as one engine region inside its FX graph: %s", e)
            report.engine_graphs, report.graphs[:], report.pass_stats[:], report.exec_stats[:] = 0, [], [], []

    for n in unsupported:
        r = next(r for r in report.nodes if r.name == n.name)
        log.info("airgraph: %s (%s) falls back to PyTorch: %s", n.name, r.target, r.reason)
    partitioner = CapabilityBasedPartitioner(gm, _Support(supported), allows_single_node_partition=True)
    parts = partitioner.propose_partitions()
    fused = partitioner.fuse_partitions(parts)
    outer_pos = {n: i for i, n in enumerate(n for n in fused.graph.nodes if n.op == "placeholder")}
    # (attribute name, region graph, {region input index: outer position of a bound weight},
    #  {region input index: tensor constant of the graph}, single output)
    regions = []
    for node in list(fused.graph.nodes):
        if node.op != "call_module" or not node.target.startswith("fused_"):
            continue
        sub = getattr(fused, node.target)
        cmap = {j: outer_pos[a] for j, a in enumerate(node.args) if a in outer_pos and outer_pos[a] in consts}
        # tensors the traced code created (get_attr): constants of the region, owned by the graph
        fixed = {j: get_attr_tensor(a) for j, a in enumerate(node.args)
                 if isinstance(a, torch.fx.Node) and a.op == "get_attr"}
        single = not isinstance(next(n for n in sub.graph.nodes if n.op == "output").args[0], (list, tuple))
        regions.append((node.target, sub, cmap, fixed, single))
    # only constants an engine region reads are bound (and checked); PyTorch nodes read their arguments per call
    used = {p for _, _, cmap, _, _ in regions for p in cmap.values()}
    binder = _Binder(_regions_builder(fused, regions, config, spec, outer_pos),
                     {i: t for i, t in consts.items() if i in used}, const_names, config, report)
    fused.recompile()
    report.compile_ms = (time.perf_counter() - t0) * 1000
    return _checked(binder)


def _whole_graph_builder(gm, config, spec):
    def build(consts, changed, prev, report):
        if prev is None:
            eg = make_engine_graph(gm, consts, config, report, spec)  # Unsupported: the caller runs gm in PyTorch
            return eg.run, [eg]
        try:
            eg = make_engine_graph(gm, consts, config, report, spec)
        except (Unsupported, EngineError) as e:
            log.warning("airgraph: rebuilding the engine graph for the new weights failed (%s); it runs in "
                        "PyTorch from now on", e)
            return _boxed(gm), []
        return eg.run, [eg]

    return build


def _regions_builder(fused, regions, config, spec, outer_pos):
    def build(consts, changed, prev, report):
        graphs = []
        for target, sub, cmap, fixed, single in regions:
            mod = getattr(fused, target)
            if prev is not None:
                if not isinstance(mod, _EngineModule):
                    continue  # runs in PyTorch: reads its arguments per call
                if not changed.intersection(cmap.values()):
                    graphs.append(mod.eg)
                    continue
            sub_consts = {j: consts[p] for j, p in cmap.items() if p in consts}
            sub_consts.update(fixed)
            try:
                eg = make_engine_graph(sub, sub_consts, config, report, _region_spec(spec, fused, target, outer_pos))
            except (Unsupported, EngineError) as e:
                if prev is None and isinstance(e, EngineError):
                    raise
                log.warning("airgraph: region %s runs in PyTorch: %s", target, e)
                setattr(fused, target, sub)
                continue
            if isinstance(mod, _EngineModule):
                mod.eg = eg  # one assignment: a concurrent call uses the old graph or the new one
            else:
                setattr(fused, target, _EngineModule(eg, single, sub))
            graphs.append(eg)
        return _boxed(fused), graphs

    return build


def _region_spec(spec, fused, target, outer_pos):
    """The ShapeSpec of one region: its value inputs renumbered to the region's arguments."""
    if spec is None or not (spec.values or spec.names):
        return spec
    node = next(n for n in fused.graph.nodes if n.op == "call_module" and n.target == target)
    values = {j: spec.values[outer_pos[a]] for j, a in enumerate(node.args)
              if a in outer_pos and outer_pos[a] in spec.values}
    names = {j: spec.names[outer_pos[a]] for j, a in enumerate(node.args)
             if a in outer_pos and outer_pos[a] in spec.names}
    return ShapeSpec(spec.gears, values, names)


def _boxed(gm):
    def run(args):
        return gm(*args)

    run._boxed_call = True
    return run
