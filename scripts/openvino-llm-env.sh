#!/usr/bin/env bash
# The virtual environment bench/generate.py runs its "openvino" cells in: optimum-intel's OVModelForCausalLM
# (a stateful OpenVINO model, KV cache inside) with NNCF weight compression. optimum-intel pins transformers
# below what .venv has, so it lives in its own .venv-ov/ (git-ignored); .venv is not touched. airgraph is not
# installed here: the workers in this environment only load the model that the main environment saved.
# Safe to run again: pip only installs what is missing.
#   bash scripts/openvino-llm-env.sh        # then: .venv/bin/python bench/generate.py --backends eager,airgraph,openvino
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv-ov/bin/python ]; then
  echo "== creating .venv-ov"
  $PY -m venv .venv-ov
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1
qpip() {
  .venv-ov/bin/pip "$@" 2>&1 | { grep -v "^WARNING: Location" || true; }
  return "${PIPESTATUS[0]}"
}
# the same torch as .venv (a local wheel; another version would download gigabytes), then optimum-intel with
# OpenVINO and NNCF and a transformers it accepts (optimum-intel 2.2: transformers < 5.6)
# (torch and torchvision held at the local wheel's release: optimum-intel's dependencies would otherwise bring the
# newest torch with its CUDA libraries, gigabytes)
PINS=$(mktemp); trap 'rm -f "$PINS"' EXIT
printf 'torch==2.13.0\ntorchvision==0.28.0\n' >"$PINS"
qpip install -q -c "$PINS" torch==2.13.0
qpip install -q -c "$PINS" "optimum-intel[openvino,nncf]>=2.2" "transformers<5.6" safetensors accelerate
# optimum-intel requires torchvision (for its vision-language models only), and PyPI's torchvision is built
# against the CUDA torch: beside the CPU wheel its operators fail to load and transformers' model imports fail
# with them ("operator torchvision::nms does not exist"). Text models need no torchvision: remove it.
qpip uninstall -q -y torchvision
.venv-ov/bin/python - <<'PY'
import importlib.metadata as md
from optimum.intel import OVModelForCausalLM, OVWeightQuantizationConfig  # noqa: F401  (fails here, not in the bench)
from transformers import Qwen2ForCausalLM  # noqa: F401
print("openvino env ready:", ", ".join(f"{p} {md.version(p)}" for p in
      ("torch", "transformers", "optimum-intel", "openvino", "nncf")))
PY
