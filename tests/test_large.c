/* A forward whose v and out hold more than 2^31 elements (docs/spec.md "Tensors and layouts": indices
 * into such tensors must not overflow), checked against the double reference on blocks on both sides of
 * element 2^31, with the device's own tuning row and, for the token offsets, with the GPU row (the
 * tiled summary and read-out a GPU runs, which multiply a token by its row stride in code of their
 * own).
 *
 * Memory: v and out are the smallest tensors past 2^31 elements, 2^31 + 2^25 f16 values (4.06 GiB)
 * each, in host memory the device uses in place (CL_MEM_USE_HOST_PTR: no device copy on a CPU);
 * q and k have Dk = 4 (136 MiB each). Both cases' tensors have these sizes, so the program fills
 * them once and both use them: about 8.6 GiB at its peak, well under half of a 24 GiB machine that
 * runs another test beside this one. f16 storage halves what f32 would take (16 GiB, past that
 * budget); most of the run time is the first touch of those pages. Each case checks the device's
 * CL_DEVICE_MAX_MEM_ALLOC_SIZE and CL_DEVICE_GLOBAL_MEM_SIZE and the host's memory first, and skips,
 * saying why, when they cannot hold it (PoCL derives both from the memory hwloc reports, which a VM
 * may understate: it reads the NUMA node's).
 *
 * Mc is the identity, so that a block's output depends on its own tokens only: the reference of a
 * block is a one-block problem of its Nb tokens (cheap), whichever blocks are checked. The two
 * layouts put the large offsets in different terms: BNHD with B = 1 in token * row stride (past
 * 2^31 alone), BHND with B * H = 65 rows in the row's base (past 2^31 alone), so that a 32-bit
 * product, base or sum anywhere on the path overflows in one case or the other. Outputs start as
 * NaN and every element is checked to be finite (written). */
#include "helpers.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#define TWO31 ((int64_t)1 << 31)

typedef struct big_shape {
    const char *name;
    mhla_layout layout;
    int64_t b, h, n, m, dk, dv;
} big_shape;

/* Element offset of (batch b, token t, head h) in a tensor with d columns: 64-bit, as the kernels'
 * must be. */
static int64_t offset_of(const big_shape *s, int64_t b, int64_t t, int64_t h, int64_t d)
{
    return s->layout == MHLA_LAYOUT_BHND ? ((b * s->h + h) * s->n + t) * d : ((b * s->n + t) * s->h + h) * d;
}

/* n f16 values, page-aligned (PoCL then uses the memory in place rather than a copy), the pages
 * made present up front where the system can (cheaper than a fault per page). */
static uint16_t *alloc16(size_t n)
{
    const size_t bytes = n * sizeof(uint16_t);
#ifdef MAP_POPULATE
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED)
        fail_msg("out of host memory for %zu f16 values", n);
#else
    void *p = NULL;
    if (posix_memalign(&p, 4096, bytes) != 0)
        fail_msg("out of host memory for %zu f16 values", n);
#endif
    return p;
}

static void free16(uint16_t *x, size_t n)
{
    if (!x)
        return;
#ifdef MAP_POPULATE
    munmap(x, n * sizeof *x);
#else
    (void)n;
    free(x);
#endif
}

/* x[0..n) as f16: `period` values uniform in [lo, hi), repeated. The periods are primes: an access
 * displaced by any power of two (what a wrapped 32-bit offset gives) reads another value. */
static uint16_t *pattern16(size_t n, size_t period, uint32_t seed, float lo, float hi)
{
    uint16_t *x = alloc16(n);
    float *f = malloc(period * sizeof *f);
    assert_non_null(f);
    fill_uniform(f, period, seed, lo, hi);
    assert_int_equal(mhla_convert(MHLA_DTYPE_F16, x, MHLA_DTYPE_F32, f, period < n ? period : n), MHLA_OK);
    free(f);
    for (size_t i = period; i < n; i += period)
        memcpy(x + i, x, (n - i < period ? n - i : period) * sizeof *x);
    return x;
}

