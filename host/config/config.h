/* host/config: configurations (validation, defaults, derived shapes), cu_seqlens rules, storage
 * conversions, names of the enums and Mc initializers. Depends on core/ only. */
#ifndef MHLA_CONFIG_H
#define MHLA_CONFIG_H

#include "core/core.h"

/* Derived sizes of a valid configuration. */
typedef struct mhla_shape {
    int64_t n;          /* tokens per sequence */
    int64_t m;          /* blocks (non-causal) */
    int64_t nb;         /* tokens per block */
    int64_t pt, ph, pw; /* block extent in tokens */
    int64_t bh;         /* batch * heads */
    int64_t summary_cols; /* Dv + 1: the value columns and the key-sum column z */
    /* The key/value side: the query side's values for self-attention with H key/value heads. */
    int64_t heads_kv, group; /* H_kv, and the query heads that share one: H / H_kv */
    int64_t n_kv, m_kv, nb_kv;      /* tokens, blocks (the columns of Mc), tokens per block */
    int64_t pt_kv, ph_kv, pw_kv;    /* block extent in tokens */
    int64_t bh_kv;                  /* batch * H_kv: the summaries' heads */
    int cross;                      /* 1 when the key/value grid or its blocks differ from the queries' */
} mhla_shape;

/* Validates cfg (msg gets the reason) and fills the derived shape. */
mhla_status mhla__config_validate(const mhla_config *cfg, mhla_shape *shape, char *msg, size_t msg_size);
/* mhla_config_tensor_elems() from a configuration validated already and its shape: what a plan's
 * calls size their tensors by, with no validation per call. */
size_t mhla__shape_tensor_elems(const mhla_config *cfg, const mhla_shape *shape, mhla_tensor tensor);
/* Bytes per stored element of a dtype. */
size_t mhla__dtype_size(mhla_dtype dtype);
/* The config with defaults resolved (scale 0 -> the mode's default, mixing_rows 0 -> M). */
void mhla__config_resolve(mhla_config *cfg);

/* cu_seqlens rules (mhla.h, "Variable-length causal batches"): S >= 1 offsets starting at 0,
 * non-decreasing, ending at total, each sequence at most chunk * rows tokens. msg names the index
 * and the values. Used by mhla_forward_varlen() and the reference. */
mhla_status mhla__cu_seqlens_check(const int32_t *cu, size_t num_seqs, int64_t total, int64_t chunk, int64_t rows,
                                   char *msg, size_t msg_size);

/* The softmax baseline's configuration (block grid, feature map and normalizer ignored, scale 0 ->
 * Dk^-0.5), config/config.c. */
mhla_status mhla__softmax_config(const mhla_config *cfg, mhla_config *resolved, mhla_shape *shape, char *msg,
                                 size_t msg_size);

/* The token grid the kernels take by value: one definition with the kernels' (kernels/grid.h). */
#define MHLA_GRID_INT cl_int
#include "grid.h"

#endif /* MHLA_CONFIG_H */
