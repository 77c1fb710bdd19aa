"""The README's commands, run the way a user runs them: each in a fresh
subprocess (sys.executable, HF_HUB_OFFLINE=1, PYTHONPATH / AIRGRAPH_EXT_DIR
inherited when a developer set them), never in this test process.

- backend="airgraph" by name in a process that never imported airgraph, with and
  without options={...}, after `import airgraph`, and from a source tree without
  the installed entry point;
- the README's first Python block, as written there;
- the Debugging section's command lines (data dumps, then `python -m airgraph.debug
  compare`), as written there;
- bench/run.py in its tiny configuration (its generation and first-call sections included) and
  bench/zoo_report.py on one small model.
"""
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _env(**extra) -> dict:
    env = dict(os.environ)  # keeps PYTHONPATH / AIRGRAPH_EXT_DIR when the developer set them
    # ... made absolute, as some commands run in another folder (PYTHONPATH=python is relative)
    if env.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in env["PYTHONPATH"].split(os.pathsep) if p)
    if env.get("AIRGRAPH_EXT_DIR"):
        env["AIRGRAPH_EXT_DIR"] = os.path.abspath(env["AIRGRAPH_EXT_DIR"])
    env["HF_HUB_OFFLINE"] = "1"
    env.update(extra)
    return env


def _python(args, timeout=180, cwd=ROOT, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *map(str, args)], cwd=cwd, env=_env(**env), capture_output=True,
                          text=True, timeout=timeout)