/* The tensors both cases use (their sizes agree), made by the first case that runs. */
static struct {
    uint16_t *q, *k, *v, *out;
    size_t nq, nv;
    int lock_fd; /* the machine-wide lock below, held with the tensors: its descriptor + 1 (0: none) */
} held;

/* One program at a time holds these 8.6 GiB on a machine: the test command runs the mutation
 * check's copies of these cases beside meson's own run of them, and two at once (17 GiB) push a
 * smaller machine into swap or its OOM killer, which slows or kills whatever else runs. An flock on
 * a file in the temporary directory, released when the program exits (whichever way). */
static void lock_machine_memory(void)
{
    const char *tmp = getenv("TMPDIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/libmhla-test-large-%ld.lock", tmp && *tmp ? tmp : "/tmp", (long)getuid());
    const int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) { /* no lock to take (a read-only temporary directory): run unserialized */
        printf("large: cannot open %s (%s): not serialized with other runs of this test\n", path, strerror(errno));
        return;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        printf("large: another run of this test holds its tensors; waiting for %s\n", path);
        fflush(stdout);
        while (flock(fd, LOCK_EX) != 0 && errno == EINTR)
            ;
    }
    held.lock_fd = fd + 1;
}

static void hold_tensors(size_t nq, size_t nv)
{
    if (held.q) {
        assert_true(held.nq == nq && held.nv == nv);
        return;
    }
    lock_machine_memory();
    held.nq = nq, held.nv = nv;
    held.q = pattern16(nq, 65519, 1, -1.0f, 1.0f);
    held.k = pattern16(nq, 65497, 2, -1.0f, 1.0f);
    held.v = pattern16(nv, 65521, 3, -0.5f, 1.0f);
    held.out = alloc16(nv);
}

static int large_teardown(void **state)
{
    free16(held.q, held.nq), free16(held.k, held.nq), free16(held.v, held.nv), free16(held.out, held.nv);
    if (held.lock_fd)
        close(held.lock_fd - 1); /* the lock goes with it */
    memset(&held, 0, sizeof held);
    return context_teardown(state);
}

/* The first element of x[0..n) that is not finite as f16 (exponent all ones), or n. In slices, so
 * that the test over each is a plain loop the compiler vectorizes (2^31 elements). */
static size_t first_nonfinite16(const uint16_t *x, size_t n)
{
    for (size_t i = 0; i < n; i += (size_t)1 << 16) {
        const size_t end = n - i < ((size_t)1 << 16) ? n : i + ((size_t)1 << 16);
        unsigned any = 0;
        for (size_t j = i; j < end; ++j)
            any |= (x[j] & 0x7C00u) == 0x7C00u;
        for (size_t j = i; any && j < end; ++j)
            if ((x[j] & 0x7C00u) == 0x7C00u)
                return j;
    }
    return n;
}

/* An offset past 2^31 cut to 32 bits lands gigabytes away from its tensor: on a CPU device the
 * kernel then faults in one of the runtime's threads, where cmocka's own handler cannot end the case
 * cleanly. While a case's kernels run, a fault ends the program with a line naming the case. */
static char crash_note[256];
static size_t crash_len;
static struct sigaction crash_saved[2];
static const int crash_signals[2] = {SIGSEGV, SIGBUS};

static void on_crash(int sig)
{
    const ssize_t written = write(STDOUT_FILENO, crash_note, crash_len); /* the exit status fails the test either way */
    (void)written;
    _exit(128 + sig);
}

