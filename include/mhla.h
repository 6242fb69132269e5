/* libmhla: Multi-Head Linear Attention (arXiv 2601.07832) on any OpenCL device.
 * The math each call computes is pinned down in docs/spec.md; this header is the only public API. */
#ifndef MHLA_H
#define MHLA_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120 /* the library uses only the OpenCL 1.2 host API */
#endif
#include <CL/cl.h>
#include <stddef.h>
#include <stdint.h>

/* Public functions are exported from the shared library; everything else in it is hidden. */
#if defined(_WIN32) && defined(MHLA_BUILDING_DLL)
#define MHLA_API __declspec(dllexport)
#elif defined(_WIN32) && defined(MHLA_DLL)
#define MHLA_API __declspec(dllimport)
#elif defined(__GNUC__) || defined(__clang__)
#define MHLA_API __attribute__((visibility("default")))
#else
#define MHLA_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------ */
/* Version                                                                                      */
/* ------------------------------------------------------------------------------------------ */
#define MHLA_VERSION_MAJOR 0
#define MHLA_VERSION_MINOR 1
#define MHLA_VERSION_PATCH 0
#define MHLA_VERSION_NUMBER (MHLA_VERSION_MAJOR * 10000 + MHLA_VERSION_MINOR * 100 + MHLA_VERSION_PATCH)
#define MHLA_STRINGIFY_(x) #x
#define MHLA_STRINGIFY(x) MHLA_STRINGIFY_(x)
#define MHLA_VERSION_STRING                                                                  \
    MHLA_STRINGIFY(MHLA_VERSION_MAJOR) "." MHLA_STRINGIFY(MHLA_VERSION_MINOR) "." MHLA_STRINGIFY( \
        MHLA_VERSION_PATCH)

/*! mhla_version() :
 * @return the MHLA_VERSION_NUMBER the library was built with (may differ from the header's).
 * Thread-safety: any thread. */
MHLA_API unsigned mhla_version(void);

/*! mhla_version_string() :
 * @return the library's version as "MAJOR.MINOR.PATCH"; a static string, never NULL.
 * Thread-safety: any thread. */
MHLA_API const char *mhla_version_string(void);

/* ------------------------------------------------------------------------------------------ */
/* Status codes                                                                                 */
/* ------------------------------------------------------------------------------------------ */
/* One list generates the enum, mhla_status_name() and mhla_strerror(). Values are never reused.
 * When a failure comes from OpenCL or CLBlast, mhla_context_cl_error() keeps its raw code. */
#define MHLA_STATUS_MAP(X)                                                                           \
    X(OK, 0, "success")                                                                              \
    X(ERR_INVALID_ARGUMENT, 1, "invalid argument (NULL handle or buffer, unknown enum value)")       \
    X(ERR_INVALID_SHAPE, 2, "invalid shape (non-positive size, grid not divisible by blocks)")       \
    X(ERR_BUFFER_TOO_SMALL, 3, "a buffer is smaller than the shape needs")                           \
    X(ERR_UNSUPPORTED, 4, "not supported by this build or device")                                   \
    X(ERR_DEVICE_NOT_FOUND, 5, "no OpenCL device matches")                                           \
    X(ERR_OUT_OF_DEVICE_MEMORY, 6, "the device ran out of memory or resources")                      \
    X(ERR_OUT_OF_HOST_MEMORY, 7, "host memory allocation failed")                                    \
    X(ERR_BUILD_FAILED, 8, "an OpenCL kernel failed to build (the log is in the message)")           \
    X(ERR_OPENCL, 9, "an OpenCL call failed")                                                        \
    X(ERR_BLAS, 10, "a CLBlast call failed")                                                         \
    X(ERR_SEQUENCE_TOO_LONG, 11, "the sequence is longer than the mixing matrix covers")             \
    X(ERR_CAPACITY_EXCEEDED, 12, "a decoder was stepped past its capacity")                          \
    X(ERR_CONFIG_MISMATCH, 13, "ranks of a sharded run disagree on the configuration or the shards")  \
    X(ERR_MPI, 14, "an MPI call failed (MPI's error string is in the message)")                      \
    X(ERR_IO, 15, "a file could not be created, written or renamed (the message names it and why)")

typedef enum mhla_status {
#define MHLA_STATUS_ENUM_(name, value, text) MHLA_##name = value,
    MHLA_STATUS_MAP(MHLA_STATUS_ENUM_)
#undef MHLA_STATUS_ENUM_
} mhla_status;

/*! mhla_status_name() :
 * @return the enumerator's name ("MHLA_ERR_INVALID_SHAPE"), or "MHLA_UNKNOWN_STATUS". Static.
 * Thread-safety: any thread. */
MHLA_API const char *mhla_status_name(mhla_status status);

/*! mhla_strerror() :
 * @return a one-line generic description of `status`. Static, never NULL.
 * The specific explanation of a failure (naming the offending value) is the message of the
 * context (mhla_context_message()) or of the thread (mhla_last_message()).
 * Thread-safety: any thread. */
MHLA_API const char *mhla_strerror(mhla_status status);

/*! mhla_last_message() :
 * @return the message of the last failing call made on this thread, whatever handle it used
 *         (the only place a failed mhla_context_create() explains itself); "" if none failed.
 *         Thread-local storage owned by the library, valid until the next failing call on this
 *         thread. A successful call does not clear it.
 * Thread-safety: any thread (each thread has its own). */
MHLA_API const char *mhla_last_message(void);

/* ------------------------------------------------------------------------------------------ */
/* Devices                                                                                      */
/* ------------------------------------------------------------------------------------------ */
/* What `mhla info` prints of one device; strings are NUL-terminated and may be truncated. */
typedef struct mhla_device_info {
    int index;          /* position in the list of all devices ("N" in a device spec) */
    int platform_index; /* "P" in a "P:D" device spec */
    int device_index;   /* "D" in a "P:D" device spec */
    int is_default;     /* 1 for the device an empty spec (and no MHLA_DEVICE) selects */
    int is_gpu;
    char platform_name[128];
    char platform_version[128];
    char device_name[128];
    char vendor[128];
    char device_version[128];
    char driver_version[128];
    char opencl_c_version[128];
    uint64_t global_mem_bytes;
    uint64_t max_alloc_bytes;
    uint64_t local_mem_bytes;
    size_t max_work_group_size;
    unsigned compute_units;
    unsigned max_clock_mhz;
    int has_fp16; /* cl_khr_fp16 */
    int has_fp64; /* cl_khr_fp64 */
    int float_width; /* floats per SIMD register: CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT, or the
                        PREFERRED_ width where wider (16 AVX-512, 8 AVX2, 1 on most GPUs) */
} mhla_device_info;

/*! mhla_device_list() :
 * Enumerates every device of every OpenCL platform, in the order device specs index them.
 * @infos, @capacity: caller array (may be NULL/0 to only count).
 * @count: receives the total number of devices (may exceed capacity; only `capacity` filled).
 * @return MHLA_OK (also with zero devices), MHLA_ERR_INVALID_ARGUMENT for NULL count.
 * Thread-safety: any thread. */
MHLA_API mhla_status mhla_device_list(mhla_device_info *infos, size_t capacity, size_t *count);

/*! mhla_device_selected() :
 * Which device mhla_context_create(device_spec) would open, without creating anything.
 * @device_spec: as for mhla_context_create() (NULL or "" reads MHLA_DEVICE, then the default).
 * @index: receives the device's position in mhla_device_list() (mhla_device_info.index).
 * @return MHLA_OK, MHLA_ERR_DEVICE_NOT_FOUND (the message lists the devices), or
 *         MHLA_ERR_INVALID_ARGUMENT for NULL index.
 * Thread-safety: any thread. */
MHLA_API mhla_status mhla_device_selected(const char *device_spec, size_t *index);

/* ------------------------------------------------------------------------------------------ */
/* Context: one OpenCL device and an in-order or out-of-order command queue                    */
/* ------------------------------------------------------------------------------------------ */
/* Thread safety. Each function says which of these it is (tests/test_threads.c checks them):
 *  - "any thread": may run on any thread at any time, concurrently with any call.
 *  - "shares the context": may run while other threads make "shares the context", "per plan" and
 *    "per decoder" calls on the same context, and any calls on other contexts. A context's
 *    program cache, tuning database, tuning override and failure record are guarded by its lock;
 *    threads enqueue onto its one queue (OpenCL's enqueue calls are thread-safe), so an in-order
 *    queue runs their work in the order it was enqueued, and one thread's blocking call also waits
 *    for what another enqueued before it.
 *  - "per plan" / "per decoder": as "shares the context", with one thread at a time per plan or
 *    decoder (it owns kernels whose arguments each call sets, and its workspace).
 *  - "alone on the context": nothing else may use the context, its plans or its decoders meanwhile.
 * On a shared queue, mhla_plan_stage_times() may count another thread's work in a stage (its
 * markers wait for everything enqueued before them).
 * Contexts share nothing but CLBlast's process-wide program cache (guarded inside CLBlast), which
 * the library empties when the last context that used it is destroyed. */

