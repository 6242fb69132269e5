/* libFuzzer harness: configuration validation with the key/value side (cross-attention, grouped
 * key/value heads). Arbitrary sizes go through mhla_config_check(); a refusal must carry a message;
 * an accepted configuration must satisfy what every later stage relies on, recomputed here in
 * 128-bit arithmetic: H_kv divides H, each key/value grid axis is a whole number of blocks, the
 * tensors' element counts fit 64 bits and agree with mhla_config_tensor_elems(), and the resolved
 * configuration validates again to the same shape.
 * Input: 16 int64 (host byte order): batch, heads, seq_t/h/w, block_t/h/w, dk, dv, kv_heads,
 * kv_seq_t/h/w, kv_block_t/h/w (the last ones 0 when missing), and a flags byte: bit 0 causal,
 * bits 1-2 the normalizer. */
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
    int64_t f[17] = {0};
    const size_t n = size / 8 < 17 ? size / 8 : 17;
    for (size_t i = 0; i < n; ++i)
        f[i] = get64(data + 8 * i);
    const uint8_t flags = size % 8 ? data[size - 1] : 0;
    mhla_config cfg;
    if (flags & 1)
        mhla_config_init_causal(&cfg);
    else
        mhla_config_init(&cfg);
    cfg.batch = f[0], cfg.heads = f[1], cfg.seq_t = f[2], cfg.seq_h = f[3], cfg.seq_w = f[4];
    cfg.block_t = f[5], cfg.block_h = f[6], cfg.block_w = f[7], cfg.dk = f[8], cfg.dv = f[9];
    cfg.kv_heads = f[10], cfg.kv_seq_t = f[11], cfg.kv_seq_h = f[12], cfg.kv_seq_w = f[13];
    cfg.kv_block_t = f[14], cfg.kv_block_h = f[15], cfg.kv_block_w = f[16];
    cfg.normalizer = (mhla_normalizer)((flags >> 1) & 3);
    char msg[512] = "";
    if (mhla_config_check(&cfg, msg, sizeof msg) != MHLA_OK) {
        if (!msg[0])
            abort();
        return 0;
    }
    mhla_shape s;
    if (mhla__config_validate(&cfg, &s, NULL, 0) != MHLA_OK)
        abort();
    const __int128 hkv = cfg.kv_heads ? cfg.kv_heads : cfg.heads;
    if (hkv < 1 || cfg.heads % hkv != 0 || s.heads_kv != hkv || s.group * hkv != cfg.heads ||
        s.bh_kv != (__int128)cfg.batch * hkv)
        abort();
    if (s.cross) {
        if (cfg.causal || cfg.normalizer == MHLA_NORMALIZER_OFFICIAL)
            abort();
        const int64_t seq[3] = {cfg.kv_seq_t ? cfg.kv_seq_t : cfg.seq_t, cfg.kv_seq_h ? cfg.kv_seq_h : cfg.seq_h,
                                cfg.kv_seq_w ? cfg.kv_seq_w : cfg.seq_w};
        const int given = cfg.kv_block_t || cfg.kv_block_h || cfg.kv_block_w;
        const int64_t blk[3] = {given ? cfg.kv_block_t : cfg.block_t, given ? cfg.kv_block_h : cfg.block_h,
                                given ? cfg.kv_block_w : cfg.block_w};
        __int128 tokens = 1, blocks = 1;
        for (int a = 0; a < 3; ++a) {
            if (seq[a] < 1 || blk[a] < 1 || seq[a] % blk[a] != 0)
                abort();
            tokens *= seq[a], blocks *= blk[a];
        }
        if (tokens != s.n_kv || blocks != s.m_kv || tokens > INT32_MAX || s.nb_kv * s.m_kv != s.n_kv)
            abort();
    } else if (s.n_kv != s.n || s.m_kv != s.m) {
        abort();
    }
    const __int128 kv_elems = (__int128)s.bh_kv * s.n_kv * cfg.dk;
    if (kv_elems > INT64_MAX / 8 || mhla_config_tensor_elems(&cfg, MHLA_TENSOR_K) != (size_t)kv_elems)
        abort();
    if (!cfg.causal && mhla_config_tensor_elems(&cfg, MHLA_TENSOR_MIXING) != (size_t)(s.m * s.m_kv))
        abort();
    mhla_config r = cfg;
    mhla__config_resolve(&r);
    mhla_shape s2;
    if (mhla__config_validate(&r, &s2, NULL, 0) != MHLA_OK || memcmp(&s, &s2, sizeof s) != 0)
        abort();
    return 0;
}
