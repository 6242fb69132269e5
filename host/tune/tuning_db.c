/* The on-disk tuning database that `mhla tune` writes and every plan reads: per device (keyed like
 * the program cache: device name, driver and platform versions, and the library's version), one
 * entry per pair of head dimensions holding a tuning spec ("name=value,..." as MHLA_TUNING takes).
 * A text file in the cache folder (core/program_cache.c), written to a temporary and renamed:
 *
 *     # libmhla tuning database (mhla tune); one line per head-dimension pair
 *     device pthread-skylake-avx512-AMD EPYC
 *     driver 3.1+debian
 *     platform OpenCL 3.0 PoCL 3.1+debian ...
 *     library 0.1.0
 *     entry 64 64 sum_nv=2,pf=1 # tuned 2026-11-22, N=16384 M=64 H=8: 26.10 -> 23.40 ms
 *
 * A file whose header does not match the device (another driver, another library version) is
 * ignored, so an upgrade never runs with tiles tuned for something else; so is a malformed entry. */
#include "tune/tune.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DB_LINE_MAX 2048

/* The header lines that key a database, in order. */
static void header_fields(const mhla_context *ctx, const char *fields[4])
{
    fields[0] = ctx->device_name;
    fields[1] = ctx->driver_version;
    fields[2] = ctx->platform_version;
    fields[3] = MHLA_VERSION_STRING;
}
static const char *const header_names[4] = {"device", "driver", "platform", "library"};

static int db_path(const mhla_context *ctx, char *buf, size_t size)
{
    char dir[4096];
    if (!mhla__cache_dir(dir, sizeof dir))
        return 0;
    const char *fields[4];
    header_fields(ctx, fields);
    uint64_t h = MHLA_FNV1A_SEED;
    for (int i = 0; i < 4; ++i) /* with the terminator, so that ("ab", "c") and ("a", "bc") differ */
        h = mhla__fnv1a(h, fields[i], strlen(fields[i]) + 1);
    return snprintf(buf, size, "%s/tuning-%016llx.txt", dir, (unsigned long long)h) < (int)size;
}

/* The file's contents when its header matches ctx's device, else NULL (malloc'd). *oom (may be
 * NULL) is set to 1 when the file is there but there was no memory to read it: a writer must not
 * then take it for empty, and drop its entries. */
static char *read_db(const mhla_context *ctx, int *oom)
{
    char path[4200];
    if (!db_path(ctx, path, sizeof path))
        return NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *text = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        size = ftell(f);
    if (size >= 0 && size < (1 << 20) && fseek(f, 0, SEEK_SET) == 0) {
        text = mhla__malloc((size_t)size + 1);
        if (!text && oom)
            *oom = 1;
    }
    if (text) {
        if (fread(text, 1, (size_t)size, f) != (size_t)size) {
            mhla__free(text);
            text = NULL;
        } else {
            text[size] = '\0';
        }
    }
    fclose(f);
    if (!text)
        return NULL;
    /* The header: every key line present and equal. */
    const char *fields[4];
    header_fields(ctx, fields);
    for (int i = 0; i < 4; ++i) {
        char want[600];
        snprintf(want, sizeof want, "\n%s %s\n", header_names[i], fields[i]);
        const char *at = strstr(text, want + 1);
        if (!at || (at != text && at[-1] != '\n')) {
            mhla__free(text);
            return NULL;
        }
    }
    return text;
}

/* The entry line for (dk, dv) in text: its spec and comment copied out; 1 when found. */
static int find_entry(const char *text, int64_t dk, int64_t dv, char *spec, size_t spec_size, char *comment,
                      size_t comment_size)
{
    for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        long long a = 0, b = 0;
        int used = 0;
        if (sscanf(line, "entry %lld %lld %n", &a, &b, &used) != 2 || a != dk || b != dv)
            continue;
        const char *s = line + used, *end = strchr(s, '\n');
        const size_t len = end ? (size_t)(end - s) : strlen(s);
        const char *hash = memchr(s, '#', len);
        size_t spec_len = hash ? (size_t)(hash - s) : len;
        while (spec_len > 0 && (s[spec_len - 1] == ' ' || s[spec_len - 1] == '\r'))
            --spec_len;
        if (spec)
            snprintf(spec, spec_size, "%.*s", (int)spec_len, s);
        if (comment) {
            const char *c = hash ? hash + 1 : s + len;
            while (c < s + len && *c == ' ')
                ++c;
            snprintf(comment, comment_size, "%.*s", (int)(s + len - c), c);
        }
        return 1;
    }
    return 0;
}

