/* The built-in tuning rows (one per kind of device, first match wins, ending at a default) and the
 * "name=value,..." parser and printer of the tuning fields (one list: MHLA_TUNING_FIELDS). */
#include "tune/tune.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tuning_row {
    const char *name;    /* for row=NAME and for messages */
    const char *vendor;  /* substrings of CL_DEVICE_VENDOR separated by '|' (any of them), or NULL for any */
    const char *device;  /* substring of CL_DEVICE_NAME, or NULL for any */
    cl_device_type type; /* 0 for any */
    int registers;       /* CPU rows: register tiles derived (tune/cpu_row.c) for this many vector
                            registers, 0 for the device's own count; ROW_AS_WRITTEN: the row's tiles as
                            written; ROW_GPU: as written, then what follows from the device's local
                            memory (tune/gpu_row.c) */
    mhla_tuning t;
} tuning_row;
enum { ROW_AS_WRITTEN = -1, ROW_GPU = -2 };

/* First match wins, so specific rows come before the defaults. Why these choices (the measurements
 * behind them: docs/tuning-notes.md, one section per stage):
 * - CPUs (PoCL, vendor CPU runtimes) compile explicit vectors straight to SIMD registers and
 *   barely vectorize scalar work-items, so each work-item row is one vector as wide as the
 *   registers the compiler targets, and the register tiles are sized to how many there are:
 *   both derived from the device (tune/cpu_row.c). Wider vectors never help: without AVX-512 a
 *   float16 argument or return value changes the calling convention (clang warns, and PoCL
 *   prints the warning on stderr). The summary prefetches its next chunk (pf, kernels/common.h),
 *   broadcasts its k~ values from memory rather than by register shuffles (sum_kb, kernels/tiles.h)
 *   and folds its partial sums every 256 tokens (sum_chunk): each fold is a barrier, and CPU
 *   runtimes pass every work-item of the group through it; 256 is also a whole block at the
 *   bench's M (blocks of 256 tokens), one chunk and one barrier per group (docs/tuning-notes.md
 *   "Block summary").
 *   Work-groups are tasks, so a few per core would do, but the rows take many (groups_per_cu 256):
 *   a long block (linear attention's M = 1, a small M) is then split into segments of split_min_len
 *   tokens, and as heads vary fastest in the grid, the groups that run one after another walk the
 *   same token rows ([B,N,H,D]: a head's 256 bytes of a 2 KiB row) where a group per block walked
 *   its head through the whole block alone (docs/tuning-notes.md "Block summary"). The mixing GEMM
 *   runs in kernels/mixing.cl:
 *   CLBlast's GEMMs stage tiles in local memory behind barriers, which CPU runtimes emulate in
 *   ordinary memory; likewise the causal
 *   prefix sums every earlier chunk itself (gemm_rows 0). Softmax (kernels/softmax.cl): whole
 *   registers along keys and values, tiles copied row by row (contiguous, vectorized), 256 query
 *   rows per group to amortize the copy.
 *   The causal backward's read-outs run fused (bct_fuse): one group per (chunk, head) computes the
 *   two score matrices once for dq, dk, dv and dMc's diagonal, a chunk's rows and scores held in
 *   the runtime's large local memory (PoCL: 1 MiB); the three read-outs and bc_diag computed them
 *   five times. GPU rows keep those (a chunk of 64 needs 48 KiB, unmeasured on a GPU).
 * - GPUs want many light work-items: float4 columns, smaller register tiles, enough work-groups
 *   to fill every compute unit several times, CLBlast's tuned GEMM for the causal prefix blocks of
 *   32 chunks. The forward runs tiled (tiled 1: summary_tiled.cl, output_tiled.cl, the segments
 *   added inside the mixing): 16 x 16 work-items of 4 x 4 tiles per group, 16-token tiles of k~ and
 *   v and 16-dimension tiles of q~ through local memory (tl_tk, tl_dc: `mhla tune` on an NVIDIA
 *   H100 chose 16 over 32, the forward 0.239 -> 0.211 ms at N = 16384, M = 64), groups_per_cu 4 (a
 *   block is split only where that doubles the groups: its partial summaries cost traffic); on the
 *   H100 the forward 2.0x faster than the untiled kernels at N = 16384 (docs/tuning-notes.md "On
 *   GPUs"). Where M x segments is at most 16 (N = 1024 at the bench's M) the read-out mixes the
 *   summaries itself, one launch fewer (tl_fuse; not yet run on a GPU); the whole forward in one
 *   launch (tl_one, forward_one.cl) is 0 in every row until a GPU has timed it against these (its
 *   groups walk every key: M times the summary's multiply-adds). The non-causal backward's
 *   read-outs and gradient summaries run tiled too (bt_tq: groups of 64 tokens x a Dk-wide row, 16
 *   dimensions a local tile; where M is at most 4 and the blocks whole, the read-outs mix S~ and dS
 *   themselves, two launches fewer, bt_fuse; not yet run on a GPU). Both only where the pieces read
 *   again add at most 32 MiB (fuse_mb; 8 in the smaller rows): about one launch's gap at an H100's
 *   cache bandwidth, where B = 8, N = 4096, M = 16 would re-read 1 GiB to save one launch. Softmax
 *   runs tiled (sm_tiled, softmax_tiled.cl: groups of 64 queries, 16-key tiles, each product a 4 x 4
 *   register tile per work-item through local memory; not yet run on a GPU: softmax.cl's one query row per work-item ran at 20% of the
 *   H100's peak probe). The causal forward's chunk summaries, read-out and prefix run tiled too
 *   (cs_tk: causal_summary_tiled.cl, summary_tiled.cl's groups over the chunk table; ct_sq, cp_ti:
 *   causal_tiled.cl, 64 tokens x 16 keys a group, the masked scores and both products 4 x 4 per
 *   work-item through local memory; causal_prefix_tiled.cl, 32 chunks x 64 columns a group over
 *   every earlier chunk, no CLBlast blocks; not yet run on a GPU: the untiled kernels took 0.30 and
 *   0.41 ms of the H100's 1.07 at N = 16384, C = 64). The causal backward's read-outs and the
 *   paper normalizer's per-token scalars run tiled the same way (bc_sq: backward_causal_tiled.cl, 64
 *   tokens x 16 pair tokens a group), its chunk and gradient summaries in the forward's summary
 *   groups (cs_tk; not yet run on a GPU); its other kernels keep 8 accumulator vectors (bwd_acc:
 *   32 floats) per work-item. Both backward forms' dMc products run in 64 x 64 tiles of a
 *   work-group through local memory (dm_t: bwd_dmixing_tiled; not yet run on a GPU), and the tiled
 *   dk read-out gives dMc's diagonal terms on the way (no bc_diag). The decoder's step splits the key
 *   dimensions into 8 parts per column (dec_dp: chains of Dk/8 in groups of 64 lanes x 8 parts, the
 *   parts added in local memory) and its chunk start the earlier chunks the same way (not yet run on
 *   a GPU: the H100's step walked all of Dk per work-item in 8 groups, 16.6 us, and its chunk start
 *   took 0.39 ms for 17 MB).
 * - Mesa's llvmpipe (rusticl) is a CPU device that runs work-items as SIMD lanes, 8 at a time
 *   (256 bits), like a GPU; it reports a float width of 1.
 * - GPUs by vendor ('nvidia', 'amd', 'intel-gpu', 'mobile', before 'gpu' for the rest): the GPU
 *   row's fields, but for what the vendors document of their devices (below); phones' GPUs the
 *   smaller tiles. Only NVIDIA's has run. A GPU whose local memory is global memory (Mali) takes the
 *   untiled kernels whatever its row (tune/gpu_row.c).
 * - Anything neither CPU nor GPU (accelerators): GPU-like choices with smaller tiles, the tiled
 *   forward in groups of 8 x 8 work-items, never run on such a device (test_tiled_limits on PoCL and
 *   rusticl, and Oclgrind, with 64-wide groups and 16 KiB of local memory forced). */
