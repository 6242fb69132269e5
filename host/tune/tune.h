/* host/tune: per-device choices as data (the tuning rows, `mhla tune`'s database, the CPU row
 * derived from the SIMD target) and the tiling that fits them to a configuration and turns them
 * into -D flags, the backward's tiles included. Depends on core/ and config/. */
#ifndef MHLA_TUNE_H
#define MHLA_TUNE_H

#include "config/config.h"

#include <limits.h>

/* Per-device choices (tune/tuning.c): one row of the tuning table after overrides. Vector widths
 * are upper bounds: a plan takes the largest power of two not above them that divides its head
 * dimension, and never more than the device's float width allows (mhla__tuning_lookup). */
/* Every tuning field once: X(name, smallest valid value, separator before it in the printed form).
 * The struct, MHLA_TUNING's parser and mhla_context_tuning()'s printer (tune/tuning_rows.c) expand
 * it, and `mhla tune --export` writes what the printer prints: a new field is one line here. */
#define MHLA_TUNING_FIELDS(X)                                                                       \
    X(vec, 0, "")           /* widest vector: 0 = the device's float width (mhla_device_limits) */  \
    X(sum_rd, 1, " ")       /* summary: key rows per work-item (one vector; any count with sum_lk) */ \
    X(sum_ve, 1, ",")       /* summary: vector width along the value columns */                     \
    X(sum_nv, 1, ",")       /* summary: value vectors per work-item */                              \
    X(sum_chunk, 1, ",")    /* summary: tokens summed before folding into the total (SUM_CHUNK) */  \
    X(sum_kb, 0, ",")       /* summary: 1 = k~ broadcast from memory (CPUs: load ports, not shuffles; \
                               GPUs: 0, the row read through volatile would leave the registers) */\
    X(sum_lk, 0, ",")       /* summary: 1 = a group maps each chunk's k~ once into local memory and \
                               its tiles read them there (CPUs: sum_rd 6, 12 accumulators on AVX2) */ \
    X(out_rt, 1, " ")       /* output: tokens per work-item */                                      \
    X(out_ve, 1, ",")       /* output: vector width along the output columns */                     \
    X(out_nv, 1, ",")       /* output: output vectors per token per work-item */                    \
    X(out_dc, 1, ",")       /* output: key dimensions loaded per step (vector width) */             \
    X(out_nt, 0, ",")       /* output: streaming (non-temporal) stores of the output rows where its \
                               vectors are at least this many floats wide (1 any, 0 never; the     \
                               backward's read-outs: any value but 0) */                            \
    X(out_pre, 0, ",")      /* read-outs: 1 = the tile's q~ rows mapped into a private array before \
                               the multiply-adds (CPUs: frees registers for accumulators), 0 =      \
                               OUT_DC at a time inside the loop (GPUs: no per-thread array) */      \
    X(out_pf, 0, ",")       /* read-out: prefetch q rows this many token groups ahead, 0 none */    \
    X(wg, 1, " ")           /* work-group size aimed at */                                          \
    X(groups_per_cu, 1, " ") /* work-groups per compute unit before long blocks are split */        \
    X(split_min_len, 1, " ") /* shortest block segment worth its own work-group */                  \
    X(pf, 0, " ")           /* summary: 1 = a group's first work-item loads the next chunk's lines */ \
    X(mix_kernel, 0, " ")   /* mixing: 1 = kernels/mixing.cl, 0 = CLBlast SGEMM */                  \
    X(mix_mr, 1, ",")       /* mixing kernel and causal prefix: rows per work-item */               \
    X(mix_ve, 1, ",")       /* mixing kernel and causal prefix: vector width along the columns */   \
    X(mix_nv, 1, ",")       /* mixing kernel and causal prefix: vectors per row per work-item */    \
    X(pre_mr, 1, " ")       /* causal prefix: rows of P per work-item (each S_j read serves them) */ \
    X(pre_nv, 1, ",")       /* causal prefix: vectors per row per work-item */                      \
    X(tq, 1, " ")           /* causal output: tokens per work-group (score tiles) */                \
    X(kt, 1, ",")           /* causal output: keys per pass through local memory */                 \
    X(sc_rt, 1, ",")        /* causal output and bc_dqkv: score rows per work-item step (each key   \
                               vector loaded serves them: CPUs, as many as make independent         \
                               multiply-add chains; 1 on GPUs: every work-item of the group busy) */ \
    X(sc_kv, 1, ",")        /* causal output and bc_dqkv: score vectors of keys per step (each      \
                               broadcast serves them) */                                            \
    X(gemm_rows, 0, ",")    /* causal prefix: earlier blocks of this many chunks go to CLBlast */   \
    X(sm_bq, 1, " ")        /* softmax: query rows per work-group */                                \
    X(sm_bk, 1, ",")        /* softmax: keys per local-memory tile (shrunk to fit local memory) */  \
    X(sm_vw, 1, ",")        /* softmax: vector width */                                             \
    X(sm_rows, 0, ",")      /* softmax: 1 = whole tile rows per work-item, 0 = coalesced copy */    \
    X(sm_tiled, 0, ",")     /* softmax: 1 = tiled products through local memory (softmax_tiled.cl:  \
                               sm_bq queries per group, sm_bk keys per tile; GPUs), 0 = a query row \
                               per work-item (softmax.cl) */                                        \
    X(dg_parts, 1, " ")     /* causal backward: bc_diag's work-items per (chunk, head), query rows  \
                               interleaved (1 on CPUs: one walks the chunk; GPUs want a work-group  \
                               of lanes) */                                                         \
    X(bwd_acc, 1, ",")      /* backward read-outs: accumulator vectors per work-item, half a        \
                               register file; bounds their tokens and the causal form's S/G rows */ \
    X(bwd_heads, 0, ",")    /* non-causal backward read-outs: 1 = a work-group spans every head of  \
                               its tokens (CPUs: whole [B,N,H,D] rows per group), 0 = token groups  \
                               of one head (GPUs: neighbouring work-items, neighbouring tokens) */  \
    X(dmix_tm, 1, ",")      /* backward dMc products <G_i, S_j>: rows of each per work-item, tm^2    \
                               accumulators and 2 tm operand vectors (4 with 32 registers, 3 with   \
                               16: 4 spilled there) */                                              \
    X(dm_t, 0, ",")         /* backward dMc products: rows of G and of S per work-group tile through \
                               local memory (bwd_dmixing_tiled, 4 x 4 per work-item, 16 x-values  \
                               a tile: GPUs), 0 = dmix_tm rows per work-item from global memory    \
                               (CPUs) */                                                            \
    X(bct_fuse, 0, ",")     /* causal backward: 1 = one group per (chunk, head) computes the scores \
                               once for dq, dk, dv and dMc's diagonal (bc_dqkv) where a chunk fits  \
                               its local memory, 0 = three read-outs and bc_diag; with bc_sq, 1 =  \
                               the tiled read-outs in one launch (bc_dqkv_tiled) */                \
    X(tiled, 0, " ")        /* forward: 1 = work-group tiles through local memory for the summary  \
                               and the read-out, the segments added inside the mixing (GPUs:       \
                               summary_tiled.cl, output_tiled.cl), 0 = block_summary.cl, output.cl */ \
    X(tl_tk, 1, ",")        /* tiled summary: tokens per local tile */                              \
    X(tl_tn, 4, ",")        /* tiled: key rows and value columns per group (4 x 4 per work-item) */ \
    X(tl_tq, 4, ",")        /* tiled read-out: tokens per group */                                  \
    X(tl_rr, 4, ",")        /* tiled summary: key rows per work-item's register tile, 4 or 8 (8:   \
                               two float4 of k~ and one of v feed 32 multiply-adds, not 16) */     \
    X(tl_qr, 4, ",")        /* tiled read-out: tokens per work-item's register tile, 4 or 8 */     \
    X(tl_dc, 1, ",")        /* tiled read-out: key dimensions per local tile */                    \
    X(tl_fuse, 0, ",")      /* tiled: the read-out mixes the summaries itself where M x segments is \
                               at most this (0 never): one launch fewer at small N */             \
    X(tl_one, 0, ",")       /* tiled: the whole forward in one launch (forward_one.cl: each query  \
                               block's groups mix their summary from every key themselves) where  \
                               M x N_kv is at most this (0 never): no gaps between launches at   \
                               small N, for M times the summary's multiply-adds */               \
    X(bt_tq, 0, ",")        /* tiled plans' backward: tokens per group of its tiled read-outs and  \
                               gradient summaries (backward_tiled.cl), 0 = the untiled backward     \
                               (backward_readout.cl) */                                             \
    X(bt_dc, 1, ",")        /* tiled backward read-outs: dimensions per local tile */                \
    X(bt_fuse, 0, ",")      /* tiled backward: its read-outs mix their block's S~ and dS themselves  \
                               where the blocks (M and M_kv) are at most this and whole (0 never):  \
                               two launches fewer, for M reads of each piece of the matrix */      \
    X(fuse_mb, 0, ",")      /* tl_fuse, bt_fuse: only where the pieces a mixing read-out reads again \
                               add at most this many MiB over the launch (0: none): the launch saved \
                               is a fixed cost, the re-reads grow with B, H and N */                \
    X(ct_sq, 0, " ")        /* causal read-out: tokens per group of causal_tiled.cl (both products  \
                               tiled through local memory, 4 x 4 per work-item: GPUs), 0 = the      \
                               causal_output.cl form (CPUs) */                                      \
    X(ct_bk, 4, ",")        /* causal_tiled.cl: keys, and rows of P_i, per local tile */             \
    X(cp_ti, 0, " ")        /* causal prefix: chunks per group of causal_prefix_tiled.cl (one tiled  \
                               product over every earlier chunk, 4 x 4 per work-item: GPUs; no     \
                               CLBlast blocks), 0 = causal_prefix.cl and gemm_rows */               \
    X(cp_tw, 4, ",")        /* causal_prefix_tiled.cl: slot columns per group */                    \
    X(cp_tj, 1, ",")        /* causal_prefix_tiled.cl: earlier chunks per local tile */              \
    X(cs_tk, 0, " ")        /* causal chunk summaries: tokens per local tile of                     \
                               causal_summary_tiled.cl (groups of tl_tn key rows x tl_tn columns,    \
                               4 x 4 per work-item: GPUs), 0 = causal_summary.cl */                 \
    X(bc_sq, 0, " ")        /* causal backward: tokens per group of its tiled read-outs           \
                               (backward_causal_tiled.cl: x rows, slot rows and pair scores 4 x 4  \
                               per work-item through local memory: GPUs), 0 = the CPU form        \
                               (backward_causal_readout.cl) */                                     \
    X(bc_bk, 4, ",")        /* backward_causal_tiled.cl: pair tokens, and slot rows, per local tile */ \
    X(dec_dp, 1, " ")       /* decoder: parts its step splits the key dimensions into, and its chunk \
                               start the earlier chunks into, added in local memory in a fixed     \
                               order (GPUs: many short chains, not a group walking Dk or every     \
                               chunk), 1 = a work-item walks them all (CPUs) */                    \
    X(dec_next, 0, ",")     /* decoder: 1 = each step also sums its share of the next chunk's     \
                               prefix mixture, so a chunk start is one launch like any step; 0 =   \
                               the chunk start builds it in a launch of its own (CPUs: a step that \
                               reads and writes that sum too takes 2.5x as long) */

