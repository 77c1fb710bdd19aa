"""Models users quantize with torchao (weight-only int8) compile with backend="airgraph" and give
torchao's own eager answer (issue 26 starts here: today the int8 weight is still widened per call).
Before, the compile cache's key read the data pointer of torchao's tensor-subclass weights and the
first call failed (BackendCompilerFailed: invalid python storage)."""
import pytest
import torch

import airgraph

torchao = pytest.importorskip("torchao", reason="torchao is not installed (requirements-dev.txt installs it)")
from torchao.quantization import Int8WeightOnlyConfig, quantize_  # noqa: E402


def _mlp():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96, 32)).eval()
    quantize_(m, Int8WeightOnlyConfig())
    return m


@pytest.mark.parametrize("cache", [True, False])
def test_int8_weight_only_mlp_matches_torchao_eager(tmp_path, cache):
    m = _mlp()
    assert type(m[0].weight) is not torch.nn.Parameter  # (torchao's subclass: the case that crashed)
    cfg = airgraph.CompilerConfig(cache_dir=str(tmp_path) if cache else "")
    c = torch.compile(m, backend=airgraph.get_backend(cfg))
    with torch.no_grad():
        for batch in (3, 3, 5):
            x = torch.randn(batch, 64)
            torch.testing.assert_close(c(x), m(x), rtol=1e-4, atol=1e-4)


def test_int8_weight_only_through_cache_compile(tmp_path):
    m = _mlp()
    f = airgraph.cache_compile(m.forward, cache_dir=str(tmp_path))
    with torch.no_grad():
        for batch in (2, 4):
            x = torch.randn(batch, 64)
            torch.testing.assert_close(f(x), m(x), rtol=1e-4, atol=1e-4)
