/* Every host allocation and device buffer of the library goes through these wrappers, so that the
 * tests can count what is live and make the k-th one fail (core/testing.h). */
#include "core/core.h"
#include "core/testing.h"

#include <stdatomic.h>
#include <stdlib.h>

static atomic_long live_allocations;
/* Per thread: calls of each kind left before the armed fault (0: unarmed), and whether it fired. */
static _Thread_local long fault_countdown[2];
static _Thread_local int fault_hit[2];

void mhla__fault_arm(mhla__fault_kind kind, long k)
{
    if (kind != MHLA__FAULT_ALLOC && kind != MHLA__FAULT_BUFFER)
        return;
    fault_countdown[kind] = k > 0 ? k : 0;
    fault_hit[kind] = 0;
}

int mhla__fault_fired(mhla__fault_kind kind)
{
    return (kind == MHLA__FAULT_ALLOC || kind == MHLA__FAULT_BUFFER) ? fault_hit[kind] : 0;
}

long mhla__live_allocations(void) { return atomic_load(&live_allocations); }

/* 1 when this call is the armed one (it then fails). */
static int inject(mhla__fault_kind kind)
{
    if (fault_countdown[kind] == 0 || --fault_countdown[kind] != 0)
        return 0;
    fault_hit[kind] = 1;
    return 1;
}

static void *counted(void *p)
{
    if (p)
        atomic_fetch_add_explicit(&live_allocations, 1, memory_order_relaxed);
    return p;
}

void *mhla__malloc(size_t size) { return inject(MHLA__FAULT_ALLOC) ? NULL : counted(malloc(size)); }

void *mhla__calloc(size_t count, size_t size)
{
    return inject(MHLA__FAULT_ALLOC) ? NULL : counted(calloc(count, size));
}

void *mhla__realloc(void *p, size_t size)
{
    if (inject(MHLA__FAULT_ALLOC))
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
    if (inject(MHLA__FAULT_BUFFER)) {
        if (err)
            *err = CL_MEM_OBJECT_ALLOCATION_FAILURE;
        return NULL;
    }
    return clCreateBuffer(context, flags, size, host_ptr, err);
}
