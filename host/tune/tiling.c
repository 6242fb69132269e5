/* From the tuning row to the tiles one configuration is built with: register tiles cut down to
 * divide its head dimensions, block splits, causal score tiles, softmax key tiles and the causal
 * backward's read-out tiles fitted to the device's work-group and local-memory limits (and to what
 * a built kernel reports, which can be less), and the one function that turns tiles into -D flags,
 * per kernel file. */
#include "tune/tune.h"

#include <stdio.h>
#include <string.h>

/* ---- limits ---------------------------------------------------------------------------------- */

/* Local memory an implementation may keep for itself beyond the kernel's arrays (arguments,
 * alignment); what a kernel really takes is checked after it is built. */
#define LOCAL_RESERVE 1024u

void mhla__fit_init(const mhla_context *ctx, mhla_fit *fit)
{
    size_t wg = ctx->limits.max_work_group_size;
    if (ctx->limits.max_work_item_sizes[0] && ctx->limits.max_work_item_sizes[0] < wg)
        wg = ctx->limits.max_work_item_sizes[0];
    fit->wg = wg ? wg : 1;
    const uint64_t have = ctx->limits.local_mem_bytes;
    fit->local_bytes = have > 2 * LOCAL_RESERVE ? have - LOCAL_RESERVE : have / 2;
}

int mhla__fit_check(mhla_context *ctx, cl_kernel kernel, size_t want_wg, uint64_t want_local, mhla_fit *fit)
{
    size_t kwg = 0;
    cl_ulong klocal = 0;
    if (mhla__kernel_wg_size(ctx, kernel, &kwg) != CL_SUCCESS ||
        clGetKernelWorkGroupInfo(kernel, ctx->device, CL_KERNEL_LOCAL_MEM_SIZE, sizeof klocal, &klocal, NULL) !=
            CL_SUCCESS)
        return -1;
    int refit = 0;
    if (kwg < want_wg) {
        fit->wg = kwg ? kwg : 1;
        refit = 1;
    }
    /* The kernel takes more than its arrays (rusticl on llvmpipe reports twice their size): keep
     * the same proportion below the device's size. */
    if (klocal > ctx->limits.local_mem_bytes && want_local > 0) {
        const uint64_t scaled = (uint64_t)((double)fit->local_bytes * (double)want_local / (double)klocal);
        fit->local_bytes = scaled < fit->local_bytes ? scaled : fit->local_bytes - 1;
        refit = 1;
    }
    return refit;
}

mhla_status mhla__fit_build(mhla_context *ctx, const mhla_fit_loop *loop)
{
    mhla_status st = MHLA_OK;
    mhla_fit fit;
    mhla__fit_init(ctx, &fit);
    for (int tried = 1;; ++tried) {
        int refit = 0;
        MHLA_FORWARD_IF_ERROR(st, loop->attempt(loop->arg, &fit, &refit));
        if (!refit)
            break;
        loop->release(loop->arg);
        if (tried == loop->tries) {
            char why[512];
            loop->why(loop->arg, &fit, why, sizeof why);
            st = mhla__fail(ctx, MHLA_ERR_UNSUPPORTED, "%s", why);
            goto cleanup;
        }
    }
cleanup:
    return st;
}

/* ---- tiles ----------------------------------------------------------------------------------- */

/* Register tiles shared by the non-causal and causal kernels: the tuning's widths and counts cut
 * down to divide Dk and Dv. */
static void register_tiles(const mhla_config *cfg, const mhla_tuning *t, uint64_t local_bytes, mhla_tiles *out)
{
    memset(out, 0, sizeof *out);
    /* sum_lk: the chunk's k~ rows and the key sums in local memory; where they do not fit, each
     * work-item maps its own rows (SUM_LK 0: then sum_rd is a vector width dividing Dk). Within half
     * the local memory: block_summary.cl's two kernels each declare the arrays, and Oclgrind counts
     * every kernel's local arrays of the program at a launch (CL_OUT_OF_RESOURCES past its 32 KiB). */
    const uint64_t lk_bytes = ((uint64_t)t->sum_chunk + 1) * (uint64_t)cfg->dk * sizeof(float);
    out->sum_lk = t->sum_lk && 2 * lk_bytes <= local_bytes;
    if (out->sum_lk)
        out->sum_rd = t->sum_rd < cfg->dk ? t->sum_rd : (int)cfg->dk;
    else /* a vector of k: within the row's width too (the row's sum_rd was a row count) */
        out->sum_rd = mhla__pow2_divisor(cfg->dk, t->vec > 0 && t->vec < t->sum_rd ? t->vec : t->sum_rd);
    out->sum_ve = mhla__pow2_divisor(cfg->dv, t->sum_ve);
    out->sum_nv = mhla__pow2_divisor(cfg->dv / out->sum_ve, t->sum_nv);
    out->sum_chunk = t->sum_chunk;
    out->sum_kb = t->sum_kb != 0;
    out->out_rt = t->out_rt;
    out->out_ve = mhla__pow2_divisor(cfg->dv, t->out_ve);
    out->out_nv = mhla__pow2_divisor(cfg->dv / out->out_ve, t->out_nv);
    out->out_dc = mhla__pow2_divisor(cfg->dk, t->out_dc);
    out->out_pre = t->out_pre != 0;
    out->mix_mr = t->mix_mr;
    out->mix_ve = t->mix_ve;
    out->mix_nv = t->mix_nv;
    out->wg = t->wg;
    out->pf = t->pf != 0;
    out->splits = out->split_len = 1;
}

/* The tiled forward's sizes (summary_tiled.cl, output_tiled.cl): 4 x 4 register tiles (8 x 4 where
 * tl_rr or tl_qr asks), groups of (TL_TD / TL_RR) x (TL_TV / 4) and (TL_TQ / TL_QR) x (TL_TV / 4)
 * work-items within the work-group limit,
 * their local tiles within the local memory (halved until they fit: a phone's 64 work-items and
 * 16 KiB take 32 x 32 groups). */
static int tile4(int64_t x) { return x < 4 ? 4 : (int)(x / 4 * 4); }
static int up4(int64_t x) { return (int)((x + 3) / 4 * 4); }
static int min_int(int a, int b) { return a < b ? a : b; }

uint64_t mhla__output_tiled_local(const mhla_tiles *t)
{
    return ((uint64_t)t->tl_dc * (uint64_t)(t->tl_tq + 4) + (uint64_t)t->tl_dc * (uint64_t)t->tl_tv +
            (uint64_t)t->tl_dc + (uint64_t)t->tl_tq) *
           sizeof(float);
}

