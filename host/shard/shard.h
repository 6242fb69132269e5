/* host/shard: a plan's share of a sequence split across devices or processes (the plan's view of the
 * whole sequence, mhla_shard, lives in forward/forward.h: the forward's stages read it). Depends on
 * forward/ and what is below it. */
#ifndef MHLA_SHARD_H
#define MHLA_SHARD_H

#include "forward/forward.h"

/* Varlen shards (shard/shard_varlen.c): the chunks of the packed batch (every sequence chunked from
 * its own start, in sequence order), the tokens of chunks [offset, offset + count), and the chunk
 * tables of a shard plan set up over those tokens. */
int64_t mhla__shard_varlen_chunks(const mhla_shard *sh);
void mhla__shard_varlen_tokens(const mhla_shard *sh, int64_t offset, int64_t count, int64_t *first, int64_t *n);
mhla_status mhla__shard_varlen_tables(mhla_plan *plan);

#endif /* MHLA_SHARD_H */
