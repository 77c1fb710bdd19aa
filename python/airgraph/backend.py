"""The torch.compile backend: Dynamo graph -> AOTAutograd ATen graph -> engine.

Registered under the name "airgraph" through the `torch_dynamo_backends`
entry point, so `torch.compile(m, backend="airgraph")` works without importing
airgraph first.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import re
import time

import torch
import torch.fx
from torch._functorch.aot_autograd import aot_module_simplified
from torch._subclasses.fake_tensor import unset_fake_temporarily

from . import aot as aot_compile_support
from . import cache as _cache
from .compiler import compile_aten_graph, engine_runner
from .config import CompilerConfig
from .decompositions import decomposition_table
from .graph_types import CompileReport, phases_text
from .lowering.vision import keep_resizes_whole
from .shapes import ShapeSpec
from .subgraphs import inline_subgraphs, is_subgraph_call

log = logging.getLogger("airgraph")

# Lists that collect the CompileReport of every graph compiled while they are registered
# (airgraph.explain and the debug tools read them); use collect_reports().
_REPORT_SINKS: list[list[CompileReport]] = []


@contextlib.contextmanager
def collect_reports():
    """Collects the CompileReports of the graphs compiled inside the block, in a list."""
    sink: list[CompileReport] = []
    _REPORT_SINKS.append(sink)
    try:
        yield sink
    finally:  # by identity: another collector may hold equal contents (two empty lists, say)
        for i, s in enumerate(_REPORT_SINKS):
            if s is sink:
                del _REPORT_SINKS[i]
                break


def _input_sources(gm: torch.fx.GraphModule) -> list[tuple[torch.fx.Node, object, str]]:
    """Per Dynamo graph input: its placeholder, its GraphArg and the user's short name of it
    (L['self']._modules['0']._parameters['weight'] -> self.0.weight; "" when Dynamo names no source)."""
    out = []
    for n in gm.graph.nodes:
        if n.op != "placeholder":
            continue
        ga = n.meta.get("grapharg")
        src = ga.source.name if ga is not None and getattr(ga, "source", None) is not None else ""
        out.append((n, ga, _short_name(src) if src else ""))
    return out


def _param_positions(sources, example_inputs) -> dict[int, str]:
    """Dynamo graph inputs that are module parameters or buffers: position -> name (its source)."""
    pos = {}
    for i, ((n, ga, name), ex) in enumerate(zip(sources, example_inputs)):
        if not isinstance(ex, torch.Tensor):
            continue
        src = ga.source.name if name else ""
        if isinstance(ex, torch.nn.Parameter) or "_parameters" in src or "_buffers" in src:
            pos[i] = name or n.name
    return pos


_SOURCE_PARTS = re.compile(r"\._(?:modules|parameters|buffers)\['([^']*)'\]|^L\['([^']*)'\]")


def _short_name(source: str) -> str:
    """L['self']._modules['0']._parameters['weight'] -> self.0.weight (for log messages)."""
    return _SOURCE_PARTS.sub(lambda m: "." + m.group(1) if m.group(1) is not None else m.group(2), source)


def _mutated_inputs(aot_gm: torch.fx.GraphModule) -> set[int] | None:
    """Inputs the graph itself writes (BatchNorm's running stats in train mode, say): AOTAutograd
    functionalizes those writes into extra outputs copied back after each call, so such an input
    must be read per call, never bound as a constant. None when AOTAutograd's metadata is missing."""
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None) if ctx is not None else None
    if meta is None:
        return None
    out = {i for i, info in enumerate(meta.input_info)
           if info.mutates_data or info.mutates_metadata or getattr(info, "mutates_storage_metadata", False)}
    # Mutations kept inside the graph (keep_input_mutations): an op that writes a placeholder.
    phs = {n: i for i, n in enumerate(n for n in aot_gm.graph.nodes if n.op == "placeholder")}
    for n in aot_gm.graph.nodes:
        if n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload):
            continue
        schema = n.target._schema
        if not schema.is_mutable:
            continue
        vals = list(n.args) + [n.kwargs.get(a.name) for a in schema.arguments[len(n.args):]]
        for a, v in zip(schema.arguments, vals):
            if a.alias_info is not None and a.alias_info.is_write and v in phs:
                out.add(phs[v])
    return out


