/* Device enumeration and selection: the one list that "P:D", "N" and name specs index,
 * shared by mhla_context_create(), mhla_device_list() and `mhla info`. */
#include "core/core.h"
#include "core/lock.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static mhla_status devices_unlocked(mhla_device_ref **out, size_t *count)
{
    mhla_status st = MHLA_OK;
    cl_platform_id *plats = NULL;
    mhla_device_ref *refs = NULL;
    cl_uint nplat = 0;
    size_t n = 0, cap = 0;

    *out = NULL;
    *count = 0;
#ifdef MHLA_OPENCL_DLOPEN
    if (!mhla__opencl_loaded(NULL))
        return MHLA_OK; /* no library: no device (mhla__device_select says which were tried) */
#endif
    cl_int err = clGetPlatformIDs(0, NULL, &nplat);
    if (err == -1001 /* CL_PLATFORM_NOT_FOUND_KHR: no ICD installed */ || nplat == 0)
        return MHLA_OK;
    MHLA_CL_TRY(st, NULL, err, "clGetPlatformIDs");
    plats = mhla__calloc(nplat, sizeof *plats);
    MHLA_FAIL_IF(st, !plats, NULL, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory listing platforms");
    MHLA_CL_TRY(st, NULL, clGetPlatformIDs(nplat, plats, NULL), "clGetPlatformIDs");
    for (cl_uint p = 0; p < nplat; ++p) {
        cl_uint ndev = 0;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 0, NULL, &ndev) != CL_SUCCESS || ndev == 0)
            continue; /* a platform without devices is skipped, not an error */
        cl_device_id *devs = mhla__calloc(ndev, sizeof *devs);
        MHLA_FAIL_IF(st, !devs, NULL, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory listing devices");
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, ndev, devs, NULL) != CL_SUCCESS) {
            mhla__free(devs);
            continue;
        }
        if (n + ndev > cap) {
            size_t ncap = (n + ndev) * 2;
            mhla_device_ref *grown = mhla__realloc(refs, ncap * sizeof *refs);
            if (!grown) {
                mhla__free(devs);
                MHLA_FAIL_IF(st, 1, NULL, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory listing devices");
            }
            refs = grown;
            cap = ncap;
        }
        for (cl_uint d = 0; d < ndev; ++d) {
            refs[n].platform = plats[p];
            refs[n].device = devs[d];
            refs[n].platform_index = (int)p;
            refs[n].device_index = (int)d;
            refs[n].index = n;
            ++n;
        }
        mhla__free(devs);
    }
    *out = refs;
    *count = n;
    refs = NULL;
cleanup:
    mhla__free(refs);
    mhla__free(plats);
    return st;
}

/* Enumeration runs one thread at a time: the ICD loader and the drivers initialize on the first
 * call, and with two threads creating contexts at once one of them saw no device (test_threads
 * under ASan, with OCL_ICD_VENDORS naming PoCL's .icd file). */
static mhla_mutex devices_lock = MHLA_MUTEX_INITIALIZER;

mhla_status mhla__devices(mhla_device_ref **out, size_t *count)
{
    mhla__lock(&devices_lock);
    const mhla_status st = devices_unlocked(out, count);
    mhla__unlock(&devices_lock);
    return st;
}

static void info_string(cl_device_id dev, cl_device_info what, char *buf, size_t size)
{
    buf[0] = '\0';
    if (clGetDeviceInfo(dev, what, size, buf, NULL) != CL_SUCCESS)
        buf[0] = '\0';
    buf[size - 1] = '\0';
}

static void platform_string(cl_platform_id p, cl_platform_info what, char *buf, size_t size)
{
    buf[0] = '\0';
    if (clGetPlatformInfo(p, what, size, buf, NULL) != CL_SUCCESS)
        buf[0] = '\0';
    buf[size - 1] = '\0';
}

static cl_device_type device_type(cl_device_id dev)
{
    cl_device_type type = 0;
    clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    return type;
}

static int is_gpu(cl_device_id dev) { return (device_type(dev) & CL_DEVICE_TYPE_GPU) != 0; }

/* Why enumeration found nothing, naming where it looked: the library opened (or every one tried,
 * in a build that opens it at run time) and the folder the ICD loader reads drivers from. */
static void no_device_reason(char *buf, size_t size)
{
#ifdef MHLA_OPENCL_DLOPEN
    const char *tried = NULL;
    if (!mhla__opencl_loaded(&tried)) {
        snprintf(buf, size,
                 "no OpenCL library could be opened; tried %s. Set MHLA_OPENCL_LIBRARY to the driver's "
                 "library (an Android app also declares it: uses-native-library in its manifest)",
                 tried);
        return;
    }
    const char *lib = tried; /* "OpenCL from NAME" */
#else
    const char *lib = "the OpenCL ICD loader libmhla is linked with";
#endif
    const char *vendors = getenv("OCL_ICD_VENDORS");
    const char *files = getenv("OCL_ICD_FILENAMES");
    snprintf(buf, size,
             "%s found no platform with a device (an ICD loader reads its drivers' .icd files from %s%s%s%s; "
             "Debian: apt-get install pocl-opencl-icd for the CPU device, or install a GPU vendor's driver)",
             lib, vendors && *vendors ? "OCL_ICD_VENDORS=" : "/etc/OpenCL/vendors", vendors && *vendors ? vendors : "",
             files && *files ? " and OCL_ICD_FILENAMES=" : "", files && *files ? files : "");
}

