"""The compile cache (airgraph/cache.py): a second compile of the same graph, in this process or a
new one, loads the lowered graph from the cache folder instead of lowering it; the weights are
always the calling process's own (changed weights give the new answer, never a stale one); a
corrupt, truncated or foreign entry is rebuilt without an error; other shapes, dtypes or code get
their own entries; cache_dir="" writes nothing; cache_info and clear_cache report and empty it."""
import os
import subprocess
import sys

import pytest
import torch

import airgraph
from airgraph import cache


class Net(torch.nn.Module):
    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.l1, self.l2 = torch.nn.Linear(12, 24), torch.nn.Linear(24, 6)
        self.register_buffer("shift", torch.randn(6))

    def forward(self, x):
        return torch.tanh(self.l2(torch.relu(self.l1(x)))) + self.shift * torch.tensor([1.0, 2, 3, 4, 5, 6])


def run(model, x, folder):
    torch._dynamo.reset()
    f = torch.compile(model, backend=airgraph.get_backend(airgraph.CompilerConfig(cache_dir=str(folder))),
                      dynamic=False)
    with torch.no_grad():
        got = f(x)
        torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-6)
    return got


def stats(folder):
    return airgraph.cache_info(str(folder))


def test_second_compile_hits_and_weights_are_the_callers(tmp_path):
    x = torch.randn(5, 12)
    before = stats(tmp_path)
    run(Net(0).eval(), x, tmp_path)
    after1 = stats(tmp_path)
    assert after1["entries"] == 1 and after1["misses"] == before["misses"] + 1 and after1["writes"] == before["writes"] + 1
    # the same code and types with other weights: a hit, computed with these weights
    run(Net(1).eval(), x, tmp_path)
    after2 = stats(tmp_path)
    assert after2["hits"] == after1["hits"] + 1 and after2["entries"] == 1
    # weights changed in place after compiling are still seen (the cache holds none)
    m = Net(2).eval()
    torch._dynamo.reset()
    f = torch.compile(m, backend=airgraph.get_backend(airgraph.CompilerConfig(cache_dir=str(tmp_path))))
    with torch.no_grad():
        f(x)
        m.l1.weight.mul_(2)
        torch.testing.assert_close(f(x), m(x), rtol=1e-5, atol=1e-6)


def test_other_shapes_dtypes_and_code_get_their_own_entries(tmp_path):
    class Other(Net):
        def forward(self, x):
            return torch.sigmoid(self.l2(torch.relu(self.l1(x))))

    cases = [(Net().eval(), torch.randn(5, 12)), (Net().eval(), torch.randn(7, 12)),
             (Net().eval().double(), torch.randn(5, 12, dtype=torch.float64)), (Other().eval(), torch.randn(5, 12))]
    for model, x in cases:
        before = stats(tmp_path)
        run(model, x, tmp_path)
        after = stats(tmp_path)
        assert after["entries"] > before["entries"] and after["hits"] == before["hits"], (x.shape, x.dtype)


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_a_damaged_entry_is_rebuilt(tmp_path, damage):
    x = torch.randn(5, 12)
    run(Net().eval(), x, tmp_path)
    (path,) = [os.path.join(r, f) for r, _, fs in os.walk(tmp_path) for f in fs if f.endswith(".agraph")]
    data = open(path, "rb").read()
    data = {"truncate": data[: len(data) // 3], "flip": data[:200] + bytes([data[200] ^ 16]) + data[201:],
            "garbage": os.urandom(len(data)), "empty": b""}[damage]
    with open(path, "wb") as f:
        f.write(data)
    before = stats(tmp_path)
    run(Net().eval(), x, tmp_path)  # no error, the right answer
    after = stats(tmp_path)
    assert after["rebuilt"] == before["rebuilt"] + 1 and after["writes"] == before["writes"] + 1
    run(Net().eval(), x, tmp_path)
    assert stats(tmp_path)["hits"] == after["hits"] + 1  # the rebuilt entry serves again


def test_off_writes_nothing(tmp_path):
    run(Net().eval(), torch.randn(5, 12), "")
    assert not any(files for _, _, files in os.walk(tmp_path))


def test_clear_cache(tmp_path):
    run(Net().eval(), torch.randn(5, 12), tmp_path)
    run(Net().eval(), torch.randn(3, 12), tmp_path)
    assert airgraph.clear_cache(str(tmp_path)) == 2
    assert stats(tmp_path)["entries"] == 0


def test_a_new_process_hits_the_entry_of_the_last(tmp_path):
    code = (
        "import torch, airgraph\n"
        "torch.manual_seed(0)\n"
        "m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).eval()\n"
        "x = torch.randn(3, 8)\n"
        "with torch.no_grad():\n"
        "    got = torch.compile(m, backend='airgraph')(x)\n"
        "    torch.testing.assert_close(got, m(x), rtol=1e-5, atol=1e-6)\n"
        "i = airgraph.cache_info()\n"
        "print('hits', i['hits'], 'misses', i['misses'])\n")
    env = {**os.environ, "AIRGRAPH_CACHE_DIR": str(tmp_path), "PYTHONPATH": os.pathsep.join(sys.path)}
    outs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
            for _ in range(2)]
    for r in outs:
        assert r.returncode == 0, r.stderr
    assert "hits 0 misses 1" in outs[0].stdout, outs[0].stdout
    assert "hits 1 misses 0" in outs[1].stdout, outs[1].stdout


def test_key_covers_tensors_the_code_creates(tmp_path):
    # two graphs alike but for a tensor the traced code created: separate entries, each right
    for scale in (1.0, 3.0):
        class Scaled(torch.nn.Module):
            def forward(self, x):
                return x * torch.tensor([scale, scale + 1])

        run(Scaled(), torch.randn(4, 2), tmp_path)
    assert stats(tmp_path)["entries"] == 2
    assert cache.FORMAT_VERSION >= 1
