#!/usr/bin/env bash
# Install the real engine (vLLM's CPU build) into its own virtualenv, .venv-engine (or
# $QOS_ENGINE_VENV), and make the tiny model it serves. About 3.4 GB, 3-5 minutes.
source "$(dirname "$0")/setup.sh"
ensure_system_packages
ensure_engine_venv
ensure_venv stack
"$VENV/bin/python" -c 'from sidecar.tooling.engine import vllm; print("model:", vllm.model())'
