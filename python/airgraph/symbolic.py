"""A graph with symbolic sizes from torch.compile (`SymbolicEngineGraph`): one static engine
program per binding of its symbols, built through the pipeline on the first call that needs it and
kept in the per-size program cache (programs.py).

The graph is lowered once for every size where it can be (lowering/sizes.py records the sizes as
expressions of the symbols; the recording is checked against a lowering at other sizes), and its
passes run once where they decide alike at every size checked; the compile cache keeps that
template. Where either is in doubt, each size is lowered (and optimized) from the FX graph.
"""
from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import re
import time
import traceback

import torch

from . import cache as _cache
from ._core import EngineError
from .config import CompilerConfig
from .engine_graph import GRAPH_IDS
from .graph_types import CompileReport, InputMismatch, Lowered, is_tensor_meta
from .lower import lower_graph, program_value
from .lowering import Unsupported, bound_sizes, sympy_binding
from .lowering.sizes import Recorder, recording
from .pipeline import Shared, compile_lowered, observers_for, run_passes
from .programs import ProgramCache
from .shapes import ShapeSpec, key_function, symbol_rules

log = logging.getLogger("airgraph")


_CONST_NUMBER = re.compile(r"_const\d+\b")  # (a constant's name numbers it: not its meaning)


class SymbolicEngineGraph:
    """A graph with symbolic sizes: one static engine program (EngineGraph) per binding of its
    symbols, built on the first call that needs it and kept (up to config.dynamic_sizes bindings,
    least recently used first out). `gears` (Symbol -> allowed sizes) restricts a symbol to a set of
    sizes, all built now; any other size is an error."""

    def __init__(self, gm, consts, config: CompilerConfig, report: CompileReport, spec: ShapeSpec | None = None):
        spec = spec or ShapeSpec()
        self.gm, self.consts, self.config, self.report = gm, consts, config, report
        self.rules, self.expected, self.where, affine = symbol_rules(gm, spec.names)
        self.symbols = [sym for _, _, sym, _ in self.rules]
        # (position, dim) of each symbol's size, or (position, dim, a, b) for a * symbol + b
        self.getters = [(i, d, *affine.get(sym, ())) for i, d, sym, _ in self.rules]
        phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.values = sorted(i for i in spec.values if i not in consts and i < len(phs)
                             and is_tensor_meta(phs[i].meta.get("val")) and phs[i].meta["val"].dim() == 0)
        self.value_dtypes = [phs[i].meta["val"].dtype for i in self.values]
        self._key = key_function(self.getters, self.values)
        self.gears = {s: sorted(set(v)) for s, v in spec.gears.items() if s in self.symbols}
        self.symbol_names = {s: n for s, n in spec.symbol_names.items() if s in self.symbols}
        self.shared = Shared()  # packed weights, kernels and arenas of every size
        self.programs = ProgramCache(self._build, config.dynamic_sizes)  # size binding -> program
        self.observers = observers_for(config, gm)
        self.gid = next(GRAPH_IDS)
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
        self.hint = tuple(h for _, _, _, h in self.rules)
        if any(h is None for h in self.hint):
            raise Unsupported("a symbolic input size has no example value")
        self.hint_values = tuple(spec.values[i] for i in self.values)
        # the bindings built before the first call: the traced sizes, or every combination of the gears
        self.first_keys = [self.hint + self.hint_values]
        if self.gears:
            self.first_keys = [tuple(combo) + self.hint_values for combo in itertools.product(
                *[self.gears.get(s, [h]) for s, h in zip(self.symbols, self.hint)])]

    def lower_template(self) -> None:
        """The graph lowered once for every size (config.lower_once): from the compile cache, or
        recorded at the traced sizes and checked; `template` stays None where it cannot be."""
        if self.config.lower_once and not self._cached_template(self.hint, self.hint_values):
            self._record(self.hint + self.hint_values)

    def describe(self) -> str:
        return ", ".join(f"{sym} = " + (self.where[sym] or f"input {i}" + (f" dim {d}" if d >= 0 else ""))
                         for i, d, sym, _ in self.rules)

    def _env(self, key) -> dict:
        return dict(zip(self.symbols, key))

    def _consts(self, key) -> dict:
        if not self.values:
            return self.consts
        vals = key[len(self.symbols):]  # this program's values of the scalar inputs, as constants
        return {**self.consts, **{i: program_value(v, dt) for i, v, dt in zip(self.values, vals, self.value_dtypes)}}

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
        for o in self.observers:  # (a graph dump: the graph lowered once, its size expressions and guards)
            if hasattr(o, "template"):
                o.template(self.gid, self.describe(), rec.guards, low.g)

    def _cached_template(self, hint, vals) -> bool:
        """Takes the template (and its optimized graph) from the compile cache; False on a miss,
        after which _record writes the entry. Not while dumping or testing (they see every pass)."""
        c = self.config
        self.cache_key = None
        if not _cache.usable(c):
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
        as a KV cache's key and value lengths, stay equal), then the same below the traced sizes; the
        first whose lowering succeeds and where the recorded decisions hold is compared."""
        hint = key[: len(self.symbols)]
        candidates = [[h + 1 + i for i, h in enumerate(hint)], [2 * h + 3 + i for i, h in enumerate(hint)],
                      [h + 1 for h in hint], [2 * h for h in hint], [h + 8 for h in hint]]
        # and below the traced sizes, for decisions that bound a size from above (a sliding-window cache
        # shorter than its window); never under 2 (Dynamo specializes sizes 0 and 1)
        candidates += [c for c in ([h - 1 - i for i, h in enumerate(hint)], [h - 1 for h in hint]) if c and min(c) >= 2]
        for sizes in candidates:
            if not rec.holds_at(sizes):
                continue
            try:
                with bound_sizes(dict(zip(self.symbols, sizes))):
                    want = lower_graph(self.gm, consts).g
            except Exception:  # sizes the model does not allow (symbols that must agree)
                continue
            got = low.instance(sizes).g
            if str(got) != str(want) and not self._same_after_passes(got, want):
                raise Unsupported(f"the recorded graph differs from a lowering at sizes {sizes}")
            return sizes
        raise Unsupported("no other sizes to check the recorded graph at")

    def _same_after_passes(self, got, want) -> bool:
        """Whether two graphs that differ as lowered are the same after the passes (constants'
        numbered names aside). The lowering at one binding takes shortcuts the recording does not: a
        slice over a whole dim is the input itself there, a slice_view in the recording, which
        canonicalize drops at those sizes. The passes keep every graph's meaning, so graphs equal
        after them compute the same at these sizes."""
        # (without constant folding: the lowering at one size folds what the recording keeps as nodes
        # computed from sizes, such as an attention mask from arange(s0))
        config = dataclasses.replace(self.config, disable_passes=[*self.config.disable_passes, "fold_constants"])
        try:  # (both are this check's own graphs: the passes may change them)
            run_passes(got, config)
            run_passes(want, config)
        except Exception:  # (a pass refused one of them: not the same)
            return False
        return _CONST_NUMBER.sub("_const", str(got)) == _CONST_NUMBER.sub("_const", str(want))

    def _optimize_template(self, probe):
        """Runs the passes once, on the recorded graph (they decide at the traced sizes and carry
        the size attributes of the nodes they rewrite). Used for every size only if, at the checked
        sizes, its instance equals the passes run on the template's instance there: a decision that
        holds only at the traced sizes shows as a difference, and every size runs the passes."""
        if self.config.watches_stages:
            self.optimized_reason = "off while dumping or testing (every size runs the passes)"
            return
        try:
            opt = self.template.g.clone()
            run_passes(opt, self.config)
            want = self.template.g.instantiate(list(probe))
            run_passes(want, self.config)
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
        """The program of one size binding (under the program cache's lock, or in the constructor)."""
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
                if low is None:
                    low = lower_graph(self.gm, consts)
                program = compile_lowered(low, self.config, report, optimized=optimized, observers=self.observers,
                                          shared=self.shared, keep_text=first)
        except Exception as e:  # a size the engine cannot take (or a lowering bug at this size) runs in PyTorch
            if first or not self.config.fallback:
                raise
            how = "in PyTorch"
            log.warning("airgraph: graph_%d at sizes %s runs in PyTorch: %s: %s", self.gid, self._key_text(key),
                        type(e).__name__, str(e).split("\n")[0])
            self.fallback_sizes += 1
            program = _Eager(self.gm)
        ms = (time.perf_counter() - t0) * 1000
        self.build_ms.append(ms)
        if not first and log.isEnabledFor(logging.INFO):  # (the sizes' text costs more than a build's Python)
            log.info("airgraph: graph_%d: new sizes %s: engine program built in %.1f ms (%d sizes built so far; "
                     "%s)", self.gid, self._key_text(key), ms, len(self.build_ms), how)
        return program

    def _key_text(self, key) -> str:
        phs = [n.name for n in self.gm.graph.nodes if n.op == "placeholder"]
        return ", ".join([f"{s}={v}" for s, v in zip(self.symbols, key)]
                         + [f"{phs[i]}={v:g}" for i, v in zip(self.values, key[len(self.symbols):])])

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
        program = self.programs.get(key, self._check, args)
        try:
            return program.run(args)
        except InputMismatch:
            self._check(key, args)
            raise


class _Eager:
    """The program of a size the engine cannot take: the FX graph in PyTorch."""

    def __init__(self, gm):
        self.gm = gm

    def run(self, args):
        out = self.gm(*args)
        return list(out) if isinstance(out, (list, tuple)) else [out]


def compile_symbolic(gm, consts, config: CompilerConfig, report: CompileReport,
                     spec: ShapeSpec | None = None) -> SymbolicEngineGraph:
    """A graph with symbolic sizes, ready to run: its template (lowered and optimized once where
    that holds) and the programs of its first bindings (the traced sizes, or every gear)."""
    seg = SymbolicEngineGraph(gm, consts, config, report, spec)
    seg.lower_template()
    for k in seg.first_keys:
        seg.programs.put(k, seg._build(k, first=(k is seg.first_keys[0])))
    return seg
