/* Helpers shared by the Check suites. */
#ifndef SIGSERVE_TESTUTIL_H
#define SIGSERVE_TESTUTIL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* A fresh folder, inside the suite's folder while tu_run_suite runs (else under $TMPDIR, or /tmp);
 * the caller frees the string. */
char *tu_tmpdir (void);
/* Whether each test runs in a process of its own (Check's default; CK_FORK=no runs them in one).
 * Then a checked teardown runs only after the test passed: the place to remove a test's folder
 * while keeping a failed test's. */
bool tu_forked (void);
/* Writes LEN bytes (or strlen when LEN is -1) to DIR/NAME; returns the malloc'd full path. */
char *tu_write_file (const char *dir, const char *name, const void *data, long len);
/* Copies the file FROM to TO with MODE: 0, or -1. */
int tu_copy_file (const char *from, const char *to, mode_t mode);
/* A tcp port on 127.0.0.1 that was free a moment ago. */
int tu_free_port (void);
/* Relative error ||a - ref|| / ||ref|| (ref in float64). */
double tu_rel_error (const float *a, const double *ref, size_t n);
/* The path of the build folder ($BUILD or "build"). */
const char *tu_build_dir (void);

/* Starts BUILD/sigserve --config CONFIG_PATH and waits until ENDPOINT answers a health request
 * with ready (up to TIMEOUT_MS). Returns the child's pid, or -1. */
pid_t tu_server_start (const char *config_path, const char *endpoint, int timeout_ms);
/* The same with the server's stderr written to LOG_PATH, at LOG_LEVEL ("info" for the lines a
 * test reads; tu_server_start uses "warn"). */
pid_t tu_server_start_logged (const char *config_path, const char *endpoint, int timeout_ms, const char *log_path,
                              const char *log_level);
/* SIGTERM then wait; returns the exit status (or -1). */
int tu_server_stop (pid_t pid);

/* A DEALER of CTX connected to ENDPOINT (asserted): linger 0, receives time out after TIMEOUT_MS, no
 * send high-water mark (the suites pipeline many requests). */
void *tu_dealer (void *ctx, const char *endpoint, int timeout_ms);

/* The CPUs thread NAME of process PID may run on ("0", "0-1"), from /proc, into OUT (CAP bytes); -1
 * when there is no such thread. */
int tu_thread_cpus (pid_t pid, const char *name, char *out, size_t cap);

/* A fake sigserve's loop, for the client suites' servers of their own: binds a ROUTER at ENDPOINT
 * (asserted), sets *BOUND, then until *STOP hands each request that decodes to ON_REQUEST (with ARG,
 * and the sender's routing id IDENTITY: it answers on ROUTER, or not), polling every 20 ms. The
 * body of the fake's thread. */
struct zmq_msg_t;
struct Sigserve__V1__Request;
typedef void tu_fake_fn (void *arg, void *router, struct zmq_msg_t *identity, struct Sigserve__V1__Request *req);
void tu_fake_serve (const char *endpoint, atomic_bool *bound, atomic_bool *stop, tu_fake_fn *on_request, void *arg);

/* Packs an InferRequest into BUF (CAP bytes); the packed size, or 0 when it does not fit. */
size_t tu_pack_infer (uint8_t *buf, size_t cap, const char *model, const float *features, size_t n, uint32_t rows,
                      uint64_t request_id, uint32_t deadline_us);

/* The server the client and integration suites talk to over tcp loopback, on two endpoints:
 *   tick_mlp  the demo weights (512 -> 256 -> 64 -> 1), max_rows 8, backend TICK_BACKEND
 *   odd       33 -> 31 -> 3 (tanh, none), version "7b", max_rows 7, cpu_kernel ODD_KERNEL, written here
 *   slow      (with SLOW) 1024 -> 1024 -> 1024 (relu, none), max_rows 15: a few ms a request on one core;
 *             with SLOW the folder also holds slower.safetensors (1024 -> 4096 -> 1024, tensors a.*
 *             and b.* like slow's: 4x the work) for EXTRA_MODELS to use
 * plus EXTRA_MODELS (JSON objects, comma-first, appended to the list). Weights are loaded with the
 * config (TICK, ODD) for the float64 reference. Set up once per suite (an unchecked fixture). */
#include "base/config.h"
#include "weights/weights.h"
typedef struct {
    const char *tick_backend;       /* "cpu" or "auto" */
    const char *odd_kernel;         /* "loop" or "blas" */
    bool slow;
    uint32_t queue_depth;           /* tick_mlp's and odd's (0: the default) */
    const char *extra_models;       /* NULL or ", { ... }" */
    bool no_inline;                 /* server.inline_us 0: every request goes to a worker */
    const char *transport;          /* server.transport ("zmtp", "libzmq"); NULL: the default */
    /* Every model of the fixture may queue a minute of work (max_queue_us): the suites pipeline
     * hundreds of requests and expect every one answered OK, even in a sanitizer's build ~10x
     * slower; admission by time is tested where the suites set their own max_queue_us. */
} tu_fixture_options_t;
typedef struct {
    tu_fixture_options_t options;
    char dir[2048];
    char config_path[2200];
    char endpoint[2][64];
    pid_t server;
    config_t *cfg;
    weights_t *tick, *odd;
} tu_fixture_t;
void tu_fixture_setup (tu_fixture_t *f, const tu_fixture_options_t *options);
/* Stops the server (asserting exit code 0) and removes the folder. */
void tu_fixture_teardown (tu_fixture_t *f);
/* Writes the fixture's configuration on two other ports as DIR/NAME; the malloc'd path. */
char *tu_fixture_config (const tu_fixture_t *f, const char *name, int port0, int port1);
/* The build folder as an absolute path. */
const char *tu_build_abs (void);

/* Runs SUITE (Check's default fork mode unless CK_FORK says otherwise); the process exit code.
 * The suite's folders (tu_tmpdir) live in one folder for the run: removed when every test passed,
 * kept with its path printed when one failed, so its configs and logs can be read. */
struct Suite;
int tu_run_suite (struct Suite *suite);
/* Removes DIR and everything under it; 0 on success. */
int tu_remove_tree (const char *dir);

/* Runs CHECK in a child process, so that this one starts nothing it must not carry into Check's
 * forks (CUDA above all): CHECK writes a line of text into MSG (CAP bytes) and returns 0 when all is
 * well. That text goes to OUT (OUTLEN bytes); whether CHECK returned 0 (and the child exited). */
bool tu_in_child (int (*check) (char *msg, size_t cap), char *out, size_t outlen);
/* The main of a GPU suite in a build without the CUDA backend: says so (SKIP) and passes (0). */
int tu_skip_without_cuda (void);

#endif
