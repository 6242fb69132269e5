/* Decoder state save/restore in the byte layout documented in include/mhla.h: a 128-byte header
 * that identifies the configuration, the chunk summaries in chunk order, and P_i of a running
 * chunk. The next chunk's prefix mixture, which the steps sum as they go, is not stored: the first
 * step after a restore builds it from the summaries. */
#include "causal/causal.h"

#include <string.h>

#define STATE_MAGIC "MHLADEC" /* 8 bytes with its NUL */
#define STATE_VERSION 1u
#define STATE_HEADER 128u
#define STATE_BOM 0x01020304u

/* Header fields: byte offsets of include/mhla.h's table. */
enum {
    OFF_MAGIC = 0,
    OFF_VERSION = 8,
    OFF_HEADER = 12,
    OFF_BOM = 16,
    OFF_FEATURE = 20,
    OFF_FEPS = 24,
    OFF_NORM = 28,
    OFF_BATCH = 32,
    OFF_HEADS = 40,
    OFF_DK = 48,
    OFF_DV = 56,
    OFF_CHUNK = 64,
    OFF_SCOLS = 72,
    OFF_POSITION = 80,
    OFF_SLOTS = 88,
    OFF_KV_HEADS = 96 /* in the reserved bytes: 0 (states written before it) means heads */
};

/* A state stores the summaries of each slot, not its padding (host/causal/causal.h): the format
 * does not depend on the padding, and no unwritten device bytes reach the caller's buffer. */
static size_t slot_bytes(const mhla_decoder *dec) { return dec->kern->slot_used * sizeof(float); }

/* Summaries stored at `position`, and whether P_i of a running chunk is. */
static int64_t slots_at(const mhla_decoder *dec, int64_t position)
{
    return (position + dec->kern->cfg.chunk - 1) / dec->kern->cfg.chunk;
}
static int has_prefix(const mhla_decoder *dec, int64_t position) { return position % dec->kern->cfg.chunk != 0; }

static size_t size_at(const mhla_decoder *dec, int64_t position)
{
    return STATE_HEADER + ((size_t)slots_at(dec, position) + (size_t)has_prefix(dec, position)) * slot_bytes(dec);
}

size_t mhla_decoder_state_size(const mhla_decoder *dec) { return dec ? size_at(dec, dec->position) : 0; }

static void put32(unsigned char *h, int off, uint32_t x) { memcpy(h + off, &x, 4); }
static void put64(unsigned char *h, int off, int64_t x) { memcpy(h + off, &x, 8); }
static uint32_t get32(const unsigned char *h, int off)
{
    uint32_t x;
    memcpy(&x, h + off, 4);
    return x;
}
static int64_t get64(const unsigned char *h, int off)
{
    int64_t x;
    memcpy(&x, h + off, 8);
    return x;
}

mhla_status mhla_decoder_state_read(mhla_decoder *dec, void *buf, size_t size)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = NULL;
    MHLA_FAIL_IF(st, !dec, NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_decoder_state_read: decoder is NULL");
    ctx = dec->ctx;
    MHLA_FAIL_IF(st, !buf, ctx, MHLA_ERR_INVALID_ARGUMENT, "mhla_decoder_state_read: buf is NULL");
    const size_t need = mhla_decoder_state_size(dec);
    MHLA_FAIL_IF(st, size < need, ctx, MHLA_ERR_BUFFER_TOO_SMALL,
                 "mhla_decoder_state_read: buffer of %zu bytes; the state at position %lld takes %zu", size,
                 (long long)dec->position, need);
    const mhla_config *c = &dec->kern->cfg;
    const int64_t slots = slots_at(dec, dec->position);
    unsigned char *h = buf;
    float feps = c->feature_eps;
    memset(h, 0, STATE_HEADER);
    memcpy(h + OFF_MAGIC, STATE_MAGIC, sizeof STATE_MAGIC);
    put32(h, OFF_VERSION, STATE_VERSION);
    put32(h, OFF_HEADER, STATE_HEADER);
    put32(h, OFF_BOM, STATE_BOM);
    put32(h, OFF_FEATURE, (uint32_t)c->feature_map);
    memcpy(h + OFF_FEPS, &feps, 4);
    put32(h, OFF_NORM, (uint32_t)c->normalizer);
    put64(h, OFF_BATCH, c->batch);
    put64(h, OFF_HEADS, c->heads);
    put64(h, OFF_DK, c->dk);
    put64(h, OFF_DV, c->dv);
    put64(h, OFF_CHUNK, c->chunk);
    put64(h, OFF_SCOLS, dec->kern->scols);
    put64(h, OFF_POSITION, dec->position);
    put64(h, OFF_SLOTS, slots);
    put64(h, OFF_KV_HEADS, dec->kern->bh_kv / c->batch);
    /* Blocking reads after everything enqueued before (a barrier orders an out-of-order queue). */
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    if (slots > 0)
        MHLA_CL_TRY(st, ctx,
                    mhla__causal_slots_read(dec->kern, dec->sums, 0, (size_t)slots, h + STATE_HEADER),
                    "clEnqueueReadBufferRect (decoder summaries)");
    if (has_prefix(dec, dec->position))
        MHLA_CL_TRY(st, ctx,
                    mhla__causal_slots_read(dec->kern, dec->prefix, 0, 1,
                                            h + STATE_HEADER + (size_t)slots * slot_bytes(dec)),
                    "clEnqueueReadBufferRect (decoder prefix mixture)");
cleanup:
    return st;
}