def _flat_inputs(aot_gm: torch.fx.GraphModule, real: list, params: dict[int, str]):
    """The ATen graph's inputs where AOTAutograd passes a tensor subclass's inner tensors in its place
    (torchao's quantized weights: Int8Tensor's qdata, scale and zero_point), with the parameters'
    positions among them (name.qdata, ...), so that those inner tensors are bound as constants like
    any weight (read in place, checked per call). None unless the flattening matches the graph's
    placeholders one for one (count, dtype and static shape of every parameter's tensor). Also
    where each other input went: old position -> new."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass
    flat, names, moved = [], {}, {}

    def add(t, name):
        if isinstance(t, torch.Tensor) and is_traceable_wrapper_subclass(t):
            attrs, _ = t.__tensor_flatten__()
            for a in attrs:
                add(getattr(t, a), f"{name}.{a}" if name is not None else None)
            return
        if name is not None:
            names[len(flat)] = name
        flat.append(t)

    for i, t in enumerate(real):
        if not (isinstance(t, torch.Tensor) and is_traceable_wrapper_subclass(t)):
            moved[i] = len(flat)
        add(t, params.get(i))
    phs = [n for n in aot_gm.graph.nodes if n.op == "placeholder"]
    if len(phs) != len(flat):
        return None
    for i in names:
        v, t = phs[i].meta.get("val"), flat[i]
        if not (isinstance(v, torch.Tensor) and isinstance(t, torch.Tensor) and v.dtype == t.dtype
                and all(type(d) is int for d in v.shape) and tuple(v.shape) == tuple(t.shape)):
            return None
    return flat, names, moved


def _constants(aot_gm: torch.fx.GraphModule, real: list, params: dict[int, str]) -> dict[int, torch.Tensor]:
    """The parameters and buffers to bind as engine constants: position -> tensor."""
    if not params:
        return {}
    n_ph = sum(1 for n in aot_gm.graph.nodes if n.op == "placeholder")
    if n_ph != len(real):
        log.info("airgraph: AOTAutograd changed the inputs (%d -> %d); parameters are passed per call",
                 len(real), n_ph)
        return {}
    mutated = _mutated_inputs(aot_gm)
    if mutated is None:
        log.info("airgraph: no input-mutation metadata from AOTAutograd; parameters are passed per call")
        return {}
    consts = {}
    for i, name in params.items():
        t = real[i]
        if not isinstance(t, torch.Tensor):
            continue
        if i in mutated:
            log.info("airgraph: %s is written by the graph; it is read per call, not bound as a constant", name)
        elif t.is_inference():
            # no version counter: an in-place change could not be seen
            log.info("airgraph: %s is an inference tensor; it is read per call, not bound as a constant", name)
        else:
            consts[i] = t
    return consts


def _fold_attribute_floats(gm: torch.fx.GraphModule, sources) -> tuple[set[int], list[str]]:
    """Python floats read from an attribute (a norm's eps, attention's scale) become constants of
    the graph, guarded by value, as Dynamo makes them when it specializes a float.

    With dynamic=True Dynamo passes every float as a 0-d tensor and `.item()`s it in the graph;
    AOTAutograd's tensorify pass then specializes those it cannot turn into tensor ops (SDPA's
    `scale` always) and restarts the whole trace: Dynamo again, AOTAutograd again (15 of the
    53 s of a 20-layer decoder's first generate()). Folding them here, with a guard on each value
    (guard_scalar: the frame is retraced when an attribute changes) and the symbol marked as
    specialized so that tensorify does not restart, costs nothing; the 0-d input stays, unused.
    Floats passed as arguments stay symbolic (one graph for every value). Returns the positions
    of the inputs folded and the symbols marked, to unmark once the graph is compiled (Dynamo keeps
    its marks until torch._dynamo.reset(), where another frame's float of the same name would find
    them)."""
    try:
        from torch._dynamo.source import AttrSource
        from torch._dynamo.symbolic_convert import TensorifyState
        from torch.fx.experimental.symbolic_shapes import guard_scalar
    except ImportError:  # pragma: no cover - torch internals moved: tensorify restarts as before
        return set(), []
    folded, marked = set(), []
    for i, (n, ga, _) in enumerate(sources):
        if not getattr(ga, "pass_arg_as_tensor", False) or not isinstance(getattr(ga, "source", None), AttrSource):
            continue
        memo = getattr(n.meta.get("example_value"), "item_memo", None)
        sym = getattr(getattr(getattr(memo, "node", None), "_expr", None), "name", None)
        users = list(n.users)
        if sym is None or not users or not all(u.op == "call_method" and u.target == "item" for u in users):
            continue
        value = guard_scalar(memo)
        for u in users:
            u.replace_all_uses_with(value)
            gm.graph.erase_node(u)
        if not TensorifyState.should_specialize(sym):
            TensorifyState.specialize(sym)
            marked.append(sym)
        folded.add(i)
    if folded:
        gm.recompile()
    return folded, marked


def _float_operands(gm: torch.fx.GraphModule, sources) -> bool:
    """Whether a repeated block's call (invoke_subgraph) takes a Python float Dynamo passes as a 0-d tensor."""
    floats = {n for n, ga, _ in sources if getattr(ga, "pass_arg_as_tensor", False)}
    return bool(floats) and any(is_subgraph_call(n) and any(a in floats for a in n.args[2:]) for n in gm.graph.nodes)


def _unmark_floats(marked: list[str]) -> None:
    if marked:
        from torch._dynamo.symbolic_convert import TensorifyState

        for sym in marked:
            TensorifyState.force_specializations.discard(sym)


def _shape_spec(sources, example_inputs, folded: set[int] = frozenset()) -> ShapeSpec:
    """What the Dynamo graph's inputs say beyond the ATen graph, in one pass over them: the gears
    from airgraph.set_dim_gears (Symbol -> allowed sizes), the Python floats Dynamo passes as 0-d
    tensors (dynamic=True unspecializes floats passed as arguments: position -> example value; the
    attributes' are `folded`, constants of the graph), and the user's names of the inputs
    (L['input_ids'] -> input_ids, for messages)."""
    spec = ShapeSpec()
    for i, ((n, ga, name), ex) in enumerate(zip(sources, example_inputs)):
        if name:
            spec.names[i] = name
        if getattr(ga, "pass_arg_as_tensor", False) and isinstance(ex, torch.Tensor) and ex.dim() == 0 \
                and i not in folded:
            spec.values[i] = ex.item()
        gears = getattr(getattr(ga, "example", None), "_airgraph_dim_gears", None)
        fake = n.meta.get("example_value")  # the traced (symbolic) sizes; example_inputs are real
        if not gears or not isinstance(fake, torch.Tensor):
            continue
        for d, sizes in gears.items():
            s = fake.shape[d]
            if isinstance(s, torch.SymInt) and s.node.expr.is_Symbol:
                spec.gears[s.node.expr] = sorted(set(sizes) | set(spec.gears.get(s.node.expr, [])))
            else:
                log.warning("airgraph: set_dim_gears on dim %d of %s: the traced size %s is not a plain symbol; "
                            "the gears are ignored", d, n.name, s)
    return spec


def set_dim_gears(t: torch.Tensor, dim_gears: dict[int, list[int]]):
    """Declares that dims of `t` only take the listed sizes (TorchAir's set_dim_gears): the
    compiled graph is traced once with those dims symbolic, an engine program is built for every
    gear when compiling, and a call with another size raises an error naming the dim and the sizes.

        airgraph.set_dim_gears(input_ids, {1: [32, 64, 128]})
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"set_dim_gears takes a tensor, got {type(t).__name__}")
    spec = {}
    for d, sizes in dim_gears.items():
        if not isinstance(d, int) or not -t.dim() <= d < t.dim():
            raise ValueError(f"set_dim_gears: dim {d} is out of range for a {t.dim()}-d tensor")
        sizes = sorted({int(s) for s in sizes})
        if not sizes or sizes[0] < 2:
            raise ValueError(f"set_dim_gears: dim {d} needs sizes >= 2 (Dynamo specializes sizes 0 and 1), "
                             f"got {sizes}")
        d = d % t.dim()
        spec[d] = sizes
        torch._dynamo.mark_dynamic(t, d, min=sizes[0], max=sizes[-1])
    t._airgraph_dim_gears = {**getattr(t, "_airgraph_dim_gears", {}), **spec}


_CLAIMED: dict = {}  # Dynamo timer -> (its list, length, latest entry) a report took (_dynamo_seconds)


def _dynamo_seconds(timer: str) -> float | None:
    """The latest entry of one of Dynamo's own timers (torch._dynamo.utils.compilation_time_metrics:
    "bytecode_tracing" ends just before the backend is called, "build_guards" just before the graph's
    first call), once: a frame that made several graphs has one entry, which its first graph takes.
    None where this torch keeps no such timer."""
    try:
        entries = torch._dynamo.utils.compilation_time_metrics.get(timer)
    except AttributeError:
        return None
    if not entries:
        return None
    seen = _CLAIMED.get(timer)
    if seen is not None and seen[0] is entries and seen[1] == len(entries) and seen[2] is entries[-1]:
        return None  # (the same latest entry; torch._dynamo.reset() empties or replaces the list)
    _CLAIMED[timer] = (entries, len(entries), entries[-1])
    return float(entries[-1])


def _report_guards_on_first_call(compiled, report: CompileReport):
    """Dynamo builds a frame's guards after the backend returns and before the graph's first call:
    the first call reads how long that took into the report, logs the cold start's split and puts
    the plain callable back (later calls pay nothing)."""
    inner = compiled.fn

    def first(*args, **kwargs):
        compiled.fn = inner
        s = _dynamo_seconds("build_guards")
        if s is not None:
            report.add_phase("guards", s)
        log.info("airgraph: graph(s) %s cold start: %s", ", ".join(f"graph_{g.gid}" for g in report.graphs) or "-",
                 phases_text(report.phases))
        return inner(*args, **kwargs)

    compiled.fn = first
    return compiled


def _compile(gm: torch.fx.GraphModule, example_inputs, config: CompilerConfig, params: dict[int, str],
             spec: ShapeSpec | None = None, inlined: int = 0):
    t_entry = time.perf_counter()
    report = CompileReport(inlined_subgraphs=inlined)
    traced = _dynamo_seconds("bytecode_tracing")
    if traced is not None:
        report.add_phase("dynamo", traced)
    for sink in _REPORT_SINKS:
        sink.append(report)
    real = list(example_inputs)
    # what torch's aot_compile needs to save the result (airgraph/aot.py)
    state = {"report": report, "config": config}
    # the compile cache's entry for this Dynamo graph: a hit skips AOTAutograd too (airgraph/cache.py)
    dkey, t0 = None, time.perf_counter()
    if _cache.usable(config) and (spec is None or not (spec.values or spec.gears)):
        with unset_fake_temporarily():  # (Dynamo calls backends with its fake mode on)
            dkey = _cache.dynamo_key(gm, real, params, config)
    key_ms = (time.perf_counter() - t0) * 1000
    if dkey is not None:
        with unset_fake_temporarily():
            hit = _cache.load_dynamo(config.cache_dir, dkey, real, params, config, report, engine_runner)
        if hit is not None:
            run, state["cached"] = hit  # (torch's aot_compile saves the entry's lowered graph)
            report.compile_ms = (time.perf_counter() - t0) * 1000
            report.add_phase("lowering", report.compile_ms / 1000 - report.phases.get("passes", 0.0)
                             - report.phases.get("kernels", 0.0))  # (reading the entry)
            return _report_guards_on_first_call(aot_compile_support.wrap(lambda *args: run(args), state), report)

    def fw_compiler(aot_gm: torch.fx.GraphModule, aot_inputs):
        t_fw = time.perf_counter()
        try:
            return _fw_compiler(aot_gm, aot_inputs)
        finally:
            state["fw_s"] = state.get("fw_s", 0.0) + time.perf_counter() - t_fw

    def _fw_compiler(aot_gm: torch.fx.GraphModule, aot_inputs):
        # repeated blocks (nested_compile_region's invoke_subgraph calls) become plain nodes first:
        # everything below reads the graph as the unmarked model gives it
        report.inlined_subgraphs += inline_subgraphs(aot_gm)
        n_ph = sum(1 for n in aot_gm.graph.nodes if n.op == "placeholder")
        flat = _flat_inputs(aot_gm, real, params) if n_ph != len(real) and params else None
        const_names = flat[1] if flat else params
        consts = _constants(aot_gm, flat[0] if flat else real, const_names)
        s = spec
        if s is not None and flat:  # the subclasses' inner tensors took their places: renumbered
            s = ShapeSpec(s.gears, {flat[2][i]: v for i, v in s.values.items() if i in flat[2]},
                          {flat[2][i]: v for i, v in s.names.items() if i in flat[2]}, s.symbol_names)
        elif s is not None and n_ph != len(real):
            s = ShapeSpec(s.gears)  # AOTAutograd renumbered the inputs: the values stay inputs, no names
        # reason: why AOTAutograd's wrapper does more than call the graph (torch's aot_compile and the
        # Dynamo-level cache entry need it to do nothing); saved_reason: the same except for outputs that
        # are an input itself, which a saved graph returns as the wrapper does (airgraph/saved_graph.py)
        input_outputs = {}
        saved_reason = aot_compile_support.aot_wrapper_reason(aot_gm, input_outputs) or (
            "AOTAutograd changed the inputs" if n_ph != len(real) else None)
        state.update(gm=aot_gm, consts=consts, input_outputs=input_outputs, saved_reason=saved_reason,
                     reason=saved_reason or (f"an output aliases an input or another output (outputs "
                                             f"{sorted(input_outputs)} are inputs)" if input_outputs else None))
        with _cache.deferring_stores() as aten_entries:
            out = compile_aten_graph(aot_gm, consts, config, report, const_names=const_names, spec=s)
        report.compile_ms += key_ms
        # one entry per graph: the Dynamo graph's where it can be kept, else the ATen graph's
        with unset_fake_temporarily():
            _write_entries(aot_gm, consts, aten_entries)
        report.cache_graphs[:] = []  # (the graphs kept for the entry are not needed any more)
        ctx = torch._guards.TracingContext.try_get()
        state["seen_by_autograd"] = getattr(getattr(ctx, "fw_metadata", None),
                                            "mutated_graph_handled_indices_seen_by_autograd", None)
        state["run"] = out
        return out

    def _write_entries(aot_gm, consts, aten_entries):
        if not (dkey is not None and state["reason"] is None and report.engine_graphs == 1
                and not aot_gm.meta.get("airgraph_passthrough")
                and len(report.graphs) == 1 and not report.symbolic and all(n.native for n in report.nodes)
                and _cache.store_dynamo(config.cache_dir, dkey, aot_gm, report, consts,
                                        aot_gm.meta.get("airgraph_input_writes", ()))):
            for write in aten_entries:
                write()

    def bw_compiler(aot_gm, aot_inputs):
        # airgraph is an inference engine; gradients run in PyTorch.
        state["reason"] = state["saved_reason"] = "a training graph (gradients were enabled for an input or a parameter)"
        def run(args):
            return aot_gm(*args)

        run._boxed_call = True
        return run

    def aot():
        try:
            return _aot()
        except BaseException:
            # a trace that never became a graph (Dynamo restarting its analysis, say) leaves no report
            for sink in _REPORT_SINKS:
                for i, r in enumerate(sink):
                    if r is report:
                        del sink[i]
                        break
            raise

    def _aot():
        # keep_inference_input_mutations: an inference graph's writes to its inputs (a static KV
        # cache's index_copy_) stay in the graph as copy_ nodes, so the engine can make them in the
        # input's own memory (compiler.take_input_writes) instead of AOTAutograd's wrapper copying
        # a functional result back after every call
        # AOTAutograd's own cache stores Inductor's compiled code only (torch's aot_compile switches
        # it on): airgraph's result is saved through aot_compile_support instead
        off = {k: False for k in ("force_autograd_cache", "bundled_autograd_cache")
               if hasattr(torch._functorch.config, k)}
        for m in gm.modules():  # (and in the repeated blocks' subgraphs, which AOTAutograd traces again)
            if isinstance(m, torch.fx.GraphModule):
                keep_resizes_whole(m)  # (F.interpolate the engine runs whole, instead of its decomposition)
        with torch._functorch.config.patch(off):
            compiled = aot_module_simplified(gm, example_inputs, fw_compiler=fw_compiler, bw_compiler=bw_compiler,
                                             decompositions=decomposition_table(),
                                             keep_inference_input_mutations=True)
        # AOTAutograd: the backend's time but for airgraph's own (the cache key, the graph's compile)
        report.add_phase("aot", time.perf_counter() - t_entry - state.get("fw_s", 0.0) - key_ms / 1000)
        report.add_phase("lowering", key_ms / 1000)
        run = state.get("run")
        if run is not None and _wrapper_idle(state, real):
            # AOTAutograd's runtime wrapper would only call the graph (12-20 us a call): Dynamo calls ours
            # directly, as it does on a compile-cache hit (the same callable; the argument tuple as it
            # comes: nothing on our side writes into the argument list)
            return _report_guards_on_first_call(aot_compile_support.wrap(lambda *args: run(args), state), report)
        return _report_guards_on_first_call(aot_compile_support.wrap(compiled, state), report)

    return aot()


def _wrapper_idle(state: dict, real: list) -> bool:
    """Whether AOTAutograd's runtime wrapper does nothing for this inference graph but call it:
    nothing it must rebuild or copy back (state["reason"], aot.aot_wrapper_reason, the same test as a
    compile-cache entry's), no autograd (no input requiring grad under grad mode: then there is a
    backward, and the wrapper is autograd's function), no autocast to switch off around the call, and no
    input write whose version counter the wrapper would bump for autograd. Dynamo's guards hold grad
    mode and autocast as they were here."""
    if state.get("reason") is not None or state.get("seen_by_autograd") != []:
        return False
    if torch._C._is_any_autocast_enabled():
        return False
    return not (torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in real))


def airgraph_backend(gm: torch.fx.GraphModule, example_inputs, config: CompilerConfig | None = None, **kwargs):
    if config is None:
        config = CompilerConfig.from_options(kwargs.get("options"))
    sources, inlined = _input_sources(gm), 0
    if _float_operands(gm, sources):
        # a repeated block (nested_compile_region) that reads Python floats passed as 0-d tensors
        # (dynamic=True: a norm's eps, attention's scale): AOTAutograd cannot trace the block's `.item()`
        # (torch's own backends fail the same way), so its calls are inlined here, before AOTAutograd,
        # and the floats folded as in any graph (Dynamo still traced the block once)
        n = inlined = inline_subgraphs(gm)
        log.info("airgraph: %d repeated block call(s) inlined before AOTAutograd: they read Python floats passed "
                 "as tensors (dynamic=True)", n)
        sources = _input_sources(gm)
    folded, marked = _fold_attribute_floats(gm, sources)
    params = _param_positions(sources, example_inputs)
    # Symbolic sizes (dynamic=True, a second size, mark_dynamic, set_dim_gears) are traced once:
    # the engine builds a program per size binding from that one ATen graph (compiler.SymbolicEngineGraph).
    try:
        return _compile(gm, example_inputs, config, params, _shape_spec(sources, example_inputs, folded), inlined)
    finally:  # (AOTAutograd's tensorify pass, which reads the marks, has run by now)
        _unmark_floats(marked)


def get_backend(config: CompilerConfig | None = None):
    """A backend for torch.compile with this configuration."""
    return functools.partial(airgraph_backend, config=config or CompilerConfig())
