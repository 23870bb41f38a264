"""What the multi-node step tests share: an MPI test program and a terminal reader.

``build_mpi(flavour, directory)`` compiles ``MPI_PROGRAM`` with ``mpicc.<flavour>``
(``openmpi`` or ``mpich``; skips the test where it is not installed). Each rank prints
``rank R of N on <where> sum S`` where ``<where>`` is the environment variable named by
``MPI_WHERE`` (e.g. ``SLURMD_NODENAME``) or, without it, the host name; rank 0 prints
``pingpong 42`` after a message round trip with rank 1.

``PtyReader(fd)`` collects what a program on a pseudo-terminal writes: ``until(marker)``
reads until ``marker`` appears after position ``start`` (or a timeout).
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest

MPI_PROGRAM = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int rank, size, sum = 0, value;
    char host[256];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    value = rank + 1;
    MPI_Allreduce(&value, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (size > 1) {  /* ping-pong between rank 0 and rank 1 */
        int token = 41;
        if (rank == 0) {
            MPI_Send(&token, 1, MPI_INT, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(&token, 1, MPI_INT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            printf("pingpong %d\n", token);
        } else if (rank == 1) {
            MPI_Recv(&token, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            token += 1;
            MPI_Send(&token, 1, MPI_INT, 0, 0, MPI_COMM_WORLD);
        }
    }
    const char *var = getenv("MPI_WHERE");
    const char *where = var ? getenv(var) : NULL;
    if (where == NULL) {
        gethostname(host, sizeof host);
        where = host;
    }
    printf("rank %d of %d on %s sum %d\n", rank, size, where, sum);
    MPI_Finalize();
    return 0;
}
"""


def build_mpi(flavour: str, directory: Path) -> Path:
    cc = shutil.which(f"mpicc.{flavour}")
    if cc is None:
        pytest.skip(f"mpicc.{flavour} is not installed (Debian: "
                    f"{'libopenmpi-dev' if flavour == 'openmpi' else 'libmpich-dev'})")
    exe = directory / f"mpi_test_{flavour}"
    if not exe.exists():
        src = directory / "mpi_test.c"
        src.write_text(MPI_PROGRAM)
        r = subprocess.run([cc, "-o", str(exe), str(src)], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
    os.chmod(exe, 0o755)
    return exe


class PtyReader:
    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.seen = b""

    def until(self, marker: bytes, timeout: float = 30, start: int = 0) -> bool:
        """Read until ``marker`` is in the output after ``start``; False on timeout."""
        end = time.monotonic() + timeout
        while marker not in self.seen[start:] and time.monotonic() < end:
            ready, _, _ = select.select([self.fd], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                self.seen += chunk
        return marker in self.seen[start:]