typedef struct mhla_context mhla_context;

/*! mhla_context_create() :
 * Creates an OpenCL context and a command queue (profiling enabled, in order) on one device.
 * @device_spec chooses the device; NULL or "" reads the MHLA_DEVICE environment variable, and
 *   when that is unset or empty takes the first GPU of any platform, else the first device.
 *   Accepted forms: "P:D" (platform index, device index within it), "N" (index into the list
 *   of all devices, in the order `mhla info` prints), or any other text, matched without case
 *   against "<platform name> <device name>" (e.g. "pthread", "NVIDIA", "Radeon").
 * @out receives the handle; it is set to NULL on failure.
 * @return MHLA_OK, MHLA_ERR_DEVICE_NOT_FOUND (with the list of devices in the message),
 *         MHLA_ERR_INVALID_ARGUMENT, or an OpenCL failure.
 * Thread-safety: any thread. */
MHLA_API mhla_status mhla_context_create(const char *device_spec, mhla_context **out);

/*! mhla_context_wrap() :
 * Wraps an application's existing context and queue (the integration path for GPU apps): the
 * library enqueues all its work on `queue` and never calls clFinish on it. Both objects are
 * retained and released by mhla_context_destroy(); the caller keeps its own references.
 * The queue may be out of order: the library then orders its own stages with barriers.
 * Device timings (mhla-bench) need a queue created with CL_QUEUE_PROFILING_ENABLE.
 * @return MHLA_OK, or MHLA_ERR_INVALID_ARGUMENT when a handle is NULL, invalid, or the queue
 *         belongs to another context.
 * Thread-safety: any thread. */
MHLA_API mhla_status mhla_context_wrap(cl_context context, cl_command_queue queue, mhla_context **out);

/*! mhla_context_destroy() : releases everything the context owns. Accepts NULL.
 * Plans created on it must be destroyed first.
 * Thread-safety: alone on the context (after its plans and decoders are destroyed). */
MHLA_API void mhla_context_destroy(mhla_context *ctx);

/*! mhla_context_message() :
 * @return the explanation of the last failure of a call on this context (including a kernel
 *         build log when a build failed), or "" when none failed. Owned by the context, valid
 *         until its next failing call. NULL ctx gives "".
 * Thread-safety: shares the context; with several threads on the context it holds whichever failure came
 * last (a thread reads its own in mhla_last_message()). */
MHLA_API const char *mhla_context_message(const mhla_context *ctx);

/*! mhla_context_cl_error() :
 * @return the raw OpenCL (or CLBlast) error code of the last failure on this context that came
 *         from OpenCL, or CL_SUCCESS (0).
 * Thread-safety: shares the context. */
MHLA_API cl_int mhla_context_cl_error(const mhla_context *ctx);

/*! Accessors: the underlying OpenCL objects (not retained for the caller; NULL for NULL ctx),
 * and the device's name ("" for NULL ctx).
 * Thread-safety: shares the context. */
MHLA_API cl_context mhla_context_cl_context(const mhla_context *ctx);
MHLA_API cl_command_queue mhla_context_queue(const mhla_context *ctx);
MHLA_API cl_device_id mhla_context_device(const mhla_context *ctx);
MHLA_API const char *mhla_context_device_name(const mhla_context *ctx);

/*! mhla_context_profile_kernels() :
 * on != 0: from now on, every kernel the library enqueues on ctx's queue (its own and CLBlast's
 * GEMMs), from any plan or decoder of ctx, is recorded with its OpenCL event, for
 * mhla_context_kernel_times(); the records start empty. on == 0: recording stops and the records
 * are dropped. Costs one event per launch while on; nothing while off (the default).
 * @return MHLA_OK; MHLA_ERR_UNSUPPORTED when the context's queue has no profiling
 *         (mhla_context_wrap() of a queue made without CL_QUEUE_PROFILING_ENABLE);
 *         MHLA_ERR_INVALID_ARGUMENT for NULL ctx.
 * Thread-safety: shares the context (the records are guarded). */
MHLA_API mhla_status mhla_context_profile_kernels(mhla_context *ctx, int on);

/*! mhla_context_profile_stages() :
 * on != 0 (the default where the queue profiles): every forward pass on ctx enqueues a marker event
 * before, between and after its stages, for mhla_plan_stage_times(). on == 0: it enqueues its
 * kernels alone, as on a queue without profiling; mhla_plan_stage_times() then reports
 * MHLA_ERR_UNSUPPORTED. A marker costs an event and, on some implementations, a gap between two
 * kernels; a benchmark can time the forward without them (mhla-bench --no-stage-marks).
 * @return MHLA_OK; MHLA_ERR_UNSUPPORTED for on != 0 when the queue has no profiling;
 *         MHLA_ERR_INVALID_ARGUMENT for NULL ctx.
 * Thread-safety: shares the context (forwards enqueued meanwhile take either setting). */
MHLA_API mhla_status mhla_context_profile_stages(mhla_context *ctx, int on);

/*! mhla_context_kernel_times() :
 * Waits for ctx's queue (clFinish), then writes the recorded launches into buf, one line per
 * kernel in the order of first launch: "NAME CALLS MS\n", MS the device time summed over its
 * launches (each event's CL_PROFILING_COMMAND_START to _END), or "NAME CALLS untimed\n" where the
 * implementation gave no times; whole lines only (truncated to size), and a last line
 * "(dropped N launches ...)" where more were launched than the records hold. The records are
 * then emptied; recording goes on while it is on.
 * @return MHLA_OK (buf "" when nothing was recorded), MHLA_ERR_INVALID_ARGUMENT for NULL ctx or
 *         buf or size 0, MHLA_ERR_OPENCL when the queue failed.
 * Thread-safety: shares the context. */
MHLA_API mhla_status mhla_context_kernel_times(mhla_context *ctx, char *buf, size_t size);

/*! mhla_context_set_tuning() :
 * Overrides the per-device tuning (tile sizes, vector widths, work-group sizes, which GEMM
 * mixes) for plans and decoders created on this context afterwards. `spec` is
 * "name=value[,name=value...]" over the fields `mhla_context_tuning()` prints; "row=NAME" first
 * starts from a named built-in row (llvmpipe, cpu-intel, cpu, cpu-wide, nvidia, amd, intel-gpu,
 * mobile, gpu, default) instead of the one chosen for the device. Applied after the MHLA_TUNING environment variable. Vector widths stay
 * capped by the device (never wider than its SIMD registers on CPUs, float4 on GPUs) unless the
 * spec sets `vec` itself (an experiment: honoured up to 16).
 * NULL or "" clears the override. Results never depend on it, only speed: every tiling is
 * checked against the reference in the tests.
 * @return MHLA_OK, or MHLA_ERR_INVALID_ARGUMENT naming the unknown field, row or bad value (the
 *         previous override is then kept).
 * Thread-safety: shares the context; a plan or decoder created meanwhile takes the old override or the new
 * one. */
MHLA_API mhla_status mhla_context_set_tuning(mhla_context *ctx, const char *spec);

/*! mhla_context_tuning() :
 * Writes the tuning new plans on this context would use into buf (NUL-terminated, truncated to
 * size): where it came from ("built-in row 'cpu-wide', MHLA_TUNING"), then every field as
 * name=value after the device's caps. Plans fit these to their sizes and the device's limits.
 * @return MHLA_OK, MHLA_ERR_INVALID_ARGUMENT (NULL ctx or buf, size 0, malformed MHLA_TUNING).
 * Thread-safety: shares the context. */
MHLA_API mhla_status mhla_context_tuning(mhla_context *ctx, char *buf, size_t size);

/* Tuned entries (`mhla tune` writes them): per device and head-dimension pair, a tuning spec as
 * mhla_context_set_tuning() takes, in a text file in the library's cache folder (MHLA_CACHE_DIR,
 * else $XDG_CACHE_HOME/mhla, else ~/.cache/mhla; "off" means none; MHLA_PROGRAM_CACHE_DIR moves the
 * compiled programs elsewhere, never this file), keyed by the device's name,
 * driver and platform versions and the library's version. A plan whose Dk and Dv have an entry
 * applies it over the built-in row and before MHLA_TUNING and the context's overrides; an entry
 * that no longer parses is ignored. mhla_context_tuning() shows the built-in row only. */

