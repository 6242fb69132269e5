/* The on-disk cache of compiled program binaries: $MHLA_CACHE_DIR, else $XDG_CACHE_HOME/mhla,
 * else ~/.cache/mhla ("off" disables it, and the tuning database with it); $MHLA_PROGRAM_CACHE_DIR
 * moves the binaries alone elsewhere. An entry is keyed by the kernel source, the build options,
 * the device name, the driver and platform versions and a format version; it is written to a
 * temporary file and renamed, and any entry that does not verify is ignored and rebuilt. Every
 * failure here falls back to compiling from source: the cache can only save time. */
#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Bump when the entry layout or what goes into the key changes. */
#define CACHE_FORMAT_VERSION 1u
static const char cache_magic[8] = {'M', 'H', 'L', 'A', 'C', 'L', 'B', 'N'};

uint64_t mhla__fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; ++i) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

/* The key's fields, in the order they are hashed and stored. */
static void key_fields(const mhla_context *ctx, const char *options, const char *fields[4])
{
    fields[0] = options;
    fields[1] = ctx->device_name;
    fields[2] = ctx->driver_version;
    fields[3] = ctx->platform_version;
}

int mhla__cache_dir(char *buf, size_t size)
{
    const char *dir = getenv("MHLA_CACHE_DIR");
    if (dir && strcmp(dir, "off") == 0)
        return 0;
    if (dir && *dir)
        return snprintf(buf, size, "%s", dir) < (int)size;
    const char *xdg = getenv("XDG_CACHE_HOME");
    if (xdg && *xdg)
        return snprintf(buf, size, "%s/mhla", xdg) < (int)size;
    const char *home = getenv("HOME");
    if (home && *home)
        return snprintf(buf, size, "%s/.cache/mhla", home) < (int)size;
    return 0; /* no place to keep it (e.g. a sandboxed app): compile every time */
}

/* Where the binaries go: $MHLA_PROGRAM_CACHE_DIR when the cache is on and it is set ("off": no
 * binaries kept), else the cache folder. Entries are keyed by all that makes two builds differ, so
 * processes that keep tuning databases of their own (each test of the suite has its own
 * MHLA_CACHE_DIR) can share them without one's tuning reaching another. */
static int program_dir(char *buf, size_t size)
{
    const char *all = getenv("MHLA_CACHE_DIR");
    if (all && strcmp(all, "off") == 0)
        return 0; /* nothing is kept anywhere */
    const char *dir = getenv("MHLA_PROGRAM_CACHE_DIR");
    if (dir && *dir)
        return strcmp(dir, "off") != 0 && snprintf(buf, size, "%s", dir) < (int)size;
    return mhla__cache_dir(buf, size);
}

/* mkdir -p, tolerating directories that exist (or appear meanwhile from another process). */
static int make_dirs(const char *path)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp)
        return 0;
    for (char *p = tmp + 1; *p; ++p) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
            return 0;
        *p = '/';
    }
    return mkdir(tmp, 0755) == 0 || errno == EEXIST;
}

static int entry_path(const mhla_context *ctx, const char *name, uint64_t source_hash, const char *options,
                      char *buf, size_t size)
{
    char dir[4096];
    if (!program_dir(dir, sizeof dir))
        return 0;
    const char *fields[4];
    key_fields(ctx, options, fields);
    uint64_t h = mhla__fnv1a(MHLA_FNV1A_SEED, &source_hash, sizeof source_hash);
    const uint32_t version = CACHE_FORMAT_VERSION;
    h = mhla__fnv1a(h, &version, sizeof version);
    for (int i = 0; i < 4; ++i)
        h = mhla__fnv1a(h, fields[i], strlen(fields[i]) + 1);
    return snprintf(buf, size, "%s/%s-%016llx.bin", dir, name, (unsigned long long)h) < (int)size;
}

static int write_all(FILE *f, const void *data, size_t n) { return fwrite(data, 1, n, f) == n; }

static int read_all(FILE *f, void *data, size_t n) { return fread(data, 1, n, f) == n; }

/* Entry layout: magic, u32 format version, u64 source hash, then for each key field u32 length and
 * bytes, then u64 binary size, the binary, and u64 FNV-1a of the binary. Host byte order: an
 * entry is only ever read back by the machine that wrote it. */
