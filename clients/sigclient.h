/* libsigclient: the C client of sigserve (wire protocol: proto/signal.proto, sigserve.v1).
 *
 * One sigclient_t is one ZeroMQ DEALER, connected to every endpoint it was given, that spreads
 * requests across them round-robin. Every wait is bounded by the client's timeout, so a dead or
 * absent server never hangs the caller.
 *
 * Engines (sigclient_new_engine; sigclient_new and sigclient_new_curve use SIGCLIENT_ENGINE_ZMTP).
 * Both speak ZeroMQ's wire protocol (ZMTP 3.1, NULL or CURVE) to any ZeroMQ ROUTER, and every
 * behaviour documented here holds on both; they differ in who moves the bytes and in where a
 * request waits while an endpoint is down:
 *  - SIGCLIENT_ENGINE_ZMTP, sigserve's own engine: the calling thread writes and reads its
 *    sockets itself, inside the calls that send or receive (a send is one system call, a reply
 *    one read), with no I/O thread and no ZeroMQ context. A request goes only to a connection
 *    that is up (its handshake done), round-robin over those; while none is, it waits in the
 *    client's own queue and leaves, in order, on the first connection to come up (or the caller
 *    times out first). Connections are made, and remade after a failure, inside the calls too: an
 *    endpoint that is down is tried again after 100 ms, then less often while it stays down (at
 *    least once a second). A tcp:// host name is resolved at each connection attempt, on the
 *    caller's thread. tcp:// and ipc:// only.
 *  - SIGCLIENT_ENGINE_LIBZMQ: a libzmq DEALER in a context of the client's own, whose I/O thread
 *    moves every message (a round trip costs a few handoffs between threads). An endpoint that is
 *    not up yet still takes its share of requests: they wait in its queue and are delivered when
 *    it comes up (or the caller times out first), unless the client follows a dns:// name (then
 *    ZMQ_IMMEDIATE: see below). Every transport libzmq has (inproc:// too).
 *
 * A sigclient_t is not thread-safe (neither is a ZeroMQ socket): use one per thread.
 *
 * Results: functions return 0 on success and -1 on failure. After a failure,
 * sigclient_last_status () says what kind (a server Status value >= 0, or a SIGCLIENT_ERR_*
 * code < 0) and sigclient_error () says what happened in words.
 *
 * Request ids start at 1 and grow by one per request; 0 is what the server puts in the reply to a
 * request it could not decode. The synchronous calls (sigclient_infer, sigclient_health,
 * sigclient_list_models) discard replies that are not theirs (late replies to earlier calls that
 * timed out), so do not mix them with pipelined requests still in flight on the same client.
 *
 * Following a fleet (dns://NAME:PORT). An endpoint "dns://NAME:PORT" stands for every address
 * behind NAME (getaddrinfo, IPv4 and IPv6): the client connects to tcp://ADDR:PORT for each, and
 * resolves NAME again every SIGCLIENT_DEFAULT_RESOLVE_MS (sigclient_set_resolve_interval), on the
 * caller's thread inside the calls that send or receive (no background thread: a slow resolver
 * delays that call), connecting new addresses and disconnecting vanished ones (requests still
 * queued for a vanished one are dropped). A failed resolution, or one with no address, keeps the
 * addresses already connected. This is how a client follows a Kubernetes headless Service, whose
 * name resolves to one address per ready pod. Requests go only to peers whose connection is up,
 * so an address that is listed but not answering (a pod that is gone, ::1 where the server binds
 * 127.0.0.1 only) does not take its share of requests: the zmtp engine always works so, and the
 * libzmq one sets ZMQ_IMMEDIATE on its socket when the client has a dns:// endpoint (for its
 * static endpoints too). When no peer is connected at all, the request waits for one for up to
 * the timeout (libzmq: the send waits, and fails "timed out ... sending to ... (send queue
 * full)"; zmtp: it waits in the client's queue, and the call fails "timed out ... waiting for a
 * reply from ...").
 *
 * Security mismatch (SIGCLIENT_ERR_SECURITY). A server with CURVE and a client without keys (or the
 * other way round) cannot talk: each reads the other's mechanism in the ZMTP greeting and closes. The
 * client does not then reconnect to that endpoint in the background (it cannot succeed); the call
 * that found it fails at once, and so does every call while every endpoint is so refused, with
 * sigclient_error naming the endpoint, what the server asks for and, in parentheses at the end, what
 * to give libsigclient: "tcp://10.0.0.5:5555: the server asks for CURVE, and this client has no
 * CURVE keys (sigclient_new_curve: the server's public key and this client's key pair)", or "...: the
 * server does not use CURVE, and this client has CURVE keys (sigclient_new: no keys)". A call that
 * sends tries a refused endpoint again, at most once a second, so a client outlives a server's
 * change of configuration; a server counts one refused handshake per attempt. Both engines; never
 * retried by sigclient_set_retry. On libzmq's engine a handshake often fails without saying why (the
 * server closes before libzmq reads its mechanism; libzmq would reconnect for ever): the client then
 * reads the server's greeting itself (transport/zmtp_probe.h, at most once a second an endpoint, on
 * such a failure only), which a libzmq server counts as one more refused handshake.
 *
 * Retrying (sigclient_set_retry, off by default). Inference has no side effect, so a request
 * answered STATUS_UNAVAILABLE (a draining server, a model whose GPU failed) or not answered within
 * the timeout can be sent again; the round-robin hands the new copy to the next connected peer,
 * usually another server. Each attempt is a new request with a new request id; the call
 * takes the first answer to any of its attempts (a slow first server may still win) and waits at
 * most the timeout for each attempt, so a call lasts at most (retries + 1) x the timeout.
 *
 * LSTM streams (sigclient_infer_stream, sigclient_stream_t). A stream is a model's series of
 * steps under one stream_id: the server that holds it keeps its window and answers each step with
 * the output for the window ending there (README, "LSTM models"). So every step of a stream must
 * reach the same server, and in order. Round-robin cannot promise that, so streams do not use the
 * round-robin socket: the client keeps one more DEALER per address (of the client's engine, opened
 * at the first stream routed there), and routes a stream the first time it sees its id: to address
 * mix64 (stream_id) mod N of the N addresses it sends to then, in the order of
 * sigclient_endpoints (the static endpoints as given, then each dns:// name's addresses, sorted;
 * mix64 is splitmix64's finalizer; the Python client routes the same way, so both reach the same
 * server from the same endpoint list). The route is kept until sigclient_forget_stream: a later
 * change of the addresses (a dns:// name gaining or losing pods) never moves a stream. When its
 * address vanishes from its dns:// name, the stream's next call fails with SIGCLIENT_ERR_STREAM_GONE
 * naming the address (its state went with that server): forget the stream and start it again (from
 * step 1) on a current address.
 *
 * Steps are numbered (InferRequest.step, counted from 1) so that the server can refuse a duplicate
 * or out-of-order step (STATUS_BAD_REQUEST naming the expected number) instead of applying it. A
 * step answered with any status but OK was not applied: send it again with the same number.
 * Stream calls are NEVER retried automatically, whatever sigclient_set_retry says: an attempt that
 * timed out may have been applied, and a copy that reached another server would start the stream
 * there. After a timeout the caller decides (sending the same step again is safe against a server
 * that checks step numbers: a duplicate is refused, not applied).
 */
