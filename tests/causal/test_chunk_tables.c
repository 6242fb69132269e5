/* The chunk tables of the causal form (host/causal/chunk_tables.c) without a device: single
 * sequences, packed varlen batches and shard continuations against tables worked out by hand and
 * against a model written from the layout's description (host/causal/causal.h), then what the
 * prefix stage computes from them (kernels/causal_prefix.cl's tiles plus the host's GEMMs): every
 * P_i = sum_{j<i} Mc[i,j] S_{w+j} exactly once. Also the out-of-memory path (host/core/testing.h).
 * Linked with the library's objects (its mhla__ functions are hidden in libmhla.so); no OpenCL call. */
#include "causal/causal.h"
#include "core/testing.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* One mhla__chunk_tables_add call: tokens [start, start + len), the first at chunk first_chunk of a
 * sequence whose chunk 0 has slot slot_base. */
typedef struct add_call {
    int64_t start, len, first_chunk, slot_base;
} add_call;

/* Only what the tables read: the prefix tile height and the GEMM block. */
static mhla_tiles tiling(int mix_mr, int gemm_rows)
{
    mhla_tiles t;
    memset(&t, 0, sizeof t);
    t.mix_mr = mix_mr;
    t.gemm_rows = gemm_rows;
    return t;
}

static mhla_context *fake_context(void)
{
    mhla_context *ctx = calloc(1, sizeof *ctx);
    assert_non_null(ctx);
    mhla__mutex_init(&ctx->lock);
    mhla__mutex_init(&ctx->message_lock);
    snprintf(ctx->device_name, sizeof ctx->device_name, "no device");
    return ctx;
}

static void free_context(mhla_context *ctx)
{
    mhla__mutex_destroy(&ctx->lock);
    mhla__mutex_destroy(&ctx->message_lock);
    free(ctx);
}

static mhla_status add_all(mhla_context *ctx, mhla_chunk_tables *t, const add_call *calls, size_t n, int64_t chunk,
                           const mhla_tiles *tl)
{
    for (size_t s = 0; s < n; ++s) {
        const mhla_status st = mhla__chunk_tables_add(ctx, t, calls[s].start, calls[s].len, calls[s].first_chunk,
                                                      calls[s].slot_base, chunk, tl);
        if (st != MHLA_OK)
            return st;
    }
    return MHLA_OK;
}

/* ---- the expected tables ------------------------------------------------------------------------- */

typedef struct int4e {
    int64_t x, y, z, w;
} int4e;

/* The tables as causal.h describes them: chunks in call order, {first token, tokens, i, slot base};
 * a prefix tile per run of a call's chunks with the same i / mix_mr, {first row, rows, first i, slot
 * base}; a GEMM per run of a call's chunks with i >= gemm_rows in the same block i / gemm_rows,
 * {first row, rows, first i, the block's first chunk, slot base}. */
typedef struct model {
    int4e *chunks, *tiles;
    mhla_prefix_gemm *gemms;
    size_t n_chunks, n_tiles, n_gemms;
    int64_t max_len, slots;
} model;

static void model_build(model *m, const add_call *calls, size_t n, int64_t chunk, int64_t pr, int64_t gr)
{
    size_t total = 0;
    for (size_t s = 0; s < n; ++s)
        total += (size_t)((calls[s].len + chunk - 1) / chunk);
    memset(m, 0, sizeof *m);
    m->chunks = calloc(total + 1, sizeof *m->chunks);
    m->tiles = calloc(total + 1, sizeof *m->tiles);
    m->gemms = calloc(total + 1, sizeof *m->gemms);
    assert_true(m->chunks && m->tiles && m->gemms);
    for (size_t s = 0; s < n; ++s) {
        const add_call *a = &calls[s];
        int64_t tile_key = -1, gemm_key = -1; /* the open runs: i / pr and i / gr of their chunks */
        for (int64_t off = 0; off < a->len; off += chunk) {
            const int64_t i = a->first_chunk + off / chunk, row = (int64_t)m->n_chunks;
            const int64_t len = a->len - off < chunk ? a->len - off : chunk;
            m->chunks[m->n_chunks++] = (int4e){a->start + off, len, i, a->slot_base};
            if (i / pr != tile_key) {
                tile_key = i / pr;
                m->tiles[m->n_tiles++] = (int4e){row, 0, i, a->slot_base};
            }
            ++m->tiles[m->n_tiles - 1].y;
            if (gr > 0 && i >= gr) {
                if (i / gr != gemm_key) {
                    gemm_key = i / gr;
                    m->gemms[m->n_gemms++] = (mhla_prefix_gemm){(size_t)row, 0, (size_t)i, (size_t)(i / gr * gr),
                                                                (size_t)a->slot_base};
                }
                ++m->gemms[m->n_gemms - 1].rows;
            }
            if (len > m->max_len)
                m->max_len = len;
            if (a->slot_base + i + 1 > m->slots)
                m->slots = a->slot_base + i + 1;
        }
    }
}

