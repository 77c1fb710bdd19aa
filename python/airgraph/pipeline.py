"""The one compile pipeline: a lowered graph and a config in, an immutable compiled graph out.

    compile_lowered(low, config, report)   lowered -> passes -> compile -> plan the call

Every entry uses it: torch.compile (static graphs, each size of a symbolic graph, gears), a
compile-cache hit (which may bring the graph after the passes: optimized=True), torch's
aot_compile load (aot.py) and airgraph.load (export.py). `compile_graph` is the same for a graph
that may carry symbolic sizes: a static one gives an EngineGraph, a symbolic one a `SizedGraph`,
which builds one EngineGraph per size binding through compile_lowered and keeps them in the one
per-size program cache (programs.py).

Debug output, profiles and the compile cache are observers of the stages, not branches in the
pipeline: an observer implements any of

    lowered(gid, low)            before the passes (low.g is the graph as lowered)
    after_pass(name, g)          after each pass (only asked for when some observer has it)
    optimized(gid, low, stats)   after the passes (the last moment the graph can change:
                                 a data dump exposes its values here)
    compiled(eg)                 the EngineGraph, before its first call
    called(eg, n, args, inputs, outputs)   every call (n from 1); an observer with it keeps the
                                 graph's calls on the checked path

`observers_for(config, gm)` gives the ones the config asks for (graph and data dumps, profiles);
the compile cache's writer (cache.EntryWriter) is added by the entry that missed the cache.
"""
from __future__ import annotations

import logging
import os
import time

import torch.fx

from ._core import C
from .config import CompilerConfig
from .debug import dump as _dump
from .engine_graph import GRAPH_IDS, EngineGraph
from .graph_types import CompileReport, Lowered
from .programs import ProgramCache

log = logging.getLogger("airgraph")


def _log_budget_spent(gid: int, config: CompilerConfig, before) -> None:
    """Says when graph_<gid>'s linears read their weights in place because they do not fit what is left
    of pack_budget_mb (the process-wide count moved while the graph was built; graphs built at once on
    other threads can add theirs)."""
    n, nbytes = (a - b for a, b in zip(C.pack_budget_refused(), before))
    if n > 0:
        log.info("airgraph: graph_%d: %d linear(s) read their weights in place, slower than packed: their %.0f MB "
                 "do not fit what is left of pack_budget_mb=%d (%.0f MB of packed copies held in this process); a "
                 "larger budget packs them, at that much more memory", gid, n, nbytes / 2**20,
                 config.pack_budget_mb, C.pack_budget_used() / 2**20)


class Shared:
    """What the programs of one symbolic graph share: weights packed once for every size, kernels
    reused where a node and its shapes were seen before, and one arena (of the largest size seen)
    per concurrent caller."""

    def __init__(self):
        self.prepack_cache = C.PrepackCache()
        self.kernel_cache = C.KernelCache()
        self.arena = C.ArenaSource()


def compile_lowered(low: Lowered, config: CompilerConfig, report: CompileReport, *, optimized: bool = False,
                    observers=(), shared: Shared | None = None, keep_text: bool = True, writes=()) -> EngineGraph:
    """Runs the passes on `low.g` (in place; not when `optimized`: they ran before), compiles it and returns the EngineGraph; adds it to `report`. keep_text: keep the optimized
    graph's text (the other sizes of a symbolic graph skip it); writes: the graph's input writes."""
    t0 = time.perf_counter()
    gid = next(GRAPH_IDS)
    g = low.g
    for o in observers:
        if hasattr(o, "lowered"):
            o.lowered(gid, low)
    stats = []
    if not optimized:
        hooks = [o.after_pass for o in observers if hasattr(o, "after_pass")]
        after = None if not hooks else hooks[0] if len(hooks) == 1 else _Hooks(hooks)
        tp = time.perf_counter()
        stats = run_passes(g, config, after)
        report.add_phase("passes", time.perf_counter() - tp)
    for o in observers:
        if hasattr(o, "optimized"):
            o.optimized(gid, low, stats)
    text = str(g) if keep_text else ""
    s = shared
    tk = time.perf_counter()
    refused = C.pack_budget_refused()
    exe = g.compile(config.allow_inplace, config.fault_node, s and s.prepack_cache, s and s.arena,
                    s and s.kernel_cache, config.background_packing, config.pack_rows(),
                    config.int8_activations != "off", config.pack_budget())
    report.add_phase("kernels", time.perf_counter() - tk)
    _log_budget_spent(gid, config, refused)
    watchers = [o for o in observers if hasattr(o, "called")]
    watch = None if not watchers else watchers[0] if len(watchers) == 1 else _Watchers(watchers)
    eg = EngineGraph(gid, exe, low, config.num_threads, text, watch, writes)
    for o in observers:
        if hasattr(o, "compiled"):
            o.compiled(eg)
    report.engine_graphs += 1
    report.graphs.append(eg)
    report.pass_stats.append(stats)
    report.exec_stats.append(exe.stats())
    report.compile_ms += (time.perf_counter() - t0) * 1000
    log.debug("airgraph: graph_%d compiled: %s; passes %s", gid, exe.stats(), stats)
    return eg