static void crash_guard(const char *name)
{
    int n = snprintf(crash_note, sizeof crash_note,
                     "ERROR: %s: the forward crashed (SIGSEGV or SIGBUS): a kernel accessed memory outside the "
                     "tensors, as an offset past 2^31 cut to 32 bits does\n", name);
    crash_len = n < 0 ? 0 : (size_t)n < sizeof crash_note ? (size_t)n : sizeof crash_note - 1;
    fflush(stdout); /* what the case printed so far, before a fault could lose it */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_crash;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 2; ++i)
        sigaction(crash_signals[i], &sa, &crash_saved[i]);
}

static void crash_unguard(void)
{
    for (int i = 0; i < 2; ++i)
        sigaction(crash_signals[i], &crash_saved[i], NULL);
}

static cl_mem host_buffer(mhla_context *ctx, void *host, size_t bytes)
{
    cl_int err = CL_SUCCESS;
    cl_mem m = clCreateBuffer(mhla_context_cl_context(ctx), CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, bytes, host, &err);
    if (err != CL_SUCCESS)
        fail_msg("clCreateBuffer(%zu bytes, CL_MEM_USE_HOST_PTR): %d", bytes, (int)err);
    return m;
}

/* Block `blk` of (b, h) against the reference of its Nb tokens alone (Mc is the identity). */
static void check_block(const big_shape *s, const char *name, const uint16_t *q, const uint16_t *k, const uint16_t *v,
                        const uint16_t *out, int64_t b, int64_t h, int64_t blk)
{
    const int64_t nb = s->n / s->m;
    const size_t nq = (size_t)(nb * s->dk), nv = (size_t)(nb * s->dv);
    float *qs = malloc(nq * sizeof *qs), *ks = malloc(nq * sizeof *ks), *vs = malloc(nv * sizeof *vs);
    float *got = malloc(nv * sizeof *got), one = 1.0f;
    double *ref = malloc(nv * sizeof *ref);
    assert_true(qs && ks && vs && got && ref);
    for (int64_t p = 0; p < nb; ++p) {
        const int64_t t = blk * nb + p;
        mhla_convert(MHLA_DTYPE_F32, qs + p * s->dk, MHLA_DTYPE_F16, q + offset_of(s, b, t, h, s->dk), (size_t)s->dk);
        mhla_convert(MHLA_DTYPE_F32, ks + p * s->dk, MHLA_DTYPE_F16, k + offset_of(s, b, t, h, s->dk), (size_t)s->dk);
        mhla_convert(MHLA_DTYPE_F32, vs + p * s->dv, MHLA_DTYPE_F16, v + offset_of(s, b, t, h, s->dv), (size_t)s->dv);
        mhla_convert(MHLA_DTYPE_F32, got + p * s->dv, MHLA_DTYPE_F16, out + offset_of(s, b, t, h, s->dv),
                     (size_t)s->dv);
    }
    const mhla_config one_block = config_1d(1, 1, nb, 1, s->dk, s->dv);
    assert_int_equal(mhla_reference_forward(&one_block, qs, ks, vs, &one, ref), MHLA_OK);
    const int64_t first = offset_of(s, b, blk * nb, h, s->dv);
    const int64_t last = offset_of(s, b, blk * nb + nb - 1, h, s->dv) + s->dv - 1;
    char what[160];
    snprintf(what, sizeof what, "%s: b %lld h %lld block %lld (out elements %lld..%lld)", name, (long long)b,
             (long long)h, (long long)blk, (long long)first, (long long)last);
    const double e = expect_within(got, ref, nv, mhla_reference_tolerance(MHLA_DTYPE_F16, nb), what);
    printf("%s: max_rel_err %.3g\n", what, e);
    free(qs), free(ks), free(vs), free(got), free(ref);
}

/* One forward of shape s with the tuning `row` ("" for the device's own, or a GPU row: its tiled
 * summary and read-out, whose offsets are their own code): skipped when the device or the host cannot
 * hold it; blocks before, straddling-adjacent to and past element 2^31 against the reference; every
 * output written. */
