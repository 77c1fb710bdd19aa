"""Loads the compiled C++ core (`airgraph._C`).

torch is imported first on purpose: its wheel loads libgomp, and oneDNN and our
kernels then bind to that same OpenMP runtime instead of starting a second pool.
AIRGRAPH_EXT_DIR points at a build directory holding _C*.so for development
builds (tests/run_tests.sh uses it so tests run against a fresh CMake build).
"""
import atexit
import ctypes
import glob
import importlib.util
import os
import sys

import torch  # noqa: F401  (see the docstring)


def _preload_onednn():
    for prefix in dict.fromkeys([sys.prefix, sys.base_prefix]):
        for path in glob.glob(os.path.join(prefix, "lib", "libdnnl.so.3*")):
            try:
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                return
            except OSError:
                pass


# The kernels are compiled for x86-64-v3 (AVX2, FMA, F16C, BMI2); oneDNN picks its
# own code path (up to AVX-512/AMX) at run time. Refuse clearly, rather than die
# on an illegal instruction, on a CPU without them.
_REQUIRED_FLAGS = ("avx2", "fma", "f16c", "bmi2")


def _check_cpu():
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((l.split(":", 1)[1].split() for l in f if l.startswith("flags")), None)
    except OSError:
        return
    if flags is None:
        return
    missing = [x for x in _REQUIRED_FLAGS if x not in flags]
    if missing:
        raise ImportError(f"airgraph's kernels need an x86-64-v3 CPU (AVX2, FMA, F16C, BMI2); this CPU lacks "
                          f"{', '.join(missing)}. Use another torch.compile backend on this machine.")


def _load():
    _check_cpu()
    _preload_onednn()
    ext_dir = os.environ.get("AIRGRAPH_EXT_DIR")
    if ext_dir:
        matches = glob.glob(os.path.join(ext_dir, "_C*.so"))
        if not matches:
            raise ImportError(f"AIRGRAPH_EXT_DIR={ext_dir} has no _C*.so")
        spec = importlib.util.spec_from_file_location("airgraph._C", matches[0])
        mod = importlib.util.module_from_spec(spec)
        sys.modules["airgraph._C"] = mod
        spec.loader.exec_module(mod)
        return mod
    from . import _C as mod  # type: ignore

    return mod


C = _load()
EngineError = C.EngineError
# weights packed in the background (csrc/base/background.h): the running job finishes while
# the interpreter still runs (it may release tensors), the queued ones are dropped
atexit.register(C.stop_background)
