/* The table-driven JSON reader under config.c (config_walk.h): messages with the JSON path, and the
 * walker that reads an object against a table of rows. */
#include "base/config_walk.h"

#include "base/config.h"

#include <assert.h>
#include <cJSON.h>
#include <ctype.h>
#include <stdint.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---------------------------------------------------------------- messages */

int config_fail (parser_t *p, const char *fmt, ...)
{
    if (!p->err || p->errlen == 0)
        return -1;
    char problem[1024];
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (problem, sizeof problem, fmt, ap);
    va_end (ap);
    if (p->path[0])
        snprintf (p->err, p->errlen, "%s: %s: %s", p->file, p->path, problem);
    else
        snprintf (p->err, p->errlen, "%s: %s", p->file, problem);
    return -1;
}

/* Appends ".KEY" (or "KEY" at the top) to the path; returns the length to pop back to. */
size_t config_path_push_key (parser_t *p, const char *key)
{
    size_t mark = strlen (p->path);
    snprintf (p->path + mark, sizeof p->path - mark, "%s%s", mark ? "." : "", key);
    return mark;
}

size_t config_path_push_index (parser_t *p, size_t index)
{
    size_t mark = strlen (p->path);
    snprintf (p->path + mark, sizeof p->path - mark, "[%zu]", index);
    return mark;
}

void config_path_pop (parser_t *p, size_t mark) { p->path[mark] = '\0'; }

/* What a value is, for "got ..." when its type is wrong. */
const char *config_kind (const cJSON *v)
{
    if (cJSON_IsString (v)) return "a string";
    if (cJSON_IsNumber (v)) return "a number";
    if (cJSON_IsBool (v)) return "a boolean";
    if (cJSON_IsNull (v)) return "null";
    if (cJSON_IsArray (v)) return "an array";
    if (cJSON_IsObject (v)) return "an object";
    return "an invalid value";
}

/* S in double quotes with JSON escapes, cut (with "...") so a message stays readable. */
const char *config_quote (const char *s, char *buf, size_t size)
{
    size_t n = 0;
    buf[n++] = '"';
    for (; *s; s++) {
        if (n + 12 >= size) {           /* room for one escape, "...", the quote and NUL */
            memcpy (buf + n, "...", 3);
            n += 3;
            break;
        }
        unsigned char c = (unsigned char) *s;
        if (c == '"' || c == '\\') {
            buf[n++] = '\\';
            buf[n++] = (char) c;
        }
        else if (c < 0x20 || c == 0x7f)
            n += (size_t) snprintf (buf + n, size - n, "\\u%04x", c);
        else
            buf[n++] = (char) c;
    }
    buf[n++] = '"';
    buf[n] = '\0';
    return buf;
}

/* "none, relu, sigmoid, tanh" */
const char *config_join (const char *const *names, char *buf, size_t size)
{
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; names[i] && n < size; i++)
        n += (size_t) snprintf (buf + n, size - n, "%s%s", i ? ", " : "", names[i]);
    return buf;
}

/* The optimal string alignment distance between A and B (edits: insert, delete, substitute, swap two
 * neighbours), case-insensitive; keys are short (a table's names), longer text counts as far away. */