def _script(tmp_path, name, text) -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def _ok(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 0, f"exit {p.returncode}\n--- stdout\n{p.stdout[-3000:]}\n--- stderr\n{p.stderr[-3000:]}"
    return p.stdout


def _readme_blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


# A small model whose result must match eager; prints OK only when every check passed.
_MODEL = """
import sys
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.LayerNorm(8), torch.nn.Linear(8, 4))
model.eval()
x = torch.randn(2, 4)
with torch.no_grad():
    want = model(x)


def check(got):
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def airgraph_ran():
    # the name resolved to airgraph's own backend function, and it compiled a graph
    from torch._dynamo.backends.registry import _COMPILER_FNS
    import airgraph.backend
    assert _COMPILER_FNS["airgraph"] is airgraph.backend.airgraph_backend, _COMPILER_FNS.get("airgraph")
"""


def test_backend_by_name_in_a_fresh_process(tmp_path):
    # The README's first line: no import of airgraph, Dynamo loads the entry point.
    s = _script(tmp_path, "by_name.py", _MODEL + """
assert "airgraph" not in sys.modules
with torch.no_grad():
    check(torch.compile(model, backend="airgraph")(x))
assert "airgraph" in sys.modules
airgraph_ran()
print("OK")
""")
    assert _ok(_python([s])).strip().endswith("OK")


def test_interpolate_by_name_in_a_fresh_process(tmp_path):
    # F.interpolate in a model compiled by name, airgraph never imported: the custom op the backend
    # rewrites it into (airgraph::interpolate2d) is registered by the time Dynamo hands the graph over
    s = _script(tmp_path, "interp_by_name.py", """
import sys
import torch
import torch.nn.functional as F

class Up(torch.nn.Module):
    def forward(self, x):
        return F.interpolate(x, scale_factor=2, mode="bilinear") + F.interpolate(x, size=(9, 5), mode="nearest").sum()

x = torch.randn(2, 3, 7, 6)
want = Up()(x)
assert "airgraph" not in sys.modules
with torch.no_grad():
    got = torch.compile(Up(), backend="airgraph")(x)
torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
import airgraph  # (now: inspect what ran)
rep = airgraph.explain(Up(), x)
targets = [n.target for n in rep.nodes]
assert rep.fallback_nodes == 0 and sum("interpolate2d" in t for t in targets) == 2, targets
print("OK")
""")
    assert _ok(_python([s])).strip().endswith("OK")


def test_backend_by_name_with_options_in_a_fresh_process(tmp_path):
    # options={...} reach airgraph's CompilerConfig: a graph dump appears where dump_dir says, without the
    # disabled pass; an unknown option is refused by name (not silently ignored).
    dump = tmp_path / "dump"
    s = _script(tmp_path, "by_name_options.py", _MODEL + f"""
assert "airgraph" not in sys.modules
opts = {{"disable_passes": ["cse"], "dump_graph": True, "dump_dir": {str(dump)!r}}}
with torch.no_grad():
    check(torch.compile(model, backend="airgraph", options=opts)(x))
airgraph_ran()
torch._dynamo.reset()
try:
    with torch.no_grad():
        torch.compile(model, backend="airgraph", options={{"no_such_option": 1}})(x)
except Exception as e:
    assert "no_such_option" in str(e), e
else:
    raise AssertionError("an unknown option was accepted")
print("OK")
""")
    assert _ok(_python([s])).strip().endswith("OK")
    stages = sorted(p.name for p in dump.glob("graph_*/*.txt"))
    assert any(re.match(r"\d\d_lowered", n) for n in stages), stages
    assert any("dce" in n for n in stages), stages  # the other passes ran
    assert not any("cse" in n for n in stages), stages  # the disabled one did not


def test_backend_by_name_after_import_and_after_listing(tmp_path):
    # `import airgraph` first, then the name; and the entry points listed before the import.
    s = _script(tmp_path, "after_import.py", _MODEL + """
import airgraph
with torch.no_grad():
    check(torch.compile(model, backend="airgraph")(x))
airgraph_ran()
print("OK")
""")
    assert _ok(_python([s])).strip().endswith("OK")
    s = _script(tmp_path, "after_listing.py", _MODEL + """
assert "airgraph" in torch._dynamo.list_backends()   # reads the entry points, imports nothing of ours
assert "airgraph" not in sys.modules
import airgraph
with torch.no_grad():
    check(torch.compile(model, backend="airgraph")(x))
airgraph_ran()
print("OK")
""")
    assert _ok(_python([s])).strip().endswith("OK")


def test_backend_by_name_from_a_source_tree_without_entry_point(tmp_path):
    # PYTHONPATH=python with no installed package: there is no entry point, so the name works
    # once airgraph is imported (and only then). Simulated by hiding the entry point group.
    s = _script(tmp_path, "no_entry_point.py", _MODEL + """
import importlib.metadata as md

_orig = md.entry_points
def entry_points(**kw):
    if kw.get("group") == "torch_dynamo_backends":
        return md.EntryPoints([])
    return _orig(**kw)
md.entry_points = entry_points

assert "airgraph" not in torch._dynamo.list_backends()
import airgraph
assert "airgraph" in torch._dynamo.list_backends()
with torch.no_grad():
    check(torch.compile(model, backend="airgraph")(x))
airgraph_ran()
print("OK")
""")
    assert _ok(_python([s])).strip().endswith("OK")


def test_readme_first_python_block(tmp_path):
    # The block exactly as the README shows it, after a prelude that defines `model` and `inputs`.
    block = _readme_blocks("python")[0]
    assert 'backend="airgraph"' in block and "airgraph.explain" in block, block
    s = _script(tmp_path, "readme_first_block.py", _MODEL + "\ninputs = (x,)\nmodel_eager = model\n" + block + """
with torch.no_grad():
    check(model(*inputs))
print("OK")
""")
    out = _ok(_python([s]))
    assert out.strip().endswith("OK")
    m = re.search(r"airgraph explain: .* (\d+) native, (\d+) fallback", out)  # explain's report was printed
    assert m and int(m.group(1)) > 0 and int(m.group(2)) == 0, out


def _debug_commands() -> list[str]:
    """The Debugging section's command lines (the data dumps and the compare)."""
    for block in _readme_blocks("bash"):
        if "AIRGRAPH_DUMP_DATA=1" in block and "airgraph.debug compare" in block:
            return [l for l in block.splitlines() if l.strip() and not l.lstrip().startswith("#")]
    raise AssertionError("README: no bash block with AIRGRAPH_DUMP_DATA=1 and `python -m airgraph.debug compare`")


def test_readme_debug_dump_and_compare_commands(tmp_path):
    # my_script.py of the README: any script that calls a model compiled by name.
    script = _script(tmp_path, "my_script.py", _MODEL + """
with torch.no_grad():
    check(torch.compile(model, backend="airgraph")(x))
""")
    commands = _debug_commands()
    assert len(commands) == 3, commands
    outs = []
    for line in commands:
        words = shlex.split(line)
        env = {}
        while "=" in words[0]:
            k, v = words.pop(0).split("=", 1)
            env[k] = v
        assert words[0] == "python", line
        # the README's /tmp/... folders, moved under tmp_path; my_script.py is the script above
        args = [str(tmp_path / w[len("/tmp/"):]) if w.startswith("/tmp/") else w for w in words[1:]]
        args = [str(script) if a == "my_script.py" else a for a in args]
        env = {k: str(tmp_path / v[len("/tmp/"):]) if v.startswith("/tmp/") else v for k, v in env.items()}
        outs.append(_python(args, cwd=tmp_path, **env))
    for p in outs[:2]:
        _ok(p)
    # the folders the README names exist (data_0 from the engine, eager_data_0 from run_eagerly)
    compare_args = shlex.split(commands[2])[-2:]
    for a in compare_args:
        assert (tmp_path / a[len("/tmp/"):] / "index.json").exists(), a
    out = _ok(outs[2])
    assert "airgraph compare:" in out and "no divergence" in out, out
    n = int(re.search(r"(\d+) node outputs compared", out).group(1))
    assert n >= 2, out


def test_bench_tiny(tmp_path):
    # The README's benchmark in its tiny configuration; results go to --out, never to bench/results.
    committed = ROOT / "bench" / "results" / "latest.md"
    before = committed.stat().st_mtime if committed.exists() else None
    out_dir = tmp_path / "bench"
    out = _ok(_python(["bench/run.py", "--tiny", "--out", out_dir], timeout=900))
    rows = {}
    for line in out.splitlines():
        m = re.match(r"\| minilm \| 1 \| (\w+) \| ([0-9.]+) \| ([0-9.]+)-([0-9.]+) \|", line)
        if m:
            rows[m.group(1)] = [float(g) for g in m.groups()[1:]]
    assert {"eager", "airgraph"} <= set(rows), out
    for b, (med, p25, p75) in rows.items():
        assert 0 < p25 <= med <= p75, (b, med, p25, p75)
    assert re.search(r"ISA: .*avx2", out), out  # the header names the CPU's instruction sets
    assert "torch 2." in out
    assert re.search(r"\| minilm \| 1 \| \d+ \| \d+%, \d+%( LOADED)? \| \w+ [<~] ", out), out  # the ranking row
    md = (out_dir / "latest.md").read_text()
    assert "| minilm | 1 | airgraph |" in md
    data = json.loads((out_dir / "latest.json").read_text())
    (cell,) = data["cells"]
    assert cell["rounds"] >= 3
    t = cell["times_ms"]
    assert len(t["eager"]) == len(t["airgraph"]) == cell["rounds"]  # paired: one call of each per round
    ag = cell["backends"]["airgraph"]
    assert ag["max_diff"] < 1e-3 and ag["cold_compile_s"] > 0 and ag["peak_rss_mb"] > 0, ag
    # the generation section (bench/generate.py's cells): under --tiny the small decoder, both caches, batch 1
    assert "**Generation**" in md and "Model `small`" in md, md
    for cache in ("dynamic", "static"):
        for b in ("eager", "airgraph"):
            # first generate(), prefill, decode and floor as numbers; tokens equal eager's
            # (then the RSS held after generating and the peak)
            assert re.search(rf"^\| fp32 \| {cache} \| 1 \| {b} \| \d+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| \d+ \| \d+ \| yes \|",
                             md, re.M), md
    gen = data["generation"]
    assert gen["models"] == ["small"] and gen["bandwidth_gbs"] > 0, gen
    rows = {(r["cache"], r["backend"]): r for r in gen["rows"]}
    assert set(rows) == {(c, b) for c in ("dynamic", "static") for b in ("eager", "airgraph")}, rows
    for r in rows.values():
        assert r["decode_ms"] > 0 and r["prefill_ms"] > 0 and r["floor_ms"] > 0 and r["equal"], r
        assert "tokens" not in r  # only their comparison with eager's is kept
    assert rows[("dynamic", "airgraph")]["fallback_nodes"] == 0, rows
    # the generation targets: evaluated from these cells, or "not evaluated" (no Inductor, no 0.5b here)
    status = {t["target"].split(" (")[0]: t["status"] for t in gen["targets"]}
    assert status["decode at least 2.5x faster than eager on small"] in ("met", "missed"), status
    assert status["dynamic cache within 10% of static"] in ("met", "missed"), status
    assert status["decode faster than Inductor in every cell"] == "not evaluated", status
    assert status["0.5B decode within 1.3x of the bandwidth floor"] == "not evaluated", status
    assert re.search(r"decode at least 2\.5x faster than eager on small .*: \*\*(met|missed)\*\*: "
                     r"small dynamic b1 [\d.]+x", md), md
    # the first-call section: under --tiny resnet50 small, each way to start in a fresh process
    assert "**First call**" in md, md
    num = r"[\d.]+"
    assert re.search(rf"^\| resnet50( \(LOADED: [a-z_, ]+\))? \| {num} \| {num} \({num}, {num}\) \| "
                     rf"{num} \({num}, {num}, \d+ hits? \(\d+ Dynamo\)\) \| {num} / {num} "
                     rf"\| {num} \| {num} \| {num} \({num}, {num}, {num}\) \| ({num}|error: .+) \| {num} \(\d+ frames\) "
                     rf"\| {num} \(0 frames\) \|$",
                     md, re.M), md
    first = data["first_call"]
    (row,) = first["rows"]
    assert row["model"] == "resnet50" and row["setup"]["eager_first_ms"] > 0, row
    cold, warm, exported = row["cold"], row["warm"], row["exported"]
    assert cold["total_ms"] > cold["own_ms"] > 0 and cold["cache"]["writes"] >= 1, cold
    assert warm["cache"]["hits"] >= 1 and warm["cache"]["misses"] == 0, warm  # the cold process's entries
    # resnet50 runs whole on the engine for inference: its Dynamo graph's entry skips AOTAutograd and the
    # passes (its folded batch norms were computed from the same weights)
    assert warm["cache"]["dynamo_hits"] >= 1 and warm["cache"]["optimized_hits"] >= 1, warm
    assert 0 < warm["overhead_ms"] <= warm["own_ms"] and warm["second_ms"] > 0 and warm["later_ms"] > 0, warm
    assert exported["total_ms"] > 0 and exported["later_ms"] > 0 and exported["dynamo_frames"] == 0, exported
    for r in (cold, warm, exported):
        assert r["max_diff"] < 1e-3, r
    ov = first["overhead"]
    assert ov["loaded_us"] > 0 and ov["eager_us"] > 0 and ov["compiled_us"] > 0, ov
    status = {t["target"].split(" (")[0].split(":")[0]: t["status"] for t in first["targets"]}
    assert set(status.values()) <= {"met", "missed"} and len(status) == 6, first["targets"]
    assert exported["rss_growth_mb"] > 0 and exported["file_mb"] > 0 and exported["packed_mb"] >= 0, exported
    cc = row["cc_warm"]  # airgraph.cache_compile: the warm process replays the cold one's entry
    assert cc["dynamo_frames"] == 0 and cc["counts"]["loaded"] >= 1 and cc["max_diff"] < 1e-3, cc
    assert re.search(r"airgraph\.load\(path\) \+ first call at most 1 s for every zoo model: \*\*(met|missed)\*\*: "
                     r"resnet50 \d+ ms", md), md
    assert (committed.stat().st_mtime if committed.exists() else None) == before


def test_zoo_report_small(tmp_path):
    out_md = tmp_path / "zoo.md"
    out = _ok(_python(["bench/zoo_report.py", "--size", "small", "--models", "minilm", "--runs", "3",
                       "--out", out_md]))
    row = next((l for l in out.splitlines() if l.startswith("| minilm |")), None)
    assert row, out
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert int(cells[1]) > 10 and int(cells[2]) == 0, row  # ATen nodes, none fell back
    assert float(cells[3].split()[0]) < 1e-3, row  # max diff vs eager
    assert "| minilm |" in out_md.read_text()


def test_demo_script():
    # the demo command (scripts/demo.sh) is `python examples/demo.py` after the setup command
    out = _ok(_python(["examples/demo.py", "--runs", "3"], timeout=300))
    diff = re.search(r"max abs difference of the embeddings: (\S+)", out)
    assert diff and float(diff.group(1)) <= 1e-4, out
    assert re.search(r"airgraph median of 3: +[\d.]+ ms", out), out
    assert out.rstrip().splitlines()[-1] == "OK", out


def test_generate_example():
    # README "Generating text": `.venv/bin/python examples/generate.py`, exactly as written there
    block = next(b for b in _readme_blocks("bash") if "examples/generate.py" in b)
    argv = shlex.split(next(l for l in block.splitlines() if "examples/generate.py" in l).split("#")[0])
    assert argv[0] == ".venv/bin/python", argv
    out = _ok(_python(argv[1:], timeout=600))
    assert len(re.findall(r"tokens equal eager's: True", out)) == 2, out
    graphs = re.findall(r"graph: (\d+) ATen nodes, (\d+) in PyTorch", out)
    assert graphs and all(int(n) > 0 and int(f) == 0 for n, f in graphs), out
    assert re.search(r"symbolic sizes, (\d+) engine programs built", out), out  # the decode graph
    assert out.rstrip().splitlines()[-1] == "OK", out


def test_generation_benchmark_small():
    # bench/generate.py (README "Generating text") in a short configuration: eager vs airgraph
    out = _ok(_python(["bench/generate.py", "--backends", "eager,airgraph", "--caches", "dynamic",
                       "--batches", "1", "--new", "6", "--repeats", "1"], timeout=600))
    rows = [l for l in out.splitlines() if l.startswith("| fp32 | dynamic | 1 |")]
    assert any("| airgraph |" in r and "| yes |" in r and " 0 fallback nodes" in r for r in rows), out
    assert any("| eager |" in r for r in rows), out
    assert re.search(r"read bandwidth [\d.]+ GB/s", out), out


def test_generation_overhead_breakdown_small():
    # bench/generate.py --overhead (README "Generating text"): one decode call's fixed cost by layer
    out = _ok(_python(["bench/generate.py", "--overhead", "--caches", "static", "--batches", "1", "--new", "6"],
                      timeout=600))
    row = next((l for l in out.splitlines() if l.startswith("| fp32 | static | 1 |")), None)
    assert row is not None, out
    call, dynamo, aot, ours, engine = (float(x) for x in row.strip("|").split("|")[3:8])
    assert call > 0 and engine > 0 and ours > 0, row
    assert abs(call - (dynamo + aot + ours + engine)) < 1.0, row  # the layers add up to the whole call


def test_weight_checks_benchmark_small():
    out = _ok(_python(["bench/weight_checks.py", "2", "--small"], timeout=300))
    m = re.search(r"check alone, C\+\+ WeightGuard \(default: direct count read\): min +(\d+) ns", out)
    assert m and int(m.group(1)) > 0, out
    assert re.search(r"engine rebuilds during the run: 0\b", out), out  # unchanged weights never rebuild


def _opinfo_commands() -> list[list[str]]:
    """The Op coverage section's sweep commands, as written there."""
    block = next(b for b in _readme_blocks("bash") if "opinfo_sweep.py" in b)
    cmds = []
    for line in block.splitlines():
        line = line.split("#")[0].strip()
        if line:
            argv = shlex.split(line)
            assert argv[0] == ".venv/bin/python", line
            cmds.append(argv[1:])
    return cmds


@pytest.mark.parametrize("i", range(3))
def test_readme_opinfo_sweep_commands(i):
    cmds = _opinfo_commands()
    assert len(cmds) == 3, cmds
    args = cmds[i]
    out = _ok(_python(args, timeout=900))  # exit 1 when a sample is wrong or crashes
    m = re.search(r"ops: (\d+)  native \(all samples pass\): (\d+)  fallback: (\d+)  wrong: (\d+)  crash: (\d+)", out)
    assert m, out
    ops, native, _, wrong, crash = map(int, m.groups())
    assert wrong == 0 and crash == 0, out
    if "--ops" in args:
        assert native == ops > 0, out  # topk and every interpolate mode run natively
        return
    dtype = args[args.index("--dtype") + 1] if "--dtype" in args else "float32"
    assert native >= (480 if dtype == "float32" else 450), out
    # every op listed native (opinfo_native_<dtype>.txt) still is: none of them falls back now
    line = next(l for l in out.splitlines() if l.startswith("ops that fall back:"))
    text = (ROOT / "tests" / "python" / f"opinfo_native_{dtype}.txt").read_text()
    listed = {ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")}
    lost = sorted(listed & set(line.split(":", 1)[1].split()))
    assert not lost, f"ops listed native in {dtype} now fall back: {lost}"


def test_varying_shapes_benchmark_small():
    # The README's varying-shapes benchmark on BERT small with 4 lengths, without Inductor (its
    # compiles alone would take a minute here); the whole table is the benchmark's job.
    out = _ok(_python(["bench/varying_shapes.py", "--size", "small", "--lengths", "4", "--rounds", "2",
                       "--backends", "eager,airgraph,airgraph-gears,airgraph-static"], timeout=600))
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ")}
    assert {"eager", "airgraph", "airgraph-gears", "airgraph-static"} <= set(rows), out
    gears = [c.strip() for c in rows["airgraph-gears"].split("|")]
    assert gears[4].startswith("12 ("), f"4 lengths x 3 batches: 12 engine programs expected\n{out}"
    assert "steady latency / static" in out


def test_zoo_dynamic_benchmark_one_model():
    out = _ok(_python(["bench/zoo_dynamic.py", "--models", "bert", "--rounds", "3"], timeout=600))
    row = next(line for line in out.splitlines() if line.startswith("| bert"))
    cells = [c.strip() for c in row.split("|")]
    assert cells[4] == "0", f"fallback nodes: {row}"
    assert float(cells[5]) < 1e-4, f"differs from eager: {row}"


def test_export_example_and_cli_commands():
    # README "Deploying": examples/export.py, then airgraph-run on its file, exactly as written there
    import shutil

    block = next(b for b in _readme_blocks("bash") if "examples/export.py" in b)
    lines = [shlex.split(l.split("#")[0]) for l in block.splitlines() if l.strip()]
    assert lines[0][:2] == [".venv/bin/python", "examples/export.py"], lines
    shutil.rmtree(ROOT / "export_demo", ignore_errors=True)
    try:
        out = _ok(_python(lines[0][1:], timeout=600))
        assert out.rstrip().splitlines()[-1] == "OK", out
        # the CLI: the venv's (an installed package) or the build folder's (a development tree)
        venv_cli = ROOT / ".venv/bin/airgraph-run"
        dev = os.environ.get("AIRGRAPH_EXT_DIR")
        cli = str(venv_cli) if venv_cli.exists() and not dev else os.path.join(os.path.abspath(dev or ""), "airgraph-run")
        outs = []
        for argv in lines[1:]:
            assert argv[0] == ".venv/bin/airgraph-run", argv
            p = subprocess.run([cli, *argv[1:]], cwd=ROOT, capture_output=True, text=True, timeout=300)
            outs.append(_ok(p))
        assert "ids: int64[" in outs[0] and "symbols:" in outs[0], outs[0]
        assert "median" in outs[1] and (ROOT / "export_demo" / "out0.npy").exists(), outs[1]
    finally:
        shutil.rmtree(ROOT / "export_demo", ignore_errors=True)


def test_gemm_benchmark_small():
    # bench/gemm.py (README "Benchmarks") on one shape and two row counts: every backend's result is
    # checked against F.linear inside, and each row reports a GFLOP/s figure per backend
    out = _ok(_python(["bench/gemm.py", "--shapes", "256x512", "--m", "8,64", "--rounds", "2",
                       "--min-seconds", "0"], timeout=300))
    rows = [l for l in out.splitlines() if l.startswith("| 256 x 512 |")]
    assert len(rows) == 2, out
    for r in rows:
        cells = [c.strip() for c in r.strip("|").split("|")]
        assert all(float(c) > 0 for c in cells[2:]), r
    assert "| mkl | onednn | inductor | airgraph |" in out, out
