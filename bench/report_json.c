/* mhla-bench's JSON report, written by --json and read back by --compare. One table of fields per
 * object drives both directions, so that what is written is what can be read. */
#include "bench.h"
#include "json.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define REPORT_FORMAT "mhla-bench 1"

typedef enum field_kind { F_STR, F_INT, F_UINT, F_U64, F_I64, F_DOUBLE } field_kind;

typedef struct field {
    const char *key;
    size_t offset;
    field_kind kind;
    size_t size; /* F_STR: the char array's size */
} field;

#define STR(type, key, member) {key, offsetof(type, member), F_STR, sizeof(((type *)0)->member)}
#define NUM(type, key, member, kind) {key, offsetof(type, member), kind, 0}

static const field device_fields[] = {
    STR(bench_device, "name", name),
    STR(bench_device, "vendor", vendor),
    STR(bench_device, "driver_version", driver),
    STR(bench_device, "platform_name", platform_name),
    STR(bench_device, "platform_version", platform_version),
    STR(bench_device, "device_version", device_version),
    STR(bench_device, "opencl_c_version", opencl_c),
    NUM(bench_device, "compute_units", compute_units, F_UINT),
    NUM(bench_device, "max_clock_mhz", clock_mhz, F_UINT),
    NUM(bench_device, "global_mem_bytes", global_mem, F_U64),
    NUM(bench_device, "max_alloc_bytes", max_alloc, F_U64),
    NUM(bench_device, "local_mem_bytes", local_mem, F_U64),
    NUM(bench_device, "float_width", float_width, F_INT),
};

static const field peak_fields[] = {
    NUM(bench_peak, "gflops", gflops, F_DOUBLE),
    NUM(bench_peak, "gflops_min", gflops_min, F_DOUBLE),
    NUM(bench_peak, "gflops_max", gflops_max, F_DOUBLE),
    NUM(bench_peak, "fma_vector_width", vector_width, F_INT),
    NUM(bench_peak, "fma_fused", fused, F_INT),
    NUM(bench_peak, "copy_gbps", gbps, F_DOUBLE),
    NUM(bench_peak, "copy_gbps_min", gbps_min, F_DOUBLE),
    NUM(bench_peak, "copy_gbps_max", gbps_max, F_DOUBLE),
    NUM(bench_peak, "copy_buffer_bytes", copy_bytes, F_DOUBLE),
    NUM(bench_peak, "runs", runs, F_INT),
    NUM(bench_peak, "host_clock", host_clock, F_INT),
};

static const field parameter_fields[] = {
    STR(bench_report, "command", command),
    NUM(bench_report, "quick", opts.quick, F_INT),
    NUM(bench_report, "target_ms", opts.target_ms, F_DOUBLE),
    NUM(bench_report, "min_iters", opts.min_iters, F_INT),
    NUM(bench_report, "max_iters", opts.max_iters, F_INT),
    NUM(bench_report, "warmup", opts.warmup, F_INT),
    NUM(bench_report, "max_row_s", opts.max_row_s, F_DOUBLE),
    NUM(bench_report, "max_total_s", opts.max_total_s, F_DOUBLE),
    NUM(bench_report, "seed", opts.seed, F_UINT),
    NUM(bench_report, "batch", opts.batch, F_I64),
};

