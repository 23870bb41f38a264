"""The MPI ping-pong program of the network check, compiled with ``mpicc`` at check time.

Two ranks on two nodes bounce a message: 8 bytes for latency (half the round trip), a
large message (1 MiB by default) for bandwidth (bytes over half the round trip, MB/s =
1e6 bytes/s). Rank 0 times one warm-up round trip per size and chooses the repetitions so
that each size takes about ``budget`` seconds (at least one, at most 100,000), which keeps a
slow link from stretching the check. The repetitions run in five batches and the figure is
the best batch's mean: on a busy host a burst of other work stalls a batch, and the
comparison with the other nodes should see the link, not that burst. It prints one line
read by ``parse.parse_pingpong``:
``pingpong latency_us=X bandwidth_mb_s=Y bytes=N reps=R,S host0=A host1=B``.

``MPI_Finalize`` runs under a watchdog (``FINALIZE_S``: ``alarm``, then ``_exit(0)``): MPICH
4.0 with UCX (Debian 12's) can deadlock there, one rank blocked in the PMI barrier of its
finalize while the other still waits for it to acknowledge the UCX endpoint disconnect
(fixed upstream by pmodels/mpich#6596, "ch4/ucx: remove MPIR_pmi_barrier in finalize").
Seen on a loaded machine with a shaped link: the step never ended, the check job held its
nodes until the run's timeout. The result is printed and flushed before finalize, so a
rank cut short there loses nothing.

The binary is cached per compiler and source under ``<state dir>/checks/bin``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

SOURCE = r"""
#include <mpi.h>
#define FINALIZE_S 5
#define BATCHES 5
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <unistd.h>

static void finalize_stuck(int sig) { (void)sig; _exit(0); }

static double roundtrip(char *buf, int n, int rank, int reps) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < reps; i++) {
        if (rank == 0) {
            MPI_Send(buf, n, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(buf, n, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, n, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, n, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
        }
    }
    return (MPI_Wtime() - t0) / reps;
}

static double measure(char *buf, int n, int rank, double budget, int *used) {
    double warm = roundtrip(buf, n, rank, 1);
    int reps = warm > 0 ? (int)(budget / warm) : 100000;
    if (reps < 1) reps = 1;
    if (reps > 100000) reps = 100000;
    MPI_Bcast(&reps, 1, MPI_INT, 0, MPI_COMM_WORLD);
    *used = reps;
    int batches = reps >= BATCHES ? BATCHES : 1;
    double best = 0;
    for (int b = 0; b < batches; b++) {
        double t = roundtrip(buf, n, rank, reps / batches);
        if (b == 0 || t < best) best = t;
    }
    return best;
}

int main(int argc, char **argv) {
    int rank, size, len, r1, r2;
    char host[MPI_MAX_PROCESSOR_NAME], peer[MPI_MAX_PROCESSOR_NAME];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0) fprintf(stderr, "pingpong needs 2 ranks, got %d\n", size);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    double budget = argc > 1 ? atof(argv[1]) : 0.5;
    int big = argc > 2 ? atoi(argv[2]) : 1 << 20;
    char *buf = malloc(big);
    memset(buf, 1, big);
    memset(host, 0, sizeof host);
    MPI_Get_processor_name(host, &len);
    if (rank == 0) MPI_Recv(peer, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 1, 2, MPI_COMM_WORLD,
                            MPI_STATUS_IGNORE);
    else MPI_Send(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, 2, MPI_COMM_WORLD);
    double lat = measure(buf, 8, rank, budget, &r1);
    double bw = measure(buf, big, rank, budget, &r2);
    if (rank == 0)
        printf("pingpong latency_us=%.3f bandwidth_mb_s=%.3f bytes=%d reps=%d,%d host0=%s "
               "host1=%s\n", lat / 2 * 1e6, big / (bw / 2) / 1e6, big, r1, r2, host, peer);
    fflush(stdout);
    fflush(stderr);
    free(buf);
    MPI_Barrier(MPI_COMM_WORLD);
    signal(SIGALRM, finalize_stuck);
    alarm(FINALIZE_S);
    MPI_Finalize();
    return 0;
}
"""


class BuildError(Exception):
    pass


def build(mpicc: str, cache_dir: Path) -> Path:
    """The compiled program for ``mpicc`` (cached by compiler and source hash)."""
    cc = shutil.which(mpicc)
    if cc is None:
        raise BuildError(f"{mpicc} not found: install MPI's compiler (Debian: libmpich-dev "
                         "or libopenmpi-dev) or set [checks] mpicc")
    tag = hashlib.sha256((cc + SOURCE).encode()).hexdigest()[:12]
    exe = cache_dir / f"pingpong-{tag}"
    if exe.exists():
        return exe
    cache_dir.mkdir(parents=True, exist_ok=True)
    src = cache_dir / f"pingpong-{tag}.c"
    src.write_text(SOURCE)
    tmp = cache_dir / f".pingpong-{tag}.{os.getpid()}"
    r = subprocess.run([cc, "-O2", "-o", str(tmp), str(src)], capture_output=True, text=True,
                       timeout=300)
    if r.returncode != 0:
        raise BuildError(f"{mpicc} failed: {r.stderr.strip()[-2000:]}")
    os.chmod(tmp, 0o755)
    os.replace(tmp, exe)
    return exe
