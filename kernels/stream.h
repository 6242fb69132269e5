/* Streaming stores and row prefetch of the read-out kernels on CPU rows (output.cl,
 * backward_readout.cl). The includer defines STREAM_NT (its -D switch, 1 = streaming stores) and
 * STREAM_PF (its -D count: input rows prefetched that many token groups ahead, 0 = none) first.
 *
 * Streaming stores (float storage): a row written once and not read again by the kernel skips the
 * read a normal store makes of its line first (write-allocate). They write whole vectors, which
 * must lie on their own size. Every vector starts a multiple of its width into its buffer, so the
 * buffer's own address decides, checked by NT_OK rather than by the device's base alignment: a
 * buffer made with CL_MEM_USE_HOST_PTR starts wherever the caller's memory does (PoCL uses that
 * memory as it is; a misaligned one made the streaming store fault). x86 streaming stores are
 * weakly ordered: NT_FENCE drains them before whatever signals the kernel's end (once per
 * work-item, as work-items may run on any thread).
 *
 * Prefetch (clang's builtin, an instruction only on PoCL's CPU device: the host passes 0 elsewhere):
 * each work-item's first loads of its own rows otherwise meet the memory latency with nothing else
 * in flight, and [B,N,H,D] rows lie H*D apart, a stride the hardware prefetchers do not follow.
 * 1D blocks only, whose tokens are consecutive, and never past the block. */
#ifndef MHLA_KERNELS_STREAM_H
#define MHLA_KERNELS_STREAM_H

#if STREAM_NT && DTYPE == 0 && defined(__clang__)
/* 1 when buf lies on the size of a W-float vector. */
#define NT_OK(buf, W) (((uintptr_t)(buf) & (uintptr_t)((W) * sizeof(float) - 1)) == 0)
/* STOREN(W, x, o, p), streaming when nt (NT_OK of p's buffer). */
#define NT_STOREN(W, x, o, p, nt)                                                                   \
    do {                                                                                            \
        if (nt)                                                                                     \
            __builtin_nontemporal_store((x), (global VEC(W) *)(p) + (o));                            \
        else                                                                                        \
            STOREN(W, (x), (o), (p));                                                               \
    } while (0)
#else
#define NT_OK(buf, W) 0
#define NT_STOREN(W, x, o, p, nt)                                                                   \
    do {                                                                                            \
        (void)(nt);                                                                                 \
        STOREN(W, (x), (o), (p));                                                                   \
    } while (0)
#endif

#if STREAM_NT && DTYPE == 0 && defined(__clang__) && defined(__SSE__)
#define NT_FENCE() __builtin_ia32_sfence()
#else
#define NT_FENCE() ((void)0)
#endif

/* The rt rows of n elements `stride` apart that start STREAM_PF * rt rows after `base` (the rows of
 * the token group STREAM_PF groups ahead of the one starting at position p0), when they lie in the
 * block of grid g. */
#if STREAM_PF > 0 && defined(__clang__)
#define PREFETCH_AHEAD(g, p0, rt, base, stride, n)                                                  \
    do {                                                                                            \
        if ((g).run == (g).nb && (p0) + (STREAM_PF + 1) * (rt) <= (g).nb)                           \
            PREFETCH_LINES((base) + (long)STREAM_PF * (rt) * (stride), (stride), (rt), (n));        \
    } while (0)
#else
#define PREFETCH_AHEAD(g, p0, rt, base, stride, n) ((void)0)
#endif

#endif /* MHLA_KERNELS_STREAM_H */
