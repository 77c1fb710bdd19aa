"""The types every part of the front shares, at the bottom of its imports: the lowered graph
(`Lowered`), what a compile reports (`NodeReport`, `CompileReport`), the error of an input that
does not fit a compiled graph (`InputMismatch`), and small helpers on FX nodes and constants
(target names, source lines, get_attr tensors, binding saved constants by name).

It imports nothing of airgraph's but the C++ core and the lowering tables' helpers, so that the
compile cache, the debug tools and the pipeline can all import it and never each other back.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from ._core import EngineError
from .lowering import source_line  # noqa: F401  (re-exported: a node's user source line)


@dataclass
class NodeReport:
    name: str
    target: str
    native: bool
    reason: str = ""
    source: str = ""


@dataclass
class CompileReport:
    """What happened to each node of one compiled graph (airgraph.explain reads it)."""

    nodes: list[NodeReport] = field(default_factory=list)
    engine_graphs: int = 0
    compile_ms: float = 0.0
    pass_stats: list = field(default_factory=list)
    exec_stats: list = field(default_factory=list)
    graphs: list = field(default_factory=list)  # the EngineGraph objects (debug tools read them)
    rebuilds: int = 0  # engine rebuilds because a bound parameter or buffer changed
    # invoke_subgraph calls (torch.compiler.nested_compile_region's repeated blocks) inlined into the
    # graph before lowering (subgraphs.py): a block traced once, lowered as often as it is called
    inlined_subgraphs: int = 0
    symbolic: list = field(default_factory=list)  # SymbolicEngineGraph objects (graphs with symbolic sizes)
    # (lowered graph, optimized graph) of each graph compiled through the compile cache, for its
    # Dynamo-level entry: the backend writes that entry, or not, and drops them
    cache_graphs: list = field(default_factory=list)
    # where the cold start went, seconds per phase (PHASES names them, in the order they run):
    # Dynamo's tracing and guard building (read from torch's own timers on the graph's first call),
    # AOTAutograd, airgraph's lowering, the C++ passes, and kernel creation with weight packing
    phases: dict = field(default_factory=dict)

    def add_phase(self, name: str, seconds: float) -> None:
        self.phases[name] = self.phases.get(name, 0.0) + max(0.0, seconds)


# (phase key, how a line names it), in the order a cold start runs them
PHASES = (("dynamo", "Dynamo tracing"), ("aot", "AOTAutograd"), ("lowering", "lowering"), ("passes", "passes"),
          ("kernels", "kernels and packing"), ("guards", "guards"))


def phases_text(phases: dict) -> str:
    """'Dynamo tracing 1.2 s, AOTAutograd 0.8 s, ...' for the phases present (seconds)."""
    return ", ".join(f"{text} {phases[k]:.2f} s" for k, text in PHASES if k in phases)


def sum_phases(reports) -> dict:
    """The phases of several reports (one per graph) added up."""
    total: dict = {}
    for r in reports:
        for k, v in getattr(r, "phases", {}).items():
            total[k] = total.get(k, 0.0) + v
    return total


@dataclass
class Lowered:
    """An FX graph lowered into an engine graph (before the passes), and how to feed it."""

    g: Any
    input_positions: list
    scalar_inputs: dict  # argument position -> dtype of its 0-d tensor
    num_outputs: int
    fx_names: dict  # engine value id -> the FX node whose result it is (for data dumps and compare)

    def instance(self, sizes: list[int]) -> "Lowered":
        """The same lowering at other sizes (a graph lowered once for every size)."""
        return dataclasses.replace(self, g=self.g.instantiate(list(sizes)))

    def feeding(self) -> dict:
        """How to feed the graph, as JSON-ready data (saved beside the graph in an airgraph file)."""
        return {"input_positions": list(self.input_positions),
                "scalar_inputs": {str(k): str(v).replace("torch.", "") for k, v in self.scalar_inputs.items()},
                "num_outputs": self.num_outputs, "fx_names": {str(k): v for k, v in self.fx_names.items()}}

    @classmethod
    def from_feeding(cls, g, d: dict) -> "Lowered":
        return cls(g, list(d["input_positions"]), {int(k): getattr(torch, v) for k, v in d["scalar_inputs"].items()},
                   d["num_outputs"], {int(k): v for k, v in d.get("fx_names", {}).items()})


class InputMismatch(EngineError):
    """An engine graph got an input of another dtype or shape than it was compiled for."""


def target_name(node: torch.fx.Node) -> str:
    t = node.target
    if isinstance(t, torch._ops.OpOverload):
        return str(t)
    return getattr(t, "__name__", str(t))


def is_tensor_meta(v) -> bool:
    return isinstance(v, torch.Tensor)


def get_attr_tensor(n: torch.fx.Node):
    """The tensor a get_attr node reads (a constant the traced code created: torch.tensor(...), a mask)."""
    obj = n.graph.owning_module
    for part in str(n.target).split("."):
        obj = getattr(obj, part)
    return obj


def const_resolver(by_name: dict):
    """For C.load_graph_bytes: a constant written by name -> this process's tensor of that name."""

    def resolve(name, dtype, shape):
        t = by_name.get(name)
        if t is None:
            return None
        t = t.detach()
        return t if t.is_contiguous() else t.contiguous()

    return resolve


def _torch_data_ptr_fn() -> int:
    """Address of torch's `void* (PyObject*)` data-pointer function, which torch exports for
    Inductor's generated C++; 0 where this torch lacks it (callers then use .data_ptr())."""
    try:
        return int(torch._C._dynamo.guards._torchinductor_pyobject_tensor_data_ptr)
    except (AttributeError, TypeError, ValueError):
        return 0


DATA_PTR_FN = _torch_data_ptr_fn()
