"""Issue 35, item 2: a blocked activation layout (oneDNN's nChw16c, ONNX Runtime's NCHWc) against
NHWC, per convolution shape of ResNet-50, MobileNetV2 (224 x 224) and UperNet's heads (256 x 256), batch 1, f32:

    python bench/conv_layouts.py                 # every shape (~1 min, 2 threads)
    python bench/conv_layouts.py --only stem     # shapes whose name holds "stem"

Builds bench/conv_layouts.cpp with the system C++ compiler against the oneDNN that airgraph links
(the onednn wheels in this environment's prefix) and runs it. For each shape oneDNN's convolution is
built with source and destination pinned to NHWC (airgraph's channels-last regions) and with
format_tag::any (the primitive's own choice); the table shows both times (best of 7 blocks), the
layouts "any" chose and NHWC's time over "any"'s. Where "any" keeps NHWC, a blocked layout has
nothing to offer that shape on this CPU.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def onednn_prefix() -> str:
    for prefix in (sys.prefix, sys.base_prefix):
        if os.path.exists(os.path.join(prefix, "include", "oneapi", "dnnl", "dnnl.hpp")):
            return prefix
    raise SystemExit("conv_layouts: oneDNN's headers are not in this environment (run scripts/setup.sh)")


def build(out_dir: str) -> str:
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        raise SystemExit("conv_layouts: no C++ compiler (c++ or g++) on PATH")
    prefix = onednn_prefix()
    exe = os.path.join(out_dir, "conv_layouts")
    lib = os.path.join(prefix, "lib")
    subprocess.run([cxx, "-O2", "-std=c++17", os.path.join(HERE, "conv_layouts.cpp"), "-I", os.path.join(prefix, "include"),
                    "-L", lib, "-ldnnl", f"-Wl,-rpath,{lib}", "-o", exe], check=True)
    return exe


def cpu_line() -> str:
    """The CPU as bench/run.py names it (its model name and the ISA flags that pick the kernels)."""
    sys.path.insert(0, HERE)
    from run import cpu_info  # (bench/run.py imports no torch at its top: cheap)

    c = cpu_info()
    return f"{c['name']}, ISA {' '.join(c['isa'])}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help="run the shapes whose name holds this text")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        exe = build(d)
        env = {**os.environ, "OMP_NUM_THREADS": str(a.threads)}
        p = subprocess.run([exe] + ([a.only] if a.only else []), capture_output=True, text=True, env=env, check=True)
    rows = [line.split("\t") for line in p.stdout.splitlines() if line.count("\t") == 5]
    print(f"oneDNN f32 convolutions, batch 1, {a.threads} threads; {cpu_line()}\n")
    print("| shape | NHWC us | NHWC impl | any us | any impl | any's layouts | NHWC / any |")
    print("|---|---|---|---|---|---|---|")
    for name, tn, impl_n, ta, impl_a, layouts in rows:
        print(f"| {name} | {float(tn):.1f} | {impl_n} | {float(ta):.1f} | {impl_a} | {layouts} | "
              f"{float(tn) / float(ta):.2f}x |")
    if rows:
        tn, ta = sum(float(r[1]) for r in rows), sum(float(r[3]) for r in rows)
        kept = sum(1 for r in rows if r[5] == "nhwc -> nhwc")
        print(f"\nsum: NHWC {tn:.0f} us, any {ta:.0f} us; 'any' chose NHWC for {kept} of {len(rows)} shapes")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
