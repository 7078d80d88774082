/* What the operations suites share: test_ops.c (metrics, where instances are placed, log lines)
 * and test_ops_lifecycle.c (readiness, draining, hot reload under traffic), both against the real
 * sigserve binary. HTTP is spoken with a plain-socket client written here, and /metrics is read by a
 * strict parser of the Prometheus text format 0.0.4, so what a scraper would reject fails the test;
 * the servers' configurations, their start (ready when /readyz says 200: a bounded poll) and stop,
 * DEALER sockets, and the checked fixture (a ZeroMQ context and a folder per test).
 *
 * Each suite's binary includes it once, after defining _GNU_SOURCE: everything here is static. */
#ifndef SIGSERVE_OPS_TESTS_H
#define SIGSERVE_OPS_TESTS_H

#include "base/config.h"
#include "reference.h"
#include "signal.pb-c.h"
#include "st_write.h"
#include "testutil.h"
#include "weights/safetensors.h"
#include "weights/weights.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>
#define POLL_US 2000
#define POLL_MAX 15000              /* bounded waits: POLL_MAX polls of POLL_US (30 s) */

static void *s_ctx;
static char s_dir[2048];

/* ---------------------------------------------------------------- a tiny HTTP client */

typedef struct {
    int status;                     /* 0: no answer (refused, reset) */
    char type[160];                 /* Content-Type */
    char allow[64];                 /* Allow */
    char *body;                     /* NUL-terminated */
    size_t len;
} http_reply_t;

static inline void s_http_free (http_reply_t *r)
{
    free (r->body);
    memset (r, 0, sizeof *r);
}

static inline void s_header (const char *headers, const char *name, char *out, size_t cap)
{
    out[0] = '\0';
    size_t n = strlen (name);
    for (const char *h = headers; h && *h; h = strstr (h, "\r\n") ? strstr (h, "\r\n") + 2 : NULL) {
        if (strncasecmp (h, name, n) == 0 && h[n] == ':') {
            const char *v = h + n + 1;
            while (*v == ' ')
                v++;
            const char *end = strstr (v, "\r\n");
            snprintf (out, cap, "%.*s", (int) (end ? end - v : (long) strlen (v)), v);
            return;
        }
        if (strncmp (h, "\r\n", 2) == 0)
            return;
    }
}

/* One request on a fresh connection. 0 with R filled, or -1 when nothing answered. */
static inline int s_http (int port, const char *method, const char *path, http_reply_t *r)
{
    memset (r, 0, sizeof *r);
    int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge (fd, 0);
    struct timeval tv = { .tv_sec = 20 };
    setsockopt (fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) port) };
    a.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    if (connect (fd, (struct sockaddr *) &a, sizeof a) != 0) {
        close (fd);
        return -1;
    }
    char req[512];
    int n = snprintf (req, sizeof req, "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n", method,
                      path, port);
    if (send (fd, req, (size_t) n, MSG_NOSIGNAL) != n) {
        close (fd);
        return -1;
    }
    size_t cap = 65536, len = 0;
    char *buf = malloc (cap);
    for (;;) {
        if (len + 1 >= cap)
            buf = realloc (buf, cap *= 2);
        ssize_t got = recv (fd, buf + len, cap - len - 1, 0);
        if (got <= 0)
            break;
        len += (size_t) got;
    }
    close (fd);
    buf[len] = '\0';
    char *end = strstr (buf, "\r\n\r\n");
    if (len == 0 || !end || sscanf (buf, "HTTP/1.%*d %d", &r->status) != 1) {
        free (buf);
        memset (r, 0, sizeof *r);
        return -1;
    }
    *end = '\0';
    s_header (strstr (buf, "\r\n") + 2, "Content-Type", r->type, sizeof r->type);
    s_header (strstr (buf, "\r\n") + 2, "Allow", r->allow, sizeof r->allow);
    char length[32];
    s_header (strstr (buf, "\r\n") + 2, "Content-Length", length, sizeof length);
    r->len = len - (size_t) (end + 4 - buf);
    r->body = malloc (r->len + 1);
    memcpy (r->body, end + 4, r->len);
    r->body[r->len] = '\0';
    if (strcmp (method, "HEAD") != 0 && length[0])
        ck_assert_uint_eq (strtoull (length, NULL, 10), r->len);
    free (buf);
    return 0;
}

