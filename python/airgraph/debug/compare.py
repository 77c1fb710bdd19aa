"""Accuracy bisection: find the first node where the engine and PyTorch part ways."""
from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass, field

import torch

from .. import backend as _backend  # (the module: this runs while airgraph.backend itself is imported)
from .._core import C
from ..config import CompilerConfig
from . import dump as _dump
from .eager import run_recording


@dataclass
class Divergence:
    name: str          # FX node name
    op: str            # engine op (or ATen op for dump comparisons)
    target: str        # ATen target
    shape: list
    dtype: str
    max_abs: float
    max_rel: float
    mean_abs: float
    mismatched: float  # fraction of elements beyond tolerance
    source: str
    fused: list = field(default_factory=list)  # FX nodes fused into the engine node that computed it

    def __str__(self):
        return (f"first divergence at {self.name} ({self.target}, engine op {self.op}) "
                f"{self.dtype}{self.shape}: max abs {self.max_abs:.3g}, max rel {self.max_rel:.3g}, "
                f"mean abs {self.mean_abs:.3g}, {100 * self.mismatched:.1f}% of elements beyond tolerance"
                + (f"\n  computed by a fused engine node covering {', '.join(self.fused)}" if self.fused else "")
                + (f"\n  at {self.source}" if self.source else ""))


@dataclass
class CompareReport:
    compared: int = 0
    first: Divergence | None = None
    output_max_abs: float = 0.0
    passes_at_fault: list[str] = field(default_factory=list)
    rtol: float = 0.0
    atol: float = 0.0

    @property
    def ok(self) -> bool:
        return self.first is None

    def __str__(self):
        head = f"airgraph compare: {self.compared} node outputs compared (rtol {self.rtol}, atol {self.atol}); "
        if self.first is None:
            return head + f"no divergence; final outputs max abs diff {self.output_max_abs:.3g}"
        s = head + str(self.first) + f"\n  final outputs max abs diff {self.output_max_abs:.3g}"
        if self.passes_at_fault:
            s += "\n  switching off pass(es) " + ", ".join(self.passes_at_fault) + " removes the divergence"
        return s


def _stats(a: torch.Tensor, b: torch.Tensor, rtol: float, atol: float):
    """(diverges, max_abs, max_rel, mean_abs, fraction mismatched) of engine a vs reference b."""
    if a.shape != b.shape:
        return True, float("inf"), float("inf"), float("inf"), 1.0
    if a.numel() == 0:
        return False, 0.0, 0.0, 0.0, 0.0
    if not (a.dtype.is_floating_point or b.dtype.is_floating_point):
        bad = a != b
        frac = bad.float().mean().item()
        return bool(bad.any()), float(bad.any()), float(bad.any()), frac, frac
    a, b = a.double(), b.double()
    d = (a - b).abs()
    nan_mismatch = torch.isnan(a) != torch.isnan(b)
    d = torch.where(torch.isnan(a) & torch.isnan(b), torch.zeros_like(d), d)
    bad = (d > atol + rtol * b.abs()) | nan_mismatch
    rel = d / b.abs().clamp_min(1e-12)
    return (bool(bad.any()), d.max().item(), rel.max().item(), d.mean().item(), bad.double().mean().item())


def _flat(o):
    if isinstance(o, torch.Tensor):
        return [o]
    if isinstance(o, (list, tuple)):
        return [t for x in o for t in _flat(x)]
    if isinstance(o, dict):
        return [t for x in o.values() for t in _flat(x)]
    return []


def _run_compiled(model, inputs, kwargs, config):
    with _backend.collect_reports() as sink:
        torch._dynamo.reset()
        with torch.no_grad():
            out = torch.compile(model, backend=_backend.get_backend(config), dynamic=False)(*inputs, **kwargs)
    return out, [g for r in sink for g in r.graphs]


def _max_abs(got, want) -> float:
    return max(((a.double() - b.double()).abs().max().item() if a.numel() else 0.0)
               for a, b in zip(_flat(got), _flat(want))) if _flat(want) else 0.0


def compare(model, *inputs, rtol: float = 1e-4, atol: float = 1e-5, config=None, bisect_passes: bool = True,
            **kwargs) -> CompareReport:
    """Runs eager and airgraph side by side and reports the first diverging node."""
    base = config or CompilerConfig()
    with torch.no_grad():
        want = model(*inputs, **kwargs)
    rep = CompareReport(rtol=rtol, atol=atol)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = dataclasses.replace(base, dump_data=True, dump_filter=None, dump_dir=tmp, fallback=True)
        got, graphs = _run_compiled(model, inputs, kwargs, cfg)
        rep.output_max_abs = _max_abs(got, want)
        for eg in graphs:
            d = getattr(eg, "data_dump", None)  # (debug/dump.py's record of its first call)
            if d is None or d.first_args is None or d.gm is None:
                continue
            _, ref = run_recording(d.gm, d.first_args)
            by_fx = {e["fx_name"]: (e, t) for e, t in d.dumped if e.get("fx_name")}
            for n in d.gm.graph.nodes:
                if n.name not in by_fx or n.name not in ref:
                    continue
                e, t = by_fx[n.name]
                rep.compared += 1
                bad, mx, mr, ma, frac = _stats(t, ref[n.name], rtol, atol)
                if bad:
                    rep.first = Divergence(n.name, e["op"], str(n.target), e["shape"], e["dtype"], mx, mr, ma, frac,
                                           e["source"], e.get("fused", []))
                    break
            if rep.first:
                break
    if rep.first and bisect_passes:
        for p in C.pass_names():
            if p == "materialize_outputs":
                continue
            cfg = dataclasses.replace(base, disable_passes=list(base.disable_passes) + [p])
            out, _ = _run_compiled(model, inputs, kwargs, cfg)
            if all(not _stats(a, b, rtol, atol)[0] for a, b in zip(_flat(out), _flat(want))):
                rep.passes_at_fault.append(p)
    torch._dynamo.reset()
    return rep


def compare_dumps(dir_a: str, dir_b: str, rtol: float = 1e-4, atol: float = 1e-5) -> CompareReport:
    """Compares two data dumps (engine or run_eagerly) by FX node name, in dump A's order."""
    a = _dump.read_data(dir_a)
    b = {(e.get("fx_name") or e["name"]): (e, t) for e, t in _dump.read_data(dir_b)}
    rep = CompareReport(rtol=rtol, atol=atol)
    for e, t in a:
        key = e.get("fx_name") or e["name"]
        if key not in b:
            continue
        rep.compared += 1
        bad, mx, mr, ma, frac = _stats(t, b[key][1], rtol, atol)
        if bad:
            rep.first = Divergence(key, e["op"], b[key][0]["op"], e["shape"], e["dtype"], mx, mr, ma, frac,
                                   e.get("source", ""), e.get("fused", []))
            break
    return rep
