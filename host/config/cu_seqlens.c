/* cu_seqlens rules of variable-length causal batches (include/mhla.h): checked here for every
 * call that takes them (forward, backward, shards, the references, the fuzzer). */
#include "config/config.h"

#include <stdio.h>

#define CHECK MHLA_CHECK_MSG

mhla_status mhla__cu_seqlens_check(const int32_t *cu, size_t num_seqs, int64_t total, int64_t chunk, int64_t rows,
                                   char *msg, size_t msg_size)
{
    CHECK(cu != NULL, MHLA_ERR_INVALID_ARGUMENT, "cu_seqlens is NULL");
    CHECK(num_seqs >= 1, MHLA_ERR_INVALID_ARGUMENT, "num_seqs must be >= 1, got %zu", num_seqs);
    CHECK(cu[0] == 0, MHLA_ERR_INVALID_ARGUMENT, "cu_seqlens[0] must be 0, got %d", (int)cu[0]);
    for (size_t s = 0; s < num_seqs; ++s) {
        CHECK(cu[s + 1] >= cu[s], MHLA_ERR_INVALID_ARGUMENT,
              "cu_seqlens must not decrease: cu_seqlens[%zu] = %d < cu_seqlens[%zu] = %d", s + 1, (int)cu[s + 1], s,
              (int)cu[s]);
        const int64_t len = (int64_t)cu[s + 1] - cu[s];
        CHECK((len + chunk - 1) / chunk <= rows, MHLA_ERR_SEQUENCE_TOO_LONG,
              "sequence %zu (cu_seqlens[%zu] = %d .. cu_seqlens[%zu] = %d) of %lld tokens is longer than chunk * "
              "rows(Mc) = %lld * %lld = %lld",
              s, s, (int)cu[s], s + 1, (int)cu[s + 1], (long long)len, (long long)chunk, (long long)rows,
              (long long)(chunk * rows));
    }
    CHECK(cu[num_seqs] == total, MHLA_ERR_INVALID_ARGUMENT,
          "cu_seqlens[%zu] = %d must equal the plan's total of %lld packed tokens (seq_t)", num_seqs,
          (int)cu[num_seqs], (long long)total);
    return MHLA_OK;
}
