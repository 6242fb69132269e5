/* Register tiles shared by the non-causal and the causal kernels: their sizes (set by the host
 * from the tuning table, with defaults here), a block's (or chunk's) summary over a run of
 * consecutive tokens, and the read-out q~ S of a few tokens. */
#ifndef MHLA_KERNELS_TILES_H
#define MHLA_KERNELS_TILES_H

#include "common.h"

/* Summaries: SUM_RD x (SUM_VE * SUM_NV) per work-item. */
#ifndef SUM_RD
#define SUM_RD 8 /* key rows d per work-item: one vector dividing DK, or with SUM_LK any count up to DK */
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
 * the barrier below it (block_summary.cl), so their rows take 128 or 256 (host/tune/tuning_rows.c). */
#define SUM_CHUNK 32
#endif
#ifndef SUM_KB
/* 1: each token's SUM_RD k~ values are read back through a volatile pointer to its row, so that every
 * broadcast is a load (vbroadcastss from memory: the load ports), not a shuffle built in registers.
 * On an Intel core under AVX2 the summary loop's shuffles (5 a token against 8 FMAs) queued on the
 * one port that runs them (docs/tuning-notes.md "Block summary"). CPU rows only: on a GPU the row
 * would leave the registers. The same values in the same order: the same bits either way. Without
 * effect under SUM_LK (the k~ values are then read from local memory). */
#define SUM_KB 0
#endif
#ifndef SUM_LK
/* 1 (CPU rows): a group maps each chunk's k rows once, into local memory (summary_kmap), and its
 * work-items broadcast their k~ values from there (summary_tile_run_lk): each work-item's loop holds
 * nothing but its loads and multiply-adds, and SUM_RD is a row count, not a vector width, so the
 * tile can take 12 accumulators of 16 registers (6 x 2 where 4 x 2 fitted before: docs/tuning-notes.md
 * "Block summary"). 0: every work-item maps its own SUM_RD
 * dimensions of each token (GPU rows: no local memory traffic, no second barrier). */
#define SUM_LK 0
#endif
#define SUM_COLS (SUM_VE * SUM_NV)
#define SUM_NE (DV / SUM_COLS) /* column tiles */
/* Row tiles. With SUM_LK, SUM_RD need not divide DK: the last tile starts at DK - SUM_RD, overlapping
 * the one before, and stores only its rows past it (summary_tile_d0); otherwise it divides DK. */
#define SUM_ND ((DK + SUM_RD - 1) / SUM_RD)

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

/* part += k~ v^T for one token: its SUM_RD k~ values read one at a time from the array kd, its value
 * vectors loaded from vp (both summary forms below). */
#define SUM_TILE_FMA(part, kd, vp)                                                                  \
    do {                                                                                            \
        VEC(SUM_VE) vv_[SUM_NV];                                                                    \
        _Pragma("unroll") for (int j_ = 0; j_ < SUM_NV; ++j_)                                       \
            vv_[j_] = LOADN(SUM_VE, 0, (vp) + j_ * SUM_VE);                                         \
        _Pragma("unroll") for (int r_ = 0; r_ < SUM_RD; ++r_) {                                     \
            const float kr_ = (kd)[r_];                                                             \
            _Pragma("unroll") for (int j_ = 0; j_ < SUM_NV; ++j_)                                   \
                (part)[r_][j_] += kr_ * vv_[j_];                                                    \
        }                                                                                           \
    } while (0)

/* The summary functions below are defined only in the summary kernels' files (TILES_SUMMARY):
 * elsewhere their default 16-wide tiles would be compiled for nothing, and on CPUs without AVX-512 a
 * float16 call changes the ABI (a compiler warning). */
#ifdef TILES_SUMMARY
/* The first key row of row tile rt (with SUM_LK the last tile may overlap the one before), and
 * whether row d0 + r of that tile is its own to store (not the overlapped tile's). */
int summary_tile_d0(const int rt)
{
    return min(rt * SUM_RD, DK - SUM_RD);
}
#define SUMMARY_ROW_OWN(rt, d0, r) ((d0) + (r) >= (rt) * SUM_RD)

#if SUM_LK
/* The group maps its chunk's k rows in slices of SUM_KW dimensions (the widest of SUM_VE and its
 * halvings dividing DK), slice s by work-item s modulo the group's size. */
