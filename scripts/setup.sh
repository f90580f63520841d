#!/usr/bin/env bash
# Sets up tp-harness on a Debian/Ubuntu machine: system packages (a C toolchain, OpenMPI
# and libclang for the MPI backend's bindings, iproute2 for scripts/cluster/netns.sh),
# the release build, and the datasets (copied from ../shared/datasets when present, else
# downloaded). DejaVu fonts label plots.
# --help (or -h) prints this header and exits, building and running nothing.
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0; }
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential pkg-config curl ca-certificates libclang-dev libopenmpi-dev openmpi-bin fonts-dejavu-core iproute2 util-linux)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  else
    echo "setup: installing Rust with rustup"
    curl -fsSL https://sh.rustup.rs | sh -s -- -y --profile minimal --component rustfmt,clippy
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
fi

cargo build --release --bins
# Where cargo put them: CARGO_TARGET_DIR when set (relative to this folder, as cargo reads it).
"${CARGO_TARGET_DIR:-target}/release/tp-prepare"