/* GET PATH: the status; BODY (may be NULL) gets the body without its trailing newline. */
static inline int s_get_text (int port, const char *path, char *body, size_t cap)
{
    http_reply_t r;
    if (s_http (port, "GET", path, &r) != 0)
        return 0;
    if (body) {
        size_t n = r.len;
        while (n && (r.body[n - 1] == '\n' || r.body[n - 1] == '\r'))
            n--;
        snprintf (body, cap, "%.*s", (int) n, r.body);
    }
    int status = r.status;
    s_http_free (&r);
    return status;
}

/* ---------------------------------------------------------------- a strict exposition parser */

#define MAX_LABELS 8

typedef struct {
    char name[128];
    int nlabels;
    char key[MAX_LABELS][64];
    char val[MAX_LABELS][160];
    double value;
    int family;
} sample_t;

typedef struct {
    char name[128];
    char type[16];
    bool help, typed, closed;
    size_t samples;
} family_t;

typedef struct {
    sample_t *samples;
    size_t n, cap;
    family_t families[256];
    size_t nfamilies;
} expo_t;

static inline bool s_metric_name_ok (const char *s, size_t n)
{
    if (n == 0 || !(s[0] == '_' || s[0] == ':' || (s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z')))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!(s[i] == '_' || s[i] == ':' || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z')
              || (s[i] >= '0' && s[i] <= '9')))
            return false;
    return true;
}

static inline family_t *s_family_find (expo_t *e, const char *name)
{
    for (size_t i = 0; i < e->nfamilies; i++)
        if (strcmp (e->families[i].name, name) == 0)
            return &e->families[i];
    return NULL;
}

/* Parses "{k="v",...}" at P into S; the position after it. Fails the test on bad syntax. */
static inline const char *s_parse_labels (const char *p, int line, sample_t *s)
{
    ck_assert (*p == '{');
    p++;
    s->nlabels = 0;
    while (*p != '}') {
        const char *k = p;
        while (*p && *p != '=' && *p != '}' && *p != ',')
            p++;
        ck_assert_msg (*p == '=' && s_metric_name_ok (k, (size_t) (p - k)) && memchr (k, ':', (size_t) (p - k)) == NULL,
                       "line %d: bad label name", line);
        ck_assert_msg (s->nlabels < MAX_LABELS, "line %d: too many labels", line);
        snprintf (s->key[s->nlabels], sizeof s->key[0], "%.*s", (int) (p - k), k);
        for (int i = 0; i < s->nlabels; i++)
            ck_assert_msg (strcmp (s->key[i], s->key[s->nlabels]) != 0, "line %d: label %s twice", line, s->key[i]);
        p++;
        ck_assert_msg (*p == '"', "line %d: label value not quoted", line);
        p++;
        size_t n = 0;
        char *v = s->val[s->nlabels];
        while (*p != '"') {
            ck_assert_msg (*p && *p != '\n', "line %d: unterminated label value", line);
            if (*p == '\\') {
                p++;
                ck_assert_msg (*p == '\\' || *p == '"' || *p == 'n', "line %d: bad escape \\%c", line, *p);
                v[n++] = *p == 'n' ? '\n' : *p;
            } else
                v[n++] = *p;
            ck_assert (n < sizeof s->val[0]);
            p++;
        }
        v[n] = '\0';
        p++;
        s->nlabels++;
        if (*p == ',')
            p++;
        else
            ck_assert_msg (*p == '}', "line %d: expected , or } after a label", line);
    }
    return p + 1;
}

static inline double s_parse_value (const char *tok, int line)
{
    if (strcmp (tok, "+Inf") == 0)
        return INFINITY;
    if (strcmp (tok, "-Inf") == 0)
        return -INFINITY;
    if (strcmp (tok, "NaN") == 0)
        return NAN;
    char *end;
    errno = 0;
    double v = strtod (tok, &end);
    ck_assert_msg (*tok && *end == '\0' && errno == 0 && isfinite (v), "line %d: bad value \"%s\"", line, tok);
    return v;
}

