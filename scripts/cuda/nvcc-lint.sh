#!/usr/bin/env bash
# nvcc for `scripts/build-cuda.sh --lint` (the CUDA check of the test command): our own
# kernels (kernels/*.cu) go to the real nvcc ($TP_REAL_NVCC), so a change that breaks them
# fails the check; candle's pinned kernels (candle-kernels, upstream code no change of ours
# can break, and 10-20 minutes of nvcc on two cores) get empty stand-ins of the files its
# build script expects. The stand-ins are never run: a lint compiles and checks Rust, it
# links and loads nothing. The real GPU build (build-cuda.sh without --lint) never uses it.
# --help (or -h) prints this header and exits, building and running nothing.
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0; }
set -euo pipefail
real=${TP_REAL_NVCC:?TP_REAL_NVCC must name the real nvcc}

# Cargo runs a build script in its package's folder, and cudaforge passes sources relative
# to it: candle's kernels are the calls made from candle-kernels' folder.
case "$PWD" in
  */candle-kernels-*) ;;
  *) exec "$real" "$@" ;;
esac

if [ "${1:-}" = --version ]; then
  exec "$real" "$@"
fi
source="" outdir="" out="" ptx=0 lib=0 objs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --output-directory) outdir=$2; shift 2 ;;
    -o) out=$2; shift 2 ;;
    --ptx) ptx=1; shift ;;
    --lib) lib=1; shift ;;
    *.cu) source=$1; shift ;;
    *.o) objs+=("$1"); shift ;;
    *) shift ;;
  esac
done
if [ "$lib" = 1 ]; then
  rm -f "$out" && ar rcs "$out" "${objs[@]}"
elif [ "$ptx" = 1 ]; then
  stem=$(basename "$source" .cu)
  printf '// stand-in for %s (scripts/cuda/nvcc-lint.sh): never loaded\n' "$stem" >"${outdir:-.}/$stem.ptx"
else
  cc -x c -c /dev/null -o "$out"
fi
