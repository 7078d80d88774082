#include "base/stats.h"

#include <dirent.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define NAME_MAX_BYTES 64

const double stats_le_seconds[STATS_LE_COUNT] = {
    1e-6, 2e-6, 5e-6, 10e-6, 20e-6, 50e-6, 100e-6, 200e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3, 20e-3, 50e-3, 100e-3,
};
static const uint64_t s_le_ns[STATS_LE_COUNT] = {
    1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000, 500000,
    1000000, 2000000, 5000000, 10000000, 20000000, 50000000, 100000000,
};
const uint32_t stats_le_rows[STATS_ROWS_LE_COUNT] = { 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096 };

typedef struct {
    _Atomic uint64_t le[STATS_LE_COUNT + 1];    /* per bucket, not cumulative; [STATS_LE_COUNT] = over */
    _Atomic uint64_t sum;
    _Atomic uint64_t fine[STATS_FINE_BUCKETS];
} histogram_t;

/* One model name's counters, in one writer's shard. */
typedef struct {
    _Atomic uint64_t requests[STATS_STATUS_COUNT];
    histogram_t stage[STAGE_COUNT];
    _Atomic uint64_t rows_le[STATS_ROWS_LE_COUNT + 1];
    _Atomic uint64_t rows_sum;
    _Atomic uint64_t sheds[SHED_COUNT];
    _Atomic uint64_t inline_runs;
    _Atomic uint64_t rerun[2];          /* requests a lost instance held: re-run elsewhere, answered UNAVAILABLE */
} counts_t;

/* Everything one writer counts: a front's, or (shard 0) every other thread's. */
typedef struct {
    counts_t slots[STATS_SLOTS];
    _Atomic uint64_t server[STATS_SERVER_COUNT];
    _Atomic uint64_t auth_failures[AUTH_FAIL_COUNT];
    _Atomic uint64_t reloads[2];        /* [0] error, [1] ok */
} shard_t;

struct _stats_t {
    _Atomic size_t count;               /* slots in use; published after the name is written */
    char names[STATS_SLOTS][NAME_MAX_BYTES];
    _Atomic uint64_t spin_sleeps[2];    /* [0] the front, [1] workers: any thread, an atomic add */
    shard_t shards[STATS_WRITERS];      /* untouched pages of the unused ones are never resident */
};

/* The calling thread's shard (stats_writer); 0 for every thread that did not say. */
static _Thread_local unsigned s_writer;

void stats_writer (unsigned writer) { s_writer = writer < STATS_WRITERS ? writer : 0; }

static inline shard_t *s_mine (stats_t *self) { return &self->shards[s_writer]; }

/* One writer per counter (the shard's thread): a relaxed load and store, no read-modify-write. */
static inline void s_bump (_Atomic uint64_t *c, uint64_t by)
{
    atomic_store_explicit (c, atomic_load_explicit (c, memory_order_relaxed) + by, memory_order_relaxed);
}

static inline uint64_t s_get (const _Atomic uint64_t *c)
{
    return atomic_load_explicit ((_Atomic uint64_t *) c, memory_order_relaxed);
}

/* The sum over the shards of the counter at byte OFFSET of a shard. */
static uint64_t s_sum (const stats_t *self, size_t offset)
{
    uint64_t sum = 0;
    for (size_t w = 0; w < STATS_WRITERS; w++)
        sum += s_get ((const _Atomic uint64_t *) ((const char *) &self->shards[w] + offset));
    return sum;
}

#define S_SUM(self, field) s_sum ((self), offsetof (shard_t, field))

stats_t *stats_new (void)
{
    stats_t *self = calloc (1, sizeof *self);
    if (self) {
        snprintf (self->names[STATS_UNKNOWN], NAME_MAX_BYTES, "_unknown");
        atomic_store (&self->count, 1);
    }
    return self;
}

void stats_destroy (stats_t **self_p)
{
    if (self_p && *self_p) {
        free (*self_p);
        *self_p = NULL;
    }
}

int stats_slot (stats_t *self, const char *name)
{
    size_t n = atomic_load (&self->count);
    for (size_t i = 0; i < n; i++)
        if (strcmp (self->names[i], name) == 0)
            return (int) i;
    if (n == STATS_SLOTS)
        return -1;
    snprintf (self->names[n], NAME_MAX_BYTES, "%s", name);
    atomic_store_explicit (&self->count, n + 1, memory_order_release);
    return (int) n;
}

size_t stats_slot_count (const stats_t *self) { return atomic_load_explicit (&((stats_t *) self)->count, memory_order_acquire); }
const char *stats_slot_name (const stats_t *self, size_t slot) { return self->names[slot]; }

const char *const stats_shed_names[SHED_COUNT] = { "queue_time", "deadline", "queue_depth", "buffers", "client" };

void stats_count_shed (stats_t *self, int slot, stats_shed_t why)
{
    if ((unsigned) why < SHED_COUNT)
        s_bump (&s_mine (self)->slots[slot].sheds[why], 1);
}