static void model_free(model *m)
{
    free(m->chunks);
    free(m->tiles);
    free(m->gemms);
}

static int4e of_int4(cl_int4 v) { return (int4e){v.s[0], v.s[1], v.s[2], v.s[3]}; }

static int same4(int4e a, int4e b) { return a.x == b.x && a.y == b.y && a.z == b.z && a.w == b.w; }

/* The first n_chunks / n_tiles / n_gemms entries of t equal the model's (all of them when whole;
 * otherwise what an add that failed half-way left: its last GEMM perhaps not yet grown to size). */
static void compare(const mhla_chunk_tables *t, const model *m, int whole, const char *what)
{
    if (whole && (t->n_chunks != m->n_chunks || t->n_tiles != m->n_tiles || t->n_gemms != m->n_gemms))
        fail_msg("%s: %zu chunks, %zu tiles, %zu GEMMs; expected %zu, %zu, %zu", what, t->n_chunks, t->n_tiles,
                 t->n_gemms, m->n_chunks, m->n_tiles, m->n_gemms);
    assert_true(t->n_chunks <= m->n_chunks && t->n_tiles <= m->n_tiles && t->n_gemms <= m->n_gemms);
    assert_true(t->n_chunks <= t->cap_chunks && t->n_tiles <= t->cap_tiles && t->n_gemms <= t->cap_gemms);
    for (size_t r = 0; r < t->n_chunks; ++r) {
        const int4e g = of_int4(t->chunks[r]), e = m->chunks[r];
        if (!same4(g, e))
            fail_msg("%s: chunk %zu is {%lld, %lld, %lld, %lld}, expected {%lld, %lld, %lld, %lld}", what, r,
                     (long long)g.x, (long long)g.y, (long long)g.z, (long long)g.w, (long long)e.x, (long long)e.y,
                     (long long)e.z, (long long)e.w);
    }
    for (size_t r = 0; r < t->n_tiles; ++r) {
        const int4e g = of_int4(t->tiles[r]), e = m->tiles[r];
        if (!same4(g, e))
            fail_msg("%s: tile %zu is {%lld, %lld, %lld, %lld}, expected {%lld, %lld, %lld, %lld}", what, r,
                     (long long)g.x, (long long)g.y, (long long)g.z, (long long)g.w, (long long)e.x, (long long)e.y,
                     (long long)e.z, (long long)e.w);
    }
    for (size_t r = 0; r < t->n_gemms; ++r) {
        const mhla_prefix_gemm *g = &t->gemms[r], *e = &m->gemms[r];
        /* A GEMM grows a row per chunk: the one open when an add failed may have fewer rows. */
        const int rows_ok = g->rows == e->rows || (!whole && r + 1 == t->n_gemms && g->rows <= e->rows);
        if (g->prow != e->prow || !rows_ok || g->i0 != e->i0 || g->k != e->k || g->slot_base != e->slot_base)
            fail_msg("%s: GEMM %zu is {prow %zu, rows %zu, i0 %zu, k %zu, slot %zu}, "
                     "expected {%zu, %zu, %zu, %zu, %zu}",
                     what, r, g->prow, g->rows, g->i0, g->k, g->slot_base, e->prow, e->rows, e->i0, e->k, e->slot_base);
    }
    if (whole && (t->max_len != m->max_len || t->slots != m->slots))
        fail_msg("%s: max_len %lld, slots %lld; expected %lld, %lld", what, (long long)t->max_len,
                 (long long)t->slots, (long long)m->max_len, (long long)m->slots);
}

/* ---- what the prefix stage computes from the tables ----------------------------------------------- */

/* Runs the prefix stage on the tables as index arithmetic: causal_prefix (kernels/causal_prefix.cl)
 * over every tile, rows of a tile in one group of mix_mr accumulators, summing from the first chunk
 * of the tile's GEMM block; then each GEMM, P rows [prow, prow + rows) += Mc rows [i0, ..) x slots
 * slot_base + [0, k). Every term must be Mc[i, j] S_{w + j} for the row's own chunk i and sequence w,
 * with each j < i exactly once, and every row written by exactly one tile. */
