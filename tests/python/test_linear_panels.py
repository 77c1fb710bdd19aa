"""The packed small-row GEMM (kernels/gemm_panels.h) as users reach it: on CPUs without AVX-512 it
runs the linears pack_weights packs (oneDNN 3.2's f32 matmul there is its jit sgemm); elsewhere oneDNN's
brgemm does. AIRGRAPH_LINEAR_PANELS=on (read once per process) takes it on any CPU, so a fresh process
checks it here: a sentence encoder of 12 tokens and GPT-2's Conv1D layers give eager's results through
torch.compile, with the weights packed off the first call's path (the first calls run oneDNN on the
weights as stored, later ones the panels) and through airgraph.export + load; off keeps oneDNN."""
import os
import subprocess
import sys

import pytest

SCRIPT = r'''
import sys, tempfile, os, torch, airgraph
from airgraph import zoo
from airgraph._core import C
from airgraph.backend import collect_reports

def kernels(sink):
    return [k for g in sink[0].graphs for _, _, k in g.exe.instructions()]

torch.manual_seed(0)
seen = []
for name in ("minilm", "gpt2"):
    model, args, kwargs = zoo.build(name, "small", batch=1)
    # (12 and 10 rows: short inputs; the small MiniLM's own example has 8 tokens, a GEMV's rows)
    if name == "minilm":
        args = (torch.randint(100, 1000, (1, 12)), torch.ones(1, 12, dtype=torch.long))
    else:
        args = (args[0][:, :10],)
    with torch.no_grad():
        want = model(*args, **kwargs)
        want = want[0] if isinstance(want, (tuple, list)) else getattr(want, "last_hidden_state", want)
        torch._dynamo.reset()
        f = torch.compile(model, backend=airgraph.get_backend(airgraph.CompilerConfig(cache_dir="", pack_weights="always")))
        with collect_reports() as sink:
            outs = [f(*args, **kwargs)]
        C.wait_background_idle()                       # (the panels made: the next call reads them)
        outs.append(f(*args, **kwargs))
        for o in outs:
            o = o[0] if isinstance(o, (tuple, list)) else getattr(o, "last_hidden_state", o)
            torch.testing.assert_close(o, want, rtol=1e-4, atol=1e-4)
        ks = kernels(sink)
        seen.append(sum("panels_f32" in k for k in ks))
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.agraph")
            airgraph.export(model, args, path)
            got = airgraph.load(path)(*args)
        got = got[0] if isinstance(got, (tuple, list)) else got
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
print("PANELS", seen)
'''


@pytest.mark.parametrize("mode", ["on", "off"])
def test_models_on_the_packed_small_row_gemm(mode):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "AIRGRAPH_LINEAR_PANELS": mode}
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    line = [x for x in r.stdout.splitlines() if x.startswith("PANELS")][-1]
    counts = eval(line.split(" ", 1)[1])
    if mode == "on":
        # every linear of the encoder (q, k, v, out, two FFN: 6 a layer) and GPT-2's Conv1D layers
        assert all(c >= 6 for c in counts), (counts, r.stdout[-2000:])
    else:
        assert counts == [0, 0], counts