void stats_count_inline (stats_t *self, int slot) { s_bump (&s_mine (self)->slots[slot].inline_runs, 1); }

void stats_count_rerun (stats_t *self, int slot, uint64_t rerun, uint64_t refused)
{
    s_bump (&s_mine (self)->slots[slot].rerun[0], rerun);
    s_bump (&s_mine (self)->slots[slot].rerun[1], refused);
}

void stats_count_spin_sleep (stats_t *self, bool worker)
{
    atomic_fetch_add_explicit (&self->spin_sleeps[worker], 1, memory_order_relaxed);
}

uint64_t stats_spin_sleeps (const stats_t *self, bool worker) { return s_get (&self->spin_sleeps[worker]); }

uint64_t stats_sheds (const stats_t *self, size_t slot, stats_shed_t why) { return S_SUM (self, slots[slot].sheds[why]); }
uint64_t stats_inline (const stats_t *self, size_t slot) { return S_SUM (self, slots[slot].inline_runs); }
uint64_t stats_reruns (const stats_t *self, size_t slot, bool rerun)
{
    const size_t k = rerun ? 0 : 1;
    return S_SUM (self, slots[slot].rerun[k]);
}

void stats_count (stats_t *self, int slot, sig_status_t status)
{
    if ((unsigned) status < STATS_STATUS_COUNT)
        s_bump (&s_mine (self)->slots[slot].requests[status], 1);
}

void stats_count_server (stats_t *self, stats_server_t what)
{
    if ((unsigned) what < STATS_SERVER_COUNT)
        s_bump (&s_mine (self)->server[what], 1);
}

uint64_t stats_server (const stats_t *self, stats_server_t what)
{
    return (unsigned) what < STATS_SERVER_COUNT ? S_SUM (self, server[what]) : 0;
}

/* Fine bucket of NS: values below 256 ns share bucket 0; then 8 sub-buckets per power of two. */
static size_t s_fine_index (uint64_t ns)
{
    if (ns < 256)
        return 0;
    int msb = 63 - __builtin_clzll (ns);            /* >= 8 */
    size_t sub = (size_t) ((ns >> (msb - 3)) & 7);  /* the 3 bits after the leading one */
    size_t i = (size_t) (msb - 8 + 1) * 8 + sub - 7;
    return i < STATS_FINE_BUCKETS ? i : STATS_FINE_BUCKETS - 1;
}

/* The upper edge (ns) of fine bucket I. */
static uint64_t s_fine_upper (size_t i)
{
    if (i == 0)
        return 256;
    size_t k = i + 7;
    int msb = (int) (k / 8) + 8 - 1;
    uint64_t sub = k % 8;
    return ((8 + sub + 1) << (msb - 3));
}

void stats_observe (stats_t *self, int slot, stats_stage_t stage, uint64_t ns)
{
    histogram_t *h = &s_mine (self)->slots[slot].stage[stage];
    size_t b = 0;
    while (b < STATS_LE_COUNT && ns > s_le_ns[b])
        b++;
    s_bump (&h->le[b], 1);
    s_bump (&h->sum, ns);
    s_bump (&h->fine[s_fine_index (ns)], 1);
}

void stats_observe_batch (stats_t *self, int slot, uint32_t rows)
{
    size_t b = 0;
    while (b < STATS_ROWS_LE_COUNT && rows > stats_le_rows[b])
        b++;
    counts_t *c = &s_mine (self)->slots[slot];
    s_bump (&c->rows_le[b], 1);
    s_bump (&c->rows_sum, rows);
}

void stats_count_send_failure (stats_t *self) { stats_count_server (self, STATS_SEND_FAILURES); }
void stats_count_auth_failure (stats_t *self, stats_auth_failure_t why) { s_bump (&s_mine (self)->auth_failures[why], 1); }

const char *const stats_auth_failure_names[AUTH_FAIL_COUNT] = {
    [AUTH_FAIL_DENIED] = "denied", [AUTH_FAIL_PLAINTEXT] = "plaintext_client",
    [AUTH_FAIL_WRONG_KEY] = "wrong_server_key", [AUTH_FAIL_PROTOCOL] = "protocol",
};
void stats_count_reload (stats_t *self, bool ok) { s_bump (&s_mine (self)->reloads[ok ? 1 : 0], 1); }

uint64_t stats_requests (const stats_t *self, size_t slot, sig_status_t status)
{
    return (unsigned) status < STATS_STATUS_COUNT ? S_SUM (self, slots[slot].requests[status]) : 0;
}

uint64_t stats_send_failures (const stats_t *self) { return stats_server (self, STATS_SEND_FAILURES); }
uint64_t stats_auth_failures (const stats_t *self, stats_auth_failure_t why) { return S_SUM (self, auth_failures[why]); }
uint64_t stats_reloads (const stats_t *self, bool ok) { return S_SUM (self, reloads[ok ? 1 : 0]); }