void mhla__cache_store(mhla_context *ctx, const char *name, uint64_t source_hash, const char *options,
                       cl_program program)
{
    char path[4200], tmp[4300] = "", dir[4096];
    unsigned char *binary = NULL;
    size_t size = 0;
    FILE *f = NULL;
    int fd = -1, ok = 0;
    const uint32_t version = CACHE_FORMAT_VERSION;
    const char *fields[4];
    key_fields(ctx, options, fields);

    if (!entry_path(ctx, name, source_hash, options, path, sizeof path) || !program_dir(dir, sizeof dir))
        return;
    if (clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) != CL_SUCCESS || size == 0)
        return; /* one device per program: one size */
    binary = mhla__malloc(size);
    if (!binary)
        return;
    if (clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof binary, &binary, NULL) != CL_SUCCESS)
        goto cleanup;
    if (!make_dirs(dir) || snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", path) >= (int)sizeof tmp)
        goto cleanup;
    fd = mkstemp(tmp);
    if (fd < 0)
        goto cleanup;
    f = fdopen(fd, "wb");
    if (!f)
        goto cleanup;
    fd = -1;
    const uint64_t bytes = size, sum = mhla__fnv1a(MHLA_FNV1A_SEED, binary, size);
    ok = write_all(f, cache_magic, sizeof cache_magic) && write_all(f, &version, sizeof version) &&
         write_all(f, &source_hash, sizeof source_hash);
    for (int i = 0; i < 4 && ok; ++i) {
        const uint32_t len = (uint32_t)strlen(fields[i]);
        ok = write_all(f, &len, sizeof len) && write_all(f, fields[i], len);
    }
    ok = ok && write_all(f, &bytes, sizeof bytes) && write_all(f, binary, size) && write_all(f, &sum, sizeof sum);
    ok = fclose(f) == 0 && ok;
    f = NULL;
    ok = ok && rename(tmp, path) == 0;
cleanup:
    if (f)
        fclose(f);
    if (fd >= 0)
        close(fd);
    if (!ok && tmp[0])
        unlink(tmp);
    mhla__free(binary);
}

/* Reads and checks one entry; returns the binary (malloc'd) or NULL when absent or not valid. */
static unsigned char *load_entry(const mhla_context *ctx, const char *path, uint64_t source_hash,
                                 const char *options, size_t *size)
{
    unsigned char *binary = NULL;
    char *field = NULL;
    int ok = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char magic[sizeof cache_magic];
    uint32_t version = 0;
    uint64_t hash = 0, bytes = 0, sum = 0;
    const char *fields[4];
    key_fields(ctx, options, fields);
    if (!read_all(f, magic, sizeof magic) || memcmp(magic, cache_magic, sizeof magic) != 0 ||
        !read_all(f, &version, sizeof version) || version != CACHE_FORMAT_VERSION ||
        !read_all(f, &hash, sizeof hash) || hash != source_hash)
        goto cleanup;
    for (int i = 0; i < 4; ++i) {
        uint32_t len = 0;
        if (!read_all(f, &len, sizeof len) || len != strlen(fields[i]))
            goto cleanup;
        field = mhla__malloc((size_t)len + 1);
        if (!field || !read_all(f, field, len) || memcmp(field, fields[i], len) != 0)
            goto cleanup;
        mhla__free(field);
        field = NULL;
    }
    if (!read_all(f, &bytes, sizeof bytes) || bytes == 0 || bytes > ((uint64_t)1 << 30))
        goto cleanup;
    binary = mhla__malloc((size_t)bytes);
    if (!binary || !read_all(f, binary, (size_t)bytes) || !read_all(f, &sum, sizeof sum) ||
        sum != mhla__fnv1a(MHLA_FNV1A_SEED, binary, (size_t)bytes) || fgetc(f) != EOF)
        goto cleanup;
    *size = (size_t)bytes;
    ok = 1;
cleanup:
    fclose(f);
    mhla__free(field);
    if (!ok) {
        mhla__free(binary);
        binary = NULL;
    }
    return binary;
}

cl_program mhla__cache_load(mhla_context *ctx, const char *name, uint64_t source_hash, const char *options,
                            const char *full_options)
{
    char path[4200];
    size_t size = 0;
    cl_int err = CL_SUCCESS, status = CL_SUCCESS;
    if (!entry_path(ctx, name, source_hash, options, path, sizeof path))
        return NULL;
    unsigned char *binary = load_entry(ctx, path, source_hash, options, &size);
    if (!binary)
        return NULL;
    const unsigned char *bins[1] = {binary};
    cl_program prog = clCreateProgramWithBinary(ctx->cl, 1, &ctx->device, &size, bins, &status, &err);
    mhla__free(binary);
    if (err != CL_SUCCESS || status != CL_SUCCESS) {
        if (prog)
            clReleaseProgram(prog);
        return NULL;
    }
    /* A binary still has to be built; a driver that changed underneath fails here, and the caller
     * compiles from source and overwrites the entry. */
    if (clBuildProgram(prog, 1, &ctx->device, full_options, NULL, NULL) != CL_SUCCESS) {
        clReleaseProgram(prog);
        return NULL;
    }
    return prog;
}