/* The exposition TEXT, checked line by line: HELP and TYPE once per family and before its
 * samples, samples named after the family that TYPE opened last, families never resumed. */
static inline void s_parse_exposition (const char *text, expo_t *e)
{
    memset (e, 0, sizeof *e);
    size_t len = strlen (text);
    ck_assert_msg (len > 0 && text[len - 1] == '\n', "the exposition does not end with a newline");
    family_t *current = NULL;
    int line = 0;
    for (const char *p = text; *p; ) {
        const char *eol = strchr (p, '\n');
        line++;
        char buf[1024];
        ck_assert_msg ((size_t) (eol - p) < sizeof buf, "line %d: too long", line);
        snprintf (buf, sizeof buf, "%.*s", (int) (eol - p), p);
        p = eol + 1;
        ck_assert_msg (buf[0] != '\0', "line %d: empty", line);
        if (buf[0] == '#') {
            char kind[8], name[128];
            int used = 0;
            ck_assert_msg (sscanf (buf, "# %7s %127s %n", kind, name, &used) == 2, "line %d: bad comment: %s", line, buf);
            ck_assert_msg (s_metric_name_ok (name, strlen (name)), "line %d: bad metric name %s", line, name);
            family_t *f = s_family_find (e, name);
            if (!f) {
                ck_assert (e->nfamilies < 256);
                f = &e->families[e->nfamilies++];
                snprintf (f->name, sizeof f->name, "%s", name);
            }
            ck_assert_msg (!f->closed && f->samples == 0, "line %d: %s of %s after its samples", line, kind, name);
            if (strcmp (kind, "HELP") == 0) {
                ck_assert_msg (!f->help, "line %d: second HELP of %s", line, name);
                ck_assert_msg (buf[used] != '\0', "line %d: empty HELP of %s", line, name);
                f->help = true;
            } else {
                ck_assert_msg (strcmp (kind, "TYPE") == 0, "line %d: unexpected comment %s", line, buf);
                ck_assert_msg (!f->typed, "line %d: second TYPE of %s", line, name);
                const char *type = buf + used;
                ck_assert_msg (strcmp (type, "counter") == 0 || strcmp (type, "gauge") == 0
                               || strcmp (type, "histogram") == 0 || strcmp (type, "summary") == 0
                               || strcmp (type, "untyped") == 0, "line %d: bad type %s", line, type);
                snprintf (f->type, sizeof f->type, "%s", type);
                f->typed = true;
                if (current && current != f)
                    current->closed = true;
                current = f;
            }
            continue;
        }
        if (e->n == e->cap) {
            e->cap = e->cap ? e->cap * 2 : 1024;
            e->samples = realloc (e->samples, e->cap * sizeof *e->samples);
        }
        sample_t *s = &e->samples[e->n];
        memset (s, 0, sizeof *s);
        const char *q = buf;
        while (*q && *q != '{' && *q != ' ')
            q++;
        ck_assert_msg (s_metric_name_ok (buf, (size_t) (q - buf)), "line %d: bad sample name", line);
        snprintf (s->name, sizeof s->name, "%.*s", (int) (q - buf), buf);
        if (*q == '{')
            q = s_parse_labels (q, line, s);
        ck_assert_msg (*q == ' ' && q[1] && q[1] != ' ', "line %d: expected one space, then the value", line);
        q++;
        ck_assert_msg (strchr (q, ' ') == NULL, "line %d: a timestamp or trailing text", line);
        s->value = s_parse_value (q, line);
        /* The sample belongs to the family TYPE opened last. */
        ck_assert_msg (current && current->help && current->typed, "line %d: sample %s before HELP and TYPE", line,
                       s->name);
        size_t fl = strlen (current->name);
        bool named = strcmp (s->name, current->name) == 0;
        if (strcmp (current->type, "histogram") == 0)
            named = strncmp (s->name, current->name, fl) == 0
                    && (strcmp (s->name + fl, "_bucket") == 0 || strcmp (s->name + fl, "_sum") == 0
                        || strcmp (s->name + fl, "_count") == 0);
        ck_assert_msg (named, "line %d: sample %s outside its family (now %s)", line, s->name, current->name);
        s->family = (int) (current - e->families);
        current->samples++;
        e->n++;
    }
    for (size_t i = 0; i < e->nfamilies; i++)
        ck_assert_msg (e->families[i].help && e->families[i].typed, "%s lacks HELP or TYPE", e->families[i].name);
}

