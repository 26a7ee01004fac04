#!/usr/bin/env bash
# Installs everything hetpar builds and runs with; idempotent (a second run is a no-op).
# - Debian packages: headers-only or small libraries (gloo headers only to compile ProcessGroupGloo.hpp).
# - LibTorch from the pinned PyPI torch wheel, in a venv shared by every clone of the repo
#   (keyed by version, so CI's fresh clones reuse it; pip's cache avoids a second download).
set -euo pipefail

TORCH_VERSION="${HETPAR_TORCH_VERSION:-2.15.0}"
VENV="${HETPAR_VENV:-$HOME/.cache/hetpar/venv-torch-$TORCH_VERSION}"
APT_PACKAGES=(cmake g++ make ninja-build ccache pkg-config python3-venv
  libgloo-dev libfmt-dev libtomlplusplus-dev libcli11-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Bump when the list below changes, so existing venvs get the new packages.
stamp="$VENV/.hetpar-ready-2"
if [[ ! -f "$stamp" ]]; then
  echo "install-deps: torch==$TORCH_VERSION and Python packages into $VENV (first time: several GB)"
  [[ -x "$VENV/bin/pip" ]] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check \
    "torch==$TORCH_VERSION" numpy matplotlib safetensors "transformers==5.24.0" pytest
  "$VENV/bin/python" -c "import torch; assert torch.__version__.startswith('$TORCH_VERSION'), torch.__version__"
  touch "$stamp"
fi