/* Compares one header field with the decoder's; the message names both values. */
#define SAME(st, ctx, field, saved, mine)                                                           \
    MHLA_FAIL_IF(st, (saved) != (mine), ctx, MHLA_ERR_INVALID_ARGUMENT,                             \
                 "mhla_decoder_state_write: the state was saved with %s = %lld, this decoder has %s = %lld", \
                 field, (long long)(saved), field, (long long)(mine))

mhla_status mhla_decoder_state_write(mhla_decoder *dec, const void *buf, size_t size)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = NULL;
    MHLA_FAIL_IF(st, !dec, NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_decoder_state_write: decoder is NULL");
    ctx = dec->ctx;
    MHLA_FAIL_IF(st, !buf, ctx, MHLA_ERR_INVALID_ARGUMENT, "mhla_decoder_state_write: buf is NULL");
    MHLA_FAIL_IF(st, size < STATE_HEADER, ctx, MHLA_ERR_BUFFER_TOO_SMALL,
                 "mhla_decoder_state_write: %zu bytes are fewer than the state's %u-byte header", size, STATE_HEADER);
    const unsigned char *h = buf;
    const mhla_config *c = &dec->kern->cfg;
    MHLA_FAIL_IF(st, memcmp(h + OFF_MAGIC, STATE_MAGIC, sizeof STATE_MAGIC) != 0, ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_decoder_state_write: not a decoder state (bad magic)");
    MHLA_FAIL_IF(st, get32(h, OFF_BOM) != STATE_BOM, ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_decoder_state_write: the state was written with another byte order (mark 0x%08x)",
                 (unsigned)get32(h, OFF_BOM));
    MHLA_FAIL_IF(st, get32(h, OFF_VERSION) != STATE_VERSION || get32(h, OFF_HEADER) != STATE_HEADER, ctx,
                 MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_decoder_state_write: state format version %u with a %u-byte header; this library reads "
                 "version %u (%u bytes)",
                 (unsigned)get32(h, OFF_VERSION), (unsigned)get32(h, OFF_HEADER), STATE_VERSION, STATE_HEADER);
    SAME(st, ctx, "batch", get64(h, OFF_BATCH), c->batch);
    SAME(st, ctx, "heads", get64(h, OFF_HEADS), c->heads);
    SAME(st, ctx, "kv_heads", get64(h, OFF_KV_HEADS) ? get64(h, OFF_KV_HEADS) : get64(h, OFF_HEADS),
         dec->kern->bh_kv / c->batch);
    SAME(st, ctx, "dk", get64(h, OFF_DK), c->dk);
    SAME(st, ctx, "dv", get64(h, OFF_DV), c->dv);
    SAME(st, ctx, "chunk", get64(h, OFF_CHUNK), c->chunk);
    SAME(st, ctx, "feature_map", (int64_t)get32(h, OFF_FEATURE), (int64_t)c->feature_map);
    SAME(st, ctx, "normalizer", (int64_t)get32(h, OFF_NORM), (int64_t)c->normalizer);
    SAME(st, ctx, "summary columns", get64(h, OFF_SCOLS), dec->kern->scols);
    float feps;
    memcpy(&feps, h + OFF_FEPS, 4);
    MHLA_FAIL_IF(st, memcmp(&feps, &c->feature_eps, 4) != 0, ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_decoder_state_write: the state was saved with feature_eps = %g, this decoder has %g",
                 (double)feps, (double)c->feature_eps);
    const int64_t pos = get64(h, OFF_POSITION), slots = get64(h, OFF_SLOTS);
    /* The capacity first: it bounds pos, so that the summary count below cannot overflow (a
     * position near INT64_MAX did, found by tests/fuzz/fuzz_decoder_state). */
    MHLA_FAIL_IF(st, pos > dec->capacity, ctx, MHLA_ERR_CAPACITY_EXCEEDED,
                 "mhla_decoder_state_write: the state is at position %lld, past this decoder's capacity of %lld "
                 "tokens",
                 (long long)pos, (long long)dec->capacity);
    MHLA_FAIL_IF(st, pos < 0 || slots != slots_at(dec, pos), ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_decoder_state_write: corrupt header: position %lld with %lld summaries (chunk %lld)",
                 (long long)pos, (long long)slots, (long long)c->chunk);
    const size_t need = size_at(dec, pos);
    MHLA_FAIL_IF(st, size < need, ctx, MHLA_ERR_BUFFER_TOO_SMALL,
                 "mhla_decoder_state_write: %zu bytes; a state at position %lld takes %zu (truncated?)", size,
                 (long long)pos, need);
    MHLA_FAIL_IF(st, size > need, ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_decoder_state_write: %zu bytes; a state at position %lld takes %zu", size, (long long)pos,
                 need);
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    if (slots > 0)
        MHLA_CL_TRY(st, ctx,
                    mhla__causal_slots_write(dec->kern, dec->sums, 0, (size_t)slots, h + STATE_HEADER),
                    "clEnqueueWriteBufferRect (decoder summaries)");
    if (has_prefix(dec, pos))
        MHLA_CL_TRY(st, ctx,
                    mhla__causal_slots_write(dec->kern, dec->prefix, 0, 1,
                                            h + STATE_HEADER + (size_t)slots * slot_bytes(dec)),
                    "clEnqueueWriteBufferRect (decoder prefix mixture)");
    dec->position = pos;
    dec->resume = 1; /* the next step first sums what the state does not hold (P_{i+1} so far) */
cleanup:
    return st;
}
