"""Per-node profile of compiled calls: a sorted table and a Chrome trace."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import torch

from .. import backend as _backend  # (the module: this runs while airgraph.backend itself is imported)
from ..config import CompilerConfig


@dataclass
class ProfileRow:
    graph: int
    name: str
    op: str
    kernel: str
    calls: int
    total_us: float

    @property
    def avg_us(self) -> float:
        return self.total_us / max(1, self.calls)


@dataclass
class ProfileReport:
    rows: list[ProfileRow]
    trace_events: list[dict]
    runs: int

    def table(self, top: int | None = None) -> str:
        total = sum(r.total_us for r in self.rows) or 1.0
        rows = sorted(self.rows, key=lambda r: -r.total_us)[:top]
        lines = [f"airgraph profile: {self.runs} run(s), {len(self.rows)} instructions, "
                 f"{total / self.runs:.1f} us per run in kernels",
                 f"{'node':<36} {'op':<16} {'kernel':<28} {'avg us':>9} {'total %':>8}"]
        for r in rows:
            lines.append(f"{r.name[:36]:<36} {r.op[:16]:<16} {r.kernel[:28]:<28} {r.avg_us:>9.2f} "
                         f"{100 * r.total_us / total:>7.1f}%")
        return "\n".join(lines)

    def __str__(self):
        return self.table(25)

    def chrome_trace(self, path: str | None = None) -> dict:
        """Chrome trace JSON (one complete event per executed instruction of the last run)."""
        trace = {"traceEvents": self.trace_events, "displayTimeUnit": "ns"}
        if path:
            with open(path, "w") as f:
                json.dump(trace, f)
        return trace


def profile(model, *inputs, runs: int = 10, config=None, **kwargs) -> ProfileReport:
    """Compiles `model` with profiling on, runs it `runs` times and reports per-node times.

    Calls that change a size (a KV cache that grows by one position per call) run a program per
    size: their rows are added up per node (the programs of one graph share node names), so the
    table covers every run, not only the programs built by the first call."""
    cfg = dataclasses.replace(config or CompilerConfig(), profile=True)
    graphs = _run_profiled(model, inputs, kwargs, cfg, runs)
    merged: dict[tuple, ProfileRow] = {}
    events = []
    offset_us = 0.0
    for g in graphs:
        if not g.profiles:
            continue
        instrs = g.exe.instructions()
        program = tuple(name for name, _, _ in instrs)  # (the sizes of one graph: the same nodes)
        for i, (name, op, kernel) in enumerate(instrs):
            total = sum(durs[i] for _, durs in g.profiles) / 1000.0
            row = merged.get((program, i, kernel))
            if row is None:
                merged[(program, i, kernel)] = ProfileRow(g.gid, name, op, kernel, len(g.profiles), total)
            else:
                row.calls += len(g.profiles)
                row.total_us += total
        for starts, durs in list(g.profiles)[-1:]:  # (each program's last run)
            for i, (name, op, kernel) in enumerate(instrs):
                events.append({"name": name, "cat": op, "ph": "X", "ts": offset_us + starts[i] / 1000.0,
                               "dur": durs[i] / 1000.0, "pid": 0, "tid": g.gid,
                               "args": {"op": op, "kernel": kernel, "graph": g.gid}})
            offset_us += (starts[-1] + durs[-1]) / 1000.0 if starts else 0.0
    return ProfileReport(list(merged.values()), events, runs)


def _run_profiled(model, inputs, kwargs, cfg, runs):
    """Compiles, warms up once, then runs `runs` times recording per-node times; the programs that
    ran (those the runs built too: a size that changes recompiles or builds a program)."""
    try:
        with _backend.collect_reports() as sink:
            torch._dynamo.reset()
            compiled = torch.compile(model, backend=_backend.get_backend(cfg))
            with torch.no_grad():
                compiled(*inputs, **kwargs)  # compile + warm up
                for g in [g for r in sink for g in r.graphs]:
                    g.profiles.clear()
                for _ in range(runs):
                    compiled(*inputs, **kwargs)
            graphs = [g for r in sink for g in r.graphs]
            seen = {id(g) for g in graphs}  # (+ the programs a symbolic graph built for later sizes)
            graphs += [p for r in sink for sg in r.symbolic for p in sg.programs.values()
                       if id(p) not in seen and hasattr(p, "profiles")]
    finally:
        torch._dynamo.reset()
    return graphs
