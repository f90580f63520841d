#!/usr/bin/env bash
# Sets up tp-harness and runs the default experiment: the mini GPT-2 on tiny Shakespeare
# (char level), pattern sppp, tensor parallel 2 (ranks as threads), 2000 iterations.
# Extra arguments go to tp-train, e.g. scripts/run-default.sh --pattern tttt
# --help (or -h) prints this header and exits, building and running nothing.
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0; }
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
[ -d "$HOME/.cargo/bin" ] && export PATH="$HOME/.cargo/bin:$PATH"
exec "${CARGO_TARGET_DIR:-target}/release/tp-train" "$@"
