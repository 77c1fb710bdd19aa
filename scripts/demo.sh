#!/usr/bin/env bash
# Command 1: set up everything and run the demo (a real model, eager vs airgraph).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
HF_HUB_OFFLINE=1 python examples/demo.py "$@"
