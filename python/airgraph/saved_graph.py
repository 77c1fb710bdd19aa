"""A compiled Dynamo graph saved so that another process can run it without Dynamo, AOTAutograd
or the lowering (airgraph.cache_compile, cache_compile.py): the lowered engine graph (static, or
lowered once for every size with its symbols and where their sizes come from), its passes' result
where they decide alike at every size, which arguments are the weights (by name: the file holds
none of their bytes) and the input writes.

`artifact(compiled)` makes the JSON-ready record of what airgraph's backend returned for one
Dynamo graph, or says why it cannot (a training graph, PyTorch fallback nodes, random ops, a
graph lowered per size, AOTAutograd's wrapper having work to do); `SavedGraph(record, config)`
is the callable Dynamo's bytecode calls in its place: it binds the weights of its first call
(checked on every call, as torch.compile's are) and builds one engine program per size binding.
"""
from __future__ import annotations

import base64
import dataclasses
import threading

import torch

from ._core import C
from ._version import __version__
from .cache import _by_name, derived_sources
from .compiler import _writing_inputs, with_passthrough
from .config import CompilerConfig
from .graph_types import CompileReport, InputMismatch, Lowered, const_resolver
from .lower import lower_graph
from .pipeline import SizedGraph, compile_lowered, observers_for, run_passes
from .shapes import key_function
from .weights import bind_weights


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def _random_op(gm) -> str | None:
    """The first op that draws random numbers (attention with dropout_p 0 and dropout with train
    False draw none), or None."""
    for n in gm.graph.nodes:
        if n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload) or \
                torch.Tag.nondeterministic_seeded not in n.target.tags:
            continue
        schema = n.target._schema
        vals = {a.name: (n.args[k] if k < len(n.args) else n.kwargs.get(a.name, a.default_value))
                for k, a in enumerate(schema.arguments)}
        if vals.get("dropout_p", None) == 0 or vals.get("train", None) is False:
            continue
        return str(n.target)
    return None


def artifact(compiled) -> tuple[dict | None, str]:
    """(the record of one compiled Dynamo graph, "") or (None, why it cannot be saved)."""
    state = getattr(compiled, "state", None)
    if state is None:
        return None, "this torch gives the backend's result no state to save"
    report = state["report"]
    if "cached" in state:  # a compile-cache hit of the whole Dynamo graph: static, optimized
        c = state["cached"]
        return {"kind": "static", "graph": _b64(c["graph"]), "feeding": c["feeding"],
                "consts": {str(k): v for k, v in c["consts"].items()}, "writes": [list(w) for w in c["writes"]],
                "metas": None}, ""
    if "gm" not in state:
        return None, "the graph was not compiled for inference"
    reason = state.get("saved_reason", state.get("reason"))  # (outputs that are an input are returned as such)
    if reason:
        return None, reason
    if report.engine_graphs != 1 or any(not n.native for n in report.nodes) or len(report.symbolic) > 1:
        # (a second symbolic graph: the whole graph could not be lowered and a part of it runs in PyTorch)
        return None, "it does not run whole on the engine (PyTorch fallback nodes, or a part in PyTorch)"
    gm, consts = state["gm"], state["consts"]
    op = _random_op(gm)
    if op is not None:
        return None, f"it draws random numbers ({op}): a saved graph would not follow torch's generator"
    phs = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    weights = _by_name(gm, consts)
    names = {str(i): phs[i] for i in consts}
    metas = {str(i): [str(t.dtype).replace("torch.", ""), list(t.shape)] for i, t in consts.items()}
    writes = [list(w) for w in gm.meta.get("airgraph_input_writes", ())]
    aliases = {str(k): v for k, v in state.get("input_outputs", {}).items()}
    passthrough = [list(t) for t in gm.meta.get("airgraph_passthrough", ())]
    producer = f"airgraph {__version__}"
    if not report.symbolic:
        low = lower_graph(gm, consts)
        rec = {"kind": "static", "graph": _b64(low.g.save(True, producer, "", list(weights))),
               "feeding": low.feeding(), "consts": names, "writes": writes, "metas": metas, "input_outputs": aliases,
               "passthrough": passthrough}
        opt = low.g.clone()
        run_passes(opt, state["config"])
        if derived_sources(opt, weights) == []:  # (else the passes run at load: folded weights are not saved)
            rec["optimized"] = _b64(opt.save(True, producer, "", list(weights)))
        return rec, ""
    seg = report.symbolic[0]
    if seg.template is None:
        return None, f"its symbolic sizes are lowered per size ({seg.template_reason})"
    if seg.values:
        return None, "it takes Python numbers as inputs (dynamic floats)"
    if derived_sources(seg.template.g, weights) != []:
        return None, "its lowered graph holds constants computed from the weights"
    opt = seg.optimized
    if opt is not None and derived_sources(opt, weights) != []:
        opt = None  # (its folded constants would be saved with their bytes: the passes run per size instead)
    rec = {"kind": "symbolic", "graph": _b64(seg.template.g.save(True, producer, "", list(weights))),
           "feeding": seg.template.feeding(), "consts": names, "writes": writes, "metas": metas,
           "input_outputs": aliases, "passthrough": passthrough, "getters": [list(g) for g in seg.getters],
           "symbols": [str(s) for s in seg.symbols]}
    if opt is not None:
        rec["optimized"] = _b64(opt.save(True, producer, "", list(weights)))
    return rec, ""