size_t mhla__device_default(const mhla_device_ref *refs, size_t count)
{
    for (size_t i = 0; i < count; ++i)
        if (is_gpu(refs[i].device))
            return i;
    return 0;
}

static int contains_nocase(const char *hay, const char *needle)
{
    size_t hn = strlen(hay), nn = strlen(needle);
    for (size_t i = 0; i + nn <= hn; ++i) {
        size_t j = 0;
        while (j < nn && tolower((unsigned char)hay[i + j]) == tolower((unsigned char)needle[j]))
            ++j;
        if (j == nn)
            return 1;
    }
    return 0;
}

/* The device kind a spec names ("gpu", "cpu", "accelerator", any case), else 0. */
static cl_device_type device_kind(const char *spec)
{
    static const struct {
        const char *name;
        cl_device_type type;
    } kinds[] = {{"gpu", CL_DEVICE_TYPE_GPU}, {"cpu", CL_DEVICE_TYPE_CPU}, {"accelerator", CL_DEVICE_TYPE_ACCELERATOR}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; ++i)
        if (strlen(spec) == strlen(kinds[i].name) && contains_nocase(spec, kinds[i].name))
            return kinds[i].type;
    return 0;
}

static int parse_index(const char *s, const char *end, long *out)
{
    if (s == end)
        return 0;
    long v = 0;
    for (const char *c = s; c < end; ++c) {
        if (!isdigit((unsigned char)*c) || v > 1000000)
            return 0;
        v = v * 10 + (*c - '0');
    }
    *out = v;
    return 1;
}

void mhla__device_label(const mhla_device_ref *ref, char *buf, size_t size)
{
    char pname[128], dname[128];
    platform_string(ref->platform, CL_PLATFORM_NAME, pname, sizeof pname);
    info_string(ref->device, CL_DEVICE_NAME, dname, sizeof dname);
    snprintf(buf, size, "%s %s", pname, dname);
}

mhla_status mhla__device_select(const char *spec, mhla_device_ref *out)
{
    mhla_status st = MHLA_OK;
    mhla_device_ref *refs = NULL;
    size_t count = 0, pick = (size_t)-1;
    char list[2048] = "";
    const char *source = "device spec";

    if (!spec || !*spec) {
        spec = getenv("MHLA_DEVICE");
        source = "MHLA_DEVICE";
    }

    MHLA_FORWARD_IF_ERROR(st, mhla__devices(&refs, &count));
    if (count == 0) {
        char why[2300];
        no_device_reason(why, sizeof why);
        MHLA_FAIL_IF(st, 1, NULL, MHLA_ERR_DEVICE_NOT_FOUND, "no OpenCL device found: %s", why);
    }
    if (!spec || !*spec) {
        pick = mhla__device_default(refs, count);
    } else {
        const char *colon = strchr(spec, ':');
        long a = -1, b = -1;
        if (colon && parse_index(spec, colon, &a) && parse_index(colon + 1, spec + strlen(spec), &b)) {
            for (size_t i = 0; i < count; ++i)
                if (refs[i].platform_index == a && refs[i].device_index == b)
                    pick = i;
        } else if (!colon && parse_index(spec, spec + strlen(spec), &a)) {
            if ((size_t)a < count)
                pick = (size_t)a;
        } else {
            for (size_t i = 0; i < count && pick == (size_t)-1; ++i) {
                char label[300];
                mhla__device_label(&refs[i], label, sizeof label);
                if (contains_nocase(label, spec))
                    pick = i;
            }
            /* "gpu", "cpu", "accelerator" that no name contains: the first device of that kind. */
            const cl_device_type kind = device_kind(spec);
            for (size_t i = 0; i < count && pick == (size_t)-1 && kind; ++i)
                if (device_type(refs[i].device) & kind)
                    pick = i;
        }
    }
    if (pick == (size_t)-1) {
        size_t used = 0;
        for (size_t i = 0; i < count && used + 1 < sizeof list; ++i) {
            char label[300];
            mhla__device_label(&refs[i], label, sizeof label);
            int w = snprintf(list + used, sizeof list - used, "%s%zu (%d:%d) %s", i ? "; " : "", i,
                             refs[i].platform_index, refs[i].device_index, label);
            if (w < 0)
                break;
            used += (size_t)w;
        }
        MHLA_FAIL_IF(st, 1, NULL, MHLA_ERR_DEVICE_NOT_FOUND,
                     "no OpenCL device matches %s '%s'%s (use 'P:D', an index, a name substring, or gpu, cpu, "
                     "accelerator); devices: %s",
                     source, spec, device_kind(spec) ? ": no device is of that kind" : "", list);
    }
    *out = refs[pick];
cleanup:
    mhla__free(refs);
    return st;
}