static size_t s_distance (const char *a, const char *b)
{
    enum { N = 64 };
    const size_t la = strlen (a), lb = strlen (b);
    if (la >= N || lb >= N)
        return SIZE_MAX;
    size_t d[N][N];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            const int ca = tolower ((unsigned char) a[i - 1]), cb = tolower ((unsigned char) b[j - 1]);
            size_t best = d[i - 1][j - 1] + (ca != cb);
            best = d[i - 1][j] + 1 < best ? d[i - 1][j] + 1 : best;
            best = d[i][j - 1] + 1 < best ? d[i][j - 1] + 1 : best;
            if (i > 1 && j > 1 && ca == tolower ((unsigned char) b[j - 2]) && tolower ((unsigned char) a[i - 2]) == cb
                && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[la][lb];
}

/* The keys an object takes: its table's, then those its table's extra hook chose for it. */
typedef struct {
    const key_spec_t *key[KEYS_MAX];
    const char *required_for[KEYS_MAX];
    size_t count;
} keys_t;

static void s_keys_add (keys_t *ks, const table_t *t)
{
    for (size_t i = 0; t && i < t->count; i++) {
        assert (ks->count < KEYS_MAX);     /* raise KEYS_MAX */
        ks->required_for[ks->count] = t->required_for;
        ks->key[ks->count++] = &t->keys[i];
    }
}

/* The key of KS that GIVEN most likely misspells: the nearest by s_distance, when it is within a third of
 * GIVEN's length (at least 1), or the key GIVEN starts (or that starts GIVEN), from 5 characters on;
 * NULL when none is that close. */
static const char *s_nearest_key (const keys_t *ks, const char *given)
{
    const size_t len = strlen (given);
    const size_t limit = len >= 3 ? (len + 2) / 3 : 1;
    const char *best = NULL;
    size_t best_d = SIZE_MAX;
    for (size_t i = 0; i < ks->count; i++) {
        const char *name = ks->key[i]->name;
        size_t d = s_distance (given, name);
        const size_t ln = strlen (name), shorter = len < ln ? len : ln;
        if (d > limit && shorter >= 5 && strncasecmp (given, name, shorter) == 0)
            d = limit;      /* "secret_key" for "secret_key_file", "max_rows_per_request" for "max_rows" */
        if (d <= limit && d < best_d) {
            best = name;
            best_d = d;
        }
    }
    return best;
}

static const char *s_table_keys (const keys_t *ks, char *buf, size_t size)
{
    const char *names[KEYS_MAX + 1];
    for (size_t i = 0; i < ks->count; i++)
        names[i] = ks->key[i]->name;
    names[ks->count] = NULL;
    return config_join (names, buf, size);
}

/* ---------------------------------------------------------------- the walker */

/* Where a value sits among the elements of an object array, for "unique" rows. */
typedef struct {
    const char *first;          /* element 0 */
    size_t index, stride;
    const char *what;           /* "model" */
} siblings_t;

static int s_parse_object (parser_t *p, const cJSON *obj, const table_t *t, char *target,
                           const siblings_t *sib);

static int s_read_integer (parser_t *p, const key_spec_t *k, const cJSON *v, long long *out)
{
    if (!cJSON_IsNumber (v))
        return config_fail (p, "expected an integer from %lld to %lld, got %s", k->min, k->max, config_kind (v));
    double d = v->valuedouble;
    if (!isfinite (d) || d != floor (d) || d < (double) k->min || d > (double) k->max)
        return config_fail (p, "expected an integer from %lld to %lld, got %.15g", k->min, k->max, d);
    *out = (long long) d;
    return 0;
}

static int s_read_enum (parser_t *p, const key_spec_t *k, const cJSON *v, long long *out)
{
    char list[256], q[160];
    if (!cJSON_IsString (v))
        return config_fail (p, "expected one of %s, got %s", config_join (k->choices, list, sizeof list), config_kind (v));
    for (long long i = 0; k->choices[i]; i++)
        if (strcmp (v->valuestring, k->choices[i]) == 0) {
            *out = i;
            return 0;
        }
    return config_fail (p, "expected one of %s, got %s", config_join (k->choices, list, sizeof list),
                   config_quote (v->valuestring, q, sizeof q));
}

/* Type, length and the row's check; copies into DST (k->size bytes). */
static int s_read_string (parser_t *p, const key_spec_t *k, const cJSON *v, char *dst)
{
    if (k->nullable && cJSON_IsNull (v)) {
        dst[0] = '\0';
        return 0;
    }
    if (!cJSON_IsString (v))
        return config_fail (p, "expected a string%s, got %s", k->nullable ? " or null" : "", config_kind (v));
    size_t n = strlen (v->valuestring);
    if (n == 0 && k->len_min > 0)
        return config_fail (p, "expected a string of %zu to %zu bytes, got an empty string", k->len_min, k->len_max);
    if (n < k->len_min || n > k->len_max)
        return config_fail (p, "expected a string of %zu to %zu bytes, got %zu bytes", k->len_min, k->len_max, n);
    if (k->check && k->check (p, v->valuestring) != 0)
        return -1;
    assert (k->len_max < k->size);     /* a row whose limit does not fit its field */
    memcpy (dst, v->valuestring, n + 1);
    return 0;
}

static int s_resolve_path (parser_t *p, const key_spec_t *k, char *dst)
{
    if (dst[0] == '/' || !p->base_dir || !p->base_dir[0])
        return 0;
    char joined[CONFIG_PATH_MAX];
    size_t blen = strlen (p->base_dir);
    const char *sep = p->base_dir[blen - 1] == '/' ? "" : "/";
    int n = snprintf (joined, sizeof joined, "%s%s%s", p->base_dir, sep, dst);
    if (n < 0 || (size_t) n >= k->size)
        return config_fail (p, "expected a path of at most %zu bytes once joined to the config's folder, "
                          "got %d bytes", k->size - 1, n);
    memcpy (dst, joined, (size_t) n + 1);
    return 0;
}

static int s_read_count (parser_t *p, const key_spec_t *k, const cJSON *v, size_t *count)
{
    if (!cJSON_IsArray (v))
        return config_fail (p, "expected an array of %lld to %lld %ss, got %s", k->min, k->max, k->what, config_kind (v));
    size_t n = (size_t) cJSON_GetArraySize (v);
    if (n == 0 && k->min > 0)
        return config_fail (p, "expected an array of %lld to %lld %ss, got an empty array", k->min, k->max, k->what);
    if ((long long) n < k->min || (long long) n > k->max)
        return config_fail (p, "expected an array of %lld to %lld %ss, got %zu %ss", k->min, k->max, k->what,
                       n, k->what);
    *count = n;
    return 0;
}

static int s_read_string_array (parser_t *p, const key_spec_t *k, const cJSON *v, char *target)
{
    size_t count;
    if (s_read_count (p, k, v, &count) != 0)
        return -1;
    char *first = target + k->offset;
    size_t i = 0;
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        size_t mark = config_path_push_index (p, i);
        char *dst = first + i * k->size;
        if (s_read_string (p, k, e, dst) != 0)
            return -1;
        for (size_t j = 0; k->unique && j < i; j++)
            if (strcmp (first + j * k->size, dst) == 0) {
                char q[320];
                return config_fail (p, "duplicate %s %s", k->what, config_quote (dst, q, sizeof q));
            }
        config_path_pop (p, mark);
    }
    memcpy (target + k->count_offset, &count, sizeof count);
    return 0;
}

