"""torch's ahead-of-time compile path with backend="airgraph" (experimental in torch 2.x).

    compiled = torch.compile(model, backend="airgraph", fullgraph=True).aot_compile(((x,), {}))
    compiled.save_compiled_function("model.aot")
    # in a new process: no Dynamo tracing, no AOTAutograd, no lowering
    fn = torch.compiler.load_compiled_function(open("model.aot", "rb"))
    out = fn(model, x)   # (for a module: the module is passed, its parameters are bound at the first call)

and the module variant (one static graph per ModelInput, Dynamo's guards pick one per call):

    torch._dynamo.config.enable_aot_compile = True
    torch._dynamo.config.automatic_dynamic_shapes = False   # (else a second size is traced symbolically)
    c = torch.compile(model, backend="airgraph", fullgraph=True)
    c._aot_compile([ModelInput((x1,), {}, []), ModelInput((x2,), {}, [])])
    c._save_aot_compiled_module("model.aotm")
    # in a new process
    c = torch.compile(model, backend="airgraph", fullgraph=True)
    c._load_aot_compiled_module(open("model.aotm", "rb").read())

torch asks the backend's compiled callable for torch._dynamo.aot_compile_types.SerializableCallable:
airgraph's compiled callable is one. Its artifacts are the lowered engine graph (an airgraph file,
csrc/ir/serialize.h) with the parameters by name only, and how to feed it; the loaded callable
binds the parameters it is called with at its first call (checked on every call, as
torch.compile's are), runs the passes and builds the kernels. Saved only where AOTAutograd's
runtime wrapper had nothing to do that the engine does not: an inference graph that runs whole on
the engine, with static sizes, no outputs aliasing inputs or each other, and input writes the engine
makes itself; anything else is refused at save time with the reason.
"""
from __future__ import annotations

import dataclasses
import json
import pickle
import threading

import torch

from ._core import C, EngineError
from ._version import __version__
from .compiler import engine_runner
from .config import CompilerConfig
from .graph_types import CompileReport, Lowered, const_resolver
from .lower import lower_graph

try:
    from torch._dynamo.aot_compile_types import SerializableCallable
except ImportError:  # an older torch without the protocol: nothing to implement
    SerializableCallable = object

ARTIFACT_VERSION = 1


def aot_wrapper_reason(aot_gm, input_outputs: dict | None = None) -> str | None:
    """Why AOTAutograd's runtime wrapper does more than call the graph (None: it does not).
    input_outputs: where given, outputs that are an input itself (the wrapper returns that input)
    are accepted and listed in it (output position -> input position)."""
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None) if ctx is not None else None
    if meta is None:
        return "AOTAutograd gave no metadata"
    try:
        from torch._functorch._aot_autograd.schemas import (  # (torch internals another torch may lack)
            MutationType, OutputType, SubclassCreationMeta)
    except ImportError:
        return "this torch's AOTAutograd metadata is not known to airgraph"
    if any(getattr(i, "mutation_type", None) == MutationType.MUTATED_OUT_GRAPH for i in meta.input_info):
        return "an input is written outside the graph (AOTAutograd's wrapper copies it back)"
    if input_outputs is not None:
        input_outputs.update({k: o.base_idx for k, o in enumerate(meta.output_info)
                              if o.output_type == OutputType.is_input and o.base_idx is not None})
    aliasing = [f"output {k} {o.output_type.name} of {o.base_idx}" for k, o in enumerate(meta.output_info)
                if o.output_type != OutputType.non_alias and k not in (input_outputs or {})]
    if aliasing:
        return "an output aliases an input or another output (" + ", ".join(aliasing) + ")"
    if getattr(meta, "num_intermediate_bases", 0):
        return "outputs share intermediate bases"
    if any(getattr(i, "mutates_metadata", False) for i in meta.input_info):
        return "an input's metadata is mutated"
    if any(isinstance(m, SubclassCreationMeta) for m in getattr(meta, "subclass_inp_meta", None) or ()):
        return "tensor subclass inputs"
    if any(isinstance(m, SubclassCreationMeta) for m in getattr(meta, "subclass_fw_graph_out_meta", None) or ()):
        return "tensor subclass outputs"
    if getattr(meta, "grad_enabled_mutation", None) is not None:
        return "the graph switches grad mode (AOTAutograd's wrapper sets it after each call)"
    if getattr(meta, "tokens", None) or getattr(meta, "is_rng_op_functionalized", False):
        return "side-effect tokens or functionalized random numbers"
    return None


