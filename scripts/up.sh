#!/usr/bin/env bash
# Install what the local stack needs, then run it (`qos-sidecar up`) with a demo request.
# Extra arguments go to `qos-sidecar up`. Ctrl-C stops everything it started.
source "$(dirname "$0")/setup.sh"
ensure_system_packages
ensure_venv stack
exec "$VENV/bin/qos-sidecar" up --demo "$@"
