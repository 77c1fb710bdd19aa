"""The custom-op example (examples/custom_op/) as a user runs it: the plugin built by this test
(one g++ call per version, once per session), loaded with airgraph.load_library; the model with
the torch.library op runs as one engine graph with no fallback and equals eager, through the
Python lowering and through the plugin; the plugin's op fuses into the linear layer before it as
its epilogue (airgraph.explain shows it); the exported file records the plugin: airgraph-run
runs it with --plugin (equal to eager) and refuses it without the plugin or with another
version, naming the op; a fresh Python process refuses it until it loads the plugin."""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import airgraph
from conftest import assert_close

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "custom_op")
sys.path.insert(0, os.path.abspath(EXAMPLE))
import mylib  # noqa: E402
import run_example  # noqa: E402


@pytest.fixture(scope="session")
def plugins(tmp_path_factory):
    """{version: path} of the example plugin built in this session."""
    d = tmp_path_factory.mktemp("mylib")
    return {v: run_example.build_plugin(str(d / v), version=v) for v in ("1.0", "2.0")} | {"dir": d}


@pytest.fixture(scope="module")
def model_and_input():
    torch.manual_seed(0)
    m, x = mylib.Model().eval(), torch.randn(8, 64)
    with torch.no_grad():
        want = m(x)
    return m, x, want


def test_python_lowering_one_graph_no_fallback(model_and_input):
    m, x, want = model_and_input
    if "mylib::scaled_gelu" in airgraph.ops():
        pytest.skip("the plugin is loaded in this process already (the Python lowering is tested before it)")
    rep = airgraph.explain(m, x)
    assert rep.fallback_nodes == 0 and rep.reports[0].engine_graphs == 1, str(rep)
    with torch.no_grad():
        assert_close(torch.compile(m, backend="airgraph")(x), want, msg="python lowering")


def test_plugin_runs_fuses_exports_and_airgraph_run(model_and_input, plugins, tmp_path):
    m, x, want = model_and_input
    info = mylib.use_plugin(plugins["1.0"])
    assert info == {"name": "mylib", "version": "1.0", "ops": ["mylib::scaled_gelu"]}
    assert mylib.use_plugin(plugins["1.0"])["version"] == "1.0"  # loading it again: the same plugin
    with pytest.raises(airgraph.EngineError, match="version 1.0 is already loaded"):
        airgraph.load_library(plugins["2.0"])
    torch._dynamo.reset()
    rep = airgraph.explain(m, x)
    assert rep.fallback_nodes == 0 and rep.reports[0].engine_graphs == 1, str(rep)
    with torch.no_grad():
        assert_close(torch.compile(m, backend="airgraph")(x), want, msg="plugin")
    c = torch.compile(m, backend="airgraph", dynamic=True)  # symbolic sizes: the plugin's inference per size
    with torch.no_grad():
        for n in (3, 11):
            xn = torch.randn(n, 64)
            assert_close(c(xn), m(xn), msg=f"plugin, dynamic batch {n}")
    # the plugin's op as the epilogue of the linear layer before it (it declares itself an epilogue op)
    code = dict(next(ops for n, v, ops in airgraph._C.loaded_plugins() if n == "mylib"))["mylib::scaled_gelu"]
    fused = [f for f in rep.fusions() if "scaled_gelu" in f[2]]
    assert code and fused and fused[0][1] == "linear", str(rep)
    assert "linear also computes scaled_gelu" in str(rep), str(rep)

    # export, then load in this process and in airgraph-run
    path = str(tmp_path / "model.agraph")
    airgraph.export(m, (x,), path)
    with torch.no_grad():
        assert_close(airgraph.load(path)(x), want, msg="airgraph.load")
    np.save(tmp_path / "x.npy", x.numpy())
    exe = run_example.airgraph_run()
    base = [exe, path, "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy")]
    r = subprocess.run(base + ["--plugin", plugins["1.0"]], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert_close(torch.from_numpy(np.load(tmp_path / "y.npy")), want, msg="airgraph-run --plugin")
    r = subprocess.run(base, capture_output=True, text=True)
    assert r.returncode == 1 and "op 'mylib::scaled_gelu' of plugin 'mylib' version 1.0, which is not loaded" in r.stderr, r.stderr
    r = subprocess.run(base + ["--plugin", plugins["2.0"]], capture_output=True, text=True)
    assert r.returncode == 1 and "plugin 'mylib' version 2.0" in r.stderr, r.stderr

    # a fresh process that never loaded the plugin: airgraph.load refuses the file, naming the op
    code = (f"import airgraph, sys\ntry:\n    airgraph.load({path!r})\nexcept airgraph.EngineError as e:\n"
            f"    print('refused:', e)\nelse:\n    sys.exit('loaded without the plugin')\n"
            f"airgraph.load_library({plugins['1.0']!r})\nairgraph.load({path!r})\nprint('loaded')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ)
    assert r.returncode == 0 and "refused:" in r.stdout and "mylib::scaled_gelu" in r.stdout \
        and "loaded" in r.stdout.splitlines()[-1], r.stdout + r.stderr


def test_readme_command(tmp_path):
    """README "Bringing your own op": its command, as written there, in a fresh process."""
    import re
    import shlex
    readme = open(os.path.join(EXAMPLE, "..", "..", "README.md")).read()
    block = next(b for b in re.findall(r"```bash\n(.*?)```", readme, flags=re.S) if "examples/custom_op/run_example.py" in b)
    argv = shlex.split(block.split("#")[0])
    assert argv[:2] == [".venv/bin/python", "examples/custom_op/run_example.py"], argv
    args = [str(tmp_path / a[len("/tmp/"):]) if a.startswith("/tmp/") else a for a in argv[2:]]
    r = subprocess.run([sys.executable, argv[1], *args], cwd=os.path.join(EXAMPLE, "..", ".."), capture_output=True,
                       text=True, env=os.environ, timeout=300)
    assert r.returncode == 0 and r.stdout.rstrip().endswith("example OK: every result equals eager"), \
        r.stdout[-3000:] + r.stderr[-3000:]
    assert "0 fallback" in r.stdout and "exit 1" in r.stdout