#if DK % SUM_VE == 0
#define SUM_KW SUM_VE
#elif DK % 8 == 0
#define SUM_KW 8
#elif DK % 4 == 0
#define SUM_KW 4
#elif DK % 2 == 0
#define SUM_KW 2
#else
#define SUM_KW 1
#endif
#define SUM_KS (DK / SUM_KW) /* slices of a k row */

/* k~ of `len` consecutive tokens whose k rows start at kp (one slice of their dimensions) into
 * rows of DK floats at kl, and their sum into *zpart; `weighted` as in summary_tile_run below. */
void summary_kmap(global const STORE_T *kp, const long kstride, const int len, const float feature_eps,
                  local float *kl, VEC(SUM_KW) *zpart, const int weighted, global const float *wp,
                  global const float *wzp)
{
    for (int i = 0; i < len; ++i, kp += kstride, kl += DK) {
        VEC(SUM_KW) kv = FEATURE_V(SUM_KW, LOADN(SUM_KW, 0, kp), feature_eps);
        if (weighted) {
            *zpart += wzp[i] * kv;
            kv *= wp[i];
        } else {
            *zpart += kv;
        }
        VSTOREN(SUM_KW, kv, 0, kl);
    }
}

/* part += k~ v^T over `len` consecutive tokens: their k~ rows (mapped, weighted) in local memory
 * at kl (this work-item's SUM_RD dimensions), their v rows at vp. */
void summary_tile_run_lk(local const float *kl, global const STORE_T *vp, const long vstride, const int len,
                         VEC(SUM_VE) part[SUM_RD][SUM_NV])
{
    for (int i = 0; i < len; ++i, kl += DK, vp += vstride)
        SUM_TILE_FMA(part, kl, vp);
}
#else
/* part += k~ v^T and zpart += k~ over `len` consecutive tokens whose k and v rows start at kp and
 * vp (the work-item's SUM_RD key rows and SUM_NV vectors of SUM_VE value columns). `weighted` (a
 * constant at every call, so the other form compiles away): part += (w_p k~) v^T and zpart +=
 * wz_p k~ with the tokens' weights at wp and wzp, the backward's gradient summaries
 * G = sum q~ [dO scale/den | scale r]^T read from q and dO in place (no weighted copy of dO). */
void summary_tile_run(global const STORE_T *kp, global const STORE_T *vp, const long kstride,
                      const long vstride, const int len, const float feature_eps,
                      VEC(SUM_VE) part[SUM_RD][SUM_NV], VEC(SUM_RD) *zpart, const int weighted,
                      global const float *wp, global const float *wzp)
{
    for (int i = 0; i < len; ++i, kp += kstride, vp += vstride) {
        const VEC(SUM_RD) x = LOADN(SUM_RD, 0, kp);
        VEC(SUM_RD) kv = FEATURE_V(SUM_RD, x, feature_eps);
        if (weighted) {
            *zpart += wzp[i] * kv;
            kv *= wp[i];
        } else {
            *zpart += kv;
        }
        float kd[SUM_RD];
        VSTOREN(SUM_RD, kv, 0, kd);
#if SUM_KB
        const volatile float *kdr = kd; /* every read a load of the stored row */
#else
        const float *kdr = kd;
#endif
        SUM_TILE_FMA(part, kdr, vp); /* one read of the row per r (with SUM_KB, one load) */
    }
}
#endif /* SUM_LK */
#endif /* TILES_SUMMARY */

/* Sum of the W lanes of x (through a private array: valid for every width). */
#define HSUM(W, x, out)                                                                             \
    do {                                                                                            \
        float hs_[W];                                                                               \
        VSTOREN(W, (x), 0, hs_);                                                                    \
        (out) = 0.0f;                                                                               \
        for (int i_ = 0; i_ < (W); ++i_)                                                            \
            (out) += hs_[i_];                                                                       \
    } while (0)

/* acc[r] += q~_r S and dsum[r] = q~_r . z for the OUT_RT tokens whose q rows are qrow[r], with
 * q~ = scale * phi(q). S has rows of DV floats, s pointing at the work-item's OUT_NV vectors of
 * OUT_VE columns in row 0. q~ . z is summed in OUT_DC lanes over the row, then the lanes in order;
 * every product enters acc in the order of d: both forms below give the same bits.
 * OUT_PRE = 1: every token's q~ row goes to a private array first, so that the multiply-add loop
 * holds nothing but the accumulators, the S vectors and one broadcast, and a tile across a whole
 * row maps each q~ once. OUT_PRE = 0 (every built-in row): OUT_DC dimensions at a time inside the
 * loop, a small array that stays in registers where a whole q~ row per thread would not; on PoCL
 * with OUT_DC = 4 it is also the faster form on CPUs, AVX-512 and AVX2 alike (docs/tuning-notes.md
 * "Read-out"). A macro, not a function: PoCL keeps the tile in registers only when the loop is
 * written inline. */