static inline const char *s_label_of (const sample_t *s, const char *key)
{
    for (int i = 0; i < s->nlabels; i++)
        if (strcmp (s->key[i], key) == 0)
            return s->val[i];
    return NULL;
}

/* Whether S has exactly the labels of LABELS ("k=v,k=v"; "" for none), IGNORE excepted. */
static inline bool s_labels_are (const sample_t *s, const char *labels, const char *ignore)
{
    int want = 0;
    char copy[512];
    snprintf (copy, sizeof copy, "%s", labels);
    char *save = NULL;
    for (char *kv = strtok_r (copy, ",", &save); kv; kv = strtok_r (NULL, ",", &save)) {
        char *eq = strchr (kv, '=');
        ck_assert_ptr_nonnull (eq);
        *eq = '\0';
        const char *have = s_label_of (s, kv);
        if (!have || strcmp (have, eq + 1) != 0)
            return false;
        want++;
    }
    int have = s->nlabels - (ignore && s_label_of (s, ignore) ? 1 : 0);
    return have == want;
}

/* The value of the one sample NAME{LABELS}; NAN when there is none. */
static inline double s_value (const expo_t *e, const char *name, const char *labels)
{
    double v = NAN;
    int found = 0;
    for (size_t i = 0; i < e->n; i++)
        if (strcmp (e->samples[i].name, name) == 0 && s_labels_are (&e->samples[i], labels, NULL)) {
            v = e->samples[i].value;
            found++;
        }
    ck_assert_msg (found <= 1, "%s{%s} appears %d times", name, labels, found);
    return v;
}

static inline size_t s_count_samples (const expo_t *e, const char *name)
{
    size_t n = 0;
    for (size_t i = 0; i < e->n; i++)
        n += strcmp (e->samples[i].name, name) == 0;
    return n;
}

/* Every histogram: per label set, buckets in increasing le ending at +Inf, cumulative counts
 * non-decreasing, +Inf equal to _count, a _sum that is > 0 when the count is. The number of
 * label sets checked. */
static inline size_t s_check_histograms (const expo_t *e)
{
    size_t groups = 0;
    for (size_t f = 0; f < e->nfamilies; f++) {
        const family_t *fam = &e->families[f];
        if (strcmp (fam->type, "histogram") != 0)
            continue;
        char bucket[160], sum[160], count[160];
        snprintf (bucket, sizeof bucket, "%s_bucket", fam->name);
        snprintf (sum, sizeof sum, "%s_sum", fam->name);
        snprintf (count, sizeof count, "%s_count", fam->name);
        size_t counts = 0;
        for (size_t i = 0; i < e->n; i++) {
            const sample_t *c = &e->samples[i];
            if (strcmp (c->name, count) != 0)
                continue;
            counts++;
            groups++;
            /* This label set's buckets, in the order written. */
            double last_le = -INFINITY, last = 0, inf = NAN, total_sum = NAN;
            size_t buckets = 0;
            for (size_t k = 0; k < e->n; k++) {
                const sample_t *b = &e->samples[k];
                bool same = true;
                for (int l = 0; l < c->nlabels && same; l++) {
                    const char *v = s_label_of (b, c->key[l]);
                    same = v && strcmp (v, c->val[l]) == 0;
                }
                if (!same)
                    continue;
                if (strcmp (b->name, sum) == 0 && b->nlabels == c->nlabels)
                    total_sum = b->value;
                if (strcmp (b->name, bucket) != 0 || b->nlabels != c->nlabels + 1)
                    continue;
                const char *le = s_label_of (b, "le");
                ck_assert_msg (le != NULL, "%s without le", bucket);
                double lev = strcmp (le, "+Inf") == 0 ? INFINITY : strtod (le, NULL);
                ck_assert_msg (lev > last_le, "%s: le=%s not above the previous bound", bucket, le);
                ck_assert_msg (b->value >= last, "%s{le=%s}: %g below the previous bucket's %g", bucket, le, b->value,
                               last);
                last_le = lev;
                last = b->value;
                buckets++;
                if (isinf (lev))
                    inf = b->value;
            }
            ck_assert_msg (buckets >= 2 && isinf (last_le), "%s: %zu buckets, the last not +Inf", bucket, buckets);
            ck_assert_msg (inf == c->value, "%s: +Inf bucket %g, _count %g", fam->name, inf, c->value);
            ck_assert_msg (!isnan (total_sum) && total_sum >= 0, "%s: no _sum for a label set", fam->name);
            if (c->value > 0)
                ck_assert_msg (total_sum > 0, "%s: count %g with a sum of 0", fam->name, c->value);
        }
        ck_assert_msg (counts == s_count_samples (e, sum), "%s: %zu _count, %zu _sum", fam->name, counts,
                       s_count_samples (e, sum));
    }
    return groups;
}

