"""Debugging tools: graph dumps, data dumps, run_eagerly, compare (with a
planted wrong kernel), pass bisection, profiler trace, logging statistics."""
import json
import os
import subprocess
import sys
import time

import pytest
import torch

import airgraph
from airgraph.debug import dump as dumpmod
from conftest import assert_close


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        h = torch.tanh(h) * 2.0
        return self.fc2(h).sigmoid()


# Node-level granularity: with the fusion passes on, relu/tanh/mul/sigmoid of Net
# are absorbed into the two linear nodes.
UNFUSED = dict(disable_passes=["fuse_epilogues", "fuse_elementwise"])


def _run(model, x, **cfg):
    torch._dynamo.reset()
    c = torch.compile(model, backend=airgraph.get_backend(airgraph.CompilerConfig(**cfg)), dynamic=False)
    with torch.no_grad():
        return c(x)


def test_graph_dump_files_and_rerun(tmp_path):
    torch.manual_seed(0)
    m, x = Net().eval(), torch.randn(3, 8)
    out = _run(m, x, dump_graph=True, dump_dir=str(tmp_path))
    gdir = tmp_path / "graph_0" if (tmp_path / "graph_0").exists() else next(tmp_path.glob("graph_*"))
    names = sorted(p.name for p in gdir.iterdir())
    assert "fx_graph.txt" in names and "fx_graph.py" in names
    stages = sorted(n for n in names if n.endswith(".txt") and n[0].isdigit())
    assert stages[0].startswith("00_lowered") and any("dce" in s for s in stages), stages
    text = (gdir / stages[-1]).read_text()
    assert "linear" in text or "matmul" in text
    assert "test_debug.py" in text  # source lines survive into the dump
    dot = (gdir / stages[-1].replace(".txt", ".dot")).read_text()
    assert dot.startswith("digraph") and "->" in dot
    # the runnable Python file rebuilds the graph and gives the same output
    script = gdir / stages[-1].replace(".txt", ".py")
    res = tmp_path / "out.pt"
    subprocess.run([sys.executable, str(script), "--out", str(res)], check=True, env=dict(os.environ))
    rerun = torch.load(res)
    assert_close(rerun[0], out)


def test_data_dump_with_filter_and_index(tmp_path):
    m, x = Net().eval(), torch.randn(2, 8)
    _run(m, x, dump_data=True, dump_dir=str(tmp_path), dump_filter="^(relu|tanh)", **UNFUSED)
    ddir = next(tmp_path.glob("data_*"))
    index = json.loads((ddir / "index.json").read_text())
    assert {e["fx_name"] for e in index} == {"relu", "tanh"}, index
    for e in index:
        assert (ddir / e["file"]).exists()
        assert e["shape"] == [2, 16]
    relu = dict((e["fx_name"], t) for e, t in dumpmod.read_data(str(ddir)))["relu"]
    assert_close(relu, torch.relu(m.fc1(x)).detach())


def test_data_dump_safetensors_everything(tmp_path):
    m, x = Net().eval(), torch.randn(2, 8)
    _run(m, x, dump_data=True, dump_dir=str(tmp_path), dump_format="safetensors", **UNFUSED)
    ddir = next(tmp_path.glob("data_*"))
    assert (ddir / "data.safetensors").exists()
    entries = dumpmod.read_data(str(ddir))
    assert len(entries) >= 5
    assert all(e["file"] == "data.safetensors" for e, _ in entries)


def test_run_eagerly_matches_and_dumps(tmp_path):
    m, x = Net().eval(), torch.randn(2, 8)
    with torch.no_grad():
        want = m(x)
    got = _run(m, x, run_eagerly=True, dump_data=True, dump_dir=str(tmp_path))
    assert_close(got, want)
    assert list(tmp_path.glob("eager_data_*/index.json"))
    rep = airgraph.explain(m, x, config=airgraph.CompilerConfig(run_eagerly=True))
    assert rep.native_nodes == 0 and all(n.reason == "run_eagerly" for n in rep.nodes)


