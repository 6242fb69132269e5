/* Register tiles shared by the non-causal and the causal kernels: their sizes (set by the host
 * from the tuning table, with defaults here), a block's (or chunk's) summary over a run of
 * consecutive tokens, and the read-out q~ S of a few tokens. */
#ifndef MHLA_KERNELS_TILES_H
#define MHLA_KERNELS_TILES_H

#include "common.h"

/* Summaries: SUM_RD x (SUM_VE * SUM_NV) per work-item. */
#ifndef SUM_RD
#define SUM_RD 8 /* key rows d per work-item, loaded as one vector; divides DK */
#endif
#ifndef SUM_VE
#define SUM_VE 16 /* vector width along the value columns e; divides DV */
#endif
#ifndef SUM_NV
#define SUM_NV 2 /* value vectors per work-item; SUM_VE * SUM_NV divides DV */
#endif
#ifndef SUM_CHUNK
/* Tokens summed before folding into the total (the tuning's sum_chunk): a sum of n tokens in chunks
 * of C has float error ~ n/C + C. On CPUs each fold is also a pass of the group's work-items through
 * the barrier below it (block_summary.cl), so their rows take 128 (host/tuning.c). */
#define SUM_CHUNK 32
#endif
#define SUM_COLS (SUM_VE * SUM_NV)
#define SUM_NE (DV / SUM_COLS) /* column tiles */
#define SUM_ND (DK / SUM_RD)   /* row tiles */

/* Read-outs: OUT_RT tokens x (OUT_VE * OUT_NV) output columns per work-item. */
#ifndef OUT_RT
#define OUT_RT 4 /* tokens per work-item */
#endif
#ifndef OUT_VE
#define OUT_VE 16 /* vector width along the output columns; divides DV */
#endif
#ifndef OUT_NV
#define OUT_NV 2 /* output vectors per token per work-item; OUT_VE * OUT_NV divides DV */
#endif
#ifndef OUT_DC
#define OUT_DC 8 /* key dimensions per step: q~ (and k~) are loaded and mapped OUT_DC at a time; divides DK */
#endif
#define OUT_COLS (OUT_VE * OUT_NV)
#define OUT_NE (DV / OUT_COLS) /* column tiles */

/* Whole register tiles of the summary kernels (SUM_RD x SUM_NV vectors): set to zero, and fold a
 * chunk's partial sums into the total. Macros, as READOUT_TILE below: the tiles stay in registers. */
#define SUM_TILE_ZERO(t)                                                                            \
    do {                                                                                            \
        _Pragma("unroll") for (int r_ = 0; r_ < SUM_RD; ++r_)                                       \
            _Pragma("unroll") for (int j_ = 0; j_ < SUM_NV; ++j_)                                   \
                (t)[r_][j_] = (VEC(SUM_VE))(0.0f);                                                  \
    } while (0)
#define SUM_TILE_ADD(acc, part)                                                                     \
    do {                                                                                            \
        _Pragma("unroll") for (int r_ = 0; r_ < SUM_RD; ++r_)                                       \
            _Pragma("unroll") for (int j_ = 0; j_ < SUM_NV; ++j_)                                   \
                (acc)[r_][j_] += (part)[r_][j_];                                                    \
    } while (0)

/* part += k~ v^T and zpart += k~ over `len` consecutive tokens whose k and v rows start at kp and
 * vp (the work-item's SUM_RD key rows and SUM_NV vectors of SUM_VE value columns). Defined only in
 * the summary kernels' files (TILES_SUMMARY): elsewhere its default 16-wide tiles would be compiled
 * for nothing, and on CPUs without AVX-512 a float16 call changes the ABI (a compiler warning). */
#ifdef TILES_SUMMARY
void summary_tile_run(global const STORE_T *kp, global const STORE_T *vp, const long kstride,
                      const long vstride, const int len, const float feature_eps,
                      VEC(SUM_VE) part[SUM_RD][SUM_NV], VEC(SUM_RD) *zpart)
{
    for (int i = 0; i < len; ++i, kp += kstride, vp += vstride) {
        const VEC(SUM_RD) x = LOADN(SUM_RD, 0, kp);
        const VEC(SUM_RD) kv = FEATURE_V(SUM_RD, x, feature_eps);
        float kd[SUM_RD];
        VSTOREN(SUM_RD, kv, 0, kd);
        *zpart += kv;
        VEC(SUM_VE) vv[SUM_NV];
        #pragma unroll
        for (int j = 0; j < SUM_NV; ++j)
            vv[j] = LOADN(SUM_VE, 0, vp + j * SUM_VE);
        #pragma unroll
        for (int r = 0; r < SUM_RD; ++r)
            #pragma unroll
            for (int j = 0; j < SUM_NV; ++j)
                part[r][j] += kd[r] * vv[j];
    }
}
#endif

/* acc[r] += q~_r S and dsum[r] += q~_r * z (OUT_DC-wide partial sums of q~_r . z) for the OUT_RT
 * tokens whose q rows are qrow[r], with q~ = scale * phi(q). S has rows of DV floats, s pointing at
 * the work-item's OUT_NV vectors of OUT_VE columns in row 0. A macro, not a function: PoCL keeps
 * the tile in registers only when the loop is written inline (measured: a function took 1.5x). */
#define READOUT_TILE(qrow, s, z, scale, feature_eps, acc, dsum)                                     \
    for (int d0_ = 0; d0_ < DK; d0_ += OUT_DC) {                                                    \
        float qt_[OUT_RT][OUT_DC];                                                                  \
        const VEC(OUT_DC) zv_ = VLOADN(OUT_DC, 0, (z) + d0_);                                       \
        _Pragma("unroll") for (int r_ = 0; r_ < OUT_RT; ++r_) {                                     \
            const VEC(OUT_DC) x_ = LOADN(OUT_DC, 0, (qrow)[r_] + d0_);                              \
            const VEC(OUT_DC) fx_ = (scale) * FEATURE_V(OUT_DC, x_, feature_eps);                    \
            (dsum)[r_] += fx_ * zv_;                                                                \
            VSTOREN(OUT_DC, fx_, 0, qt_[r_]);                                                       \
        }                                                                                           \
        _Pragma("unroll") for (int dd_ = 0; dd_ < OUT_DC; ++dd_) {                                  \
            VEC(OUT_VE) sv_[OUT_NV];                                                                \
            _Pragma("unroll") for (int j_ = 0; j_ < OUT_NV; ++j_)                                   \
                sv_[j_] = VLOADN(OUT_VE, 0, (s) + (long)(d0_ + dd_) * DV + j_ * OUT_VE);            \
            _Pragma("unroll") for (int r_ = 0; r_ < OUT_RT; ++r_)                                   \
                _Pragma("unroll") for (int j_ = 0; j_ < OUT_NV; ++j_)                               \
                    (acc)[r_][j_] += qt_[r_][dd_] * sv_[j_];                                        \
        }                                                                                           \
    }

#endif /* MHLA_KERNELS_TILES_H */
