#!/usr/bin/env bash
# Sets up tp-harness and runs the default experiment: the mini GPT-2 on tiny Shakespeare
# (char level), pattern sppp, tensor parallel 2 (ranks as threads), 2000 iterations.
# Extra arguments go to tp-train, e.g. scripts/run-default.sh --pattern tttt
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
[ -d "$HOME/.cargo/bin" ] && export PATH="$HOME/.cargo/bin:$PATH"
exec "${CARGO_TARGET_DIR:-target}/release/tp-train" "$@"