/* The fields every CPU row shares (their tiles and widths come from tune/cpu_row.c); the rows differ
 * in the summary's folds and the read-out's streaming stores alone. */
#define CPU_ROW_FIELDS(chunk, nt)                                                                    \
    {.sum_chunk = (chunk), .sum_kb = 1, .sum_lk = 1, .out_dc = 4, .out_nt = (nt), .out_pre = 0, .out_pf = 4, .wg = 64, \
     .groups_per_cu = 256, .split_min_len = 256, .pf = 1, .mix_kernel = 1, .tq = 32, .kt = 32,          \
     .gemm_rows = 0, .sm_bq = 256, .sm_bk = 64, .sm_rows = 1, .sm_tiled = 0, .dg_parts = 1, .bct_fuse = 1, .bwd_heads = 1,  \
     .tiled = 0, .tl_tk = 32, .tl_tn = 64, .tl_tq = 64, .tl_rr = 4, .tl_qr = 4, .tl_dc = 32, .tl_fuse = 0, .bt_tq = 0, .bt_dc = 16, \
     .ct_sq = 0, .ct_bk = 16, .cp_ti = 0, .cp_tw = 64, .cp_tj = 16, .cs_tk = 0, .bc_sq = 0, .bc_bk = 16, .dec_dp = 1}
