"""airgraph.explain(model, *inputs): which ops ran on the engine and which fell
back to PyTorch, with counts, printable and as CSV (like TorchAir's fx_summary)."""
from __future__ import annotations

import csv
import io
import re
from collections import Counter
from dataclasses import dataclass

import torch

from . import backend as _backend
from .config import CompilerConfig
from .graph_types import CompileReport, phases_text, sum_phases


# an engine node of the optimized graph's text that carries the FX nodes it absorbed
_FUSED_NODE = re.compile(r'= ([\w:]+)\(.*\bfused="?([\w.,]+)"?')
_MAX_FUSION_LINES = 8


@dataclass
class ExplainReport:
    reports: list[CompileReport]
    graph_breaks: int

    @property
    def nodes(self):
        return [n for r in self.reports for n in r.nodes]

    @property
    def total_nodes(self) -> int:
        return len(self.nodes)

    @property
    def fallback_nodes(self) -> int:
        return sum(1 for n in self.nodes if not n.native)

    @property
    def native_nodes(self) -> int:
        return self.total_nodes - self.fallback_nodes

    @property
    def compile_ms(self) -> float:
        return sum(r.compile_ms for r in self.reports)

    def counts(self) -> dict[str, tuple[int, int]]:
        """op -> (native count, fallback count)."""
        nat, fb = Counter(), Counter()
        for n in self.nodes:
            (nat if n.native else fb)[n.target] += 1
        return {op: (nat[op], fb[op]) for op in sorted(set(nat) | set(fb))}

    def fallbacks(self):
        return [n for n in self.nodes if not n.native]

    def fusions(self) -> list[tuple[int, str, list[str]]]:
        """(graph id, engine op, FX nodes it absorbed) of every engine node a fusion pass made from
        several FX nodes (a GEMM with its post-ops, a fused elementwise chain, a norm)."""
        out = []
        for r in self.reports:
            for eg in r.graphs:
                for line in (getattr(eg, "graph_text", "") or "").splitlines():
                    m = _FUSED_NODE.search(line)
                    if m:
                        out.append((eg.gid, m.group(1), m.group(2).split(",")))
        return out

    def to_csv(self, path: str | None = None) -> str:
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(["op", "native", "fallback", "reason"])
        reasons = {}
        for n in self.fallbacks():
            reasons.setdefault(n.target, n.reason)
        for op, (a, b) in self.counts().items():
            w.writerow([op, a, b, reasons.get(op, "")])
        text = buf.getvalue()
        if path:
            with open(path, "w") as f:
                f.write(text)
        return text

    def __str__(self) -> str:
        lines = [
            f"airgraph explain: {len(self.reports)} graph(s), {self.graph_breaks} graph break(s), "
            f"{self.total_nodes} ATen nodes, {self.native_nodes} native, {self.fallback_nodes} fallback, "
            f"compile {self.compile_ms:.1f} ms",
            f"{'op':<48} {'native':>7} {'fallback':>9}",
        ]
        phases = sum_phases(self.reports)
        if phases:  # (where the compile time went: CompileReport.phases)
            lines.insert(1, f"cold start: {phases_text(phases)}")
        for op, (a, b) in self.counts().items():
            lines.append(f"{op:<48} {a:>7} {b:>9}")
        for n in self.fallbacks():
            lines.append(f"  fallback {n.name} ({n.target}): {n.reason}" + (f"\n    at {n.source}" if n.source else ""))
        fusions = self.fusions()
        for gid, op, names in fusions[:_MAX_FUSION_LINES]:
            lines.append(f"  graph_{gid}: {op} also computes {', '.join(names)}")
        if len(fusions) > _MAX_FUSION_LINES:
            lines.append(f"  ... {len(fusions) - _MAX_FUSION_LINES} more fused engine nodes (report.fusions())")
        for r in self.reports:
            for g in r.symbolic:
                ms = sorted(g.build_ms)
                lines.append(f"  graph_{g.gid} has symbolic sizes: {g.describe()}; {len(ms)} size(s) built, "
                             f"engine work per new size {ms[len(ms) // 2]:.1f} ms (median); "
                             + ("lowered once for every size" if g.template is not None
                                else f"lowered per size ({g.template_reason})")
                             + ("" if g.template is None else "; optimized once" if g.optimized is not None
                                else f"; passes per size ({g.optimized_reason})")
                             + (f"; gears {dict((str(k), v) for k, v in g.gears.items())}" if g.gears else ""))
        return "\n".join(lines)


def explain(model, *inputs, config: CompilerConfig | None = None, dynamic: bool | None = False,
            **kwargs) -> ExplainReport:
    """Compiles `model` with airgraph, runs it once on `inputs` and reports every ATen node.
    dynamic=True compiles with symbolic sizes (as torch.compile(..., dynamic=True) would); the
    report then names each graph's symbols and where they are read from."""
    try:
        with _backend.collect_reports() as sink:
            torch._dynamo.reset()
            compiled = torch.compile(model, backend=_backend.get_backend(config), dynamic=dynamic)
            with torch.no_grad():
                compiled(*inputs, **kwargs)
    finally:
        torch._dynamo.reset()
    return ExplainReport(sink, max(0, len(sink) - 1))
