/* Scratch folders for the tests that write files (test_npy, test_cli): made under $TMPDIR or /tmp,
 * listed with hidden names too (temporary outputs are hidden), removed with all they hold. */
#ifndef MHLA_TEST_SCRATCH_H
#define MHLA_TEST_SCRATCH_H

#include <stddef.h>

/* Creates "<$TMPDIR or /tmp>/<prefix>-XXXXXX" into path; 0 on success, -1 on failure. */
int scratch_make(char *path, size_t size, const char *prefix);

/* Removes path and everything under it. */
void scratch_remove(const char *path);

/* "<dir>/<name>", in one of a few rotating static buffers (several may be used in one call). */
const char *scratch_path(const char *dir, const char *name);

/* The names in dir (not "." and ".."), sorted and joined by single spaces; a static buffer. */
const char *scratch_listing(const char *dir);

#endif /* MHLA_TEST_SCRATCH_H */