/* The GPU rows' fields: 1D groups of `wg` work-items, the decoder's step in `dec_dp` parts. */
#define GPU_ROW_FIELDS(wg_, dec_dp_)                                                                   \
    {.vec = 4, .sum_rd = 4, .sum_ve = 4, .sum_nv = 1, .sum_chunk = 32, .out_rt = 4, .out_ve = 4, .out_nv = 1,  \
     .out_dc = 4, .out_nt = 0, .out_pre = 0, .out_pf = 0, .wg = (wg_), .groups_per_cu = 4, .split_min_len = 128, \
     .pf = 0, .mix_kernel = 0, .mix_mr = 4, .mix_ve = 4, .mix_nv = 1, .pre_mr = 4, .pre_nv = 1, .tq = 32, .kt = 32, \
     .sc_rt = 1, .sc_kv = 1, .gemm_rows = 32, .sm_bq = 64, .sm_bk = 16, .sm_vw = 4, .sm_rows = 0, .sm_tiled = 1,  \
     .dg_parts = 32, .bwd_acc = 8, .dmix_tm = 4, .dm_t = 64, .tiled = 1, .tl_tk = 16, .tl_tn = 64, .tl_tq = 64, .tl_rr = 4,   \
     .tl_qr = 4, .tl_dc = 16, .tl_fuse = 16, .bt_tq = 64, .bt_dc = 16, .bt_fuse = 4, .fuse_mb = 32, .ct_sq = 64,   \
     .ct_bk = 16, .cp_ti = 32, .cp_tw = 64, .cp_tj = 16, .cs_tk = 16, .bc_sq = 64, .bc_bk = 16, .dec_dp = (dec_dp_)}
/* Smaller GPU tiles: 2-token read-out tiles, 64-wide groups, the tiled forward in 8 x 8 groups; with
 * `clblast` 0 the mixing kernel and the causal prefix's own sums instead of CLBlast's GEMMs. */
#define SMALL_GPU_ROW_FIELDS(clblast)                                                              \
    {.vec = 4, .sum_rd = 4, .sum_ve = 4, .sum_nv = 1, .sum_chunk = 32, .out_rt = 2, .out_ve = 4, .out_nv = 1,  \
     .out_dc = 4, .out_nt = 0, .out_pre = 0, .out_pf = 0, .wg = 64, .groups_per_cu = 4, .split_min_len = 128,    \
     .pf = 0, .mix_kernel = !(clblast), .mix_mr = 4, .mix_ve = 4, .mix_nv = 1, .pre_mr = 4, .pre_nv = 1,      \
     .tq = 32, .kt = 32, .sc_rt = 1, .sc_kv = 1, .gemm_rows = (clblast) ? 32 : 0, .sm_bq = 32, .sm_bk = 16, .sm_vw = 4,          \
     .sm_rows = 0, .sm_tiled = 1, .dg_parts = 8, .bwd_acc = 8, .dmix_tm = 4, .dm_t = 32, .tiled = 1, .tl_tk = 16, .tl_tn = 32, \
     .tl_tq = 32, .tl_rr = 4, .tl_qr = 4, .tl_dc = 16, .tl_fuse = 16, .bt_tq = 32, .bt_dc = 16, .bt_fuse = 4,      \
     .fuse_mb = 8, .ct_sq = 32, .ct_bk = 16, .cp_ti = 16, .cp_tw = 64, .cp_tj = 16, .cs_tk = 16, .bc_sq = 32, .bc_bk = 16, .dec_dp = 4}