#ifndef SIGCLIENT_H
#define SIGCLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _sigclient_t sigclient_t;

/* Outcome codes. 0..8 are the values of sigserve.v1.Status (what the server says);
 * the negative ones are the client's own. */
typedef enum {
    SIGCLIENT_OK = 0,
    SIGCLIENT_BAD_REQUEST = 1,          /* the server could not decode the request */
    SIGCLIENT_UNKNOWN_MODEL = 2,
    SIGCLIENT_BAD_SHAPE = 3,            /* features != rows x input size */
    SIGCLIENT_BAD_VALUE = 4,            /* NaN or Inf feature */
    SIGCLIENT_OVERLOADED = 5,
    SIGCLIENT_DEADLINE_EXCEEDED = 6,
    SIGCLIENT_UNAVAILABLE = 7,
    SIGCLIENT_INTERNAL = 8,
    SIGCLIENT_ERR_TIMEOUT = -2,         /* no reply (or no room to send) within the timeout */
    SIGCLIENT_ERR_TRANSPORT = -3,       /* a socket call failed, or no address to send to */
    SIGCLIENT_ERR_PROTOCOL = -4,        /* an undecodable or unexpected reply */
    SIGCLIENT_ERR_ARGUMENT = -5,        /* a bad argument from the caller */
    SIGCLIENT_ERR_NOMEM = -6,
    SIGCLIENT_ERR_CAPACITY = -7,        /* the reply does not fit the caller's buffer */
    SIGCLIENT_ERR_STREAM_GONE = -8,     /* a stream's server is no longer listed (see LSTM streams) */
    SIGCLIENT_ERR_SECURITY = -9,        /* CURVE on one side only: the server refused the client's
                                           security mechanism (see Security mismatch) */
} sigclient_status_t;

