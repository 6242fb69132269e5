/* Kernel programs: where the source comes from (embedded, or $MHLA_KERNEL_DIR in development),
 * how build options are assembled, and the context's cache of built programs. */
#include "core/core.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mhla__opts_init(mhla_build_opts *opts)
{
    opts->text[0] = '\0';
    opts->len = 0;
}

void mhla__opts_add(mhla_build_opts *opts, const char *fmt, ...)
{
    if (opts->len >= sizeof opts->text - 1)
        return;
    if (opts->len > 0)
        opts->text[opts->len++] = ' ';
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(opts->text + opts->len, sizeof opts->text - opts->len, fmt, ap);
    va_end(ap);
    if (w > 0)
        opts->len += (size_t)w;
    if (opts->len >= sizeof opts->text)
        opts->len = sizeof opts->text - 1;
}

static mhla_status read_file(mhla_context *ctx, const char *path, char **out)
{
    mhla_status st = MHLA_OK;
    char *buf = NULL;
    long size = -1;
    FILE *f = fopen(path, "rb");

    MHLA_FAIL_IF(st, !f, ctx, MHLA_ERR_INVALID_ARGUMENT, "cannot read kernel source %s (MHLA_KERNEL_DIR): %s",
                 path, strerror(errno));
    if (fseek(f, 0, SEEK_END) == 0)
        size = ftell(f);
    MHLA_FAIL_IF(st, size < 0 || fseek(f, 0, SEEK_SET) != 0, ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "cannot read kernel source %s: not a seekable file", path);
    buf = mhla__malloc((size_t)size + 1);
    MHLA_FAIL_IF(st, !buf, ctx, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory reading %s", path);
    MHLA_FAIL_IF(st, fread(buf, 1, (size_t)size, f) != (size_t)size, ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "cannot read kernel source %s: short read", path);
    buf[size] = '\0';
    *out = buf;
    buf = NULL;
cleanup:
    if (f)
        fclose(f);
    mhla__free(buf);
    return st;
}

mhla_status mhla__kernel_source(mhla_context *ctx, const char *name, char **out)
{
    mhla_status st = MHLA_OK;
    const char *dir = getenv("MHLA_KERNEL_DIR");

    *out = NULL;
    if (dir && *dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.cl", dir, name);
        return read_file(ctx, path, out);
    }
    for (size_t i = 0; i < mhla__embedded_kernel_count; ++i) {
        if (strcmp(mhla__embedded_kernels[i].name, name) == 0) {
            const char *src = mhla__embedded_kernels[i].source;
            *out = mhla__malloc(strlen(src) + 1);
            MHLA_FAIL_IF(st, !*out, ctx, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory copying kernel %s", name);
            strcpy(*out, src);
            goto cleanup;
        }
    }
    MHLA_FAIL_IF(st, 1, ctx, MHLA_ERR_INVALID_ARGUMENT, "no embedded kernel named %s", name);
cleanup:
    return st;
}

/* 1 when `s` holds nothing but white space. */
static int is_blank(const char *s)
{
    while (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t')
        ++s;
    return *s == '\0';
}

static mhla_status build(mhla_context *ctx, const char *name, const char *source, uint64_t source_hash,
                         const char *options, cl_program *out)
{
    mhla_status st = MHLA_OK;
    cl_int err = CL_SUCCESS;
    cl_program prog = NULL;
    char *log = NULL;
    char full_opts[1400];

    /* Kernels include kernels/common.h; embedded sources have it inlined, a development
     * MHLA_KERNEL_DIR is passed as an include path. */
    const char *dir = getenv("MHLA_KERNEL_DIR");
    if (dir && *dir)
        snprintf(full_opts, sizeof full_opts, "-cl-std=CL1.2 -I %s %s", dir, options);
    else
        snprintf(full_opts, sizeof full_opts, "-cl-std=CL1.2 %s", options);

    prog = mhla__cache_load(ctx, name, source_hash, full_opts, full_opts);
    if (prog) {
        *out = prog;
        return MHLA_OK;
    }
    for (int attempt = 1;; ++attempt) {
        prog = clCreateProgramWithSource(ctx->cl, 1, &source, NULL, &err);
        MHLA_CL_TRY(st, ctx, err, "clCreateProgramWithSource");
        err = mhla__cl_build_program(prog, ctx->device, full_opts);
        if (err == CL_SUCCESS)
            break;
        size_t log_size = 0;
        clGetProgramBuildInfo(prog, ctx->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &log_size);
        log = mhla__malloc(log_size + 1);
        if (log) {
            log[0] = '\0';
            clGetProgramBuildInfo(prog, ctx->device, CL_PROGRAM_BUILD_LOG, log_size, log, NULL);
            log[log_size] = '\0';
        }
        /* A failed compile says why in its log. A failure with an empty log is the driver's own: PoCL
         * gives one when another process replaces the program's entry in its compile cache during
         * the build (processes that share a cold cache and build the same program at once, as a
         * test suite or MPI ranks on one node do). Such a build succeeds when tried again. */
        if (attempt == 1 && err == CL_BUILD_PROGRAM_FAILURE && log && is_blank(log)) {
            clReleaseProgram(prog);
            prog = NULL;
            mhla__free(log);
            log = NULL;
            continue;
        }
        mhla__set_cl_error(ctx, err);
        MHLA_FAIL_IF(st, 1, ctx, err == CL_BUILD_PROGRAM_FAILURE ? MHLA_ERR_BUILD_FAILED : mhla__status_of_cl(err),
                     "building kernels/%s.cl for %s failed%s: %s (%d); options: %s; build log:\n%s", name,
                     ctx->device_name, attempt > 1 ? " twice (the first time with an empty build log too)" : "",
                     mhla__cl_error_name(err), (int)err, full_opts, log && !is_blank(log) ? log : "(empty)");
    }
    mhla__cache_store(ctx, name, source_hash, full_opts, prog);
    *out = prog;
    prog = NULL;
cleanup:
    if (prog)
        clReleaseProgram(prog);
    mhla__free(log);
    return st;
}

/* Development switch MHLA_DUMP_PROGRAMS=<file>: every program request is appended as
 * "<kernel file>\t<options>" so that tests/kernels_clang.py can compile each specialization the
 * host emits with another compiler. One write per line with O_APPEND semantics keeps lines whole
 * when several processes share the file. */
static void dump_request(const char *name, const char *options)
{
    const char *path = getenv("MHLA_DUMP_PROGRAMS");
    if (!path || !*path)
        return;
    char line[1600];
    const int n = snprintf(line, sizeof line, "%s\t%s\n", name, options);
    FILE *f = fopen(path, "a");
    if (!f)
        return;
    if (n > 0 && (size_t)n < sizeof line)
        fwrite(line, 1, (size_t)n, f);
    fclose(f);
}

mhla_status mhla__program_get(mhla_context *ctx, const char *name, const mhla_build_opts *opts, cl_program *out)
{
    dump_request(name, opts->text);
    mhla_status st = MHLA_OK;
    char *source = NULL;
    mhla_program_entry *entry = NULL;
    int locked = 0;
    size_t nlen = strlen(name), olen = strlen(opts->text);

    *out = NULL;
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_source(ctx, name, &source));
    uint64_t hash = mhla__fnv1a(MHLA_FNV1A_SEED, source, strlen(source)); /* no terminator */
    /* Held through the build: a second thread wanting the same program waits for it instead of
     * building it again, and the list never sees half an entry. */
    mhla__lock(&ctx->lock);
    locked = 1;
    for (mhla_program_entry *e = ctx->programs; e; e = e->next) {
        if (e->source_hash == hash && strcmp(e->key, name) == 0 && strcmp(e->key + nlen + 1, opts->text) == 0) {
            *out = e->program;
            goto cleanup;
        }
    }
    entry = mhla__calloc(1, sizeof *entry);
    MHLA_FAIL_IF(st, !entry, ctx, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory caching a program");
    entry->key = mhla__malloc(nlen + 1 + olen + 1);
    MHLA_FAIL_IF(st, !entry->key, ctx, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory caching a program");
    memcpy(entry->key, name, nlen + 1);
    memcpy(entry->key + nlen + 1, opts->text, olen + 1);
    entry->source_hash = hash;
    MHLA_FORWARD_IF_ERROR(st, build(ctx, name, source, hash, opts->text, &entry->program));
    entry->next = ctx->programs;
    ctx->programs = entry;
    *out = entry->program;
    entry = NULL;
cleanup:
    if (locked)
        mhla__unlock(&ctx->lock);
    if (entry) {
        mhla__free(entry->key);
        mhla__free(entry);
    }
    mhla__free(source);
    return st;
}

mhla_status mhla__kernel_create(mhla_context *ctx, cl_program program, const char *kernel_name, cl_kernel *out)
{
    mhla_status st = MHLA_OK;
    cl_int err = CL_SUCCESS;
    char what[160];
    *out = clCreateKernel(program, kernel_name, &err);
    if (err != CL_SUCCESS)
        *out = NULL;
    MHLA_CL_TRY(st, ctx, err, mhla__fmt(what, sizeof what, "clCreateKernel(%s)", kernel_name));
cleanup:
    return st;
}
