"""The torch.compile backend: Dynamo graph -> AOTAutograd ATen graph -> engine.

Registered under the name "airgraph" through the `torch_dynamo_backends`
entry point, so `torch.compile(m, backend="airgraph")` works without importing
airgraph first.
"""
from __future__ import annotations

import functools
import logging

import torch
import torch.fx
from torch._functorch.aot_autograd import aot_module_simplified

from .compiler import CompileReport, compile_aten_graph
from .config import CompilerConfig
from .decompositions import decomposition_table

log = logging.getLogger("airgraph")

# Reports of the graphs compiled since the last reset (airgraph.explain reads them).
_REPORT_SINKS: list[list[CompileReport]] = []


def _param_positions(gm: torch.fx.GraphModule, example_inputs) -> set[int]:
    """Dynamo graph inputs that are module parameters or buffers."""
    pos = set()
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, (n, ex) in enumerate(zip(phs, example_inputs)):
        if not isinstance(ex, torch.Tensor):
            continue
        ga = n.meta.get("grapharg")
        src = ga.source.name if ga is not None and getattr(ga, "source", None) is not None else ""
        if isinstance(ex, torch.nn.Parameter) or "_parameters" in src or "_buffers" in src:
            pos.add(i)
    return pos


def _is_dynamic(example_inputs) -> bool:
    for ex in example_inputs:
        if isinstance(ex, torch.SymInt):
            return True
        if isinstance(ex, torch.Tensor) and any(not isinstance(s, int) for s in ex.shape):
            return True
    return False


def _compile(gm: torch.fx.GraphModule, example_inputs, config: CompilerConfig, params: set[int]):
    report = CompileReport()
    for sink in _REPORT_SINKS:
        sink.append(report)
    real = list(example_inputs)

    def fw_compiler(aot_gm: torch.fx.GraphModule, aot_inputs):
        n_ph = sum(1 for n in aot_gm.graph.nodes if n.op == "placeholder")
        consts = {}
        if config.freeze_parameters and n_ph == len(real):
            consts = {i: real[i] for i in params if isinstance(real[i], torch.Tensor)}
        elif params:
            log.info("airgraph: AOTAutograd changed the inputs (%d -> %d); parameters are passed per call",
                     len(real), n_ph)
        return compile_aten_graph(aot_gm, consts, config, report)

    def bw_compiler(aot_gm, aot_inputs):
        # airgraph is an inference engine; gradients run in PyTorch.
        def run(args):
            return aot_gm(*args)

        run._boxed_call = True
        return run

    return aot_module_simplified(gm, example_inputs, fw_compiler=fw_compiler, bw_compiler=bw_compiler,
                                 decompositions=decomposition_table())


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