#define SIGCLIENT_DEFAULT_TIMEOUT_MS 5000
#define SIGCLIENT_DEFAULT_RESOLVE_MS 5000   /* how often dns:// endpoints are resolved again */
#define SIGCLIENT_MAX_RETRY 16              /* the most retries sigclient_set_retry accepts */
#define SIGCLIENT_ENDPOINT_MAX 64           /* bytes of "tcp://[IPv6]:PORT" and its NUL */
#define SIGCLIENT_ADDRESS_MAX 46            /* bytes of a numeric IPv6 address and its NUL */
#define SIGCLIENT_KEY_TEXT 41               /* bytes of a CURVE key in Z85 text and its NUL */

/* The structs below may gain fields at their end while the version is 0.x (sigclient_model_info_t
 * did with LSTM models): a program is built against the header of the library it links.
 *
 * What one InferReply said. Strings are copied and NUL-terminated (truncated if longer). */
typedef struct {
    uint64_t request_id;        /* echoed by the server; 0 when it could not decode the request */
    int status;                 /* sigserve.v1.Status value (SIGCLIENT_OK ... SIGCLIENT_INTERNAL) */
    uint32_t rows;              /* rows the server computed */
    uint64_t queue_ns;          /* server: receipt to start of compute */
    uint64_t compute_ns;        /* server: the backend's inference */
    uint64_t server_ns;         /* server: receipt to send */
    char model_version[64];
    char error[512];            /* the server's error text; "" when status is OK */
    uint32_t attempts;          /* sigclient_infer: requests sent for this answer (1 + retries used) */
    char backend[32];           /* what computed it (InferReply.backend: "cpu", "cuda"); "" when none ran */
} sigclient_result_t;

typedef struct {
    bool live;
    bool ready;                 /* every model loaded and warmed */
    char version[64];           /* the server's version */
} sigclient_health_t;

typedef struct {
    char name[64];
    char version[64];
    char backend[16];           /* "cpu" or "cuda" */
    char kernel[32];
    uint32_t input_size;        /* features per row */
    uint32_t output_size;       /* outputs per row */
    uint32_t max_rows;
    bool available;
    char type[8];               /* "mlp" or "lstm" ("" from a server that predates LSTM models) */
    uint32_t window;            /* lstm: time steps of a window (input_size = window x step_size) */
    uint32_t step_size;         /* lstm: features of one step, what a stream step carries */
} sigclient_model_info_t;

/* What moves the client's messages (see Engines at the top of this file). */
typedef enum { SIGCLIENT_ENGINE_ZMTP = 0, SIGCLIENT_ENGINE_LIBZMQ = 1 } sigclient_engine_t;

/* Connects one DEALER socket, of the zmtp engine, to COUNT endpoints ("tcp://host:port",
 * "ipc://path", "dns://name:port"). TIMEOUT_MS bounds every send and every wait for a reply; <= 0
 * means SIGCLIENT_DEFAULT_TIMEOUT_MS. Connecting does not wait for the server; a dns:// name is
 * resolved here once (a name that does not resolve yet is not an error: see above).
 * NULL on failure, with errno set: EINVAL for no endpoints, a malformed one (tcp:// needs
 * HOST:PORT) or a malformed dns:// endpoint (it needs a name and a port from 1 to 65535),
 * EPROTONOSUPPORT for a transport the engine lacks, ENOMEM. */