def run_passes(g, config: CompilerConfig, after_pass=None) -> list:
    """The C++ pass pipeline on `g`, in place, as `config` sets it; returns the pass statistics."""
    return g.optimize(set(config.disable_passes), config.fold_max_bytes, after_pass)


class _Hooks:
    """Several observers' hooks of one stage, called in order."""

    def __init__(self, hooks):
        self.hooks = hooks

    def __call__(self, *a):
        for h in self.hooks:
            h(*a)


class _Watchers:
    def __init__(self, watchers):
        self.called = _Hooks([w.called for w in watchers])


class Profiler:
    """Observer: records per-node times of every call into eg.profiles (airgraph.debug.profile)."""

    def compiled(self, eg):
        eg.exe.set_profiling(True)

    def called(self, eg, n, args, inputs, outputs):
        eg.profiles.append((eg.exe.last_starts_ns(), eg.exe.last_times_ns()))  # (deque: thread-safe)


def observers_for(config: CompilerConfig, gm: torch.fx.GraphModule | None = None) -> list:
    """The observers `config` asks for: graph dumps, data dumps (with `gm`, the FX graph the engine
    graph was lowered from, when there is one), profiles."""
    obs = []
    if config.dump_graph:
        obs.append(_dump.GraphDump(config.dump_dir, gm))
    if config.dump_data:
        obs.append(_dump.DataDump(config.dump_dir, config.dump_filter, config.dump_format, gm))
    if config.profile:
        obs.append(Profiler())
    return obs


# ----------------------------------------------------------------------------- symbolic sizes


class SizedGraph:
    """A compiled graph with symbolic sizes: one EngineGraph per binding of its symbols, built by
    compile_lowered on the first call that needs it and kept in a ProgramCache (up to
    config.dynamic_sizes bindings, least recently used first out). `lowered_at(key)` gives the
    (Lowered, whether its passes have run) of a binding."""

    def __init__(self, lowered_at, config: CompilerConfig, report: CompileReport, observers=()):
        self.lowered_at, self.config, self.report, self.observers = lowered_at, config, report, list(observers)
        self.shared = Shared()
        self.programs = ProgramCache(self._build, config.dynamic_sizes)
        self.first = True

    def _build(self, key):
        low, optimized = self.lowered_at(key)
        first, self.first = self.first, False  # (under the cache's lock)
        return compile_lowered(low, self.config, self.report if first else CompileReport(), optimized=optimized,
                               observers=self.observers, shared=self.shared, keep_text=first)


def compile_graph(low: Lowered, config: CompilerConfig, report: CompileReport | None = None, observers=()):
    """An EngineGraph for a static `low`, or a SizedGraph for one with symbolic sizes (a graph
    lowered once for every size: each binding is its instance at those sizes)."""
    report = report if report is not None else CompileReport()
    if not low.g.symbols():
        return compile_lowered(low, config, report, observers=observers)

    return SizedGraph(lambda key: (low.instance(list(key)), False), config, report, observers)
