/* mhla-bench --mpi (bench/mpi.c, built with libmhla_mpi only). */
#ifndef MHLA_BENCH_MPI_H
#define MHLA_BENCH_MPI_H

/* Runs the MPI scaling benchmark (argv as mhla-bench's); returns the exit code. */
int bench_mpi_main(int argc, char **argv);

#endif
