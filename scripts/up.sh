#!/usr/bin/env bash
# Install what the local stack needs, then run it (`qos-sidecar up`) with a demo request.
# Extra arguments go to `qos-sidecar up`. Ctrl-C stops everything it started.
source "$(dirname "$0")/setup.sh"
ensure_system_packages
ensure_venv stack
# `--engine vllm` serves from vLLM's CPU build, in a venv of its own.
case " $* " in
  *" --engine vllm "* | *" --engine=vllm "*) ensure_engine_venv ;;
esac
exec "$VENV/bin/qos-sidecar" up --demo "$@"