static const tuning_row rows[] = {
    {"llvmpipe", NULL, "llvmpipe", 0, ROW_AS_WRITTEN,
     {.vec = 4, .sum_rd = 4, .sum_ve = 4, .sum_nv = 1, .sum_chunk = 32, .out_rt = 4, .out_ve = 4, .out_nv = 1,
      .out_dc = 4, .out_nt = 0, .out_pre = 0, .out_pf = 0, .wg = 64, .groups_per_cu = 8, .split_min_len = 128, .pf = 0,
      .mix_kernel = 1, .mix_mr = 4, .mix_ve = 4, .mix_nv = 1, .pre_mr = 4, .pre_nv = 1, .tq = 32, .kt = 32,
      .sc_rt = 1, .sc_kv = 1, .gemm_rows = 0, .sm_bq = 64, .sm_bk = 16, .sm_vw = 4, .sm_rows = 0, .sm_tiled = 0, .dg_parts = 1,
      .bwd_acc = 8, .dmix_tm = 4, .tiled = 0, .tl_tk = 32, .tl_tn = 64, .tl_tq = 64, .tl_rr = 4, .tl_qr = 4, .tl_dc = 32, .tl_fuse = 0,
      .bt_tq = 0, .bt_dc = 16, .ct_sq = 0, .ct_bk = 16,
      .cp_ti = 0, .cp_tw = 64, .cp_tj = 16, .cs_tk = 0, .bc_sq = 0, .bc_bk = 16, .dec_dp = 1}},
    /* CPU rows: the fields below; the vector widths and register tiles of every stage come from
     * the SIMD target (tune/cpu_row.c). 'cpu-intel' takes Intel's CPUs, 'cpu' every other CPU
     * device; 'cpu-wide' (32 registers at the device's width) only by name.
     * 'cpu-intel' differs in the summary's folds (sum_chunk 128, not 256): on the Intel core
     * measured, a 256-token chunk of one head's k and v rows (128 KiB, rows 2 KiB apart in
     * [B,N,H,D]) outgrew L1 and the group's work-items took it from L2; 128 is the fastest there
     * with the k~ in local memory and the spread prefetch. AMD's EPYC kept the larger chunks.
     * And its forward read-out writes with streaming stores only from 16-wide vectors (out_nt 16):
     * AVX2's 32-byte ones were slower than plain stores there, AVX-512's 64-byte ones faster
     * (docs/tuning-notes.md "Block summary", "Read-out"). */
    {"cpu-intel", "Intel", NULL, CL_DEVICE_TYPE_CPU, 0, CPU_ROW_FIELDS(128, 16)},
    {"cpu", NULL, NULL, CL_DEVICE_TYPE_CPU, 0, CPU_ROW_FIELDS(256, 1)},
    {"cpu-wide", NULL, NULL, CL_DEVICE_TYPE_CPU, 32, CPU_ROW_FIELDS(256, 1)},
    /* GPUs by vendor: what one of a vendor's devices was tuned to is the best start for its others
     * (`mhla tune --export` prints a tuned GPU's row as its vendor's). Only NVIDIA's has been run;
     * the others are the GPU row's fields with what their vendors' documentation says of their
     * devices, each fitted to the device's limits like every row. */
    {"nvidia", "NVIDIA", NULL, CL_DEVICE_TYPE_GPU, ROW_GPU, GPU_ROW_FIELDS(128, 8)},
    /* AMD's compilers build a kernel for groups of at most 256 work-items unless it declares its
     * size, whatever the device's limit says (1024 on ROCm): the decoder's 64 lanes in 4 parts, not
     * 8 (a group of 512 would be rebuilt smaller), and 1D groups of 256, a 64-wide wavefront for
     * each of a compute unit's four SIMDs. */
    {"amd", "Advanced Micro Devices|AMD", NULL, CL_DEVICE_TYPE_GPU, ROW_GPU, GPU_ROW_FIELDS(256, 4)},
    {"intel-gpu", "Intel", NULL, CL_DEVICE_TYPE_GPU, ROW_GPU, GPU_ROW_FIELDS(128, 8)},
    /* Phones' and boards' GPUs (Qualcomm's Adreno, ARM's Mali, Imagination's PowerVR): the smaller
     * tiles of the 'default' row (fewer registers a work-item, 64-wide groups), the mixing and
     * prefix kernels rather than CLBlast's GEMMs (Android builds go without it); on Mali, whose local memory is global
     * memory, the untiled kernels (tune/gpu_row.c). */
    {"mobile", "QUALCOMM|ARM|Imagination", NULL, CL_DEVICE_TYPE_GPU, ROW_GPU, SMALL_GPU_ROW_FIELDS(0)},
    {"gpu", NULL, NULL, CL_DEVICE_TYPE_GPU, ROW_GPU, GPU_ROW_FIELDS(128, 8)},
    {"default", NULL, NULL, 0, ROW_GPU, SMALL_GPU_ROW_FIELDS(1)},
};
#undef CPU_ROW_FIELDS
#undef GPU_ROW_FIELDS
#undef SMALL_GPU_ROW_FIELDS
#define ROW_COUNT (sizeof rows / sizeof rows[0])