#define MHLA_TUNING_MEMBER(name, min, sep) int name;
typedef struct mhla_tuning {
    MHLA_TUNING_FIELDS(MHLA_TUNING_MEMBER)
    int vec_forced;   /* vec was set by an override: honoured up to 16 even past the device's width */
    char origin[160]; /* where the values came from: "built-in row 'cpu', MHLA_TUNING" */
} mhla_tuning;
#undef MHLA_TUNING_MEMBER

/* The SIMD target of a device named `device_name` reporting `reported_width` floats per register
 * (tune/cpu_row.c). */
/* The register tiles and vector widths of the CPU row for the SIMD target s (tune/cpu_row.c). */
void mhla__cpu_row_fill(mhla_tuning *t, const mhla_simd *s);
/* A GPU row's choices that follow from the device's limits (tune/gpu_row.c): on a GPU whose local
 * memory is global memory, the untiled kernels. Returns 1 where it changed *t. */
int mhla__gpu_row_fill(mhla_tuning *t, const mhla_device_limits *limits);
/* The row for ctx's device (vendor, name and type; on CPUs derived from its SIMD target), then the
 * tuned entry for cfg's
 * head dimensions (`mhla tune`'s database; cfg may be NULL: none), then MHLA_TUNING, then the
 * context's own overrides (mhla_context_set_tuning), with the vector widths capped for the
 * device. Fails only on a malformed override, naming it. */
