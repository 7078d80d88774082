/* The server's counters and latency histograms, per model name (stable across reloads: a model
 * keeps its slot when it is reloaded or removed and added back; slot 0 is "_unknown", where
 * requests for names that are not served and undecodable requests are counted, so clients cannot
 * create new series), and the server's own counts: the one place the server counts. Each front
 * writes a shard of its own (stats_writer); readers (the HTTP thread, the stats log line, the stop
 * line) sum the shards with relaxed atomic loads at any time: no locks, no allocation, no
 * read-modify-write on the request path. Histograms are kept twice: in Prometheus' fixed buckets (1 us to 100 ms, exact)
 * and log-linear (8 sub-buckets per power of two, ~9% wide) for percentiles. */
#ifndef SIGSERVE_STATS_H
#define SIGSERVE_STATS_H

#include "base/status.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STATS_SLOTS 192                 /* model names ever seen, "_unknown" included */
#define STATS_UNKNOWN 0                 /* the slot of unknown and undecodable requests */
#define STATS_STATUS_COUNT 9            /* SIG_OK .. SIG_INTERNAL */
#define STATS_LE_COUNT 16               /* Prometheus bucket bounds, +Inf apart */
#define STATS_ROWS_LE_COUNT 13          /* batch-rows bucket bounds, +Inf apart */
#define STATS_FINE_BUCKETS 320

typedef enum { STAGE_QUEUE = 0, STAGE_COMPUTE, STAGE_SERVER, STAGE_COUNT } stats_stage_t;
/* Why a CURVE handshake was refused (sigserve_auth_failures_total's reason label). */
typedef enum {
    AUTH_FAIL_DENIED = 0,       /* a valid handshake from a key not in server.curve.allowed_clients */
    AUTH_FAIL_PLAINTEXT,        /* a client without CURVE (another security mechanism) */
    AUTH_FAIL_WRONG_KEY,        /* a client using another server key: its hello cannot be decrypted */
    AUTH_FAIL_PROTOCOL,         /* any other handshake error */
    AUTH_FAIL_COUNT
} stats_auth_failure_t;
extern const char *const stats_auth_failure_names[AUTH_FAIL_COUNT];
/* Why the front refused a request OVERLOADED or DEADLINE_EXCEEDED before it ran (sigserve_shed_total's
 * reason label). */
typedef enum {
    SHED_QUEUE_TIME = 0,        /* the expected wait for a worker is over the model's max_queue_us */
    SHED_DEADLINE,              /* the expected wait is already over the request's deadline_us */
    SHED_QUEUE_DEPTH,           /* queue_depth requests wait already */
    SHED_BUFFERS,               /* every request buffer (or every large one) is in use */
    SHED_CLIENT,                /* the client has max_inflight_per_client requests in flight */
    SHED_COUNT
} stats_shed_t;
extern const char *const stats_shed_names[SHED_COUNT];

/* The server's own counts (sigserve's stop line; sigserve_messages_total and friends). */
typedef enum {
    STATS_RECEIVED = 0,         /* messages taken from the sockets */
    STATS_REPLIED,              /* replies handed to the transport */
    STATS_SEND_FAILURES,        /* replies the transport refused (peer gone, its queue full) */
    STATS_DROPPED,              /* messages that could not be addressed, or came past max_connections */
    STATS_ADMITTED,             /* infer requests admitted (handed to a worker, or run inline) */
    STATS_INFER_REPLIES,        /* of the replies, those to infer requests */
    STATS_SERVER_COUNT
} stats_server_t;

typedef struct _stats_t stats_t;

/* Writers are threads: each front says which it is (1 + its index) before it counts, and counts in
 * a shard of its own (no two threads ever write one counter); a thread that does not say counts in
 * shard 0 (the control thread's reloads, the tests). Readers sum the shards. */
#define STATS_WRITERS 9                 /* CONFIG_MAX_FRONTS + 1 */
void stats_writer (unsigned writer);

stats_t *stats_new (void);
void stats_destroy (stats_t **self_p);

/* The slot of NAME, added if new. -1 when every slot is taken (then count under STATS_UNKNOWN).
 * Called by the thread that loads models; safe against concurrent readers. */
int stats_slot (stats_t *self, const char *name);
size_t stats_slot_count (const stats_t *self);
const char *stats_slot_name (const stats_t *self, size_t slot);

