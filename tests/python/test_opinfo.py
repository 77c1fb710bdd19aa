"""PyTorch's OpInfo database as the parity suite, per op.

A fast subset of the ops that `opinfo_sweep.py` found native (its lists in
opinfo_native_<dtype>.txt: every 3rd float32 op, every 6th bfloat16 op) runs its first op_db
sample through torch.compile(backend="airgraph"): it must match eager (torch.testing's
tolerances, or no further from the float64 result than eager is) with every node on the engine.
The full sweep (every op, three samples, pass / fallback / wrong / crash counts) is one command,
which the test command also runs (test_readme_commands.py, checking every listed op still passes):

    .venv/bin/python tests/python/opinfo_sweep.py

`AIRGRAPH_OPINFO_ALL=1 pytest tests/python/test_opinfo.py` checks every listed op here instead.
"""
import os

import pytest
import torch

import opinfo_sweep as sweep

try:
    from torch.testing._internal.common_methods_invocations import op_db  # noqa: F401
    _OPDB = ""
except Exception as e:  # expecttest is in requirements-dev.txt; say so if it is missing
    _OPDB = f"torch's op_db does not import here ({type(e).__name__}: {e}); install requirements-dev.txt"

_OPS: dict = {}


def _op(dtype, name):
    if dtype not in _OPS:
        _OPS[dtype] = {sweep.op_id(o): o for o in sweep.cpu_ops(dtype)}
    return _OPS[dtype].get(name)


def _check(name, dtype):
    if _OPDB:
        pytest.skip(_OPDB)
    op = _op(dtype, name)
    assert op is not None, f"{name} is listed as native in {sweep.native_file(str(dtype)[6:])} but not in op_db"
    res = sweep.run_op(op, dtype, nsamples=1)
    assert res["status"] in ("pass", "skip"), f"{name} ({dtype}): {res['status']}: {res['reason']}"
    assert res["status"] == "pass" or res["reason"].startswith("eager raised"), res


def _subset(dtype_name: str, every: int) -> list[str]:
    names = sweep.read_native(dtype_name)
    return names if os.environ.get("AIRGRAPH_OPINFO_ALL") == "1" else names[::every]


@pytest.mark.parametrize("name", _subset("float32", 3))
def test_native_float32(name):
    _check(name, torch.float32)


@pytest.mark.parametrize("name", _subset("bfloat16", 6))
def test_native_bfloat16(name):
    _check(name, torch.bfloat16)


def test_native_lists_are_not_empty():
    assert len(sweep.read_native("float32")) >= 400, "opinfo_native_float32.txt lost ops (run opinfo_sweep.py)"
    assert len(sweep.read_native("bfloat16")) >= 100
