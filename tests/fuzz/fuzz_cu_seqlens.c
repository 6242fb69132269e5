/* libFuzzer harness: packed variable-length batches. A causal varlen configuration (total
 * tokens, chunk, mixing_rows) goes through mhla_config_check(), then cu_seqlens through the
 * rule every varlen entry point applies (host/config/cu_seqlens.c, mhla__cu_seqlens_check). Accepted offsets
 * are checked against the rules of include/mhla.h, recomputed here in 128-bit arithmetic.
 * Input: int64 seq_t, int64 chunk, int64 mixing_rows, then int32 offsets (host byte order). */
#include "config/config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int64_t get64(const uint8_t *p)
{
    int64_t x;
    memcpy(&x, p, 8);
    return x;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 24)
        return 0;
    mhla_config cfg;
    mhla_config_init_causal(&cfg);
    cfg.varlen = 1;
    cfg.heads = 1;
    cfg.dk = cfg.dv = 4;
    cfg.seq_t = get64(data);
    cfg.chunk = get64(data + 8);
    cfg.mixing_rows = get64(data + 16);
    char msg[512] = "";
    if (mhla_config_check(&cfg, msg, sizeof msg) != MHLA_OK) {
        if (!msg[0])
            abort();
        return 0;
    }
    mhla__config_resolve(&cfg);
    const size_t count = (size - 24) / 4, num_seqs = count ? count - 1 : 0;
    /* An exact-size copy, so that ASan sees any read past cu_seqlens[num_seqs]. */
    int32_t *cu = malloc(count ? count * 4 : 1);
    if (!cu)
        return 0;
    if (count)
        memcpy(cu, data + 24, count * 4);
    msg[0] = '\0';
    const mhla_status st =
        mhla__cu_seqlens_check(cu, num_seqs, cfg.seq_t, cfg.chunk, cfg.mixing_rows, msg, sizeof msg);
    int ok = num_seqs >= 1 && cu[0] == 0 && cu[num_seqs] == cfg.seq_t;
    for (size_t s = 0; ok && s < num_seqs; ++s) {
        const __int128 len = (__int128)cu[s + 1] - cu[s];
        ok = len >= 0 && len <= (__int128)cfg.chunk * cfg.mixing_rows;
    }
    if ((st == MHLA_OK) != ok || (st != MHLA_OK && !msg[0]))
        abort();
    free(cu);
    return 0;
}