/* Writers (the front thread). */
void stats_count (stats_t *self, int slot, sig_status_t status);
void stats_observe (stats_t *self, int slot, stats_stage_t stage, uint64_t ns);
void stats_observe_batch (stats_t *self, int slot, uint32_t batch_rows);
void stats_count_send_failure (stats_t *self);      /* = stats_count_server (STATS_SEND_FAILURES) */
void stats_count_server (stats_t *self, stats_server_t what);
void stats_count_auth_failure (stats_t *self, stats_auth_failure_t why);
void stats_count_shed (stats_t *self, int slot, stats_shed_t why);
/* A request the front computed itself (server.inline_us) instead of handing it to a worker. */
void stats_count_inline (stats_t *self, int slot);
/* Of the requests a lost instance held (serving/dispatch.c): RERUN admitted again to another instance,
 * REFUSED answered UNAVAILABLE because none could take them in time. Writer: the lane's front. */
void stats_count_rerun (stats_t *self, int slot, uint64_t rerun, uint64_t refused);
/* A serving thread that spun (base/spin.h) and then went to sleep: the front's, or a worker's (any
 * thread: an atomic add). */
void stats_count_spin_sleep (stats_t *self, bool worker);
/* Writer: the thread that reloads. */
void stats_count_reload (stats_t *self, bool ok);

/* Readers. */
uint64_t stats_requests (const stats_t *self, size_t slot, sig_status_t status);
uint64_t stats_send_failures (const stats_t *self);
uint64_t stats_server (const stats_t *self, stats_server_t what);
uint64_t stats_auth_failures (const stats_t *self, stats_auth_failure_t why);
uint64_t stats_sheds (const stats_t *self, size_t slot, stats_shed_t why);
uint64_t stats_inline (const stats_t *self, size_t slot);
/* RERUN: the requests re-run after their instance was lost; else those answered UNAVAILABLE instead. */
uint64_t stats_reruns (const stats_t *self, size_t slot, bool rerun);
uint64_t stats_spin_sleeps (const stats_t *self, bool worker);
uint64_t stats_reloads (const stats_t *self, bool ok);
/* Upper bounds of the Prometheus buckets, in seconds (STATS_LE_COUNT of them) / in rows. */
extern const double stats_le_seconds[STATS_LE_COUNT];
extern const uint32_t stats_le_rows[STATS_ROWS_LE_COUNT];
/* Cumulative counts per bound (le), then the +Inf count = the total, and the sum in ns. */
void stats_histogram (const stats_t *self, size_t slot, stats_stage_t stage, uint64_t cumulative[STATS_LE_COUNT + 1],
                      uint64_t *sum_ns);
void stats_batch_histogram (const stats_t *self, size_t slot, uint64_t cumulative[STATS_ROWS_LE_COUNT + 1],
                            uint64_t *sum_rows);

/* Percentiles from the fine histogram of a stage: a snapshot, and the difference of two
 * (what happened between them). */
typedef struct {
    uint64_t buckets[STATS_FINE_BUCKETS];
    uint64_t count;
} stats_snapshot_t;
void stats_snapshot (const stats_t *self, size_t slot, stats_stage_t stage, stats_snapshot_t *out);
/* The value (ns) under which fraction Q of the samples in NOW minus BEFORE fall (BEFORE may be
 * NULL); 0 when there are none. Within one fine bucket (~9%) of the true value. */
uint64_t stats_quantile_ns (const stats_snapshot_t *now, const stats_snapshot_t *before, double q, uint64_t *count);

/* The process as the kernel accounts it (/proc/self/stat, statm, fd/ and /proc/stat's btime), for
 * the process_* metrics. Any thread; a few small file reads, so never on the request path. */
typedef struct {
    double cpu_seconds;             /* user + system time of every thread */
    uint64_t resident_bytes;
    uint64_t virtual_bytes;
    double start_time_seconds;      /* since the Unix epoch */
    uint64_t open_fds;
    uint64_t max_fds;               /* RLIMIT_NOFILE's soft limit */
    uint64_t threads;
} stats_process_t;
/* 0, or -1 when /proc cannot be read (the fields it could not read are 0). */
int stats_process (stats_process_t *out);

#endif