static void check_prefix_sums(const mhla_chunk_tables *t, int64_t pr, int64_t gr, const char *what)
{
    int64_t top = 1;
    for (size_t r = 0; r < t->n_chunks; ++r)
        if (t->chunks[r].s[2] + 1 > top)
            top = t->chunks[r].s[2] + 1;
    int *terms = calloc(t->n_chunks * (size_t)top + 1, sizeof *terms); /* [row][j]: times added */
    int *written = calloc(t->n_chunks + 1, sizeof *written);
    assert_true(terms && written);
#define TERM(row, mix_row, j, slot)                                                                 \
    do {                                                                                            \
        assert_true((row) < t->n_chunks);                                                           \
        const cl_int4 c_ = t->chunks[(row)];                                                        \
        if ((mix_row) != c_.s[2] || (slot) != (int64_t)c_.s[3] + (j) || (j) >= c_.s[2])             \
            fail_msg("%s: P row %zu (chunk %d of the sequence at slot %d) gets Mc[%lld, %lld] S_%lld", what, \
                     (size_t)(row), c_.s[2], c_.s[3], (long long)(mix_row), (long long)(j), (long long)(slot)); \
        ++terms[(size_t)(row) * (size_t)top + (size_t)(j)];                                         \
    } while (0)
    for (size_t k = 0; k < t->n_tiles; ++k) {
        const cl_int4 tile = t->tiles[k];
        const int64_t x = tile.s[0], y = tile.s[1], z = tile.s[2], w = tile.s[3];
        if (y < 1 || y > pr || (gr > 0 && z / gr != (z + y - 1) / gr))
            fail_msg("%s: tile %zu has %lld rows from chunk %lld (at most %lld, within one block of %lld)", what, k,
                     (long long)y, (long long)z, (long long)pr, (long long)gr);
        const int64_t jstart = gr > 0 ? z / gr * gr : 0;
        for (int64_t r = 0; r < y; ++r) {
            assert_true(x + r < (int64_t)t->n_chunks);
            ++written[x + r];
            for (int64_t j = jstart; j < z + r; ++j)
                TERM((size_t)(x + r), z + r, j, w + j);
        }
    }
    for (size_t g = 0; g < t->n_gemms; ++g) {
        const mhla_prefix_gemm *e = &t->gemms[g];
        for (size_t r = 0; r < e->rows; ++r)
            for (size_t j = 0; j < e->k; ++j)
                TERM(e->prow + r, (int64_t)(e->i0 + r), (int64_t)j, (int64_t)(e->slot_base + j));
    }
#undef TERM
    for (size_t r = 0; r < t->n_chunks; ++r) {
        if (written[r] != 1)
            fail_msg("%s: P row %zu written by %d tiles", what, r, written[r]);
        for (int64_t j = 0; j < t->chunks[r].s[2]; ++j)
            if (terms[r * (size_t)top + (size_t)j] != 1)
                fail_msg("%s: P row %zu (chunk %d) adds Mc[i, %lld] S_j %d times", what, r, t->chunks[r].s[2],
                         (long long)j, terms[r * (size_t)top + (size_t)j]);
    }
    free(terms);
    free(written);
}

/* Adds the calls, compares with the model and checks the prefix sums. */
static void check_calls(const add_call *calls, size_t n, int64_t chunk, int pr, int gr, const char *what)
{
    mhla_context *ctx = fake_context();
    const mhla_tiles tl = tiling(pr, gr);
    mhla_chunk_tables t;
    memset(&t, 0, sizeof t);
    assert_int_equal(add_all(ctx, &t, calls, n, chunk, &tl), MHLA_OK);
    model m;
    model_build(&m, calls, n, chunk, pr, gr);
    compare(&t, &m, 1, what);
    check_prefix_sums(&t, pr, gr, what);
    model_free(&m);
    mhla__chunk_tables_free(&t);
    free_context(ctx);
}

/* ---- cases ------------------------------------------------------------------------------------------ */

static void expect_int4(cl_int4 v, int x, int y, int z, int w)
{
    if (v.s[0] != x || v.s[1] != y || v.s[2] != z || v.s[3] != w)
        fail_msg("{%d, %d, %d, %d}, expected {%d, %d, %d, %d}", v.s[0], v.s[1], v.s[2], v.s[3], x, y, z, w);
}