/*! mhla_tuning_db_path() : the database file of ctx's device (it may not exist yet).
 * @return MHLA_OK; MHLA_ERR_UNSUPPORTED when there is no cache folder; MHLA_ERR_INVALID_ARGUMENT.
 * Thread-safety: shares the context. */
MHLA_API mhla_status mhla_tuning_db_path(mhla_context *ctx, char *path, size_t size);

/*! mhla_tuning_db_get() : the entry for (dk, dv) into spec ("" when there is none) and its note
 * into comment (may be NULL). Read from disk at each call.
 * @return MHLA_OK (also with no entry), MHLA_ERR_INVALID_ARGUMENT for NULL ctx or spec.
 * Thread-safety: shares the context. */
MHLA_API mhla_status mhla_tuning_db_get(mhla_context *ctx, int64_t dk, int64_t dv, char *spec, size_t spec_size,
                                        char *comment, size_t comment_size);

/*! mhla_tuning_db_put() : stores (replaces) the entry for (dk, dv): `spec` is validated as
 * mhla_context_set_tuning() validates it; `comment` (may be NULL, one line) says where it came
 * from. The file is rewritten through a temporary and a rename, so readers never see half of it.
 * Plans created on ctx afterwards use the entry.
 * @return MHLA_OK; MHLA_ERR_INVALID_ARGUMENT naming a bad value; MHLA_ERR_IO naming the folder or
 *         file that could not be created, written or renamed, and why; MHLA_ERR_UNSUPPORTED when
 *         there is no cache folder.
 * Thread-safety: shares the context; not concurrently with another mhla_tuning_db_put() for the same
 * device, from any context or process (one of the two entries may be lost). */
MHLA_API mhla_status mhla_tuning_db_put(mhla_context *ctx, int64_t dk, int64_t dv, const char *spec,
                                        const char *comment);

/*! mhla_tuning_db_list() : the head-dimension pairs that have an entry: *count of them, the
 * first `capacity` written to dims as (dk, dv) pairs (dims may be NULL when capacity is 0).
 * @return MHLA_OK (also with no database), MHLA_ERR_INVALID_ARGUMENT for NULL ctx or count.
 * Thread-safety: shares the context. */
MHLA_API mhla_status mhla_tuning_db_list(mhla_context *ctx, int64_t *dims, size_t capacity, size_t *count);

/* ------------------------------------------------------------------------------------------ */
/* Plan configuration                                                                           */
/* ------------------------------------------------------------------------------------------ */
typedef enum mhla_layout {
    MHLA_LAYOUT_BNHD = 0, /* [B, N, H, D]: what a fused QKV projection produces */
    MHLA_LAYOUT_BHND = 1  /* [B, H, N, D] */
} mhla_layout;

typedef enum mhla_feature_map {
    MHLA_FEATURE_NONE = 0,     /* the caller already applied one */
    MHLA_FEATURE_RELU = 1,     /* max(x, 0) */
    MHLA_FEATURE_RELU_EPS = 2, /* max(x, 0) + feature_eps (released vision/video code) */
    MHLA_FEATURE_ELU1 = 3      /* elu(x) + 1 */
} mhla_feature_map;

typedef enum mhla_normalizer {
    MHLA_NORMALIZER_PAPER = 0,    /* paper Eq. 4: q~.S~ / (q~.z~ + eps) */
    MHLA_NORMALIZER_OFFICIAL = 1, /* released code: sum_b Mc[i,b] (q~_{b,p} . z_b) + eps */
    MHLA_NORMALIZER_NONE = 2      /* q~.S~ alone (released video model, causal default) */
} mhla_normalizer;

typedef enum mhla_dtype {
    MHLA_DTYPE_F32 = 0,
    MHLA_DTYPE_F16 = 1, /* storage only, f32 accumulation */
    MHLA_DTYPE_BF16 = 2 /* storage only, f32 accumulation */
} mhla_dtype;

/* The causal chunk size C that mhla_config_init() and _init_causal() set, and that every interface
 * (the CLI's run, grad and diagnose, the Python package) uses when none is given. The chunk is part
 * of the model, not a speed setting: the rows and columns of the causal Mc are chunks, so a trained
 * Mc holds for one C only, and a caller who leaves C out must get the same model everywhere. */
#define MHLA_DEFAULT_CHUNK 64

/* Everything a plan is specialized for. Fill it with mhla_config_init() (or _init_causal())
 * and then set the sizes; every size is signed so that a negative value is reported, not
 * wrapped around. */
typedef struct mhla_config {
    int64_t batch;  /* B >= 1 */
    int64_t heads;  /* H >= 1 */
    int64_t seq_t;  /* token grid (T, Hs, Ws), N = T*Hs*Ws; a 1D sequence is (N, 1, 1) */
    int64_t seq_h;
    int64_t seq_w;
    int64_t block_t; /* block grid (bt, bh, bw) dividing the token grid; M = bt*bh*bw */
    int64_t block_h;
    int64_t block_w;
    int64_t dk; /* query/key head dimension */
    int64_t dv; /* value head dimension */
    mhla_layout layout;
    mhla_feature_map feature_map;
    float feature_eps; /* used by MHLA_FEATURE_RELU_EPS; default 1e-6 */
    float scale;       /* q~ = scale * phi(q); 0 selects the mode's default (1, or Dk^-0.5 causal) */
    mhla_normalizer normalizer;
    float eps; /* added to every denominator; default 1e-6 */
    mhla_dtype dtype;
    int causal;          /* 0: non-causal MHLA over the block grid; 1: chunkwise causal (1D) */
    int64_t chunk;       /* causal: chunk size C in 1..INT32_MAX; default MHLA_DEFAULT_CHUNK (64) */
    int64_t mixing_rows; /* causal: rows of the square Mc given (>= ceil(N/C)); 0 = ceil(N/C) */
    int varlen;          /* causal: 1 = seq_t is the total of variable-length sequences packed along
                            the token axis (batch 1), run with mhla_forward_varlen(); the limit
                            C * mixing_rows then applies to each sequence, checked per call */
    /* The key/value side (docs/spec.md "Cross-attention and grouped key/value heads"). Appended
     * fields: 0 means "as the query side", so a configuration that leaves them 0 is self-attention
     * over one grid with H key/value heads, as before they existed. */
    int64_t kv_heads; /* H_kv key/value heads, dividing H: query head h reads kv head h / (H / H_kv)
                         (grouped-query attention; 1 = multi-query); 0 = heads */
    int64_t kv_seq_t; /* the keys' and values' token grid (N_kv = T*Hs*Ws tokens): cross-attention,
                         non-causal only; all three 0 = the query grid */
    int64_t kv_seq_h;
    int64_t kv_seq_w;
    int64_t kv_block_t; /* its block grid (M_kv blocks, the columns of Mc, which is then M x M_kv);
                           all three 0 = the query block grid, allowed only where the key/value
                           grid is the query grid */
    int64_t kv_block_h;
    int64_t kv_block_w;
} mhla_config;

/*! mhla_config_init() : non-causal defaults (released vision/video code): BNHD, relu-eps with
 * feature_eps 1e-6, scale 1 (0 = default), paper normalizer, eps 1e-6, f32; all sizes 0 except
 * batch = heads = 1 and every grid/block extent = 1. NULL is ignored.
 * Thread-safety: any thread. */
MHLA_API void mhla_config_init(mhla_config *cfg);

/*! mhla_config_init_causal() : causal defaults (released language-model code): as above but
 * causal = 1, relu, scale Dk^-0.5 (0 = default), normalizer none, chunk MHLA_DEFAULT_CHUNK (64),
 * varlen 0.
 * Causal mode takes the normalizers `none` and `paper` (`official` is defined for block grids
 * only) and a 1D grid (N, 1, 1); the block grid fields are ignored. NULL is ignored.
 * Thread-safety: any thread. */
MHLA_API void mhla_config_init_causal(mhla_config *cfg);

/*! mhla_config_check() :
 * Validates a configuration without a device (what mhla_plan_create() checks first).
 * @msg, @msg_size: optional buffer receiving the explanation on failure (may be NULL/0).
 * @return MHLA_OK, MHLA_ERR_INVALID_ARGUMENT, MHLA_ERR_INVALID_SHAPE, MHLA_ERR_UNSUPPORTED, or
 *         MHLA_ERR_SEQUENCE_TOO_LONG (causal, not varlen: N > chunk * mixing_rows).
 * Thread-safety: any thread. */
