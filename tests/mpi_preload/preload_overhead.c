/* preload_overhead.c — what the interposer adds to an MPI_Allreduce it passes to MPI.
 *
 *   preload_overhead [N]
 *
 * Times N (default 10^6) MPI_Allreduce calls of one float, MPI_SUM, on
 * MPI_COMM_WORLD — a call the interposer hands to PMPI_Allreduce — after 1000
 * warm-up calls, and prints rank 0's mean time per call. An ordinary MPI program:
 * preload_overhead.sh runs it with and without LD_PRELOAD and prints the
 * difference. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  long n = argc > 1 ? atol(argv[1]) : 1000000L;
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  float x = (float)rank, y = 0.0f;
  for (int i = 0; i < 1000; i++) MPI_Allreduce(&x, &y, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (long i = 0; i < n; i++) MPI_Allreduce(&x, &y, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  double t1 = MPI_Wtime();
  /* Also a correctness check: the sum of ranks. */
  int ok = y == (float)(nranks * (nranks - 1) / 2);
  if (rank == 0)
    printf("preload_overhead: np %d, %ld calls of 1 float: %.1f ns per call%s\n", nranks, n,
           (t1 - t0) * 1e9 / (double)(n > 0 ? n : 1), ok ? "" : " (WRONG SUM)");
  MPI_Finalize();
  return ok ? 0 : 1;
}
