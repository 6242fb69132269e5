/* Test-only hooks of libmhla: fault injection and a count of live host allocations.
 * Not installed and not part of the API (include/mhla.h): only the tests include this header.
 * The hooks are exported so that tests reach them in the shared library they test; unarmed they
 * cost one thread-local load per host allocation or device buffer and change nothing. */
#ifndef MHLA_TESTING_H
#define MHLA_TESTING_H

#include "mhla.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mhla__fault_kind {
    MHLA__FAULT_ALLOC = 0,  /* the library's host allocations (malloc, calloc, realloc) */
    MHLA__FAULT_BUFFER = 1, /* the library's clCreateBuffer calls (CL_MEM_OBJECT_ALLOCATION_FAILURE) */
} mhla__fault_kind;

/* Makes the k-th call of `kind` made by this thread from now on fail (k >= 1); k = 0 disarms.
 * Only the calling thread's calls count, so other threads are never disturbed. */
MHLA_API void mhla__fault_arm(mhla__fault_kind kind, long k);
/* 1 when the armed fault of `kind` has fired on this thread since it was armed. */
MHLA_API int mhla__fault_fired(mhla__fault_kind kind);
/* Host allocations of the library not yet freed, over all threads. */
MHLA_API long mhla__live_allocations(void);

#ifdef __cplusplus
}
#endif
#endif /* MHLA_TESTING_H */
