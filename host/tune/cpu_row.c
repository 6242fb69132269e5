/* The CPU tuning row derived from the device: the register tiles of every stage sized to the SIMD
 * registers the device's compiler targets (core/simd.c). No device calls here:
 * everything comes from what the context read (name, type, reported float width), so that the
 * unit test (tests/tune/test_cpu_row.c) runs it without OpenCL. */
#include "tune/tune.h"

#include <stdio.h>
#include <string.h>

/* Register tiles for `registers` vector registers of `width` floats: half of the registers hold
 * accumulators, the rest the loaded vectors, broadcasts and addresses (with 16 registers, 12
 * accumulators spilled in every stage whose loop also mapped its operands); the summary, whose k~
 * come from local memory, takes three quarters. Why each, with the measurements: docs/tuning-notes.md.
 * - Summary (k~ v^T): value vectors 2 with 16 registers, 4 with 32 (up to a 64-column
 *   row), and 6 key rows (the rows' k~ read from local memory, sum_lk: a row count, not a vector):
 *   6 x 2 with 16 registers, 12 accumulators where 4 x 2's 8 left the multiply-adds waiting on each
 *   other; 6 x 4 with 32 of 16 floats (AVX-512). Without sum_lk (a row that turns it off) the rows
 *   are capped to a vector width dividing Dk, 4 x 4 on AVX-512 and 4 x 2 on AVX2 ("Block summary").
 * - Read-out (q~ S): as many vectors as make 64 columns, up to the accumulators (q~ is mapped once
 *   per column tile and per token, so one tile across a D = 64 row maps it once), and the tokens
 *   that fill the rest: 1 x 8 with 8-float registers (16 of them), 4 x 4 with 16-float (32).
 * - Mixing: 4 vectors of columns x the rows the accumulators leave, 2 x 4 and 4 x 4 (faster than the
 *   4 x 2 and 8 x 2 before them: "Mixing"). The causal prefix: rows x 2 vectors, 4 x 2 and 8 x 2.
 * - The backward's read-outs (bwd_acc): 16 accumulators with 16-float registers, 8 with narrower
 *   ones whatever their count: the backward was timed with AVX-512's 32 and AVX2's 16 only, not
 *   with NEON's or 'cpu-wide''s 32 at 4 or 8 floats.
 * - dMc's products in the backward (dmix_tm): 4 x 4 pairs with 32 registers, 3 x 3 with 16 (4 x 4
 *   and its 8 operand vectors spill there; with 32 registers 3 x 3 is the slower: "Causal backward").
 * - The causal scores (sc_rt x sc_kv, the causal output's and bc_dqkv's): 8 rows of one key
 *   vector, 8 independent multiply-add chains (two FMA pipes of 4 cycles' latency) in 10
 *   registers. The read-out's rows they had taken left AVX2 one chain ("Causal forward"). */
void mhla__cpu_row_fill(mhla_tuning *t, const mhla_simd *s)
{
    const int acc = s->registers >= 32 ? 16 : 8;
    t->vec = s->width;
    t->vec_forced = 0;
    t->sum_ve = t->out_ve = t->mix_ve = t->sm_vw = s->width;
    const int wide = 64 / (s->width > 0 ? s->width : 16); /* vectors of a 64-column row */
    t->sum_nv = acc / 4 < wide ? acc / 4 : (wide > 0 ? wide : 1);
    t->sum_rd = acc * 3 / 2 / t->sum_nv; /* 6 x 2, 6 x 4: three quarters of the registers */
    t->out_nv = wide < acc ? (wide > 0 ? wide : 1) : acc;
    t->out_rt = acc / t->out_nv;
    t->mix_nv = 4, t->mix_mr = acc / 4;
    t->pre_nv = 2, t->pre_mr = acc / 2;
    t->bwd_acc = s->width >= 16 ? 16 : 8;
    t->dmix_tm = s->registers >= 32 ? 4 : 3;
    t->sc_rt = 8, t->sc_kv = 1;
}
