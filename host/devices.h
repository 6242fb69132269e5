/* Device enumeration shared by context creation, mhla_device_list() and the CLI's `info`. */
#ifndef MHLA_DEVICES_H
#define MHLA_DEVICES_H

#include "internal.h"

typedef struct mhla_device_ref {
    cl_platform_id platform;
    cl_device_id device;
    int platform_index;
    int device_index;
    size_t index; /* position in the list of all devices */
} mhla_device_ref;

/* Every device of every platform, in spec order; *out is malloc'd (NULL when there are none). */
mhla_status mhla__devices(mhla_device_ref **out, size_t *count);
/* Index of the default device: the first GPU, else the first device. */
size_t mhla__device_default(const mhla_device_ref *refs, size_t count);
/* Resolves a device spec ("P:D", "N", a name substring); NULL or "" reads MHLA_DEVICE, and when
 * that is unset or empty takes the default. The message names where the spec came from. */
mhla_status mhla__device_select(const char *spec, mhla_device_ref *out);
/* "<platform name> <device name>". */
void mhla__device_label(const mhla_device_ref *ref, char *buf, size_t size);
/* Floats per SIMD register as the device reports them (mhla_device_info.float_width), >= 1. */
int mhla__device_float_width(cl_device_id dev);
/* Whether the device lists `ext` among its extensions. */
int mhla__device_has_extension(cl_device_id dev, const char *ext);

#endif /* MHLA_DEVICES_H */