static const field row_fields[] = {
    STR(bench_row, "note", note),
    STR(bench_row, "kernels", kernels), /* --kernels: "NAME CALLS MS" lines; "" without */
    NUM(bench_row, "batch", shape.batch, F_I64),
    NUM(bench_row, "heads", shape.heads, F_I64),
    NUM(bench_row, "seq_t", shape.t, F_I64),
    NUM(bench_row, "seq_h", shape.h, F_I64),
    NUM(bench_row, "seq_w", shape.w, F_I64),
    NUM(bench_row, "block_t", shape.bt, F_I64),
    NUM(bench_row, "block_h", shape.bh, F_I64),
    NUM(bench_row, "block_w", shape.bw, F_I64),
    NUM(bench_row, "dk", shape.dk, F_I64),
    NUM(bench_row, "dv", shape.dv, F_I64),
    NUM(bench_row, "kv_heads", shape.kv_heads, F_I64), /* 0: heads (no grouped key/value heads) */
    NUM(bench_row, "kv_seq_t", shape.kv_t, F_I64),     /* cross-attention's key/value tokens; 0: none */
    NUM(bench_row, "kv_block_t", shape.kv_bt, F_I64),
    NUM(bench_row, "chunk", shape.chunk, F_I64),
    NUM(bench_row, "iters", iters, F_INT),
    NUM(bench_row, "steps", steps, F_INT),
    NUM(bench_row, "ms_median", ms_median, F_DOUBLE),
    NUM(bench_row, "ms_min", ms_min, F_DOUBLE),
    NUM(bench_row, "ms_max", ms_max, F_DOUBLE),
    NUM(bench_row, "summary_ms", stage_ms[0], F_DOUBLE),
    NUM(bench_row, "mixing_ms", stage_ms[1], F_DOUBLE),
    NUM(bench_row, "output_ms", stage_ms[2], F_DOUBLE),
    NUM(bench_row, "gate_ms", gate_ms, F_DOUBLE),
    NUM(bench_row, "span_ms", span_ms, F_DOUBLE),
    NUM(bench_row, "flops", flops, F_DOUBLE),
    NUM(bench_row, "bytes", bytes, F_DOUBLE),
    NUM(bench_row, "gflops", gflops, F_DOUBLE),
    NUM(bench_row, "gbps", gbps, F_DOUBLE),
    NUM(bench_row, "pct_peak_flops", pct_peak_flops, F_DOUBLE),
    NUM(bench_row, "pct_peak_bw", pct_peak_bw, F_DOUBLE),
    NUM(bench_row, "ratio_mhla_linear", ratio_mhla_linear, F_DOUBLE),
    NUM(bench_row, "ratio_softmax_mhla", ratio_softmax_mhla, F_DOUBLE),
    NUM(bench_row, "ratio_mhla_linear_estimated", ratio_mhla_linear_estimated, F_INT),
    NUM(bench_row, "ratio_softmax_mhla_estimated", ratio_softmax_mhla_estimated, F_INT),
    NUM(bench_row, "step_mean_ms", step_mean_ms, F_DOUBLE),
    NUM(bench_row, "chunk_start_ms", chunk_start_ms, F_DOUBLE),
    NUM(bench_row, "tokens_per_s", tokens_per_s, F_DOUBLE),
    NUM(bench_row, "ratio_causal_mhla", ratio_causal_mhla, F_DOUBLE),
    NUM(bench_row, "ratio_causal_mhla_estimated", ratio_causal_mhla_estimated, F_INT),
    NUM(bench_row, "ratio_bwd_fwd", ratio_bwd_fwd, F_DOUBLE),
    NUM(bench_row, "ratio_bwd_fwd_estimated", ratio_bwd_fwd_estimated, F_INT),
    NUM(bench_row, "ratio_context", ratio_context, F_DOUBLE),
    NUM(bench_row, "pct_sgemm", pct_sgemm, F_DOUBLE),
    NUM(bench_row, "ratio_blas_mhla", ratio_blas_mhla, F_DOUBLE),
    NUM(bench_row, "ratio_blas_mhla_estimated", ratio_blas_mhla_estimated, F_INT),
    /* a bench_clock: 0 device time, 1 host clock for want of device timestamps, 2 a host op */
    NUM(bench_row, "host_clock", host_clock, F_INT),
    /* the check against the double reference before timing (verify.c): max_rel_err at verify_n
     * tokens (null: not verified, or it could not run), its tolerance, and whether it failed */
    NUM(bench_row, "verified", verified, F_DOUBLE),
    NUM(bench_row, "verify_tolerance", verify_tolerance, F_DOUBLE),
    NUM(bench_row, "verify_n", verify_n, F_I64),
    NUM(bench_row, "verify_failed", verify_failed, F_INT),
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static void write_fields(FILE *f, const void *base, const field *fields, size_t n)
{
    for (size_t i = 0; i < n; ++i) {
        const char *p = (const char *)base + fields[i].offset;
        fprintf(f, "%s", i ? ", " : "");
        json_write_string(f, fields[i].key);
        fputs(": ", f);
        switch (fields[i].kind) {
        case F_STR:
            json_write_string(f, p);
            break;
        case F_INT:
            fprintf(f, "%d", *(const int *)p);
            break;
        case F_UINT:
            fprintf(f, "%u", *(const unsigned *)p);
            break;
        case F_U64:
            fprintf(f, "%llu", (unsigned long long)*(const uint64_t *)p);
            break;
        case F_I64:
            fprintf(f, "%lld", (long long)*(const int64_t *)p);
            break;
        case F_DOUBLE:
            json_write_number(f, *(const double *)p);
            break;
        }
    }
}

/* Missing members keep what `base` held; a null number reads as NaN. */
static void read_fields(const json_value *obj, void *base, const field *fields, size_t n)
{
    for (size_t i = 0; i < n; ++i) {
        const json_value *v = json_get(obj, fields[i].key);
        char *p = (char *)base + fields[i].offset;
        if (!v)
            continue;
        const double x = json_number(v, NAN);
        switch (fields[i].kind) {
        case F_STR:
            snprintf(p, fields[i].size, "%s", json_string(v, ""));
            break;
        case F_INT:
            *(int *)p = isfinite(x) ? (int)x : 0;
            break;
        case F_UINT:
            *(unsigned *)p = isfinite(x) && x >= 0 ? (unsigned)x : 0;
            break;
        case F_U64:
            *(uint64_t *)p = isfinite(x) && x >= 0 ? (uint64_t)x : 0;
            break;
        case F_I64:
            *(int64_t *)p = isfinite(x) ? (int64_t)x : 0;
            break;
        case F_DOUBLE:
            *(double *)p = x;
            break;
        }
    }
}

static void write_sizes(FILE *f, const char *key, const int64_t *a, const int64_t *b, size_t count)
{
    fprintf(f, ", \"%s\": [", key);
    for (size_t i = 0; i < count; ++i) {
        if (b)
            fprintf(f, "%s\"%lldx%lld\"", i ? ", " : "", (long long)a[i], (long long)b[i]);
        else
            fprintf(f, "%s%lld", i ? ", " : "", (long long)a[i]);
    }
    fputc(']', f);
}

/* The lists the sweep ran over (an empty "m" is the paper's rule). */
static void write_sweep(FILE *f, const bench_options *o)
{
    write_sizes(f, "n", o->n, NULL, o->n_count);
    write_sizes(f, "images", o->image_h, o->image_w, o->image_count);
    write_sizes(f, "heads", o->heads, NULL, o->heads_count);
    write_sizes(f, "dims", o->dk, o->dv, o->dims_count);
    write_sizes(f, "m", o->m, NULL, o->m_count);
    write_sizes(f, "chunk", o->chunk, NULL, o->chunk_count);
    write_sizes(f, "decode_context", o->decode_ctx, NULL, o->decode_ctx_count);
    fprintf(f, ", \"layout\": \"%s\", \"ops\": [", mhla_layout_name(o->layout));
    for (int op = 0, first = 1; op < BENCH_OP_COUNT; ++op)
        if (o->ops & (1u << op)) {
            fprintf(f, "%s\"%s\"", first ? "" : ", ", bench_op_get((bench_op_id)op)->name);
            first = 0;
        }
    fputc(']', f);
}

int bench_write_json(FILE *f, const bench_report *rep)
{
    fputs("{\n  \"format\": ", f);
    json_write_string(f, REPORT_FORMAT);
    fputs(",\n  \"library_version\": ", f);
    json_write_string(f, rep->library_version);
    fputs(",\n  \"started_utc\": ", f);
    json_write_string(f, rep->started);
    fputs(",\n  \"wall_s\": ", f);
    json_write_number(f, rep->wall_s);
    fputs(",\n  \"device\": {", f);
    write_fields(f, &rep->device, device_fields, COUNT(device_fields));
    fputs("},\n  \"peak\": {", f);
    write_fields(f, &rep->peak, peak_fields, COUNT(peak_fields));
    fputs("},\n  \"parameters\": {", f);
    write_fields(f, rep, parameter_fields, COUNT(parameter_fields));
    write_sweep(f, &rep->opts);
    /* What every row shares: the library's defaults, which the MHLA and linear rows run with, and
     * the causal defaults of the mhla-causal and decode rows. */
    mhla_config cfg, causal;
    mhla_config_init(&cfg);
    mhla_config_init_causal(&causal);
    cfg.normalizer = rep->opts.normalizer; /* --normalizer: the non-causal self-attention rows' */
    int host = rep->peak.host_clock, host_ops = 0;
    for (size_t i = 0; i < rep->row_count; ++i) {
        host |= rep->rows[i].host_clock == BENCH_CLOCK_FALLBACK;
        host_ops |= rep->rows[i].host_clock == BENCH_CLOCK_HOST_OP;
    }
    char time[160], blas[256], gate[96];
    snprintf(time, sizeof time, "%s%s",
             host ? "host clock: the device's profiling timestamps are unusable" : "device time, OpenCL profiling events",
             host_ops ? "; blas and sgemm rows: host wall time (they run on the CPU)" : "");
    if (rep->opts.gate == BENCH_GATE_KERNEL)
        snprintf(gate, sizeof gate, "kernel, %.0f us", rep->opts.gate_us);
    else
        snprintf(gate, sizeof gate, "event");
    if (bench_blas_available())
        snprintf(blas, sizeof blas, "%s, %d threads", bench_blas_config(), bench_blas_threads());
    else
        snprintf(blas, sizeof blas, "none: %s", BENCH_NO_BLAS_NOTE);
    const struct {
        const char *key, *value;
    } shared[] = {{"dtype", mhla_dtype_name(cfg.dtype)},
                  {"feature_map", mhla_feature_map_name(cfg.feature_map)},
                  {"normalizer", mhla_normalizer_name(cfg.normalizer)},
                  {"mixing_init", mhla_init_kind_name(BENCH_MIXING_INIT)},
                  {"causal_feature_map", mhla_feature_map_name(causal.feature_map)},
                  {"causal_normalizer", mhla_normalizer_name(causal.normalizer)},
                  {"causal_scale", "Dk^-0.5"},
                  {"causal_mixing_init", mhla_init_kind_name(BENCH_CAUSAL_MIXING_INIT)},
                  {"softmax_scale", "Dk^-0.5"},
                  {"time", time},
                  {"gate", gate},
                  {"stage_marks", rep->opts.no_stage_marks ? "off" : "on"},
                  {"blas", blas}};
    for (size_t i = 0; i < COUNT(shared); ++i) {
        fputs(", ", f);
        json_write_string(f, shared[i].key);
        fputs(": ", f);
        json_write_string(f, shared[i].value);
    }
    fputs("},\n  \"rows\": [", f);
    for (size_t i = 0; i < rep->row_count; ++i) {
        const bench_row *r = &rep->rows[i];
        fputs(i ? ",\n    {\"op\": " : "\n    {\"op\": ", f);
        json_write_string(f, bench_op_get(r->op)->name);
        fputs(", \"status\": ", f);
        json_write_string(f, bench_status_name(r->status));
        fputs(", \"layout\": ", f);
        json_write_string(f, mhla_layout_name(r->shape.layout));
        fprintf(f, ", \"n\": %lld, \"m\": %lld, ", (long long)bench_shape_n(&r->shape),
                (long long)bench_shape_m(&r->shape));
        write_fields(f, r, row_fields, COUNT(row_fields));
        fputc('}', f);
    }
    fputs("\n  ]\n}\n", f);
    return ferror(f) ? -1 : 0;
}

static char *read_text(const char *path, char *err, size_t err_size)
{
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    long size = -1;
    if (f && fseek(f, 0, SEEK_END) == 0)
        size = ftell(f);
    if (size >= 0 && fseek(f, 0, SEEK_SET) == 0 && (text = malloc((size_t)size + 1)) != NULL) {
        if (fread(text, 1, (size_t)size, f) == (size_t)size) {
            text[size] = '\0';
        } else {
            free(text);
            text = NULL;
        }
    }
    if (!text)
        snprintf(err, err_size, "cannot read %s", path);
    if (f)
        fclose(f);
    return text;
}

int bench_read_json(const char *path, bench_report *out, char *err, size_t err_size)
{
    char perr[160];
    char *text = read_text(path, err, err_size);
    json_value *doc = text ? json_parse(text, perr, sizeof perr) : NULL;
    int rc = -1;
    memset(out, 0, sizeof *out);
    if (!text)
        goto cleanup;
    if (!doc) {
        snprintf(err, err_size, "%s: %s", path, perr);
        goto cleanup;
    }
    if (strcmp(json_string(json_get(doc, "format"), ""), REPORT_FORMAT) != 0) {
        snprintf(err, err_size, "%s: not an mhla-bench report (format \"%s\" expected)", path, REPORT_FORMAT);
        goto cleanup;
    }
    snprintf(out->library_version, sizeof out->library_version, "%s",
             json_string(json_get(doc, "library_version"), ""));
    snprintf(out->started, sizeof out->started, "%s", json_string(json_get(doc, "started_utc"), ""));
    out->wall_s = json_number(json_get(doc, "wall_s"), NAN);
    read_fields(json_get(doc, "device"), &out->device, device_fields, COUNT(device_fields));
    read_fields(json_get(doc, "peak"), &out->peak, peak_fields, COUNT(peak_fields));
    read_fields(json_get(doc, "parameters"), out, parameter_fields, COUNT(parameter_fields));
    const json_value *rows = json_get(doc, "rows");
    if (!rows || rows->type != JSON_ARRAY) {
        snprintf(err, err_size, "%s: no \"rows\" array", path);
        goto cleanup;
    }
    out->rows = calloc(rows->count ? rows->count : 1, sizeof *out->rows);
    if (!out->rows) {
        snprintf(err, err_size, "out of memory");
        goto cleanup;
    }
    for (size_t i = 0; i < rows->count; ++i) {
        const json_value *o = &rows->items[i];
        bench_row *r = &out->rows[out->row_count];
        const bench_op_id op = bench_op_find(json_string(json_get(o, "op"), ""));
        if (op == BENCH_OP_COUNT)
            continue; /* an op this build does not know (a newer report): nothing to match it with */
        memset(r, 0, sizeof *r);
        r->stage_ms[0] = r->stage_ms[1] = r->stage_ms[2] = NAN;
        r->step_mean_ms = r->chunk_start_ms = r->tokens_per_s = r->ratio_causal_mhla = r->ratio_context = NAN;
        r->ratio_bwd_fwd = NAN;
        r->pct_sgemm = r->ratio_blas_mhla = NAN; /* absent from reports older than these columns */
        r->verified = r->verify_tolerance = NAN; /* absent from reports older than the self-check */
        r->op = op;
        r->status = bench_status_parse(json_string(json_get(o, "status"), ""));
        if (mhla_layout_parse(json_string(json_get(o, "layout"), "bnhd"), &r->shape.layout) != MHLA_OK)
            r->shape.layout = MHLA_LAYOUT_BNHD;
        read_fields(o, r, row_fields, COUNT(row_fields));
        ++out->row_count;
    }
    rc = 0;
cleanup:
    if (rc)
        bench_report_free(out);
    json_free(doc);
    free(text);
    return rc;
}