MHLA_API mhla_status mhla_config_check(const mhla_config *cfg, char *msg, size_t msg_size);

/* Largest head dimension (Dk or Dv) the kernels are built for. */
#define MHLA_MAX_HEAD_DIM 256

/* ------------------------------------------------------------------------------------------ */
/* Plan: kernels specialized once, workspace owned                                            */
/* ------------------------------------------------------------------------------------------ */
typedef struct mhla_plan mhla_plan;

/*! mhla_plan_create() :
 * Validates `cfg`, builds (or takes from the context's cache) the kernels specialized for it,
 * and allocates its device workspace. `cfg` is copied.
 * @return MHLA_OK; a validation status naming the offending field and value;
 *         MHLA_ERR_BUILD_FAILED with the build log in the context message;
 *         MHLA_ERR_OUT_OF_DEVICE_MEMORY when the workspace does not fit the device.
 * Thread-safety: shares the context. */
MHLA_API mhla_status mhla_plan_create(mhla_context *ctx, const mhla_config *cfg, mhla_plan **out);

/*! mhla_plan_destroy() : releases the plan's kernels and workspace. Accepts NULL.
 * Work already enqueued with the plan must have completed.
 * Thread-safety: per plan. */
MHLA_API void mhla_plan_destroy(mhla_plan *plan);

/*! mhla_plan_workspace_size() : bytes of device memory the plan owns for intermediate results
 * (block summaries and their mixtures: O(B*H*M*Dk*Dv); causal plans: chunk summaries and prefix
 * mixtures, grown by a varlen call that needs more chunks); 0 for NULL. Host staging buffers of
 * mhla_forward_host() and CLBlast's temporary buffer of the causal prefix GEMMs are allocated on
 * first use and not counted here.
 * Thread-safety: per plan. */
MHLA_API size_t mhla_plan_workspace_size(const mhla_plan *plan);

/*! mhla_plan_tuning() :
 * Writes what the plan was built with into buf (truncated to size): where its tuning came from
 * ("built-in row 'cpu', tuned entry 64x64, MHLA_TUNING") and the tiles of each stage as fitted to
 * its sizes and the device; after its first mhla_backward(), the backward's read-outs too. Where a
 * GPU row's read-out may mix its block's matrices itself (tl_fuse, bt_fuse), whether it does and
 * what that reads again ("30.5 MiB read again", or "over fuse_mb 32" where the bound keeps the
 * mixing apart); where its forward runs in one launch (tl_one), "one launch" with that kernel's
 * groups, and "(not while the summaries are kept)" for a plan saving them for a backward. For
 * diagnostics; the format may change.
 * @return MHLA_OK, or MHLA_ERR_INVALID_ARGUMENT for NULL plan or buf or size 0.
 * Thread-safety: per plan. */
MHLA_API mhla_status mhla_plan_tuning(const mhla_plan *plan, char *buf, size_t size);

/*! mhla_plan_config() : the plan's configuration with defaults resolved (scale, mixing_rows);
 * NULL for NULL. Owned by the plan.
 * Thread-safety: per plan. */
MHLA_API const mhla_config *mhla_plan_config(const mhla_plan *plan);

/* Device time of each stage of one forward pass, in milliseconds (OpenCL profiling events).
 * Causal plans (mhla_forward and mhla_forward_varlen): the chunk summaries, the prefix mixtures
 * (kernel and CLBlast SGEMMs) and the output with the masked intra-chunk part. */
typedef struct mhla_stage_times {
    double summary_ms; /* block summaries (and their reduction when blocks are split) */
    double mixing_ms;  /* the mixing GEMM(s), and the official normalizer's dot products */
    double output_ms;  /* the per-token read-out with the normalizer */
    double total_ms;   /* first stage's start to last stage's end */
} mhla_stage_times;

/*! mhla_plan_stage_times() :
 * Reports the stage times of the plan's most recent mhla_forward()/mhla_forward_host() (or
 * mhla_forward_varlen()/_host()), waiting
 * for it to finish if needed. The stage boundaries are marker events the forward enqueues when the
 * context's queue has CL_QUEUE_PROFILING_ENABLE (contexts made by mhla_context_create() do) and
 * mhla_context_profile_stages() has not turned them off.
 * @return MHLA_OK; MHLA_ERR_UNSUPPORTED when the queue does not profile, the markers are off, or for
 *         a softmax plan (one kernel: time the event mhla_forward() returns);
 *         MHLA_ERR_INVALID_ARGUMENT for NULL arguments or when the plan has not run a forward pass
 *         with markers yet.
 * Thread-safety: per plan. */
MHLA_API mhla_status mhla_plan_stage_times(mhla_plan *plan, mhla_stage_times *out);

typedef enum mhla_tensor {
    MHLA_TENSOR_Q = 0,
    MHLA_TENSOR_K = 1,
    MHLA_TENSOR_V = 2,
    MHLA_TENSOR_OUT = 3,
    MHLA_TENSOR_MIXING = 4
} mhla_tensor;

/*! mhla_plan_tensor_bytes() : the number of bytes a buffer for `tensor` must hold at least;
 * 0 for NULL plan or unknown tensor.
 * Thread-safety: per plan. */
MHLA_API size_t mhla_plan_tensor_bytes(const mhla_plan *plan, mhla_tensor tensor);

/*! mhla_config_tensor_elems() : element count of `tensor` for a valid configuration (the
 * mixing matrix is M x M_kv, or mixing_rows^2 causal; k and v count N_kv tokens and H_kv heads); 0 when `cfg` is NULL or invalid.
 * Thread-safety: any thread. */
MHLA_API size_t mhla_config_tensor_elems(const mhla_config *cfg, mhla_tensor tensor);

/* ------------------------------------------------------------------------------------------ */
/* Forward pass                                                                                 */
/* ------------------------------------------------------------------------------------------ */

/*! mhla_forward() :
 * Enqueues MHLA on the context's queue: block summaries, mixing GEMM (CLBlast), output.
 * Buffers are the caller's: q, k [B,N,H,Dk], v [B,N,H,Dv] (or BHND), mixing M x M float32
 * row-major (Mc[i][b]), out like v. `out` must not be q, k, v or mixing. Each buffer's
 * CL_MEM_SIZE is checked against mhla_plan_tensor_bytes(). A softmax plan
 * (mhla_softmax_plan_create()) runs its one kernel instead and ignores `mixing` (may be NULL).
 * Causal plans (cfg.causal = 1, varlen 0) run the chunk form of docs/spec.md "Causal MHLA" instead:
 * per-chunk summaries, the prefix mixtures P_i = sum_{j<i} Mc[i,j] S_j (one kernel launch over
 * all chunks; on GPUs each row's earlier blocks of 32 chunks go to CLBlast SGEMMs; only the
 * strictly lower triangle of Mc and only earlier chunks are read), and the output (q~ P_i plus Mc[i,i]
 * times the masked intra-chunk attention). `mixing` is then mixing_rows x mixing_rows
 * (row-major) of which only the lower triangle of the leading ceil(N/C) x ceil(N/C) block is
 * read: entries above the diagonal may hold anything, NaN included. Each batch element is one
 * sequence. Varlen plans are refused (use mhla_forward_varlen()). An output depends only on its
 * own and earlier tokens, NaN and Inf included.
 * @num_wait, @wait: events the first stage waits for (may be 0/NULL).
 * @done: if not NULL, receives an event that completes with the output (caller releases it).
 * Nothing waits for the device: the call returns once the work is enqueued. The plan's
 * workspace is reused by the next call, which the queue orders after this one.
 * @return MHLA_OK, or a status with the context message naming the offending buffer or call.
 * Thread-safety: per plan. */
MHLA_API mhla_status mhla_forward(mhla_plan *plan, cl_mem q, cl_mem k, cl_mem v, cl_mem mixing, cl_mem out,
                         cl_uint num_wait, const cl_event *wait, cl_event *done);

/*! mhla_forward_host() :
 * Convenience: copies host arrays to device buffers the plan keeps for the purpose, runs
 * mhla_forward() and copies `out` back. Blocks until the output is on the host.
 * Element types follow cfg.dtype (float for F32; uint16_t bit patterns for F16/BF16);
 * the mixing matrix is always float. No pointer may be NULL, except `mixing` for a softmax plan.
 * Thread-safety: per plan. */
MHLA_API mhla_status mhla_forward_host(mhla_plan *plan, const void *q, const void *k, const void *v,
                              const float *mixing, void *out);

