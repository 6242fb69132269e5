/* The token grid every kernel takes by value: one definition, included by the kernels
 * (kernels/common.h, inlined into each kernel's source by scripts/cl2c.py) and by the host
 * (host/config/config.h fills it: forward/plan.c, causal/causal.c). Sizes that vary per call
 * without a rebuild. Only 32-bit ints, so the layout is the same on the host and on every device.
 * Kernels take it as `g_arg` and copy it into a private `g` first thing: Mesa (rusticl on llvmpipe,
 * and its GPU drivers) reads a struct argument's fields where they are used, and one read inside a
 * loop or after an early return makes it print "Treating load_kernel_arg in control flow as
 * uniform" on stderr. */
#ifndef MHLA_GRID_H
#define MHLA_GRID_H

/* The host defines MHLA_GRID_INT as cl_int before including this (config/config.h); OpenCL C's
 * int is the same 32 bits. (A test of __OPENCL_VERSION__ would not do: clang's OpenCL C front end
 * does not define it.) */
#ifndef MHLA_GRID_INT
#define MHLA_GRID_INT int
#endif

typedef struct mhla_grid {
    MHLA_GRID_INT n;            /* tokens per sequence */
    MHLA_GRID_INT heads;        /* H */
    MHLA_GRID_INT seq_h, seq_w; /* token grid extents (T is implied by n) */
    MHLA_GRID_INT pt, ph, pw;   /* tokens per block along t, h, w */
    MHLA_GRID_INT blk_h, blk_w; /* blocks along h, w */
    MHLA_GRID_INT nb;           /* tokens per block */
    MHLA_GRID_INT m;            /* blocks */
    MHLA_GRID_INT bh;           /* batch * heads */
    MHLA_GRID_INT run;          /* consecutive positions of a block that are consecutive tokens (divides nb) */
    MHLA_GRID_INT kv_heads;     /* H_kv: the summaries' heads (= heads but for grouped key/value heads) */
    MHLA_GRID_INT kv_m;         /* blocks of the key/value grid: Mc's columns (= m but for cross-attention) */
} mhla_grid;

#endif /* MHLA_GRID_H */
