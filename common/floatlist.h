/* Lists of floats in text, as sigclient --file and sigload --features read them: numbers
 * separated by whitespace or commas, '#' starting a comment to the end of the line. Each token
 * must be a whole number strtof reads ("1", "-2.5e-3", "nan", "inf"); a finite token out of float
 * range is an error. Non-finite values are accepted only when the caller asks (sigclient sends
 * them so a user can see STATUS_BAD_VALUE; sigload refuses them: every load request must run). */
#ifndef SIGSERVE_FLOATLIST_H
#define SIGSERVE_FLOATLIST_H

#include <stdbool.h>
#include <stddef.h>

/* Parses TEXT (NUL-terminated; NAME is used in messages). On success *OUT is a malloc'd array of
 * *COUNT >= 1 floats and 0 is returned; -1 with ERR ("NAME:LINE: not a number: 'x'") otherwise. */
int floatlist_parse (const char *text, const char *name, bool allow_nonfinite, float **out, size_t *count,
                     char *err, size_t errlen);
/* The same over the whole file PATH ("-": standard input). */
int floatlist_read (const char *path, bool allow_nonfinite, float **out, size_t *count, char *err, size_t errlen);

#endif