sigclient_t *sigclient_new (const char *const *endpoints, size_t count, int timeout_ms);
/* As sigclient_new, with CURVE: the connection is encrypted and the server authenticates the
 * client by its key. SERVER_KEY is the server's public key, CLIENT_PUBLIC and CLIENT_SECRET the
 * client's keys, each 40 characters of Z85 (see sigclient_read_cert). NULL with EINVAL when a key
 * is not 40 Z85 characters. A server that does not allow the client's key (or that has another
 * key than SERVER_KEY) does not answer at all: calls time out, and sigclient_error says so. A server
 * without CURVE: SIGCLIENT_ERR_SECURITY at once (see Security mismatch). */
sigclient_t *sigclient_new_curve (const char *const *endpoints, size_t count, int timeout_ms,
                                  const char *server_key, const char *client_public, const char *client_secret);

/* Reads a czmq certificate file (what `sigserve --keygen PATH` writes: PATH holds the public key,
 * PATH_secret both keys). PUBLIC_KEY (SIGCLIENT_KEY_TEXT bytes) gets the public key; SECRET_KEY,
 * when not NULL, the secret key, which the file must then hold. 0, or -1 with errno and ERROR
 * (ERROR_CAP bytes; may be NULL) naming the file and what is wrong with it. */
int sigclient_read_cert (const char *path, char *public_key, char *secret_key, char *error, size_t error_cap);

/* Both certificates a CURVE client needs: the server's public one and the client's secret one. */
typedef struct {
    char server_public[SIGCLIENT_KEY_TEXT];
    char client_public[SIGCLIENT_KEY_TEXT];
    char client_secret[SIGCLIENT_KEY_TEXT];
} sigclient_curve_keys_t;
int sigclient_curve_keys_load (const char *server_cert, const char *client_cert, sigclient_curve_keys_t *keys,
                               char *error, size_t error_cap);

/* As sigclient_new, with ENGINE, and CURVE as sigclient_new_curve when CURVE is not NULL (its three
 * keys in Z85; NULL: plaintext). NULL with errno as sigclient_new and sigclient_new_curve, and EINVAL
 * for an ENGINE that is not one of sigclient_engine_t's. */
sigclient_t *sigclient_new_engine (const char *const *endpoints, size_t count, int timeout_ms,
                                   sigclient_engine_t engine, const sigclient_curve_keys_t *curve);
/* The client's engine (SIGCLIENT_ENGINE_ZMTP for NULL). */
sigclient_engine_t sigclient_engine (const sigclient_t *self);
/* "zmtp", "libzmq"; "unknown" for another value. */
const char *sigclient_engine_name (sigclient_engine_t engine);

/* Closes the socket at once (pending messages are dropped). Safe on NULL; NULLs *SELF_P. */
void sigclient_destroy (sigclient_t **self_p);

/* Sets the send and receive timeout; <= 0 means SIGCLIENT_DEFAULT_TIMEOUT_MS. */
int sigclient_set_timeout (sigclient_t *self, int timeout_ms);
/* The deadline sigclient_infer sends with every request (0, the default: none). A request
 * still queued in the server past it is answered SIGCLIENT_DEADLINE_EXCEEDED. */
void sigclient_set_deadline_us (sigclient_t *self, uint32_t deadline_us);

/* Retries (0, the default, to SIGCLIENT_MAX_RETRY) of sigclient_infer, sigclient_health and
 * sigclient_list_models: an attempt answered STATUS_UNAVAILABLE (infer) or not answered within the
 * timeout (all three) is sent again, at most RETRIES times (see above). The pipelined calls and
 * the stream calls never retry: match pipelined replies by id and send again yourself; a stream
 * step sent twice could be applied twice (see LSTM streams above). -1 (ERR_ARGUMENT) out of range. */
int sigclient_set_retry (sigclient_t *self, int retries);
/* How often dns:// endpoints are resolved again, in ms; 0 never (only at sigclient_new);
 * < 0 means SIGCLIENT_DEFAULT_RESOLVE_MS. */
