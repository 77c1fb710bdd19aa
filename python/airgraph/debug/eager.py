"""run_eagerly: the optimized ATen FX graph runs in PyTorch, not on the engine.

If the result is right this way and wrong with the engine, the engine (a
lowering, a pass or a kernel) is at fault; if it is wrong this way too, the
capture (Dynamo/AOTAutograd/decompositions) is. With dump_data on, it writes
every FX node's output of the first call in the same format as the engine's
data dump, so the two dumps can be compared (python -m airgraph.debug compare).
"""
from __future__ import annotations

import itertools
import os

import torch
import torch.fx

from ..graph_types import NodeReport, source_line, target_name
from . import dump as _dump

_EAGER_IDS = itertools.count()


class _Recorder(torch.fx.Interpreter):
    def __init__(self, gm):
        super().__init__(gm)
        self.values: dict[str, torch.Tensor] = {}

    def run_node(self, n):
        out = super().run_node(n)
        if n.op == "call_function" and isinstance(out, torch.Tensor):
            self.values[n.name] = out.detach().clone()
        return out


def run_recording(gm: torch.fx.GraphModule, args) -> tuple[list, dict[str, torch.Tensor]]:
    """Runs gm in PyTorch and returns (outputs, {fx node name: output})."""
    rec = _Recorder(gm)
    with torch.no_grad():
        outs = rec.run(*args)
    return outs, rec.values


def eager_runner(gm: torch.fx.GraphModule, config, report):
    for n in gm.graph.nodes:
        if n.op == "call_function":
            report.nodes.append(NodeReport(n.name, target_name(n), False, "run_eagerly", source_line(n)))
    gid = next(_EAGER_IDS)
    calls = [0]

    def run(args):
        calls[0] += 1
        if config.dump_data and calls[0] == 1:
            outs, values = run_recording(gm, args)
            entries, tensors = [], []
            for n in gm.graph.nodes:
                if n.name in values:
                    t = values[n.name]
                    entries.append(dict(name=n.name, fx_name=n.name, op=target_name(n), dtype=str(t.dtype)[6:],
                                        shape=list(t.shape), source=source_line(n)))
                    tensors.append(t)
            sel = _dump.select(entries, config.dump_filter)
            keep = {e["name"] for e in sel}
            _dump.write_data(os.path.join(config.dump_dir, f"eager_data_{gid}"), sel,
                             [t for e, t in zip(entries, tensors) if e["name"] in keep], config.dump_format)
            return outs
        return gm(*args)

    run._boxed_call = True
    return run
