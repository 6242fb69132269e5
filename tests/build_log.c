/* Builds every kernel specialization listed in a MHLA_DUMP_PROGRAMS file ("<kernel file>\t<options>"
 * lines, collected from the host's own requests by tests/specializations.py) on the device under
 * test (MHLA_DEVICE, as the library picks it) and fails if any build fails or leaves a warning in
 * CL_PROGRAM_BUILD_LOG. A warning is a defect here, not noise: PoCL prints "N warnings generated."
 * on stderr, which breaks every tool that reads stderr, and on CPUs the usual one says that a
 * vector wider than the device's registers changes the calling convention (slow code).
 *
 *     build_log KERNEL_DIR DUMP_FILE
 *
 * Builds from the kernel files with -I KERNEL_DIR (what the library embeds, with its headers
 * inlined), with the library's own "-cl-std=CL1.2" prefix. Run it with the implementation's
 * compile cache off (POCL_KERNEL_CACHE=0): a cached program comes back with an empty log. */
#include <mhla.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        size = ftell(f);
    if (size >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)size + 1)) != NULL) {
        if (fread(buf, 1, (size_t)size, f) != (size_t)size) {
            free(buf);
            buf = NULL;
        } else {
            buf[size] = '\0';
        }
    }
    fclose(f);
    return buf;
}

/* "warning" in any case: PoCL writes "warning:", Mesa "WARNING", NVIDIA "warning #". */
static int mentions_warning(const char *log)
{
    for (const char *p = log; *p; ++p) {
        static const char word[] = "warning";
        size_t i = 0;
        while (word[i] && tolower((unsigned char)p[i]) == word[i])
            ++i;
        if (!word[i])
            return 1;
    }
    return 0;
}

static int compare_lines(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: build_log KERNEL_DIR DUMP_FILE\n");
        return 2;
    }
    const char *dir = argv[1];
    char *dump = read_all(argv[2]);
    if (!dump) {
        fprintf(stderr, "build_log: cannot read %s\n", argv[2]);
        return 1;
    }
    /* Unique lines, sorted: the same specialization is requested by many tests. */
    size_t n = 0, cap = 64;
    char **lines = malloc(cap * sizeof *lines);
    for (char *line = strtok(dump, "\n"); line && lines; line = strtok(NULL, "\n")) {
        if (!strchr(line, '\t'))
            continue;
        if (n == cap) {
            char **grown = realloc(lines, 2 * cap * sizeof *lines);
            if (!grown)
                break;
            lines = grown, cap *= 2;
        }
        lines[n++] = line;
    }
    if (!lines) {
        fprintf(stderr, "build_log: out of memory\n");
        return 1;
    }
    qsort(lines, n, sizeof *lines, compare_lines);
    size_t unique = 0;
    for (size_t i = 0; i < n; ++i)
        if (unique == 0 || strcmp(lines[unique - 1], lines[i]) != 0)
            lines[unique++] = lines[i];

    mhla_context *ctx = NULL;
    if (mhla_context_create(NULL, &ctx) != MHLA_OK) {
        fprintf(stderr, "build_log: no device: %s\n", mhla_last_message());
        return 1;
    }
    cl_context cl = mhla_context_cl_context(ctx);
    cl_device_id dev = mhla_context_device(ctx);
    int failures = 0;
    size_t files = 0;
    char last_file[64] = "";
    const double t0 = now_s();
    for (size_t i = 0; i < unique; ++i) {
        char *tab = strchr(lines[i], '\t');
        *tab = '\0';
        const char *name = lines[i], *opts = tab + 1;
        if (strcmp(name, last_file) != 0) {
            ++files;
            snprintf(last_file, sizeof last_file, "%s", name);
        }
        char path[4096], options[2048];
        snprintf(path, sizeof path, "%s/%s.cl", dir, name);
        snprintf(options, sizeof options, "-cl-std=CL1.2 -I %s %s", dir, opts);
        char *src = read_all(path);
        if (!src) {
            fprintf(stderr, "build_log: cannot read %s\n", path);
            return 1;
        }
        cl_int err = CL_SUCCESS;
        const char *srcs[] = {src};
        cl_program prog = clCreateProgramWithSource(cl, 1, srcs, NULL, &err);
        cl_int build = err == CL_SUCCESS ? clBuildProgram(prog, 1, &dev, options, NULL, NULL) : err;
        size_t log_size = 0;
        char *log = NULL;
        if (prog && clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &log_size) == CL_SUCCESS &&
            (log = calloc(log_size + 1, 1)) != NULL)
            clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, log_size, log, NULL);
        /* Some implementations compile for the device only when kernels are created (Mesa). */
        cl_uint nkernels = 0;
        cl_kernel kernels[8];
        if (build == CL_SUCCESS)
            build = clCreateKernelsInProgram(prog, 8, kernels, &nkernels);
        for (cl_uint k = 0; k < nkernels; ++k)
            clReleaseKernel(kernels[k]);
        if (getenv("BUILD_LOG_VERBOSE"))
            fprintf(stderr, "built %s %s\n", name, opts);
        if (build != CL_SUCCESS || (log && mentions_warning(log))) {
            if (++failures <= 3)
                printf("FAIL %s.cl %s: %s\n%s\n", name, options, build != CL_SUCCESS ? "build failed" : "warning",
                       log ? log : "(no log)");
        }
        free(log);
        free(src);
        if (prog)
            clReleaseProgram(prog);
    }
    printf("build_log: %zu specializations of %zu kernel files built on %s in %.1f s: %d with a warning or error\n",
           unique, files, mhla_context_device_name(ctx), now_s() - t0, failures);
    mhla_context_destroy(ctx);
    free(lines);
    free(dump);
    return unique == 0 || failures ? 1 : 0;
}