/* 1000 tokens in chunks of 64: 15 whole chunks and one of 40, slots 0..15, four tiles of four. */
static void test_single_sequence(void **state)
{
    (void)state;
    mhla_context *ctx = fake_context();
    const mhla_tiles tl = tiling(4, 0);
    mhla_chunk_tables t;
    memset(&t, 0, sizeof t);
    assert_int_equal(mhla__chunk_tables_add(ctx, &t, 0, 1000, 0, 0, 64, &tl), MHLA_OK);
    assert_int_equal(t.n_chunks, 16);
    for (int c = 0; c < 16; ++c)
        expect_int4(t.chunks[c], 64 * c, c < 15 ? 64 : 40, c, 0);
    assert_int_equal(t.n_tiles, 4);
    for (int k = 0; k < 4; ++k)
        expect_int4(t.tiles[k], 4 * k, 4, 4 * k, 0);
    assert_int_equal(t.n_gemms, 0);
    assert_int_equal(t.max_len, 64);
    assert_int_equal(t.slots, 16);
    mhla__chunk_tables_free(&t);
    assert_null(t.chunks);
    assert_null(t.tiles);
    assert_int_equal(t.n_chunks + t.n_tiles + t.n_gemms + t.cap_chunks + t.cap_tiles, 0);
    assert_int_equal(t.max_len + t.slots, 0);

    /* Shorter than one chunk: a single partial chunk, and max_len is its length. */
    assert_int_equal(mhla__chunk_tables_add(ctx, &t, 7, 10, 0, 0, 64, &tl), MHLA_OK);
    assert_int_equal(t.n_chunks, 1);
    expect_int4(t.chunks[0], 7, 10, 0, 0);
    expect_int4(t.tiles[0], 0, 1, 0, 0);
    assert_int_equal(t.max_len, 10);
    assert_int_equal(t.slots, 1);
    /* len 0 adds nothing. */
    assert_int_equal(mhla__chunk_tables_add(ctx, &t, 17, 0, 0, 1, 64, &tl), MHLA_OK);
    assert_int_equal(t.n_chunks, 1);
    assert_int_equal(t.n_tiles, 1);
    assert_int_equal(t.slots, 1);
    mhla__chunk_tables_free(&t);
    free_context(ctx);

    const add_call one = {0, 1000, 0, 0};
    check_calls(&one, 1, 64, 4, 0, "1000 tokens");
}

/* GEMM blocks of 8 chunks (tiles of 4): 20 chunks of 16 tokens, the last of 11. Chunks 8..15 read
 * chunks 0..7 through one GEMM, chunks 16..19 read 0..15 through another. */
static void test_gemm_blocks(void **state)
{
    (void)state;
    mhla_context *ctx = fake_context();
    const mhla_tiles tl = tiling(4, 8);
    mhla_chunk_tables t;
    memset(&t, 0, sizeof t);
    assert_int_equal(mhla__chunk_tables_add(ctx, &t, 0, 20 * 16 - 5, 0, 0, 16, &tl), MHLA_OK);
    assert_int_equal(t.n_chunks, 20);
    expect_int4(t.chunks[19], 19 * 16, 11, 19, 0);
    assert_int_equal(t.n_tiles, 5);
    for (int k = 0; k < 5; ++k)
        expect_int4(t.tiles[k], 4 * k, 4, 4 * k, 0);
    assert_int_equal(t.n_gemms, 2);
    const mhla_prefix_gemm want[] = {{8, 8, 8, 8, 0}, {16, 4, 16, 16, 0}};
    for (int g = 0; g < 2; ++g) {
        assert_int_equal(t.gemms[g].prow, want[g].prow);
        assert_int_equal(t.gemms[g].rows, want[g].rows);
        assert_int_equal(t.gemms[g].i0, want[g].i0);
        assert_int_equal(t.gemms[g].k, want[g].k);
        assert_int_equal(t.gemms[g].slot_base, want[g].slot_base);
    }
    assert_int_equal(t.max_len, 16);
    assert_int_equal(t.slots, 20);
    check_prefix_sums(&t, 4, 8, "20 chunks, blocks of 8");
    mhla__chunk_tables_free(&t);
    free_context(ctx);
}

/* A packed batch as mhla_forward_varlen() adds it (cu_seqlens {0, 100, 100, 230, 231, 500}: one
 * call per sequence, each starting at chunk 0, its slots after the previous sequences' chunks; the
 * empty one adds nothing). */
