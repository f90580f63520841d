#!/usr/bin/env bash
# The test suite, as CI runs it: set up on a fresh Debian 12 machine, check formatting and
# lints, and run every test (release build: the training tests run real steps).
set -euo pipefail
case "${1:-}" in
  -h | --help)
    cat <<'EOF'
usage: scripts/test.sh

Runs the whole test suite as CI does, on a fresh Debian 12 machine or this one:
installs what it needs (apt: a C toolchain, OpenMPI, Slurm; PyPI: TensorBoard into
target/py; Rust with rustup), prepares the datasets, checks formatting and lints, runs
every test in a release build, the kernel and equivalence tests again at the AVX2 and
scalar SIMD levels and with a system BLAS computing the products (Debian's OpenBLAS,
installed here), and the CUDA compile check (no GPU needed).

How long, on a 2-core machine: about 25 minutes from a cold start (CI's fresh clone, a
2-core VM whose CPU varies, reaches the end of the main suite in 18; the SIMD reruns and
the CUDA check add ~6), about 15 with a warm build (the main suite alone: 8-9 minutes
on a 2-core AMD EPYC, family 25 model 1, Zen 3, 2026-11-27). Quicker, while you work:
  cargo test --release --test it -- NAME     one group of tests (e.g. t_equals_gpt2::)
  TP_SKIP_CUDA_LINT=1 scripts/test.sh        everything but the CUDA compile check
The GPU itself is never needed; docs/gpus.md says how its own checks run.
EOF
    exit 0
    ;;
  "") ;;
  *)
    echo "test: unknown argument \`$1\`: scripts/test.sh takes none (--help says what it runs)" >&2
    exit 2
    ;;
esac
cd "$(dirname "$0")/.."
scripts/setup.sh
[ -d "$HOME/.cargo/bin" ] && export PATH="$HOME/.cargo/bin:$PATH"

# A real Slurm for tests/it/mpi/slurm.rs (scripts/cluster/slurm.sh makes a one-node
# cluster of this machine); without Debian's packages that test says it skipped.
slurm=(slurmd slurmctld slurm-client munge)
for p in "${slurm[@]}"; do
  if ! dpkg -s "$p" >/dev/null 2>&1; then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq || true
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${slurm[@]}" >/dev/null ||
      echo "test: Slurm could not be installed: tests/it/mpi/slurm.rs will skip"
    break
  fi
done

# A system BLAS for the `matmul: blas` route's tests (tests/it/matmul_route.rs, and the
# kernel and equivalence tests again below): Debian's OpenBLAS. The default build and
# route need none.
if ! dpkg -s libopenblas0-pthread >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq libopenblas0-pthread >/dev/null ||
    { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq libopenblas0-pthread >/dev/null; }
fi
export TP_TEST_BLAS=required

# TensorBoard's own reader, which tests/it/tensorboard.rs holds the event files to, in a
# virtual environment of the tests' own (target/py). Without PyPI those tests say they
# skipped.
if ! target/py/bin/python -c "import tensorboard" >/dev/null 2>&1; then
  rm -rf target/py
  if ! python3 -m venv target/py >/dev/null 2>&1; then
    # Debian's python3 makes environments only with its venv package.
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-venv >/dev/null || true
    rm -rf target/py
    python3 -m venv target/py || true
  fi
  target/py/bin/pip install --quiet tensorboard==2.21.0 ||
    echo "test: tensorboard could not be installed from PyPI: tests/it/tensorboard.rs will skip"
fi

if cargo fmt --version >/dev/null 2>&1; then
  cargo fmt --all --check
else
  echo "test: rustfmt not installed, skipping the format check"
fi
if cargo clippy --version >/dev/null 2>&1; then
  cargo clippy --release --all-targets -- -D warnings
else
  echo "test: clippy not installed, skipping lints"
fi
log=$(mktemp)
cargo test --release 2>&1 | tee "$log"
# The lower SIMD levels, forced on this CPU (TP_SIMD caps at what it has): the kernel
# tests and the equivalence proofs again, on the AVX2 and plain x86-64 code paths.
for level in avx2 scalar; do
  echo "test: kernels and equivalence tests at TP_SIMD=$level"
  TP_SIMD=$level cargo test --release -p tp-harness --lib -- ops:: 2>&1 | tee -a "$log"
  TP_SIMD=$level cargo test --release --test it -- t_equals_gpt2:: s_and_p_equal_blocks_md:: golden_vectors:: 2>&1 | tee -a "$log"
done
# The products by the system BLAS (TP_MATMUL=blas overrides every run's matmul key):
# the kernel tests and the equivalence proofs again on that route.
echo "test: kernels and equivalence tests at TP_MATMUL=blas"
TP_MATMUL=blas cargo test --release -p tp-harness --lib -- ops:: 2>&1 | tee -a "$log"
TP_MATMUL=blas cargo test --release --test it -- t_equals_gpt2:: s_and_p_equal_blocks_md:: golden_vectors:: 2>&1 | tee -a "$log"
# The CUDA code, compiled and linted without a GPU (clippy -D warnings over the cuda and
# mpi features; our kernels through the real nvcc): no change may break it silently while
# no GPU runs it. TP_SKIP_CUDA_LINT=1 skips it (a quick local run).
if [ "${TP_SKIP_CUDA_LINT:-0}" = 1 ]; then
  echo "test: TP_SKIP_CUDA_LINT=1: CUDA lint skipped"
else
  scripts/build-cuda.sh --lint
fi
# One closing line over all test binaries.
awk '/^test result:/ { p += $4; f += $6 } END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
rm -f "$log"