void mhla__tiles_tiled(const mhla_config *cfg, const mhla_shape *shape, const mhla_tuning *t, const mhla_fit *fit,
                       mhla_tiles *out)
{
    const int tn = tile4(t->tl_tn);
    int td = min_int(tn, up4(cfg->dk)), tv = min_int(tn, up4(cfg->dv));
    /* 8 key rows a work-item where the tuning asks and the group's rows are whole eights of them */
    int rr = t->tl_rr >= 8 && td % 8 == 0 ? 8 : 4;
    while ((size_t)(td / rr) * (size_t)(tv / 4) > fit->wg && (td > 4 || tv > 4)) {
        if (td >= tv)
            td = tile4(td / 2);
        else
            tv = tile4(tv / 2);
        if (td % rr)
            rr = 4;
    }
    int tq = min_int(tile4(t->tl_tq), up4(shape->nb));
    int qr = t->tl_qr >= 8 && tq % 8 == 0 ? 8 : 4; /* 8 tokens a work-item where asked and whole */
    while ((size_t)(tq / qr) * (size_t)(tv / 4) > fit->wg && tq > 4) {
        tq = tile4(tq / 2);
        if (tq % qr)
            qr = 4;
    }
    int tk = t->tl_tk;
    while (tk > 1 && ((uint64_t)tk * (uint64_t)(td + tv) + (uint64_t)td) * sizeof(float) > fit->local_bytes)
        tk /= 2;
    out->tl_td = td, out->tl_tv = tv, out->tl_tk = tk, out->tl_tq = tq, out->tl_fuse = t->tl_fuse, out->tl_rr = rr;
    out->tl_qr = qr, out->fuse_mb = t->fuse_mb;
    out->tl_dc = min_int(tile4(t->tl_dc), up4(cfg->dk)); /* whole float4 of q rows (output_tiled.cl) */
    while (out->tl_dc > 4 && mhla__output_tiled_local(out) > fit->local_bytes)
        out->tl_dc = tile4(out->tl_dc / 2);
    while (out->tl_tq > 4 && mhla__output_tiled_local(out) > fit->local_bytes) {
        out->tl_tq = tile4(out->tl_tq / 2);
        if (out->tl_tq % out->tl_qr)
            out->tl_qr = 4;
    }
    /* mixing_splits reads each block's rows once per MIX_MR mixed rows: up to 16 of them (M = 64:
     * the summaries read 4 times from cache instead of 16) */
    out->mix_mr = t->mix_mr;
    while (out->mix_mr < shape->m && out->mix_mr < 16)
        out->mix_mr *= 2;
}

/* forward_one.cl's group: 4 x 4 tiles of the Dk (rounded up to 4) x on_tv mixed summary, on_ks
 * times over (its pool: ON_POOL there). */
size_t mhla__forward_one_wg(const mhla_config *cfg, const mhla_tiles *t)
{
    return (size_t)(up4(cfg->dk) / 4) * (size_t)(t->on_tv / 4) * (size_t)t->on_ks;
}

uint64_t mhla__forward_one_local(const mhla_config *cfg, const mhla_tiles *t)
{
    /* in float4: kq of a k~ row (and of z~), qv of a summary row's columns */
    const uint64_t dk4 = (uint64_t)up4(cfg->dk), kq = dk4 / 4, qv = (uint64_t)t->on_tv / 4, ks = (uint64_t)t->on_ks;
    const uint64_t s4 = dk4 * qv, tq = 4 * mhla__forward_one_wg(cfg, t) / qv;
    const uint64_t a4 = (uint64_t)t->on_tk * (kq + qv), r4 = ks > 1 ? ks * (s4 + kq) : 0;
    const uint64_t b4 = (uint64_t)t->on_dc * (tq / 4 + 1);
    uint64_t region = a4 > r4 ? a4 : r4;
    region = b4 > region ? b4 : region;
    return (s4 + kq + region) * 4 * sizeof(float);
}

/* 16 columns a group (Dv 64: 4 column tiles, so that N = 1024, M = 4, H = 8 has 128 groups, about a
 * GPU's compute units) and 4 token slices (Dk 64: 256 work-items); the slices halved, then the
 * columns, to the work-group limit. A tile holds tl_tk tokens for each slice, so that a work-item
 * adds as many between two barriers as summary_tiled's do. The read-out's dimensions, the slices and
 * the tokens a tile halved, in that order, to the local memory. */
void mhla__tiles_one(const mhla_config *cfg, const mhla_tuning *t, const mhla_fit *fit, mhla_tiles *out)
{
    out->tl_one = t->tl_one;
    out->on_tv = 0;
    if (!out->tiled || t->tl_one <= 0)
        return;
    mhla_tiles f = *out;
    f.on_tv = min_int(16, up4(cfg->dv)), f.on_ks = 4;
    f.on_dc = min_int(tile4(t->tl_dc), up4(cfg->dk));
    while (mhla__forward_one_wg(cfg, &f) > fit->wg) {
        if (f.on_ks > 1)
            f.on_ks /= 2;
        else if (f.on_tv > 4)
            f.on_tv = tile4(f.on_tv / 2);
        else
            return; /* a Dk-high column of 4 x 4 tiles needs more work-items than a group has */
    }
    f.on_tk = (t->tl_tk > 0 ? t->tl_tk : 16) * f.on_ks;
    while (mhla__forward_one_local(cfg, &f) > fit->local_bytes) {
        if (f.on_dc > 4)
            f.on_dc = tile4(f.on_dc / 2);
        else if (f.on_ks > 1)
            f.on_ks /= 2;
        else if (f.on_tk > 1)
            f.on_tk /= 2;
        else if (f.on_tv > 4)
            f.on_tv = tile4(f.on_tv / 2);
        else
            return;
    }
    *out = f;
}

double mhla__fuse_rereads(const mhla_config *cfg, int64_t heads, int64_t blocks, int64_t block_tokens, int tq,
                          int64_t sources)
{
    if (tq < 1 || sources < 1)
        return 0.0;
    /* in double: heads x blocks x tiles x sources x Dk x Dv can pass 2^64 bytes on paper */
    const double groups = (double)heads * (double)blocks * (double)((block_tokens + tq - 1) / tq);
    return groups * (double)(sources - 1) * (double)cfg->dk * (double)(cfg->dv + 1) * sizeof(float);
}

int mhla__fuse_fits(const mhla_config *cfg, int64_t heads, int64_t blocks, int64_t block_tokens, int tq,
                    int64_t sources, int fuse_mb)
{
    return tq >= 1 && sources >= 1 &&
           mhla__fuse_rereads(cfg, heads, blocks, block_tokens, tq, sources) <= (double)fuse_mb * 1048576.0;
}

int mhla__bwd_readout_mixes(const mhla_config *cfg, int bt_fuse, int bt_tq, int fuse_mb, int64_t heads,
                            int64_t blocks, int64_t block_tokens, int64_t sources, int whole)
{
    return whole && cfg->normalizer != MHLA_NORMALIZER_OFFICIAL && sources <= (int64_t)bt_fuse &&
           mhla__fuse_fits(cfg, heads, blocks, block_tokens, bt_tq, sources, fuse_mb);
}

size_t mhla__bwd_tiled_wg(const mhla_tiles *t) { return (size_t)(t->bt_tq / 4) * (size_t)(t->bt_tv / 4); }

uint64_t mhla__bwd_tiled_local(const mhla_tiles *t)
{
    /* xl[BT_DC][BT_TQ/4 + 1] and wl[BT_DC][BT_TV/4 + 1] float4, bwd_dq_tiled's per-token inv_l and r_l
     * and its dots' parts dpart and opart [BT_TQ][BT_TV/4] (kernels/backward_tiled.cl) */
    const uint64_t tq = (uint64_t)t->bt_tq, tv = (uint64_t)t->bt_tv, dc = (uint64_t)t->bt_dc;
    return (dc * (tq / 4 + 1) * 4 + dc * (tv / 4 + 1) * 4 + 2 * tq + 2 * tq * (tv / 4)) * sizeof(float);
}

