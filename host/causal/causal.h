/* host/causal: the chunk form of causal MHLA that causal plans and decoders share (its kernels,
 * chunk tables, one enqueue of the three stages) and the streaming decoder. Depends on core/,
 * config/ and tune/. */
#ifndef MHLA_CAUSAL_H
#define MHLA_CAUSAL_H

#include "tune/tune.h"

/* The kernels of the causal form for one configuration, built once. */
typedef struct mhla_causal {
    mhla_context *ctx;
    mhla_config cfg; /* resolved */
    mhla_tuning tuning; /* the device's row after overrides */
    mhla_tiles tiling;  /* what this configuration's kernels are built with (tune/tiling.c) */
    int64_t bh;         /* batch * heads */
    int64_t bh_kv;      /* batch * kv_heads: the summaries' heads (= bh but for grouped key/value heads) */
    int64_t scols;      /* summary columns: Dv + 1 (z) for the paper normalizer, Dv for none */
    size_t slot_floats; /* floats from one chunk's summaries to the next's (a "slot": S as
                           [B*H_kv][Dk][Dv], then z as [B*H_kv][Dk], then padding where
                           tiling.slot_pad; kernels/causal.h) */
    size_t slot_used;   /* B*H_kv*Dk*scols of them hold summaries (what a decoder state stores) */
    cl_kernel k_summary, k_prefix, k_prefix_one, k_output, k_step;
    cl_kernel k_prefix_tiled; /* where tiling.cp_ti: the prefix of a run */
    cl_kernel k_step_prefix;  /* decoders with tiling.dec_dp > 1, dec_next 0: decoder_prefix, the chunk
                                 start's P_i (dec_dp 1: k_prefix_one) */
    cl_kernel k_resume;       /* decoders with tiling.dec_next: decoder_resume, the next chunk's prefix
                                 so far at once where a decoder resumes */
    size_t lws_summary, lws_prefix, lws_output, lws_step, lws_step_prefix, lws_resume;
    cl_mem gemm_temp; /* CLBlast's temporary buffer for the prefix GEMMs, grown on demand */
    size_t gemm_temp_bytes;
} mhla_causal;

/* The floats between slots that hold `used` floats where the tiles pad them (slot_pad): a whole
 * odd number of 64-byte lines, as kernels/causal.h's slot_len (the reason is there). */
size_t mhla__causal_slot_stride(size_t used);
/* `count` slots of `buf` from slot `first` (slot_floats apart) to packed host rows of slot_used
 * floats, and back: the summaries without the padding, as decoder states and shard exchanges hold
 * them. One blocking rectangular copy each. */
cl_int mhla__causal_slots_read(const mhla_causal *c, cl_mem buf, size_t first, size_t count, void *host);
cl_int mhla__causal_slots_write(const mhla_causal *c, cl_mem buf, size_t first, size_t count, const void *host);

/* Builds the kernels for resolved cfg (the decoder's step kernel only when with_step). */
mhla_status mhla__causal_create(mhla_context *ctx, const mhla_config *cfg, int with_step, mhla_causal **out);
void mhla__causal_destroy(mhla_causal *c);
/* kernels/common.h's grid for tensors of n tokens (only n, heads, bh and kv_heads are read). */
mhla_grid mhla__causal_grid(const mhla_causal *c, int64_t n);
/* The same for the key/value side (heads = kv_heads, bh = B*H_kv): what the summaries read. */
mhla_grid mhla__causal_kv_grid(const mhla_causal *c, int64_t n);

/* One CLBlast SGEMM of the prefix stage: P rows [prow, prow + rows) (chunks i0 .. i0 + rows - 1 of
 * one sequence, all in the block that starts at chunk k) += Mc[i0 .., 0 .. k) x S_0 .. S_{k-1}. */
typedef struct mhla_prefix_gemm {
    size_t prow, rows, i0, k, slot_base;
} mhla_prefix_gemm;

/* Chunk tables in host memory, int4 entries as kernels/causal.h and causal_prefix.cl read them:
 * chunks {first token, tokens, chunk index i, slot of the sequence's chunk 0}; prefix tiles
 * {first P row, rows, i of the first row, slot of the sequence's chunk 0}, aligned to multiples of
 * prefix_rows in i; and the prefix GEMMs. Row r of P belongs to chunk entry r. */