static inline void s_scrape (int port, expo_t *e)
{
    http_reply_t r;
    ck_assert_int_eq (s_http (port, "GET", "/metrics", &r), 0);
    ck_assert_int_eq (r.status, 200);
    ck_assert_str_eq (r.type, "text/plain; version=0.0.4; charset=utf-8");
    s_parse_exposition (r.body, e);
    s_http_free (&r);
}

static inline void s_expo_free (expo_t *e)
{
    free (e->samples);
    memset (e, 0, sizeof *e);
}

/* Scrapes until NAME{LABELS} reaches WANT (bounded); its last value. */
/* ---------------------------------------------------------------- servers and files */

static inline void s_weights (const char *file, uint32_t in, uint32_t hidden, uint32_t out, uint64_t seed)
{
    const uint32_t sizes[] = { in, hidden, out };
    const activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_NONE };
    weights_t *w = weights_random (sizes, acts, 2, seed);
    ck_assert_ptr_nonnull (w);
    st_write_tensor_t t[4] = {
        { "a.weight", 2, { hidden, in }, w->layers[0].weight }, { "a.bias", 1, { hidden }, w->layers[0].bias },
        { "b.weight", 2, { out, hidden }, w->layers[1].weight }, { "b.bias", 1, { out }, w->layers[1].bias },
    };
    char path[4200], err[512];
    snprintf (path, sizeof path, "%s/%s", s_dir, file);
    ck_assert_msg (safetensors_write_f32 (path, t, 4, err, sizeof err) == 0, "%s", err);
    weights_destroy (&w);
}

static char s_tick[1024];           /* the demo model, 512 -> 1 */
static const char *s_odd = "{ \"name\": \"odd\", \"backend\": \"cpu\", \"max_rows\": 7, \"weights\": \"odd.safetensors\", "
                           "\"layers\": [ { \"weight\": \"a.weight\", \"activation\": \"relu\" }, { \"weight\": \"b.weight\" } ] }";

/* DIR/NAME: endpoint tcp://127.0.0.1:ZPORT, http on HPORT, SERVER_EXTRA (", \"k\": v" or ""), MODELS. */
/* A configuration on the loopback ports ZPORTS (COUNT of them). */
static inline char *s_config_on (const char *name, const int *zports, int count, int hport, const char *server_extra,
                          const char *models)
{
    char json[8192], endpoints[512] = "";
    size_t used = 0;
    for (int k = 0; k < count; k++)
        used += (size_t) snprintf (endpoints + used, sizeof endpoints - used, "%s\"tcp://127.0.0.1:%d\"", k ? ", " : "",
                                   zports[k]);
    snprintf (json, sizeof json,
              "{ \"server\": { \"endpoints\": [%s], \"http\": \"127.0.0.1:%d\", "
              "\"log_level\": \"info\"%s },\n  \"models\": [ %s ] }\n", endpoints, hport, server_extra, models);
    char *path = tu_write_file (s_dir, name, json, -1);
    ck_assert_ptr_nonnull (path);
    return path;
}

static inline char *s_config (const char *name, int zport, int hport, const char *server_extra, const char *models)
{
    return s_config_on (name, &zport, 1, hport, server_extra, models);
}

