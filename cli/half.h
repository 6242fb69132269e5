/* IEEE 754 binary16 <-> binary32 conversion on the host (the .npy float16 files, and the f16
 * storage of issue 7): exact widening, and narrowing rounded to nearest, ties to even. */
#ifndef MHLA_CLI_HALF_H
#define MHLA_CLI_HALF_H

#include <stddef.h>
#include <stdint.h>

/* The float16 with bit pattern `h` as a float: exact for every value (subnormals, infinities;
 * a NaN stays a NaN with its sign and the top 10 bits of its payload). */
float half_to_float(uint16_t h);

/* `f` rounded to the nearest float16, ties to even: values beyond the largest finite float16
 * (65504) round to infinity from 65520 on, tiny ones to subnormals or signed zero; a NaN stays a
 * quiet NaN with its sign and the top bits of its payload. */
uint16_t float_to_half(float f);

/* The same over arrays (dst and src must not overlap). */
void half_to_float_array(float *dst, const uint16_t *src, size_t n);
void float_to_half_array(uint16_t *dst, const float *src, size_t n);

#endif /* MHLA_CLI_HALF_H */
