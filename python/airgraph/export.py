"""Offline export: run a model without Dynamo, AOTAutograd or tracing in the serving process.

    airgraph.export(model, example_inputs, "model.agraph", dynamic_shapes=...)
    m = airgraph.load("model.agraph")      # a callable, in any process: no tracing
    out = m(*inputs)

`export` traces the model with torch.export (symbolic sizes where `dynamic_shapes` asks for them),
decomposes it with airgraph's table, lowers the ATen graph into the engine's IR (symbolic graphs
lowered once for every size) and writes one airgraph file (csrc/ir/serialize.h: versioned header,
metadata, CRC-32C checksums) holding the lowered graph, the weights (64-byte aligned, so that a
mapped file serves them with no copy) and a JSON text of how to call it. Before writing, the
exported graph is run on the example inputs and compared with the model: an export that would
give another answer is refused.

`load` maps the file (its weights stay in the mapping), checks every checksum, runs the passes and
builds the engine program for the sizes of each call (one per size binding, kept like a
torch.compile'd symbolic graph's). The same file runs in C++ with `airgraph-run` (no Python, no
libtorch).

Limits: every ATen node must run on the engine (no PyTorch fallback inside an exported graph);
exported programs that mutate buffers are refused; outputs come back as torch.export flattened
them, rebuilt into the model's structure where torch's pytree can serialize it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import os
import tempfile
import warnings

import sympy
import torch
from torch.export.graph_signature import InputKind, OutputKind
from torch.utils._pytree import tree_leaves, tree_unflatten, treespec_dumps, treespec_loads

from ._core import C, EngineError
from ._version import __version__
from .config import CompilerConfig
from .decompositions import decomposition_table
from .graph_types import CompileReport, InputMismatch, Lowered
from .lower import check_support, lower_graph
from .lowering.vision import keep_resizes_whole
from .lowering import Unsupported, bound_sizes
from .pipeline import compile_graph, observers_for
from .shapes import ShapeSpec, graph_symbols, hint_sizes, key_function
from .symbolic import SymbolicEngineGraph

FORMAT = "airgraph-export"
FORMAT_VERSION = 1


def _input_constants(ep) -> tuple[dict[int, torch.Tensor], list[int]]:
    """Placeholder position -> parameter/buffer/constant tensor, and the user inputs' positions."""
    consts, user = {}, []
    named = dict(ep.named_buffers())
    named.update(dict(ep.named_parameters()))
    for i, spec in enumerate(ep.graph_signature.input_specs):
        if spec.kind == InputKind.USER_INPUT:
            user.append(i)
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            t = named.get(spec.target)
            if t is None:
                t = ep.constants.get(spec.target)
            if not isinstance(t, torch.Tensor):
                raise Unsupported(f"input {spec.arg.name} ({spec.kind.name}) has no tensor")
            consts[i] = t.detach()
        else:
            raise Unsupported(f"input {spec.arg.name} is a {spec.kind.name}, which airgraph.export does not take")
    return consts, user


def _drop_runtime_asserts(gm):
    """torch.export's checks of the inputs' metadata and of size ranges (nodes with no result): the
    loaded model checks every input's dtype and sizes itself, and a symbolic size's range is the
    engine's check at each new binding."""
    asserts = {torch.ops.aten._assert_tensor_metadata.default, torch.ops.aten._assert_scalar.default,
               torch.ops.aten.sym_constrain_range_for_size.default}
    for n in list(gm.graph.nodes):
        if n.op == "call_function" and n.target in asserts and not n.users:
            gm.graph.erase_node(n)
    gm.graph.eliminate_dead_code()
    gm.recompile()