def test_dumps_compare_on_command_line(tmp_path):
    m, x = Net().eval(), torch.randn(2, 8)
    _run(m, x, dump_data=True, dump_dir=str(tmp_path / "engine"))
    _run(m, x, run_eagerly=True, dump_data=True, dump_dir=str(tmp_path / "eager"))
    a = next((tmp_path / "engine").glob("data_*"))
    b = next((tmp_path / "eager").glob("eager_data_*"))
    ok = subprocess.run([sys.executable, "-m", "airgraph.debug", "compare", str(a), str(b)], capture_output=True,
                        text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "no divergence" in ok.stdout
    # plant a wrong kernel on tanh and compare again: the CLI names the node
    _run(m, x, dump_data=True, dump_dir=str(tmp_path / "bad"), fault_node="tanh", **UNFUSED)
    c = next((tmp_path / "bad").glob("data_*"))
    bad = subprocess.run([sys.executable, "-m", "airgraph.debug", "compare", str(c), str(b)], capture_output=True,
                         text=True)
    assert bad.returncode == 1
    assert "first divergence at tanh" in bad.stdout


def test_compare_finds_planted_fault_at_the_right_node():
    m, x = Net().eval(), torch.randn(4, 8)
    rep = airgraph.debug.compare(m, x, bisect_passes=False, config=airgraph.CompilerConfig(**UNFUSED))
    assert rep.ok, str(rep)
    assert rep.compared >= 4  # relu, tanh, mul, sigmoid (the linears are rebuilt by canonicalize)
    cfg = airgraph.CompilerConfig(fault_node="tanh", **UNFUSED)
    rep = airgraph.debug.compare(m, x, config=cfg, bisect_passes=False)
    assert not rep.ok
    assert rep.first.name == "tanh", str(rep)
    assert rep.first.shape == [4, 16] and rep.first.dtype == "float32"
    assert rep.first.max_abs == pytest.approx(1.0, abs=1e-3)
    assert "test_debug.py" in rep.first.source
    assert "first divergence at tanh" in str(rep)


def test_compare_with_fusion_names_the_fused_node():
    # fused: linear(fc1) + relu + tanh + mul is one engine node named "addmm"
    m, x = Net().eval(), torch.randn(4, 8)
    rep = airgraph.debug.compare(m, x, bisect_passes=False)
    assert rep.ok, str(rep)
    rep = airgraph.debug.compare(m, x, config=airgraph.CompilerConfig(fault_node="addmm"), bisect_passes=True)
    assert not rep.ok
    assert rep.first.name == "mul", str(rep)  # the fused node's result is the value of mul
    assert rep.first.fused == ["relu", "tanh", "mul"], str(rep)
    assert "fused engine node covering relu, tanh, mul" in str(rep)
    # the planted fault is in a kernel, not in a pass: no single pass is to blame
    assert rep.passes_at_fault == [] or "fuse_epilogues" in rep.passes_at_fault


def test_profiler_table_and_chrome_trace(tmp_path):
    m, x = Net().eval(), torch.randn(2, 8)
    rep = airgraph.debug.profile(m, x, runs=5, config=airgraph.CompilerConfig(**UNFUSED))
    instrs = [r for r in rep.rows]
    assert len(instrs) >= 5 and all(r.calls == 5 for r in instrs)
    assert "avg us" in rep.table()
    path = tmp_path / "trace.json"
    rep.chrome_trace(str(path))
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    assert len(events) == len(instrs)  # one event per executed instruction
    assert {e["name"] for e in events} == {r.name for r in instrs}
    assert all(e["ph"] == "X" and e["dur"] >= 0 for e in events)


def test_profiler_covers_calls_that_change_a_size():
    # a decode step appends to its KV cache: every run has a new size (a recompile, then a program per
    # size); the table covers every run, added up per node, not only the programs the first call built
    pytest.importorskip("transformers")
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2)
    m = LlamaForCausalLM(cfg).eval()
    cache = DynamicCache(config=cfg)
    with torch.no_grad():
        m(input_ids=torch.randint(0, 320, (1, 8)), cache=cache, use_cache=True)
    rep = airgraph.debug.profile(m, runs=4, input_ids=torch.randint(0, 320, (1, 1)), cache=cache, use_cache=True)
    assert cache.get_seq_length() == 8 + 5  # (warm-up and four runs, each one position)
    linears = [r for r in rep.rows if r.op == "linear"]
    assert linears and all(r.calls == 4 and r.total_us > 0 for r in rep.rows), \
        sorted({(r.calls, r.total_us > 0) for r in rep.rows})


def test_compile_statistics_in_explain():
    m, x = Net().eval(), torch.randn(2, 8)
    rep = airgraph.explain(m, x)
    stats = rep.reports[0].pass_stats[0]
    names = [s[0] for s in stats]
    assert names[:2] == ["canonicalize", "fold_constants"] and names[-1] == "materialize_outputs"
    ex = rep.reports[0].exec_stats[0]
    assert ex["arena_bytes"] <= ex["naive_bytes"]
    assert rep.compile_ms > 0


def test_compare_on_a_zoo_model_has_no_false_divergence():
    # BERT: epilogue fusion moves reshapes behind fused GEMMs; compare must not
    # mistake such a rebuilt value for the FX node whose name it carries.
    from airgraph import zoo

    model, args, kwargs = zoo.build("bert", "small")
    rep = airgraph.debug.compare(model, *args, bisect_passes=False, **kwargs)
    assert rep.ok, str(rep)
    assert rep.compared >= 10


def test_compile_report_splits_the_cold_start(tmp_path, monkeypatch, caplog):
    # issue 37: a cold start is split into Dynamo's tracing and guards, AOTAutograd, airgraph's
    # lowering, the passes and the kernels, per graph; the split is logged on the first call
    import logging

    from airgraph import backend as ag_backend
    from airgraph.graph_types import PHASES, sum_phases

    monkeypatch.setenv("AIRGRAPH_CACHE_DIR", str(tmp_path))  # (a miss: every phase runs)
    torch._dynamo.reset()
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 4)).eval()
    x = torch.randn(3, 8)
    with ag_backend.collect_reports() as reports, torch.no_grad(), caplog.at_level(logging.INFO, "airgraph"):
        t0 = time.perf_counter()
        out = torch.compile(m, backend="airgraph")(x)
        total = time.perf_counter() - t0
    torch.testing.assert_close(out, m(x))
    phases = sum_phases(reports)
    assert set(phases) == {k for k, _ in PHASES}, phases
    assert all(v >= 0 for v in phases.values()) and 0 < sum(phases.values()) <= total, (phases, total)
    assert phases["dynamo"] > 0 and phases["aot"] > 0 and phases["guards"] > 0, phases
    line = [r.getMessage() for r in caplog.records if "cold start:" in r.getMessage()]
    assert line and "Dynamo tracing" in line[0] and "kernels and packing" in line[0], line
    torch._dynamo.reset()
