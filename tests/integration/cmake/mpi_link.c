/* Links libmhla_mpi through mhla::mhla_mpi and splits 8 blocks over 3 ranks without starting MPI:
 * the target's include folders, libraries and run path resolve (tests/integration/cmake_check.sh). */
#include <mhla_mpi.h>

#include <stdio.h>

int main(void)
{
    int64_t offset = 0, count = 0;
    const mhla_status st = mhla_mpi_shard_blocks(8, 1, 3, 2, &offset, &count);
    printf("mhla_mpi_shard_blocks(8 blocks, rank 2 of 3): offset %lld, %lld blocks\n", (long long)offset,
           (long long)count);
    return st == MHLA_OK && offset + count == 8 && count > 0 ? 0 : 1;
}