def _dim_names(model, gm, user: list, num_args: int, kwarg_names: list, dynamic_shapes) -> dict:
    """Symbol -> the name of the torch.export.Dim the user gave that size (for a derived dim, 2 * seq,
    the name of its root, seq, when the size is a * symbol + b of one symbol), read from
    `dynamic_shapes` beside the user inputs (args, then kwargs)."""
    if not dynamic_shapes:
        return {}
    specs = [None] * len(user)
    if isinstance(dynamic_shapes, dict):
        try:
            params = list(inspect.signature(model.forward if isinstance(model, torch.nn.Module) else model).parameters)
        except (TypeError, ValueError):
            params = []
        for k in range(len(user)):
            name = params[k] if k < num_args and k < len(params) else \
                kwarg_names[k - num_args] if k >= num_args else None
            specs[k] = dynamic_shapes.get(name)
    elif isinstance(dynamic_shapes, (list, tuple)):
        for k, spec in enumerate(dynamic_shapes[:len(user)]):
            specs[k] = spec
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    names = {}
    for k, spec in enumerate(specs):
        val = phs[user[k]].meta.get("val") if k < len(user) else None
        if not isinstance(val, torch.Tensor):
            continue
        dims = spec.items() if isinstance(spec, dict) else enumerate(spec) if isinstance(spec, (list, tuple)) else ()
        for d, dim in dims:
            root = getattr(dim, "root", None)  # (a derived Dim: its root's name, for its one symbol)
            name = getattr(root if root is not None else dim, "__name__", None)
            if not isinstance(name, str) or not isinstance(d, int) or not -val.dim() <= d < val.dim():
                continue
            size = val.shape[d]
            expr = size.node.expr if isinstance(size, torch.SymInt) else None
            if expr is not None and root is not None and len(expr.free_symbols) == 1:
                expr = next(iter(expr.free_symbols))
            if expr is not None and expr.is_Symbol and name.isidentifier():
                names.setdefault(expr, name)
    if len(set(names.values())) != len(names):  # (two symbols under one name: keep torch's)
        return {}
    return names


def _size_text(d, names: dict) -> str:
    """A symbolic size as text, with the user's Dim names for torch's symbols (n + 1, not s17 + 1)."""
    expr = d.node.expr if isinstance(d, torch.SymInt) else d
    return str(expr.xreplace({s: sympy.Symbol(n) for s, n in names.items()})) if names else str(expr)


def _range_guards(ep, seg, low) -> list[str]:
    """Adds the exported ranges of the symbols (torch.export.Dim's min and max, as torch refined
    them) to the graph as guards, so that the loaded model (and airgraph-run) refuses sizes
    outside them; returns the sizes at the ends of those ranges that the graph refuses (a
    decision the lowering took at the example's sizes), for a warning."""
    rec = seg.template_rec
    hint = list(rec.hints)
    refused = []
    for i, sym in enumerate(seg.symbols):
        vr = ep.range_constraints.get(sym)
        ends = []
        for b in (getattr(vr, "lower", None), getattr(vr, "upper", None)):
            try:
                ends.append(int(b) if b is not None and abs(int(b)) < 1 << 62 else None)
            except (TypeError, ValueError):
                ends.append(None)
        lo, hi = ends
        for rel in ([sympy.Ge(sym, lo)] if lo is not None else []) + ([sympy.Le(sym, hi)] if hi is not None else []):
            if rel in (sympy.true, sympy.false):
                continue
            d = rec.size(rel.lhs - rel.rhs)
            if isinstance(d, int):
                continue
            low.g.add_guard(rec.expr_id(low.g, d), type(rel).__name__, True, str(rel.xreplace(rec.names)))
        for end in {e for e in (lo, lo + 1 if lo is not None else None, hi) if e is not None and e >= 0}:
            sizes = hint[:i] + [end] + hint[i + 1:]
            why = low.g.failed_guard(sizes)
            if why is not None:
                refused.append(f"{low.g.symbols()[i]}={end} (it needs {why})")
    return refused


def _out_structure(spec) -> dict:
    """How the model's outputs are nested: a single tensor, a flat tuple or list (rebuilt without
    pytree on each call), or torch's serialized pytree spec (None when torch cannot serialize it:
    the outputs come back as a flat tuple)."""
    if spec.is_leaf():
        return {"kind": "leaf"}
    children = spec.children() if hasattr(spec, "children") else spec.children_specs  # (torch < 2.10)
    if spec.type in (tuple, list) and all(c.is_leaf() for c in children):
        return {"kind": spec.type.__name__}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            return {"kind": "pytree", "spec": treespec_dumps(spec)}
    except Exception:
        return {"kind": "tuple"}


