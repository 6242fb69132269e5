/* libFuzzer harness: the tuning override parser (host/tune/tuning_rows.c, mhla__tuning_apply), which reads
 * MHLA_TUNING, mhla_context_set_tuning() and the tuning database's entries, on arbitrary text.
 * It must refuse with a message or leave every field within its documented range. */
#include "tune/tune.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *spec = malloc(size + 1);
    if (!spec)
        return 0;
    memcpy(spec, data, size);
    spec[size] = '\0';
    mhla_tuning t;
    memset(&t, 0, sizeof t);
    const mhla_status st = mhla__tuning_apply(NULL, "MHLA_TUNING", spec, &t);
    if (st != MHLA_OK) {
        if (st != MHLA_ERR_INVALID_ARGUMENT || !mhla_last_message()[0])
            abort();
    } else {
        /* Every field of mhla_tuning before `origin` is an int the parser bounds to 0..2^20. */
        const int *f = (const int *)&t;
        for (size_t i = 0; i < offsetof(mhla_tuning, origin) / sizeof(int); ++i)
            if (f[i] < 0 || f[i] > 1 << 20)
                abort();
        if (!memchr(t.origin, '\0', sizeof t.origin))
            abort();
    }
    free(spec);
    return 0;
}
