/* libFuzzer harness: decoder state restore (mhla_decoder_state_write) from arbitrary bytes, on
 * the default OpenCL device (PoCL in CI). It must refuse with a message, leaving the position as
 * it was, or restore: then reading the state back gives the same bytes (every header field up to
 * the reserved tail, and the summaries). One context and one decoder serve the whole run.
 * MHLA_FUZZ_SEEDS=DIR writes valid states at several positions into DIR (the seed corpus). */
#include <mhla.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CAPACITY 16
#define HEADER_FIELDS 96 /* bytes of the 128-byte header compared: the fields before kv_heads (include/mhla.h;
                             a restored state's kv_heads of 0, written before the field, reads back as heads) */

static mhla_context *ctx;
static mhla_decoder *dec;
static unsigned char *back; /* read-back buffer, the state's size at CAPACITY */
static size_t back_size;

static void die(const char *what)
{
    fprintf(stderr, "fuzz_decoder_state: %s: %s\n", what, mhla_last_message());
    abort();
}

/* Steps the decoder to each position of `positions` and saves the state there. */
static void write_seeds(const char *dir)
{
    static const int64_t positions[] = {0, 1, 3, 4, 5, 9, 16};
    const mhla_config *c = mhla_decoder_config(dec);
    float q[64], k[64], v[64], o[64], mix[16];
    for (int i = 0; i < 64; ++i)
        q[i] = 0.01f * (float)(i % 7), k[i] = 0.02f * (float)(i % 5), v[i] = 0.1f * (float)(i % 3);
    for (int i = 0; i < 16; ++i)
        mix[i] = 0.25f;
    if ((size_t)(c->batch * c->heads * c->dk) > 64)
        die("seed inputs too small");
    for (size_t i = 0; i < sizeof positions / sizeof positions[0]; ++i) {
        while (mhla_decoder_position(dec) < positions[i])
            if (mhla_decoder_step_host(dec, q, k, v, mix, o, 1) != MHLA_OK)
                die("mhla_decoder_step_host");
        const size_t n = mhla_decoder_state_size(dec);
        if (mhla_decoder_state_read(dec, back, n) != MHLA_OK)
            die("mhla_decoder_state_read");
        char path[4096];
        snprintf(path, sizeof path, "%s/pos%02lld", dir, (long long)positions[i]);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(back, 1, n, f) != n || fclose(f) != 0)
            die(path);
    }
    mhla_decoder_reset(dec);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    mhla_config cfg;
    mhla_config_init_causal(&cfg);
    cfg.heads = 2;
    cfg.dk = 4;
    cfg.dv = 3;
    cfg.chunk = 4;
    const mhla_status st = mhla_context_create(NULL, &ctx);
    if (st == MHLA_ERR_DEVICE_NOT_FOUND) { /* a skip (meson: exit 77), not a finding */
        fprintf(stderr, "fuzz_decoder_state: no OpenCL device: %s\n", mhla_last_message());
        exit(77);
    }
    if (st != MHLA_OK)
        die("mhla_context_create");
    if (mhla_decoder_create(ctx, &cfg, CAPACITY, &dec) != MHLA_OK)
        die("mhla_decoder_create");
    /* The largest state: read at capacity (a fresh decoder's position is 0, so compute it). */
    back_size = 4096;
    back = malloc(back_size);
    if (!back)
        die("malloc");
    const char *seeds = getenv("MHLA_FUZZ_SEEDS");
    if (seeds && *seeds)
        write_seeds(seeds);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A state at a known position to restore over: the refused cases must leave it there. */
    const int64_t before = mhla_decoder_position(dec);
    const mhla_status st = mhla_decoder_state_write(dec, data, size);
    if (st != MHLA_OK) {
        if (st == MHLA_ERR_OUT_OF_DEVICE_MEMORY || st == MHLA_ERR_OPENCL)
            die("device failure");
        if (mhla_decoder_position(dec) != before || !mhla_context_message(ctx)[0])
            abort();
        return 0;
    }
    const int64_t pos = mhla_decoder_position(dec);
    const size_t n = mhla_decoder_state_size(dec);
    if (pos < 0 || pos > CAPACITY || n != size || n > back_size)
        abort();
    if (mhla_decoder_state_read(dec, back, n) != MHLA_OK)
        die("mhla_decoder_state_read");
    if (memcmp(back, data, HEADER_FIELDS) != 0 || memcmp(back + 128, data + 128, n - 128) != 0)
        abort();
    return 0;
}
