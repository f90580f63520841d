#!/usr/bin/env bash
# mpirun with what tp-harness needs on one machine: OpenMPI's consent to run as root,
# more ranks than cores (--oversubscribe), and no core binding (ranks share cores).
# Usage: scripts/mpirun.sh -n 4 target/release/tp-train --pattern 3xsppp
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
exec mpirun --oversubscribe --bind-to none "$@"