def export(model, example_inputs, path: str, dynamic_shapes=None, example_kwargs: dict | None = None,
           config: CompilerConfig | None = None, strict: bool = False, atol: float = 1e-4,
           rtol: float = 1e-4) -> dict:
    """Exports `model` called as model(*example_inputs, **example_kwargs) to the airgraph file
    `path`; returns the metadata written. `dynamic_shapes` is torch.export's (torch.export.Dim per
    dim). The loaded model takes the same positional and keyword arguments (tensors)."""
    config = config or CompilerConfig()
    example_inputs, example_kwargs = tuple(example_inputs), dict(example_kwargs or {})
    with torch.no_grad():
        ep = torch.export.export(model, example_inputs, kwargs=example_kwargs, dynamic_shapes=dynamic_shapes,
                                 strict=strict)
        keep_resizes_whole(ep.graph_module)  # (as the backend does: F.interpolate the engine runs whole)
        ep = ep.run_decompositions(decomposition_table())
        want = ep.module()(*example_inputs, **example_kwargs)
    kinds = {s.kind for s in ep.graph_signature.output_specs}
    if kinds - {OutputKind.USER_OUTPUT}:
        raise Unsupported(f"the exported program has outputs of kinds {sorted(k.name for k in kinds)}; airgraph.export "
                          "takes programs whose only outputs are the user's (no buffer mutations)")
    gm = ep.graph_module
    _drop_runtime_asserts(gm)
    consts, user = _input_constants(ep)
    with bound_sizes(hint_sizes(gm)) if graph_symbols(gm) else contextlib.nullcontext():
        # (a symbolic graph's support is decided at the traced sizes, as torch.compile's is)
        bad = [r for r in check_support(gm)[0] if not r.native]
    if bad:
        lines = [f"  {r.name} ({r.target}): {r.reason}\n    at {r.source}" for r in bad[:10]]
        raise Unsupported(f"{len(bad)} node(s) cannot run on the engine, and an exported graph has no PyTorch "
                          "fallback:\n" + "\n".join(lines))
    report = CompileReport()
    symbols, getters, names = [], [], {}
    if graph_symbols(gm):
        names = _dim_names(model, gm, user, len(example_inputs), list(example_kwargs), dynamic_shapes)
        seg = SymbolicEngineGraph(gm, consts, CompilerConfig(lower_once=True, cache_dir=""), report,
                                  ShapeSpec(symbol_names=names))
        seg.lower_template()  # (no program is built here: the check below loads the file and builds one)
        if seg.template is None:
            raise Unsupported(f"the graph's symbolic sizes cannot be lowered once for every size: "
                              f"{seg.template_reason}")
        low = seg.template
        refused = _range_guards(ep, seg, low)
        if refused:
            warnings.warn(f"airgraph.export: the exported graph refuses {', '.join(refused)}: a decision taken at "
                          "the example inputs' sizes does not hold there; export with example inputs of those sizes "
                          "to serve them", stacklevel=2)
        symbols, getters = low.g.symbols(), [list(g) for g in seg.getters]
    else:
        low = lower_graph(gm, consts)
    pos = {p: k for k, p in enumerate(user)}
    for p in low.input_positions:
        if p not in pos:
            raise Unsupported(f"graph input {p} is neither a user input nor a constant")
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    meta = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "airgraph": __version__, "torch": torch.__version__,
        "num_user_inputs": len(user),
        "args": len(example_inputs), "kwargs": list(example_kwargs),  # user inputs: args, then kwargs by name
        # engine input j reads user argument inputs[j]["arg"]
        "inputs": [{"arg": pos[p], "name": phs[p].name, "dtype": str(phs[p].meta["val"].dtype).replace("torch.", ""),
                    "shape": [d if isinstance(d, int) else _size_text(d, names) for d in phs[p].meta["val"].shape],
                    "scalar": p in low.scalar_inputs}
                   for p in low.input_positions],
        "symbols": symbols,
        # symbol k = user argument getters[k][0] (its dim getters[k][1], or the number itself when -1);
        # with [2] and [3], that dim is a * symbol + b (a torch.export derived Dim): (dim - b) // a
        "getters": [[pos[i], *rest] for i, *rest in getters],
        "num_outputs": low.num_outputs,
        "outputs": _out_structure(ep.call_spec.out_spec),
    }
    producer, text = f"airgraph {__version__}", json.dumps(meta)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmps = []

    def write_and_check(data: bytes):
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".airgraph-export-")
        tmps.append(tmp)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        m = LoadedModel(tmp, config)
        _compare(m(*example_inputs, **example_kwargs), want, atol, rtol)
        return m, tmp

    try:
        # the file must give the model's answer before it replaces anything at `path`
        m, tmp = write_and_check(low.g.save(True, producer, text))
        # the weights its kernels packed on this CPU (convolutions, [K, N] matmul operands; the examples'
        # sizes) are stored beside the plain ones: a process that loads the file on a CPU whose kernels
        # want the same layouts reads them from the mapping, with no copy (others pack again)
        C.wait_background_idle()
        data = low.g.save(True, producer, text, packed_from=m.graph)
        del m
        if len(data) > os.path.getsize(tmp):
            m, tmp = write_and_check(data)
        os.replace(tmp, path)
    finally:
        for t in tmps:
            if os.path.exists(t):
                os.unlink(t)
    return meta