static void test_varlen_batch(void **state)
{
    (void)state;
    static const int32_t cu[] = {0, 100, 100, 230, 231, 500};
    const size_t seqs = sizeof cu / sizeof cu[0] - 1;
    mhla_context *ctx = fake_context();
    const mhla_tiles tl = tiling(4, 0);
    mhla_chunk_tables t;
    memset(&t, 0, sizeof t);
    add_call calls[8];
    for (size_t s = 0; s < seqs; ++s) {
        calls[s] = (add_call){cu[s], cu[s + 1] - cu[s], 0, (int64_t)t.n_chunks};
        assert_int_equal(mhla__chunk_tables_add(ctx, &t, cu[s], cu[s + 1] - cu[s], 0, (int64_t)t.n_chunks, 64, &tl),
                         MHLA_OK);
    }
    static const int chunks[][4] = {
        {0, 64, 0, 0},   {64, 36, 1, 0},                                   /* 100 tokens */
        {100, 64, 0, 2}, {164, 64, 1, 2}, {228, 2, 2, 2},                  /* 130 */
        {230, 1, 0, 5},                                                    /* 1 */
        {231, 64, 0, 6}, {295, 64, 1, 6}, {359, 64, 2, 6}, {423, 64, 3, 6}, /* 269 */
        {487, 13, 4, 6},
    };
    static const int tiles[][4] = {{0, 2, 0, 0}, {2, 3, 0, 2}, {5, 1, 0, 5}, {6, 4, 0, 6}, {10, 1, 4, 6}};
    assert_int_equal(t.n_chunks, 11);
    for (size_t r = 0; r < 11; ++r)
        expect_int4(t.chunks[r], chunks[r][0], chunks[r][1], chunks[r][2], chunks[r][3]);
    assert_int_equal(t.n_tiles, 5);
    for (size_t k = 0; k < 5; ++k)
        expect_int4(t.tiles[k], tiles[k][0], tiles[k][1], tiles[k][2], tiles[k][3]);
    assert_int_equal(t.n_gemms, 0);
    assert_int_equal(t.max_len, 64);
    assert_int_equal(t.slots, 11);
    mhla__chunk_tables_free(&t);
    free_context(ctx);
    check_calls(calls, seqs, 64, 4, 0, "varlen batch");
    check_calls(calls, seqs, 64, 2, 2, "varlen batch, GEMM blocks of 2");
}

/* A shard's part of a sequence: 200 tokens from token 10, starting at the sequence's chunk 5 whose
 * chunk 0 has slot 3. The first tile stops at the next multiple of 4 (chunks 5..7); the GEMM of
 * chunks 8..11 reads the first block, slots 3..10. */
static void test_continuation(void **state)
{
    (void)state;
    mhla_context *ctx = fake_context();
    const mhla_tiles tl = tiling(4, 8);
    mhla_chunk_tables t;
    memset(&t, 0, sizeof t);
    assert_int_equal(mhla__chunk_tables_add(ctx, &t, 10, 200, 5, 3, 32, &tl), MHLA_OK);
    assert_int_equal(t.n_chunks, 7);
    for (int c = 0; c < 7; ++c)
        expect_int4(t.chunks[c], 10 + 32 * c, c < 6 ? 32 : 8, 5 + c, 3);
    assert_int_equal(t.n_tiles, 2);
    expect_int4(t.tiles[0], 0, 3, 5, 3);
    expect_int4(t.tiles[1], 3, 4, 8, 3);
    assert_int_equal(t.n_gemms, 1);
    assert_int_equal(t.gemms[0].prow, 3);
    assert_int_equal(t.gemms[0].rows, 4);
    assert_int_equal(t.gemms[0].i0, 8);
    assert_int_equal(t.gemms[0].k, 8);
    assert_int_equal(t.gemms[0].slot_base, 3);
    assert_int_equal(t.max_len, 32);
    assert_int_equal(t.slots, 3 + 11 + 1);
    check_prefix_sums(&t, 4, 8, "continuation");
    mhla__chunk_tables_free(&t);
    free_context(ctx);
}

/* Random packed batches and continuations (fixed seed): chunk sizes, tile heights and GEMM blocks
 * (multiples of the tile height, as mhla__tiles_causal makes them), against the model and the
 * prefix sums. */