static int s_read_int_array (parser_t *p, const key_spec_t *k, const cJSON *v, char *target)
{
    size_t count;
    if (s_read_count (p, k, v, &count) != 0)
        return -1;
    int *dst = (int *) (target + k->offset);
    assert ((size_t) k->max * sizeof (int) <= k->size);
    key_spec_t elem = { .min = k->elem_min, .max = k->elem_max };
    size_t i = 0;
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        size_t mark = config_path_push_index (p, i);
        long long x;
        if (s_read_integer (p, &elem, e, &x) != 0)
            return -1;
        dst[i] = (int) x;
        for (size_t j = 0; k->unique && j < i; j++)
            if (dst[j] == dst[i])
                return config_fail (p, "duplicate %s %d", k->what, dst[i]);
        config_path_pop (p, mark);
    }
    memcpy (target + k->count_offset, &count, sizeof count);
    return 0;
}

static int s_read_object_array (parser_t *p, const key_spec_t *k, const cJSON *v, char *target)
{
    size_t count;
    if (s_read_count (p, k, v, &count) != 0)
        return -1;
    char *first = target + k->offset;
    size_t i = 0;
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        size_t mark = config_path_push_index (p, i);
        if (!cJSON_IsObject (e))
            return config_fail (p, "expected a %s object, got %s", k->what, config_kind (e));
        siblings_t sib = { .first = first, .index = i, .stride = k->size, .what = k->sub->what };
        if (s_parse_object (p, e, k->sub, first + i * k->size, &sib) != 0)
            return -1;
        config_path_pop (p, mark);
    }
    memcpy (target + k->count_offset, &count, sizeof count);
    return 0;
}

static void s_store_int (const key_spec_t *k, char *target, long long value)
{
    if (k->type == KEY_U32) {
        uint32_t u = (uint32_t) value;
        memcpy (target + k->offset, &u, sizeof u);
    }
    else {
        int i = (int) value;
        memcpy (target + k->offset, &i, sizeof i);
    }
}

