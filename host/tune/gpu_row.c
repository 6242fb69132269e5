/* The GPU rows' choices that follow from the device rather than its vendor: where a GPU's local
 * memory is global memory, the forms that stage tiles there give way to the ones that read global
 * memory directly. No device calls: everything comes from what the context read, so that the unit
 * test (tests/tune/test_tiling.c) runs it without OpenCL. */
#include "tune/tune.h"

#include <stdio.h>

/* ARM's Mali GPUs report CL_DEVICE_LOCAL_MEM_TYPE = CL_GLOBAL: a "local" array is ordinary memory
 * behind the same caches as the tensors, so a tile copied there is read twice and every copy ends
 * at a barrier. The tiled kernels (summary_tiled.cl, output_tiled.cl, the causal and backward
 * tiles, softmax_tiled.cl) exist to serve many multiply-adds from one load of on-chip memory; there
 * they would only add the copies and barriers. So such a GPU takes the row's untiled kernels (float4
 * rows read from global memory, as the GPU rows ran before the tiles), the mixing kernel (CLBlast's
 * GEMMs stage their tiles in local memory too) and the decoder's one-part step (its parts add
 * through local memory). CPU devices report CL_GLOBAL as well, but their rows never tile, and a GPU
 * row forced onto one (MHLA_TUNING=row=gpu on PoCL, as the tests do) must keep its tiles to be
 * tested: the rule is for GPUs alone, and for any device where MHLA_LIMITS says local_type=global
 * (local_mem_global 2: how the tests reach it on PoCL). Returns 1 where it changed the row. */
int mhla__gpu_row_fill(mhla_tuning *t, const mhla_device_limits *limits)
{
    if (!(limits->local_mem_global == 2 || (limits->local_mem_global && (limits->type & CL_DEVICE_TYPE_GPU))))
        return 0;
    t->tiled = 0, t->tl_fuse = 0;
    t->bt_tq = 0;
    t->ct_sq = 0, t->cp_ti = 0, t->cs_tk = 0;
    t->bc_sq = 0;
    t->sm_tiled = 0;
    t->dm_t = 0;
    t->dec_dp = 1;
    t->mix_kernel = 1, t->gemm_rows = 0;
    return 1;
}
