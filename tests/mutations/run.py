#!/usr/bin/env python3
"""Mutation check: puts known defects back into a copy of the library, one at a time, and
asserts that each is caught by the test cases named for it, with a failure message that names what
broke. A test that passes with the defect in place is a test that cannot fail where it matters.

    tests/mutations/run.py [--work DIR] [--only NAME[,NAME]] [--report FILE] [--passed TESTLOG]
                           [--no-controls | --controls-only --passed TESTLOG]

DIR (default: build-mutations/ beside build/) receives a copy of the tree (tracked and untracked,
not ignored, files: what is being tested, committed or not) and its own Meson build. Each mutation
edits files of the copy, rebuilds (a host file: the library; a kernel: its embedded text), runs
each catching case (`meson test`'s command and environment for that test, MHLA_TEST_FILTER set to
the case) and restores the files. First, every catching case runs once on the unchanged copy and
must pass (or have passed in the meson run whose testlog.json --passed names). --no-controls leaves
that to a later --controls-only --passed TESTLOG, which only reads the log (no copy, no build): the
test command runs the mutations beside meson's tests, whose own run of those cases then serves.
Exit status 0 when every mutation is caught by every case named for it; --report writes
the table as Markdown (tests/mutations/README.md keeps the last one).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Mutation:
    """A defect: `edits` are (file, old, new, count) replacements, `catch` the (meson test, cmocka case
    pattern, text its output must contain) that must fail with it."""

    def __init__(self, name, defect, edits, catch):
        self.name, self.defect, self.edits, self.catch = name, defect, edits, catch


# Defects that once passed every test (the first nine mutations, the NaN one as two rows: eps values
# too small to move an output past its tolerance, no input at exactly 0, no bit-for-bit check of
# 16-bit stores, a NaN dropped by fmax(), untested overflow checks), then others of the same kinds.
# A case named here must fail when the defect is in, and say what broke.
MUTATIONS = [
    Mutation("causal-readout-drops-feature-eps", "causal read-out drops feature_eps (relu-eps)",
             [("kernels/causal_output.cl", "FEATURE_V(ST_W, raw, feature_eps)", "FEATURE_V(ST_W, raw, 0.0f)", 3),
              ("kernels/causal_output.cl", "READOUT_TILE(qrow, P, zp, scale, feature_eps, acc, dz)",
               "READOUT_TILE(qrow, P, zp, scale, 0.0f, acc, dz)", 1)],
             [("causal", "test_modes_matrix", "/relu-eps/"), ("varlen", "test_varlen_vs_reference", "varlen bhnd")]),
    Mutation("official-drops-eps", "official normalizer drops +eps",
             [("kernels/output.cl", "const float inv = den[((long)blk * g.bh + bh) * g.nb + p0 + r] + eps;",
               "const float inv = den[((long)blk * g.bh + bh) * g.nb + p0 + r];", 1)],
             [("forward", "test_modes_matrix", "official/")]),
    Mutation("relu-grad-at-zero", "relu / relu-eps gradient at exactly 0 (`>` to `>=`)",
             [("kernels/backward.h", "select((VEC(W))(0.0f), (VEC(W))(1.0f), (x) > (VEC(W))(0.0f))",
               "select((VEC(W))(0.0f), (VEC(W))(1.0f), (x) >= (VEC(W))(0.0f))", 1)],
             [("backward", "test_backward_exact_zeros", "= 0 but d")]),
    Mutation("f16-store-rounds-toward-zero", "f16 store rounds toward zero instead of to nearest even",
             [("kernels/common.h", "_rte(x, o, p)", "_rtz(x, o, p)", 5)],
             [("rounding", "test_*", "(rounded toward zero)")]),
    Mutation("bf16-store-truncates", "bf16 store truncates instead of rounding to nearest even",
             [("kernels/common.h", ": (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);", ": u >> 16);", 1),
              ("kernels/common.h", "select(((u) + 0x7FFFu + (((u) >> 16) & 1u)) >> 16,", "select((u) >> 16,", 1)],
             [("rounding", "test_*", "bf16")]),
    Mutation("config-overflow-checks-removed", "host/config/config.c's INT_MAX / 64-bit overflow checks removed",
             [("host/config/config.c", "CHECK(mul_ok(cfg->seq_h, cfg->seq_w, INT_MAX, &hw) && mul_ok(hw, cfg->seq_t, INT_MAX, &n),",
               "(void)mul_ok(cfg->seq_h, cfg->seq_w, INT64_MAX, &hw), (void)mul_ok(hw, cfg->seq_t, INT64_MAX, &n);\n"
               "    CHECK(1,", 1),
              ("host/config/config.c", "CHECK(mul_ok(cfg->batch, cfg->heads, INT_MAX, &bh),",
               "(void)mul_ok(cfg->batch, cfg->heads, INT64_MAX, &bh);\n    CHECK(1,", 1),
              ("host/config/config.c", "CHECK(mul_ok(bh, n, INT64_MAX / 8, &elems) && mul_ok(elems, dmax, INT64_MAX / 8, &elems),",
               "elems = bh * n * dmax;\n    CHECK(1,", 1)],
             [("config", "test_token_count_limit", "has more than 2147483647 tokens"),
              ("config", "test_batch_heads_limit", "batch * heads"),
              ("config", "test_element_count_limit", "overflows 64-bit sizes")]),
    Mutation("reference-nan-forward", "the double reference emits one NaN element (forward)",
             [("host/verify/reference.c", "out[mhla__ref_offset(&cfg, N, b, t, h, e, Dv)] = num / den;",
               "out[mhla__ref_offset(&cfg, N, b, t, h, e, Dv)] = b + t + h + e == 0 ? NAN : num / den;", 1)],
             [("reference", "test_reference_matches_token_level", "[0] is nan"),
              ("forward", "test_modes_matrix", "reference[0] is nan")]),
    Mutation("reference-nan-dq", "the double reference emits one NaN element (dq)",
             [("host/verify/reference_backward.c",
               "dq[idx(sv, t, d, Dk)] = dqt[t * Dk + d] * scale * phi_prime(q[idx(sv, t, d, Dk)], c->feature_map);",
               "dq[idx(sv, t, d, Dk)] = t + d == 0 ? NAN : dqt[t * Dk + d] * scale * phi_prime(q[idx(sv, t, d, Dk)], c->feature_map);", 1)],
             [("reference_backward", "test_fd_causal", "is nan"), ("backward", "test_backward_causal", "dq")]),
    Mutation("decoder-step-hardcodes-relu", "decoder step hard-codes relu for q and k",
             [("kernels/decoder.cl", "ql[d] = scale * feature(LOADN(1, qrow + d, q), feature_eps);",
               "ql[d] = scale * fmax(LOADN(1, qrow + d, q), 0.0f);", 1),
              ("kernels/decoder.cl", "kl[d] = feature(LOADN(1, qrow + d, k), feature_eps);",
               "kl[d] = fmax(LOADN(1, qrow + d, k), 0.0f);", 1)],
             [("decoder", "test_decode_maps_and_eps", "relu-eps")]),
    Mutation("paper-drops-eps", "paper normalizer drops +eps",
             [("kernels/output.cl", "const float inv = dsum[r] + eps;", "const float inv = dsum[r];", 1)],
             [("forward", "test_modes_matrix", "paper/")]),
    Mutation("reference-relu-grad-at-zero", "the double reference's relu gradient at exactly 0 (`>` to `>=`)",
             [("host/verify/reference_backward.c", "    case MHLA_FEATURE_RELU_EPS:\n        return x > 0.0 ? 1.0 : 0.0;",
               "    case MHLA_FEATURE_RELU_EPS:\n        return x >= 0.0 ? 1.0 : 0.0;", 1)],
             [("reference_backward", "test_zero_derivative_at_zero", "= 0 but its gradient is")]),
    Mutation("bf16-store-rounds-half-away", "bf16 store rounds ties away from zero",
             [("kernels/common.h", ": (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);", ": (u + 0x8000u) >> 16);", 1),
              ("kernels/common.h", "select(((u) + 0x7FFFu + (((u) >> 16) & 1u)) >> 16,", "select(((u) + 0x8000u) >> 16,", 1)],
             [("rounding", "test_forward_rounds_to_nearest_even", "(rounded half away from zero)")]),
    Mutation("summary-32-bit-strides", "block summaries step through tokens with 32-bit strides",
             [("kernels/block_summary.cl", "const long kstride = row_stride(g, DK), vstride = row_stride(g, DV);",
               "const int kstride = row_stride(g, DK), vstride = row_stride(g, DV);", 1)],
             [("large", "test_bnhd_token_offsets", "bnhd")]),
    Mutation("decoder-step-reads-p0", "the decoder's step reads chunk 0's prefix mixture from memory (with dec_next "
             "nothing writes it: whatever a GPU's fresh buffer held, NaN under MHLA_POISON_WORKSPACE)",
             [("kernels/decoder.cl", "{ return chunk > 0 ? pref[o] : 0.0f; }", "{ return pref[o]; }", 1)],
             [("decoder", "test_step_parts_limits", "row=gpu,dec_next=1, Dk 64 Dv 64")]),
    Mutation("clblast-cache-kept", "the last context that used CLBlast leaves CLBlast's cached programs holding it",
             [("host/core/blas.c", "        CLBlastClearCache();\n", "        (void)0;\n", 1)],
             [("context", "test_clblast_programs_released", "s after mhla_context_destroy (polled while above")]),
    Mutation("tiled-readout-32-bit-offsets", "the GPU rows' tiled read-out stores at a token's offset cut to 32 bits",
             [("kernels/output_tiled.cl", "tiled_store(y, ob + token_of(g, blk, p) * os, DV - c, oa);",
               "tiled_store(y, ob + (int)(token_of(g, blk, p) * os), DV - c, oa);", 1)],
             [("large", "test_bnhd_token_offsets_gpu_row", "bnhd, row=gpu: the forward crashed")]),
    Mutation("backward-drops-eps", "the backward's paper denominators drop +eps",
             [("kernels/backward_readout.cl", "inv = 1.0f / (dn + eps);", "inv = 1.0f / dn;", 1),
              ("kernels/backward_causal.cl", "const float inv = 1.0f / (den + eps);", "const float inv = 1.0f / den;", 1)],
             [("backward", "test_backward_eps_non_causal", "paper relu-eps"),
              ("backward", "test_backward_eps_causal", "paper relu-eps")]),
    Mutation("tiled-key-sums-one-row-each", "the tiled summary sums one key row per work-item (a group "
             "smaller than its rows drops the rest)",
             [("kernels/summary_tiled.cl", "for (int d = lid; d < TL_TD; d += TL_WG) {\n                float z = zl[d];",
               "for (int d = lid; d < TL_TD && d < TL_WG; d += TL_WG) {\n                float z = zl[d];", 1)],
             [("forward", "test_tiled_limits", "tiled, Dk 7 Dv 5")]),
    Mutation("tiled-dots-restart-per-tile", "the tiled read-out's q~ . z~ restarts at each tile of dimensions",
             [("kernels/output_tiled.cl", "float ds = dl[i];", "float ds = 0.0f;", 1)],
             [("forward", "test_tiled_limits", "tiled and mixing, Dk 96 Dv 64")]),
    Mutation("backward-summary-drops-feature-eps", "the backward's summaries drop feature_eps",
             [("kernels/backward_summary.cl", "acc += wt * FEATURE_V(BWD_VK, x, feature_eps);",
               "acc += wt * FEATURE_V(BWD_VK, x, 0.0f);", 1)],
             [("backward", "test_backward_eps_non_causal", "relu-eps")]),
    Mutation("tiled-backward-dots-one-piece", "the tiled backward's per-token dots keep one work-item's piece of "
             "the row",
             [("kernels/backward_tiled.cl", "for (int j = 0; j < BT_QV; ++j)\n            dn += dpart",
               "for (int j = 0; j < 1; ++j)\n            dn += dpart", 1)],
             [("backward", "test_backward_tiled_limits", "tiled backward, Dk 16 Dv 8")]),
    Mutation("causal-tiled-mask-one-late", "the tiled causal read-out lets each token see the key after it",
             [("kernels/causal_tiled.cl", "key <= t ? mii * sc[r].s0", "key <= t + 1 ? mii * sc[r].s0", 1),
              ("kernels/causal_tiled.cl", "key + 1 <= t ? mii", "key + 1 <= t + 1 ? mii", 1),
              ("kernels/causal_tiled.cl", "key + 2 <= t ? mii", "key + 2 <= t + 1 ? mii", 1),
              ("kernels/causal_tiled.cl", "key + 3 <= t ? mii", "key + 3 <= t + 1 ? mii", 1)],
             [("causal", "test_tiled_limits", "MHLA_LIMITS=wg=64,local=16K, tiled")]),
    Mutation("causal-tiled-masked-times-zero", "the tiled causal read-out adds a masked key as zero times its v "
             "(a later token's NaN reaches an earlier one)",
             [("kernels/causal_tiled.cl", "if (ks <= t0 + 1)\n", "if (ks <= t0 + 2)\n", 1)],
             [("causal", "test_tiled_limits", "NaN/Inf from token 70 on")]),
    Mutation("causal-prefix-tiled-own-chunk", "the tiled causal prefix adds a row's own chunk (j <= i) on the "
             "diagonal tile",
             [("kernels/causal_prefix_tiled.cl", "if (j < i0 + 1)\n", "if (j <= i0 + 1)\n", 1)],
             [("causal", "test_tiled_limits", "NaN/Inf from token 70 on")]),
    Mutation("causal-prefix-tiled-skips-tiles", "the tiled causal prefix reads only the first tile of earlier chunks",
             [("kernels/causal_prefix_tiled.cl", "j0 < jend; j0 += CP_TJ", "j0 < min(jend, CP_TJ); j0 += CP_TJ", 1)],
             [("causal", "test_tiled_limits", "MHLA_LIMITS=wg=128,local=32K, tiled")]),
    Mutation("causal-summary-tiled-whole-tiles-only", "the tiled chunk summaries drop a chunk's last partial "
             "tile of tokens",
             [("kernels/causal_summary_tiled.cl", "p0 < ch.y; p0 += CS_TK", "p0 + CS_TK <= ch.y; p0 += CS_TK", 1)],
             [("causal", "test_tiled_limits", "MHLA_LIMITS=wg=128,local=32K, tiled")]),
    Mutation("causal-suffix-tiled-first-tile-only", "the backward's tiled suffix mixtures read only the first tile "
             "of later chunks",
             [("kernels/causal_prefix_tiled.cl", "i0 < m; i0 += CP_TJ", "i0 < min(m, j0 + 1 + CP_TJ); i0 += CP_TJ", 1)],
             [("backward", "test_backward_tiled_limits", "MHLA_LIMITS=wg=64,local=16K row=gpu, tiled causal backward, Dk 16 Dv 8")]),
    Mutation("bc-tiled-skips-visible-pairs", "the causal backward's tiled read-outs skip a pair tile's tokens "
             "one row too early on the diagonal",
             [("kernels/backward_causal_tiled.cl", "s0 = before ? 0 : max(0, x0 - kb), s1 = before ? min(BC_BK, x0 + 4 - kb)",
               "s0 = before ? 0 : max(0, x0 + 1 - kb), s1 = before ? min(BC_BK, x0 + 3 - kb)", 1)],
             [("backward", "test_backward_tiled_limits", "row=gpu, tiled causal backward, Dk 16 Dv 8: dq")]),
    Mutation("bc-tiled-dk-drops-pair-bias", "the causal backward's tiled dk drops the paper normalizer's r_t of "
             "each pair",
             [("kernels/backward_causal_tiled.cl", "cb[c] = c < nk ? bct_r(rs, (long)bh * g.n + t0 + kb + c) : 0.0f;",
               "cb[c] = 0.0f;", 1)],
             [("backward", "test_backward_tiled_limits", "row=gpu, tiled causal backward, Dk 16 Dv 8: dk")]),
    Mutation("bc-tiled-slot-first-rows", "the causal backward's tiled read-outs take only the first tile of the "
             "slot's rows",
             [("kernels/backward_causal_tiled.cl", "for (int pb = 0; pb < DX; pb += BC_BK)",
               "for (int pb = 0; pb < min(DX, BC_BK); pb += BC_BK)", 1)],
             [("backward", "test_backward_tiled_limits", "row=gpu, tiled causal backward, Dk 16 Dv 8: dq")]),
    Mutation("bc-tiled-scalars-den-prefix-only", "the causal backward's tiled per-token scalars leave the "
             "intra-chunk pairs out of the paper normalizer's denominator",
             [("kernels/backward_causal_tiled.cl", ": kind == KIND_SC && o == DV\n                                         ? 1.0f",
               ": kind == KIND_SC && o == DV\n                                         ? 0.0f", 1)],
             [("backward", "test_backward_tiled_limits", "row=gpu, tiled causal backward, Dk 16 Dv 8: dq")]),
    Mutation("bc-summary-tiled-whole-tiles-only", "the causal backward's tiled chunk and gradient summaries drop "
             "a chunk's last partial tile of tokens",
             [("kernels/backward_causal_tiled.cl", "for (int s0 = 0; s0 < len; s0 += CS_TK)",
               "for (int s0 = 0; s0 + CS_TK <= len; s0 += CS_TK)", 1)],
             [("backward", "test_backward_tiled_limits", "row=gpu, tiled causal backward, Dk 16 Dv 8: dq")]),
    Mutation("output-tiled-official-drops-eps", "the tiled read-out's official normalizer drops +eps",
             [("kernels/output_tiled.cl", "acc[r] / ((den_mixed ? den[((long)blk * g.bh + bh) * g.nb + p] : dl[t]) + eps);",
               "acc[r] / (den_mixed ? den[((long)blk * g.bh + bh) * g.nb + p] : dl[t]);", 1)],
             [("forward", "test_tiled_limits", "tiled, Dk 7 Dv 5 official")]),
    Mutation("output-tiled-official-dots-first-block", "the tiled read-out mixes the official normalizer's dots of "
             "the first block only",
             [("kernels/output_tiled.cl", "for (int b = 0; b < g.kv_m && p < g.nb; ++b)",
               "for (int b = 0; b < 1 && p < g.nb; ++b)", 1)],
             [("forward", "test_tiled_limits", "tiled, Dk 7 Dv 5 official")]),
    Mutation("mixing-splits-ignores-transpose", "the tiled backward's dS = Mc^T G mixes by Mc, not its transpose",
             [("kernels/mixing.cl", "a_trans ? a[(long)(kb0 + kk) * m + row] : a[(long)row * k + kb0 + kk];",
               "a[(long)row * k + kb0 + kk];", 1)],
             [("backward", "test_backward_tiled_limits", "row=gpu,bt_dc=4, tiled backward, Dk 16 Dv 8: dk")]),
    Mutation("bwd-dq-tiled-official-first-den", "the tiled backward's dq divides every token of a tile by "
             "the tile's first official denominator",
             [("kernels/backward_tiled.cl", "dn = p0 + t < g.nb ? den[at + t] : 1.0f;", "dn = p0 + t < g.nb ? den[at] : 1.0f;", 1)],
             [("backward", "test_backward_tiled_limits", "wg=64,local=16K row=gpu, tiled backward, Dk 7 Dv 5: dq")]),
    Mutation("bc-tiled-diag-first-lane-only", "the causal backward's tiled dk adds dMc's diagonal term from the "
             "first key dimension of each quad only",
             [("kernels/backward_causal_tiled.cl",
               "part += dot(acc[j][r], FEATURE_V(4, tiled_quad(krow, cc, DK, 0), feature_eps));",
               "part += acc[j][r].x * FEATURE_V(4, tiled_quad(krow, cc, DK, 0), feature_eps).x;", 1)],
             [("backward", "test_backward_tiled_limits", "row=gpu, tiled causal backward, Dk 16 Dv 8: dmixing")]),
    Mutation("dmix-tiled-skips-diagonal-tiles", "dMc's tiled products store zeros for the causal form's tiles on "
             "the diagonal, not only those above it",
             [("kernels/backward_mixing.cl", "if (!(lower && b0 >= i0 + DM_T))", "if (!(lower && b0 >= i0))", 1)],
             [("backward", "test_backward_tiled_limits", "row=gpu, tiled causal backward, Dk 16 Dv 8: dmixing")]),
    Mutation("dmix-tiled-drops-partial-x-tile", "dMc's tiled products drop a piece's last partial tile of x-values",
             [("kernels/backward_mixing.cl", "for (long xk = x0; xk < x1; xk += DM_K)",
               "for (long xk = x0; xk + DM_K <= x1; xk += DM_K)", 1)],
             [("backward", "test_backward_tiled_limits", "row=gpu,tl_rr=8, tiled backward, Dk 7 Dv 5: dmixing")]),
    Mutation("summary-tiled-8row-first-quad", "the tiled summary's 8-row register tiles add only their first "
             "four rows",
             [("kernels/summary_tiled.cl", "for (int q = 0; q < TL_RQ; ++q)", "for (int q = 0; q < 1; ++q)", 1)],
             [("forward", "test_tiled_limits", "tiled and mixing 8-row 8-token, Dk 32 Dv 48"),
              ("backward", "test_backward_tiled_limits", "row=gpu,tl_rr=8, tiled backward, Dk 7 Dv 5")]),
    Mutation("output-tiled-8token-first-quad", "the tiled read-out's 8-token register tiles add only their first "
             "four tokens",
             [("kernels/output_tiled.cl", "for (int u = 0; u < TL_RQ; ++u)", "for (int u = 0; u < 1; ++u)", 1)],
             [("forward", "test_tiled_limits", "tiled and mixing 8-row 8-token, Dk 32 Dv 48")]),
    Mutation("decoder-parts-drop-last", "the decoder's step in parts adds all but the last part of Dk",
             [("kernels/decoder.cl", "for (int r = 1; r < STEP_DP; ++r)\n                sum += part[(r * DP_QG + j)",
               "for (int r = 1; r < STEP_DP - 1; ++r)\n                sum += part[(r * DP_QG + j)", 1)],
             [("decoder", "test_step_parts_limits", "MHLA_LIMITS=wg=64,local=16K, row=gpu, Dk 20 Dv 24")]),
    Mutation("decoder-prefix-parts-drop-last", "the decoder's chunk start in parts leaves out the earlier chunks "
             "of its last part",
             [("kernels/decoder.cl", "for (int r = 1; r < STEP_DP; ++r)\n            sum += part[r * lanes + lx];",
               "for (int r = 1; r < STEP_DP - 1; ++r)\n            sum += part[r * lanes + lx];", 1)],
             [("decoder", "test_step_parts_limits", "MHLA_LIMITS=wg=64,local=16K, row=gpu, Dk 20 Dv 24")]),
    Mutation("decoder-next-drops-running-chunk", "the steps that sum the next chunk's prefix leave out the "
             "chunk they run in",
             [("kernels/decoder.cl", "nxt[o] = last ? fma(m[chunk], s, a) : a;", "nxt[o] = a;", 1)],
             [("decoder", "test_step_parts_limits", "MHLA_LIMITS=wg=128,local=32K, row=gpu,dec_next=1, Dk 64 Dv 64")]),
    Mutation("decoder-resume-skips-first-chunk", "a resumed decoder's prefix so far leaves out chunk 0",
             [("kernels/decoder.cl", "for (int j = 0; j < count; ++j)\n        a = fma(",
               "for (int j = 1; j < count; ++j)\n        a = fma(", 1)],
             [("decoder", "test_state_save_restore", "dec_next=1, restored at 40")]),
    Mutation("dmix-second-pair-from-its-end", "the official normalizer's second pair of dMc operands (r and the "
             "dots) starts its chunks where the first pair's end",
             [("kernels/backward_mixing.cl", "const long x0 = (long)((c_) - (second ? chunks1 : 0)) * len",
               "const long x0 = (long)(c_) * len", 1)],
             [("backward", "test_backward_tiled_limits", "MHLA_LIMITS=wg=64,local=16K row=gpu, tiled backward, Dk 7 "
               "Dv 5: dmixing")]),
    Mutation("bwd-fused-ds-mc-untransposed", "the dk/dv read-out that mixes dS_b itself weights G_i by Mc[b,i], "
             "not Mc[i,b]",
             [("kernels/backward_tiled.cl", "summary_s_offset(g.bh, 0, bh, 0), mc, step, blk, g.kv_m,",
               "summary_s_offset(g.bh, 0, bh, 0), mc, step, (long)blk * g.kv_m, 1,", 1)],
             [("backward", "test_backward_tiled_limits", "MHLA_LIMITS=wg=128,local=32K row=gpu,tl_rr=8, tiled "
               "backward, Dk 7 Dv 5: dk")]),
    Mutation("bwd-fused-mix-skips-first-block", "a tiled backward read-out that mixes its block's matrix itself "
             "leaves out block 0",
             [("kernels/backward_tiled.cl", "for (int j = 0; j < m.sources; ++j)",
               "for (int j = 1; j < m.sources; ++j)", 1)],
             [("backward", "test_backward_tiled_limits", "MHLA_LIMITS=wg=128,local=32K row=gpu,tl_rr=8, tiled "
               "backward, Dk 7 Dv 5: dq")]),
    Mutation("saved-backward-trusts-unmixed", "a backward after a saved forward whose read-out mixed the summaries "
             "itself reads mixtures that forward never wrote",
             [("host/backward/backward.c", "const int mixed_kept = reuse && !mhla__output_mixes(plan);",
               "const int mixed_kept = reuse;", 1)],
             [("backward", "test_backward_saved_summaries", "saved from the first forward, GPU row, tl_one, gradient 0")]),
    Mutation("fused-readout-ignores-rereads", "the read-outs mix their block's matrix themselves however much "
             "they read again (the backward's 1 GiB at B = 8, N = 4096 for one launch saved)",
             [("host/tune/tiling.c",
               "mhla__fuse_fits(cfg, heads, blocks, block_tokens, bt_tq, sources, fuse_mb);", "1;", 1),
              ("host/forward/output.c",
               "(int64_t)t->tl_fuse >= sources &&\n           mhla__fuse_fits(", "(int64_t)t->tl_fuse >= sources &&\n           1 | mhla__fuse_fits(", 1)],
             [("forward", "test_tiled_limits", "bytes re-read: the read-out mixes"),
              ("backward", "test_backward_tiled_limits", "row=gpu,tl_rr=8,fuse_mb=0, tiled backward, Dk 7 Dv 5: the "
               "read-outs mix")]),
    Mutation("gqa-head-interleaved", "grouped heads: query head h reads kv head h % H_kv, not h / (H / H_kv)",
             [("kernels/common.h", "(bh - batch * g.heads) / (g.heads / g.kv_heads);",
               "(bh - batch * g.heads) % g.kv_heads;", 1)],
             [("cross", "test_cases", "gqa 4/2 1D f32  forward")]),
    Mutation("gqa-dk-first-head-only", "grouped heads: a kv head's gradient summary keeps its first query head's",
             [("kernels/backward_summary.cl", "for (int j = 0; j < group; ++j)\n        acc += row",
               "for (int j = 0; j < 1; ++j)\n        acc += row", 1)],
             [("cross", "test_cases", "gqa 4/2 1D  dk")]),
    Mutation("bc-one-launch-dv-reads-prefix", "the causal backward's tiled read-outs in one launch give dv the "
             "prefix slots P^T (dq's) in place of dS",
             [("kernels/backward_causal_tiled.cl", "kind == KIND_DQ ? slots_p : slots_ds", "kind != KIND_DK ? slots_p : slots_ds", 1)],
             [("backward", "test_backward_tiled_limits", "bct_fuse=1, tiled causal backward, Dk 24 Dv 18: dv")]),
    Mutation("dmix-reduce-finish-drops-last-piece", "the causal backward's dMc, one sequence, leaves out its "
             "products' last piece of partial sums",
             [("kernels/backward_causal_readout.cl", "for (int c = 0; c < pieces; ++c)", "for (int c = 0; c < pieces - 1; ++c)", 1)],
             [("backward", "test_backward_tiled_limits", "row=gpu, tiled causal backward, Dk 16 Dv 8: dmixing")]),
    Mutation("tiled-forward-trusts-device-wg", "the tiled forward keeps tiles sized by the device's work-group "
             "limit when a built kernel allows fewer work-items (a GPU's register-heavy kernel)",
             [("host/forward/tiled.c", "if (swg >= sw && owg >= ow) {", "if (1) {", 1)],
             [("errors", "test_forced_limits", "MHLA_LIMITS=kwg=64: the plan says")]),
    Mutation("tune-row-entry-unnamed", "`mhla tune --row` stores its entry without the row it was searched from "
             "(laid over the device's own row, the fields land on other kernels than the ones timed)",
             [("cli/cmd_tune.c", "spec_text(&best, row_switch, spec, sizeof spec);",
               "spec_text(&best, 0, spec, sizeof spec);", 1)],
             [("cli", "test_tune_row", "does not name its row")]),
    Mutation("tune-backward-check-positive-inputs", "`mhla tune` checks the backward's candidates on all-positive "
             "v and dO, where dq is a difference of two large terms: every row's starting point past the tolerance "
             "at Dk = 64, and the search stopped there",
             [("cli/tune_backward.c", "lows[i], 1.0f);", "0.05f, 1.0f);", 1)],
             [("cli", "test_tune_row", "tiled-backward: the starting tiles fail the reference check")]),
    Mutation("one-launch-slices-dropped", "the one-launch forward keeps only its first token slice's sums (S~ and z~)",
             [("kernels/forward_one.cl", "for (int j = 1; j < ON_KS; ++j)", "for (int j = 1; j < 1; ++j)", 2)],
             [("forward", "test_one_launch_limits", "one launch, Dk 7 Dv 5")]),
    Mutation("one-launch-dots-restart", "the one-launch forward's q~ . z~ restarts at each tile of dimensions",
             [("kernels/forward_one.cl", "const int dn = min(ON_DC, ON_DK4 - d0);",
               "const int dn = min(ON_DC, ON_DK4 - d0);\n            dots = (float4)(0.0f);", 1)],
             [("forward", "test_one_launch_limits", "one launch, Dk 96 Dv 64")]),
    Mutation("one-launch-while-saved", "a plan keeping its summaries for a backward runs its forward in one launch, "
             "which writes none",
             [("host/forward/forward_one.c", "return plan->k_one != NULL && !plan->save_for_backward;",
               "return plan->k_one != NULL;", 1)],
             [("backward", "test_backward_saved_summaries", "saved from the first forward, GPU row, tl_one")]),
    Mutation("build-empty-log-not-retried", "a build that fails with an empty log (another process replaced "
             "its compile cache entry) is reported instead of built again",
             [("host/core/program.c", "if (attempt == 1 && err == CL_BUILD_PROGRAM_FAILURE && log && is_blank(log)) {",
               "if (0) {", 1)],
             [("program_cache", "test_build_retried_after_empty_log", "a build that failed once with an empty log")]),
    Mutation("build-error-retried", "a compile error, whose log says why, is built a second time",
             [("host/core/program.c", "if (attempt == 1 && err == CL_BUILD_PROGRAM_FAILURE && log && is_blank(log)) {",
               "if (attempt == 1 && err == CL_BUILD_PROGRAM_FAILURE && log) {", 1)],
             [("errors", "test_kernel_build_failure", "a compile error was built twice")]),
    Mutation("blas-build-not-retried",
             "a CLBlast GEMM whose program fails to build is reported instead of called again",
             [("host/core/blas.c", "if (s != CLBlastOpenCLBuildProgramFailure || attempt == 2)", "if (1)", 1)],
             [("program_cache", "test_build_retried_after_empty_log", "CLBlast's build failed once")]),
    Mutation("alloc-perturb-dropped", "the library's new blocks are not filled under MHLA_MALLOC_PERTURB (the tests' "
             "check of its host code, glibc's filling off)",
             [("host/core/alloc.c", "memset((char *)p + from, b ^ 0xff, to - from);", "(void)from;", 1)],
             [("alloc", "test_new_blocks_filled", "not honoured")]),
    Mutation("free-perturb-dropped", "the library's freed blocks are not filled under MHLA_MALLOC_PERTURB",
             [("host/core/alloc.c", "fill(p, b, usable_size(p));", "(void)fill;", 1)],
             [("alloc", "test_freed_blocks_filled", "not honoured")]),
]


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def copy_tree(src, dst):
    """The files git knows (tracked, or untracked and not ignored), as they are on disk."""
    files = sh(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=src).stdout.split("\0")
    for f in filter(None, files):
        s, d = os.path.join(src, f), os.path.join(dst, f)
        if not os.path.isfile(s):
            continue  # deleted in the work tree
        os.makedirs(os.path.dirname(d), exist_ok=True)
        with open(s, "rb") as a:
            data = a.read()
        if not os.path.exists(d) or open(d, "rb").read() != data:
            with open(d, "wb") as b:
                b.write(data)  # unchanged files keep their times: ninja rebuilds only what changed


def run_case(tests, build, test, case):
    """Runs one meson test's command with its environment, only the cases matching `case`."""
    t = tests.get(test)
    if not t:
        raise SystemExit("mutations: no meson test named '%s'" % test)
    env = dict(os.environ, **(t.get("env") or {}))
    env["MHLA_TEST_FILTER"] = case
    start = time.time()
    run = subprocess.run(t["cmd"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         errors="replace", cwd=t.get("workdir") or build, timeout=900)
    ran = "[ RUN      ]" in run.stdout
    return run.returncode, run.stdout, ran, time.time() - start


def first_error(out):
    for line in out.splitlines():
        if line.startswith("ERROR: "):
            return line[7:]
    return next((line for line in out.splitlines() if "FAILED" in line), "(no message)")


def passed_tests(testlog):
    """The tests that passed in a meson testlog.json (a run over the same files)."""
    with open(testlog) as log:
        return {t["name"].split(" / ")[-1].strip() for t in map(json.loads, log) if t.get("result") == "OK"}


def check_controls(chosen, testlog):
    """--controls-only: each catching case's test passed in testlog, so the case passes without its
    defect (whether the pattern names a case is checked where the mutation runs it: a case that
    ran nothing is not caught)."""
    if not testlog:
        raise SystemExit("mutations: --controls-only needs --passed TESTLOG")
    passed = passed_tests(testlog)
    missing = sorted({t for m in chosen for t, _, _ in m.catch} - passed)
    if missing:
        print("mutations: the catching cases of %s did not pass in %s (a defect caught by a failing test "
              "proves nothing)" % (", ".join(missing), testlog))
        return 1
    print("mutations: every catching case's test passed in %s" % testlog)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default=os.path.join(ROOT, "build-mutations"))
    ap.add_argument("--only", default="")
    ap.add_argument("--report", default="")
    ap.add_argument("--passed", default="",
                    help="meson's testlog.json of a run over the same tree: a test that passed there needs no control run")
    ap.add_argument("--no-controls", action="store_true",
                    help="run no catching case on the unchanged copy (a later --controls-only checks them)")
    ap.add_argument("--controls-only", action="store_true",
                    help="only check that every catching case's test passed in --passed's log")
    args = ap.parse_args()
    only = set(filter(None, args.only.split(",")))
    chosen = [m for m in MUTATIONS if not only or m.name in only]
    if only - {m.name for m in MUTATIONS}:
        raise SystemExit("mutations: unknown: %s" % ", ".join(sorted(only - {m.name for m in MUTATIONS})))
    if args.controls_only:
        return check_controls(chosen, args.passed)
    src, build = os.path.join(args.work, "src"), os.path.join(args.work, "build")
    began = time.time()
    copy_tree(ROOT, src)
    if not os.path.exists(os.path.join(build, "build.ninja")):
        sh(["meson", "setup", build, src, "--buildtype=release"])
    tests = {t["name"]: t for t in json.loads(sh(["meson", "introspect", "--tests", build]).stdout)}
    # Only what the catching cases run (the library, their programs): the copy's whole build (the
    # CLI, the bench, every other test) would be most of the time of a run.
    needed = {t for m in chosen for t, _, _ in m.catch}
    unknown = needed - set(tests)
    if unknown:
        raise SystemExit("mutations: no meson test named %s" % ", ".join(sorted(unknown)))
    built = {os.path.normpath(f) for t in json.loads(sh(["meson", "introspect", "--targets", build]).stdout)
             for f in t["filename"]}
    targets = sorted({os.path.relpath(path, build) for name in needed for arg in tests[name]["cmd"]
                      for path in [os.path.normpath(os.path.join(build, arg))] if path in built})
    sh(["ninja", "-C", build] + targets)

    # Every edit must still apply (the code moved on: update the table), and every catching case
    # must pass without the defect.
    for m in chosen:
        for f, old, new, count in m.edits:
            text = open(os.path.join(src, f)).read()
            if text.count(old) != count:
                raise SystemExit("mutations: %s: '%s' occurs %d times in %s, expected %d: update the table"
                                 % (m.name, old.splitlines()[0], text.count(old), f, count))
    passed = passed_tests(args.passed) if args.passed else set()
    controls = set() if args.no_controls else {(t, c) for m in chosen for t, c, _ in m.catch}
    for test, case in sorted(controls):
        if test in passed:
            print("control  %-20s %-38s passed in %s" % (test, case, args.passed), flush=True)
            continue
        rc, out, ran, secs = run_case(tests, build, test, case)
        if rc != 0 or not ran:
            raise SystemExit("mutations: %s %s fails (or runs nothing) without any defect (exit %d):\n%s"
                             % (test, case, rc, out[-3000:]))
        print("control  %-20s %-38s passes (%.1f s)" % (test, case, secs), flush=True)

    rows, missed = [], 0
    for m in chosen:
        saved = {}
        for f, old, new, count in m.edits:
            path = os.path.join(src, f)
            saved.setdefault(path, open(path).read())
            text = open(path).read()
            with open(path, "w") as out:
                out.write(text.replace(old, new))
        try:
            built = subprocess.run(["ninja", "-C", build] + targets, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True)
            if built.returncode != 0:
                raise SystemExit("mutations: %s does not build:\n%s" % (m.name, built.stdout[-3000:]))
            for test, case, text in m.catch:
                rc, out, ran, secs = run_case(tests, build, test, case)
                caught = rc != 0 and ran and text in out
                missed += not caught
                why = first_error(out) if rc != 0 else "passed"
                rows.append((m, test, case, caught, why if caught or rc else "passed with the defect in", secs))
                print("%s %-34s %-20s %-38s %5.1f s  %s" % ("caught " if caught else "MISSED ", m.name, test, case, secs,
                                                           why[:150] + ("" if caught or not rc else " (no '%s')" % text)),
                      flush=True)
        finally:
            for path, text in saved.items():
                with open(path, "w") as out:
                    out.write(text)
    sh(["ninja", "-C", build] + targets)  # back to the unchanged tree
    print("mutations: %d of %d defects caught by every case named for them, %d case(s) missed, %.0f s"
          % (len(chosen) - len({r[0].name for r in rows if not r[3]}), len(chosen), missed, time.time() - began))
    if args.report:
        with open(args.report + ".tmp", "w") as rep:
            rep.write("| defect put in | caught by (meson test: case) | its failure message |\n|---|---|---|\n")
            for m, test, case, caught, why, _ in rows:
                rep.write("| %s | %s%s: %s | %s |\n" % (m.defect, "" if caught else "MISSED ", test, case,
                                                       why.replace("|", "\\|")[:160]))
        os.replace(args.report + ".tmp", args.report)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