static inline pid_t s_spawn (const char *config, const char *log_path, bool watch)
{
    char bin[4096];
    snprintf (bin, sizeof bin, "%s/sigserve", tu_build_dir ());
    pid_t pid = fork ();
    ck_assert_int_ge (pid, 0);
    if (pid == 0) {
        FILE *f = freopen (log_path ? log_path : "/dev/null", "w", stderr);
        (void) f;
        execl (bin, bin, "--config", config, "--log-level", "info", watch ? "--watch" : (char *) NULL, (char *) NULL);
        _exit (127);
    }
    return pid;
}

/* Polls /readyz until it says 200 (bounded); fails the test when the server exits or never does. */
static inline void s_wait_ready (pid_t pid, int hport)
{
    for (int i = 0; i < POLL_MAX; i++) {
        int status;
        ck_assert_msg (waitpid (pid, &status, WNOHANG) == 0, "sigserve exited while starting");
        if (s_get_text (hport, "/readyz", NULL, 0) == 200)
            return;
        usleep (POLL_US);
    }
    ck_abort_msg ("sigserve never became ready");
}

static inline void s_stop (pid_t pid) { ck_assert_int_eq (tu_server_stop (pid), 0); }

static inline void *s_dealer (int zport)
{
    char ep[64];
    snprintf (ep, sizeof ep, "tcp://127.0.0.1:%d", zport);
    return tu_dealer (s_ctx, ep, 20000);
}

static inline void s_send (void *s, const char *model, const float *f, size_t n, uint32_t rows, uint64_t id)
{
    static __thread uint8_t buf[70000];
    size_t len = tu_pack_infer (buf, sizeof buf, model, f, n, rows, id, 0);
    ck_assert_uint_gt (len, 0);
    ck_assert_int_eq (zmq_send (s, buf, len, 0), (int) len);
}

/* The next infer reply (caller frees), NULL on timeout. */
static inline Sigserve__V1__InferReply *s_recv (void *s, Sigserve__V1__Reply **whole)
{
    zmq_msg_t m;
    zmq_msg_init (&m);
    if (zmq_msg_recv (&m, s, 0) < 0) {
        zmq_msg_close (&m);
        return NULL;
    }
    *whole = sigserve__v1__reply__unpack (NULL, zmq_msg_size (&m), zmq_msg_data (&m));
    zmq_msg_close (&m);
    ck_assert_ptr_nonnull (*whole);
    ck_assert_int_eq ((*whole)->body_case, SIGSERVE__V1__REPLY__BODY_INFER);
    return (*whole)->infer;
}

/* Two distinct ports that were free a moment ago. */
static inline void s_ports (int *zport, int *hport)
{
    *zport = tu_free_port ();
    do
        *hport = tu_free_port ();
    while (*hport == *zport);
    ck_assert (*zport > 0 && *hport > 0);
}

static inline void s_setup (void)
{
    s_ctx = zmq_ctx_new ();
    char *dir = tu_tmpdir ();
    ck_assert_ptr_nonnull (dir);
    snprintf (s_dir, sizeof s_dir, "%s", dir);
    free (dir);
    /* max_queue_us a minute: these tests count exact statuses of pipelined bursts (100 at once), which
     * admission by time refused under ASan on a busy machine (78 rows queued, 10.05 ms expected) */
    snprintf (s_tick, sizeof s_tick,
              "{ \"name\": \"tick_mlp\", \"backend\": \"cpu\", \"max_rows\": 8, \"queue_depth\": 1024, "
              "\"max_queue_us\": 60000000, "
              "\"weights\": \"%s/models/tick_mlp.safetensors\", \"layers\": [ { \"weight\": \"0.weight\", "
              "\"activation\": \"relu\" }, { \"weight\": \"2.weight\", \"activation\": \"relu\" }, "
              "{ \"weight\": \"4.weight\" } ] }", tu_build_abs ());
    s_weights ("odd.safetensors", 33, 31, 3, 11);
}

static inline void s_teardown (void)
{
    zmq_ctx_term (s_ctx);
    s_ctx = NULL;
    /* In a process of its own a test reaches its teardown only when it passed: its folder goes. A
     * failed test's stays, with its configs and logs, and tu_run_suite prints where. */
    if (tu_forked ())
        tu_remove_tree (s_dir);
}

#endif
