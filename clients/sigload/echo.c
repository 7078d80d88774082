/* sigload --serve-echo: the transport floor's server. A ROUTER on each endpoint that returns every
 * message as it came (identity frame and body), so that sigload --echo or --floor can time the
 * same bytes over the same ZeroMQ stacks with no inference behind them. --engine zmtp: one
 * zmtp_router_t, driven by this thread alone (epoll, one read per readable connection, one
 * sendmsg per echo); libzmq: a libzmq ROUTER per endpoint and libzmq's I/O threads. */
#include "clock.h"
#include "sigload.h"
#include "zmtp_router.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <zmq.h>

#define ECHO_MAX_FRAMES 16
#define ECHO_TICK_NS 100000000LL        /* the router's timers (closing connections) this often */

static int s_serve_zmtp (const options_t *opt)
{
    /* no bound on a message but the router's 16 frames, as libzmq's ROUTER has none */
    const zmtp_router_opts_t o = { .conn = { .mechanism = ZMTP_MECH_NULL } };
    zmtp_router_t *router = zmtp_router_new (&o);
    if (!router) {
        fprintf (stderr, "sigload: cannot make the echo server: %s\n", strerror (errno));
        return EXIT_ERRORS;
    }
    for (size_t i = 0; i < opt->n_serve_echo; i++) {
        char err[512];
        if (zmtp_router_bind (router, opt->serve_echo[i], (int) i, false, NULL, err, sizeof err) < 0) {
            fprintf (stderr, "sigload: cannot bind the echo server to %s: %s\n", opt->serve_echo[i], err);
            zmtp_router_destroy (&router, 0);
            return EXIT_ERRORS;
        }
        fprintf (stderr, "sigload: echoing on %s (stop with SIGINT or SIGTERM)\n", opt->serve_echo[i]);
    }
    sigload_catch_signals ();
    uint64_t echoed = 0, dropped = 0, last_tick = clock_now_ns ();
    while (!sigload_interrupted) {
        uint64_t now = clock_now_ns ();
        zmtp_router_msg_t m;
        /* the frames go back as they came: frames[0], the routing id, names the connection */
        while (zmtp_router_recv (router, &m, now) == 1) {
            if (m.msg.refused || zmtp_router_send (router, m.msg.frames, m.msg.nframes, now) != 0)
                dropped++;      /* more than 16 frames (none echoed, as below), or no room */
            else
                echoed++;
        }
        if (now - last_tick >= ECHO_TICK_NS) {
            zmtp_router_tick (router, now);
            last_tick = now;
        }
        zmtp_router_wait (router, 100);      /* a signal ends the wait (EINTR) */
    }
    fprintf (stderr, "sigload: echo server stopping: %" PRIu64 " messages echoed, %" PRIu64 " dropped\n", echoed,
             dropped);
    zmtp_router_destroy (&router, 100);
    return EXIT_OK;
}

static int s_serve_libzmq (const options_t *opt)
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

int echo_serve (const options_t *opt)
{
    return opt->engine == SIGCLIENT_ENGINE_ZMTP ? s_serve_zmtp (opt) : s_serve_libzmq (opt);
}
