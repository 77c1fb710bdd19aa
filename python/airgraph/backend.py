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

import torch
import torch.fx
from torch._functorch.aot_autograd import aot_module_simplified

from .compiler import CompileReport, compile_aten_graph
from .config import CompilerConfig
from .decompositions import decomposition_table

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


def _param_positions(gm: torch.fx.GraphModule, example_inputs) -> dict[int, str]:
    """Dynamo graph inputs that are module parameters or buffers: position -> name (its source)."""
    pos = {}
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, (n, ex) in enumerate(zip(phs, example_inputs)):
        if not isinstance(ex, torch.Tensor):
            continue
        ga = n.meta.get("grapharg")
        src = ga.source.name if ga is not None and getattr(ga, "source", None) is not None else ""
        if isinstance(ex, torch.nn.Parameter) or "_parameters" in src or "_buffers" in src:
            pos[i] = _short_name(src) or n.name
    return pos


def _short_name(source: str) -> str:
    """L['self']._modules['0']._parameters['weight'] -> self.0.weight (for log messages)."""
    s = re.sub(r"\._(?:modules|parameters|buffers)\['([^']*)'\]", r".\1", source)
    return re.sub(r"^L\['([^']*)'\]", r"\1", s)


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


def _is_dynamic(example_inputs) -> bool:
    for ex in example_inputs:
        if isinstance(ex, torch.SymInt):
            return True
        if isinstance(ex, torch.Tensor) and any(not isinstance(s, int) for s in ex.shape):
            return True
    return False


def _compile(gm: torch.fx.GraphModule, example_inputs, config: CompilerConfig, params: dict[int, str]):
    report = CompileReport()
    for sink in _REPORT_SINKS:
        sink.append(report)
    real = list(example_inputs)

    def fw_compiler(aot_gm: torch.fx.GraphModule, aot_inputs):
        consts = _constants(aot_gm, real, params)
        return compile_aten_graph(aot_gm, consts, config, report, const_names=params)

    def bw_compiler(aot_gm, aot_inputs):
        # airgraph is an inference engine; gradients run in PyTorch.
        def run(args):
            return aot_gm(*args)

        run._boxed_call = True
        return run

    def aot():
        return aot_module_simplified(gm, example_inputs, fw_compiler=fw_compiler, bw_compiler=bw_compiler,
                                     decompositions=decomposition_table())

    if torch._guards.TracingContext.try_get() is None:
        # compiling at call time (_ShapeSpecializer), outside Dynamo: a context of our own, where
        # AOTAutograd leaves the input-mutation metadata that _constants reads
        with torch._guards.tracing(torch._guards.TracingContext(None)):
            return aot()
    return aot()


class _ShapeSpecializer:
    """Dynamic shapes: one static engine graph per concrete input signature.

    The IR carries symbolic dims, but kernels and the planner work on static
    shapes; each new signature is traced and compiled once and cached.
    """

    def __init__(self, gm, example_inputs, config, params):
        self.gm, self.config, self.params = gm, config, params
        self.cache = {}

    def __call__(self, *args):
        key = tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else ("s", a) for a in args)
        fn = self.cache.get(key)
        if fn is None:
            fn = _compile(self.gm, list(args), self.config, self.params)
            self.cache[key] = fn
        return fn(*args)


def airgraph_backend(gm: torch.fx.GraphModule, example_inputs, config: CompilerConfig | None = None, **kwargs):
    if config is None:
        config = CompilerConfig.from_options(kwargs.get("options"))
    params = _param_positions(gm, example_inputs)
    if _is_dynamic(example_inputs):
        return _ShapeSpecializer(gm, example_inputs, config, params)
    return _compile(gm, example_inputs, config, params)


def get_backend(config: CompilerConfig | None = None):
    """A backend for torch.compile with this configuration."""
    return functools.partial(airgraph_backend, config=config or CompilerConfig())