def _compare(got, want, atol, rtol):
    g, w = tree_leaves(got), tree_leaves(want)
    if len(g) != len(w):
        raise EngineError(f"export check: the exported graph gives {len(g)} outputs, the model {len(w)}")
    for i, (a, b) in enumerate(zip(g, w)):
        if isinstance(b, torch.Tensor):
            if a.shape != b.shape or a.dtype != b.dtype or not torch.allclose(a, b, atol=atol, rtol=rtol,
                                                                               equal_nan=True):
                diff = (a.double() - b.double()).abs().max().item() if a.shape == b.shape else float("nan")
                raise EngineError(f"export check: output {i} differs from the model's: {a.dtype}{list(a.shape)} vs "
                                  f"{b.dtype}{list(b.shape)}, max abs difference {diff}")


class LoadedModel:
    """A model loaded from an airgraph file: call it like the model (the exported positional and
    keyword inputs)."""

    def __init__(self, path: str, config: CompilerConfig | None = None):
        self.path = path
        self.config = config or CompilerConfig()
        g, producer, text = C.load_graph_file(os.fspath(path))
        try:
            meta = json.loads(text)
        except ValueError:
            raise EngineError(f"{path}: the metadata is not JSON (written by {producer!r})") from None
        if meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION:
            raise EngineError(f"{path}: not an airgraph export of format {FORMAT} v{FORMAT_VERSION} "
                              f"(it says {meta.get('format')} v{meta.get('format_version')}, written by {producer})")
        self.meta, self.producer, self.graph = meta, producer, g
        self.num_inputs = meta["num_user_inputs"]
        ins = meta["inputs"]
        self.lowered = Lowered(g, [i["arg"] for i in ins],
                               {i["arg"]: getattr(torch, i["dtype"]) for i in ins if i["scalar"]},
                               meta["num_outputs"], {})
        self.symbols = meta["symbols"]
        getters = [tuple(g) for g in meta["getters"]]
        self._key = key_function(getters, [])  # a size binding from the arguments
        # symbols solved from a dim a * symbol + b (derived Dims): a dim that is no such size is refused
        self._derived = [(k, g) for k, g in enumerate(getters) if len(g) == 4 and g[2:] != (1, 0)]
        self._arg_names = {x["arg"]: x["name"] for x in ins}  # (messages)
        self._rebuild = self._out_rebuilder(meta.get("outputs") or {})
        self.report = CompileReport()
        # the engine program: one for a static graph, one per size binding (a SizedGraph) for a symbolic one
        # the file owns its weights: "auto" packs every GEMM's (CompilerConfig.pack_weights)
        cfg = self.config if self.config.pack_weights != "auto" else dataclasses.replace(self.config,
                                                                                         pack_weights="auto-owned")
        self.compiled = compile_graph(self.lowered, cfg, self.report, observers_for(cfg))
        self._static = None if self.symbols else self.compiled
        self._programs = None if self._static is not None else self.compiled.programs

    @staticmethod
    def _out_rebuilder(structure: dict):
        kind = structure.get("kind")
        if kind == "leaf":
            return lambda outs: outs[0]
        if kind == "list":
            return list
        if kind == "pytree":
            spec = treespec_loads(structure["spec"])
            return lambda outs: tree_unflatten(outs, spec)
        return tuple

    def _program(self, args):
        try:
            key = self._key(args)
        except (IndexError, AttributeError, TypeError) as err:  # (an input of another rank or kind)
            raise self._explain(args, EngineError(f"{self.path}: the inputs do not match the exported graph "
                                                  f"({err})")) from None
        for k, (i, d, a, b) in self._derived:
            if a * key[k] + b != args[i].shape[d]:
                sym = self.symbols[k]
                size = (f"{a}*{sym}" if a != 1 else sym) + (f" + {b}" if b > 0 else f" - {-b}" if b < 0 else "")
                raise EngineError(f"{self.path}: input {self._arg_names.get(i, i)!r} dim {d} is {args[i].shape[d]}, "
                                  f"which is not {size} for any size {sym}")
        try:
            return self._programs.get(key)
        except EngineError as e:
            at = "" if str(e).startswith("at sizes") else f"sizes {dict(zip(self.symbols, key))}: "
            raise EngineError(f"{self.path}: {at}{e}") from None

    def __call__(self, *args, **kwargs):
        if kwargs or len(args) != self.num_inputs:
            args = self._flatten(args, kwargs)
        try:
            return self._rebuild((self._static or self._program(args)).run(args))
        except InputMismatch as e:
            raise self._explain(args, e) from None

    def _explain(self, args, e: EngineError) -> EngineError:
        """The program refused an input: say which input and dim, and the size the file's graph needs
        there, in the user's names (`x dim 0 is 7, but the graph needs n + 1 = 4 at n=3`)."""
        try:
            tensors = [(x, args[x["arg"]]) for x in self.meta["inputs"] if not x["scalar"]]
            for x, a in tensors:
                if not isinstance(a, torch.Tensor) or a.dim() != len(x["shape"]):
                    got = f"shape {list(a.shape)}" if isinstance(a, torch.Tensor) else f"a {type(a).__name__}"
                    return EngineError(f"{self.path}: input {x['name']!r} is {got}, but the graph needs a tensor of "
                                       f"rank {len(x['shape'])} ({x['shape']})")
            key = self._key(args) if self.symbols else ()
            env = {sympy.Symbol(s): v for s, v in zip(self.symbols, key)}
            at = " at " + ", ".join(f"{s}={v}" for s, v in zip(self.symbols, key)) if self.symbols else ""
            for x, a in tensors:
                for d, want in enumerate(x["shape"]):
                    w = want if isinstance(want, int) else int(sympy.sympify(want).xreplace(env))
                    if w != a.shape[d]:
                        return EngineError(f"{self.path}: input {x['name']!r} dim {d} is {a.shape[d]}, but the graph "
                                           f"needs {want}" + (f" = {w}{at}" if not isinstance(want, int) else ""))
        except Exception:  # (an older file's sizes in torch's names: the program's own message)
            return e
        return e

    forward = __call__

    def _flatten(self, args, kwargs) -> tuple:
        """The user inputs in the exported order: positional ones, then keyword ones by name."""
        n, names = self.meta.get("args", self.num_inputs), self.meta.get("kwargs", [])
        extra = sorted(set(kwargs) - set(names))
        missing = [k for k in names if k not in kwargs]
        if len(args) != n or extra or missing:
            raise TypeError(f"{self.path} takes {n} positional inputs" + (f" and keyword inputs {names}" if names else "")
                            + f"; got {len(args)} positional" + (f", unknown keywords {extra}" if extra else "")
                            + (f", missing keywords {missing}" if missing else ""))
        return tuple(args) + tuple(kwargs[k] for k in names)

    def __repr__(self):
        return (f"airgraph.LoadedModel({self.path!r}, {self.num_inputs} inputs, symbols {self.symbols or 'none'}, "
                f"{self.producer})")


def load(path: str, config: CompilerConfig | None = None) -> LoadedModel:
    """Loads an airgraph file written by airgraph.export."""
    return LoadedModel(path, config)
