/* Scratch folders: see scratch.h. */
#include "scratch.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int scratch_make(char *path, size_t size, const char *prefix)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(path, size, "%s/%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", prefix);
    return mkdtemp(path) ? 0 : -1;
}

void scratch_remove(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *e;
    if (!d) { /* a file (or nothing): scratch.h promises it is gone too */
        unlink(path);
        return;
    }
    char sub[1024];
    while (d && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        struct stat sb;
        if (lstat(sub, &sb) == 0 && S_ISDIR(sb.st_mode))
            scratch_remove(sub);
        else
            unlink(sub);
    }
    if (d)
        closedir(d);
    rmdir(path);
}

const char *scratch_path(const char *dir, const char *name)
{
    static char path[4][1024];
    static int next;
    char *p = path[next++ % 4];
    snprintf(p, sizeof path[0], "%s/%s", dir, name);
    return p;
}

static int by_name(const void *a, const void *b) { return strcmp(a, b); }

const char *scratch_listing(const char *dir)
{
    static char out[8192];
    static char names[64][256];
    size_t n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL && n < 64)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            snprintf(names[n++], sizeof names[0], "%s", e->d_name);
    if (d)
        closedir(d);
    qsort(names, n, sizeof names[0], by_name);
    out[0] = '\0';
    for (size_t i = 0; i < n; ++i) {
        strncat(out, i ? " " : "", sizeof out - strlen(out) - 1);
        strncat(out, names[i], sizeof out - strlen(out) - 1);
    }
    return out;
}
