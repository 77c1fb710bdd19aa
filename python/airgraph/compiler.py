"""From an ATen FX graph to a callable that runs on the C++ engine: the entries of the front.

    compile_aten_graph   torch.compile's (backend.py): an AOTAutograd inference graph
    engine_runner        a graph that comes from a file (a compile-cache hit of a whole Dynamo
                         graph, torch's aot_compile artifacts): no FX graph, a lowered graph

Both end in the one pipeline (pipeline.compile_lowered). The steps, each in its own module:

1. lower.py: every call node is checked alone (can it be lowered, and does the engine infer the
   dtype and shape PyTorch traced?) and the graph is lowered into an engine graph.
2. partition.py: if all nodes are supported the whole graph becomes one engine graph; otherwise
   the supported nodes form maximal regions on the engine and the rest stays in PyTorch.
3. from_fx.py, pipeline.py: each engine graph goes through the compile cache, the C++ passes and
   the compile into an EngineGraph (engine_graph.py); symbolic sizes: symbolic.py, shapes.py.
4. weights.py: parameters are bound as constants (zero-copy DLPack); unless the user promised
   frozen_parameters, every call checks that they are unchanged and rebuilds the engine graph(s)
   that use a changed one.
"""
from __future__ import annotations

import time

import torch.fx
from torch._subclasses.fake_tensor import unset_fake_temporarily

from .config import CompilerConfig
from .graph_types import CompileReport
from .lower import size_value, take_input_writes, take_passthrough_outputs
from .lowering import bound_sizes
from .partition import compile_partitioned
from .pipeline import compile_lowered, observers_for
from .shapes import ShapeSpec, graph_symbols, hint_sizes
from .subgraphs import inline_subgraphs
from .weights import bind_weights

# (bench/run.py, bench/generate.py and bench/weight_checks.py read these here: the graphs to time
# their runs, the weight guard's parts to time them alone)
from .engine_graph import EngineGraph  # noqa: E402,F401
from .graph_types import DATA_PTR_FN as _DATA_PTR_FN  # noqa: E402,F401
from .symbolic import SymbolicEngineGraph  # noqa: E402,F401
from .weights import _PyWeightGuard, _version_layout  # noqa: E402,F401


def compile_aten_graph(gm: torch.fx.GraphModule, consts: dict[int, torch.Tensor], config: CompilerConfig,
                       report: CompileReport, const_names: dict[int, str] | None = None,
                       spec: ShapeSpec | None = None):
    """Returns a boxed callable (takes a list of args) that runs `gm`.

    consts: argument position -> parameter or buffer to bind as a constant (checked on every
    call unless config.frozen_parameters); const_names: position -> name, for log messages."""
    # AOTAutograd may call us with its fake mode active; constants we make must be real.
    t0, before = time.perf_counter(), report.phases.get("passes", 0.0) + report.phases.get("kernels", 0.0)
    with unset_fake_temporarily():
        report.inlined_subgraphs += inline_subgraphs(gm)  # (nested_compile_region's calls: plain nodes)
        writes = take_input_writes(gm)  # (output indices of the whole output list)
        passthrough = take_passthrough_outputs(gm)
        run = _compile_aten_graph(gm, consts, config, report, const_names, spec)
    # lowering: all of it but the passes and the kernels (the partitioning and cache work included)
    engine = report.phases.get("passes", 0.0) + report.phases.get("kernels", 0.0) - before
    report.add_phase("lowering", time.perf_counter() - t0 - engine)
    if passthrough:
        run = with_passthrough(run, passthrough)
    return _writing_inputs(run, writes) if writes else run


def _compile_aten_graph(gm, consts, config, report, const_names, spec=None):
    t0 = time.perf_counter()
    if graph_symbols(gm):
        # which nodes the engine takes is decided at the traced sizes
        with bound_sizes(hint_sizes(gm)):
            return compile_partitioned(gm, consts, config, report, const_names, spec, t0)
    return compile_partitioned(gm, consts, config, report, const_names, spec, t0)


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

    return _boxed_like(call, run)


def with_passthrough(run, taken):
    """The boxed callable of a graph whose number outputs were taken out
    (lower.take_passthrough_outputs): puts each argument, or each size computed from the arguments,
    back at its output index."""
    def call(args):
        outs = list(run(args))
        for k, p in taken:  # (ascending output indices: each lands where it was)
            outs.insert(k, args[p] if type(p) is int else size_value(p, args))
        return outs

    return _boxed_like(call, run)


def _boxed_like(call, run):
    """`call`, a wrapper of the boxed callable `run`, marked boxed and carrying run's engine graphs
    and weight binder (the debug tools and benchmarks read them)."""
    call._boxed_call = True
    for attr in ("engine_graphs", "binder"):
        if hasattr(run, attr):
            setattr(call, attr, getattr(run, attr))
    return call


def engine_runner(writes, consts: dict, names: dict, config: CompilerConfig, report: CompileReport, lowered_for):
    """The boxed callable of a graph that comes from a file, not from an FX graph (torch's
    aot_compile artifacts, the compile cache): `lowered_for(consts)` gives (Lowered, whether its
    passes have run) for a binding of the weights (called again when a bound weight changes)."""
    writes = [tuple(w) for w in writes]

    def build(consts, changed, prev, report):
        low, optimized = lowered_for(consts)
        eg = compile_lowered(low, config, report, optimized=optimized, observers=observers_for(config), writes=writes)
        return eg.run, [eg]

    run = bind_weights(build, consts, names, config, report)
    return _writing_inputs(run, writes) if writes else run
