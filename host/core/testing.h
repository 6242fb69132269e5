/* Test-only hooks of libmhla: fault injection and a count of live host allocations.
 * Not installed and not part of the API (include/mhla.h): only the tests and the library's own
 * fault points (core/alloc.c, core/blas.c) include this header. The hooks are exported so that
 * tests reach them in the shared library they test; unarmed they cost one thread-local load per
 * host allocation, device buffer or build and change nothing. */
#ifndef MHLA_TESTING_H
#define MHLA_TESTING_H

#include "mhla.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mhla__fault_kind {
    MHLA__FAULT_ALLOC = 0,  /* the library's host allocations (malloc, calloc, realloc) */
    MHLA__FAULT_BUFFER = 1, /* the library's clCreateBuffer calls (CL_MEM_OBJECT_ALLOCATION_FAILURE) */
    /* the library's builds of a program from source: CL_BUILD_PROGRAM_FAILURE with an empty build
     * log, the driver not called (as PoCL fails a build whose compile cache entry another process
     * replaced meanwhile) */
    MHLA__FAULT_BUILD = 2,
    /* the library's CLBlast GEMM calls: CLBlastOpenCLBuildProgramFailure, CLBlast not called (the same
     * race in the program CLBlast builds for the GEMM) */
    MHLA__FAULT_BLAS_BUILD = 3,
} mhla__fault_kind;

/* Makes the k-th call of `kind` made by this thread from now on fail (k >= 1); k = 0 disarms.
 * Only the calling thread's calls count, so other threads are never disturbed. */
MHLA_API void mhla__fault_arm(mhla__fault_kind kind, long k);
/* The same, and the times - 1 calls of `kind` after the k-th fail too (times >= 1). */
MHLA_API void mhla__fault_arm_times(mhla__fault_kind kind, long k, long times);
/* 1 when the armed fault of `kind` has fired on this thread since it was armed. */
MHLA_API int mhla__fault_fired(mhla__fault_kind kind);
/* Host allocations of the library not yet freed, over all threads. */
MHLA_API long mhla__live_allocations(void);

#ifdef __cplusplus
}
#endif
#endif /* MHLA_TESTING_H */
