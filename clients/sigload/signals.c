/* sigload's SIGINT and SIGTERM: they set a flag that the sweep (main.c), the echo server (echo.c)
 * and the processes' steps (procs.c) look at. A module of its own so that those files depend on it,
 * not on main.c (main.c calls them). */
#define _GNU_SOURCE
#include "sigload.h"

#include <signal.h>

volatile sig_atomic_t sigload_interrupted;

static void s_on_signal (int sig)
{
    (void) sig;
    sigload_interrupted = 1;
}

void sigload_catch_signals (void)
{
    struct sigaction sa = { .sa_handler = s_on_signal };
    sigemptyset (&sa.sa_mask);
    sigaction (SIGINT, &sa, NULL);
    sigaction (SIGTERM, &sa, NULL);
}