void sigclient_set_resolve_interval (sigclient_t *self, int interval_ms);
/* What the client is connected to, for messages and logs: "tcp://a:1, dns://fleet:5555
 * [tcp://10.0.0.7:5555, tcp://10.0.0.9:5555]", a dns:// endpoint with the addresses it has now
 * (or "[no address: why]"). Borrowed: valid until the next call on this client. */
const char *sigclient_endpoints (const sigclient_t *self);

/* Expands one endpoint for tools that connect their own sockets (sigload): "dns://NAME:PORT"
 * gives "tcp://ADDR:PORT" for each address behind NAME (sorted, without duplicates, at most CAP);
 * any other endpoint is copied as it is. Returns how many were written (>= 1), or -1 with errno
 * (EINVAL: malformed; ENOENT: NAME has no address; ENOSPC: an endpoint longer than
 * SIGCLIENT_ENDPOINT_MAX - 1) and ERROR (ERROR_CAP bytes) saying why. */
int sigclient_resolve_endpoint (const char *endpoint, char (*out)[SIGCLIENT_ENDPOINT_MAX], size_t cap,
                                char *error, size_t error_cap);

/* For tests: how every client of this process turns a dns:// NAME into addresses (NULL restores
 * getaddrinfo). RESOLVE writes up to CAP numeric addresses ("127.0.0.2", "::1") to ADDRS and
 * returns how many, or -1 with ERROR (ERROR_CAP bytes) saying why. Not thread-safe: set it before
 * any client resolves. */
typedef int (*sigclient_resolver_fn) (const char *name, char (*addrs)[SIGCLIENT_ADDRESS_MAX], size_t cap,
                                      char *error, size_t error_cap, void *arg);
void sigclient_set_resolver (sigclient_resolver_fn resolve, void *arg);

/* The last failure in words, and its code (SIGCLIENT_OK and "" after a success).
 * Borrowed: valid until the next call on this client. */
const char *sigclient_error (const sigclient_t *self);
int sigclient_last_status (const sigclient_t *self);
/* "STATUS_OK", "STATUS_BAD_SHAPE", ..., "ERR_TIMEOUT", ...; "STATUS_UNKNOWN" otherwise. */
const char *sigclient_status_name (int status);

/* Runs one inference and waits for its reply. FEATURES holds N_FEATURES floats: ROWS x the
 * model's input size, row-major (ROWS 0 means 1). On success (status OK) the outputs are copied to
 * OUTPUTS, *N_OUTPUTS is their count and 0 is returned. -1 otherwise:
 *  - the server answered with an error status: RESULT is filled, sigclient_last_status () is that
 *    status and sigclient_error () reads "server replied STATUS_X: <the server's text>";
 *  - more outputs than OUT_CAPACITY: SIGCLIENT_ERR_CAPACITY, RESULT filled, *N_OUTPUTS is the
 *    count needed, nothing copied;
 *  - timeout, transport or protocol error: RESULT is left alone.
 * RESULT may be NULL. The request is packed into a buffer the client owns and reuses. A reply
 * with request_id 0 and an error status (the server could not decode a request) is taken as this
 * call's answer: the client's own requests always decode, unless the server cuts them short. */
int sigclient_infer (sigclient_t *self, const char *model, const float *features, size_t n_features,
                     uint32_t rows, float *outputs, size_t out_capacity, size_t *n_outputs,
                     sigclient_result_t *result);

/* Pipelining: send many, then receive their replies. sigclient_send_infer queues one request and
 * gives its id in *REQUEST_ID (may be NULL). sigclient_recv_infer takes the next InferReply in
 * arrival order (not necessarily send order when several servers answer: match by
 * result->request_id) and returns 0 whatever its status, with RESULT (required) filled; its
 * outputs are copied when status is OK. -1 on timeout, transport or protocol error, or
 * SIGCLIENT_ERR_CAPACITY when the outputs do not fit (the reply is consumed, RESULT filled,
 * *N_OUTPUTS is the count needed). */
int sigclient_send_infer (sigclient_t *self, const char *model, const float *features, size_t n_features,
                          uint32_t rows, uint32_t deadline_us, uint64_t *request_id);