/* Row r as the starting point of a tuning: CPU rows get their tiles for ctx's SIMD target (or,
 * without a context, for 16-float registers capped later to the device's width). */
static void row_start(const mhla_context *ctx, size_t r, const char *where, mhla_tuning *t)
{
    *t = rows[r].t;
    char derived[64] = "";
    if (rows[r].registers >= 0) {
        mhla_simd s = {16, 16, "reported"};
        if (ctx)
            s = ctx->limits.simd;
        if (rows[r].registers > 0)
            s.registers = rows[r].registers;
        mhla__cpu_row_fill(t, &s);
        snprintf(derived, sizeof derived, "%d floats x %d registers: %s", s.width, s.registers, s.target);
    } else if (rows[r].registers == ROW_GPU && ctx && mhla__gpu_row_fill(t, &ctx->limits)) {
        snprintf(derived, sizeof derived, "local memory is global: untiled");
    }
    /* "built-in row 'cpu' (MHLA_TUNING; 8 floats x 16 registers: haswell)" */
    const char *sep = where && *derived ? "; " : "";
    if (where || *derived)
        snprintf(t->origin, sizeof t->origin, "built-in row '%s' (%s%s%s)", rows[r].name, where ? where : "", sep,
                 derived);
    else
        snprintf(t->origin, sizeof t->origin, "built-in row '%s'", rows[r].name);
}

/* Whether CL_DEVICE_VENDOR `vendor` contains one of the '|'-separated names in `names`. */
static int vendor_is(const char *vendor, const char *names)
{
    for (const char *p = names; *p;) {
        const char *bar = strchr(p, '|');
        const size_t len = bar ? (size_t)(bar - p) : strlen(p);
        for (const char *v = vendor; *v; ++v)
            if (strncmp(v, p, len) == 0)
                return 1;
        p += len + (bar ? 1 : 0);
    }
    return 0;
}

static int matches(const tuning_row *r, const mhla_context *ctx)
{
    if (r->vendor && !vendor_is(ctx->vendor, r->vendor))
        return 0;
    if (r->device && !strstr(ctx->device_name, r->device))
        return 0;
    return r->type == 0 || (ctx->limits.type & r->type) != 0;
}

/* The fields MHLA_TUNING may set (MHLA_TUNING_FIELDS, tune/tune.h), with their smallest valid
 * value (0 for switches and "the device's choice"). */
