#!/usr/bin/env bash
# Install the peer gateway of the benches (LiteLLM's proxy, pinned) into its own
# virtualenv, .venv-litellm (or $QOS_LITELLM_VENV). About 1 GB, 2-3 minutes.
source "$(dirname "$0")/setup.sh"
ensure_system_packages
ensure_litellm_venv
ensure_venv stack