static void fill_info(const mhla_device_ref *ref, size_t index, size_t dflt, mhla_device_info *info)
{
    memset(info, 0, sizeof *info);
    info->index = (int)index;
    info->platform_index = ref->platform_index;
    info->device_index = ref->device_index;
    info->is_default = index == dflt;
    info->is_gpu = is_gpu(ref->device);
    platform_string(ref->platform, CL_PLATFORM_NAME, info->platform_name, sizeof info->platform_name);
    platform_string(ref->platform, CL_PLATFORM_VERSION, info->platform_version,
                    sizeof info->platform_version);
    info_string(ref->device, CL_DEVICE_NAME, info->device_name, sizeof info->device_name);
    info_string(ref->device, CL_DEVICE_VENDOR, info->vendor, sizeof info->vendor);
    info_string(ref->device, CL_DEVICE_VERSION, info->device_version, sizeof info->device_version);
    info_string(ref->device, CL_DRIVER_VERSION, info->driver_version, sizeof info->driver_version);
    info_string(ref->device, CL_DEVICE_OPENCL_C_VERSION, info->opencl_c_version,
                sizeof info->opencl_c_version);
    cl_ulong u = 0;
    if (clGetDeviceInfo(ref->device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof u, &u, NULL) == CL_SUCCESS)
        info->global_mem_bytes = u;
    if (clGetDeviceInfo(ref->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof u, &u, NULL) == CL_SUCCESS)
        info->max_alloc_bytes = u;
    if (clGetDeviceInfo(ref->device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof u, &u, NULL) == CL_SUCCESS)
        info->local_mem_bytes = u;
    size_t wg = 0;
    if (clGetDeviceInfo(ref->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof wg, &wg, NULL) == CL_SUCCESS)
        info->max_work_group_size = wg;
    cl_uint v = 0;
    if (clGetDeviceInfo(ref->device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof v, &v, NULL) == CL_SUCCESS)
        info->compute_units = v;
    if (clGetDeviceInfo(ref->device, CL_DEVICE_MAX_CLOCK_FREQUENCY, sizeof v, &v, NULL) == CL_SUCCESS)
        info->max_clock_mhz = v;
    info->has_fp16 = mhla__device_has_extension(ref->device, "cl_khr_fp16");
    info->has_fp64 = mhla__device_has_extension(ref->device, "cl_khr_fp64");
    info->float_width = mhla__device_float_width(ref->device);
}

int mhla__device_float_width(cl_device_id dev)
{
    cl_uint native = 0, preferred = 0;
    if (clGetDeviceInfo(dev, CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT, sizeof native, &native, NULL) != CL_SUCCESS)
        native = 0;
    if (clGetDeviceInfo(dev, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT, sizeof preferred, &preferred, NULL) != CL_SUCCESS)
        preferred = 0;
    const cl_uint w = native > preferred ? native : preferred;
    return w >= 1 ? (int)w : 1;
}

int mhla__device_has_extension(cl_device_id dev, const char *ext)
{
    size_t size = 0;
    if (clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, 0, NULL, &size) != CL_SUCCESS || size == 0)
        return 0;
    char *exts = mhla__malloc(size + 1);
    if (!exts)
        return 0;
    int found = 0;
    if (clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, size, exts, NULL) == CL_SUCCESS) {
        exts[size] = '\0';
        size_t n = strlen(ext);
        for (char *p = strstr(exts, ext); p && !found; p = strstr(p + 1, ext))
            found = (p == exts || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0');
    }
    mhla__free(exts);
    return found;
}

mhla_status mhla_device_list(mhla_device_info *infos, size_t capacity, size_t *count)
{
    mhla_status st = MHLA_OK;
    mhla_device_ref *refs = NULL;
    size_t n = 0;

    MHLA_FAIL_IF(st, !count, NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_device_list: count is NULL");
    MHLA_FAIL_IF(st, capacity > 0 && !infos, NULL, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_device_list: infos is NULL with capacity %zu", capacity);
    MHLA_FORWARD_IF_ERROR(st, mhla__devices(&refs, &n));
    size_t dflt = mhla__device_default(refs, n);
    for (size_t i = 0; i < n && i < capacity; ++i)
        fill_info(&refs[i], i, dflt, &infos[i]);
    *count = n;
cleanup:
    mhla__free(refs);
    return st;
}

mhla_status mhla_device_selected(const char *device_spec, size_t *index)
{
    mhla_status st = MHLA_OK;
    mhla_device_ref ref;

    MHLA_FAIL_IF(st, !index, NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_device_selected: index is NULL");
    MHLA_FORWARD_IF_ERROR(st, mhla__device_select(device_spec, &ref));
    *index = ref.index;
cleanup:
    return st;
}
