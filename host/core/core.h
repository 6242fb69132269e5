/* host/core: what every layer above stands on. Contexts (devices, limits, locks), the failure
 * record, host allocations, program builds and their on-disk cache, kernel launches within the
 * device's limits, CLBlast calls, and the argument checks every public call shares.
 * Depends on nothing of host/ (the layers: docs/architecture.md). Nothing here is public;
 * include/mhla.h is the API. */
#ifndef MHLA_CORE_H
#define MHLA_CORE_H

#include "mhla.h"

#include "core/lock.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#define MHLA_MESSAGE_MAX 16384 /* room for a kernel build log of a few hundred lines */

/* ---- host allocations and device buffers (core/alloc.c) ------------------------------------ */

/* Every malloc, calloc, realloc and free of host/ goes through these, every clCreateBuffer
 * through mhla__cl_create_buffer and every build from source through mhla__cl_build_program:
 * they count live allocations and carry the tests' fault injection (core/testing.h). mhla__free
 * only frees what these allocated. */
void *mhla__malloc(size_t size);
void *mhla__calloc(size_t count, size_t size);
void *mhla__realloc(void *p, size_t size);
void mhla__free(void *p);
cl_mem mhla__cl_create_buffer(cl_context context, cl_mem_flags flags, size_t size, void *host_ptr, cl_int *err);
cl_int mhla__cl_build_program(cl_program program, cl_device_id device, const char *options);
/* 1 when this call of `kind` (an mhla__fault_kind of core/testing.h) is the one a test armed to fail:
 * for the fault points outside these wrappers (CLBlast's GEMM). */
int mhla__fault_inject(int kind);

/* ---- error recording ------------------------------------------------------------------- */

