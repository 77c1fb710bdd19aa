"""Bound weights: parameters and buffers are bound as engine constants (zero-copy; the passes may
fold them, prepack them into oneDNN layouts or fold a BatchNorm into a convolution's weights), so
an engine graph is right only for the weights it was built with. Dynamo passes them as graph
inputs on every call (the very Parameter objects), so each call can check them: the WeightGuard
(csrc/bindings/weights.cpp) compares each bound tensor's data pointer and version counter with the
ones it was built with, in one C call, and a change rebuilds the engine graph(s) that use it
(`Binder`). frozen_parameters=True skips the check.
"""
from __future__ import annotations

import functools
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ._core import C
from .config import CompilerConfig
from .graph_types import DATA_PTR_FN, CompileReport, InputMismatch

log = logging.getLogger("airgraph")


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
    return cls(positions, tensors, DATA_PTR_FN, _version_layout())


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


class Binder:
    """Owns a compiled graph's current binding and rebuilds it when a bound weight changes.

    `build(consts, changed, prev, report)` builds engine graph(s) for `consts` (argument
    position -> tensor) and returns (boxed run, engine graphs); `changed` (positions) and
    `prev` (the binding being replaced) are None on the first build. Callers read `binding`
    once per call; a rebuild happens under the lock and is published by one assignment, so
    concurrent callers see the old binding or the new one, never half of one.
    """

    def __init__(self, build, names: dict[int, str] | None, config: CompilerConfig, report: CompileReport):
        self.build = build
        self.names = names or {}
        self.config = config
        self.report = report
        self.lock = threading.Lock()
        self.graphs: list = []  # the current engine graphs (the list object is kept; its items are replaced)
        self.binding: _Binding | None = None

    def bind(self, consts: dict[int, torch.Tensor]) -> "Binder":
        """The first binding: builds the engine graph(s) for `consts`."""
        self.binding = self._bind(consts, None, None, self.report)
        return self

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
            for i, t in zip(b.positions, b.tensors):
                a = args[i] if i < len(args) else None
                if i in changed and isinstance(a, torch.Tensor) and (a.dtype, a.shape) != (t.dtype, t.shape):
                    # (Dynamo's guards see this before a call gets here; a saved graph replayed without
                    # them must not bind a weight of another shape: the caller traces again)
                    raise InputMismatch(f"{self.names.get(i, f'input {i}')} is now {a.dtype}{list(a.shape)}; the "
                                        f"graph was built for {t.dtype}{list(t.shape)}")
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


def bind_weights(build, consts: dict[int, torch.Tensor], names: dict[int, str] | None, config: CompilerConfig,
                 report: CompileReport):
    """The boxed callable of the engine graph(s) `build` makes for the weights `consts`, checked on
    every call (see Binder)."""
    return checked(Binder(build, names, config, report).bind(consts))


def checked(binder: Binder):
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
