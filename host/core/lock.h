/* A mutex for what threads sharing one context share (its program list, tuning database and
 * failure message): pthreads, or an SRW lock on Windows. */
#ifndef MHLA_LOCK_H
#define MHLA_LOCK_H

#if defined(_WIN32)
#include <windows.h>
typedef SRWLOCK mhla_mutex;
#define MHLA_MUTEX_INITIALIZER SRWLOCK_INIT /* for a static mutex */
static inline void mhla__mutex_init(mhla_mutex *m) { InitializeSRWLock(m); }
static inline void mhla__mutex_destroy(mhla_mutex *m) { (void)m; }
static inline void mhla__lock(mhla_mutex *m) { AcquireSRWLockExclusive(m); }
static inline void mhla__unlock(mhla_mutex *m) { ReleaseSRWLockExclusive(m); }
#else
#include <pthread.h>
typedef pthread_mutex_t mhla_mutex;
#define MHLA_MUTEX_INITIALIZER PTHREAD_MUTEX_INITIALIZER /* for a static mutex */
static inline void mhla__mutex_init(mhla_mutex *m) { pthread_mutex_init(m, NULL); }
static inline void mhla__mutex_destroy(mhla_mutex *m) { pthread_mutex_destroy(m); }
static inline void mhla__lock(mhla_mutex *m) { pthread_mutex_lock(m); }
static inline void mhla__unlock(mhla_mutex *m) { pthread_mutex_unlock(m); }
#endif

#endif /* MHLA_LOCK_H */