static int s_read_value (parser_t *p, const key_spec_t *k, const cJSON *v, char *target, const siblings_t *sib)
{
    long long number = 0;
    switch (k->type) {
    case KEY_BOOL:
        if (!cJSON_IsBool (v))
            return config_fail (p, "expected a boolean, got %s", config_kind (v));
        *(bool *) (target + k->offset) = cJSON_IsTrue (v);
        return 0;
    case KEY_INT:
    case KEY_U32:
        if (s_read_integer (p, k, v, &number) != 0)
            return -1;
        s_store_int (k, target, number);
        return 0;
    case KEY_ENUM:
        if (s_read_enum (p, k, v, &number) != 0)
            return -1;
        s_store_int (k, target, number);
        return 0;
    case KEY_ENUM_NAME:
        if (s_read_enum (p, k, v, &number) != 0)
            return -1;
        snprintf (target + k->offset, k->size, "%s", k->choices[number]);
        return 0;
    case KEY_STRING:
    case KEY_PATH: {
        char *dst = target + k->offset;
        if (s_read_string (p, k, v, dst) != 0)
            return -1;
        for (size_t j = 0; k->unique && sib && j < sib->index; j++)
            if (strcmp (sib->first + j * sib->stride + k->offset, dst) == 0) {
                char q[160];
                return config_fail (p, "duplicate %s %s %s", sib->what, k->name, config_quote (dst, q, sizeof q));
            }
        return k->type == KEY_PATH ? s_resolve_path (p, k, dst) : 0;
    }
    case KEY_STRING_ARRAY:
        return s_read_string_array (p, k, v, target);
    case KEY_INT_ARRAY:
        return s_read_int_array (p, k, v, target);
    case KEY_OBJECT:
        if (!cJSON_IsObject (v))
            return config_fail (p, "expected an object, got %s", config_kind (v));
        return s_parse_object (p, v, k->sub, target + k->offset, NULL);
    case KEY_OBJECT_ARRAY:
        return s_read_object_array (p, k, v, target);
    case KEY_CUSTOM:
        return k->read (p, v, target + k->offset);
    }
    return config_fail (p, "internal error: key type %d", (int) k->type);
}

static int s_apply_default (parser_t *p, const key_spec_t *k, const char *required_for, char *target)
{
    if (k->required && required_for)
        return config_fail (p, "required key missing for %s", required_for);
    if (k->required)
        return config_fail (p, "required key missing");
    switch (k->type) {
    case KEY_BOOL:
        *(bool *) (target + k->offset) = k->def != 0;
        break;
    case KEY_INT:
    case KEY_U32:
    case KEY_ENUM:
        s_store_int (k, target, k->def);
        break;
    case KEY_ENUM_NAME:
        snprintf (target + k->offset, k->size, "%s", k->choices[k->def]);
        break;
    case KEY_STRING:
    case KEY_PATH:
        if (k->derive)
            return k->derive (p, target, target + k->offset, k->size);
        snprintf (target + k->offset, k->size, "%s", k->def_str ? k->def_str : "");
        break;
    case KEY_STRING_ARRAY:
    case KEY_INT_ARRAY:
    case KEY_OBJECT_ARRAY:
        memset (target + k->count_offset, 0, sizeof (size_t));
        break;
    case KEY_OBJECT:
        break;
    case KEY_CUSTOM:
        memset (target + k->offset, 0, k->size);
        break;
    }
    return 0;
}

/* Unknown and repeated keys first (in document order), then every row in table order (the extra
 * keys the table chose for OBJ after its own), so a derived default sees the keys of the rows above it. */
static int s_parse_object (parser_t *p, const cJSON *obj, const table_t *t, char *target, const siblings_t *sib)
{
    keys_t ks = { .count = 0 };
    const table_t *extra = NULL;
    if (t->extra && t->extra (p, obj, &extra) != 0)
        return -1;
    s_keys_add (&ks, t);
    s_keys_add (&ks, extra);
    bool seen[KEYS_MAX] = { false };
    for (const cJSON *c = obj->child; c; c = c->next) {
        size_t mark = config_path_push_key (p, c->string ? c->string : "");
        size_t i = 0;
        while (i < ks.count && (!c->string || strcmp (c->string, ks.key[i]->name) != 0))
            i++;
        if (i == ks.count) {
            char list[512], q[160];
            if (c->string && t->elsewhere && t->elsewhere (p, obj, c->string) != 0)
                return -1;
            const char *near = c->string ? s_nearest_key (&ks, c->string) : NULL;
            if (near)
                return config_fail (p, "unknown key; did you mean %s? (expected one of %s)",
                                    config_quote (near, q, sizeof q), s_table_keys (&ks, list, sizeof list));
            return config_fail (p, "unknown key (expected one of %s)", s_table_keys (&ks, list, sizeof list));
        }
        if (seen[i])
            return config_fail (p, "duplicate key");
        seen[i] = true;
        config_path_pop (p, mark);
    }
    for (size_t i = 0; i < ks.count; i++) {
        const key_spec_t *k = ks.key[i];
        const cJSON *v = cJSON_GetObjectItemCaseSensitive (obj, k->name);
        size_t mark = config_path_push_key (p, k->name);
        if ((v ? s_read_value (p, k, v, target, sib) : s_apply_default (p, k, ks.required_for[i], target)) != 0)
            return -1;
        config_path_pop (p, mark);
    }
    return 0;
}

int config_walk_object (parser_t *p, const cJSON *obj, const table_t *t, char *target)
{
    return s_parse_object (p, obj, t, target, NULL);
}