typedef struct tuning_field {
    const char *name;
    size_t offset;
    int min;
    const char *sep; /* before it in the printed form */
} tuning_field;
#define FIELD(name, min, sep) {#name, offsetof(mhla_tuning, name), min, sep},
static const tuning_field fields[] = {MHLA_TUNING_FIELDS(FIELD)};
#undef FIELD
#define FIELD_COUNT (sizeof fields / sizeof fields[0])

static void append_origin(mhla_tuning *t, const char *what)
{
    const size_t len = strlen(t->origin);
    snprintf(t->origin + len, sizeof t->origin - len, "%s%s", len ? ", " : "", what);
}

mhla_status mhla__tuning_apply(mhla_context *ctx, const char *where, const char *spec, mhla_tuning *t)
{
    mhla_status st = MHLA_OK;
    const char *p = spec;
    int fields_set = 0;
    while (*p) {
        char name[32], value_text[32];
        int used = 0;
        MHLA_FAIL_IF(st, sscanf(p, "%31[a-z_]=%31[^,]%n", name, value_text, &used) != 2, ctx,
                     MHLA_ERR_INVALID_ARGUMENT, "%s='%s': expected name=value[,name=value...] at '%s'", where, spec, p);
        if (strcmp(name, "row") == 0) {
            size_t r = 0;
            while (r < ROW_COUNT && strcmp(rows[r].name, value_text) != 0)
                ++r;
            if (r == ROW_COUNT) {
                char names[160] = "";
                for (size_t i = 0, len = 0; i < ROW_COUNT && len < sizeof names; ++i)
                    len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", i ? ", " : "", rows[i].name);
                MHLA_FAIL_IF(st, 1, ctx, MHLA_ERR_INVALID_ARGUMENT, "%s: unknown row '%s' (rows: %s)", where,
                             value_text, names);
            }
            row_start(ctx, r, where, t);
            fields_set = 0;
        } else {
            size_t i = 0;
            while (i < FIELD_COUNT && strcmp(fields[i].name, name) != 0)
                ++i;
            MHLA_FAIL_IF(st, i == FIELD_COUNT, ctx, MHLA_ERR_INVALID_ARGUMENT, "%s: unknown field '%s'", where, name);
            char *end = NULL;
            const long value = strtol(value_text, &end, 10);
            MHLA_FAIL_IF(st, !end || *end || end == value_text, ctx, MHLA_ERR_INVALID_ARGUMENT,
                         "%s: %s=%s is not an integer", where, name, value_text);
            MHLA_FAIL_IF(st, value < fields[i].min || value > 1 << 20, ctx, MHLA_ERR_INVALID_ARGUMENT,
                         "%s: %s=%ld is out of range (%d..%d)", where, name, value, fields[i].min, 1 << 20);
            *(int *)((char *)t + fields[i].offset) = (int)value;
            if (strcmp(name, "vec") == 0)
                t->vec_forced = value > 0;
            if (!fields_set++)
                append_origin(t, where);
        }
        p += used;
        if (*p == ',')
            ++p;
    }
cleanup:
    return st;
}

void mhla__tuning_row(const mhla_context *ctx, mhla_tuning *t)
{
    size_t r = 0;
    while (r + 1 < ROW_COUNT && !matches(&rows[r], ctx))
        ++r;
    row_start(ctx, r, NULL, t);
}

mhla_status mhla__tuning_validate(mhla_context *ctx, const char *where, const char *spec)
{
    mhla_tuning scratch = rows[0].t; /* the same parser, on a copy */
    return mhla__tuning_apply(ctx, where, spec, &scratch);
}

void mhla__tuning_print(const mhla_tuning *t, char *buf, size_t size)
{
    size_t len = (size_t)snprintf(buf, size, "%s: ", t->origin);
    for (size_t i = 0; i < FIELD_COUNT && len < size; ++i)
        len += (size_t)snprintf(buf + len, size - len, "%s%s=%d", i ? fields[i].sep : "", fields[i].name,
                                *(const int *)((const char *)t + fields[i].offset));
}