mhla_status mhla__tuning_lookup(mhla_context *ctx, const mhla_config *cfg, mhla_tuning *out);
/* The built-in row for ctx's device (first match by vendor, name and type; tune/tuning_rows.c). */
void mhla__tuning_row(const mhla_context *ctx, mhla_tuning *t);
/* Whether spec parses (applied to a scratch copy of a row); `where` names it in messages. */
mhla_status mhla__tuning_validate(mhla_context *ctx, const char *where, const char *spec);
/* "ORIGIN: vec=16 sum_rd=8,sum_ve=16,...": every field, as mhla_context_tuning() prints it. */
void mhla__tuning_print(const mhla_tuning *t, char *buf, size_t size);
/* The tuning database's spec for (dk, dv) on ctx's device into spec; 1 when there is one. */
int mhla__tuned_entry(mhla_context *ctx, int64_t dk, int64_t dv, char *spec, size_t size);
/* Applies "name=value,..." (and "row=NAME", which restarts from that built-in row) to *t; `where`
 * names the source in messages ("MHLA_TUNING"). ctx may be NULL (validation only). */
mhla_status mhla__tuning_apply(mhla_context *ctx, const char *where, const char *spec, mhla_tuning *t);
/* Largest power of two <= cap dividing n. */
int mhla__pow2_divisor(int64_t n, int cap);

