"""The custom-op example end to end (see mylib.py):

    python examples/custom_op/run_example.py [BUILD_DIR]

builds the plugin (CMake against the installed airgraph, or g++ where CMake is missing), runs the
model eagerly, through torch.compile with the Python lowering and with the plugin, exports it and
runs the file with airgraph-run with and without --plugin; every result is checked against eager.
"""
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import airgraph  # noqa: E402
import mylib  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def build_plugin(build_dir: str, version: str = "1.0") -> str:
    """Builds scaled_gelu_plugin.cpp into build_dir/libmylib.so (reused when it is there)."""
    lib = os.path.join(build_dir, "libmylib.so")
    if os.path.exists(lib):
        return lib
    os.makedirs(build_dir, exist_ok=True)
    # the build tools run without a preloaded sanitizer runtime (scripts/sanitize.sh preloads ASan
    # for this Python process; under it GNU make itself reports a heap overflow of its own)
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    if shutil.which("cmake") and version == "1.0":
        subprocess.run(["cmake", "-S", HERE, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                        f"-Dairgraph_DIR={airgraph.cmake_dir()}"], check=True, stdout=subprocess.DEVNULL, env=env)
        subprocess.run(["cmake", "--build", build_dir], check=True, stdout=subprocess.DEVNULL, env=env)
    else:  # the same in one compiler call (CXXFLAGS as CMake would take them: a sanitizer, say)
        subprocess.run(["g++", "-O2", "-std=c++17", "-shared", "-fPIC", *os.environ.get("CXXFLAGS", "").split(),
                        f"-I{airgraph.include_dir()}", f'-DMYLIB_VERSION="{version}"',
                        os.path.join(HERE, "scaled_gelu_plugin.cpp"), "-o", lib], check=True, env=env)
    return lib


def airgraph_run() -> str:
    """The airgraph-run of this airgraph: the build folder's in a development tree (AIRGRAPH_EXT_DIR),
    else the environment's."""
    dev = os.environ.get("AIRGRAPH_EXT_DIR")
    if dev:
        return os.path.join(os.path.abspath(dev), "airgraph-run")
    return os.path.join(os.path.dirname(sys.executable), "airgraph-run") if not shutil.which("airgraph-run") \
        else shutil.which("airgraph-run")


def compile_and_check(model, x, want):
    """airgraph.explain's report, then the torch.compile'd model's result against eager's."""
    print(airgraph.explain(model, x))
    with torch.no_grad():
        got = torch.compile(model, backend="airgraph")(x)
    print("max |compiled - eager| =", (got - want).abs().max().item())
    torch.testing.assert_close(got, want)


def main(build_dir: str):
    torch.manual_seed(0)
    model, x = mylib.Model().eval(), torch.randn(8, 64)
    with torch.no_grad():
        want = model(x)

    print("== 1. torch.compile, the Python lowering (engine ops gelu and mul)")
    compile_and_check(model, x, want)

    print("\n== 2. the C++ plugin")
    lib = build_plugin(build_dir)
    print("loaded", mylib.use_plugin(lib))
    torch._dynamo.reset()
    compile_and_check(model, x, want)

    print("\n== 3. export, then airgraph-run with and without the plugin")
    path = os.path.join(build_dir, "model.agraph")
    airgraph.export(model, (x,), path)
    with torch.no_grad():
        torch.testing.assert_close(airgraph.load(path)(x), want)
    np.save(os.path.join(build_dir, "x.npy"), x.numpy())
    out = os.path.join(build_dir, "y.npy")
    cmd = [airgraph_run(), path, "--input", os.path.join(build_dir, "x.npy"), "--output", out]
    for extra in (["--plugin", lib], []):
        r = subprocess.run(cmd + extra, capture_output=True, text=True)
        print("$", " ".join(os.path.basename(c) if c.startswith(build_dir) else c for c in cmd[1:] + extra),
              f"-> exit {r.returncode}")
        print((r.stdout + r.stderr).strip())
        if extra:
            assert r.returncode == 0
            y = torch.from_numpy(np.load(out))
            print("max |airgraph-run - eager| =", (y - want).abs().max().item())
            torch.testing.assert_close(y, want)
        else:
            assert r.returncode != 0 and "mylib::scaled_gelu" in r.stderr
    print("\nexample OK: every result equals eager")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="mylib-"))
