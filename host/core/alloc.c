/* Every host allocation, device buffer and build from source of the library goes through these
 * wrappers, so that the tests can count what is live and make the k-th one fail (core/testing.h). */
#include "core/core.h"
#include "core/testing.h"

#include <stdatomic.h>
#include <stdlib.h>

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

void *mhla__malloc(size_t size) { return mhla__fault_inject(MHLA__FAULT_ALLOC) ? NULL : counted(malloc(size)); }

void *mhla__calloc(size_t count, size_t size)
{
    return mhla__fault_inject(MHLA__FAULT_ALLOC) ? NULL : counted(calloc(count, size));
}

void *mhla__realloc(void *p, size_t size)
{
    if (mhla__fault_inject(MHLA__FAULT_ALLOC))
        return NULL;
    if (!p)
        return counted(realloc(NULL, size));
    return realloc(p, size ? size : 1); /* size 0 would free p (or not): keep p live either way */
}

void mhla__free(void *p)
{
    if (!p)
        return;
    atomic_fetch_sub_explicit(&live_allocations, 1, memory_order_relaxed);
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