/* ------------------------------------------------------------------------------------------ */
/* Sharded plans: sequence parallelism over several devices (libmhla_mpi, include/mhla_mpi.h)   */
/* ------------------------------------------------------------------------------------------ */
/* A shard plan runs one contiguous range of whole blocks (causal: chunks) of a configuration, for
 * every batch element and head; its q, k, v and out tensors hold only the shard's tokens. The run
 * has two halves with an exchange of summaries between them, which this library leaves to the
 * caller (libmhla_mpi does it with MPI; anything that moves host memory can):
 *   1. mhla_shard_summaries(): the shard's summary rows (one per block) into host memory;
 *   2. the caller gathers the rows of all blocks, in block order, into one host array;
 *   3. mhla_shard_output(): mixing with the shard's rows of Mc, and the output of its tokens.
 * A row is S_b and z_b as the plan keeps them (B*H*Dk*(Dv+1) floats; causal: B*H*Dk*(Dv or Dv+1)),
 * followed, for the official normalizer, by q~_{b,p} . z_b of the block's Nb positions for every
 * batch and head (B*H*Nb floats: N*B*H floats over all blocks, the cost of that normalizer).
 * The results equal mhla_forward() on the whole sequence, bit for bit where the device's tuning
 * mixes with kernels/mixing.cl (CPUs); to rounding where CLBlast mixes. */

/*! mhla_plan_create_shard() :
 * @cfg: the configuration of the whole sequence (what mhla_plan_create() would take).
 * @block_offset, @block_count: the shard's blocks [offset, offset + count) in block order
 *   (non-causal: M = bt*bh*bw blocks in raster order, and when bh*bw > 1 both must be multiples of
 *   bh*bw, so that the shard is whole block frames, a contiguous token range; causal: chunks of
 *   C tokens, the last one possibly partial). count 0 is valid: the plan then owns no device
 *   memory and its calls do nothing. Varlen configurations take mhla_plan_create_shard_varlen()
 *   (here MHLA_ERR_INVALID_ARGUMENT).
 * The shard's tokens are [first, first + n) with first = offset * (tokens per block) and
 * mhla_plan_config() reports the shard's own configuration (seq_t = its frames or tokens);
 * mhla_plan_tensor_bytes() sizes the shard's tensors, and the whole Mc for MHLA_TENSOR_MIXING.
 * @return MHLA_OK; a validation status naming the offending value; as mhla_plan_create().
 * Thread-safety: shares the context. */
MHLA_API mhla_status mhla_plan_create_shard(mhla_context *ctx, const mhla_config *cfg, int64_t block_offset,
                                            int64_t block_count, mhla_plan **out);

/*! mhla_plan_create_shard_varlen() :
 * A shard of packed variable-length causal sequences (cfg: causal = 1, varlen = 1, seq_t = the
 * total, mixing_rows set), checked and copied with their cu_seqlens as mhla_forward_varlen() takes
 * them. Every sequence is chunked from its own start; the batch's chunk list is the sequences'
 * chunks in order (ceil(len / C) each, none for an empty sequence), and the shard is chunks
 * [chunk_offset, chunk_offset + chunk_count) of it: it may begin or end inside a sequence (at a
 * chunk boundary) or between sequences, and may be empty. Its tokens are the contiguous range
 * mhla_plan_shard_info() reports (from the first chunk's first token to the last chunk's end).
 * Run it with mhla_forward_sharded_varlen() (libmhla_mpi), or mhla_shard_summaries() and
 * mhla_shard_output() as any causal shard (blocks are then chunks of the packed list).
 * @return MHLA_OK, MHLA_ERR_INVALID_ARGUMENT (cu_seqlens, a range outside the chunk list),
 *         MHLA_ERR_SEQUENCE_TOO_LONG, or those of mhla_plan_create().
 * Thread-safety: shares the context. */
MHLA_API mhla_status mhla_plan_create_shard_varlen(mhla_context *ctx, const mhla_config *cfg,
                                                   const int32_t *cu_seqlens, size_t num_seqs, int64_t chunk_offset,
                                                   int64_t chunk_count, mhla_plan **out);

/* What a shard plan covers. */
typedef struct mhla_shard_info {
    int64_t block_offset, block_count; /* the shard's blocks */
    int64_t blocks;                    /* blocks of the whole sequence (M, or ceil(N/C)) */
    int64_t token_offset, tokens;      /* the shard's tokens [token_offset, token_offset + tokens) */
    size_t row_floats;                 /* floats of one block's exchange row */
    mhla_config global;                /* the whole sequence's configuration, defaults resolved */
    const int32_t *cu_seqlens;         /* varlen shards: the plan's copy (num_seqs + 1 offsets); else NULL */
    size_t num_seqs;
} mhla_shard_info;

/*! mhla_plan_shard_info() : fills *out for a shard plan.
 * @return MHLA_OK, or MHLA_ERR_INVALID_ARGUMENT (NULL, or a plan made by mhla_plan_create()).
 * Thread-safety: any thread (it reads the plan only). */
MHLA_API mhla_status mhla_plan_shard_info(const mhla_plan *plan, mhla_shard_info *out);

/*! mhla_plan_context() : the context a plan was created on (NULL for NULL). Thread-safety: any thread. */
MHLA_API mhla_context *mhla_plan_context(const mhla_plan *plan);

/*! mhla_shard_summaries() :
 * Computes the shard's block summaries (and, for the official normalizer, its query dot
 * products) from q, k, v (the shard's tokens, checked as mhla_forward() checks them) and copies
 * them to rows[0 .. block_count * row_floats). Blocks until the rows are on the host. A shard of
 * no blocks does nothing (its buffers and rows may be NULL).
 * @return MHLA_OK, MHLA_ERR_INVALID_ARGUMENT (not a shard plan, NULL), a buffer or device failure.
 * Thread-safety: per plan. */
MHLA_API mhla_status mhla_shard_summaries(mhla_plan *plan, cl_mem q, cl_mem k, cl_mem v, float *rows);

/*! mhla_shard_output() :
 * @all_rows: the rows of every block of the sequence in block order ([blocks][row_floats]); a
 *   causal shard reads only the rows of the blocks before its own (its own are still on the
 *   device), a non-causal shard reads all of them.
 * @mixing: the whole Mc (as mhla_forward() takes it); the shard reads its own rows of it.
 * Enqueues the mixing and the output of the shard's tokens into out (the summaries must come from
 * mhla_shard_summaries() on the same plan and the same q, k, v); `done` as in mhla_forward().
 * The host rows are copied before the call returns. A shard of no blocks does nothing.
 * @return MHLA_OK, MHLA_ERR_INVALID_ARGUMENT, a buffer or device failure. Thread-safety: per plan. */
MHLA_API mhla_status mhla_shard_output(mhla_plan *plan, cl_mem q, cl_mem k, cl_mem v, cl_mem mixing,
                                       const float *all_rows, cl_mem out, cl_event *done);

/*! mhla_report() :
 * For companion libraries (libmhla_mpi): records `status` with the formatted message on ctx (may
 * be NULL) and on this thread, as the library's own failures are recorded, and returns status.
 * Thread-safety: shares the context. */