static void run_big(mhla_context *ctx, const big_shape *s, const char *row, const int64_t checks[4][3])
{
    mhla_config cfg = config_1d(s->b, s->h, s->n, s->m, s->dk, s->dv);
    cfg.layout = s->layout, cfg.dtype = MHLA_DTYPE_F16;
    char name[64]; /* what the messages call this case */
    snprintf(name, sizeof name, "%s%s%s", s->name, *row ? ", " : "", row);
    const size_t nq = (size_t)(s->b * s->n * s->h * s->dk), nv = (size_t)(s->b * s->n * s->h * s->dv);
    assert_true((int64_t)nv > TWO31);
    const uint64_t bytes_v = nv * sizeof(uint16_t), bytes_q = nq * sizeof(uint16_t);
    const uint64_t need = 2 * bytes_v + 2 * bytes_q;
    cl_ulong max_alloc = 0, global = 0;
    cl_device_id dev = mhla_context_device(ctx);
    assert_int_equal(clGetDeviceInfo(dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, NULL),
                     CL_SUCCESS);
    assert_int_equal(clGetDeviceInfo(dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof global, &global, NULL), CL_SUCCESS);
    const uint64_t host = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGE_SIZE);
    if (max_alloc < bytes_v || global < need || host < need + ((uint64_t)4 << 30)) {
        printf("%s: skipped: v and out need %.2f GiB each and %.2f GiB in all; %s allows %.2f GiB per buffer "
               "and %.2f GiB in all; the host has %.2f GiB (4 GiB of it kept for the rest)\n",
               name, bytes_v / 1073741824.0, need / 1073741824.0, mhla_context_device_name(ctx),
               max_alloc / 1073741824.0, global / 1073741824.0, host / 1073741824.0);
        test_skip();
    }
    assert_int_equal(mhla_context_set_tuning(ctx, row), MHLA_OK);
    mhla_plan *plan = NULL;
    assert_int_equal(mhla_plan_create(ctx, &cfg, &plan), MHLA_OK);
    assert_int_equal(mhla_plan_tensor_bytes(plan, MHLA_TENSOR_V), bytes_v);
    char tiles[1024];
    assert_int_equal(mhla_plan_tuning(plan, tiles, sizeof tiles), MHLA_OK);
    printf("%s: %s\n", name, tiles);
    if (*row && !strstr(tiles, "tiled: summary")) /* the case runs the kernels it claims */
        fail_msg("%s: the plan is not the tiled forward: %s", name, tiles);
    hold_tensors(nq, nv);
    uint16_t *q = held.q, *k = held.k, *v = held.v, *out = held.out;
    for (size_t i = 0; i < nv; ++i)
        out[i] = 0x7FFF; /* NaN: an element no kernel writes stays NaN */
    const size_t mm = (size_t)(s->m * s->m);
    float *mix = calloc(mm, sizeof *mix);
    assert_non_null(mix);
    for (int64_t i = 0; i < s->m; ++i)
        mix[i * s->m + i] = 1.0f;
    cl_mem bq = host_buffer(ctx, q, bytes_q), bk = host_buffer(ctx, k, bytes_q), bv = host_buffer(ctx, v, bytes_v);
    cl_mem bo = host_buffer(ctx, out, bytes_v), bm = host_buffer(ctx, mix, mm * sizeof *mix);
    cl_event done = NULL;
    crash_guard(name);
    const mhla_status st = mhla_forward(plan, bq, bk, bv, bm, bo, 0, NULL, &done);
    const cl_int waited = st == MHLA_OK ? clWaitForEvents(1, &done) : CL_SUCCESS;
    crash_unguard(); /* before any assertion can leave the case */
    if (st != MHLA_OK)
        fail_msg("%s: mhla_forward: %s: %s", name, mhla_status_name(st), mhla_context_message(ctx));
    assert_int_equal(waited, CL_SUCCESS);
    clReleaseEvent(done);
    cl_int err = CL_SUCCESS;
    const uint16_t *o = clEnqueueMapBuffer(mhla_context_queue(ctx), bo, CL_TRUE, CL_MAP_READ, 0, bytes_v, 0, NULL,
                                           NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    /* Every element written: no NaN (nor infinity) left anywhere, the last ones included. */
    const size_t bad = first_nonfinite16(o, nv);
    if (bad < nv)
        fail_msg("%s: out[%zu] = 0x%04x is not finite: never written, or computed from a wrong read (of %zu "
                 "elements; 2^31 = %lld)", name, bad, o[bad], nv, (long long)TWO31);
    int64_t past = 0;
    for (int c = 0; c < 4; ++c) {
        check_block(s, name, q, k, v, o, checks[c][0], checks[c][1], checks[c][2]);
        const int64_t nb = s->n / s->m;
        past += offset_of(s, checks[c][0], checks[c][2] * nb, checks[c][1], s->dv) >= TWO31;
    }
    assert_true(past >= 2); /* the case checks what it claims: blocks whose every element is past 2^31 */
    clEnqueueUnmapMemObject(mhla_context_queue(ctx), bo, (void *)o, 0, NULL, NULL);
    clFinish(mhla_context_queue(ctx));
    clReleaseMemObject(bq), clReleaseMemObject(bk), clReleaseMemObject(bv), clReleaseMemObject(bo);
    clReleaseMemObject(bm);
    mhla_plan_destroy(plan);
    free(mix);
}