void mhla__tiles_backward_tiled(const mhla_config *cfg, const mhla_shape *shape, const mhla_tuning *t,
                                const mhla_fit *fit, mhla_tiles *out)
{
    out->bt_tq = 0;
    if (!out->tiled || t->bt_tq < 1)
        return;
    /* one column tile holds a Dk-wide row (bwd_dq_tiled sums a token's dots in its group); dv's
     * Dv-wide rows take as many tiles as they need */
    const int tv = up4(cfg->dk);
    if ((size_t)(tv / 4) > fit->wg)
        return;
    const int64_t nb = shape->nb > shape->nb_kv ? shape->nb : shape->nb_kv;
    int tq = min_int(tile4(t->bt_tq), up4(nb));
    while ((size_t)(tq / 4) * (size_t)(tv / 4) > fit->wg && tq > 4)
        tq = tile4(tq / 2);
    out->bt_tq = tq, out->bt_tv = tv, out->bt_fuse = t->bt_fuse, out->fuse_mb = t->fuse_mb;
    out->bt_dc = min_int(tile4(t->bt_dc), up4(cfg->dk > cfg->dv ? cfg->dk : cfg->dv));
    while (out->bt_dc > 4 && mhla__bwd_tiled_local(out) > fit->local_bytes)
        out->bt_dc = tile4(out->bt_dc / 2);
    while (out->bt_tq > 4 && mhla__bwd_tiled_local(out) > fit->local_bytes)
        out->bt_tq = tile4(out->bt_tq / 2);
    if (mhla__bwd_tiled_local(out) > fit->local_bytes)
        out->bt_tq = 0;
}

/* Blocks of nb tokens in `splits` segments (at most nb / seg_min of them), each a whole number of
 * `whole` tokens where there are several: out's split_len and splits. */
static void split_blocks(int64_t nb, int64_t splits, int64_t seg_min, int64_t whole, mhla_tiles *out)
{
    const int64_t most = nb / seg_min;
    if (splits > most)
        splits = most > 1 ? most : 1;
    if (splits < 1)
        splits = 1;
    int64_t len = (nb + splits - 1) / splits;
    if (splits > 1)
        len = (len + whole - 1) / whole * whole;
    out->split_len = (int)len;
    out->splits = (int)((nb + len - 1) / len);
}

void mhla__tiles_forward(const mhla_context *ctx, const mhla_config *cfg, const mhla_shape *shape,
                         const mhla_tuning *t, mhla_tiles *out)
{
    mhla_fit fit;
    mhla__fit_init(ctx, &fit);
    register_tiles(cfg, t, fit.local_bytes, out);
    /* clang's prefetch builtin only where the kernel becomes native code (PoCL's CPU device):
     * Oclgrind aborts on the llvm.prefetch intrinsic, and rusticl's SPIR-V translator rejects it. */
    out->out_pf = ctx->limits.native_prefetch ? t->out_pf : 0;
    /* The summary's sum_lk form: its next chunk as prefetch instructions (-DPREFETCH=2) there too */
    if (out->pf && ctx->limits.native_prefetch)
        out->pf = 2;
    /* Streaming stores write whole vectors of float; kernels/output.cl takes them only where the
     * output buffer's own address is aligned to one. The forward's read-out only with vectors of at
     * least out_nt floats: on an Intel Xeon, 32-byte ones (AVX2) made it slower, 64-byte ones faster;
     * the backward's read-outs keep them at any width (docs/tuning-notes.md "Read-out"). */
    out->out_nt = t->out_nt && out->out_ve >= t->out_nt && cfg->dtype == MHLA_DTYPE_F32;
    out->bwd_nt = t->out_nt && cfg->dtype == MHLA_DTYPE_F32;
    /* Segments per block: enough work-groups for every compute unit several times over, but no
     * segment shorter than the tuning's minimum (a short segment costs more to reduce than it
     * saves). */
    /* (the summaries' blocks: the key/value grid's, of B*H_kv heads) */
    const int64_t nb = shape->nb_kv, groups = shape->m_kv * shape->bh_kv;
    const int64_t want = (int64_t)t->groups_per_cu * ctx->limits.compute_units;
    split_blocks(nb, groups < want ? (want + groups - 1) / groups : 1, t->split_min_len, 1, out);
    out->tiled = t->tiled != 0;
    out->tl_one = out->on_tv = 0;
    if (!out->tiled)
        return;
    mhla__tiles_tiled(cfg, shape, t, &fit, out);
    mhla__tiles_one(cfg, t, &fit, out);
    /* Its segments: down to two local tiles (a group's work is then still a few thousand
     * multiply-adds a work-item), whole tiles where a block has several; a block is split only
     * where that at least doubles the groups (each segment's partial summary is as large as the
     * block's: 25 MB of partials at N = 16384, M = 64, H = 8 in three segments, a third more traffic
     * than k and v, for groups the device had room for already). */
    /* The official normalizer's per-token dots read each block's whole z before the mixing: one
     * segment a block (its mixed denominators come from the dots' GEMM, forward/mixing.c). */
    const int64_t splits = cfg->normalizer == MHLA_NORMALIZER_OFFICIAL ? 1 : want / groups;
    split_blocks(nb, splits, 2 * (int64_t)out->tl_tk, out->tl_tk, out);
}

size_t mhla__summary_work_items(const mhla_tiles *t, int64_t dk, int64_t dv)
{
    return (size_t)((dk + t->sum_rd - 1) / t->sum_rd) * (size_t)(dv / (t->sum_ve * t->sum_nv));
}

int mhla__causal_output_wg(const mhla_tiles *t, int64_t dv)
{
    return (int)(dv / (t->out_ve * t->out_nv)) * (t->tq / t->out_rt);
}

uint64_t mhla__causal_output_local(const mhla_tiles *t, int64_t dk)
{
    /* qs[TQ*DK] + kt[DK*KT] + sc[TQ*KT] floats (kernels/causal_output.cl) */
    return ((uint64_t)t->tq * (uint64_t)dk + (uint64_t)dk * (uint64_t)t->kt + (uint64_t)t->tq * (uint64_t)t->kt) *
           sizeof(float);
}

static int round_down_to(int x, int m) { return x < m ? m : x / m * m; }

size_t mhla__prefix_tiled_wg(const mhla_tiles *t) { return (size_t)(t->cp_ti / 4) * (size_t)(t->cp_tw / 4); }

uint64_t mhla__prefix_tiled_local(const mhla_tiles *t)
{
    /* mt[TJ][TI/4 + 1] and st[TJ][TW/4] float4 (kernels/causal_prefix_tiled.cl) */
    return 16u * (uint64_t)t->cp_tj * ((uint64_t)t->cp_ti / 4 + 1 + (uint64_t)t->cp_tw / 4);
}

int mhla__prefix_tile_rows(const mhla_tiles *t) { return t->cp_ti ? t->cp_ti : t->mix_mr; }

size_t mhla__causal_summary_tiled_wg(const mhla_tiles *t) { return (size_t)(t->cs_tn / 4) * (size_t)(t->cs_tn / 4); }

uint64_t mhla__causal_summary_tiled_local(const mhla_tiles *t)
{
    /* kl[TK][TN/4] and vl[TK][TN/4] float4, zl[TN] (kernels/causal_summary_tiled.cl) */
    return 2u * 16u * (uint64_t)t->cs_tk * ((uint64_t)t->cs_tn / 4) + 4u * (uint64_t)t->cs_tn;
}

size_t mhla__causal_tiled_wg(const mhla_tiles *t) { return (size_t)(t->ct_sq / 4) * (size_t)(t->ct_bk / 4); }