/* Records a failure on `ctx` (may be NULL) and on this thread; returns `status`. */
mhla_status mhla__fail(mhla_context *ctx, mhla_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Records a failed OpenCL call: the call, its error name and code, and where it was made. */
mhla_status mhla__fail_cl(mhla_context *ctx, cl_int err, const char *what, const char *file, int line);
/* Records err as ctx's mhla_context_cl_error() (ctx may be NULL). */
void mhla__set_cl_error(mhla_context *ctx, cl_int err);
/* The status an OpenCL error code becomes. */
mhla_status mhla__status_of_cl(cl_int err);
/* "CL_OUT_OF_RESOURCES" for -5; "CL_UNKNOWN_ERROR" for codes without a name. */
const char *mhla__cl_error_name(cl_int err);

/* Checks take the status variable, record the failure and jump to the function's `cleanup:`. */
#define MHLA_FAIL_IF(st, cond, ctx, code, ...)                                                      \
    do {                                                                                            \
        if (cond) {                                                                                 \
            (st) = mhla__fail((ctx), (code), __VA_ARGS__);                                          \
            goto cleanup;                                                                           \
        }                                                                                           \
    } while (0)

#define MHLA_CL_TRY(st, ctx, expr, what)                                                            \
    do {                                                                                            \
        cl_int mhla_cl_err_ = (expr);                                                               \
        if (mhla_cl_err_ != CL_SUCCESS) {                                                           \
            (st) = mhla__fail_cl((ctx), mhla_cl_err_, (what), __FILE__, __LINE__);                  \
            goto cleanup;                                                                           \
        }                                                                                           \
    } while (0)

/* For validators that own nothing and record nothing (config, cu_seqlens): on failure formats the
 * reason into the caller's (msg, msg_size) when given and returns `code` at once. */
#define MHLA_CHECK_MSG(cond, code, ...)                                                             \
    do {                                                                                            \
        if (!(cond)) {                                                                              \
            if (msg && msg_size)                                                                    \
                snprintf(msg, msg_size, __VA_ARGS__);                                               \
            return (code);                                                                          \
        }                                                                                           \
    } while (0)

/* Propagates a status already recorded by a callee. */
#define MHLA_FORWARD_IF_ERROR(st, expr)                                                             \
    do {                                                                                            \
        (st) = (expr);                                                                              \
        if ((st) != MHLA_OK)                                                                        \
            goto cleanup;                                                                           \
    } while (0)

/* ---- context ---------------------------------------------------------------------------- */

/* The SIMD registers a CPU device's compiler targets (core/simd.c): `width` floats each (at most
 * the reported float width), `registers` of them, and the target's name ("haswell", or "reported"
 * where the device's name does not say). */
typedef struct mhla_simd {
    int width;
    int registers;
    char target[24];
} mhla_simd;

/* Device limits read once per context; every launch respects them. */
typedef struct mhla_device_limits {
    size_t max_work_group_size;
    size_t max_work_item_sizes[3];
    uint64_t local_mem_bytes;
    /* CL_DEVICE_LOCAL_MEM_TYPE is CL_GLOBAL: "local" arrays are global memory behind the caches
     * (ARM's Mali GPUs, CPU runtimes), so tiles staged there buy nothing (tune/gpu_row.c). 1 as the
     * device reports it; 2 forced by MHLA_LIMITS (local_type=global), which holds on any device. */
    int local_mem_global;
    /* MHLA_LIMITS kwg=N: what every built kernel reports as its CL_KERNEL_WORK_GROUP_SIZE is at most
     * N (0: as the device reports it). A GPU builds a kernel that needs many registers for fewer
     * work-items than the device allows a group (Mali and Adreno often 64-256 of 384-1024); PoCL
     * never does, so without this only a GPU would find a plan that trusts the device's limit. */
    size_t kernel_wg_cap;
    uint64_t max_alloc_bytes;
    uint64_t global_mem_bytes;
    int opencl_c_major; /* from CL_DEVICE_OPENCL_C_VERSION */
    int opencl_c_minor;
    int has_fp16;
    unsigned compute_units;
    cl_device_type type;
    /* Floats in one SIMD register as the device reports them (CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT,
     * or PREFERRED_ where that is wider): 16 on AVX-512 CPUs, 8 on AVX2, 4 on SSE/NEON, 1 on
     * most GPUs. Vector tiles never exceed it on CPUs (tune/tuning.c). */
    int float_width;
    /* PoCL's CPU device: kernels become native code, so clang's prefetch builtin is an
     * instruction (kernels/output.cl, OUT_PF); elsewhere it may not translate. */
    int native_prefetch;
    /* What the device's compiler targets on CPUs (core/simd.c): see mhla_simd. */
    mhla_simd simd;
} mhla_device_limits;

typedef struct mhla_program_entry {
    struct mhla_program_entry *next;
    char *key; /* kernel file name, NUL, build options: what the program was built from */
    uint64_t source_hash;
    cl_program program;
} mhla_program_entry;

struct mhla_context {
    cl_platform_id platform;
    cl_device_id device;
    cl_context cl;
    cl_command_queue queue;
    int out_of_order; /* the wrapped queue runs out of order: stages need barriers */
    int profiling;    /* the queue records profiling information */
    /* markers between a forward's stages, for mhla_plan_stage_times(): on where the queue profiles,
     * unless mhla_context_profile_stages() turned them off (read by every forward) */
    atomic_int stage_marks;
    mhla_device_limits limits;
    char device_name[256];
    char vendor[256];
    char driver_version[256];
    char platform_version[256];
    /* Threads may share a context, each with its own plans and decoders (include/mhla.h): `lock`
     * guards what they share, programs and tuned_db; message_lock guards the failure record. */
    mhla_mutex lock;
    mhla_mutex message_lock;
    mhla_program_entry *programs; /* built programs, shared by the context's plans */
    char *tuning; /* mhla_context_set_tuning()'s overrides (validated), or NULL */
    char *tuned_db;   /* the device's tuning database (tune/tuning_db.c), read on first use, or NULL */
    int tuned_loaded; /* tuned_db has been read (it may be NULL: no database) */
    atomic_int used_blas; /* CLBlast has built programs for this context (core/blas.c) */
    /* mhla_context_profile_kernels() (core/profile.c): while kprof_on, every kernel the library
     * enqueues, with its event; guarded by kprof_lock (threads share the queue) */
    mhla_mutex kprof_lock;
    atomic_int kprof_on; /* read without the lock by every launch */
    struct mhla_kprof_rec *kprof;
    size_t kprof_n, kprof_cap, kprof_dropped;
    cl_int last_cl_error;
    char message[MHLA_MESSAGE_MAX];
};

/* While kernel profiling is on (core/profile.c), records `ev` as a launch of `what`
 * ("clEnqueueNDRangeKernel(NAME)", a string literal) and takes over the caller's reference
 * (released now when the record is full); off, releases ev. */
void mhla__kprof_record(mhla_context *ctx, const char *what, cl_event ev);
/* Releases what the records hold (context teardown). */
void mhla__kprof_free(mhla_context *ctx);

/* Fills ctx->limits and the name fields from ctx->device. */
mhla_status mhla__context_read_device(mhla_context *ctx);

/* ---- programs ----------------------------------------------------------------------------- */

/* Options assembled in one place (STYLE): "-D..." flags of a plan, appended to `buf`. */
typedef struct mhla_build_opts {
    char text[1024];
    size_t len;
} mhla_build_opts;
void mhla__opts_init(mhla_build_opts *opts);
void mhla__opts_add(mhla_build_opts *opts, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* The source of kernels/<name>.cl: embedded at build time, or read from $MHLA_KERNEL_DIR when
 * that development switch is set. *out is malloc'd and freed by the caller. */
mhla_status mhla__kernel_source(mhla_context *ctx, const char *name, char **out);

/* Builds kernels/<name>.cl with `opts` (or returns the context's cached program). The program
 * stays owned by the context. A failed build returns MHLA_ERR_BUILD_FAILED with the log. */
mhla_status mhla__program_get(mhla_context *ctx, const char *name, const mhla_build_opts *opts,
                              cl_program *out);

/* Creates kernel `kernel_name` from a program; the caller releases it. */
mhla_status mhla__kernel_create(mhla_context *ctx, cl_program program, const char *kernel_name,
                                cl_kernel *out);

/* Embedded sources: the table scripts/cl2c.py generates (cl_registry.c in the build folder's kernels/). */
typedef struct mhla_embedded_kernel {
    const char *name;
    const char *source;
} mhla_embedded_kernel;
extern const mhla_embedded_kernel mhla__embedded_kernels[];
extern const size_t mhla__embedded_kernel_count;

/* ---- launches ----------------------------------------------------------------------------- */

/* The work-items a built kernel allows a group: CL_KERNEL_WORK_GROUP_SIZE, within MHLA_LIMITS' kwg
 * cap. Every query of it goes through here, so that the cap holds for every plan. */
cl_int mhla__kernel_wg_size(mhla_context *ctx, cl_kernel kernel, size_t *out);

/* Local size for a 1D-tiled launch: `want` clamped to the kernel's and the device's limits. */
size_t mhla__local_size(mhla_context *ctx, cl_kernel kernel, size_t want);
/* Local size for a 3D launch over `extent`: up to `want` work-items, filling dimension 0 first,
 * within CL_KERNEL_WORK_GROUP_SIZE and the device's per-dimension limits. */
void mhla__local_size_3d(mhla_context *ctx, cl_kernel kernel, const size_t extent[3], size_t want, size_t local[3]);
/* Local size for a launch over (token groups, heads, blocks) whose work-items each read their
 * tokens' rows of one head: as many heads as divide the head count first, then token groups, one
 * block. With [B,N,H,D] rows a group then reads whole rows, and the groups a core runs one after
 * another read the next rows; filling the token groups first, a group read one head's 256 B of
 * every 2 KiB row and the next group the same head further on (docs/tuning-notes.md "Backward"). */
void mhla__local_size_heads(mhla_context *ctx, cl_kernel kernel, const size_t extent[3], size_t want,
                            size_t local[3]);
/* Enqueues `kernel` over `extent` rounded up to `local` (kernels guard the excess work-items). */
mhla_status mhla__launch(mhla_context *ctx, cl_kernel kernel, cl_uint dims, const size_t extent[3],
                         const size_t local[3], cl_uint num_wait, const cl_event *wait, cl_event *done,
                         const char *what);
/* Rounds x up to a multiple of m (m > 0). */
static inline size_t mhla__round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }
/* One kernel argument: a value's size and address, as clSetKernelArg takes them. */
typedef struct mhla_arg {
    size_t size;
    const void *value;
} mhla_arg;
/* The argument an lvalue x makes: clSetKernelArg copies sizeof(x) bytes from &x. */
#define MHLA_ARG(x) ((mhla_arg){sizeof(x), &(x)})
/* Sets `kernel`'s arguments first, first + 1, ... to args[0..n); a failure records
 * "clSetKernelArg(<kernel_name>, <index>)" at file:line, the caller's. */
mhla_status mhla__set_args(mhla_context *ctx, cl_kernel kernel, const char *kernel_name, cl_uint first, size_t n,
                           const mhla_arg *args, const char *file, int line);
/* Sets a launch's arguments from `first` on as one list of MHLA_ARG()s; jumps to cleanup on
 * failure, as MHLA_CL_TRY does, leaving st alone on success. */
#define MHLA_SET_ARGS(st, ctx, kernel, first, ...)                                                  \
    do {                                                                                            \
        const mhla_arg mhla_args_[] = {__VA_ARGS__};                                                \
        mhla_status mhla_args_st_ = mhla__set_args((ctx), (kernel), #kernel, (first),               \
                                                   sizeof mhla_args_ / sizeof mhla_args_[0],        \
                                                   mhla_args_, __FILE__, __LINE__);                 \
        if (mhla_args_st_ != MHLA_OK) {                                                             \
            (st) = mhla_args_st_;                                                                   \
            goto cleanup;                                                                           \
        }                                                                                           \
    } while (0)
/* Orders the next stage after the previous one on an out-of-order queue; a no-op otherwise. */
mhla_status mhla__stage_barrier(mhla_context *ctx);
/* While stage markers are on (ctx->stage_marks), replaces *mark with a marker event after everything
 * enqueued so far; else releases it (no stale stage from an earlier forward). */
mhla_status mhla__stage_mark(mhla_context *ctx, cl_event *mark);

/* The SIMD target of a device named `device_name` reporting `reported_width` floats per register
 * (core/simd.c). */
void mhla__simd_of(const char *device_name, int reported_width, mhla_simd *out);

/* Creates a device buffer of `bytes`, checked against the device's limits first; `what` names it
 * in the message. */
mhla_status mhla__buffer_create(mhla_context *ctx, cl_mem_flags flags, size_t bytes, const char *what,
                                cl_mem *out);


/* Argument checks shared by every entry point that takes device buffers (core/checks.c); `fn`
 * names the public call in messages. A buffer: not NULL, of ctx's cl_context, >= need bytes.
 * shape(obj, t, ...) describes what needs them; it runs only for the message of a buffer that is
 * too small, so that per-token calls format no strings. */
typedef void (*mhla_shape_fn)(const void *obj, mhla_tensor t, char *buf, size_t size);
mhla_status mhla__check_mem(mhla_context *ctx, const char *fn, mhla_tensor t, cl_mem buf, size_t need,
                            mhla_shape_fn shape, const void *obj);
/* mhla__check_mem for a buffer named `name` whose shape `what` describes (the backward's). */
mhla_status mhla__check_mem_named(mhla_context *ctx, const char *fn, const char *name, cl_mem buf, size_t need,
                                  const char *what);
/* bufs indexed by mhla_tensor: out aliasing no input (mixing only when with_mixing), and a
 * consistent wait list. */
mhla_status mhla__check_call(mhla_context *ctx, const char *fn, const cl_mem bufs[5], int with_mixing,
                             cl_uint num_wait, const cl_event *wait);
/* "q", "k", "v", "out", "mixing". */
const char *mhla__tensor_name(mhla_tensor t);
/* MHLA_POISON_OUTPUTS=1 (tests): fills a host call's staging output with NaN before its run. */
mhla_status mhla__poison_output(mhla_context *ctx, cl_mem buf, size_t bytes);
/* MHLA_POISON_WORKSPACE=1 (tests): *copy = a NaN-filled host copy of `bytes` for a new buffer named
 * `what` to start from (free it with mhla__free), else NULL. */
mhla_status mhla__workspace_poison(mhla_context *ctx, size_t bytes, const char *what, void **copy);

/* ---- host-pointer calls (core/stage.c) ----------------------------------------------------- */

/* One buffer of a host-pointer call. `*mem` is the caller's cached device buffer: made on first
 * use (and, with mem_bytes, made anew when smaller than `bytes`), kept after the call. */
typedef struct mhla_staged {
    const char *name;     /* "q", "dq": "the host-copy buffer for q" in messages */
    const void *in;       /* copied in before the run, or NULL */
    void *out;            /* read back after the run, or NULL */
    size_t bytes;         /* copied each way; a buffer made now has this size */
    cl_mem_flags flags;   /* of a buffer made now */
    cl_mem *mem;          /* the caller's cached buffer */
    size_t *mem_bytes;    /* its size, for buffers that grow with the call (decoders); NULL: fixed */
    int poison;           /* MHLA_POISON_OUTPUTS fills the whole buffer with NaN before the run */
} mhla_staged;

typedef struct mhla_stage_ops {
    mhla_status (*run)(void *arg); /* enqueues the device call on the staged buffers */
    void *arg;
    const char *write_what; /* the copies' names in messages: "clEnqueueWriteBuffer (host input)" */
    const char *read_what;
} mhla_stage_ops;

/* Makes or reuses bufs' device buffers, poisons, writes the inputs, runs ops->run between stage
 * barriers and reads the outputs back; blocking. On failure after the first copy, waits for the
 * queue so that no copy still uses the caller's arrays. */
mhla_status mhla__host_stage(mhla_context *ctx, mhla_staged *bufs, size_t n, const mhla_stage_ops *ops);

/* ---- the OpenCL library opened at run time (core/opencl_loader.c) ----------------------- */

#ifdef MHLA_OPENCL_DLOPEN
/* Opens the OpenCL library on the first call (any thread); returns 1 when one is open. *message:
 * "OpenCL from NAME", or every library tried with why it failed. */
int mhla__opencl_loaded(const char **message);
#endif

/* ---- CLBlast (core/blas.c) --------------------------------------------------------------- */

/* Called by mhla_context_destroy(): when ctx was the last live context that used CLBlast,
 * empties CLBlast's program cache. */
void mhla__blas_release(mhla_context *ctx);
/* CLBlast's row-major C[m x n] = A[m x k] * B[k x n] + beta * C on the context's queue, with
 * leading dimensions lda, ldb, ldc. */
mhla_status mhla__sgemm_ld(mhla_context *ctx, size_t m, size_t n, size_t k, cl_mem a, size_t a_off, size_t lda,
                           cl_mem b, size_t b_off, size_t ldb, float beta, cl_mem c, size_t c_off, size_t ldc,
                           cl_mem temp, cl_event *ev);
mhla_status mhla__sgemm_ld_temp_bytes(mhla_context *ctx, size_t m, size_t n, size_t k, size_t lda, size_t ldb,
                                      size_t ldc, size_t *bytes);


/* Formats into a fixed buffer, never overflowing; returns buf. */
char *mhla__fmt(char *buf, size_t size, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* ---- devices (core/devices.c) ------------------------------------------------------------ */

/* Device enumeration shared by context creation, mhla_device_list() and the CLI's `info`. */


typedef struct mhla_device_ref {
    cl_platform_id platform;
    cl_device_id device;
    int platform_index;
    int device_index;
    size_t index; /* position in the list of all devices */
} mhla_device_ref;

/* Every device of every platform, in spec order; *out is malloc'd (NULL when there are none). */
mhla_status mhla__devices(mhla_device_ref **out, size_t *count);
/* Index of the default device: the first GPU, else the first device. */
size_t mhla__device_default(const mhla_device_ref *refs, size_t count);
/* Resolves a device spec ("P:D", "N", a name substring); NULL or "" reads MHLA_DEVICE, and when
 * that is unset or empty takes the default. The message names where the spec came from. */
mhla_status mhla__device_select(const char *spec, mhla_device_ref *out);
/* "<platform name> <device name>". */
void mhla__device_label(const mhla_device_ref *ref, char *buf, size_t size);
/* Floats per SIMD register as the device reports them (mhla_device_info.float_width), >= 1. */
int mhla__device_float_width(cl_device_id dev);
/* Whether the device lists `ext` among its extensions. */
int mhla__device_has_extension(cl_device_id dev, const char *ext);

/* ---- the program cache on disk (core/program_cache.c) --------------------------------- */



/* FNV-1a of n bytes, continuing from h (start from MHLA_FNV1A_SEED). The seed is not FNV's
 * standard offset basis (14695981039346656037: this one lost its last digit), but program-cache
 * entry names and tuning-database file names are made of it: changing it would orphan every file
 * already on disk, so it stays. */
#define MHLA_FNV1A_SEED 1469598103934665603ULL
uint64_t mhla__fnv1a(uint64_t h, const void *data, size_t n);

/* The cache folder, or 0 when the cache is off or has no place ($MHLA_CACHE_DIR=off). */
int mhla__cache_dir(char *buf, size_t size);
/* A built program for kernels/<name>.cl with these options, or NULL (then compile from source).
 * `options` keys the entry; `full_options` are passed to clBuildProgram. */
cl_program mhla__cache_load(mhla_context *ctx, const char *name, uint64_t source_hash, const char *options,
                            const char *full_options);
/* Keeps a freshly built program's binary; failures are ignored. */
void mhla__cache_store(mhla_context *ctx, const char *name, uint64_t source_hash, const char *options,
                       cl_program program);

#endif /* MHLA_CORE_H */