/* BNHD, B = 1, H = 2, Dv = 128, N = 65 * 2^17 in 260 blocks of 2^15 tokens: token * row stride
 * alone passes 2^31 (from block 256 on). */
static void bnhd_token_offsets(mhla_context *ctx, const char *row)
{
    const big_shape s = {"bnhd", MHLA_LAYOUT_BNHD, 1, 2, 65 << 17, 260, 4, 128};
    /* (b, h, block): the first; head 1 of block 255, whose last element is 2^31 - 1; head 0 of
     * block 256, past 2^31; head 1 of the last block, which holds the tensor's last element. */
    const int64_t checks[4][3] = {{0, 0, 0}, {0, 1, 255}, {0, 0, 256}, {0, 1, 259}};
    run_big(ctx, &s, row, checks);
}

/* BHND, B = 5, H = 13, Dv = 128, N = 2^18 in 8 blocks: the row base of b * H + h = 64 alone passes
 * 2^31. */
static void bhnd_row_offsets(mhla_context *ctx, const char *row)
{
    const big_shape s = {"bhnd", MHLA_LAYOUT_BHND, 5, 13, 1 << 18, 8, 4, 128};
    /* (b, h, block): the first; the end of row 63 (b 4, h 11), at 2^31 - 1; the first and the last
     * blocks of row 64 (b 4, h 12), past 2^31, the last holding the tensor's last element. */
    const int64_t checks[4][3] = {{0, 0, 0}, {4, 11, 7}, {4, 12, 0}, {4, 12, 7}};
    run_big(ctx, &s, row, checks);
}

/* Each shape with the device's own row; the token offsets with the GPU row too (the same tensors,
 * filled once): the tiled kernels multiply a token by its row stride themselves, while a row's base
 * comes from kernels/common.h's row_base() for every kernel, which the device's row checks (and a
 * second layout would build the tiled programs again: 13 s of this test's 70 cold). */
static void test_bnhd_token_offsets(void **state) { bnhd_token_offsets(*state, ""); }
static void test_bhnd_row_offsets(void **state) { bhnd_row_offsets(*state, ""); }
static void test_bnhd_token_offsets_gpu_row(void **state) { bnhd_token_offsets(*state, "row=gpu"); }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bnhd_token_offsets),
        cmocka_unit_test(test_bhnd_row_offsets),
        cmocka_unit_test(test_bnhd_token_offsets_gpu_row),
    };
    return run_group("large", tests, context_setup, large_teardown);
}
