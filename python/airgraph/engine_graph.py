"""A compiled static graph (`EngineGraph`): one engine executable, the plan of its call boundary
and the call itself. It is made by the pipeline (pipeline.compile_lowered) and never changes
after that; a call's own state lives in the call (the executor's arena comes from a pool).

Two call paths: the thin one (one C check of every input's dtype, sizes and strides with torch's
TensorGuards, outputs from Inductor's allocator, the engine reads the data pointers itself) and
the checked one (every input checked and made contiguous, outputs carved from planned buffers),
which the first call takes and which arms the thin one. Observers that watch calls (a data dump,
a profile) keep every call on the checked path.
"""
from __future__ import annotations

import collections
import itertools
import math
import operator

import torch

from ._core import C
from .graph_types import DATA_PTR_FN, InputMismatch, Lowered
from .lowering import torch_dtype

try:  # torch's C helpers for Inductor's generated code: the thin call path (EngineGraph.run) uses them
    from torch._C._dynamo.guards import TensorGuards as _TensorGuards, _empty_strided_cpu
except ImportError:  # another torch: every call takes the checked path
    _TensorGuards = _empty_strided_cpu = None

GRAPH_IDS = itertools.count()


def _picker(positions):
    """args -> the tuple of args[i] for i in positions (itemgetter, which returns a bare item for one)."""
    pos = list(positions)
    if len(pos) >= 2:
        return operator.itemgetter(*pos)
    return (lambda args: (args[pos[0]],)) if pos else (lambda args: ())


# Outputs of this many bytes and more come from the engine's output cache (base/memory.h,
# alloc_output): a block a previous call's output gave back, instead of fresh pages the kernel
# must fault in and zero on every call (a 67 MB output: 16 k faults, 2x the kernel's own time).
_CACHED_OUTPUT = 1 << 20


def _new_root(shape, dtype) -> torch.Tensor:
    """A contiguous tensor for an engine output: torch's allocator for small ones, the output cache
    for large ones."""
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < _CACHED_OUTPUT:
        return torch.empty(shape, dtype=dtype)
    t = C.output_block(nbytes)
    return (t if dtype == torch.uint8 else t.view(dtype)).view(shape)


def _contiguous_strides(shape) -> tuple:
    strides, n = [], 1
    for d in reversed(shape):
        strides.append(n)
        n *= max(int(d), 1)
    return tuple(reversed(strides))


class EngineGraph:
    """One engine executable plus how to feed it from the FX graph's arguments.

    gid: its number (graph_<gid> in messages and dumps); exe: the C++ executable; graph_text: the
    optimized graph as text ("" for the other sizes of a symbolic graph); watch: an object whose
    called(eg, n, args, inputs, outputs) sees every call (n counts from 1), or None; writes: the
    graph's input writes (lower.take_input_writes)."""

    def __init__(self, gid: int, exe, low: Lowered, threads: int | None, graph_text: str = "", watch=None,
                 writes=()):
        self.gid = gid
        self.exe = exe
        self.input_positions, self.scalar_inputs = low.input_positions, low.scalar_inputs
        self.num_outputs, self.fx_names = low.num_outputs, low.fx_names
        self.graph_text = graph_text
        self.threads = threads
        self.watch = watch
        self.profiles = collections.deque(maxlen=1000)  # (starts ns, durations ns) per call, when profiling
        self._calls = itertools.count(1)  # (next() is atomic: concurrent calls each get their own number)
        self._plan_call()
        self._fast = self._plan_fast(writes) if watch is None else None
        self._any_big = self._fast is not None and self._plan_big()
        self._guard = None  # the thin path's check of the inputs, made from the first call's

    @property
    def calls(self) -> int:
        """How many calls ran (read from the counter without advancing it)."""
        return int(repr(self._calls)[6:-1]) - 1  # ("count(N)": N is the next call's number)

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
        self._extra_outputs = len(self.out_plan) > self.num_outputs  # (values exposed for a data dump)

    def _plan_big(self):
        """Which of the thin path's roots come from the engine's output cache (_new_root)."""
        self._fast_big = [math.prod(shape) * dtype.itemsize >= _CACHED_OUTPUT for shape, _, dtype in self._fast]
        return any(self._fast_big)

    def _plan_fast(self, writes):
        """The thin call path, where it applies: every output a whole buffer of its own (or an input
        written in place). Returns what it allocates per external root (shape, strides, dtype), or None."""
        if _TensorGuards is None or not DATA_PTR_FN or self._extra_outputs:
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
                if self._any_big:
                    roots = [_new_root(shape, dtype) if big else _empty_strided_cpu(shape, stride, dtype)
                             for (shape, stride, dtype), big in zip(self._fast, self._fast_big)]
                else:
                    roots = [_empty_strided_cpu(shape, stride, dtype) for shape, stride, dtype in self._fast]
                self.exe.run_tensors(ins, roots, self.threads or torch.get_num_threads(), DATA_PTR_FN,
                                     torch.Tensor)
                next(self._calls)
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
                t = _new_root(shape, dtype)
                roots[root] = t.data_ptr()
            else:
                buf = bufs.get(root)
                if buf is None:
                    buf = bufs[root] = _new_root((self.root_bytes[root],), torch.uint8)
                    roots[root] = buf.data_ptr()
                n = math.prod(shape) * dtype.itemsize
                t = buf[offset: offset + n].view(dtype).view(shape)
            outs.append(t)
        for r, b in enumerate(self.root_bytes):
            if roots[r] == 0:  # a root no output covers from its start (never expected)
                buf = bufs[r] = torch.empty(b, dtype=torch.uint8)
                roots[r] = buf.data_ptr()
        self.exe.run_ptrs(ptrs, roots, self.threads or torch.get_num_threads())
        n = next(self._calls)
        if self._fast is not None and self._guard is None and not copied and all(
                isinstance(args[i], (int, float)) for i in self.scalar_inputs):
            # later calls whose tensors match these in dtype, sizes and strides take the thin path
            # (two first calls may both make one: either serves, published by one assignment)
            ts = [a for i, a in zip(self.input_positions, ins) if i not in self.scalar_inputs]
            self._guard = _TensorGuards(*ts, dynamic_dims_sizes=[list(a.shape) for a in ts],
                                        dynamic_dims_strides=[list(a.stride()) for a in ts])
        if self.watch is not None:
            self.watch.called(self, n, args, ins, outs)
        return outs[: self.num_outputs] if self._extra_outputs else outs