void stats_histogram (const stats_t *self, size_t slot, stats_stage_t stage, uint64_t cumulative[STATS_LE_COUNT + 1],
                      uint64_t *sum_ns)
{
    uint64_t run = 0;
    for (size_t b = 0; b <= STATS_LE_COUNT; b++)
        cumulative[b] = run += S_SUM (self, slots[slot].stage[stage].le[b]);
    *sum_ns = S_SUM (self, slots[slot].stage[stage].sum);
}

void stats_batch_histogram (const stats_t *self, size_t slot, uint64_t cumulative[STATS_ROWS_LE_COUNT + 1],
                            uint64_t *sum_rows)
{
    uint64_t run = 0;
    for (size_t b = 0; b <= STATS_ROWS_LE_COUNT; b++)
        cumulative[b] = run += S_SUM (self, slots[slot].rows_le[b]);
    *sum_rows = S_SUM (self, slots[slot].rows_sum);
}

void stats_snapshot (const stats_t *self, size_t slot, stats_stage_t stage, stats_snapshot_t *out)
{
    out->count = 0;
    for (size_t b = 0; b < STATS_FINE_BUCKETS; b++)
        out->count += out->buckets[b] = S_SUM (self, slots[slot].stage[stage].fine[b]);
}

uint64_t stats_quantile_ns (const stats_snapshot_t *now, const stats_snapshot_t *before, double q, uint64_t *count)
{
    uint64_t total = now->count - (before ? before->count : 0);
    if (count)
        *count = total;
    if (total == 0)
        return 0;
    uint64_t rank = (uint64_t) (q * (double) total + 0.999999), run = 0;
    if (rank < 1)
        rank = 1;
    for (size_t b = 0; b < STATS_FINE_BUCKETS; b++) {
        run += now->buckets[b] - (before ? before->buckets[b] : 0);
        if (run >= rank)
            return s_fine_upper (b);
    }
    return s_fine_upper (STATS_FINE_BUCKETS - 1);
}

/* ---------------------------------------------------------------- the process */

/* The whole of a small /proc file, NUL-terminated; the length, or -1. */
static long s_read_proc (const char *path, char *buf, size_t cap)
{
    FILE *f = fopen (path, "re");
    if (!f)
        return -1;
    size_t n = fread (buf, 1, cap - 1, f);
    fclose (f);
    buf[n] = '\0';
    return (long) n;
}

/* Seconds since the epoch at which the machine booted (/proc/stat's btime); 0 when unknown. */
static double s_boot_time (void)
{
    FILE *f = fopen ("/proc/stat", "re");
    if (!f)
        return 0;
    double btime = 0;
    char line[512];
    while (fgets (line, sizeof line, f))
        if (strncmp (line, "btime ", 6) == 0) {
            btime = strtod (line + 6, NULL);
            break;
        }
    fclose (f);
    return btime;
}

int stats_process (stats_process_t *out)
{
    memset (out, 0, sizeof *out);
    int rc = 0;
    long ticks = sysconf (_SC_CLK_TCK), page = sysconf (_SC_PAGESIZE);
    char buf[1024];
    /* /proc/self/stat: "pid (comm) state ppid ..."; comm may hold spaces and parentheses, so the
     * fields are counted from the last ')'. After it come fields 3 (state), 4, ... */
    char *p = s_read_proc ("/proc/self/stat", buf, sizeof buf) > 0 ? strrchr (buf, ')') : NULL;
    if (p && ticks > 0) {
        unsigned long long v[52] = { 0 };
        int field = 3;
        char *save = NULL;
        for (char *tok = strtok_r (p + 1, " \n", &save); tok && field < 52; tok = strtok_r (NULL, " \n", &save), field++)
            v[field] = strtoull (tok, NULL, 10);
        if (field > 23) {
            out->cpu_seconds = (double) (v[14] + v[15]) / (double) ticks;     /* utime + stime */
            out->threads = v[20];
            out->start_time_seconds = s_boot_time () + (double) v[22] / (double) ticks;
            out->virtual_bytes = v[23];
        } else
            rc = -1;
    } else
        rc = -1;
    unsigned long long size = 0, resident = 0;
    if (s_read_proc ("/proc/self/statm", buf, sizeof buf) > 0 && sscanf (buf, "%llu %llu", &size, &resident) == 2
        && page > 0)
        out->resident_bytes = resident * (uint64_t) page;
    else
        rc = -1;
    DIR *d = opendir ("/proc/self/fd");
    if (d) {
        struct dirent *e;
        while ((e = readdir (d)) != NULL)
            if (e->d_name[0] != '.')
                out->open_fds++;
        closedir (d);
        if (out->open_fds)
            out->open_fds--;    /* the one opendir held */
    } else
        rc = -1;
    struct rlimit rl;
    if (getrlimit (RLIMIT_NOFILE, &rl) == 0)
        out->max_fds = rl.rlim_cur == RLIM_INFINITY ? 0 : (uint64_t) rl.rlim_cur;
    return rc;
}