static void test_random(void **state)
{
    (void)state;
    unsigned long long seed = 0x2545f4914f6cdd1dULL;
#define RAND(n) ((seed = seed * 6364136223846793005ULL + 1442695040888963407ULL), (int64_t)((seed >> 33) % (n)))
    static const int64_t chunks[] = {1, 3, 16, 64};
    static const int prs[] = {1, 2, 3, 4, 8};
    for (int round = 0; round < 400; ++round) {
        const int64_t chunk = chunks[RAND(4)];
        const int pr = prs[RAND(5)];
        const int gr = RAND(3) == 0 ? 0 : pr * (int)(1 + RAND(4));
        add_call calls[8];
        const size_t n = (size_t)(1 + RAND(6));
        int64_t token = 0, slots = 0;
        for (size_t s = 0; s < n; ++s) {
            const int64_t len = RAND(4) == 0 ? RAND(3) : RAND(chunk * 40);
            const int64_t first = RAND(3) == 0 ? RAND(20) : 0; /* a shard's continuation */
            calls[s] = (add_call){token, len, first, slots};
            token += len;
            slots += first + (len + chunk - 1) / chunk;
        }
        char what[96];
        snprintf(what, sizeof what, "round %d (chunk %lld, tiles of %d, GEMM blocks of %d, %zu calls)", round,
                 (long long)chunk, pr, gr, n);
        check_calls(calls, n, chunk, pr, gr, what);
    }
#undef RAND
}

/* Each host allocation of the tables failing in turn: MHLA_ERR_OUT_OF_HOST_MEMORY with its message,
 * what was added before it intact, and nothing leaked once the tables are freed. */
static void test_out_of_memory(void **state)
{
    (void)state;
    mhla_context *ctx = fake_context();
    const mhla_tiles tl = tiling(4, 8);
    /* 300 one-token chunks: each array is allocated, then grown past 64 entries (and 128, 256). */
    const add_call calls[] = {{0, 150, 0, 0}, {150, 150, 0, 150}};
    model m;
    model_build(&m, calls, 2, 1, 4, 8);
    const long live = mhla__live_allocations();
    int faults = 0;
    for (long k = 1;; ++k) {
        mhla_chunk_tables t;
        memset(&t, 0, sizeof t);
        mhla__fault_arm(MHLA__FAULT_ALLOC, k);
        const mhla_status st = add_all(ctx, &t, calls, 2, 1, &tl);
        const int fired = mhla__fault_fired(MHLA__FAULT_ALLOC);
        mhla__fault_arm(MHLA__FAULT_ALLOC, 0);
        char what[64];
        snprintf(what, sizeof what, "allocation %ld failing", k);
        if (!fired) {
            assert_int_equal(st, MHLA_OK);
            compare(&t, &m, 1, what);
            mhla__chunk_tables_free(&t);
            break;
        }
        ++faults;
        assert_int_equal(st, MHLA_ERR_OUT_OF_HOST_MEMORY);
        if (!strstr(ctx->message, "out of host memory for chunk tables"))
            fail_msg("%s: message '%s'", what, ctx->message);
        compare(&t, &m, 0, what);
        mhla__chunk_tables_free(&t);
        assert_int_equal(mhla__live_allocations(), live);
        assert_true(k < 100);
    }
    assert_true(faults >= 6); /* 3 first allocations, at least 3 growths */
    assert_int_equal(mhla__live_allocations(), live);
    model_free(&m);
    free_context(ctx);
}

/* The slots' padding (kernels/causal.h slot_len computes the same; a mismatch would move the
 * prefix's rows against the summaries' and fail every causal test): whole 64-byte lines, an odd
 * number of them, the fewest that hold the summaries. */
static void test_slot_stride(void **state)
{
    (void)state;
    assert_int_equal(mhla__causal_slot_stride(8 * 64 * 65), 33296); /* 2080 lines -> 2081 */
    assert_int_equal(mhla__causal_slot_stride(16), 16);
    assert_int_equal(mhla__causal_slot_stride(17), 48);
    for (size_t used = 1; used < 70000; used += used < 200 ? 1 : 97) {
        const size_t s = mhla__causal_slot_stride(used);
        assert_true(s >= used);
        assert_true(s % 16 == 0 && (s / 16) % 2 == 1);
        assert_true(s < used + 32);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_sequence), cmocka_unit_test(test_gemm_blocks),
        cmocka_unit_test(test_varlen_batch),    cmocka_unit_test(test_continuation),
        cmocka_unit_test(test_random),          cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_slot_stride),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