class SavedGraph:
    """Runs a saved record in place of Dynamo's compiled function: takes the Dynamo graph's
    arguments (weights included), returns its outputs as a list."""

    def __init__(self, record: dict, config: CompilerConfig):
        self.record = {k: v for k, v in record.items() if k not in ("graph", "optimized")}  # (bytes kept decoded)
        self.config = config
        self.consts = {int(k): v for k, v in record["consts"].items()}
        self.metas = {int(k): (getattr(torch, d), tuple(s)) for k, (d, s) in (record.get("metas") or {}).items()}
        self.writes = [tuple(w) for w in record["writes"]]
        self.graph = base64.b64decode(record["graph"])
        self.optimized = base64.b64decode(record["optimized"]) if "optimized" in record else None
        self.report = CompileReport()
        self._run = None
        self._lock = threading.Lock()

    def _check(self, consts: dict) -> None:
        for i, t in consts.items():
            want = self.metas.get(i)
            if not isinstance(t, torch.Tensor) or (want is not None and (t.dtype, tuple(t.shape)) != want):
                got = f"{t.dtype}{list(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
                raise InputMismatch(f"weight {self.consts[i]} is {got}, the saved graph was made for "
                                    f"{want[0]}{list(want[1])}" if want else f"weight {self.consts[i]} is {got}")

    def _load(self, data: bytes, consts: dict):
        g, _, _ = C.load_graph_bytes(data, const_resolver({self.consts[i]: t for i, t in consts.items()}))
        return g

    def _build(self, args):
        rec, config = self.record, self.config
        consts = {i: args[i] for i in self.consts}
        self._check(consts)

        def build(consts, changed, prev, report):
            self._check(consts)  # (a rebuild for changed weights too)
            if rec["kind"] == "static":
                done = self.optimized is not None
                low = Lowered.from_feeding(self._load(self.optimized if done else self.graph, consts), rec["feeding"])
                eg = compile_lowered(low, config, report, optimized=done, observers=observers_for(config),
                                     writes=self.writes)
                return eg.run, [eg]
            low = Lowered.from_feeding(self._load(self.graph, consts), rec["feeding"])
            opt = self._load(self.optimized, consts) if self.optimized is not None else None

            def lowered_at(key):
                if low.g.failed_guard(list(key)) is not None:
                    raise InputMismatch(f"sizes {list(key)} break a decision the saved graph was lowered with")
                if opt is not None:
                    try:
                        return dataclasses.replace(low, g=opt.instantiate(list(key))), True
                    except Exception:  # a size check of the optimized graph: the passes run at this size
                        pass
                return low.instance(list(key)), False

            sized = SizedGraph(lowered_at, config, report, observers_for(config))
            key_of = key_function([tuple(g) for g in rec["getters"]], [])

            def run(args):
                return sized.programs.get(key_of(args)).run(args)

            return run, []

        run = bind_weights(build, consts, dict(self.consts), config, self.report)
        run = _writing_inputs(run, self.writes) if self.writes else run  # (the writes' indices: without pass-throughs)
        if rec.get("passthrough"):
            run = with_passthrough(run, [tuple(t) for t in rec["passthrough"]])
        aliases = {int(k): v for k, v in rec.get("input_outputs", {}).items()}
        if not aliases:
            return run

        def returning_inputs(args):  # (as AOTAutograd's wrapper: an output that is an input is that input)
            outs = run(args)
            for k, i in aliases.items():
                outs[k] = args[i]
            return outs

        return returning_inputs

    def __call__(self, *args):
        run = self._run
        if run is None:
            with self._lock:
                if self._run is None:
                    self._run = self._build(args)
                run = self._run
        return run(args)  # (the argument tuple as it comes: nothing on our side writes into the argument list)