MHLA_API mhla_status mhla_report(mhla_context *ctx, mhla_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* ------------------------------------------------------------------------------------------ */
/* Variable-length causal batches (docs/spec.md "Variable-length batches")                         */
/* ------------------------------------------------------------------------------------------ */
/* A varlen plan (cfg.causal = 1, cfg.varlen = 1, batch 1, seq_t = total) runs S sequences packed
 * along the token axis: q, k [1,total,H,Dk], v, out [1,total,H,Dv] (or BHND [1,H,total,D]), with
 * sequence s at tokens cu_seqlens[s] .. cu_seqlens[s+1]-1. Each sequence is chunked from its own
 * start, reads the leading block of the shared Mc, and never sees another sequence's tokens.
 *
 * cu_seqlens (S + 1 int32 offsets, S >= 1) is a host array: the host needs the offsets anyway to
 * validate them and to lay out the chunks, and taking them from the host keeps the call free of
 * a blocking read-back (an application holding them on the device reads them back itself, one
 * small blocking clEnqueueReadBuffer). Rules, each failure naming the index and the values:
 *   cu_seqlens[0] == 0; cu_seqlens[s] <= cu_seqlens[s+1] (non-decreasing: an empty sequence is
 *   accepted and produces no tokens, as in packed serving batches); cu_seqlens[S] == total;
 *   every sequence at most chunk * mixing_rows tokens (MHLA_ERR_SEQUENCE_TOO_LONG).
 * Bad offsets give MHLA_ERR_INVALID_ARGUMENT. A call may need more chunk workspace than the plan
 * holds (at most one chunk per token); it is then grown, and kept for the next calls. */

/*! mhla_forward_varlen() :
 * Enqueues the causal chunk form over a packed batch; otherwise as mhla_forward() (buffers
 * checked against the plan's total, events, nothing waits for the device). The offsets are read
 * during the call only.
 * @return MHLA_OK, MHLA_ERR_INVALID_ARGUMENT (plan not varlen, bad offsets, NULL),
 *         MHLA_ERR_SEQUENCE_TOO_LONG, MHLA_ERR_BUFFER_TOO_SMALL, or a device failure.
 * Thread-safety: per plan. */
MHLA_API mhla_status mhla_forward_varlen(mhla_plan *plan, cl_mem q, cl_mem k, cl_mem v, cl_mem mixing,
                                const int32_t *cu_seqlens, size_t num_seqs, cl_mem out,
                                cl_uint num_wait, const cl_event *wait, cl_event *done);

/*! mhla_forward_varlen_host() :
 * Host-pointer convenience around mhla_forward_varlen(), like mhla_forward_host(): element types
 * follow cfg.dtype (float for F32; uint16_t bit patterns for F16/BF16), the mixing matrix is float;
 * blocks until `out` is written. No pointer may be NULL.
 * Thread-safety: per plan. */
MHLA_API mhla_status mhla_forward_varlen_host(mhla_plan *plan, const void *q, const void *k,
                                     const void *v, const float *mixing,
                                     const int32_t *cu_seqlens, size_t num_seqs, void *out);

/* ------------------------------------------------------------------------------------------ */
/* Backward pass (training): docs/spec.md "Backward"                                            */
/* ------------------------------------------------------------------------------------------ */

/*! mhla_backward() :
 * Enqueues the gradients of the plan's forward output against dout = dL/dO: dq, dk (shaped like q,
 * k), dv (like v), in cfg.dtype (f32 arithmetic), and, when dmixing is not NULL, dMc as float32
 * (M x M, or mixing_rows x mixing_rows for causal plans), summed over batch and heads in a fixed
 * order (no atomics: bit-identical run to run). NULL dmixing skips that work. Every mode of the
 * forward: non-causal 1D/2D/3D with every normalizer and feature map; causal plans the chunk form
 * (none, paper), where only dMc[i, j <= i] is non-zero. Varlen plans: mhla_backward_varlen().
 * Buffers are the caller's, sized as mhla_plan_tensor_bytes() says (dout as OUT, dq as Q, dk as K,
 * dv as V, dmixing as MIXING). A gradient buffer that is the same as an input (q, k, v, mixing,
 * dout) or as another gradient is refused (MHLA_ERR_INVALID_ARGUMENT naming both).
 * The forward's block summaries are recomputed (nothing per token is kept between the passes),
 * unless the plan keeps its last forward's (mhla_plan_save_for_backward);
 * the first call builds the backward's kernels and allocates its workspace, O(B*H*M*Dk*(Dv+1))
 * floats (summary-sized buffers for G, dS and a transposed summary, Mc^T, dMc's partial sums;
 * for the paper and official normalizers one float per token, two for the official one; causal
 * plans with the paper normalizer two per token), which mhla_plan_workspace_size() counts from
 * then on. It shares the forward's
 * workspace: a forward and a backward of the same plan are ordered by the queue.
 * @num_wait, @wait, @done: as mhla_forward(). Nothing waits for the device.
 * @return MHLA_OK; MHLA_ERR_INVALID_ARGUMENT (NULL, aliasing, a varlen plan); MHLA_ERR_BUFFER_TOO_SMALL
 *         naming the buffer and its shape; MHLA_ERR_UNSUPPORTED for a softmax plan; a build or
 *         device failure. Thread-safety: as mhla_forward(). */
MHLA_API mhla_status mhla_backward(mhla_plan *plan, cl_mem q, cl_mem k, cl_mem v, cl_mem mixing, cl_mem dout,
                                   cl_mem dq, cl_mem dk, cl_mem dv, cl_mem dmixing, cl_uint num_wait,
                                   const cl_event *wait, cl_event *done);

/*! mhla_backward_host() :
 * Host-pointer convenience around mhla_backward(), like mhla_forward_host(): q, k, v, dout, dq, dk,
 * dv in cfg.dtype (float, or uint16_t bit patterns for F16/BF16), mixing and dmixing float. Blocks
 * until every gradient is on the host. Only dmixing may be NULL.
 * Thread-safety: per plan. */
MHLA_API mhla_status mhla_backward_host(mhla_plan *plan, const void *q, const void *k, const void *v,
                                        const float *mixing, const void *dout, void *dq, void *dk, void *dv,
                                        float *dmixing);

/*! mhla_backward_varlen() / mhla_backward_varlen_host() :
 * The backward of mhla_forward_varlen() (a varlen plan, cu_seqlens as there); dMc sums every
 * sequence's chunks. Otherwise as mhla_backward() / mhla_backward_host().
 * Thread-safety: per plan. */
MHLA_API mhla_status mhla_backward_varlen(mhla_plan *plan, cl_mem q, cl_mem k, cl_mem v, cl_mem mixing,
                                          const int32_t *cu_seqlens, size_t num_seqs, cl_mem dout, cl_mem dq,
                                          cl_mem dk, cl_mem dv, cl_mem dmixing, cl_uint num_wait,
                                          const cl_event *wait, cl_event *done);
MHLA_API mhla_status mhla_backward_varlen_host(mhla_plan *plan, const void *q, const void *k, const void *v,
                                               const float *mixing, const int32_t *cu_seqlens, size_t num_seqs,
                                               const void *dout, void *dq, void *dk, void *dv, float *dmixing);

/*! mhla_plan_save_for_backward() :
 * With enable = 1, each mhla_forward() of a non-causal plan leaves its block summaries and their
 * mixtures (and the official normalizer's dots and denominators; where the blocks are few enough
 * for the tiled backward to mix them itself, tuning fields bt_fuse and fuse_mb, the summaries alone), and of a
 * causal plan (not varlen) its chunk summaries and prefix mixtures, in the plan's workspace, where
 * they are anyway, for the next mhla_backward() with the same q, k, v and mixing buffers, which then
 * does not recompute them, as autograd keeps a forward's saved tensors for its backward (about a
 * sixth of the backward's time at N = 16384, M = 64). The caller promises that those buffers'
 * contents do not change between the two calls. Anything else run with the plan in between (a
 * forward or backward with other buffers, a host-pointer form) makes the next backward recompute.
 * 0, the default, always recomputes. Packed varlen plans always recompute. No memory is added
 * (the causal backward copies the forward's slots into its own, which it has anyway). A plan whose
 * forward would run in one launch (tuning field tl_one), which leaves no summaries, runs its
 * stages while this is on.
 * @return MHLA_OK; MHLA_ERR_INVALID_ARGUMENT for a NULL plan or an enable other than 0 and 1.
 * Thread-safety: per plan. */
MHLA_API mhla_status mhla_plan_save_for_backward(mhla_plan *plan, int enable);

/* ------------------------------------------------------------------------------------------ */
/* Streaming causal decoder (docs/spec.md "Streaming decoder")                                  */
/* ------------------------------------------------------------------------------------------ */
/* A decoder holds, on the device, the summaries of the finished chunks S_0..S_{i-1}, the running
 * summary of the current chunk i, and its prefix mixture P_i. A step costs O(B*H*Dk*Dv) whatever
 * the context length; when a step starts chunk i it first builds P_i from Mc's row i
 * (O(i*B*H*Dk*Dv), once per chunk), or, with the tuning field dec_next, the steps of chunk i - 1
 * have summed it as they went (about i/C earlier summaries each; every step one launch). Its
 * outputs equal the chunk form's (mhla_forward on a causal plan) to rounding. Thread-safety: each
 * call says; one thread at a time per decoder. */
typedef struct mhla_decoder mhla_decoder;

/*! mhla_decoder_create() :
 * @cfg: a causal configuration (cfg.causal = 1, varlen 0, any dtype): batch, heads, dk, dv, chunk,
 *   feature map, feature_eps, scale (0 = Dk^-0.5), normalizer (none or paper), eps, layout (of
 *   the multi-token tensors of prefill and the host calls). seq_t/seq_h/seq_w and the block grid
 *   are ignored. mixing_rows: rows of the Mc the calls pass; 0 = ceil(capacity / chunk).
 * @capacity_tokens: the most tokens the decoder will hold (>= 1, <= chunk * mixing_rows, else
 *   MHLA_ERR_SEQUENCE_TOO_LONG naming both); its state takes ceil(capacity / chunk) summaries of
 *   B*H*Dk*(Dv + 1 for paper) floats on the device (on CPU devices each padded by up to 31 floats
 *   to an odd number of 64-byte lines), plus one prefix mixture (two with dec_next); a prefill adds up to 64 more (its
 *   chunk path runs 64 chunks at a time), allocated on first use and kept. The saved state
 *   (mhla_decoder_state_read) holds the summaries without the padding.
 * @out: receives the handle, NULL on failure.
 * @return MHLA_OK, a validation status, MHLA_ERR_BUILD_FAILED, MHLA_ERR_OUT_OF_DEVICE_MEMORY.
 * Thread-safety: shares the context. */
MHLA_API mhla_status mhla_decoder_create(mhla_context *ctx, const mhla_config *cfg, int64_t capacity_tokens,
                                mhla_decoder **out);

/*! mhla_decoder_destroy() : releases the decoder's device state. Accepts NULL. Work enqueued
 * with it must have completed (or the queue be finished) before its context is destroyed.
 * Thread-safety: per decoder. */
MHLA_API void mhla_decoder_destroy(mhla_decoder *dec);

/*! mhla_decoder_reset() : back to position 0 (an empty context), without device work.
 * @return MHLA_OK, or MHLA_ERR_INVALID_ARGUMENT for NULL.
 * Thread-safety: per decoder. */
MHLA_API mhla_status mhla_decoder_reset(mhla_decoder *dec);

/*! mhla_decoder_position() : tokens consumed so far (the next token's index); -1 for NULL.
 *  mhla_decoder_capacity() : capacity_tokens of mhla_decoder_create(); -1 for NULL.
 *  mhla_decoder_config() : the configuration with defaults resolved (scale, mixing_rows); NULL for
 *  NULL; owned by the decoder.
 * Thread-safety: per decoder. */
MHLA_API int64_t mhla_decoder_position(const mhla_decoder *dec);
MHLA_API int64_t mhla_decoder_capacity(const mhla_decoder *dec);
MHLA_API const mhla_config *mhla_decoder_config(const mhla_decoder *dec);

/*! mhla_decoder_tensor_bytes() : bytes a buffer for `tensor` needs for a call on `n_tokens`
 * tokens (q, k: B*n*H*Dk floats; v, out: B*n*H*Dv; mixing: mixing_rows^2, whatever n);
 * 0 for NULL, unknown tensor, n_tokens < 1, or a size beyond size_t.
 * Thread-safety: per decoder. */
MHLA_API size_t mhla_decoder_tensor_bytes(const mhla_decoder *dec, mhla_tensor tensor, int64_t n_tokens);

/*! mhla_decoder_step() :
 * Enqueues one token for every batch element and head: q, k [B,H,Dk], v, out [B,H,Dv] in cfg.dtype
 * (for one token both layouts are this), mixing as in mhla_decoder_create(); at a chunk start it
 * first builds P_i from Mc[i, 0..i-1] (dec_next: the previous chunk's steps summed it, each a share,
 * and the first step after a prefill or a restored state sums the shares the steps before it would
 * have); Mc[i,i] is read every step. Pass the same Mc each call.
 * Events and buffer checks as in mhla_forward(); nothing waits for the device.
 * @return MHLA_OK; MHLA_ERR_CAPACITY_EXCEEDED (the message names the position and the capacity;
 *         the decoder is unchanged); a buffer or device failure.
 * Thread-safety: per decoder. */
MHLA_API mhla_status mhla_decoder_step(mhla_decoder *dec, cl_mem q, cl_mem k, cl_mem v, cl_mem mixing,
                              cl_mem out, cl_uint num_wait, const cl_event *wait, cl_event *done);

/*! mhla_decoder_prefill() :
 * Consumes n_tokens tokens at once: q, k [B,n,H,Dk], v, out [B,n,H,Dv] (or BHND), continuing at
 * the current position (a prompt at 0, or more context later). Tokens up to the next chunk
 * boundary go through the recurrent step; the whole chunks after it (and a partial last one) go
 * through the chunk path (summaries straight into the decoder's state, prefix mixtures, masked
 * intra-chunk output). Steps may follow. Same checks, events and errors as mhla_decoder_step().
 * Thread-safety: per decoder. */
MHLA_API mhla_status mhla_decoder_prefill(mhla_decoder *dec, cl_mem q, cl_mem k, cl_mem v, cl_mem mixing,
                                 cl_mem out, int64_t n_tokens, cl_uint num_wait,
                                 const cl_event *wait, cl_event *done);

/*! mhla_decoder_step_host() / mhla_decoder_prefill_host() :
 * Host-pointer conveniences: q, k [B,n,H,Dk], v, out [B,n,H,Dv] (or BHND) arrays whose elements
 * follow cfg.dtype (float for F32; uint16_t bit patterns for F16/BF16), mixing mixing_rows^2
 * floats. The decoder's state stays float whatever the storage type. step_host runs n_tokens steps, one token after the other (the recurrent
 * form over a whole sequence, what `mhla run --recurrent` does); prefill_host runs
 * mhla_decoder_prefill(). Both copy the inputs once, block until `out` is written, and refuse
 * (unchanged decoder) a call that would pass the capacity. No pointer may be NULL.
 * Thread-safety: per decoder. */
MHLA_API mhla_status mhla_decoder_step_host(mhla_decoder *dec, const void *q, const void *k,
                                   const void *v, const float *mixing, void *out,
                                   int64_t n_tokens);
MHLA_API mhla_status mhla_decoder_prefill_host(mhla_decoder *dec, const void *q, const void *k,
                                      const void *v, const float *mixing, void *out,
                                      int64_t n_tokens);

/* Decoder state (save a sequence's progress, fork it): host byte order, little or big endian as
 * written, float32 IEEE-754. W = batch*kv_heads*dk*SC floats per summary, SC = dv + 1 for the paper
 * normalizer, dv for none; a summary is S as [batch*kv_heads][dk][dv] (batch-major, then head), then,
 * for the paper normalizer only, the key sums z as [batch*kv_heads][dk]. (kv_heads: the
 * configuration's H_kv; the state of grouped key/value heads is H_kv / H of the heads'.)
 *   offset size  field
 *   0      8     magic "MHLADEC\0"
 *   8      4     uint32 format version (1)
 *   12     4     uint32 header bytes (128)
 *   16     4     uint32 byte-order mark 0x01020304 (as written by the saving machine)
 *   20     4     int32 feature map           24  4  float feature_eps
 *   28     4     int32 normalizer            32  8  int64 batch
 *   40     8     int64 heads                 48  8  int64 dk
 *   56     8     int64 dv                    64  8  int64 chunk C
 *   72     8     int64 SC                    80  8  int64 position n (tokens consumed)
 *   88     8     int64 summaries stored: ceil(n / C)
 *   96     8     int64 kv_heads (0 in states written before it: heads)
 *   104    24    zero (reserved)
 *   128    ...   S_0 .. S_{i-1}, the finished chunks, then, when n % C != 0, the running summary
 *                of chunk i = n / C (all ceil(n / C) summaries, W floats each, in chunk order);
 *   then         when n % C != 0, the prefix mixture P_i (W floats). At n % C == 0 the next step
 *                builds P_i from Mc, so it is not stored; nor is the next chunk's prefix so far
 *                (dec_next): the first step after a restore rebuilds it, in the steps' order.
 * The state does not hold Mc: restore with the Mc the state was computed with. */

/*! mhla_decoder_state_size() : bytes of the state at the current position; 0 for NULL.
 * Thread-safety: per decoder. */
MHLA_API size_t mhla_decoder_state_size(const mhla_decoder *dec);

/*! mhla_decoder_state_read() :
 * Copies the state into `buf` (mhla_decoder_state_size() bytes). Blocks until the device copy is
 * done (work enqueued before it is waited for).
 * @return MHLA_OK, MHLA_ERR_INVALID_ARGUMENT (NULL), MHLA_ERR_BUFFER_TOO_SMALL, a device failure.
 * Thread-safety: per decoder. */
MHLA_API mhla_status mhla_decoder_state_read(mhla_decoder *dec, void *buf, size_t size);

/*! mhla_decoder_state_write() :
 * Restores a state read from a decoder of the same batch, heads, dk, dv, chunk, feature map,
 * feature_eps and normalizer (capacity, mixing_rows, scale, eps and layout may differ); blocks
 * until it is on the device. The position becomes the state's.
 * @return MHLA_OK; MHLA_ERR_INVALID_ARGUMENT (bad magic, version, byte order, header, a config
 *         field that differs, named with both values; size larger than the header says);
 *         MHLA_ERR_BUFFER_TOO_SMALL (truncated); MHLA_ERR_CAPACITY_EXCEEDED (the state's position
 *         is past this decoder's capacity); a device failure. A state that fails validation
 *         leaves the decoder unchanged; after a device failure its state is undefined (reset it).
 * Thread-safety: per decoder. */
MHLA_API mhla_status mhla_decoder_state_write(mhla_decoder *dec, const void *buf, size_t size);

/* ------------------------------------------------------------------------------------------ */
/* Softmax attention: the baseline MHLA is measured against (docs/spec.md "Softmax attention")  */
/* ------------------------------------------------------------------------------------------ */

/*! mhla_softmax_plan_create() :
 * Creates a plan computing standard softmax attention over all N tokens of each sequence,
 *   o_t = sum_s softmax_s(scale * q_t . k_s) v_s,
 * with a streaming (online) softmax: each work-group holds a tile of queries and streams keys and
 * values through local memory with a running max and sum, so device memory stays O(N) (there is
 * no N x N buffer) and large logits do not overflow. The tile is chosen from the device's limits
 * (local memory, work-group size); every Dk and Dv up to MHLA_MAX_HEAD_DIM is supported.
 * From `cfg` it uses batch, heads, the token grid (only N = T*Hs*Ws matters), dk, dv, layout, the
 * key/value side (kv_heads, and the kv_seq_* grid for keys of their own length: cross-attention),
 * dtype (f16/bf16 storage with f32 arithmetic, as MHLA plans) and scale (0 selects Dk^-0.5).
 * It ignores the block grid, feature map, feature_eps, normalizer, eps and mixing_rows;
 * mhla_plan_config() reports them at their defaults (block grid 1x1x1). cfg->causal must be 0. `cfg` is copied.
 * The plan runs through mhla_forward() and mhla_forward_host() like an MHLA plan; their `mixing`
 * argument is ignored and may be NULL. mhla_plan_tensor_bytes(plan, MHLA_TENSOR_MIXING) and
 * mhla_plan_workspace_size() are 0. Destroy it with mhla_plan_destroy().
 * @return MHLA_OK; a validation status naming the offending field and value
 *         (MHLA_ERR_UNSUPPORTED for causal = 1 or a head dimension above
 *         MHLA_MAX_HEAD_DIM); MHLA_ERR_UNSUPPORTED naming the sizes when the device's local
 *         memory cannot hold even a one-key tile; MHLA_ERR_BUILD_FAILED with the build log.
 * Thread-safety: shares the context. */
MHLA_API mhla_status mhla_softmax_plan_create(mhla_context *ctx, const mhla_config *cfg, mhla_plan **out);

/* ------------------------------------------------------------------------------------------ */
/* Mixing-matrix initializers (docs/spec.md "Mixing-matrix initializers")                      */
/* ------------------------------------------------------------------------------------------ */
typedef enum mhla_init_kind {
    MHLA_INIT_LINEAR = 0,        /* 1 - d/dmax, columns normalized */
    MHLA_INIT_COS = 1,           /* cos(d/dmax * pi/4), columns normalized */
    MHLA_INIT_EXP = 2,           /* exp(-d/sigma), param sigma (default 3), columns normalized */
    MHLA_INIT_GAUSSIAN = 3,      /* exp(-d^2/(2 s^2)), s = dmax/3, not normalized */
    MHLA_INIT_LOCAL = 4,         /* 1 where d <= thres (param, default 1.5), columns normalized */
    MHLA_INIT_PAPER = 5,         /* 1 - d(i,j)/max_k d(i,k), rows normalized (paper Sec. 4.2) */
    MHLA_INIT_CAUSAL_UNIFORM = 6 /* row i: 1/(i+1) for j <= i, else 0 */
} mhla_init_kind;

/*! mhla_mixing_init() :
 * Writes the M x M initial mixing matrix (row-major, M = bt*bh*bw) for a block grid.
 * @param: the kind's parameter (exp: sigma > 0; local: thres >= 0); NULL selects the default;
 *         ignored by the other kinds.
 * @out, @out_count: caller buffer of at least M*M floats.
 * @return MHLA_OK, MHLA_ERR_INVALID_ARGUMENT (NULL out, unknown kind, bad param),
 *         MHLA_ERR_INVALID_SHAPE (non-positive extent), MHLA_ERR_BUFFER_TOO_SMALL.
 *         The explanation is in mhla_last_message().
 * Thread-safety: any thread. */
MHLA_API mhla_status mhla_mixing_init(mhla_init_kind kind, const double *param, int64_t bt, int64_t bh,
                             int64_t bw, float *out, size_t out_count);

/*! mhla_mixing_init_cross() :
 * The M x M_kv mixing matrix (row-major) of a cross-attention configuration: query blocks `blocks`
 * (bt, bh, bw) by key/value blocks `kv_blocks`, each kind as mhla_mixing_init() defines it over the
 * distance between the centres of a query block and a key block, the key block's centre mapped onto
 * the query block grid ((c + 0.5) * query blocks / key blocks along each axis, docs/spec.md
 * "Mixing-matrix initializers"). With kv_blocks = blocks it is mhla_mixing_init()'s matrix.
 * causal-uniform is refused (it is for causal chunks).
 * @return as mhla_mixing_init(); MHLA_ERR_INVALID_ARGUMENT for NULL blocks or kv_blocks.
 * Thread-safety: any thread. */
MHLA_API mhla_status mhla_mixing_init_cross(mhla_init_kind kind, const double *param, const int64_t blocks[3],
                                           const int64_t kv_blocks[3], float *out, size_t out_count);

/*! mhla_init_kind_parse() / mhla_init_kind_name() : "linear", "cos", "exp", "gaussian", "local",
 * "paper", "causal-uniform". parse returns MHLA_ERR_INVALID_ARGUMENT for an unknown name;
 * name returns NULL for an unknown kind. Similar helpers for the other enums follow.
 * Thread-safety: any thread. */
MHLA_API mhla_status mhla_init_kind_parse(const char *name, mhla_init_kind *out);
MHLA_API const char *mhla_init_kind_name(mhla_init_kind kind);
MHLA_API mhla_status mhla_feature_map_parse(const char *name, mhla_feature_map *out); /* none|relu|relu-eps|elu1 */
MHLA_API const char *mhla_feature_map_name(mhla_feature_map fm);
MHLA_API mhla_status mhla_normalizer_parse(const char *name, mhla_normalizer *out); /* paper|official|none */
MHLA_API const char *mhla_normalizer_name(mhla_normalizer n);
MHLA_API mhla_status mhla_layout_parse(const char *name, mhla_layout *out); /* bnhd|bhnd */
MHLA_API const char *mhla_layout_name(mhla_layout layout);
MHLA_API mhla_status mhla_dtype_parse(const char *name, mhla_dtype *out); /* f32|f16|bf16 */
MHLA_API const char *mhla_dtype_name(mhla_dtype dtype);

/* ------------------------------------------------------------------------------------------ */
/* Storage types on the host                                                                    */
/* ------------------------------------------------------------------------------------------ */

/*! mhla_f16_to_float() / mhla_bf16_to_float() : the 16-bit value with bit pattern `h` as a float;
 * exact for every value (subnormals, infinities; a NaN stays a NaN with its sign and payload top).
 * mhla_float_to_f16() / mhla_float_to_bf16() : `f` rounded to the nearest 16-bit value, ties to
 * even (what the kernels store); overflow gives infinity, a NaN stays a quiet NaN.
 * Thread-safety: any thread. */
MHLA_API float mhla_f16_to_float(uint16_t h);
MHLA_API uint16_t mhla_float_to_f16(float f);
MHLA_API float mhla_bf16_to_float(uint16_t h);
MHLA_API uint16_t mhla_float_to_bf16(float f);

/*! mhla_convert() :
 * Converts n elements between storage types (f32 <-> f16, f32 <-> bf16, or a copy of one type);
 * f16 <-> bf16 is refused (convert through f32, whose rounding the caller then sees). dst and
 * src may be the same array only for a same-type copy. Elements are float or uint16_t.
 * @return MHLA_OK or MHLA_ERR_INVALID_ARGUMENT (NULL pointer with n > 0, unknown dtype, f16 <-> bf16),
 *         explained in mhla_last_message().
 * Thread-safety: any thread. */
MHLA_API mhla_status mhla_convert(mhla_dtype dst_type, void *dst, mhla_dtype src_type, const void *src, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* MHLA_H */
