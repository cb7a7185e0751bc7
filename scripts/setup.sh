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
}