class AirgraphCompiled(SerializableCallable):
    """What airgraph's backend returns to Dynamo: AOTAutograd's callable, plus what torch's
    aot_compile needs to save it (see the module text)."""

    def __init__(self, fn, state: dict):
        self.fn = fn
        self.state = state

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    @classmethod
    def serialize_compile_artifacts(cls, fn: "AirgraphCompiled") -> bytes:
        s = fn.state
        if "cached" in s:  # a compile cache hit: its entry's lowered graph, weights named by position
            c = s["cached"]
            return _artifacts(c["graph"], c["feeding"], c["consts"], c["writes"], s["config"])
        reason = s.get("reason") or ("the graph was not compiled for inference" if "gm" not in s else None)
        if reason is None and s["report"].symbolic:
            reason = ("it has symbolic sizes (dynamic=True, or a second input size: Dynamo traced the sizes "
                      "symbolically, which this path does not save). Compile one static graph per size with "
                      "torch._dynamo.config.automatic_dynamic_shapes = False (the module variant's ModelInputs "
                      "then each get their own), or use airgraph.export, which takes symbolic sizes")
        elif reason is None and (s["report"].engine_graphs != 1 or any(not n.native for n in s["report"].nodes)):
            reason = "it does not run whole on the engine (PyTorch fallback nodes)"
        if reason is None and s["gm"].meta.get("airgraph_passthrough"):
            reason = "it returns a size among its outputs"
        if reason:
            raise RuntimeError(f"airgraph cannot save this compiled graph for torch's aot_compile: {reason}")
        gm, consts, config = s["gm"], s["consts"], s["config"]
        low = lower_graph(gm, consts)
        phs = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
        graph = low.g.save(True, f"airgraph {__version__}", "", [phs[i] for i in consts])
        return _artifacts(graph, low.feeding(), {str(i): phs[i] for i in consts},
                          [list(w) for w in gm.meta.get("airgraph_input_writes", ())], config)

    @classmethod
    def deserialize_compile_artifacts(cls, data: bytes) -> "LoadedAot":
        return LoadedAot(pickle.loads(data))


def _artifacts(graph: bytes, feeding: dict, consts: dict, writes: list, config) -> bytes:
    """The bytes torch's aot_compile saves: the lowered graph (weights by name) and how to feed it."""
    meta = {"version": ARTIFACT_VERSION, "airgraph": __version__, "torch": torch.__version__, **feeding,
            "consts": consts, "writes": writes,
            "config": {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
                       if f.name not in ("cache_dir", "dump_dir")}}
    return pickle.dumps({"meta": json.dumps(meta), "graph": graph}, protocol=4)


class LoadedAot:
    """A compiled graph loaded from torch's aot_compile artifacts: binds the parameters of its
    first call, then runs like torch.compile's airgraph graph (weights checked every call)."""

    def __init__(self, artifacts: dict):
        self.meta = json.loads(artifacts["meta"])
        if self.meta.get("version") != ARTIFACT_VERSION:
            raise EngineError(f"airgraph aot_compile artifacts of version {self.meta.get('version')}; this airgraph "
                              f"reads {ARTIFACT_VERSION} (compile it again)")
        self.graph_bytes = artifacts["graph"]
        cfg = {k: v for k, v in self.meta["config"].items() if k in {f.name for f in dataclasses.fields(CompilerConfig)}}
        self.config = CompilerConfig(**cfg)
        self.consts = {int(k): v for k, v in self.meta["consts"].items()}
        self.writes = [tuple(w) for w in self.meta["writes"]]
        self._run = None
        self._lock = threading.Lock()

    def _lowered(self, consts: dict):
        g, _, _ = C.load_graph_bytes(self.graph_bytes, const_resolver({self.consts[i]: t for i, t in consts.items()}))
        return Lowered.from_feeding(g, self.meta)

    def _build(self, args):
        consts = {i: args[i] for i in self.consts}
        for i, t in consts.items():
            if not isinstance(t, torch.Tensor):
                raise EngineError(f"argument {i} ({self.consts[i]}) should be a tensor, got {type(t).__name__}")
        self.report = CompileReport()
        return engine_runner(self.writes, consts, dict(self.consts), self.config, self.report,
                             lambda consts: (self._lowered(consts), False))

    def __call__(self, *args):
        if self._run is None:
            with self._lock:
                if self._run is None:
                    self._run = self._build(args)
        return self._run(list(args))


def wrap(fn, state: dict):
    """The backend's result: `fn` itself where torch has no aot_compile protocol."""
    return AirgraphCompiled(fn, state) if SerializableCallable is not object else fn
