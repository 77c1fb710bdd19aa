"""bench/run.py's FLOP counts, its roof (the measured GEMM peak) and its heavy-layer figures (issue 27),
in small configurations: the counter against hand counts, the peak and heavy workers in their own
processes, and the heavy-layer target's verdicts."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "bench" / "run.py"


def _worker(*args, timeout=240) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", AIRGRAPH_CACHE_DIR="")
    for k in ("PYTHONPATH", "AIRGRAPH_EXT_DIR"):  # absolute: the worker runs from the repository root
        if env.get(k):
            env[k] = os.pathsep.join(os.path.abspath(p) for p in env[k].split(os.pathsep) if p)
    p = subprocess.run([sys.executable, str(RUN), *map(str, args)], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=timeout)
    lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    assert p.returncode == 0 and lines, f"exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
    return json.loads(lines[-1][7:])


def test_count_flops_by_hand(bench):
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 32)
    assert bench.count_flops(lin, (torch.randn(4, 16),), {}) == dict(total=2 * 4 * 16 * 32,
                                                                    by_class=dict(gemm=2 * 4 * 16 * 32))
    conv = torch.nn.Conv2d(3, 8, 3, padding=1)
    want = 2 * (2 * 8 * 8 * 8) * (3 * 3 * 3)  # 2 x output elements x (in channels x kernel)
    assert bench.count_flops(conv, (torch.randn(2, 3, 8, 8),), {}) == dict(total=want, by_class=dict(conv=want))

    class Attn(torch.nn.Module):
        def forward(self, q, k, v):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    q, k = torch.randn(1, 2, 8, 16), torch.randn(1, 2, 12, 16)
    # (CPU attention: torch's table lacks its op; bench counts it) Q K^T and P V: 2 x 2 x 8 x 12 x 16 each
    got = bench.count_flops(Attn(), (q, k, k), {})
    assert got == dict(total=2 * 2 * (2 * 8 * 12 * 16), by_class=dict(attention=2 * 2 * (2 * 8 * 12 * 16))), got
    # elementwise work is not counted
    assert bench.count_flops(torch.nn.ReLU(), (torch.randn(100),), {})["total"] == 0


def test_count_flops_zoo_resnet50(bench):
    from airgraph import zoo

    model, args, kwargs = zoo.build("resnet50", size="small", batch=1)
    one = bench.count_flops(model, args, kwargs)
    assert one["total"] > 0 and one["by_class"]["conv"] > 0.9 * one["total"], one
    model, args, kwargs = zoo.build("resnet50", size="small", batch=2)
    assert bench.count_flops(model, args, kwargs)["total"] == 2 * one["total"]  # FLOPs scale with the batch


def test_default_batches(bench):
    assert bench.default_batches("resnet50") == [1, 8, 32]
    assert bench.default_batches("mobilenetv2") == [1, 8, 32]
    assert bench.default_batches("gpt2") == [1, 8]


def test_peak_worker(bench):
    r = _worker("--peak-worker", "128,256")
    assert [row["n"] for row in r["rows"]] == [128, 256] and r["threads"] == bench.THREADS, r
    for row in r["rows"]:
        assert row["torch_gflops"] > 0.1 and row.get("airgraph_gflops", 0) > 0.1, row
    assert r["torch_gflops"] == max(row["torch_gflops"] for row in r["rows"])
    assert r["roof_gflops"] == max(r["torch_gflops"], r["airgraph_gflops"])
    assert r["roof_by"] in ("torch.mm", "airgraph")
    lines = bench._roof_lines(dict(r, other_load=0.0, steal=0.0), bench.cpu_info())
    assert f"**{r['roof_gflops']:.1f} GFLOP/s**" in lines[-1] and bench.cpu_info()["name"] in lines[-1], lines


def test_heavy_worker_resnet50(bench):
    r = _worker("--heavy-worker", "resnet50", "2", "--size", "small", "--heavy-runs", "3")
    assert r["runs"] == 3 and r["flops"] > 0 and set(r["flops_by_class"]) <= {"conv", "gemm", "attention"}, r
    assert "conv" in r["op_us"] and r["heavy_us_by_class"]["conv"] > 0, r  # the profiler's op names
    assert 0 < r["heavy_us"] <= r["kernel_us"], r
    # resnet50 runs whole on the engine: one Dynamo graph, no node left to PyTorch (the profile sees it all)
    assert r["graphs"] == 1 and r["fallback_nodes"] == 0, r
    # the fraction is the heavy GFLOP/s over the roof given; the GFLOP/s themselves stay below what
    # the cores could do at all (5 GHz, two 16-lane FMA units each). (A roof measured here would be
    # too noisy to bound the fraction: tests run two at a time on two cores.)
    roof = _worker("--peak-worker", "512")["roof_gflops"]
    f = bench.heavy_figures(r, roof)
    assert 0 < f["gflops"] < (os.cpu_count() or 1) * 5.0 * 64 and 0 < f["heavy_share"] <= 1, f
    assert abs(f["fraction"] - f["gflops"] / roof) < 1e-9, f
    assert abs(f["gflops"] - r["flops"] / (r["heavy_us"] * 1e3)) < 1e-9
    lines = bench._heavy_lines([f], dict(roof_gflops=roof))
    assert lines[-1].startswith("| resnet50 | 2 | ") and f"{f['fraction']:.0%}" in lines[-1], lines
    assert lines[-1].endswith("| 1, 0 |"), lines


def test_heavy_target(bench):
    def row(model, fraction, batch=8):
        return dict(model=model, batch=batch, fraction=fraction, gflops=100 * fraction, roof_gflops=100.0)

    peak = dict(roof_gflops=100.0)
    (t,) = bench._heavy_targets([row("resnet50", 0.85), row("bert", 0.81)], peak)
    assert t["status"] == "met" and "resnet50 b8 85%" in t["detail"] and "bert b8 81%" in t["detail"], t
    (t,) = bench._heavy_targets([row("resnet50", 0.85), row("bert", 0.79)], peak)
    assert t["status"] == "missed", t
    (t,) = bench._heavy_targets([row("resnet50", 0.9)], peak)  # bert not measured: not met
    assert t["status"] == "missed" and "bert b8 not measured" in t["detail"], t
    # a fallback node or a second graph: time the profile does not see, not met
    (t,) = bench._heavy_targets([row("resnet50", 0.85), dict(row("bert", 0.9), graphs=2, fallback_nodes=1)], peak)
    assert t["status"] == "missed" and "bert b8 2 graphs, 1 fallback nodes" in t["detail"], t
    (t,) = bench._heavy_targets([row("resnet50", 0.9, batch=2)], peak)
    assert t["status"] == "not evaluated", t
    assert bench._heavy_targets(None, peak) == []


def test_conv_layouts_bench_builds_and_reports_the_primitives_choice():
    """bench/conv_layouts.py (issue 35, item 2) builds its C++ program against airgraph's oneDNN and
    reports, for a shape, both times and the layouts format_tag::any chose."""
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "conv_layouts.py"), "--only", "dw960"], cwd=ROOT,
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    rows = [l for l in p.stdout.splitlines() if l.startswith("| mobilenetv2 dw960")]
    assert len(rows) == 1, p.stdout
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert float(cells[1]) > 0 and float(cells[3]) > 0 and cells[6].endswith("x"), cells
    assert " -> " in cells[5], cells  # the layouts the primitive chose
    assert "chose NHWC for" in p.stdout