uint64_t mhla__causal_tiled_local(const mhla_config *cfg, const mhla_tiles *t)
{
    /* qt[DK][SQ+4], kt[DK][BK+4], vt[BK][DVP], pt[BK][SQ+4], red[SQ][BK/4], dl[SQ] (the last two for
     * the paper normalizer; counted always) floats (kernels/causal_tiled.cl) */
    const uint64_t sq = (uint64_t)t->ct_sq, bk = (uint64_t)t->ct_bk, dk = (uint64_t)cfg->dk;
    const uint64_t dvp = ((uint64_t)cfg->dv + 3) / 4 * 4;
    return sizeof(float) * (dk * (sq + 4) + dk * (bk + 4) + bk * dvp + bk * (sq + 4) + sq * (bk / 4) + sq);
}

/* One step towards fitting the causal output kernel in the limits: fewer tokens per group, then
 * wider column tiles (fewer work-items); for local memory fewer keys per pass, fewer tokens, then
 * narrower vectors (keys pass in whole vectors). Returns 0 when nothing is left to shrink. */
static int causal_shrink(const mhla_config *cfg, const mhla_fit *fit, mhla_tiles *t)
{
    const int64_t dk = cfg->dk, dv = cfg->dv;
    if ((size_t)mhla__causal_output_wg(t, dv) > fit->wg) {
        if (t->tq > t->out_rt) {
            t->tq = round_down_to(t->tq / 2, t->out_rt);
            return 1;
        }
        if (dv / t->out_ve > t->out_nv) {
            const int64_t vecs = dv / t->out_ve; /* column vectors of a row */
            int nv = t->out_nv + 1;
            while (vecs % nv != 0)
                ++nv;
            t->out_nv = nv;
            return 1;
        }
        return 0;
    }
    if (mhla__causal_output_local(t, dk) > fit->local_bytes) {
        if (t->kt > t->out_ve && (t->kt >= t->tq || t->tq <= t->out_rt)) {
            t->kt = round_down_to(t->kt / 2, t->out_ve);
            return 1;
        }
        if (t->tq > t->out_rt) {
            t->tq = round_down_to(t->tq / 2, t->out_rt);
            return 1;
        }
        if (t->out_ve > 1) { /* same columns per work-item, in narrower vectors */
            t->out_ve /= 2;
            t->out_nv *= 2;
            return 1;
        }
        return 0;
    }
    return 0;
}

/* Whether causal_tiled.cl's, or softmax_tiled.cl's, group and arrays fit (fits_fn). */
typedef int (*fits_fn)(const mhla_config *cfg, const mhla_tiles *x, const mhla_fit *fit);
static int causal_tiled_fits(const mhla_config *cfg, const mhla_tiles *x, const mhla_fit *fit)
{
    return mhla__causal_tiled_wg(x) <= fit->wg && mhla__causal_tiled_local(cfg, x) <= fit->local_bytes;
}
static int softmax_tiled_fits(const mhla_config *cfg, const mhla_tiles *x, const mhla_fit *fit)
{
    return mhla__softmax_tiled_wg(x) <= fit->wg && mhla__softmax_local(cfg, x) <= fit->local_bytes;
}

/* A group of (*rows/4) x (*keys/4) work-items of 4 x 4 tiles (the fields of x that `fits` reads):
 * keys halved first (a row's work-items) while at least a quarter of the rows, then rows, until it
 * fits or both are 4. Returns whether it fits. */
static int shrink_quad_group(const mhla_config *cfg, const mhla_fit *fit, mhla_tiles *x, int *rows, int *keys,
                             fits_fn fits)
{
    while (!fits(cfg, x, fit) && (*keys > 4 || *rows > 4)) {
        if (*keys > 4 && *keys >= *rows / 4)
            *keys = tile4(*keys / 2);
        else
            *rows = tile4(*rows / 2);
    }
    return fits(cfg, x, fit);
}

/* causal_tiled.cl's group where the tuning asks for it (ct_sq > 0): no more tokens or keys than a
 * chunk has (rounded up to 4), shrunk until the group and its arrays fit; where even 4 x 4 do not
 * (head dimensions of hundreds in 16 KiB), ct_sq 0: causal_output.cl, whose tiles shrink further. */
static void causal_tiled_fit(const mhla_config *cfg, const mhla_tuning *t, const mhla_fit *fit, mhla_tiles *x)
{
    x->ct_sq = x->ct_bk = 0;
    if (t->ct_sq <= 0)
        return;
    const int chunk = (int)(cfg->chunk < 1 << 20 ? cfg->chunk : 1 << 20);
    x->ct_sq = min_int(tile4(t->ct_sq), up4(chunk)), x->ct_bk = min_int(tile4(t->ct_bk), up4(chunk));
    if (!shrink_quad_group(cfg, fit, x, &x->ct_sq, &x->ct_bk, causal_tiled_fits))
        x->ct_sq = x->ct_bk = 0;
}

/* causal_prefix_tiled.cl's group where the tuning asks for it (cp_ti > 0): columns, then rows, then
 * chunks per tile halved until it fits; it always does at 4 x 4 (16 work-items, a few hundred
 * bytes). Its tiles are the prefix table's: gemm_rows 0 (no CLBlast blocks). */
static void prefix_tiled_fit(const mhla_tuning *t, const mhla_fit *fit, mhla_tiles *x)
{
    x->cp_ti = x->cp_tw = x->cp_tj = 0;
    if (t->cp_ti <= 0)
        return;
    x->cp_ti = tile4(t->cp_ti), x->cp_tw = tile4(t->cp_tw), x->cp_tj = t->cp_tj < 1 ? 1 : t->cp_tj;
    while (mhla__prefix_tiled_wg(x) > fit->wg || mhla__prefix_tiled_local(x) > fit->local_bytes) {
        if (x->cp_tw > 4 && x->cp_tw >= x->cp_ti)
            x->cp_tw = tile4(x->cp_tw / 2);
        else if (x->cp_ti > 4)
            x->cp_ti = tile4(x->cp_ti / 2);
        else if (x->cp_tj > 1)
            x->cp_tj /= 2;
        else
            break;
    }
    if (mhla__prefix_tiled_wg(x) > fit->wg || mhla__prefix_tiled_local(x) > fit->local_bytes)
        x->cp_ti = x->cp_tw = x->cp_tj = 0;
    else
        x->gemm_rows = 0;
}

/* causal_summary_tiled.cl's group where the tuning asks for it (cs_tk > 0): tl_tn key rows and
 * columns (no more than the head has, rounded up to 4), halved until the group fits, then tokens per
 * tile halved; it always fits at 4 x 4 (one work-item). */
static void summary_tiled_fit(const mhla_config *cfg, const mhla_tuning *t, const mhla_fit *fit, mhla_tiles *x)
{
    x->cs_tk = x->cs_tn = 0;
    if (t->cs_tk <= 0)
        return;
    const int dmax = (int)(cfg->dk > cfg->dv ? cfg->dk : cfg->dv);
    x->cs_tk = t->cs_tk, x->cs_tn = min_int(tile4(t->tl_tn), up4(dmax));
    while (mhla__causal_summary_tiled_wg(x) > fit->wg && x->cs_tn > 4)
        x->cs_tn = tile4(x->cs_tn / 2);
    while (mhla__causal_summary_tiled_local(x) > fit->local_bytes && x->cs_tk > 1)
        x->cs_tk /= 2;
    if (mhla__causal_summary_tiled_wg(x) > fit->wg || mhla__causal_summary_tiled_local(x) > fit->local_bytes)
        x->cs_tk = x->cs_tn = 0;
}

