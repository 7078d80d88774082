/* sigload --serve-echo: the transport floor's server. A ROUTER on each endpoint that returns every
 * message as it came (identity frame and body), so that sigload --echo or --floor can time the
 * same bytes over the same ZeroMQ stacks with no inference behind them. */
#include "sigload.h"

#include <errno.h>
#include <inttypes.h>
#include <zmq.h>

#define ECHO_MAX_FRAMES 16

int echo_serve (const options_t *opt)
{
    void *ctx = zmq_ctx_new ();
    if (!ctx) {
        fprintf (stderr, "sigload: zmq_ctx_new: %s\n", zmq_strerror (zmq_errno ()));
        return EXIT_ERRORS;
    }
    zmq_ctx_set (ctx, ZMQ_IO_THREADS, (int) opt->io_threads);
    zmq_pollitem_t items[MAX_ENDPOINTS];
    size_t n = opt->n_serve_echo;
    int rc = EXIT_OK;
    for (size_t i = 0; i < n; i++) {
        items[i] = (zmq_pollitem_t) { .socket = zmq_socket (ctx, ZMQ_ROUTER), .events = ZMQ_POLLIN };
        int linger = 0;
        zmq_setsockopt (items[i].socket, ZMQ_LINGER, &linger, sizeof linger);
        if (zmq_bind (items[i].socket, opt->serve_echo[i]) != 0) {
            fprintf (stderr, "sigload: cannot bind the echo server to %s: %s\n", opt->serve_echo[i],
                     zmq_strerror (zmq_errno ()));
            n = i + 1;
            rc = EXIT_ERRORS;
            goto done;
        }
        fprintf (stderr, "sigload: echoing on %s (stop with SIGINT or SIGTERM)\n", opt->serve_echo[i]);
    }
    sigload_catch_signals ();
    zmq_msg_t frames[ECHO_MAX_FRAMES];
    for (int f = 0; f < ECHO_MAX_FRAMES; f++)
        zmq_msg_init (&frames[f]);
    uint64_t echoed = 0, dropped = 0;
    while (!sigload_interrupted) {
        int ready = zmq_poll (items, (int) n, 100);
        if (ready < 0) {
            if (zmq_errno () == EINTR)
                continue;
            fprintf (stderr, "sigload: zmq_poll: %s\n", zmq_strerror (zmq_errno ()));
            rc = EXIT_ERRORS;
            break;
        }
        for (size_t i = 0; i < n; i++) {
            void *s = items[i].socket;
            for (;;) {
                int nf = 0, more = 1, ok = 1;
                while (more) {
                    zmq_msg_t *m = &frames[nf < ECHO_MAX_FRAMES ? nf : ECHO_MAX_FRAMES - 1];
                    if (zmq_msg_recv (m, s, nf == 0 ? ZMQ_DONTWAIT : 0) < 0) {
                        ok = 0;
                        break;
                    }
                    more = zmq_msg_more (m);
                    if (nf < ECHO_MAX_FRAMES)
                        nf++;
                    else
                        ok = -1;   /* too many frames: receive them all, echo none */
                }
                if (nf == 0 && ok == 0)
                    break;         /* nothing more on this socket */
                if (ok != 1) {
                    dropped++;
                    continue;
                }
                for (int f = 0; f < nf; f++)
                    if (zmq_msg_send (&frames[f], s, (f + 1 < nf ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT) < 0) {
                        dropped++;
                        break;
                    }
                echoed++;
            }
        }
    }
    for (int f = 0; f < ECHO_MAX_FRAMES; f++)
        zmq_msg_close (&frames[f]);
    fprintf (stderr, "sigload: echo server stopping: %" PRIu64 " messages echoed, %" PRIu64 " dropped\n", echoed,
             dropped);
done:
    for (size_t i = 0; i < n; i++)
        zmq_close (items[i].socket);
    zmq_ctx_term (ctx);
    return rc;
}