int sigclient_recv_infer (sigclient_t *self, float *outputs, size_t out_capacity, size_t *n_outputs,
                          sigclient_result_t *result);

/* ---- LSTM streams (see the top of this file) ---- */

/* Runs one step of stream STREAM_ID (not 0) of MODEL and waits for its reply: FEATURES holds the
 * model's step_size floats, STEP is the step's number in the stream (from 1; 0 sends it unnumbered,
 * which the server never checks). Outputs, RESULT and the return value as sigclient_infer. Sent
 * once, on the stream's own socket, never retried (see above); the deadline of
 * sigclient_set_deadline_us goes with it. -1 with SIGCLIENT_ERR_STREAM_GONE when the stream's
 * address has vanished, SIGCLIENT_ERR_TRANSPORT when the client has no address at all to route a
 * new stream to, SIGCLIENT_ERR_ARGUMENT for stream_id 0. */
int sigclient_infer_stream (sigclient_t *self, const char *model, uint64_t stream_id, uint64_t step,
                            const float *features, size_t n_features, float *outputs, size_t out_capacity,
                            size_t *n_outputs, sigclient_result_t *result);
/* Where STREAM_ID's steps go ("tcp://10.0.0.7:5555"), routing it now if it is new; NULL when there
 * is no address (sigclient_error says why). Borrowed: valid until the client is destroyed. */
const char *sigclient_stream_endpoint (sigclient_t *self, uint64_t stream_id);
/* Drops STREAM_ID's route: its next step is routed afresh over the current addresses. The server
 * keeps the stream's state until it has been idle for the model's stream_idle_s; a stream forgotten
 * after SIGCLIENT_ERR_STREAM_GONE starts again from step 1. */
void sigclient_forget_stream (sigclient_t *self, uint64_t stream_id);

/* A stream that numbers its steps: step 1, 2, 3... on its client (borrowed: it must outlive the
 * stream). The number goes up after every step that was applied (the server answered OK, also when
 * the outputs did not fit: SIGCLIENT_ERR_CAPACITY) and stays after any other outcome, so the next
 * call sends the same step again (a server error status: not applied; a timeout or transport
 * error: unknown, see above). NULL with errno EINVAL (no client or model, stream_id 0) or ENOMEM. */
typedef struct _sigclient_stream_t sigclient_stream_t;
sigclient_stream_t *sigclient_stream_new (sigclient_t *client, const char *model, uint64_t stream_id);
/* Frees the helper; the client keeps the stream's route (sigclient_forget_stream drops it). */
void sigclient_stream_destroy (sigclient_stream_t **self_p);
/* sigclient_infer_stream with the stream's model, id and next step number. */
int sigclient_stream_step (sigclient_stream_t *self, const float *features, size_t n_features, float *outputs,
                           size_t out_capacity, size_t *n_outputs, sigclient_result_t *result);
/* The number the next step will carry (1 for a new stream). */
uint64_t sigclient_stream_next_step (const sigclient_stream_t *self);
/* Sets it: to continue a stream another process started, or to move past a step the server
 * reported applied (a duplicate refused after a timeout). */
void sigclient_stream_set_next_step (sigclient_stream_t *self, uint64_t step);

/* Asks whether the server is live and ready. 0 when it replied (OUT tells how it is). */
int sigclient_health (sigclient_t *self, sigclient_health_t *out);

/* Lists the server's models: the first min (CAP, total) go to MODELS and *COUNT is the total.
 * -1 with SIGCLIENT_ERR_CAPACITY when the total exceeds CAP. */
int sigclient_list_models (sigclient_t *self, sigclient_model_info_t *models, size_t cap, size_t *count);

/* For tests: send any bytes as one frame, and receive the next frame whatever it holds.
 * sigclient_recv_raw fails with SIGCLIENT_ERR_CAPACITY (frame consumed, *LEN its size) when the
 * frame exceeds CAP. */
int sigclient_send_raw (sigclient_t *self, const void *payload, size_t len);
int sigclient_recv_raw (sigclient_t *self, void *buf, size_t cap, size_t *len);

#ifdef __cplusplus
}
#endif

#endif
