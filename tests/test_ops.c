/* Operations: the real sigserve binary's HTTP endpoint (metrics, probes, the model list), where
 * it reports instances placed (a CPU LSTM on the CPU, pinned only when asked), hot reload (SIGHUP
 * and --watch) under traffic, and its logs. HTTP is spoken with a plain-socket
 * client written here, and /metrics is read by a strict parser of the Prometheus text format
 * 0.0.4, so what a scraper would reject fails the test. Assertions are on counts and order,
 * never on wall-clock time: waits are bounded polls. */
#define _GNU_SOURCE
#include "base/config.h"
#include "base/log.h"
#include "lstm_reference.h"
#include "reference.h"
#include "signal.pb-c.h"
#include "st_write.h"
#include "testutil.h"
#include "weights/weights.h"

#include <arpa/inet.h>
#include <cJSON.h>
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
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

static void s_http_free (http_reply_t *r)
{
    free (r->body);
    memset (r, 0, sizeof *r);
}

static void s_header (const char *headers, const char *name, char *out, size_t cap)
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
static int s_http (int port, const char *method, const char *path, http_reply_t *r)
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
static int s_get_text (int port, const char *path, char *body, size_t cap)
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

static bool s_metric_name_ok (const char *s, size_t n)
{
    if (n == 0 || !(s[0] == '_' || s[0] == ':' || (s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z')))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!(s[i] == '_' || s[i] == ':' || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z')
              || (s[i] >= '0' && s[i] <= '9')))
            return false;
    return true;
}

static family_t *s_family_find (expo_t *e, const char *name)
{
    for (size_t i = 0; i < e->nfamilies; i++)
        if (strcmp (e->families[i].name, name) == 0)
            return &e->families[i];
    return NULL;
}

/* Parses "{k="v",...}" at P into S; the position after it. Fails the test on bad syntax. */
static const char *s_parse_labels (const char *p, int line, sample_t *s)
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

static double s_parse_value (const char *tok, int line)
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
static void s_parse_exposition (const char *text, expo_t *e)
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

static const char *s_label_of (const sample_t *s, const char *key)
{
    for (int i = 0; i < s->nlabels; i++)
        if (strcmp (s->key[i], key) == 0)
            return s->val[i];
    return NULL;
}

/* Whether S has exactly the labels of LABELS ("k=v,k=v"; "" for none), IGNORE excepted. */
static bool s_labels_are (const sample_t *s, const char *labels, const char *ignore)
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
static double s_value (const expo_t *e, const char *name, const char *labels)
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

static size_t s_count_samples (const expo_t *e, const char *name)
{
    size_t n = 0;
    for (size_t i = 0; i < e->n; i++)
        n += strcmp (e->samples[i].name, name) == 0;
    return n;
}

/* Every histogram: per label set, buckets in increasing le ending at +Inf, cumulative counts
 * non-decreasing, +Inf equal to _count, a _sum that is > 0 when the count is. The number of
 * label sets checked. */
static size_t s_check_histograms (const expo_t *e)
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

static void s_scrape (int port, expo_t *e)
{
    http_reply_t r;
    ck_assert_int_eq (s_http (port, "GET", "/metrics", &r), 0);
    ck_assert_int_eq (r.status, 200);
    ck_assert_str_eq (r.type, "text/plain; version=0.0.4; charset=utf-8");
    s_parse_exposition (r.body, e);
    s_http_free (&r);
}

static void s_expo_free (expo_t *e)
{
    free (e->samples);
    memset (e, 0, sizeof *e);
}

/* Scrapes until NAME{LABELS} reaches WANT (bounded); its last value. */
static double s_wait_metric (int port, const char *name, const char *labels, double want)
{
    double v = NAN;
    for (int i = 0; i < POLL_MAX; i++) {
        expo_t e;
        s_scrape (port, &e);
        v = s_value (&e, name, labels);
        s_expo_free (&e);
        if (v >= want)
            break;
        usleep (POLL_US * 5);
    }
    return v;
}

/* ---------------------------------------------------------------- servers and files */

