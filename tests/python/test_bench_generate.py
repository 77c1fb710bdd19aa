"""bench/generate.py's parts that need no worker process: the openvino row's reason when .venv-ov is
missing (the row says how to make it, the run goes on), its OpenVINO properties, the token comparison
with eager's, and that the module imports neither torch nor airgraph (its openvino worker runs in
.venv-ov, where airgraph is not installed). The timed cells themselves run in
test_readme_commands.py (eager and airgraph)."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

GENERATE = Path(__file__).resolve().parents[2] / "bench" / "generate.py"


@pytest.fixture(scope="module")
def gen():
    spec = importlib.util.spec_from_file_location("airgraph_bench_generate_test", GENERATE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_module_imports_neither_torch_nor_airgraph():
    code = ("import importlib.util, sys; s = importlib.util.spec_from_file_location('g', sys.argv[1]); "
            "m = importlib.util.module_from_spec(s); s.loader.exec_module(m); "
            "print(sorted(k for k in ('torch', 'airgraph', 'transformers') if k in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, str(GENERATE)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out


def test_backends_openvino_and_openvino_tc(gen):
    assert "openvino-tc" in gen.BACKENDS and "openvino" in gen.BACKENDS


def test_missing_ov_env_is_a_row_with_the_reason(gen, monkeypatch, tmp_path):
    monkeypatch.setenv("AIRGRAPH_BENCH_OV_PYTHON", str(tmp_path / "no-venv" / "bin" / "python"))
    why = gen.ov_unavailable("dynamic")
    assert why and "bash scripts/openvino-llm-env.sh" in why, why
    assert "n/a" in gen.ov_unavailable("static")  # its KV cache lives inside the OpenVINO model
    # measure() goes on: an error row per openvino cell, no worker started, no model saved
    monkeypatch.setattr(gen, "_run_worker", lambda *a, **k: pytest.fail("no worker for a missing environment"))
    monkeypatch.setattr(gen, "save_model", lambda *a, **k: pytest.fail("nothing to save for it"))
    monkeypatch.setattr(gen, "floor_ms", lambda *a, **k: 1.0)
    a = SimpleNamespace(model="small", backends="openvino", caches="dynamic,static", batches="1", weights="fp32",
                        prompt=8, new=4, repeats=1, timeout=60)
    rows = gen.measure(a, 10.0)
    assert [r["cache"] for r in rows] == ["dynamic", "static"] and all("error" in r for r in rows), rows
    assert "openvino-llm-env.sh" in gen._row(rows[0]), gen._row(rows[0])


def test_ov_config_f32_hint_except_bf16(gen, monkeypatch):
    monkeypatch.delenv("AIRGRAPH_BENCH_OV_CONFIG", raising=False)
    f32 = gen.ov_config("fp32")
    assert f32 == {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": str(gen.THREADS),
                   "INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
    assert gen.ov_config("int4") == f32
    assert "INFERENCE_PRECISION_HINT" not in gen.ov_config("bf16")  # OpenVINO's own default precision
    assert gen.ov_quantization("fp32") is None and gen.ov_quantization("bf16") is None
    monkeypatch.setenv("AIRGRAPH_BENCH_OV_CONFIG", '{"ENABLE_CPU_PINNING": "NO"}')  # experiments add properties
    assert gen.ov_config("fp32") == dict(f32, ENABLE_CPU_PINNING="NO")


def test_token_agreement_and_leading_tokens(gen):
    ref = [[1, 2, 3, 4]]
    r = {"tokens": [[[1, 2, 3, 4]], [[1, 2, 3, 4]]]}
    gen.compare_tokens(r, ref)
    assert r["equal"] and "lead" not in r and r["new"] == 4
    r = {"tokens": [[[1, 2, 3, 4]], [[1, 2, 9, 4]]]}  # a repeat that differs from its third token on
    gen.compare_tokens(r, ref, ref_fp32=[[1, 7, 3, 4]])
    assert r["equal"] is False and r["lead"] == 2 and r["lead_fp32"] == 1
    row = dict(r, backend="openvino", cache="dynamic", batch=1, weights="int8", floor_ms=1.0, first_ms=1.0,
               prefill_ms=1.0, decode_ms=1.0, first_token_ms=1.0, load_ms=2000.0,
               ov_properties={"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"})
    text = gen._row(row)
    assert "| NO (2/4 leading equal) |" in text and "1/4 leading tokens = eager fp32's" in text, text
    assert "compute f32, KV cache f32" in text, text
    assert gen.leading_equal([[[5, 6], [1, 2]]], [[5, 6], [1, 3]]) == 1  # the fewest over the batch's rows
