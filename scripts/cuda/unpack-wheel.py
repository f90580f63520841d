"""Unpacks the data files of a wheel (its `*.data/data/` tree: bin/, lib/, include/) into
a prefix, keeping their modes: how Open MPI's self-contained wheel becomes an MPI
installation, on the build machine (scripts/build-cuda.sh, for mpicc) and on a GPU machine
with no MPI (gpu-check.sh, for libmpi and mpirun). pip's --target drops the wheel's lib/.

usage: python3 unpack-wheel.py WHEEL PREFIX
"""

import os
import sys
import zipfile

wheel, prefix = sys.argv[1:]
z = zipfile.ZipFile(wheel)
for i in z.infolist():
    rest = i.filename.partition(".data/data/")[2]
    if not rest or i.is_dir():
        continue
    dst = os.path.join(prefix, rest)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(dst, "wb") as f:
        f.write(z.read(i))
    os.chmod(dst, (i.external_attr >> 16) & 0o777 or 0o644)
