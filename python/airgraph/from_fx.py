"""An ATen FX graph (all of it on the engine) to a compiled graph, by the one pipeline:

    static:   compile cache (a hit may skip the lowering and the passes) or lower_graph,
              then pipeline.compile_lowered, with the config's observers and the cache's writer
    symbolic: a SymbolicEngineGraph (symbolic.py), which builds each size the same way

Used for a whole graph and for each engine region of a partitioned one (partition.py).
"""
from __future__ import annotations

import torch.fx

from . import cache as _cache
from .config import CompilerConfig
from .graph_types import CompileReport
from .lower import lower_graph
from .pipeline import compile_lowered, observers_for
from .shapes import ShapeSpec, graph_symbols
from .symbolic import compile_symbolic


def compile_fx(gm: torch.fx.GraphModule, consts: dict, config: CompilerConfig, report: CompileReport,
               spec: ShapeSpec | None = None):
    """An EngineGraph, or a SymbolicEngineGraph (symbolic.compile_symbolic) when `gm` carries symbolic sizes (or value inputs).
    Raises Unsupported when the graph cannot be lowered whole (the caller runs it in PyTorch)."""
    if graph_symbols(gm) or (spec is not None and spec.values):
        return compile_symbolic(gm, consts, config, report, spec)
    observers = observers_for(config, gm)
    writes = gm.meta.get("airgraph_input_writes", ())
    low = None
    if _cache.usable(config):
        key, low, stage = _cache.lookup(gm, consts, config)
        if stage == _cache.OPTIMIZED:  # the passes are done too
            report.cache_graphs.append((None, low.g))
            return compile_lowered(low, config, report, optimized=True, observers=observers, writes=writes)
        observers.append(_cache.EntryWriter(config.cache_dir, key, gm, consts, report, store=low is None))
    if low is None:
        low = lower_graph(gm, consts)
    return compile_lowered(low, config, report, observers=observers, writes=writes)
