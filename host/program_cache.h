/* The on-disk cache of compiled programs (host/program_cache.c). */
#ifndef MHLA_PROGRAM_CACHE_H
#define MHLA_PROGRAM_CACHE_H

#include "internal.h"

/* The cache folder, or 0 when the cache is off or has no place ($MHLA_CACHE_DIR=off). */
int mhla__cache_dir(char *buf, size_t size);
/* A built program for kernels/<name>.cl with these options, or NULL (then compile from source).
 * `options` keys the entry; `full_options` are passed to clBuildProgram. */
cl_program mhla__cache_load(mhla_context *ctx, const char *name, uint64_t source_hash, const char *options,
                            const char *full_options);
/* Keeps a freshly built program's binary; failures are ignored. */
void mhla__cache_store(mhla_context *ctx, const char *name, uint64_t source_hash, const char *options,
                       cl_program program);

#endif /* MHLA_PROGRAM_CACHE_H */
