/* Every host allocation, device buffer and build from source of the library goes through these
 * wrappers, so that the tests can count what is live and make the k-th one fail (core/testing.h),
 * and fill what the library allocates and frees (MHLA_MALLOC_PERTURB, below). */
#include "core/core.h"
#include "core/testing.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__GLIBC__)
#include <malloc.h> /* malloc_usable_size */
#endif

static atomic_long live_allocations;
#define FAULT_KINDS 4
/* Per thread: calls of each kind left before the armed fault (0: unarmed), how many calls fail from
 * there, and whether one did. */
static _Thread_local long fault_countdown[FAULT_KINDS], fault_times[FAULT_KINDS];
static _Thread_local int fault_hit[FAULT_KINDS];

static int known_kind(mhla__fault_kind kind) { return (int)kind >= 0 && (int)kind < FAULT_KINDS; }

void mhla__fault_arm_times(mhla__fault_kind kind, long k, long times)
{
    if (!known_kind(kind))
        return;
    fault_countdown[kind] = k > 0 ? k : 0;
    fault_times[kind] = times > 0 ? times : 1;
    fault_hit[kind] = 0;
}

void mhla__fault_arm(mhla__fault_kind kind, long k) { mhla__fault_arm_times(kind, k, 1); }

int mhla__fault_fired(mhla__fault_kind kind) { return known_kind(kind) ? fault_hit[kind] : 0; }

long mhla__live_allocations(void) { return atomic_load(&live_allocations); }

/* 1 when this call is the armed one (it then fails). */
int mhla__fault_inject(int kind)
{
    if (!known_kind((mhla__fault_kind)kind) || fault_countdown[kind] == 0 || --fault_countdown[kind] != 0)
        return 0;
    if (--fault_times[kind] > 0) /* the next call fails too */
        fault_countdown[kind] = 1;
    fault_hit[kind] = 1;
    return 1;
}

static void *counted(void *p)
{
    if (p)
        atomic_fetch_add_explicit(&live_allocations, 1, memory_order_relaxed);
    return p;
}

/* MHLA_MALLOC_PERTURB=B (1 to 255): glibc's MALLOC_PERTURB_ for the library's own blocks alone. A
 * block malloc or realloc hands out is filled with B ^ 0xff where it is new, one freed with B first
 * (where the C library says how long it is: glibc), so that host code reading memory it never wrote,
 * or wrote before freeing it, sees garbage rather than a lucky zero. The tests set it with
 * glibc's own turned off: glibc's fills every block of the process, and in one that compiles
 * kernels those are mostly LLVM's, millions of them (a third of a cold test's time on PoCL).
 * Read once; 0, unset or out of range: nothing filled. */
static int perturb_byte(void)
{
    static atomic_int byte = -1; /* -1: not read yet */
    int b = atomic_load_explicit(&byte, memory_order_relaxed);
    if (b < 0) {
        const char *env = getenv("MHLA_MALLOC_PERTURB");
        char *end = NULL;
        const long v = env ? strtol(env, &end, 0) : 0;
        b = env && end != env && *end == 0 && v > 0 && v < 256 ? (int)v : 0;
        atomic_store_explicit(&byte, b, memory_order_relaxed);
    }
    return b;
}

/* The bytes of p usable before it is freed or grown: 0 where the C library cannot say. */
static size_t usable_size(void *p)
{
#if defined(__GLIBC__)
    return p ? malloc_usable_size(p) : 0;
#else
    (void)p;
    return 0;
#endif
}

/* p's bytes from `from` to its end (size, or where the C library says its block ends) filled as new
 * ones; p may be NULL (a failed allocation). */
static void *perturbed(void *p, size_t from, size_t size)
{
    const int b = perturb_byte();
    if (!p || !b)
        return p;
    const size_t usable = usable_size(p);
    const size_t to = usable > size ? usable : size;
    if (to > from)
        memset((char *)p + from, b ^ 0xff, to - from);
    return p;
}

void *mhla__malloc(size_t size)
{
    return mhla__fault_inject(MHLA__FAULT_ALLOC) ? NULL : counted(perturbed(malloc(size), 0, size));
}

void *mhla__calloc(size_t count, size_t size)
{
    return mhla__fault_inject(MHLA__FAULT_ALLOC) ? NULL : counted(calloc(count, size));
}

void *mhla__realloc(void *p, size_t size)
{
    if (mhla__fault_inject(MHLA__FAULT_ALLOC))
        return NULL;
    if (!p)
        return counted(perturbed(realloc(NULL, size), 0, size));
    /* p's block up to its end is the caller's (filled when it was new); what realloc adds is new.
     * Size 0 would free p (or not): keep p live either way. */
    const size_t old = perturb_byte() ? usable_size(p) : 0;
    return perturbed(realloc(p, size ? size : 1), old, size);
}

void mhla__free(void *p)
{
    if (!p)
        return;
    atomic_fetch_sub_explicit(&live_allocations, 1, memory_order_relaxed);
    /* Through a volatile pointer: a compiler drops a plain memset right before free() as a dead store. */
    static void *(*const volatile fill)(void *, int, size_t) = memset;
    const int b = perturb_byte();
    if (b)
        fill(p, b, usable_size(p));
    free(p);
}

cl_mem mhla__cl_create_buffer(cl_context context, cl_mem_flags flags, size_t size, void *host_ptr, cl_int *err)
{
    if (mhla__fault_inject(MHLA__FAULT_BUFFER)) {
        if (err)
            *err = CL_MEM_OBJECT_ALLOCATION_FAILURE;
        return NULL;
    }
    return clCreateBuffer(context, flags, size, host_ptr, err);
}

cl_int mhla__cl_build_program(cl_program program, cl_device_id device, const char *options)
{
    if (mhla__fault_inject(MHLA__FAULT_BUILD)) /* never built: its build log stays empty */
        return CL_BUILD_PROGRAM_FAILURE;
    return clBuildProgram(program, 1, &device, options, NULL, NULL);
}