uint64_t mhla__decoder_step_local(const mhla_config *cfg, const mhla_tiles *t)
{
    /* kernels/decoder.cl: q~ of the query heads a pass reads out (one, or STEP_QG = 4 where
     * key/value heads are grouped; the parts form: no more than share a key/value head), k~, and
     * the numerators and denominators (the parts form: one row of them per part) */
    const int64_t group = cfg->kv_heads ? cfg->heads / cfg->kv_heads : 1;
    const uint64_t dk = (uint64_t)cfg->dk, cols = (uint64_t)cfg->dv + 1;
    if (t->dec_dp <= 1) {
        const uint64_t qg = group > 1 ? 4 : 1;
        return sizeof(float) * ((qg + 1) * dk + qg * cols);
    }
    const uint64_t qg = group < 4 ? (uint64_t)group : 4;
    return sizeof(float) * ((qg + 1) * dk + (uint64_t)t->dec_dp * qg * cols);
}

/* The decoder's parts (dec_dp > 1): no more than Dk, and halved until a group of one column lane
 * per part and its arrays fit (1: the form a work-item walks Dk in, whose arrays always go). The
 * steps' share of the next prefix (dec_next) takes no local memory: as asked. */
static void decoder_parts_fit(const mhla_config *cfg, const mhla_tuning *t, const mhla_fit *fit, mhla_tiles *x)
{
    x->dec_next = t->dec_next != 0;
    x->dec_dp = t->dec_dp < 1 ? 1 : t->dec_dp > cfg->dk ? (int)cfg->dk : t->dec_dp;
    while (x->dec_dp > 1 && ((size_t)x->dec_dp > fit->wg || mhla__decoder_step_local(cfg, x) > fit->local_bytes))
        x->dec_dp /= 2;
}

mhla_status mhla__tiles_causal(mhla_context *ctx, const mhla_config *cfg, const mhla_tuning *t, const mhla_fit *fit,
                               mhla_tiles *out)
{
    mhla_status st = MHLA_OK;
    mhla_tiles x;
    register_tiles(cfg, t, fit->local_bytes, &x);
    x.mix_mr = t->pre_mr, x.mix_nv = t->pre_nv; /* causal plans run the prefix kernel, not mixing.cl */
    const int64_t zcol = cfg->normalizer == MHLA_NORMALIZER_PAPER ? 1 : 0;
    const int64_t width = cfg->batch * (cfg->kv_heads ? cfg->kv_heads : cfg->heads) * cfg->dk * (cfg->dv + zcol); /* floats of a slot */
    x.pre_ve = mhla__pow2_divisor(width, t->mix_ve);
    /* Prefix tiles must not straddle GEMM blocks; a group's tokens are whole register tiles; keys
     * pass in whole score vectors. */
    x.gemm_rows = t->gemm_rows / x.mix_mr * x.mix_mr;
    x.tq = round_down_to(t->tq, x.out_rt);
    x.kt = (t->kt + x.out_ve - 1) / x.out_ve * x.out_ve;
    /* CLBlast's GEMM kernels are built for work-groups of 64 and more (a device allowing 16 fails
     * them with CL_INVALID_WORK_GROUP_SIZE): there the prefix kernel sums every earlier chunk. */
    if (fit->wg < 64)
        x.gemm_rows = 0;
    while (causal_shrink(cfg, fit, &x))
        ;
    /* Score steps of whole rows of the group's tokens and whole score vectors of a key pass. */
    x.sc_rt = (int)mhla__pow2_divisor(x.tq, t->sc_rt);
    x.sc_kv = (int)mhla__pow2_divisor(x.kt / x.out_ve, t->sc_kv);
    MHLA_FAIL_IF(st, (size_t)mhla__causal_output_wg(&x, cfg->dv) > fit->wg, ctx, MHLA_ERR_UNSUPPORTED,
                 "the causal output kernel needs groups of %d work-items for dv = %lld; %s allows %zu",
                 mhla__causal_output_wg(&x, cfg->dv), (long long)cfg->dv, ctx->device_name, fit->wg);
    MHLA_FAIL_IF(st, mhla__causal_output_local(&x, cfg->dk) > fit->local_bytes, ctx, MHLA_ERR_UNSUPPORTED,
                 "the causal output kernel needs %llu bytes of local memory for dk = %lld even with the smallest "
                 "tiles; %s has %llu (%llu usable)",
                 (unsigned long long)mhla__causal_output_local(&x, cfg->dk), (long long)cfg->dk, ctx->device_name,
                 (unsigned long long)ctx->limits.local_mem_bytes, (unsigned long long)fit->local_bytes);
    prefix_tiled_fit(t, fit, &x);
    /* The slots are padded where our prefix kernel reads every chunk's column of them; where
     * CLBlast's GEMM reads them (gemm_rows > 0) padding slowed the prefix on a GPU, likely a copy
     * into its temporary for an off-tile leading dimension (docs/tuning-notes.md "On GPUs"), and a
     * GPU's tiled prefix (cp_ti) reads whole rows of them. */
    x.slot_pad = x.gemm_rows == 0 && x.cp_ti == 0;
    causal_tiled_fit(cfg, t, fit, &x);
    summary_tiled_fit(cfg, t, fit, &x);
    decoder_parts_fit(cfg, t, fit, &x);
    *out = x;
cleanup:
    return st;
}

size_t mhla__softmax_tiled_wg(const mhla_tiles *t) { return (size_t)(t->sm_bq / 4) * (size_t)(t->sm_bk / 4); }

uint64_t mhla__softmax_local(const mhla_config *cfg, const mhla_tiles *t)
{
    if (t->sm_tiled) {
        /* qt[DK][SQ+4], kt[DK][BK+4], vt[BK][DVP], pt[BK][SQ+4], red[SQ][BK/4], four [SQ] rows
         * (kernels/softmax_tiled.cl) */
        const uint64_t sq = (uint64_t)t->sm_bq, bk = (uint64_t)t->sm_bk, dk = (uint64_t)cfg->dk;
        const uint64_t dvp = (uint64_t)up4(cfg->dv);
        return sizeof(float) * (dk * (sq + 4) + dk * (bk + 4) + bk * dvp + bk * (sq + 4) + sq * (bk / 4) + 4 * sq);
    }
    /* kt[DK*BK] + vt[BK*DVP] + bias[BK] floats (kernels/softmax.cl) */
    const uint64_t dvp = (uint64_t)mhla__round_up((size_t)cfg->dv, (size_t)t->sm_vw);
    return sizeof(float) * (uint64_t)t->sm_bk * ((uint64_t)cfg->dk + dvp + 1);
}