static void s_weights (const char *file, uint32_t in, uint32_t hidden, uint32_t out, uint64_t seed)
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
static char *s_config_on (const char *name, const int *zports, int count, int hport, const char *server_extra,
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

static char *s_config (const char *name, int zport, int hport, const char *server_extra, const char *models)
{
    return s_config_on (name, &zport, 1, hport, server_extra, models);
}

static pid_t s_spawn (const char *config, const char *log_path, bool watch)
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
static void s_wait_ready (pid_t pid, int hport)
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

static void s_stop (pid_t pid) { ck_assert_int_eq (tu_server_stop (pid), 0); }

static void *s_dealer (int zport)
{
    void *s = zmq_socket (s_ctx, ZMQ_DEALER);
    int linger = 0, timeout = 20000, hwm = 0;
    zmq_setsockopt (s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt (s, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    zmq_setsockopt (s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    char ep[64];
    snprintf (ep, sizeof ep, "tcp://127.0.0.1:%d", zport);
    ck_assert_int_eq (zmq_connect (s, ep), 0);
    return s;
}

static void s_send (void *s, const char *model, const float *f, size_t n, uint32_t rows, uint64_t id)
{
    static __thread uint8_t buf[70000];
    size_t len = tu_pack_infer (buf, sizeof buf, model, f, n, rows, id, 0);
    ck_assert_uint_gt (len, 0);
    ck_assert_int_eq (zmq_send (s, buf, len, 0), (int) len);
}

/* The next infer reply (caller frees), NULL on timeout. */
static Sigserve__V1__InferReply *s_recv (void *s, Sigserve__V1__Reply **whole)
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
static void s_ports (int *zport, int *hport)
{
    *zport = tu_free_port ();
    do
        *hport = tu_free_port ();
    while (*hport == *zport);
    ck_assert (*zport > 0 && *hport > 0);
}

static void s_setup (void)
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

static void s_teardown (void)
{
    zmq_ctx_term (s_ctx);
    s_ctx = NULL;
    /* In a process of its own a test reaches its teardown only when it passed: its folder goes. A
     * failed test's stays, with its configs and logs, and tu_run_suite prints where. */
    if (tu_forked ())
        tu_remove_tree (s_dir);
}

/* ---------------------------------------------------------------- metrics */

START_TEST (metrics_counts_exact_and_exposition_strict)
{
    int zport, hport;
    s_ports (&zport, &hport);
    char models[4096];
    snprintf (models, sizeof models, "%s, %s", s_tick, s_odd);
    /* inline_us 10 ms, so that even a sanitizer's build runs requests on the front when it is idle:
     * the first of the 100 at least (the front idle, nothing queued). */
    char *config = s_config ("metrics.json", zport, hport, ", \"inline_us\": 10000", models);
    pid_t pid = s_spawn (config, NULL, false);
    s_wait_ready (pid, hport);

    /* 100 ok (pipelined), 5 bad_shape and 4 bad_value for tick_mlp, 3 unknown models, 2
     * undecodable payloads, 7 ok for odd. */
    void *s = s_dealer (zport);
    float f[512], g[33];
    for (int i = 0; i < 512; i++)
        f[i] = (float) ((i % 17) - 8) / 8.0f;
    for (int i = 0; i < 33; i++)
        g[i] = (float) i / 33.0f;
    for (uint64_t id = 1000; id < 1100; id++)
        s_send (s, "tick_mlp", f, 512, 1, id);
    for (uint64_t id = 100; id < 105; id++)
        s_send (s, "tick_mlp", f, 511, 1, id);
    float bad[512];
    memcpy (bad, f, sizeof bad);
    bad[3] = NAN;
    for (uint64_t id = 105; id < 109; id++)
        s_send (s, "tick_mlp", bad, 512, 1, id);
    for (uint64_t id = 109; id < 112; id++)
        s_send (s, id == 109 ? "nope" : id == 110 ? "" : "TICK_MLP", f, 512, 1, id);
    const uint8_t junk[] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x02 };
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq (zmq_send (s, junk, sizeof junk, 0), (int) sizeof junk);
    for (uint64_t id = 2000; id < 2007; id++)
        s_send (s, "odd", g, 33, 1, id);
    int by_status[16] = { 0 };
    for (int i = 0; i < 100 + 5 + 4 + 3 + 2 + 7; i++) {
        Sigserve__V1__Reply *whole;
        Sigserve__V1__InferReply *r = s_recv (s, &whole);
        ck_assert_msg (r != NULL, "reply %d missing", i);
        if (r->request_id >= 1000)
            ck_assert_msg (r->status == SIGSERVE__V1__STATUS__STATUS_OK, "id %llu: status %d: %s",
                           (unsigned long long) r->request_id, r->status, r->error);
        by_status[r->status]++;
        sigserve__v1__reply__free_unpacked (whole, NULL);
    }
    ck_assert_int_eq (by_status[SIGSERVE__V1__STATUS__STATUS_OK], 107);
    zmq_close (s);

    expo_t e;
    s_scrape (hport, &e);
    const double inlined = s_value (&e, "sigserve_inline_total", "model=tick_mlp");
    /* requests_total: exactly these numbers, every status present for every model, model labels
     * only the configured names and "_unknown". */
    static const char *statuses[] = { "ok", "bad_request", "unknown_model", "bad_shape", "bad_value", "overloaded",
                                      "deadline_exceeded", "unavailable", "internal" };
    static const char *names[] = { "_unknown", "tick_mlp", "odd" };
    const double want[3][9] = {
        { 0, 2, 3, 0, 0, 0, 0, 0, 0 },
        { 100, 0, 0, 5, 4, 0, 0, 0, 0 },
        { 7, 0, 0, 0, 0, 0, 0, 0, 0 },
    };
    for (int m = 0; m < 3; m++)
        for (int st = 0; st < 9; st++) {
            char labels[128];
            snprintf (labels, sizeof labels, "model=%s,status=%s", names[m], statuses[st]);
            double v = s_value (&e, "sigserve_requests_total", labels);
            ck_assert_msg (v == want[m][st], "sigserve_requests_total{%s} = %g, expected %g", labels, v, want[m][st]);
        }
    ck_assert_uint_eq (s_count_samples (&e, "sigserve_requests_total"), 27);
    for (size_t i = 0; i < e.n; i++) {
        const char *model = s_label_of (&e.samples[i], "model");
        ck_assert_msg (!model || strcmp (model, "_unknown") == 0 || strcmp (model, "tick_mlp") == 0
                       || strcmp (model, "odd") == 0, "%s has model=\"%s\"", e.samples[i].name, model);
    }
    /* Histograms: consistent everywhere; counts exact where they are known. 3 models x 3 stages
     * + 3 batch-rows histograms. */
    ck_assert_uint_eq (s_check_histograms (&e), 12);
    const char *stages[] = { "queue", "compute", "server" };
    for (int st = 0; st < 3; st++) {
        char labels[128];
        snprintf (labels, sizeof labels, "model=tick_mlp,stage=%s", stages[st]);
        ck_assert_double_eq (s_value (&e, "sigserve_request_duration_seconds_count", labels), 100);
        ck_assert_double_gt (s_value (&e, "sigserve_request_duration_seconds_sum", labels), 0);
        snprintf (labels, sizeof labels, "model=odd,stage=%s", stages[st]);
        ck_assert_double_eq (s_value (&e, "sigserve_request_duration_seconds_count", labels), 7);
        snprintf (labels, sizeof labels, "model=_unknown,stage=%s", stages[st]);
        ck_assert_double_eq (s_value (&e, "sigserve_request_duration_seconds_count", labels), 0);
        ck_assert_double_eq (s_value (&e, "sigserve_request_duration_seconds_sum", labels), 0);
    }
    ck_assert_double_eq (s_value (&e, "sigserve_batch_rows_count", "model=tick_mlp"), 100);
    double rows = s_value (&e, "sigserve_batch_rows_sum", "model=tick_mlp");
    ck_assert_msg (rows >= 100 && rows <= 100 * 8, "batch rows sum %g", rows);
    ck_assert_double_eq (s_value (&e, "sigserve_batch_rows_bucket", "model=odd,le=+Inf"), 7);
    /* Gauges of the models served now, and the rest. */
    ck_assert_double_eq (s_value (&e, "sigserve_queue_depth", "model=tick_mlp"), 0);
    ck_assert_double_eq (s_value (&e, "sigserve_queue_depth", "model=odd"), 0);
    ck_assert_double_eq (s_value (&e, "sigserve_model_available", "model=tick_mlp"), 1);
    ck_assert_double_eq (s_value (&e, "sigserve_model_available", "model=odd"), 1);
    ck_assert_uint_eq (s_count_samples (&e, "sigserve_model_available"), 2);
    ck_assert_double_eq (s_value (&e, "sigserve_instance_available", "model=tick_mlp,instance=0,device=cpu"), 1);
    /* computed once each: by the worker or on the front */
    ck_assert_double_eq (s_value (&e, "sigserve_instance_requests_total", "model=odd,instance=0,device=cpu")
                         + s_value (&e, "sigserve_inline_total", "model=odd"), 7);
    ck_assert_double_eq (s_value (&e, "sigserve_instance_requests_total", "model=tick_mlp,instance=0,device=cpu")
                         + inlined, 100);
    /* Nothing was refused before running: every model x reason present, all 0. */
    ck_assert_uint_eq (s_count_samples (&e, "sigserve_shed_total"), 3 * 5);
    static const char *reasons[] = { "queue_time", "deadline", "queue_depth", "buffers", "client" };
    for (int m = 0; m < 3; m++)
        for (int k = 0; k < 5; k++) {
            char labels[128];
            snprintf (labels, sizeof labels, "model=%s,reason=%s", names[m], reasons[k]);
            ck_assert_double_eq (s_value (&e, "sigserve_shed_total", labels), 0);
        }
    ck_assert_uint_eq (s_count_samples (&e, "sigserve_inline_total"), 2);     /* the models, not _unknown */
    ck_assert_double_ge (inlined, 1);
    ck_assert_double_eq (s_value (&e, "sigserve_ready", ""), 1);
    ck_assert_double_eq (s_value (&e, "sigserve_config_reloads_total", "result=ok"), 0);
    ck_assert_double_eq (s_value (&e, "sigserve_config_reloads_total", "result=error"), 0);
    ck_assert_double_eq (s_value (&e, "sigserve_reply_send_failures_total", ""), 0);
    ck_assert_uint_eq (s_count_samples (&e, "sigserve_build_info"), 1);
    for (size_t i = 0; i < e.n; i++)
        if (strcmp (e.samples[i].name, "sigserve_build_info") == 0) {
            ck_assert_str_eq (s_label_of (&e.samples[i], "version"), SIGSERVE_VERSION);
            ck_assert_ptr_nonnull (s_label_of (&e.samples[i], "cuda"));
            ck_assert_double_eq (e.samples[i].value, 1);
        }
    ck_assert_double_gt (s_value (&e, "process_resident_memory_bytes", ""), 1 << 20);
    ck_assert_double_ge (s_value (&e, "process_cpu_seconds_total", ""), 0);
    ck_assert_double_gt (s_value (&e, "process_start_time_seconds", ""), 1.5e9);
    ck_assert_double_gt (s_value (&e, "process_open_fds", ""), 3);
    const char *types[][2] = {
        { "sigserve_requests_total", "counter" }, { "sigserve_request_duration_seconds", "histogram" },
        { "sigserve_batch_rows", "histogram" }, { "sigserve_queue_depth", "gauge" },
        { "sigserve_model_available", "gauge" }, { "sigserve_config_reloads_total", "counter" },
        { "sigserve_reply_send_failures_total", "counter" }, { "sigserve_build_info", "gauge" },
        { "process_cpu_seconds_total", "counter" }, { "process_resident_memory_bytes", "gauge" },
        { "process_start_time_seconds", "gauge" }, { "sigserve_shed_total", "counter" },
        { "sigserve_inline_total", "counter" },
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        family_t *fam = s_family_find (&e, types[i][0]);
        ck_assert_msg (fam != NULL, "no family %s", types[i][0]);
        ck_assert_str_eq (fam->type, types[i][1]);
    }
    s_expo_free (&e);

    /* Probes, the model list, and what is not there. */
    char body[1024];
    ck_assert_int_eq (s_get_text (hport, "/healthz", body, sizeof body), 200);
    ck_assert_str_eq (body, "ok");
    ck_assert_int_eq (s_get_text (hport, "/readyz", body, sizeof body), 200);
    ck_assert_str_eq (body, "ready");
    ck_assert_int_eq (s_get_text (hport, "/nope", NULL, 0), 404);
    ck_assert_int_eq (s_get_text (hport, "/metrics/", NULL, 0), 404);
    http_reply_t r;
    ck_assert_int_eq (s_http (hport, "POST", "/metrics", &r), 0);
    ck_assert_int_eq (r.status, 405);
    ck_assert_str_eq (r.allow, "GET, HEAD");
    s_http_free (&r);
    ck_assert_int_eq (s_http (hport, "DELETE", "/models", &r), 0);
    ck_assert_int_eq (r.status, 405);
    s_http_free (&r);
    ck_assert_int_eq (s_http (hport, "HEAD", "/metrics", &r), 0);
    ck_assert_int_eq (r.status, 200);
    ck_assert_uint_eq (r.len, 0);
    s_http_free (&r);

    ck_assert_int_eq (s_http (hport, "GET", "/models", &r), 0);
    ck_assert_int_eq (r.status, 200);
    ck_assert_str_eq (r.type, "application/json");
    cJSON *j = cJSON_Parse (r.body);
    ck_assert_ptr_nonnull (j);
    cJSON *list = cJSON_GetObjectItemCaseSensitive (j, "models");
    ck_assert_int_eq (cJSON_GetArraySize (list), 2);
    cJSON *tick = cJSON_GetArrayItem (list, 0), *odd = cJSON_GetArrayItem (list, 1);
    ck_assert_str_eq (cJSON_GetObjectItem (tick, "name")->valuestring, "tick_mlp");
    ck_assert_str_eq (cJSON_GetObjectItem (tick, "backend")->valuestring, "cpu");
    ck_assert_str_eq (cJSON_GetObjectItem (tick, "type")->valuestring, "mlp");
    ck_assert_int_eq (cJSON_GetObjectItem (tick, "input_size")->valueint, 512);
    ck_assert_int_eq (cJSON_GetObjectItem (tick, "output_size")->valueint, 1);
    ck_assert_int_eq (cJSON_GetObjectItem (tick, "max_rows")->valueint, 8);
    ck_assert (cJSON_IsTrue (cJSON_GetObjectItem (tick, "available")));
    ck_assert (cJSON_IsArray (cJSON_GetObjectItem (tick, "candidates")));
    ck_assert_str_eq (cJSON_GetObjectItem (odd, "name")->valuestring, "odd");
    ck_assert_int_eq (cJSON_GetObjectItem (odd, "input_size")->valueint, 33);
    ck_assert_int_eq (cJSON_GetObjectItem (odd, "output_size")->valueint, 3);
    cJSON *states = cJSON_GetObjectItem (tick, "instance_states");
    ck_assert_int_eq (cJSON_GetArraySize (states), cJSON_GetObjectItem (tick, "instances")->valueint);
    cJSON *i0 = cJSON_GetArrayItem (states, 0);
    ck_assert_str_eq (cJSON_GetObjectItem (i0, "state")->valuestring, "serving");
    ck_assert_int_eq (cJSON_GetObjectItem (i0, "device")->valueint, -1);
    ck_assert_int_eq (cJSON_GetObjectItem (i0, "requests")->valueint + (int) inlined, 100);
    cJSON_Delete (j);
    s_http_free (&r);

    s_stop (pid);
    free (config);
}
END_TEST

/* ---------------------------------------------------------------- placement */

/* The CPUs thread NAME of process PID may run on ("0", "0-1"), from /proc; -1 when no such thread. */
static int s_thread_cpus (pid_t pid, const char *name, char *out, size_t cap)
{
    char dir[64];
    snprintf (dir, sizeof dir, "/proc/%d/task", (int) pid);
    DIR *d = opendir (dir);
    struct dirent *e;
    int found = -1;
    while (d && found < 0 && (e = readdir (d)) != NULL) {
        char path[600], comm[64] = "", line[256];
        snprintf (path, sizeof path, "%s/%s/comm", dir, e->d_name);
        FILE *f = fopen (path, "r");
        if (!f)
            continue;
        if (fgets (comm, sizeof comm, f))
            comm[strcspn (comm, "\n")] = 0;
        fclose (f);
        if (strcmp (comm, name) != 0)
            continue;
        snprintf (path, sizeof path, "%s/%s/status", dir, e->d_name);
        f = fopen (path, "r");
        while (f && fgets (line, sizeof line, f))
            if (strncmp (line, "Cpus_allowed_list:", 18) == 0) {
                snprintf (out, cap, "%s", line + 18 + strspn (line + 18, " \t"));
                out[strcspn (out, "\n")] = 0;
                found = 0;
            }
        if (f)
            fclose (f);
    }
    if (d)
        closedir (d);
    return found;
}

/* The log line of PATH that contains WHAT, into LINE (without its newline); false when none. */
static bool s_log_line (const char *path, const char *what, char *line, size_t cap)
{
    FILE *f = fopen (path, "r");
    ck_assert_ptr_nonnull (f);
    bool found = false;
    while (!found && fgets (line, (int) cap, f))
        found = strstr (line, what) != NULL;
    fclose (f);
    if (found)
        line[strcspn (line, "\n")] = 0;
    return found;
}

START_TEST (a_cpu_lstm_is_placed_on_the_cpu_and_pinned_only_when_asked)
{
    /* Two CPU LSTM models: "seq" (two instances, no "cpus") and "pinned" ("cpus": [0]). Each
     * instance is on the CPU wherever the server reports it, the load line, /models and /metrics;
     * seq's workers run wherever the process may, pinned's on CPU 0 only. */
    const lstm_shape_t shape = { .layers = 1, .step_size = 3, .hidden = 4, .out = 2, .window = 4 };
    char path[4200], err[512];
    snprintf (path, sizeof path, "%s/seq.safetensors", s_dir);
    ck_assert_msg (lstm_random_file (path, &shape, 31, err, sizeof err) == 0, "%s", err);
    int zport, hport;
    s_ports (&zport, &hport);
    const char *models =
        "{ \"name\": \"seq\", \"type\": \"lstm\", \"backend\": \"cpu\", \"instances\": 2, \"weights\": \"seq.safetensors\", "
        "\"lstm\": \"lstm.\", \"window\": 4, \"head\": { \"weight\": \"head.weight\", \"bias\": \"head.bias\" } }, "
        "{ \"name\": \"pinned\", \"type\": \"lstm\", \"backend\": \"cpu\", \"cpus\": [0], \"weights\": \"seq.safetensors\", "
        "\"lstm\": \"lstm.\", \"window\": 4, \"head\": { \"weight\": \"head.weight\", \"bias\": \"head.bias\" } }";
    char *config = s_config ("lstm.json", zport, hport, "", models);
    char log_path[4200];
    snprintf (log_path, sizeof log_path, "%s/lstm.log", s_dir);
    pid_t pid = s_spawn (config, log_path, false);
    s_wait_ready (pid, hport);

    /* The load lines: "cpu" per instance, "on cpu N" only where "cpus" asks for it. */
    char line[4096];
    ck_assert_msg (s_log_line (log_path, "model seq version 1: ", line, sizeof line), "no load line for seq in %s",
                   log_path);
    ck_assert_msg (strstr (line, ", 2 instance(s) [cpu, cpu]") && !strstr (line, "gpu") && !strstr (line, "on cpu"),
                   "%s", line);
    ck_assert_msg (s_log_line (log_path, "model pinned version 1: ", line, sizeof line), "no load line for pinned");
    ck_assert_msg (strstr (line, ", 1 instance(s) [cpu on cpu 0]") && !strstr (line, "gpu"), "%s", line);

    /* /models: device -1 for every instance. */
    http_reply_t r;
    ck_assert_int_eq (s_http (hport, "GET", "/models", &r), 0);
    ck_assert_int_eq (r.status, 200);
    cJSON *j = cJSON_Parse (r.body);
    ck_assert_ptr_nonnull (j);
    int instances = 0;
    cJSON *m;
    cJSON_ArrayForEach (m, cJSON_GetObjectItem (j, "models")) {
        ck_assert_str_eq (cJSON_GetObjectItem (m, "type")->valuestring, "lstm");
        ck_assert_str_eq (cJSON_GetObjectItem (m, "backend")->valuestring, "cpu");
        cJSON *st;
        cJSON_ArrayForEach (st, cJSON_GetObjectItem (m, "instance_states")) {
            ck_assert_int_eq (cJSON_GetObjectItem (st, "device")->valueint, -1);
            ck_assert_str_eq (cJSON_GetObjectItem (st, "state")->valuestring, "serving");
            instances++;
        }
    }
    ck_assert_int_eq (instances, 3);
    cJSON_Delete (j);
    s_http_free (&r);

    /* One step on each of seq's instances (stream_id % 2), then /metrics: device="cpu" throughout. */
    void *s = s_dealer (zport);
    const float step[3] = { 0.1f, -0.2f, 0.3f };
    for (uint64_t stream = 2; stream <= 3; stream++) {
        Sigserve__V1__Request req = SIGSERVE__V1__REQUEST__INIT;
        Sigserve__V1__InferRequest inf = SIGSERVE__V1__INFER_REQUEST__INIT;
        inf.request_id = stream;
        inf.model = (char *) "seq";
        inf.features = (float *) step;
        inf.n_features = 3;
        inf.stream_id = stream;
        req.body_case = SIGSERVE__V1__REQUEST__BODY_INFER;
        req.infer = &inf;
        uint8_t buf[256];
        size_t len = sigserve__v1__request__pack (&req, buf);
        ck_assert_int_eq (zmq_send (s, buf, len, 0), (int) len);
        Sigserve__V1__Reply *whole;
        Sigserve__V1__InferReply *rep = s_recv (s, &whole);
        ck_assert_ptr_nonnull (rep);
        ck_assert_msg (rep->status == SIGSERVE__V1__STATUS__STATUS_OK, "%s", rep->error);
        ck_assert_uint_eq (rep->n_outputs, 2);
        sigserve__v1__reply__free_unpacked (whole, NULL);
    }
    zmq_close (s);
    expo_t e;
    s_scrape (hport, &e);
    for (int i = 0; i < 2; i++) {
        char labels[128];
        snprintf (labels, sizeof labels, "model=seq,instance=%d,device=cpu", i);
        ck_assert_double_eq (s_value (&e, "sigserve_instance_available", labels), 1);
        ck_assert_double_eq (s_value (&e, "sigserve_instance_requests_total", labels), 1);
    }
    ck_assert_double_eq (s_value (&e, "sigserve_instance_available", "model=pinned,instance=0,device=cpu"), 1);
    ck_assert_double_eq (s_value (&e, "sigserve_instance_requests_total", "model=pinned,instance=0,device=cpu"), 0);
    size_t with_device = 0;
    for (size_t i = 0; i < e.n; i++) {
        const char *device = s_label_of (&e.samples[i], "device");
        if (device) {
            ck_assert_msg (strcmp (device, "cpu") == 0, "%s has device=\"%s\"", e.samples[i].name, device);
            with_device++;
        }
    }
    ck_assert_uint_eq (with_device, 2 * 3);     /* available and requests_total, for 3 instances */
    s_expo_free (&e);

    /* Workers: seq's unpinned (the process's own CPUs), pinned's on CPU 0. */
    char own[256], cpus[256];
    snprintf (path, sizeof path, "/proc/%d/status", (int) pid);
    FILE *f = fopen (path, "r");
    own[0] = '\0';
    while (f && fgets (line, sizeof line, f))
        if (strncmp (line, "Cpus_allowed_list:", 18) == 0) {
            snprintf (own, sizeof own, "%s", line + 18 + strspn (line + 18, " \t"));
            own[strcspn (own, "\n")] = 0;
        }
    if (f)
        fclose (f);
    ck_assert_str_ne (own, "");
    for (int i = 0; i < 2; i++) {
        char name[32];
        snprintf (name, sizeof name, "w%d-seq", i);
        ck_assert_msg (s_thread_cpus (pid, name, cpus, sizeof cpus) == 0, "no thread %s", name);
        ck_assert_msg (strcmp (cpus, own) == 0, "%s may run on %s, the process on %s", name, cpus, own);
    }
    ck_assert_int_eq (s_thread_cpus (pid, "w0-pinned", cpus, sizeof cpus), 0);
    ck_assert_str_eq (cpus, "0");
    s_stop (pid);
    free (config);
}
END_TEST

/* ---------------------------------------------------------------- probes */

typedef enum { PROBE_REFUSED, PROBE_LOADING, PROBE_READY } probe_t;

START_TEST (readyz_503_while_models_load_then_200)
{
    /* 4096 x 4096 floats (64 MiB) to read, copy and warm: the load takes a while. */
    s_weights ("big.safetensors", 4096, 4096, 4, 21);
    int zport, hport;
    s_ports (&zport, &hport);
    char models[4096];
    snprintf (models, sizeof models, "%s, { \"name\": \"big\", \"backend\": \"cpu\", \"max_rows\": 3, "
              "\"weights\": \"big.safetensors\", \"layers\": [ { \"weight\": \"a.weight\", \"activation\": \"relu\" }, "
              "{ \"weight\": \"b.weight\" } ] }", s_tick);
    char *config = s_config ("big.json", zport, hport, "", models);
    pid_t pid = s_spawn (config, NULL, false);
    /* From the moment the process starts: refused (not yet listening), then 503 "loading models"
     * with /healthz 200, then 200 "ready"; never back. */
    probe_t last = PROBE_REFUSED;
    int loading = 0, ready = 0, scraped = 0;
    for (int i = 0; i < POLL_MAX * 10 && ready < 20; i++) {
        int status;
        ck_assert_msg (waitpid (pid, &status, WNOHANG) == 0, "sigserve exited while loading");
        char body[512];
        int code = s_get_text (hport, "/readyz", body, sizeof body);
        probe_t now = code == 0 ? PROBE_REFUSED : code == 200 ? PROBE_READY : PROBE_LOADING;
        ck_assert_msg (now >= last, "readiness went back from %d to %d (HTTP %d: %s)", last, now, code, body);
        if (now == PROBE_LOADING) {
            ck_assert_int_eq (code, 503);
            ck_assert_str_eq (body, "loading models");
            loading++;
        } else if (now == PROBE_READY) {
            ck_assert_str_eq (body, "ready");
            ready++;
        }
        if (now != PROBE_REFUSED) {
            ck_assert_int_eq (s_get_text (hport, "/healthz", body, sizeof body), 200);
            ck_assert_str_eq (body, "ok");
        }
        if (now == PROBE_LOADING && !scraped) {
            /* Metrics answer during the load too: no models to describe yet. */
            expo_t e;
            s_scrape (hport, &e);
            ck_assert_double_eq (s_value (&e, "sigserve_ready", ""), 0);
            ck_assert_uint_eq (s_count_samples (&e, "sigserve_model_available"), 0);
            ck_assert (s_family_find (&e, "sigserve_model_available") != NULL);
            s_check_histograms (&e);
            s_expo_free (&e);
            ck_assert_int_eq (s_get_text (hport, "/models", body, sizeof body), 503);
            /* The endpoints are bound before the models load: an infer request is answered at
             * once, UNAVAILABLE "loading", not left waiting for the port. */
            void *d = s_dealer (zport);
            float f[512] = { 0.5f };
            s_send (d, "tick_mlp", f, 512, 1, 77);
            Sigserve__V1__Reply *whole;
            Sigserve__V1__InferReply *rep = s_recv (d, &whole);
            ck_assert_ptr_nonnull (rep);
            if (rep->status == SIGSERVE__V1__STATUS__STATUS_UNAVAILABLE)
                ck_assert_str_eq (rep->error, "loading: this sigserve is still loading and warming its models; retry "
                                              "shortly (health says ready once it serves)");
            else    /* the load ended between the probe and the request: then it is served */
                ck_assert_int_eq (rep->status, SIGSERVE__V1__STATUS__STATUS_OK);
            ck_assert_uint_eq (rep->request_id, 77);
            sigserve__v1__reply__free_unpacked (whole, NULL);
            zmq_close (d);
            scraped = 1;
        }
        last = now;
        if (now == PROBE_REFUSED)
            usleep (200);
    }
    ck_assert_msg (loading > 0, "never saw 503 while the models loaded");
    ck_assert_int_eq (ready, 20);
    ck_assert (scraped);
    s_stop (pid);
    free (config);
}
END_TEST

START_TEST (readyz_503_draining_after_sigterm)
{
    s_weights ("slow.safetensors", 1024, 1024, 1024, 12);
    int zport, hport;
    s_ports (&zport, &hport);
    const char *slow = "{ \"name\": \"slow\", \"backend\": \"cpu\", \"max_rows\": 15, \"queue_depth\": 512, \"max_queue_us\": 60000000, "
                       "\"weights\": \"slow.safetensors\", \"layers\": [ { \"weight\": \"a.weight\", "
                       "\"activation\": \"relu\" }, { \"weight\": \"b.weight\" } ] }";
    char *config = s_config ("drain.json", zport, hport, ", \"drain_ms\": 120000", slow);
    pid_t pid = s_spawn (config, NULL, false);
    s_wait_ready (pid, hport);
    /* 150 requests of 15 rows through 1024 x 1024 x 2: seconds of work for one core (max_queue_us lets
     * them all wait). */
    enum { N = 150 };
    float *f = malloc (15 * 1024 * sizeof (float));
    for (int i = 0; i < 15 * 1024; i++)
        f[i] = (float) ((i * 7) % 13 - 6) / 6.0f;
    void *s = s_dealer (zport);
    for (uint64_t id = 0; id < N; id++)
        s_send (s, "slow", f, 15 * 1024, 15, id);
    Sigserve__V1__Reply *whole;
    Sigserve__V1__InferReply *r = s_recv (s, &whole);
    ck_assert_ptr_nonnull (r);
    ck_assert_int_eq (r->status, SIGSERVE__V1__STATUS__STATUS_OK);
    sigserve__v1__reply__free_unpacked (whole, NULL);
    char body[512];
    ck_assert_int_eq (s_get_text (hport, "/readyz", body, sizeof body), 200);

    kill (pid, SIGTERM);
    int code = 200;
    for (int i = 0; i < POLL_MAX && code == 200; i++)
        if ((code = s_get_text (hport, "/readyz", body, sizeof body)) == 200)
            usleep (200);
    ck_assert_int_eq (code, 503);
    ck_assert_str_eq (body, "draining");
    ck_assert_int_eq (s_get_text (hport, "/healthz", body, sizeof body), 200);
    /* Still draining: the slow requests are not all answered yet, and the endpoint still reports. */
    expo_t e;
    s_scrape (hport, &e);
    ck_assert_double_lt (s_value (&e, "sigserve_requests_total", "model=slow,status=ok"), N);
    ck_assert_double_eq (s_value (&e, "sigserve_ready", ""), 0);
    s_expo_free (&e);

    int ok = 1, unavailable = 0;
    for (int i = 1; i < N; i++) {
        r = s_recv (s, &whole);
        ck_assert_msg (r != NULL, "reply %d of %d missing", i, N);
        if (r->status == SIGSERVE__V1__STATUS__STATUS_OK)
            ok++;
        else {
            ck_assert_int_eq (r->status, SIGSERVE__V1__STATUS__STATUS_UNAVAILABLE);
            unavailable++;
        }
        sigserve__v1__reply__free_unpacked (whole, NULL);
    }
    ck_assert_int_eq (ok + unavailable, N);
    ck_assert_int_gt (ok, 1);
    int status;
    ck_assert_int_eq (waitpid (pid, &status, 0), pid);
    ck_assert (WIFEXITED (status) && WEXITSTATUS (status) == 0);
    zmq_close (s);
    free (f);
    free (config);
}
END_TEST

START_TEST (http_bind_failure_exits_2)
{
    int zport, hport;
    s_ports (&zport, &hport);
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) hport) };
    a.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    ck_assert_int_eq (bind (fd, (struct sockaddr *) &a, sizeof a), 0);
    ck_assert_int_eq (listen (fd, 1), 0);
    char *config = s_config ("busy.json", zport, hport, "", s_tick);
    char cmd[8192], out[8192];
    snprintf (cmd, sizeof cmd, "%s/sigserve --config %s 2>&1", tu_build_dir (), config);
    FILE *p = popen (cmd, "r");
    size_t n = fread (out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int st = pclose (p);
    ck_assert_msg (WIFEXITED (st) && WEXITSTATUS (st) == 2, "exit %d: %s", WEXITSTATUS (st), out);
    char want[256];
    snprintf (want, sizeof want, "server.http: cannot bind 127.0.0.1:%d: Address already in use", hport);
    ck_assert_msg (strstr (out, want) && strstr (out, config), "%s", out);
    close (fd);
    free (config);
}
END_TEST

/* ---------------------------------------------------------------- reload under traffic */

#define STREAM_MAX (1u << 20)

/* One DEALER pipelining requests for MODEL (WINDOW in flight) until told to stop (or, with
 * STOP_AFTER_UNKNOWN, until that many UNKNOWN_MODEL replies came), then collecting what is still
 * out. Request ids count up from 0 on this one connection, so they are admitted in order. */
typedef struct {
    int zport;
    const char *model;
    const float *features;
    size_t n;
    int window;
    int stop_after_unknown;
    _Atomic int stop;
    _Atomic uint64_t replies;
    uint64_t sent, ok, unknown, other, max_ok_id, min_unknown_id;
    bool failed;
    char why[256];
    char unknown_error[256];
} stream_t;

static void *s_stream (void *arg)
{
    stream_t *st = arg;
    void *s = s_dealer (st->zport);
    char *seen = calloc (STREAM_MAX, 1);
    st->min_unknown_id = UINT64_MAX;
    for (; st->sent < (uint64_t) st->window; st->sent++)
        s_send (s, st->model, st->features, st->n, 1, st->sent);
    while (atomic_load (&st->replies) < st->sent) {
        Sigserve__V1__Reply *whole;
        Sigserve__V1__InferReply *r = s_recv (s, &whole);
        if (!r) {
            snprintf (st->why, sizeof st->why, "no reply after %llu of %llu", (unsigned long long) st->replies,
                      (unsigned long long) st->sent);
            st->failed = true;
            break;
        }
        uint64_t id = r->request_id;
        if (id >= st->sent || seen[id]) {
            snprintf (st->why, sizeof st->why, "reply for id %llu (sent %llu) twice or never sent",
                      (unsigned long long) id, (unsigned long long) st->sent);
            st->failed = true;
        } else
            seen[id] = 1;
        if (r->status == SIGSERVE__V1__STATUS__STATUS_OK) {
            st->ok++;
            if (id > st->max_ok_id || st->ok == 1)
                st->max_ok_id = id;
        } else if (r->status == SIGSERVE__V1__STATUS__STATUS_UNKNOWN_MODEL) {
            st->unknown++;
            if (id < st->min_unknown_id)
                st->min_unknown_id = id;
            snprintf (st->unknown_error, sizeof st->unknown_error, "%s", r->error);
        } else {
            st->other++;
            snprintf (st->why, sizeof st->why, "id %llu: status %d: %s", (unsigned long long) id, r->status, r->error);
        }
        sigserve__v1__reply__free_unpacked (whole, NULL);
        atomic_fetch_add (&st->replies, 1);
        bool stopping = atomic_load (&st->stop)
                        || (st->stop_after_unknown && st->unknown >= (uint64_t) st->stop_after_unknown);
        if (!stopping && st->sent < STREAM_MAX)
            s_send (s, st->model, st->features, st->n, 1, st->sent++);
    }
    free (seen);
    zmq_close (s);
    return NULL;
}

static void s_wait_replies (stream_t *st, uint64_t at_least)
{
    for (int i = 0; i < POLL_MAX && atomic_load (&st->replies) < at_least && !st->failed; i++)
        usleep (POLL_US);
    ck_assert_msg (atomic_load (&st->replies) >= at_least, "the stream stalled at %llu replies",
                   (unsigned long long) atomic_load (&st->replies));
}

static bool s_models_has (int hport, const char *name)
{
    http_reply_t r;
    ck_assert_int_eq (s_http (hport, "GET", "/models", &r), 0);
    ck_assert_int_eq (r.status, 200);
    cJSON *j = cJSON_Parse (r.body);
    ck_assert_ptr_nonnull (j);
    bool has = false;
    cJSON *m;
    cJSON_ArrayForEach (m, cJSON_GetObjectItem (j, "models"))
        has |= strcmp (cJSON_GetObjectItem (m, "name")->valuestring, name) == 0;
    cJSON_Delete (j);
    s_http_free (&r);
    return has;
}

/* The log file's lines, each parsed (the caller deletes them); fails on a line that is not JSON
 * with ts, level and msg. */
static size_t s_json_log (const char *path, cJSON **lines, size_t cap)
{
    FILE *f = fopen (path, "r");
    ck_assert_ptr_nonnull (f);
    size_t n = 0;
    char *line = NULL;
    size_t len = 0;
    ssize_t got;
    while ((got = getline (&line, &len, f)) > 0) {
        ck_assert_msg (line[got - 1] == '\n', "a log line without its newline: %s", line);
        cJSON *j = cJSON_Parse (line);
        ck_assert_msg (j != NULL && cJSON_IsObject (j), "not a JSON object: %s", line);
        ck_assert_msg (cJSON_IsString (cJSON_GetObjectItem (j, "ts")) && cJSON_IsString (cJSON_GetObjectItem (j, "level"))
                       && cJSON_IsString (cJSON_GetObjectItem (j, "msg")), "ts, level or msg missing: %s", line);
        const char *level = cJSON_GetObjectItem (j, "level")->valuestring;
        ck_assert_msg (strcmp (level, "error") == 0 || strcmp (level, "warn") == 0 || strcmp (level, "info") == 0
                       || strcmp (level, "debug") == 0, "level %s", level);
        ck_assert_uint_eq (strlen (cJSON_GetObjectItem (j, "ts")->valuestring), strlen ("2026-11-23T19:20:35.123456Z"));
        if (n < cap)
            lines[n++] = j;
        else
            cJSON_Delete (j);
    }
    free (line);
    fclose (f);
    return n;
}

static bool s_log_has_stats_line (const char *path, const char *model)
{
    cJSON *lines[4096];
    size_t n = s_json_log (path, lines, 4096);
    bool found = false;
    for (size_t i = 0; i < n; i++) {
        cJSON *fields = cJSON_GetObjectItem (lines[i], "fields");
        if (strcmp (cJSON_GetObjectItem (lines[i], "msg")->valuestring, "stats") == 0 && fields
            && strcmp (cJSON_GetObjectItem (fields, "model")->valuestring, model) == 0) {
            ck_assert (cJSON_IsNumber (cJSON_GetObjectItem (fields, "requests")));
            ck_assert_double_gt (cJSON_GetObjectItem (fields, "requests")->valuedouble, 0);
            ck_assert_double_gt (cJSON_GetObjectItem (fields, "rate_per_s")->valuedouble, 0);
            double p50 = cJSON_GetObjectItem (fields, "server_p50_us")->valuedouble;
            double p99 = cJSON_GetObjectItem (fields, "server_p99_us")->valuedouble;
            ck_assert_msg (p50 >= 0 && p50 <= p99, "p50 %g, p99 %g", p50, p99);
            found |= p50 > 0;
        }
    }
    for (size_t i = 0; i < n; i++)
        cJSON_Delete (lines[i]);
    return found;
}

/* The features the reload tests send: F for tick_mlp (512), G for odd (33). */
static void s_reload_features (float *f, float *g)
{
    for (int i = 0; i < 512; i++)
        f[i] = (float) ((i % 11) - 5) / 5.0f;
    for (int i = 0; i < 33; i++)
        g[i] = (float) (i % 5) / 5.0f;
}

START_TEST (reload_adds_removes_and_survives_a_broken_file)
{
    int zport, hport;
    s_ports (&zport, &hport);
    const char *extra = ", \"log_format\": \"json\", \"stats_interval_s\": 1";
    char *config = s_config ("reload.json", zport, hport, extra, s_tick);
    char log_path[4096];
    snprintf (log_path, sizeof log_path, "%s/reload.log", s_dir);
    pid_t pid = s_spawn (config, log_path, false);
    s_wait_ready (pid, hport);
    float f[512], g[33];
    s_reload_features (f, g);

    /* 1. A model added while a pipelined stream to another one runs: every request answered OK. */
    stream_t tick = { .zport = zport, .model = "tick_mlp", .features = f, .n = 512, .window = 32 };
    pthread_t th;
    pthread_create (&th, NULL, s_stream, &tick);
    s_wait_replies (&tick, 500);
    char models[4096];
    snprintf (models, sizeof models, "%s, %s", s_tick, s_odd);
    free (s_config ("reload.json", zport, hport, extra, models));
    kill (pid, SIGHUP);
    ck_assert_double_eq (s_wait_metric (hport, "sigserve_config_reloads_total", "result=ok", 1), 1);
    uint64_t at_reload = atomic_load (&tick.replies);
    s_wait_replies (&tick, at_reload + 500);
    atomic_store (&tick.stop, 1);
    pthread_join (th, NULL);
    ck_assert_msg (!tick.failed && tick.other == 0, "%s", tick.why);
    ck_assert_uint_eq (tick.ok, tick.sent);
    ck_assert_uint_eq (atomic_load (&tick.replies), tick.sent);
    ck_assert (s_models_has (hport, "odd"));

    /* 2. The model removed while a stream to it runs: requests admitted before the switch are
     * answered OK, those after it UNKNOWN_MODEL, none lost and none out of order. */
    stream_t odd = { .zport = zport, .model = "odd", .features = g, .n = 33, .window = 16,
                     .stop_after_unknown = 50 };
    pthread_create (&th, NULL, s_stream, &odd);
    s_wait_replies (&odd, 300);
    free (s_config ("reload.json", zport, hport, extra, s_tick));
    kill (pid, SIGHUP);
    pthread_join (th, NULL);
    ck_assert_msg (!odd.failed && odd.other == 0, "%s", odd.why);
    ck_assert_uint_eq (atomic_load (&odd.replies), odd.sent);
    ck_assert_uint_eq (odd.ok + odd.unknown, odd.sent);
    ck_assert_uint_ge (odd.ok, 300);
    ck_assert_uint_ge (odd.unknown, 50);
    ck_assert_uint_lt (odd.max_ok_id, odd.min_unknown_id);
    ck_assert_str_eq (odd.unknown_error, "model: \"odd\" is not served here (served: tick_mlp)");
    ck_assert_double_eq (s_wait_metric (hport, "sigserve_config_reloads_total", "result=ok", 2), 2);
    ck_assert (!s_models_has (hport, "odd"));
    expo_t e;
    s_scrape (hport, &e);
    ck_assert_double_eq (s_value (&e, "sigserve_requests_total", "model=odd,status=ok"), (double) odd.ok);
    ck_assert_double_eq (s_value (&e, "sigserve_requests_total", "model=_unknown,status=unknown_model"),
                         (double) odd.unknown);
    ck_assert_double_eq (s_value (&e, "sigserve_requests_total", "model=tick_mlp,status=ok"), (double) tick.ok);
    ck_assert (isnan (s_value (&e, "sigserve_model_available", "model=odd")));
    ck_assert_double_eq (s_value (&e, "sigserve_model_available", "model=tick_mlp"), 1);
    s_check_histograms (&e);
    s_expo_free (&e);

    /* 3. A broken file: nothing changes, the error is counted and logged with the file and key. */
    char *broken = s_config ("reload.json", zport, hport, ", \"log_format\": \"json\", \"bogus_key\": 1", s_tick);
    kill (pid, SIGHUP);
    ck_assert_double_eq (s_wait_metric (hport, "sigserve_config_reloads_total", "result=error", 1), 1);
    s_scrape (hport, &e);
    ck_assert_double_eq (s_value (&e, "sigserve_config_reloads_total", "result=ok"), 2);
    ck_assert_double_eq (s_value (&e, "sigserve_config_reloads_total", "result=error"), 1);
    ck_assert_double_eq (s_value (&e, "sigserve_ready", ""), 1);
    s_expo_free (&e);
    void *s = s_dealer (zport);
    s_send (s, "tick_mlp", f, 512, 1, 7);
    Sigserve__V1__Reply *whole;
    Sigserve__V1__InferReply *r = s_recv (s, &whole);
    ck_assert_ptr_nonnull (r);
    ck_assert_int_eq (r->status, SIGSERVE__V1__STATUS__STATUS_OK);
    sigserve__v1__reply__free_unpacked (whole, NULL);
    zmq_close (s);
    char body[256];
    ck_assert_int_eq (s_get_text (hport, "/readyz", body, sizeof body), 200);

    /* 4. The logs: a stats line for the model with traffic (stats_interval_s 1), every line JSON. */
    bool stats = false;
    for (int i = 0; i < POLL_MAX / 10 && !stats; i++) {
        stats = s_log_has_stats_line (log_path, "tick_mlp");
        if (!stats)
            usleep (POLL_US * 10);
    }
    ck_assert_msg (stats, "no stats line for tick_mlp");
    s_stop (pid);
    cJSON *lines[4096];
    size_t n = s_json_log (log_path, lines, 4096);
    bool named = false;
    char key[300];
    snprintf (key, sizeof key, "%s: server.bogus_key: unknown key", broken);
    int reloads_logged = 0;
    for (size_t i = 0; i < n; i++) {
        const char *msg = cJSON_GetObjectItem (lines[i], "msg")->valuestring;
        const char *level = cJSON_GetObjectItem (lines[i], "level")->valuestring;
        if (strcmp (level, "error") == 0 && strstr (msg, "reload failed") && strstr (msg, key))
            named = true;
        reloads_logged += strncmp (msg, "reload: serving ", 16) == 0;
        cJSON_Delete (lines[i]);
    }
    ck_assert_msg (named, "no error line naming \"%s\" in %s", key, log_path);
    ck_assert_int_eq (reloads_logged, 2);
    free (broken);
    free (config);
}
END_TEST

/* Two fronts (a front each on two endpoints), a pipelined stream on each: a reload adding a model
 * and a third endpoint (served by one of them at once), then one removing the model and the first
 * endpoint. Every request of the streams is answered OK, the new endpoint answers, the removed
 * model's set is unloaded once (both fronts let go of it), and SIGTERM exits 0. */
START_TEST (reload_with_two_fronts)
{
    int hport, z[3];
    s_ports (&z[0], &hport);
    do
        z[1] = tu_free_port ();
    while (z[1] == z[0] || z[1] == hport);
    do
        z[2] = tu_free_port ();
    while (z[2] == z[0] || z[2] == z[1] || z[2] == hport);
    const char *extra = ", \"fronts\": 2";
    char *config = s_config_on ("fronts.json", z, 2, hport, extra, s_tick);
    char log_path[4096];
    snprintf (log_path, sizeof log_path, "%s/fronts.log", s_dir);
    pid_t pid = s_spawn (config, log_path, false);
    s_wait_ready (pid, hport);
    float f[512], g[33];
    s_reload_features (f, g);
    stream_t st[2] = { { .zport = z[0], .model = "tick_mlp", .features = f, .n = 512, .window = 32 },
                       { .zport = z[1], .model = "tick_mlp", .features = f, .n = 512, .window = 32 } };
    pthread_t th[2];
    for (int k = 0; k < 2; k++)
        pthread_create (&th[k], NULL, s_stream, &st[k]);
    s_wait_replies (&st[0], 500);
    s_wait_replies (&st[1], 500);
    /* 1. a model and an endpoint added */
    char models[4096];
    snprintf (models, sizeof models, "%s, %s", s_tick, s_odd);
    free (s_config_on ("fronts.json", z, 3, hport, extra, models));
    kill (pid, SIGHUP);
    ck_assert_double_eq (s_wait_metric (hport, "sigserve_config_reloads_total", "result=ok", 1), 1);
    for (int k = 0; k < 2; k++)
        s_wait_replies (&st[k], atomic_load (&st[k].replies) + 500);
    void *s = s_dealer (z[2]);
    s_send (s, "odd", g, 33, 1, 9);
    Sigserve__V1__Reply *whole;
    Sigserve__V1__InferReply *r = s_recv (s, &whole);
    ck_assert_ptr_nonnull (r);
    ck_assert_msg (r->status == SIGSERVE__V1__STATUS__STATUS_OK, "%s", r->error);
    ck_assert_uint_eq (r->request_id, 9);
    sigserve__v1__reply__free_unpacked (whole, NULL);
    zmq_close (s);
    /* 2. the model and the first endpoint removed (its stream stopped first) */
    atomic_store (&st[0].stop, 1);
    pthread_join (th[0], NULL);
    free (s_config_on ("fronts.json", z + 1, 2, hport, extra, s_tick));
    kill (pid, SIGHUP);
    ck_assert_double_eq (s_wait_metric (hport, "sigserve_config_reloads_total", "result=ok", 2), 2);
    s_wait_replies (&st[1], atomic_load (&st[1].replies) + 500);
    atomic_store (&st[1].stop, 1);
    pthread_join (th[1], NULL);
    for (int k = 0; k < 2; k++) {
        ck_assert_msg (!st[k].failed && st[k].other == 0, "stream %d: %s", k, st[k].why);
        ck_assert_uint_eq (st[k].ok, st[k].sent);
    }
    ck_assert (!s_models_has (hport, "odd"));
    /* the removed model's set, unloaded once: both fronts let go of it */
    int unloaded = 0;
    for (int i = 0; i < POLL_MAX && unloaded == 0; i++) {
        FILE *lf = fopen (log_path, "r");
        char line[2048];
        unloaded = 0;
        while (lf && fgets (line, sizeof line, lf))
            unloaded += strstr (line, "reload: 1 model(s) no longer served are unloaded") != NULL;
        if (lf)
            fclose (lf);
        if (!unloaded)
            usleep (POLL_US);
    }
    s_stop (pid);
    FILE *lf = fopen (log_path, "r");
    char line[2048];
    int fronts_named = 0;
    unloaded = 0;
    while (lf && fgets (line, sizeof line, lf)) {
        unloaded += strstr (line, "no longer served are unloaded") != NULL;
        fronts_named += strstr (line, "front 0: ") != NULL || strstr (line, "front 1: ") != NULL;
    }
    if (lf)
        fclose (lf);
    ck_assert_int_eq (unloaded, 1);
    ck_assert_int_eq (fronts_named, 2);
    free (config);
}
END_TEST

START_TEST (watch_reloads_when_the_file_changes)
{
    int zport, hport;
    s_ports (&zport, &hport);
    char *config = s_config ("watch.json", zport, hport, "", s_tick);
    pid_t pid = s_spawn (config, NULL, true);
    s_wait_ready (pid, hport);
    ck_assert (!s_models_has (hport, "odd"));
    char models[4096];
    snprintf (models, sizeof models, "%s, %s", s_tick, s_odd);
    free (s_config ("watch.json", zport, hport, "", models));     /* no signal: --watch sees it */
    ck_assert_double_eq (s_wait_metric (hport, "sigserve_config_reloads_total", "result=ok", 1), 1);
    ck_assert (s_models_has (hport, "odd"));
    char body[256];
    ck_assert_int_eq (s_get_text (hport, "/readyz", body, sizeof body), 200);
    s_stop (pid);
    free (config);
}
END_TEST

/* While a reload loads a big model aside (holding the server lock), /readyz keeps answering from
 * the readiness seen when it began (the old models serve meanwhile) and /metrics answers without
 * the per-model gauges; neither waits for the load. */
START_TEST (probes_answer_during_a_reload)
{
    int zport, hport;
    s_ports (&zport, &hport);
    char *config = s_config ("during.json", zport, hport, "", s_tick);
    pid_t pid = s_spawn (config, NULL, false);
    s_wait_ready (pid, hport);
    s_weights ("big.safetensors", 4096, 4096, 4, 21);
    char models[4096];
    snprintf (models, sizeof models, "%s, { \"name\": \"big\", \"backend\": \"cpu\", \"max_rows\": 3, "
              "\"weights\": \"big.safetensors\", \"layers\": [ { \"weight\": \"a.weight\", \"activation\": \"relu\" }, "
              "{ \"weight\": \"b.weight\" } ] }", s_tick);
    free (s_config ("during.json", zport, hport, "", models));
    kill (pid, SIGHUP);
    int during = 0, polls = 0;
    double reloaded = 0;
    for (; polls < POLL_MAX && reloaded < 1; polls++) {
        char body[512];
        ck_assert_int_eq (s_get_text (hport, "/readyz", body, sizeof body), 200);
        ck_assert_str_eq (body, "ready");
        expo_t e;
        s_scrape (hport, &e);
        reloaded = s_value (&e, "sigserve_config_reloads_total", "result=ok");
        if (s_value (&e, "sigserve_reload_in_progress", "") == 1) {
            during++;
            ck_assert_uint_eq (s_count_samples (&e, "sigserve_model_available"), 0);
            ck_assert_double_eq (s_value (&e, "sigserve_ready", ""), 1);
            /* tick_mlp's and _unknown's counters; big's too once the load has taken its stats
             * slot, which may be before or after this scrape */
            size_t samples = s_count_samples (&e, "sigserve_requests_total");
            ck_assert_msg (samples == 2 * 9 || samples == 3 * 9, "%zu requests_total samples", samples);
        } else if (reloaded < 1)
            ck_assert_double_eq (s_value (&e, "sigserve_model_available", "model=tick_mlp"), 1);
        s_expo_free (&e);
    }
    ck_assert_double_eq (reloaded, 1);
    ck_assert_msg (during > 0, "no scrape during the reload (%d polls)", polls);
    ck_assert (s_models_has (hport, "big"));
    expo_t e;
    s_scrape (hport, &e);
    ck_assert_double_eq (s_value (&e, "sigserve_model_available", "model=big"), 1);
    ck_assert_double_eq (s_value (&e, "sigserve_reload_in_progress", ""), 0);
    s_expo_free (&e);
    s_stop (pid);
    free (config);
}
END_TEST

/* ---------------------------------------------------------------- log lines, in process */

static bool s_utf8_valid (const char *s)
{
    const unsigned char *p = (const unsigned char *) s;
    while (*p) {
        int n = *p < 0x80 ? 1 : (*p >> 5) == 6 ? 2 : (*p >> 4) == 14 ? 3 : (*p >> 3) == 30 ? 4 : 0;
        if (n == 0)
            return false;
        for (int i = 1; i < n; i++)
            if ((p[i] & 0xc0) != 0x80)
                return false;
        p += n;
    }
    return true;
}

/* Runs the log calls of WHICH with stderr in a file; the lines written. */
static size_t s_capture (void (*which) (void), char lines[][16384], size_t cap)
{
    char path[4096];
    snprintf (path, sizeof path, "%s/capture.log", s_dir);
    int fd = open (path, O_CREAT | O_TRUNC | O_WRONLY, 0600), saved = dup (STDERR_FILENO);
    ck_assert (fd >= 0 && saved >= 0);
    dup2 (fd, STDERR_FILENO);
    which ();
    dup2 (saved, STDERR_FILENO);
    close (saved);
    close (fd);
    FILE *f = fopen (path, "r");
    size_t n = 0;
    while (n < cap && fgets (lines[n], 16384, f)) {
        size_t len = strlen (lines[n]);
        ck_assert_msg (len > 0 && lines[n][len - 1] == '\n', "line %zu cut or without a newline", n);
        n++;
    }
    fclose (f);
    return n;
}

static char s_long_msg[12000];

static void s_log_calls (void)
{
    log_set_level (LOG_LEVEL_DEBUG);
    log_write (LOG_LEVEL_INFO, "quote \" backslash \\ newline \n tab \t bell \x07 del \x7f end");
    log_write (LOG_LEVEL_WARN, "bad utf-8: \xff|\xc3|\xc0\x80|\xed\xa0\x80|\xf4\x90\x80\x80| ok: \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
    log_write (LOG_LEVEL_ERROR, "%s", s_long_msg);
    log_write_fields (LOG_LEVEL_INFO, "stats", "\"model\":\"m\",\"requests\":3");
    log_write_fields (LOG_LEVEL_INFO, "bad \"fields\"", "\"model\":oops");
    log_debug ("debug %d", 1);
    log_write_fields (LOG_LEVEL_INFO, "two objects", "\"a\":1},{\"b\":2");
}

START_TEST (log_lines_are_json_whatever_the_message)
{
    /* A message far over the buffers: 'a' then 3-byte characters, so every cut point but one in
     * three falls inside a character. */
    size_t n = 0;
    s_long_msg[n++] = 'a';
    while (n + 3 < sizeof s_long_msg) {
        memcpy (s_long_msg + n, "\xe2\x82\xac", 3);
        n += 3;
    }
    s_long_msg[n] = '\0';
    static char lines[8][16384];

    log_set_format (LOG_FORMAT_JSON);
    size_t count = s_capture (s_log_calls, lines, 8);
    ck_assert_uint_eq (count, 7);
    cJSON *j[7];
    for (size_t i = 0; i < count; i++) {
        j[i] = cJSON_Parse (lines[i]);
        ck_assert_msg (j[i] != NULL, "line %zu is not JSON: %s", i, lines[i]);
        ck_assert (cJSON_IsString (cJSON_GetObjectItem (j[i], "ts")));
        ck_assert (s_utf8_valid (cJSON_GetObjectItem (j[i], "msg")->valuestring));
    }
    ck_assert_str_eq (cJSON_GetObjectItem (j[0], "level")->valuestring, "info");
    ck_assert_str_eq (cJSON_GetObjectItem (j[0], "msg")->valuestring,
                      "quote \" backslash \\ newline \n tab \t bell \x07 del \x7f end");
    ck_assert_str_eq (cJSON_GetObjectItem (j[1], "level")->valuestring, "warn");
    ck_assert_str_eq (cJSON_GetObjectItem (j[1], "msg")->valuestring,
                      "bad utf-8: \xef\xbf\xbd|\xef\xbf\xbd|\xef\xbf\xbd\xef\xbf\xbd|\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd|"
                      "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd| ok: \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
    const char *cut = cJSON_GetObjectItem (j[2], "msg")->valuestring;
    size_t cut_len = strlen (cut);
    ck_assert_uint_gt (cut_len, 3000);
    ck_assert_uint_lt (cut_len, strlen (s_long_msg));
    ck_assert_str_eq (cut + cut_len - 3, "...");
    ck_assert_int_eq (strncmp (cut, s_long_msg, cut_len - 3), 0);
    ck_assert_uint_eq ((cut_len - 3 - 1) % 3, 0);    /* whole characters only */
    cJSON *fields = cJSON_GetObjectItem (j[3], "fields");
    ck_assert_str_eq (cJSON_GetObjectItem (fields, "model")->valuestring, "m");
    ck_assert_int_eq (cJSON_GetObjectItem (fields, "requests")->valueint, 3);
    ck_assert_str_eq (cJSON_GetObjectItem (j[4], "msg")->valuestring, "bad \"fields\"");
    ck_assert_str_eq (cJSON_GetObjectItem (j[4], "fields_raw")->valuestring, "\"model\":oops");
    ck_assert_str_eq (cJSON_GetObjectItem (j[5], "level")->valuestring, "debug");
    ck_assert_str_eq (cJSON_GetObjectItem (j[6], "fields_raw")->valuestring, "\"a\":1},{\"b\":2");
    for (size_t i = 0; i < count; i++)
        cJSON_Delete (j[i]);

    /* Text lines: one line per call (a newline in a message cannot start a line of its own). */
    log_set_format (LOG_FORMAT_TEXT);
    count = s_capture (s_log_calls, lines, 8);
    ck_assert_uint_eq (count, 7);
    ck_assert_ptr_nonnull (strstr (lines[0], " info  quote \" backslash \\ newline \\n tab \\t bell \\x07 del \\x7f end\n"));
    ck_assert_ptr_nonnull (strstr (lines[3], " info  stats model=m requests=3\n"));
    ck_assert_ptr_nonnull (strstr (lines[2], "...\n"));
    ck_assert (s_utf8_valid (lines[2]));
}
END_TEST

int main (void)
{
    Suite *s = suite_create ("ops");
    TCase *tc = tcase_create ("ops");
    tcase_add_checked_fixture (tc, s_setup, s_teardown);
    tcase_set_timeout (tc, 180);
    tcase_add_test (tc, log_lines_are_json_whatever_the_message);
    tcase_add_test (tc, metrics_counts_exact_and_exposition_strict);
    tcase_add_test (tc, a_cpu_lstm_is_placed_on_the_cpu_and_pinned_only_when_asked);
    tcase_add_test (tc, readyz_503_while_models_load_then_200);
    tcase_add_test (tc, readyz_503_draining_after_sigterm);
    tcase_add_test (tc, http_bind_failure_exits_2);
    tcase_add_test (tc, reload_adds_removes_and_survives_a_broken_file);
    tcase_add_test (tc, reload_with_two_fronts);
    tcase_add_test (tc, watch_reloads_when_the_file_changes);
    tcase_add_test (tc, probes_answer_during_a_reload);
    suite_add_tcase (s, tc);
    return tu_run_suite (s);
}
