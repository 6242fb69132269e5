/* Varlen shards: a contiguous range of the packed batch's chunk list, where every sequence is
 * chunked from its own start (docs/spec.md "Variable-length batches") and the list is the sequences'
 * chunks one after another. A shard may begin or end inside a sequence (at one of its chunk boundaries)
 * or between two. Summary slots are global chunk indices, as in mhla_forward_varlen(): a sequence's
 * chunk i has slot (the sequence's first global chunk) + i, so that the gathered rows of the earlier
 * chunks land where the prefix mixtures of the whole batch read them. */
#include "shard/shard.h"

static int64_t chunks_of(const mhla_shard *sh, size_t s)
{
    const int64_t c = sh->global.chunk;
    return ((int64_t)sh->cu[s + 1] - sh->cu[s] + c - 1) / c;
}

int64_t mhla__shard_varlen_chunks(const mhla_shard *sh)
{
    int64_t n = 0;
    for (size_t s = 0; s < sh->num_seqs; ++s)
        n += chunks_of(sh, s);
    return n;
}

/* The first token of global chunk g (the total for g = the number of chunks). */
static int64_t chunk_start(const mhla_shard *sh, int64_t g)
{
    for (size_t s = 0; s < sh->num_seqs; ++s) {
        const int64_t n = chunks_of(sh, s);
        if (g < n)
            return sh->cu[s] + g * sh->global.chunk;
        g -= n;
    }
    return sh->cu[sh->num_seqs];
}

void mhla__shard_varlen_tokens(const mhla_shard *sh, int64_t offset, int64_t count, int64_t *first, int64_t *n)
{
    *first = chunk_start(sh, offset);
    /* Chunks end where the next begins, or at their sequence's end: the next chunk's start (empty
     * sequences in between have no tokens). */
    *n = count == 0 ? 0 : chunk_start(sh, offset + count) - *first;
}

mhla_status mhla__shard_varlen_tables(mhla_plan *plan)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    const mhla_shard *sh = plan->shard;
    mhla_causal_plan *cp = plan->causal;
    const int64_t lo = sh->offset, hi = sh->offset + sh->count, C = sh->global.chunk;
    int64_t base = 0; /* the sequence's first global chunk: its chunk 0's slot */
    for (size_t s = 0; s < sh->num_seqs && base < hi; ++s) {
        const int64_t n = chunks_of(sh, s), a = lo > base ? lo : base, b = hi < base + n ? hi : base + n;
        if (a < b) {
            /* Chunks [a - base, b - base) of sequence s, at their tokens within the shard. */
            const int64_t t0 = sh->cu[s] + (a - base) * C;
            const int64_t t1 = sh->cu[s] + (b - base) * C < sh->cu[s + 1] ? sh->cu[s] + (b - base) * C : sh->cu[s + 1];
            MHLA_FORWARD_IF_ERROR(st, mhla__chunk_tables_add(ctx, &cp->tables, t0 - sh->token_offset, t1 - t0,
                                                             a - base, base, C, &cp->kern->tiling));
        }
        base += n;
    }
    MHLA_FORWARD_IF_ERROR(st, mhla__causal_plan_reserve(plan, (size_t)hi));
    MHLA_FORWARD_IF_ERROR(st, mhla__chunk_tables_upload(ctx, &cp->tables, &cp->chunks, &cp->tiles));
    plan->workspace_bytes += (cp->tables.n_chunks + cp->tables.n_tiles) * sizeof(cl_int4);
cleanup:
    return st;
}