mhla_status mhla__tiles_softmax(mhla_context *ctx, const mhla_config *cfg, const mhla_tuning *t, const mhla_fit *fit,
                                mhla_tiles *out)
{
    mhla_status st = MHLA_OK;
    mhla_tiles x;
    memset(&x, 0, sizeof x);
    x.sm_vw = t->sm_vw; /* a power of two in 1..16 (mhla__tuning_lookup) */
    x.sm_bq = t->sm_bq;
    x.sm_bk = round_down_to(t->sm_bk, x.sm_vw);
    x.sm_rows = t->sm_rows != 0;
    x.wg = t->wg;
    x.splits = x.split_len = 1;
    if (t->sm_tiled) {
        /* a group of sm_bq/4 x sm_bk/4 work-items: keys halved first (a row's work-items), then
         * queries, until the group and its arrays fit; where even 4 x 4 do not (head dimensions of
         * hundreds in 16 KiB), the untiled form below, whose arrays are a few rows */
        x.sm_tiled = 1;
        const int64_t n = cfg->seq_t * cfg->seq_h * cfg->seq_w; /* no more queries a group than there are */
        x.sm_bq = min_int(tile4(t->sm_bq), up4(n)), x.sm_bk = tile4(t->sm_bk);
        if (shrink_quad_group(cfg, fit, &x, &x.sm_bq, &x.sm_bk, softmax_tiled_fits)) {
            *out = x;
            goto cleanup;
        }
        x.sm_tiled = 0, x.sm_bq = t->sm_bq, x.sm_bk = round_down_to(t->sm_bk, x.sm_vw);
    }
    /* Half the keys (still a multiple of the width), then narrower vectors, until the tiles fit. */
    while (mhla__softmax_local(cfg, &x) > fit->local_bytes && (x.sm_bk > x.sm_vw || x.sm_vw > 1)) {
        if (x.sm_bk > x.sm_vw)
            x.sm_bk = round_down_to(x.sm_bk / 2, x.sm_vw);
        else
            x.sm_vw = x.sm_bk = x.sm_vw / 2;
    }
    MHLA_FAIL_IF(st, mhla__softmax_local(cfg, &x) > fit->local_bytes, ctx, MHLA_ERR_UNSUPPORTED,
                 "softmax attention with Dk = %lld, Dv = %lld needs %llu bytes of local memory even with a one-key "
                 "tile; %s has %llu (%llu usable)",
                 (long long)cfg->dk, (long long)cfg->dv, (unsigned long long)mhla__softmax_local(cfg, &x),
                 ctx->device_name, (unsigned long long)ctx->limits.local_mem_bytes,
                 (unsigned long long)fit->local_bytes);
    *out = x;
cleanup:
    return st;
}

void mhla__tiles_backward(const mhla_config *cfg, const mhla_tuning *t, mhla_tiles *out)
{
    /* the forward read-out's width, up to float16 (OpenCL's widest vector) */
    out->bwd_vw = t->out_ve >= 1 ? mhla__pow2_divisor(16, t->out_ve) : 1;
    out->bwd_vk = mhla__pow2_divisor(cfg->dk, out->bwd_vw);
    out->bwd_vv = mhla__pow2_divisor(cfg->dv, out->bwd_vw);
    const int nk = (int)(cfg->dk / out->bwd_vk), nv = (int)(cfg->dv / out->bwd_vv), widest = nk > nv ? nk : nv;
    const int fit = widest >= t->bwd_acc ? 1 : t->bwd_acc / widest;
    out->bwd_rt = t->out_rt < 1 ? 1 : t->out_rt > fit ? fit : t->out_rt;
    out->bwd_heads = t->bwd_heads != 0;
    out->bwd_tm = t->dmix_tm < 1 ? 1 : t->dmix_tm > 8 ? 8 : t->dmix_tm;
    out->dm_t = t->dm_t; /* as asked: fitted to the rows and the device by mhla__dmix_tile */
}

uint64_t mhla__dmix_tiled_local(int dm_t)
{
    return sizeof(float) * 2u * MHLA_DM_K * (uint64_t)(dm_t + 4);
}

int mhla__dmix_tile(const mhla_fit *fit, int want, size_t rows)
{
    if (want < 4)
        return 0;
    int t = 4;
    while (t * 2 <= want && t < 64)
        t *= 2;
    /* no larger than the rows need, but 16 at least: 16 work-items of a group still share each
     * loaded tile (a 4-row product is tiny whatever its form) */
    while (t > 16 && (size_t)t / 2 >= rows)
        t /= 2;
    while (t >= 4 && ((size_t)(t / 4) * (size_t)(t / 4) > fit->wg || mhla__dmix_tiled_local(t) > fit->local_bytes))
        t /= 2;
    return t >= 4 ? t : 0;
}

size_t mhla__bc_readout_wg(const mhla_tiles *t, int64_t dw)
{
    /* column tiles of the dw-wide output x token groups */
    return (size_t)(dw / (t->bct_ve * t->bct_nv)) * (size_t)(t->bct_tq / t->bct_rt);
}

uint64_t mhla__bc_readout_local(const mhla_tiles *t, int64_t dx)
{
    /* xs[TQ*DX] + ys[DX*KT] + sc[TQ*KT] + cb[KT] floats (kernels/backward_causal_readout.cl) */
    return ((uint64_t)t->bct_tq * (uint64_t)dx + (uint64_t)dx * (uint64_t)t->bct_kt +
            (uint64_t)t->bct_tq * (uint64_t)t->bct_kt + (uint64_t)t->bct_kt) *
           sizeof(float);
}

size_t mhla__bc_fused_wg(const mhla_tiles *t, int64_t dk, int64_t dv)
{
    /* column tiles of the wider output x row groups of the chunk */
    const int64_t dx = dk > dv ? dk : dv;
    return (size_t)(dx / (t->bct_ve * t->bct_nv)) * (size_t)(t->bct_fc / t->bct_rt);
}

uint64_t mhla__bc_fused_local(const mhla_tiles *t, int64_t dk, int64_t dv)
{
    /* xs[FC*DX] + yt[DX*FC] + sc[FC*FC] + cb[FC] + dg[work-items] floats (bc_dqkv) */
    const uint64_t fc = (uint64_t)t->bct_fc, dx = (uint64_t)(dk > dv ? dk : dv);
    return (2 * fc * dx + fc * fc + fc + (uint64_t)mhla__bc_fused_wg(t, dk, dv)) * sizeof(float);
}

size_t mhla__bc_tiled_wg(const mhla_tiles *t) { return (size_t)(t->bc_sq / 4) * (size_t)(t->bc_bk / 4); }

uint64_t mhla__bc_tiled_local(const mhla_config *cfg, const mhla_tiles *t)
{
    /* xt[DX][SQ+4], yt[DX][BK+4], wt[BK][DWP], pt[BK][SQ+4], xb[SQ], cb[BK] floats, and the
     * scalars' red[SQ][BK/4] (kernels/backward_causal_tiled.cl), the kernel whose arrays are the
     * largest: one a kind, or with bc_one a kernel for dq, dk and dv whose arrays are each the
     * largest of the three kinds' */
    const uint64_t sq = (uint64_t)t->bc_sq, bk = (uint64_t)t->bc_bk;
    const int kinds = cfg->normalizer == MHLA_NORMALIZER_PAPER ? 3 : 2;
    uint64_t worst = 0, one = 0;
    for (int kind = 0; kind < kinds; ++kind) { /* dq and dk (x: Dv, w: Dk), dv (x: Dk, w: Dv), scalars (x: Dk, w: Dv + 1) */
        const uint64_t dx = (uint64_t)(kind ? cfg->dk : cfg->dv);
        /* w rows padded to whole column quads of every work-item: BC_WQP */
        const uint64_t dw = (uint64_t)(kind == 0 ? cfg->dk : kind == 1 ? cfg->dv : cfg->dv + 1), cq = bk / 4;
        const uint64_t dwp = ((dw + 3) / 4 + cq - 1) / cq * cq * 4;
        const uint64_t b = sizeof(float) * (dx * (sq + 4) + dx * (bk + 4) + bk * dwp + bk * (sq + 4) + sq + bk +
                                            (kind == 2 ? sq * (bk / 4) : 0));
        worst = b > worst ? b : worst;
    }
    if (t->bc_one) { /* bc_dqkv_tiled: x rows of max(Dk, Dv), w rows of max(Dk, Dv) padded */
        const uint64_t dm = (uint64_t)(cfg->dk > cfg->dv ? cfg->dk : cfg->dv), cq = bk / 4;
        const uint64_t dmp = ((dm + 3) / 4 + cq - 1) / cq * cq * 4;
        one = sizeof(float) * (dm * (sq + 4) + dm * (bk + 4) + bk * dmp + bk * (sq + 4) + sq + bk);
    }
    return one > worst ? one : worst;
}

