/* mismatch-race: how often libzmq's own client engine is told that a CURVE server refuses it.
 *
 *   build/mismatch-race [ROUNDS [ENDPOINT]]
 *
 * Each round, a libzmq DEALER without CURVE keys connects to ENDPOINT (default: a libzmq CURVE
 * ROUTER this tool forks, in a process of its own) and its monitor is read for 1.5 s: "told" when a
 * handshake fails with MECHANISM_MISMATCH, "no detail" when it fails without detail first (the
 * server's close was seen before its mechanism: libzmq then reconnects, 100 ms later, for ever).
 * Measured here 2026-12-06 (libzmq 4.3.4): told at once 2-3 rounds in 12 across processes, every
 * round in one process (one I/O thread orders both sides). Why libsigclient reads a server's
 * greeting itself after such a failure: transport/zmtp_probe.h. */
#include <zmq.h>

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double s_ms (void)
{
    struct timespec t;
    clock_gettime (CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void s_serve (const char *endpoint)
{
    void *ctx = zmq_ctx_new ();
    char pub[41], sec[41];
    int one = 1;
    zmq_curve_keypair (pub, sec);
    void *r = zmq_socket (ctx, ZMQ_ROUTER);
    zmq_setsockopt (r, ZMQ_CURVE_SERVER, &one, sizeof one);
    zmq_setsockopt (r, ZMQ_CURVE_SECRETKEY, sec, 40);
    if (zmq_bind (r, endpoint) != 0) {
        fprintf (stderr, "mismatch-race: bind %s: %s\n", endpoint, zmq_strerror (zmq_errno ()));
        _exit (1);
    }
    pause ();
    _exit (0);
}

int main (int argc, char **argv)
{
    const int rounds = argc > 1 ? atoi (argv[1]) : 12;
    const char *endpoint = argc > 2 ? argv[2] : "tcp://127.0.0.1:5997";
    pid_t server = -1;
    if (argc <= 2) {
        if ((server = fork ()) == 0)
            s_serve (endpoint);
        usleep (300000);
    }
    void *ctx = zmq_ctx_new ();
    int told = 0, no_detail_first = 0;
    for (int r = 0; r < rounds; r++) {
        void *d = zmq_socket (ctx, ZMQ_DEALER);
        int linger = 0;
        zmq_setsockopt (d, ZMQ_LINGER, &linger, sizeof linger);
        char name[64];
        snprintf (name, sizeof name, "inproc://mismatch-race-%d", r);
        zmq_socket_monitor (d, name, ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL);
        void *m = zmq_socket (ctx, ZMQ_PAIR);
        zmq_connect (m, name);
        const double t0 = s_ms ();
        zmq_connect (d, endpoint);
        zmq_send (d, "x", 1, ZMQ_DONTWAIT);
        int failures = 0;
        double told_ms = -1;
        while (told_ms < 0 && s_ms () - t0 < 1500) {
            zmq_pollitem_t it = { m, 0, ZMQ_POLLIN, 0 };
            zmq_poll (&it, 1, 100);
            uint8_t head[6];
            char where[256];
            while (zmq_recv (m, head, sizeof head, ZMQ_DONTWAIT) == 6) {
                zmq_recv (m, where, sizeof where, 0);
                uint16_t event;
                uint32_t value;
                memcpy (&event, head, 2);
                memcpy (&value, head + 2, 4);
                if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL && value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
                    told_ms = s_ms () - t0;
                else
                    failures++;
            }
        }
        told += told_ms >= 0 && failures == 0;
        no_detail_first += failures > 0;
        printf ("round %2d: %d failures without detail, then %s\n", r, failures,
                told_ms >= 0 ? "told" : "not told in 1.5 s");
        zmq_close (m);
        zmq_close (d);
    }
    printf ("told at once: %d of %d; failed without detail first: %d\n", told, rounds, no_detail_first);
    zmq_ctx_term (ctx);
    if (server > 0) {
        kill (server, SIGTERM);
        waitpid (server, NULL, 0);
    }
    return 0;
}