/* The tiles a plan or decoder builds its kernels with (tune/tiling.c): the tuning fitted to the
 * configuration's sizes and the device's limits. Every field is a -D flag of some kernel file,
 * except wg, splits, split_len and bwd_heads (launch shape). */
typedef struct mhla_tiles {
    int sum_rd, sum_ve, sum_nv;         /* SUM_RD x (SUM_VE * SUM_NV) per work-item */
    int sum_chunk;                      /* SUM_CHUNK: tokens per partial sum */
    int sum_kb;                         /* SUM_KB: k~ broadcast from memory (kernels/tiles.h) */
    int sum_lk;                         /* SUM_LK: a chunk's k~ mapped once into local memory; then
                                           sum_rd need not divide Dk (kernels/tiles.h) */
    int out_rt, out_ve, out_nv, out_dc; /* OUT_RT tokens x (OUT_VE * OUT_NV) columns */
    int out_nt;                         /* OUT_NT: streaming stores of the output rows */
    int bwd_nt;                         /* BWD_NT: streaming stores of the backward's read-outs */
    int out_pre;                        /* OUT_PRE: q~ mapped up front (kernels/tiles.h) */
    int out_pf;                         /* OUT_PF: q rows prefetched that many token groups ahead */
    int mix_mr, mix_ve, mix_nv;         /* mixing.cl: MIX_MR rows x (MIX_VE * MIX_NV) columns; causal
                                           plans: causal_prefix.cl's rows and vectors (pre_mr, pre_nv) */
    int pre_ve;                         /* causal_prefix.cl: MIX_MR rows x (PRE_VE * MIX_NV) columns */
    int tq, kt;                         /* causal_output.cl: CAUSAL_TQ tokens, CAUSAL_KT keys per pass */
    int sc_rt, sc_kv;                   /* causal_output.cl: CAUSAL_SRT rows x CAUSAL_SKV key vectors of
                                           scores per step */
    int gemm_rows;                      /* causal prefix blocks through CLBlast (a multiple of mix_mr) */
    int slot_pad;                       /* SLOT_PAD: causal slots padded to an odd number of 64-byte lines,
                                           where the prefix is all our kernel's (gemm_rows 0; kernels/causal.h) */
    int sm_vw, sm_bk, sm_bq, sm_rows;   /* softmax.cl: VW, BK, COPY_ROWS; query rows per group
                                           (softmax_tiled.cl: SM_SQ = sm_bq, SM_BK = sm_bk) */
    int sm_tiled;                       /* softmax_tiled.cl (its group: sm_bq/4 x sm_bk/4 work-items) */
    int wg;                             /* work-group size aimed at */
    int pf;                             /* PREFETCH: software prefetch in the summary (2: prefetch
                                           instructions in its sum_lk form, PoCL's CPU device) */
    int splits, split_len;              /* non-causal: segments per block, tokens per segment */
    int bwd_vw, bwd_vk, bwd_vv, bwd_rt; /* non-causal backward (kernels/backward_readout.cl): vector
                                           width, its divisors of Dk and Dv, tokens per work-item */
    int bwd_heads;                      /* its read-outs' launch: every head per group first */
    int bwd_tm;                         /* BWD_TM: dMc's products, rows of G and of S per work-item */
    int dm_t;                           /* DM_T: dMc's products in DM_T x DM_T tiles of a work-group
                                           (bwd_dmixing_tiled); 0: bwd_dmixing_part's BWD_TM rows */
    int bct_rt, bct_ve, bct_nv;         /* causal backward read-outs (backward_causal_readout.cl):
                                           BCT_RT tokens x (BCT_VE * BCT_NV) columns per work-item, */
    int bct_tq, bct_kt;                 /* BCT_TQ tokens per group, BCT_KT per pass */
    int bct_sr;                         /* BCT_SR rows of S or G per work-item (backward_causal.cl) */
    int bct_dg;                         /* bc_diag's parts per (chunk, head): dg_parts fitted */
    int bct_fc;                         /* BCT_FC: bc_dqkv's chunk (the chunk rounded up to BCT_VE and
                                           BCT_RT), 0 where bct_fuse is off or the group does not fit */
    int bcf_srt, bcf_skv;               /* BCF_SRT rows x BCF_SKV vectors: bc_dqkv's score steps (sc_rt,
                                           sc_kv fitted to BCT_FC) */
    int tiled;                          /* the tiled forward (summary_tiled.cl, output_tiled.cl) */
    int tl_tk, tl_td, tl_tv;            /* TL_TK tokens per tile, TL_TD key rows x TL_TV columns per group */
    int tl_rr;                          /* TL_RR key rows per work-item (4 or 8; divides TL_TD) */
    int tl_qr;                          /* TL_QR tokens per work-item of the read-out (4 or 8; divides TL_TQ) */
    int tl_tq, tl_dc;                   /* TL_TQ tokens per read-out group, TL_DC key dimensions per tile */
    int tl_fuse;                        /* the read-out mixes where M x segments is at most this */
    int tl_one;                         /* the forward in one launch where M x N_kv is at most this */
    int on_tv, on_ks, on_tk, on_dc;     /* forward_one.cl: ON_TV columns per group, ON_KS token slices,
                                           ON_TK tokens per tile, ON_DC dimensions per read-out tile;
                                           on_tv 0: no group fits */
    int bt_fuse;                        /* the tiled backward's read-outs mix where M is at most this */
    int fuse_mb;                        /* ... and where that re-reads at most this many MiB
                                           (mhla__fuse_fits) */
    int bt_tq, bt_tv, bt_dc;            /* the tiled backward read-outs (backward_tiled.cl): BT_TQ tokens x
                                           BT_TV columns per group, BT_DC dimensions per local tile;
                                           bt_tq 0: the untiled backward */
    int ct_sq, ct_bk;                   /* causal_tiled.cl: CT_SQ tokens per group, CT_BK keys per tile;
                                           ct_sq 0: causal_output.cl */
    int cp_ti, cp_tw, cp_tj;            /* causal_prefix_tiled.cl: CP_TI chunks x CP_TW columns per group,
                                           CP_TJ earlier chunks per tile; cp_ti 0: causal_prefix.cl */
    int cs_tk, cs_tn;                   /* causal_summary_tiled.cl: CS_TK tokens per tile, CS_TN key rows x
                                           CS_TN columns per group; cs_tk 0: causal_summary.cl */
    int bc_sq, bc_bk;                   /* backward_causal_tiled.cl: BC_SQ tokens per group, BC_BK per
                                           tile; bc_sq 0: backward_causal_readout.cl's read-outs */
    int bc_one;                         /* BC_ONE: those read-outs in one launch (bc_dqkv_tiled, a group
                                           one kind), where bct_fuse asks for the fused read-out */
    int dec_dp;                         /* decoder.cl: STEP_DP parts of Dk per step (and of the earlier
                                           chunks per chunk start); 1: a work-item walks them all */
    int dec_next;                       /* decoder.cl: STEP_NEXT, the steps sum the next chunk's prefix */
} mhla_tiles;

