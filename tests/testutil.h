/* Helpers shared by the Check suites. */
#ifndef SIGSERVE_TESTUTIL_H
#define SIGSERVE_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* A fresh folder under $TMPDIR (or /tmp); the caller frees the string. */
char *tu_tmpdir (void);
/* Writes LEN bytes (or strlen when LEN is -1) to DIR/NAME; returns the malloc'd full path. */
char *tu_write_file (const char *dir, const char *name, const void *data, long len);
/* A tcp port on 127.0.0.1 that was free a moment ago. */
int tu_free_port (void);
/* Relative error ||a - ref|| / ||ref|| (ref in float64). */
double tu_rel_error (const float *a, const double *ref, size_t n);
/* The path of the build folder ($BUILD or "build"). */
const char *tu_build_dir (void);

/* Starts BUILD/sigserve --config CONFIG_PATH and waits until ENDPOINT answers a health request
 * with ready (up to TIMEOUT_MS). Returns the child's pid, or -1. */
pid_t tu_server_start (const char *config_path, const char *endpoint, int timeout_ms);
/* SIGTERM then wait; returns the exit status (or -1). */
int tu_server_stop (pid_t pid);

/* Packs an InferRequest into BUF (CAP bytes); the packed size, or 0 when it does not fit. */
size_t tu_pack_infer (uint8_t *buf, size_t cap, const char *model, const float *features, size_t n, uint32_t rows,
                      uint64_t request_id, uint32_t deadline_us);

/* Runs SUITE (Check's default fork mode unless CK_FORK says otherwise); the process exit code. */
struct Suite;
int tu_run_suite (struct Suite *suite);
/* Removes DIR and everything under it; 0 on success. */
int tu_remove_tree (const char *dir);

#endif
