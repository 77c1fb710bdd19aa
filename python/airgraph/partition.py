"""The fallback: a graph whose nodes the engine cannot all run is split. Every call node is checked
alone (lower.check_support); if all are supported the whole graph becomes one engine graph,
otherwise the supported nodes are grouped into maximal regions (torch.fx's
CapabilityBasedPartitioner), each region runs on the engine and the rest of the graph stays in
PyTorch. The engine graphs are built by from_fx.compile_fx and bound to the weights by a
weights.Binder, which rebuilds the graph(s) that use a weight when it changes.
"""
from __future__ import annotations

import logging
import time

import torch
import torch.fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupport

from ._core import EngineError
from .config import CompilerConfig
from .debug.eager import eager_runner
from .from_fx import compile_fx
from .graph_types import CompileReport, InputMismatch, get_attr_tensor
from .lower import check_support
from .lowering import Unsupported
from .shapes import ShapeSpec
from .weights import bind_weights

log = logging.getLogger("airgraph")


def compile_partitioned(gm: torch.fx.GraphModule, consts: dict, config: CompilerConfig, report: CompileReport,
                        const_names: dict | None, spec: ShapeSpec | None, t0: float):
    """The boxed callable that runs `gm`: whole on the engine, or partitioned, or (run_eagerly) in
    PyTorch. (A graph with symbolic sizes is decided at its traced sizes: the caller binds them.)"""
    if config.run_eagerly:
        return eager_runner(gm, config, report)
    reports, supported = check_support(gm)
    report.nodes.extend(reports)
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    unsupported = [n for n in calls if n not in supported]
    if unsupported and not config.fallback:
        n = unsupported[0]
        r = next(r for r in report.nodes if r.name == n.name)
        raise EngineError(f"FX node {n.name} ({r.target}) cannot run on the engine: {r.reason}\n  at {r.source}")

    if not unsupported:
        try:
            run = bind_weights(_whole_graph_builder(gm, config, spec), consts, const_names, config, report)
            report.compile_ms = (time.perf_counter() - t0) * 1000
            return run
        except Unsupported as e:
            # the graph's boundary (an output that is not a tensor, say): every node is supported, so
            # one region holds them all and the FX graph around it passes the rest through
            log.info("airgraph: the graph runs as one engine region inside its FX graph: %s", e)
            report.engine_graphs, report.graphs[:], report.pass_stats[:], report.exec_stats[:] = 0, [], [], []
            report.cache_graphs[:] = []

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
    run = bind_weights(_regions_builder(fused, regions, config, spec, outer_pos),
                       {i: t for i, t in consts.items() if i in used}, const_names, config, report)
    fused.recompile()
    report.compile_ms = (time.perf_counter() - t0) * 1000
    return run


def _whole_graph_builder(gm, config, spec):
    def build(consts, changed, prev, report):
        if prev is None:
            eg = compile_fx(gm, consts, config, report, spec)  # Unsupported: the caller runs gm in PyTorch
            return eg.run, [eg]
        try:
            eg = compile_fx(gm, consts, config, report, spec)
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
                eg = compile_fx(sub, sub_consts, config, report, _region_spec(spec, fused, target, outer_pos))
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

    def __init__(self, eg, single: bool, sub: torch.fx.GraphModule):
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