int mhla__tuned_entry(mhla_context *ctx, int64_t dk, int64_t dv, char *spec, size_t size)
{
    mhla__lock(&ctx->lock); /* threads sharing ctx: one reads the file, all look up in it */
    if (!ctx->tuned_loaded) {
        ctx->tuned_db = read_db(ctx, NULL); /* none without memory: plans then take the built-in row */
        ctx->tuned_loaded = 1;
    }
    const int found = ctx->tuned_db && find_entry(ctx->tuned_db, dk, dv, spec, size, NULL, 0);
    mhla__unlock(&ctx->lock);
    return found;
}

mhla_status mhla_tuning_db_path(mhla_context *ctx, char *path, size_t size)
{
    mhla_status st = MHLA_OK;
    MHLA_FAIL_IF(st, !ctx, NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_tuning_db_path: context is NULL");
    MHLA_FAIL_IF(st, !path || size == 0, ctx, MHLA_ERR_INVALID_ARGUMENT, "mhla_tuning_db_path: path is NULL or size 0");
    MHLA_FAIL_IF(st, !db_path(ctx, path, size), ctx, MHLA_ERR_UNSUPPORTED,
                 "mhla_tuning_db_path: no cache folder (MHLA_CACHE_DIR=off, or neither XDG_CACHE_HOME nor HOME is set), "
                 "so no tuning database");
cleanup:
    return st;
}

mhla_status mhla_tuning_db_get(mhla_context *ctx, int64_t dk, int64_t dv, char *spec, size_t spec_size,
                               char *comment, size_t comment_size)
{
    mhla_status st = MHLA_OK;
    char *text = NULL;
    MHLA_FAIL_IF(st, !ctx, NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_tuning_db_get: context is NULL");
    MHLA_FAIL_IF(st, !spec || spec_size == 0, ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_tuning_db_get: spec is NULL or spec_size 0");
    spec[0] = '\0';
    if (comment && comment_size)
        comment[0] = '\0';
    int oom = 0;
    text = read_db(ctx, &oom); /* from disk: what `mhla tune` wrote since the context was created too */
    MHLA_FAIL_IF(st, oom, ctx, MHLA_ERR_OUT_OF_HOST_MEMORY,
                 "mhla_tuning_db_get: out of host memory reading the database");
    if (text)
        find_entry(text, dk, dv, spec, spec_size, comment_size ? comment : NULL, comment_size);
cleanup:
    mhla__free(text);
    return st;
}

mhla_status mhla_tuning_db_put(mhla_context *ctx, int64_t dk, int64_t dv, const char *spec, const char *comment)
{
    mhla_status st = MHLA_OK;
    char path[4200], tmp[4300] = "", dir[4096];
    char *old = NULL;
    FILE *f = NULL;
    int fd = -1;

    MHLA_FAIL_IF(st, !ctx, NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_tuning_db_put: context is NULL");
    MHLA_FAIL_IF(st, dk < 1 || dk > MHLA_MAX_HEAD_DIM || dv < 1 || dv > MHLA_MAX_HEAD_DIM, ctx,
                 MHLA_ERR_INVALID_ARGUMENT, "mhla_tuning_db_put: dk = %lld, dv = %lld must be in 1..%d", (long long)dk,
                 (long long)dv, MHLA_MAX_HEAD_DIM);
    MHLA_FAIL_IF(st, !spec || strchr(spec, '\n') || strchr(spec, '#') || strlen(spec) > DB_LINE_MAX / 2, ctx,
                 MHLA_ERR_INVALID_ARGUMENT, "mhla_tuning_db_put: spec is NULL, too long, or holds a line break or '#'");
    MHLA_FAIL_IF(st, comment && (strchr(comment, '\n') || strlen(comment) > DB_LINE_MAX / 2), ctx,
                 MHLA_ERR_INVALID_ARGUMENT, "mhla_tuning_db_put: comment is too long or holds a line break");
    mhla_tuning scratch;
    memset(&scratch, 0, sizeof scratch);
    MHLA_FORWARD_IF_ERROR(st, mhla__tuning_apply(ctx, "mhla_tuning_db_put", spec, &scratch));
    MHLA_FORWARD_IF_ERROR(st, mhla_tuning_db_path(ctx, path, sizeof path));
    MHLA_FAIL_IF(st, !mhla__cache_dir(dir, sizeof dir) || (mkdir(dir, 0755) != 0 && errno != EEXIST), ctx,
                 MHLA_ERR_IO, "mhla_tuning_db_put: cannot create the folder %s: %s", dir,
                 strerror(errno));
    MHLA_FAIL_IF(st, snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", path) >= (int)sizeof tmp, ctx,
                 MHLA_ERR_INVALID_ARGUMENT, "mhla_tuning_db_put: the path %s is too long", path);
    fd = mkstemp(tmp);
    MHLA_FAIL_IF(st, fd < 0, ctx, MHLA_ERR_IO, "mhla_tuning_db_put: cannot create %s: %s", tmp,
                 strerror(errno));
    f = fdopen(fd, "w");
    MHLA_FAIL_IF(st, !f, ctx, MHLA_ERR_OUT_OF_HOST_MEMORY, "mhla_tuning_db_put: fdopen: %s", strerror(errno));
    fd = -1;
    const char *fields[4];
    header_fields(ctx, fields);
    fprintf(f, "# libmhla tuning database (mhla tune): entry DK DV SPEC # NOTE, one per head-dimension pair\n");
    for (int i = 0; i < 4; ++i)
        fprintf(f, "%s %s\n", header_names[i], fields[i]);
    int oom = 0;
    old = read_db(ctx, &oom);
    MHLA_FAIL_IF(st, oom, ctx, MHLA_ERR_OUT_OF_HOST_MEMORY,
                 "mhla_tuning_db_put: out of host memory reading the database");
    for (const char *line = old; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        long long a = 0, b = 0;
        if (sscanf(line, "entry %lld %lld", &a, &b) != 2 || (a == dk && b == dv))
            continue; /* the header is rewritten above; this pair's entry below */
        const char *end = strchr(line, '\n');
        fprintf(f, "%.*s\n", (int)(end ? (size_t)(end - line) : strlen(line)), line);
    }
    fprintf(f, "entry %lld %lld %s%s%s\n", (long long)dk, (long long)dv, spec, comment && *comment ? " # " : "",
            comment ? comment : "");
    MHLA_FAIL_IF(st, fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0, ctx, MHLA_ERR_IO,
                 "mhla_tuning_db_put: writing %s failed: %s", tmp, strerror(errno));
    const int closed = fclose(f);
    f = NULL;
    MHLA_FAIL_IF(st, closed != 0, ctx, MHLA_ERR_IO, "mhla_tuning_db_put: closing %s failed: %s", tmp,
                 strerror(errno));
    MHLA_FAIL_IF(st, rename(tmp, path) != 0, ctx, MHLA_ERR_IO,
                 "mhla_tuning_db_put: cannot rename %s to %s: %s", tmp, path, strerror(errno));
    tmp[0] = '\0';
    /* This context sees the new entry from its next plan on. */
    int no_memory = 0;
    char *fresh = read_db(ctx, &no_memory); /* the file is written: without memory, the next plan reads it */
    mhla__lock(&ctx->lock);
    mhla__free(ctx->tuned_db);
    ctx->tuned_db = fresh;
    ctx->tuned_loaded = !no_memory;
    mhla__unlock(&ctx->lock);
cleanup:
    if (f)
        fclose(f);
    if (fd >= 0)
        close(fd);
    if (tmp[0])
        unlink(tmp);
    mhla__free(old);
    return st;
}

mhla_status mhla_tuning_db_list(mhla_context *ctx, int64_t *dims, size_t capacity, size_t *count)
{
    mhla_status st = MHLA_OK;
    char *text = NULL;
    MHLA_FAIL_IF(st, !ctx || !count, ctx, MHLA_ERR_INVALID_ARGUMENT, "mhla_tuning_db_list: %s is NULL",
                 ctx ? "count" : "context");
    MHLA_FAIL_IF(st, capacity && !dims, ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_tuning_db_list: dims is NULL with a capacity of %zu", capacity);
    *count = 0;
    int oom = 0;
    text = read_db(ctx, &oom);
    MHLA_FAIL_IF(st, oom, ctx, MHLA_ERR_OUT_OF_HOST_MEMORY,
                 "mhla_tuning_db_list: out of host memory reading the database");
    for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        long long a = 0, b = 0;
        if (sscanf(line, "entry %lld %lld", &a, &b) != 2)
            continue;
        if (*count < capacity)
            dims[2 * *count] = a, dims[2 * *count + 1] = b;
        ++*count;
    }
cleanup:
    mhla__free(text);
    return st;
}
