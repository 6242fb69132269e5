/* `mhla init-mixing`: an initial M x M mixing matrix (docs/spec.md "Mixing-matrix initializers") for a
 * block grid, or M x M_kv for cross-attention's two block grids, written as a float32 .npy that
 * `mhla run --mixing` reads. */
#include "args.h"
#include "cli.h"
#include "npy.h"

#include <stdio.h>
#include <stdlib.h>

static const char help[] =
    "usage: mhla init-mixing --blocks M|BHxBW|BTxBHxBW [--kv-blocks ...] [--init KIND[:PARAM]] --out MC.npy\n"
    "\n"
    "Writes the M x M float32 mixing matrix Mc (M = BT*BH*BW, row-major, Mc[i][b]) that an\n"
    "initializer gives for the block grid, as the released code's 1x1 convolution holds it; with\n"
    "--kv-blocks, the M x M_kv matrix of cross-attention (rows: query blocks, columns: key/value\n"
    "blocks; distances between block centres, each key block's mapped onto the query block grid).\n"
    "\n"
    "  --blocks M|BHxBW|BTxBHxBW  the block grid: 1D, 2D (image) or 3D (video)\n"
    "  --kv-blocks M|BHxBW|BTxBHxBW  the key/value block grid (cross-attention)\n"
    "  --init KIND[:PARAM]        linear (default), cos, exp[:SIGMA] (default 3), gaussian,\n"
    "                             local[:THRES] (default 1.5), paper, causal-uniform\n"
    "  --out MC.npy               the output (written to a temporary file, then renamed)\n";

int cli_mixing_init_cross(const char *cmd, const char *label, mhla_init_kind kind, const double *param,
                          const int64_t blocks[3], const int64_t kv_blocks[3], float **out)
{
    *out = NULL;
    /* A first call with no room validates the grids (the library caps M) before M*M_kv is computed
     * and allocated: it can only fail for the buffer then. */
    float probe;
    mhla_status st = kv_blocks ? mhla_mixing_init_cross(kind, param, blocks, kv_blocks, &probe, 0)
                               : mhla_mixing_init(kind, param, blocks[0], blocks[1], blocks[2], &probe, 0);
    if (st == MHLA_ERR_BUFFER_TOO_SMALL) {
        const int64_t *kb = kv_blocks ? kv_blocks : blocks;
        const size_t m = (size_t)(blocks[0] * blocks[1] * blocks[2]), k = (size_t)(kb[0] * kb[1] * kb[2]);
        if (!(*out = malloc(m * k * sizeof **out)))
            return cli_fail(CLI_RUNTIME, "out of host memory for a %zu x %zu mixing matrix", m, k);
        st = kv_blocks ? mhla_mixing_init_cross(kind, param, blocks, kv_blocks, *out, m * k)
                       : mhla_mixing_init(kind, param, blocks[0], blocks[1], blocks[2], *out, m * m);
    }
    if (st != MHLA_OK) {
        free(*out);
        *out = NULL;
        return cli_usage(cmd, "%s: %s", label, mhla_last_message());
    }
    return 0;
}

int cli_mixing_init(const char *cmd, const char *label, mhla_init_kind kind, const double *param,
                    const int64_t blocks[3], float **out)
{
    return cli_mixing_init_cross(cmd, label, kind, param, blocks, NULL, out);
}

enum { O_BLOCKS, O_KV_BLOCKS, O_INIT, O_OUT, O_COUNT };

int cmd_init_mixing(int argc, char **argv)
{
    cli_option opts[O_COUNT] = {
        [O_BLOCKS] = {"--blocks", "M|BHxBW|BTxBHxBW", NULL},
        [O_KV_BLOCKS] = {"--kv-blocks", "M|BHxBW|BTxBHxBW", NULL},
        [O_INIT] = {"--init", "KIND[:PARAM]", NULL},
        [O_OUT] = {"--out", "MC.npy", NULL},
    };
    const char *cmd = "init-mixing";
    int help_shown = 0, rc, ndim = 0, has_param = 0;
    int64_t blocks[3], kv_blocks[3];
    mhla_init_kind kind = MHLA_INIT_LINEAR;
    double param = 0.0;
    float *mc = NULL;
    char err[512];

    if ((rc = args_parse(cmd, help, opts, O_COUNT, argc, argv, &help_shown)) != 0 || help_shown)
        return rc;
    if (!opts[O_BLOCKS].value)
        return cli_usage(cmd, "%s: missing --blocks M|BHxBW|BTxBHxBW", cmd);
    if (!opts[O_OUT].value)
        return cli_usage(cmd, "%s: missing --out MC.npy", cmd);
    if ((rc = args_dims(cmd, &opts[O_BLOCKS], blocks, &ndim)) != 0)
        return rc;
    const int cross = opts[O_KV_BLOCKS].value != NULL;
    if (cross && (rc = args_dims(cmd, &opts[O_KV_BLOCKS], kv_blocks, &ndim)) != 0)
        return rc;
    if (opts[O_INIT].value && (rc = args_init(cmd, &opts[O_INIT], &kind, &param, &has_param)) != 0)
        return rc;
    const int64_t m = blocks[0] * blocks[1] * blocks[2];
    char label[160];
    snprintf(label, sizeof label, "--blocks %s", opts[O_BLOCKS].value);
    if ((rc = cli_mixing_init_cross(cmd, label, kind, has_param ? &param : NULL, blocks, cross ? kv_blocks : NULL,
                                    &mc)) != 0)
        return rc;
    const int64_t shape[2] = {m, cross ? kv_blocks[0] * kv_blocks[1] * kv_blocks[2] : m};
    const npy_status ws = npy_write(opts[O_OUT].value, NPY_F32, 2, shape, mc, err, sizeof err);
    free(mc);
    if (ws != NPY_OK)
        return cli_fail(cli_npy_exit_code(ws), "--out %s: %s", opts[O_OUT].value, err);
    return CLI_OK;
}