/* Every kernel file of the library once: KF(enumerator, file name in kernels/, what it reads: the
 * F_* bits of tune/tiling.c, expanded there only). The enum below and tiling.c's table come from
 * it, and kernels/meson.build embeds the files it names (it reads the lines that start with "KF("
 * out of this header), so a new kernel file is one line here. */
#define MHLA_KERNEL_FILES(KF)                                                                      \
    KF(BLOCK_SUMMARY, block_summary, F_DK | F_DV | F_LAYOUT | F_FEATURE | F_DTYPE | F_SUM | F_PF)  \
    KF(OUTPUT, output, F_SHAPE | F_OUT)                                                            \
    KF(MIXING, mixing, F_MIX)                                                                      \
    KF(SUMMARY_TILED, summary_tiled, F_DK | F_DV | F_LAYOUT | F_FEATURE | F_DTYPE | F_TL)          \
    KF(OUTPUT_TILED, output_tiled, F_SHAPE | F_TLO)                                                \
    KF(FORWARD_ONE, forward_one, F_SHAPE | F_ONE)                                                  \
    KF(CAUSAL_SUMMARY, causal_summary, F_SHAPE | F_SUM | F_SLOT)                                   \
    KF(CAUSAL_PREFIX, causal_prefix, F_PRE)                                                        \
    KF(CAUSAL_OUTPUT, causal_output, F_SHAPE | F_OUT | F_CAUSAL | F_SLOT)                          \
    KF(CAUSAL_TILED, causal_tiled, F_SHAPE | F_SLOT | F_CT)                                        \
    KF(CAUSAL_PREFIX_TILED, causal_prefix_tiled, F_CP)                                             \
    KF(CAUSAL_SUMMARY_TILED, causal_summary_tiled, F_SHAPE | F_SLOT | F_CS)                        \
    KF(DECODER, decoder, F_SHAPE | F_SLOT | F_GROUP | F_DEC)                                       \
    KF(SOFTMAX, softmax, F_DK | F_DV | F_LAYOUT | F_DTYPE | F_SOFTMAX)                             \
    KF(SOFTMAX_TILED, softmax_tiled, F_DK | F_DV | F_LAYOUT | F_DTYPE | F_SMT)                     \
    KF(BACKWARD_SUMMARY, backward_summary, F_SHAPE | F_BWD)                                        \
    KF(BACKWARD_READOUT, backward_readout, F_SHAPE | F_BWD | F_BNT)                                \
    KF(BACKWARD_MIXING, backward_mixing, F_BWD | F_DMIX)                                           \
    KF(BACKWARD_TILED, backward_tiled, F_SHAPE | F_BT)                                             \
    KF(BACKWARD_CAUSAL, backward_causal, F_SHAPE | F_BWD | F_BCT | F_SLOT)                         \
    KF(BACKWARD_CAUSAL_READOUT, backward_causal_readout, F_SHAPE | F_BWD | F_BCT | F_BCF)          \
    KF(BACKWARD_CAUSAL_TILED, backward_causal_tiled, F_SHAPE | F_BCC | F_CS)