#ifndef OUT_PRE
#define OUT_PRE 0
#endif
#define READOUT_MAP_(qrow, r_, d0_, z, scale, feature_eps, ds, qt)                                  \
    do {                                                                                            \
        const VEC(OUT_DC) x_ = LOADN(OUT_DC, 0, (qrow)[r_] + (d0_));                                \
        const VEC(OUT_DC) fx_ = (scale) * FEATURE_V(OUT_DC, x_, feature_eps);                        \
        (ds) += fx_ * VLOADN(OUT_DC, 0, (z) + (d0_));                                               \
        VSTOREN(OUT_DC, fx_, 0, (qt));                                                              \
    } while (0)
#define READOUT_FMA_(s, d, qcol, acc)                                                               \
    do {                                                                                            \
        VEC(OUT_VE) sv_[OUT_NV];                                                                    \
        _Pragma("unroll") for (int j_ = 0; j_ < OUT_NV; ++j_)                                       \
            sv_[j_] = VLOADN(OUT_VE, 0, (s) + (long)(d) * DV + j_ * OUT_VE);                        \
        _Pragma("unroll") for (int r_ = 0; r_ < OUT_RT; ++r_)                                       \
            _Pragma("unroll") for (int j_ = 0; j_ < OUT_NV; ++j_)                                   \
                (acc)[r_][j_] += qcol(r_) * sv_[j_];                                                \
    } while (0)
#if OUT_PRE
#define READOUT_TILE(qrow, s, z, scale, feature_eps, acc, dsum)                                     \
    do {                                                                                            \
        float qt_[OUT_RT][DK];                                                                      \
        _Pragma("unroll") for (int r_ = 0; r_ < OUT_RT; ++r_) {                                     \
            VEC(OUT_DC) ds_ = (VEC(OUT_DC))(0.0f);                                                  \
            for (int d0_ = 0; d0_ < DK; d0_ += OUT_DC)                                              \
                READOUT_MAP_(qrow, r_, d0_, z, scale, feature_eps, ds_, qt_[r_] + d0_);             \
            HSUM(OUT_DC, ds_, (dsum)[r_]);                                                          \
        }                                                                                           \
        for (int d0_ = 0; d0_ < DK; d0_ += OUT_DC)                                                  \
            _Pragma("unroll") for (int dd_ = 0; dd_ < OUT_DC; ++dd_) {                              \
                const int d_ = d0_ + dd_;                                                           \
                READOUT_FMA_(s, d_, READOUT_QPRE_, acc);                                            \
            }                                                                                       \
    } while (0)
#define READOUT_QPRE_(r) qt_[r][d_]
#else
#define READOUT_TILE(qrow, s, z, scale, feature_eps, acc, dsum)                                     \
    do {                                                                                            \
        VEC(OUT_DC) ds_[OUT_RT];                                                                    \
        _Pragma("unroll") for (int r_ = 0; r_ < OUT_RT; ++r_) ds_[r_] = (VEC(OUT_DC))(0.0f);        \
        for (int d0_ = 0; d0_ < DK; d0_ += OUT_DC) {                                                \
            float qt_[OUT_RT][OUT_DC];                                                              \
            _Pragma("unroll") for (int r_ = 0; r_ < OUT_RT; ++r_)                                   \
                READOUT_MAP_(qrow, r_, d0_, z, scale, feature_eps, ds_[r_], qt_[r_]);               \
            _Pragma("unroll") for (int dd_ = 0; dd_ < OUT_DC; ++dd_) {                              \
                const int d_ = d0_ + dd_;                                                           \
                READOUT_FMA_(s, d_, READOUT_QDC_, acc);                                             \
            }                                                                                       \
        }                                                                                           \
        _Pragma("unroll") for (int r_ = 0; r_ < OUT_RT; ++r_) HSUM(OUT_DC, ds_[r_], (dsum)[r_]);    \
    } while (0)
#define READOUT_QDC_(r) qt_[r][dd_]
#endif

#endif /* MHLA_KERNELS_TILES_H */