static int bc_tiled_fits(const mhla_config *cfg, const mhla_tiles *x, const mhla_fit *fit)
{
    return mhla__bc_tiled_wg(x) <= fit->wg && mhla__bc_tiled_local(cfg, x) <= fit->local_bytes;
}

/* The tiled read-outs start from the forward's causal read-out (causal_output.cl) on the same
 * device: its token rows, its vector width and vectors as far as they divide both Dk and Dv, its
 * tokens per group and keys per pass; then halve keys, tokens, vectors and token rows, in that
 * order, until a group fits. */
mhla_status mhla__tiles_backward_causal(mhla_context *ctx, const mhla_config *cfg, const mhla_shape *shape,
                                        const mhla_tuning *t, const mhla_fit *fit, mhla_tiles *out)
{
    mhla_status st = MHLA_OK;
    int64_t both = cfg->dk, r = cfg->dv;
    while (r) { /* gcd(Dk, Dv) */
        const int64_t rem = both % r;
        both = r, r = rem;
    }
    mhla_tiles x = *out;
    x.bct_ve = mhla__pow2_divisor(both, x.out_ve);
    x.bct_nv = mhla__pow2_divisor(both / x.bct_ve, x.out_nv);
    x.bct_rt = x.out_rt;
    /* S and G rows per work-item: as many as keep BCT_SR x Dv / BWD_VV accumulator vectors within
     * the row's bwd_acc */
    const int nv = (int)(cfg->dv / x.bwd_vv);
    x.bct_sr = mhla__pow2_divisor(cfg->dk, nv >= t->bwd_acc ? 1 : t->bwd_acc / nv);
    x.bct_tq = round_down_to(x.tq, x.bct_rt);
    x.bct_kt = (x.kt + x.bct_ve - 1) / x.bct_ve * x.bct_ve;
    const int64_t dx = cfg->dk > cfg->dv ? cfg->dk : cfg->dv;
    for (;;) {
        const int wide = mhla__bc_readout_wg(&x, cfg->dk) > fit->wg || mhla__bc_readout_wg(&x, cfg->dv) > fit->wg;
        const int deep = mhla__bc_readout_local(&x, dx) > fit->local_bytes;
        if (deep && x.bct_kt > x.bct_ve)
            x.bct_kt = (x.bct_kt / 2 + x.bct_ve - 1) / x.bct_ve * x.bct_ve;
        else if ((wide || deep) && x.bct_tq > x.bct_rt)
            x.bct_tq = round_down_to(x.bct_tq / 2, x.bct_rt);
        else if (wide && x.bct_nv > 1)
            x.bct_nv /= 2;
        else if (wide && x.bct_rt > 1)
            x.bct_rt = x.bct_tq = x.bct_rt / 2;
        else
            break;
    }
    MHLA_FAIL_IF(st, mhla__bc_readout_wg(&x, cfg->dk) > fit->wg || mhla__bc_readout_wg(&x, cfg->dv) > fit->wg ||
                         mhla__bc_readout_local(&x, dx) > fit->local_bytes,
                 ctx, MHLA_ERR_UNSUPPORTED,
                 "the causal backward's read-outs (dk = %lld, dv = %lld) do not fit %s (%zu work-items, %llu "
                 "bytes of local memory usable)",
                 (long long)cfg->dk, (long long)cfg->dv, ctx->device_name, fit->wg,
                 (unsigned long long)fit->local_bytes);
    /* bc_dqkv where the row asks for it and a whole chunk's group fits; else the three read-outs. A
     * chunk holds at most the sequence's tokens (the whole packed batch's, varlen): a chunk longer
     * than them needs no group sized for it. */
    x.bct_fc = 0;
    if (t->bct_fuse) {
        const int64_t step = x.bct_ve > x.bct_rt ? x.bct_ve : x.bct_rt;
        x.bct_fc = (int)((shape->nb + step - 1) / step * step);
        if (mhla__bc_fused_wg(&x, cfg->dk, cfg->dv) > fit->wg ||
            mhla__bc_fused_local(&x, cfg->dk, cfg->dv) > fit->local_bytes)
            x.bct_fc = 0;
    }
    /* backward_causal_tiled.cl where the row asks for it (bc_sq > 0: GPUs): no more tokens than a
     * chunk has (rounded up to 4), shrunk until the group and its arrays fit; it takes the place of
     * bc_dqkv and of the three read-outs above (still built: their program holds bc_diag). */
    x.bc_sq = x.bc_bk = x.bc_one = 0;
    if (t->bc_sq > 0) {
        const int chunk = (int)(shape->nb < 1 << 20 ? shape->nb : 1 << 20);
        x.bc_sq = min_int(tile4(t->bc_sq), up4(chunk)), x.bc_bk = min_int(tile4(t->bc_bk), up4(chunk));
        /* one launch (bct_fuse): the local arrays are the largest kind's (mhla__bc_tiled_local) */
        x.bc_one = t->bct_fuse != 0;
        if (shrink_quad_group(cfg, fit, &x, &x.bc_sq, &x.bc_bk, bc_tiled_fits))
            x.bct_fc = 0;
        else
            x.bc_sq = x.bc_bk = x.bc_one = 0;
    }
    /* bc_dqkv's score steps: the causal output's (sc_rt x sc_kv), in whole rows and vectors of
     * the chunk. */
    x.bcf_srt = x.bct_fc ? mhla__pow2_divisor(x.bct_fc, t->sc_rt) : 1;
    x.bcf_skv = x.bct_fc ? mhla__pow2_divisor(x.bct_fc / x.bct_ve, t->sc_kv) : 1;
    *out = x;
cleanup:
    return st;
}

/* ---- -D flags ---------------------------------------------------------------------------------- */

/* What each kernel file reads: DK, DV, layout, feature map, normalizer, storage type, and its
 * tiles. block_summary.cl has no normalizer (it always writes z), mixing.cl and causal_prefix.cl
 * see rows of floats only. */
enum {
    F_DK = 1 << 0,
    F_DV = 1 << 1,
    F_LAYOUT = 1 << 2,
    F_FEATURE = 1 << 3,
    F_NORM = 1 << 4,
    F_DTYPE = 1 << 5,
    F_SUM = 1 << 6,
    F_OUT = 1 << 7,
    F_MIX = 1 << 8,
    F_PRE = 1 << 9,
    F_CAUSAL = 1 << 10,
    F_SOFTMAX = 1 << 11,
    F_PF = 1 << 12,
    F_BWD = 1 << 13,
    F_BCT = 1 << 14,
    F_BNT = 1 << 15,
    F_BCF = 1 << 16,
    F_SLOT = 1 << 17,
    F_DMIX = 1 << 18,
    F_TL = 1 << 19,
    F_TLO = 1 << 20,
    F_GROUP = 1 << 21,
    F_BT = 1 << 22,
    F_SMT = 1 << 23,
    F_CT = 1 << 24,
    F_CP = 1 << 25,
    F_CS = 1 << 26,
    F_DEC = 1 << 27,
    F_BCC = 1 << 28,
    F_ONE = 1 << 29,
};
#define F_SHAPE (F_DK | F_DV | F_LAYOUT | F_FEATURE | F_NORM | F_DTYPE)