/* The kernel files, for their -D flags (each reads only some of the configuration, so a program
 * is not rebuilt for a value it never sees). */
#define MHLA_KF_ENUMERATOR(id, file, reads) MHLA_KF_##id,
typedef enum mhla_kernel_file { MHLA_KERNEL_FILES(MHLA_KF_ENUMERATOR) } mhla_kernel_file;
#undef MHLA_KF_ENUMERATOR

/* The one place specialization flags are assembled (they key the program cache). */
void mhla__build_options(mhla_kernel_file f, const mhla_config *c, const mhla_tiles *t, mhla_build_opts *opts);
/* mhla__program_get for a kernel file with its flags. */
mhla_status mhla__program_for(mhla_context *ctx, mhla_kernel_file f, const mhla_config *c, const mhla_tiles *t,
                              cl_program *out);

/* Device limits a fit must respect: work-items per group and local-memory bytes. They start at
 * the device's (local memory less a reserve for what implementations keep for themselves) and
 * shrink when a built kernel reports less (CL_KERNEL_WORK_GROUP_SIZE, CL_KERNEL_LOCAL_MEM_SIZE). */
typedef struct mhla_fit {
    size_t wg;
    uint64_t local_bytes;
} mhla_fit;
void mhla__fit_init(const mhla_context *ctx, mhla_fit *fit);
/* After building a kernel that needs `want_wg` work-items per group and `want_local` bytes of
 * local memory (predicted from its tiles): tightens *fit to what the kernel reports and returns 1
 * when it does not fit (rebuild with smaller tiles), 0 when it does, -1 on a failed query. */
int mhla__fit_check(mhla_context *ctx, cl_kernel kernel, size_t want_wg, uint64_t want_local, mhla_fit *fit);

/* Kernels whose tiles must fit what the device reports once they are built (it may allow fewer
 * work-items or less local memory than it claims: rusticl on llvmpipe). attempt() chooses tiles
 * within *fit, builds, checks with mhla__fit_check (tightening *fit) and sets *refit when they do
 * not fit; release() then drops that try's kernels. Each try at least halves something, so
 * `tries` is small; past it, why() says what did not fit (MHLA_ERR_UNSUPPORTED). */
typedef struct mhla_fit_loop {
    mhla_status (*attempt)(void *arg, mhla_fit *fit, int *refit);
    void (*release)(void *arg);
    void (*why)(void *arg, const mhla_fit *fit, char *buf, size_t size);
    void *arg;
    int tries;
} mhla_fit_loop;
/* Runs loop's tries from the device's limits (mhla__fit_init) until one fits. */
mhla_status mhla__fit_build(mhla_context *ctx, const mhla_fit_loop *loop);