typedef struct mhla_chunk_tables {
    cl_int4 *chunks;
    size_t n_chunks, cap_chunks;
    cl_int4 *tiles;
    size_t n_tiles, cap_tiles;
    mhla_prefix_gemm *gemms;
    size_t n_gemms, cap_gemms;
    int64_t max_len; /* tokens in the longest chunk */
    int64_t slots;   /* summary slots the chunks write: 1 + the largest slot */
} mhla_chunk_tables;

/* Appends tokens [start, start + len) of the tensors, a sequence (or its continuation) whose token
 * `start` begins chunk first_chunk (a chunk boundary); the sequence's chunk 0 has slot slot_base.
 * len 0 adds nothing. Tiling t gives the tile and GEMM block sizes. */
mhla_status mhla__chunk_tables_add(mhla_context *ctx, mhla_chunk_tables *t, int64_t start, int64_t len,
                                   int64_t first_chunk, int64_t slot_base, int64_t chunk,
                                   const mhla_tiles *tiling);
void mhla__chunk_tables_free(mhla_chunk_tables *t);

/* One run of the chunk form: summaries -> prefix mixtures -> output. */
typedef struct mhla_causal_run {
    cl_mem q, k, v, mixing, out;
    int64_t n;            /* tokens in q, k, v, out */
    cl_mem chunks, tiles; /* device copies of `tables` */
    const mhla_chunk_tables *tables;
    cl_mem sums;   /* summaries by slot */
    cl_mem pref;   /* prefix mixtures by chunk-table row */
    cl_event *marks; /* plans: the markers after the summaries, the prefix mixtures and the output
                        (mhla_plan_stage_times, on profiling queues); NULL for none */
} mhla_causal_run;

/* Grows c's temporary buffer for the prefix GEMMs of tables t (CLBlast's), before anything is
 * enqueued when the caller must not fail half-way; *need (may be NULL): its bytes, 0 for none. */
mhla_status mhla__causal_gemm_reserve(mhla_causal *c, const mhla_chunk_tables *t, size_t *need);

/* Enqueues the three stages (first one waits for `wait`, `done` is the output's event). */
mhla_status mhla__causal_enqueue(mhla_causal *c, const mhla_causal_run *run, cl_uint num_wait, const cl_event *wait,
                                 cl_event *done);
/* Its two halves: the summaries (stage 1), then the prefix mixtures and the output (a shard plan
 * fills the earlier chunks' slots in between). */
mhla_status mhla__causal_enqueue_summaries(mhla_causal *c, const mhla_causal_run *run, cl_uint num_wait,
                                           const cl_event *wait);
mhla_status mhla__causal_enqueue_rest(mhla_causal *c, const mhla_causal_run *run, cl_event *done);
/* The same for tables built for this call: uploads run->tables (setting run->chunks and
 * run->tiles), enqueues, and releases the uploads. */
mhla_status mhla__causal_enqueue_once(mhla_causal *c, mhla_causal_run *run, cl_uint num_wait, const cl_event *wait,
                                      cl_event *done);
/* Copies tables into new read-only device buffers (their contents are copied at creation, so the
 * host tables may be freed at once; the caller releases the buffers, which OpenCL keeps alive
 * until the kernels using them have run). */
mhla_status mhla__chunk_tables_upload(mhla_context *ctx, const mhla_chunk_tables *t, cl_mem *chunks,
                                      cl_mem *tiles);

/* A streaming decoder (causal/decoder.c; state save/restore in causal/decoder_state.c).
 * Invariant: when position % chunk != 0, `prefix` holds P_i of the running chunk i = position /
 * chunk, and slot i of `sums` its running summary; at a chunk boundary the next step builds P_i
 * and overwrites slot i. */
struct mhla_decoder {
    mhla_context *ctx;
    mhla_causal *kern; /* kernels and the resolved config (seq_t = capacity) */
    int64_t capacity, position;
    size_t cap_slots; /* ceil(capacity / chunk) summary slots */
    cl_mem sums;      /* [cap_slots][B*H][Dk][scols] */
    cl_mem prefix;    /* [B*H][Dk][scols]: P_i (one slot) */
    cl_mem next;      /* one slot: P_{i+1} as the steps of chunk i sum it (kernels/decoder.cl), swapped
                         with prefix when chunk i+1 starts */
    int resume;       /* next is not yet what the steps so far would have summed (after a prefill or a
                         restored state): the next step builds it first (decoder_resume) */
    cl_mem pref_work; /* prefill's prefix mixtures, one row per chunk it runs */
    size_t pref_work_rows;
    cl_mem stage[5]; /* host-call copies, indexed by mhla_tensor */
    size_t stage_bytes[5];
};

#endif /* MHLA_CAUSAL_H */
