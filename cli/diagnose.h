/* `mhla diagnose`'s outputs beside the table: the SVG plot (diagnose_plot.c). */
#ifndef MHLA_CLI_DIAGNOSE_H
#define MHLA_CLI_DIAGNOSE_H

#include <mhla_reference.h>

#include <stdio.h>

/* The mean over heads of one kind's rank and entropy. */
void diagnose_mean(const mhla_diagnose_result *r, int kind, double *rank, double *entropy);

/* Writes the plot to f; 0, or -1 when a write failed. */
int diagnose_svg(FILE *f, const mhla_diagnose_result *r, const char *title);

#endif /* MHLA_CLI_DIAGNOSE_H */