/* Non-causal plans: register tiles, mixing tiles and block splits. */
void mhla__tiles_forward(const mhla_context *ctx, const mhla_config *cfg, const mhla_shape *shape,
                         const mhla_tuning *t, mhla_tiles *out);
/* Causal plans and decoders: register tiles, prefix tiles and score tiles within *fit
 * (MHLA_ERR_UNSUPPORTED, naming the sizes, when even the smallest do not fit). */
mhla_status mhla__tiles_causal(mhla_context *ctx, const mhla_config *cfg, const mhla_tuning *t, const mhla_fit *fit,
                               mhla_tiles *out);
/* Work-items of one summary tile group (block_summary.cl, causal_summary.cl): row tiles (the last
 * may overlap the one before: sum_lk) times column tiles. */
size_t mhla__summary_work_items(const mhla_tiles *t, int64_t dk, int64_t dv);
/* Work-items of one causal output group: the kernel is built for exactly this many. */
int mhla__causal_output_wg(const mhla_tiles *t, int64_t dv);
/* The tiled forward's groups and local tiles (summary_tiled.cl, output_tiled.cl; mixing_splits' rows)
 * within *fit: out's other fields are kept. */
void mhla__tiles_tiled(const mhla_config *cfg, const mhla_shape *shape, const mhla_tuning *t, const mhla_fit *fit,
                       mhla_tiles *out);
/* The tiled backward's read-outs (backward_tiled.cl) within *fit, on a tiled plan whose tuning asks
 * for them: bt_tq 0 where they do not fit (a Dk-wide row needs more work-items than a group has). */
void mhla__tiles_backward_tiled(const mhla_config *cfg, const mhla_shape *shape, const mhla_tuning *t,
                                const mhla_fit *fit, mhla_tiles *out);
/* dMc's products in work-group tiles (bwd_dmixing_tiled): the tile side for `rows` rows of G (and
 * of S) within *fit, from the tuning's `want` (dm_t) down to 16 where the rows are fewer, halved
 * until its (side/4)^2 work-items and its arrays fit; 0 where none does (bwd_dmixing_part). Its
 * local tiles take MHLA_DM_K x-values of every row (kernels/backward_mixing.cl's DM_K). */
#define MHLA_DM_K 16
int mhla__dmix_tile(const mhla_fit *fit, int want, size_t rows);
uint64_t mhla__dmix_tiled_local(int dm_t);
/* Work-items of a tiled backward read-out group, and the local memory its arrays take. */
size_t mhla__bwd_tiled_wg(const mhla_tiles *t);
uint64_t mhla__bwd_tiled_local(const mhla_tiles *t);
/* Whether read-outs that mix their block's matrix themselves (tl_fuse, bt_fuse) re-read at most
 * fuse_mb MiB: each of their groups (heads x blocks x token tiles of tq) reads all `sources` pieces
 * (Dk x (Dv + 1) floats each) where it would read the one mixed piece. */
int mhla__fuse_fits(const mhla_config *cfg, int64_t heads, int64_t blocks, int64_t block_tokens, int tq,
                    int64_t sources, int fuse_mb);
/* No bound on those re-reads: what a read-out would do were fuse_mb lifted (plan descriptions). */
#define MHLA_FUSE_MB_ANY INT_MAX
/* Those re-reads in bytes (0 for no groups or sources): what plans describe (mhla_plan_tuning), so
 * that a reader, and `mhla tune`, can tell what fuse_mb admits. */
double mhla__fuse_rereads(const mhla_config *cfg, int64_t heads, int64_t blocks, int64_t block_tokens, int tq,
                          int64_t sources);
/* Whether a tiled backward read-out (groups of bt_tq tokens) over heads x blocks blocks of
 * block_tokens mixes its `sources` matrices itself: whole blocks only (dMc reads S and G whole, which
 * the mixing writes from split blocks' segments), not the official normalizer (its terms need the
 * mixing's R = Mc^T r anyway), sources within bt_fuse and re-reads within fuse_mb. */
int mhla__bwd_readout_mixes(const mhla_config *cfg, int bt_fuse, int bt_tq, int fuse_mb, int64_t heads,
                            int64_t blocks, int64_t block_tokens, int64_t sources, int whole);
/* The one-launch forward's tiles (forward_one.cl) within *fit, on a tiled plan whose tuning asks
 * for it (tl_one): on_tv 0 where no group fits. Its work-items a group and local memory. */
