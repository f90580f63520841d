#!/usr/bin/env bash
# mpirun with what tp-harness needs: OpenMPI's consent to run as root, more ranks than
# cores (--oversubscribe), no core binding (ranks share cores), and TCP messages up to
# 4 MB sent eagerly: above OpenMPI's default 64 KB the sender waits for the receiver's
# clear-to-send, which on a busy link queues behind the receiver's own data (measured:
# +30-40% per step at 200-500 Mbit/s, docs/links.md). Harmless on one machine.
# Usage: scripts/cluster/mpirun.sh -n 4 target/release/tp-train --pattern 3xsppp
# --help (or -h) prints this header and exits, building and running nothing.
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0; }
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
exec mpirun --oversubscribe --bind-to none \
  --mca btl_tcp_eager_limit 4194304 --mca btl_tcp_max_send_size 4194304 "$@"