#define FILE_ROW(id, file, reads_) [MHLA_KF_##id] = {#file, reads_},
static const struct {
    const char *name;
    unsigned reads;
} files[] = {MHLA_KERNEL_FILES(FILE_ROW)};
#undef FILE_ROW

void mhla__build_options(mhla_kernel_file f, const mhla_config *c, const mhla_tiles *t, mhla_build_opts *opts)
{
    const unsigned r = files[f].reads;
    mhla__opts_init(opts);
    if (r & F_DK)
        mhla__opts_add(opts, "-DDK=%lld", (long long)c->dk);
    if (r & F_DV)
        mhla__opts_add(opts, "-DDV=%lld", (long long)c->dv);
    if (r & F_LAYOUT)
        mhla__opts_add(opts, "-DLAYOUT_BHND=%d", c->layout == MHLA_LAYOUT_BHND);
    if (r & F_FEATURE)
        mhla__opts_add(opts, "-DFEATURE_MAP=%d", (int)c->feature_map);
    if (r & F_NORM)
        mhla__opts_add(opts, "-DNORMALIZER=%d", (int)c->normalizer);
    if (r & F_DTYPE)
        mhla__opts_add(opts, "-DDTYPE=%d", (int)c->dtype);
    if (r & F_SUM)
        mhla__opts_add(opts, "-DSUM_RD=%d -DSUM_VE=%d -DSUM_NV=%d -DSUM_CHUNK=%d -DSUM_KB=%d -DSUM_LK=%d", t->sum_rd,
                       t->sum_ve, t->sum_nv, t->sum_chunk, t->sum_kb, t->sum_lk);
    if (r & F_OUT)
        mhla__opts_add(opts, "-DOUT_RT=%d -DOUT_VE=%d -DOUT_NV=%d -DOUT_DC=%d -DOUT_NT=%d -DOUT_PRE=%d -DOUT_PF=%d",
                       t->out_rt, t->out_ve, t->out_nv, t->out_dc, t->out_nt, t->out_pre, t->out_pf);
    if (r & F_CAUSAL)
        mhla__opts_add(opts, "-DCAUSAL_TQ=%d -DCAUSAL_KT=%d -DCAUSAL_SRT=%d -DCAUSAL_SKV=%d", t->tq, t->kt,
                       t->sc_rt, t->sc_kv);
    if (r & F_MIX)
        mhla__opts_add(opts, "-DMIX_MR=%d -DMIX_VE=%d -DMIX_NV=%d", t->mix_mr, t->mix_ve, t->mix_nv);
    if (r & F_PRE)
        mhla__opts_add(opts, "-DMIX_MR=%d -DMIX_NV=%d -DPRE_VE=%d", t->mix_mr, t->mix_nv, t->pre_ve);
    if (r & F_PF)
        mhla__opts_add(opts, "-DPREFETCH=%d", t->pf);
    if (r & F_SOFTMAX)
        mhla__opts_add(opts, "-DVW=%d -DBK=%d -DCOPY_ROWS=%d", t->sm_vw, t->sm_bk, t->sm_rows);
    if (r & F_BWD)
        mhla__opts_add(opts, "-DBWD_VW=%d -DBWD_VK=%d -DBWD_VV=%d -DBWD_RT=%d", t->bwd_vw, t->bwd_vk, t->bwd_vv,
                       t->bwd_rt);
    if (r & F_BNT)
        mhla__opts_add(opts, "-DBWD_NT=%d -DBWD_PF=%d", t->bwd_nt, t->out_pf);
    if (r & F_BCT)
        mhla__opts_add(opts, "-DBCT_RT=%d -DBCT_VE=%d -DBCT_NV=%d -DBCT_TQ=%d -DBCT_KT=%d -DBCT_SR=%d", t->bct_rt,
                       t->bct_ve, t->bct_nv, t->bct_tq, t->bct_kt, t->bct_sr);
    if (r & F_BCF)
        mhla__opts_add(opts, "-DBCT_FC=%d -DBCF_SRT=%d -DBCF_SKV=%d", t->bct_fc, t->bcf_srt, t->bcf_skv);
    if (r & F_SLOT)
        mhla__opts_add(opts, "-DSLOT_PAD=%d", t->slot_pad);
    if (r & F_DMIX) {
        mhla__opts_add(opts, "-DBWD_TM=%d", t->bwd_tm);
        if (t->dm_t > 0)
            mhla__opts_add(opts, "-DDM_T=%d", t->dm_t);
    }
    if (r & F_TL)
        mhla__opts_add(opts, "-DTL_TK=%d -DTL_TD=%d -DTL_TV=%d -DTL_RR=%d", t->tl_tk, t->tl_td, t->tl_tv, t->tl_rr);
    if (r & F_TLO)
        mhla__opts_add(opts, "-DTL_TQ=%d -DTL_TV=%d -DTL_DC=%d -DTL_QR=%d", t->tl_tq, t->tl_tv, t->tl_dc, t->tl_qr);
    if (r & F_ONE)
        mhla__opts_add(opts, "-DON_TV=%d -DON_KS=%d -DON_TK=%d -DON_DC=%d", t->on_tv, t->on_ks, t->on_tk, t->on_dc);
    if (r & F_SMT)
        mhla__opts_add(opts, "-DSM_SQ=%d -DSM_BK=%d", t->sm_bq, t->sm_bk);
    if (r & F_BT)
        mhla__opts_add(opts, "-DBT_TQ=%d -DBT_TV=%d -DBT_DC=%d", t->bt_tq, t->bt_tv, t->bt_dc);
    if (r & F_CT)
        mhla__opts_add(opts, "-DCT_SQ=%d -DCT_BK=%d", t->ct_sq, t->ct_bk);
    if (r & F_CS)
        mhla__opts_add(opts, "-DCS_TK=%d -DCS_TN=%d", t->cs_tk, t->cs_tn);
    if (r & F_CP)
        mhla__opts_add(opts, "-DCP_TI=%d -DCP_TW=%d -DCP_TJ=%d", t->cp_ti, t->cp_tw, t->cp_tj);
    if (r & F_BCC)
        mhla__opts_add(opts, "-DBC_SQ=%d -DBC_BK=%d -DBC_ONE=%d", t->bc_sq, t->bc_bk, t->bc_one);
    if (r & F_DEC)
        mhla__opts_add(opts, "-DSTEP_DP=%d -DSTEP_NEXT=%d", t->dec_dp, t->dec_next);
    if (r & F_GROUP) /* the query heads of a key/value head (1 but for grouped key/value heads) */
        mhla__opts_add(opts, "-DKV_GROUP=%lld", (long long)(c->kv_heads ? c->heads / c->kv_heads : 1));
}

mhla_status mhla__program_for(mhla_context *ctx, mhla_kernel_file f, const mhla_config *c, const mhla_tiles *t,
                              cl_program *out)
{
    mhla_build_opts opts;
    mhla__build_options(f, c, t, &opts);
    return mhla__program_get(ctx, files[f].name, &opts, out);
}