void mhla__tiles_one(const mhla_config *cfg, const mhla_tuning *t, const mhla_fit *fit, mhla_tiles *out);
size_t mhla__forward_one_wg(const mhla_config *cfg, const mhla_tiles *t);
uint64_t mhla__forward_one_local(const mhla_config *cfg, const mhla_tiles *t);
/* Local memory output_tiled.cl's arrays take. */
uint64_t mhla__output_tiled_local(const mhla_tiles *t);
/* Local memory the causal output kernel's arrays take. */
uint64_t mhla__causal_output_local(const mhla_tiles *t, int64_t dk);
/* causal_tiled.cl's group (ct_sq/4 token quads x ct_bk/4 key quads) and the local memory it takes. */
size_t mhla__causal_tiled_wg(const mhla_tiles *t);
uint64_t mhla__causal_tiled_local(const mhla_config *cfg, const mhla_tiles *t);
/* backward_causal_tiled.cl's group (bc_sq/4 row quads x bc_bk/4 token quads) and the local memory
 * its widest kind takes. */
size_t mhla__bc_tiled_wg(const mhla_tiles *t);
uint64_t mhla__bc_tiled_local(const mhla_config *cfg, const mhla_tiles *t);
/* Local memory decoder.cl's step takes, for its form (dec_dp). */
uint64_t mhla__decoder_step_local(const mhla_config *cfg, const mhla_tiles *t);
/* causal_prefix_tiled.cl's group (cp_ti/4 row quads x cp_tw/4 column quads) and its local memory. */
size_t mhla__prefix_tiled_wg(const mhla_tiles *t);
uint64_t mhla__prefix_tiled_local(const mhla_tiles *t);
/* Chunks per tile of the prefix's table (host/causal/chunk_tables.c): cp_ti, or causal_prefix.cl's
 * mix_mr. */
int mhla__prefix_tile_rows(const mhla_tiles *t);
/* causal_summary_tiled.cl's group ((cs_tn/4)^2 work-items) and its local memory. */
size_t mhla__causal_summary_tiled_wg(const mhla_tiles *t);
uint64_t mhla__causal_summary_tiled_local(const mhla_tiles *t);
/* The softmax baseline: vector width, key tile (within fit->local_bytes) and query rows. */
mhla_status mhla__tiles_softmax(mhla_context *ctx, const mhla_config *cfg, const mhla_tuning *t, const mhla_fit *fit,
                                mhla_tiles *out);
/* Work-items of softmax_tiled.cl's group: sm_bq/4 query quads x sm_bk/4 key quads. */
size_t mhla__softmax_tiled_wg(const mhla_tiles *t);
/* Local memory the softmax kernel's arrays take (either form, as tiles.sm_tiled says). */
uint64_t mhla__softmax_local(const mhla_config *cfg, const mhla_tiles *t);
/* The backward's read-outs (kernels/backward_readout.cl, and the causal form's other kernels):
 * bwd_* over the plan's tiles in *out, vector widths and tokens per work-item within t->bwd_acc. */
void mhla__tiles_backward(const mhla_config *cfg, const mhla_tuning *t, mhla_tiles *out);
/* The causal backward's tiled read-outs (kernels/backward_causal_readout.cl): bct_* (all but
 * bct_dg) from the causal tiles and bwd_* already in *out, cut down until a group fits *fit
 * (MHLA_ERR_UNSUPPORTED, naming the sizes, when even the smallest do not). shape: cfg's derived
 * shape (its nb: the tokens of a chunk, at most the sequence's). */
mhla_status mhla__tiles_backward_causal(mhla_context *ctx, const mhla_config *cfg, const mhla_shape *shape,
                                        const mhla_tuning *t, const mhla_fit *fit, mhla_tiles *out);
/* Work-items of one causal backward read-out group writing dw-wide rows (bc_dq, bc_dk: Dk; bc_dv: Dv). */
size_t mhla__bc_readout_wg(const mhla_tiles *t, int64_t dw);
/* Local memory of a causal backward read-out reading dx-wide rows (xs, ys, sc and cb). */
uint64_t mhla__bc_readout_local(const mhla_tiles *t, int64_t dx);
/* Work-items and local bytes of bc_dqkv's group (t->bct_fc tokens) for head dimensions dk, dv. */
size_t mhla__bc_fused_wg(const mhla_tiles *t, int64_t dk, int64_t dv);
uint64_t mhla__bc_fused_local(const mhla_tiles *t, int64_t dk, int64_t dv);

#endif /* MHLA_TUNE_H */
