/* Safetensors reader. It trusts nothing in the file: every length,
 * offset, shape and dtype is checked (with overflow-safe arithmetic) before a tensor is handed
 * out, and the header is parsed from a NUL-terminated copy so cJSON never reads past it.
 * (The F32 writer for tests and tools is support/st_write.c.) */
#include "weights/safetensors.h"
#include "base/status.h"

#include <assert.h>
#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The Python library refuses headers over 100 MB; the bound also keeps a corrupt length from
 * making us copy and parse most of a large file. */
#define ST_MAX_HEADER ((uint64_t) 100 << 20)
/* JSON numbers arrive as doubles: above 2^53 an integer cannot be told from its neighbours. */
#define ST_MAX_EXACT 9007199254740992.0
#define ST_METADATA "__metadata__"

struct _safetensors_t {
    char *path;                     /* as given to open, for messages */
    void *map;                      /* the whole file, read-only */
    size_t map_size;                /* bytes mapped: the file's size */
    size_t count;                   /* tensors in the header (not counting __metadata__) */
    st_tensor_t *tensors;           /* in header order */
    char **names;                   /* owned copies that tensors[i].name borrows */
    const st_tensor_t **by_name;    /* sorted by name: binary search and the duplicate check */
};

typedef struct {
    const char *name;
    st_dtype_t dtype;
    unsigned size;                  /* bytes per element */
} s_dtype_info_t;

/* Every whole-byte dtype the format defines, so size checks work for tensors we never read. */
static const s_dtype_info_t s_dtypes[] = {
    { "F32", ST_DTYPE_F32, 4 },   { "F16", ST_DTYPE_F16, 2 },   { "BF16", ST_DTYPE_BF16, 2 },
    { "F64", ST_DTYPE_OTHER, 8 }, { "I64", ST_DTYPE_OTHER, 8 }, { "I32", ST_DTYPE_OTHER, 4 },
    { "I16", ST_DTYPE_OTHER, 2 }, { "I8", ST_DTYPE_OTHER, 1 },  { "U64", ST_DTYPE_OTHER, 8 },
    { "U32", ST_DTYPE_OTHER, 4 }, { "U16", ST_DTYPE_OTHER, 2 }, { "U8", ST_DTYPE_OTHER, 1 },
    { "BOOL", ST_DTYPE_OTHER, 1 }, { "F8_E4M3", ST_DTYPE_OTHER, 1 },
    { "F8_E5M2", ST_DTYPE_OTHER, 1 },
};
#define S_DTYPE_COUNT (sizeof s_dtypes / sizeof s_dtypes[0])


static const s_dtype_info_t *s_dtype_lookup (const char *name)
{
    for (size_t i = 0; i < S_DTYPE_COUNT; i++)
        if (strcmp (s_dtypes[i].name, name) == 0)
            return &s_dtypes[i];
    return NULL;
}

static uint64_t s_le64 (const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* a * b into *out; false when it does not fit in 64 bits. */
static bool s_mul_u64 (uint64_t a, uint64_t b, uint64_t *out)
{
    if (a != 0 && b > UINT64_MAX / a)
        return false;
    *out = a * b;
    return true;
}

char *safetensors_format_shape (const uint64_t *shape, size_t ndim, char *buf, size_t len)
{
    assert (buf && len > 0);
    size_t used = (size_t) snprintf (buf, len, "[");
    for (size_t i = 0; i < ndim && used < len; i++)
        used += (size_t) snprintf (buf + used, len - used, "%s%" PRIu64, i ? ", " : "", shape[i]);
    if (used < len)
        snprintf (buf + used, len - used, "]");
    return buf;
}

/* A short description of a JSON value that was not what we expected, for messages. */
static const char *s_describe (const cJSON *v, char *buf, size_t len)
{
    if (!v)
        snprintf (buf, len, "missing");
    else if (cJSON_IsNumber (v))
        snprintf (buf, len, "%.17g", v->valuedouble);
    else if (cJSON_IsString (v))
        snprintf (buf, len, "the string \"%.40s\"", v->valuestring);
    else if (cJSON_IsBool (v))
        snprintf (buf, len, "%s", cJSON_IsTrue (v) ? "true" : "false");
    else if (cJSON_IsNull (v))
        snprintf (buf, len, "null");
    else if (cJSON_IsArray (v))
        snprintf (buf, len, "an array of %d", cJSON_GetArraySize (v));
    else
        snprintf (buf, len, "an object");
    return buf;
}

/* true when V is a JSON integer in [0, 2^53), which a double holds exactly. */
static bool s_json_u64 (const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber (v))
        return false;
    double d = v->valuedouble;
    if (!isfinite (d) || d < 0 || d >= ST_MAX_EXACT || floor (d) != d)
        return false;
    *out = (uint64_t) d;
    return true;
}

static int s_by_string (const void *a, const void *b)
{
    return strcmp (*(const char *const *) a, *(const char *const *) b);
}

/* A key that OBJECT holds twice, or NULL. cJSON keeps both entries and its lookups see only the
 * first, so {"dtype": "F32", "dtype": "I64"} would read as F32 where another reader sees I64.
 * *OOM is set when there was no memory to check. */
static const char *s_duplicate_key (const cJSON *object, bool *oom)
{
    *oom = false;
    size_t n = 0;
    const cJSON *item;
    cJSON_ArrayForEach (item, object)
        n++;
    if (n < 2)
        return NULL;
    const char *small[8];
    const char **keys = n <= 8 ? small : malloc (n * sizeof *keys);
    if (!keys) {
        *oom = true;
        return NULL;
    }
    n = 0;
    cJSON_ArrayForEach (item, object)
        keys[n++] = item->string;
    qsort (keys, n, sizeof *keys, s_by_string);
    const char *dup = NULL;
    for (size_t i = 1; i < n && !dup; i++)
        if (strcmp (keys[i - 1], keys[i]) == 0)
            dup = keys[i];
    if (keys != small)
        free (keys);
    return dup;
}

/* cJSON turns the escape \u0000 into a NUL inside the string, which then ends it early:
 * "w\u0000x" would name tensor "w". The offset of the first such escape in the JSON text TEXT
 * (valid JSON: cJSON parsed it), or LEN. */
static size_t s_escaped_nul_at (const char *text, size_t len)
{
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        if (!in_string)
            in_string = text[i] == '"';
        else if (text[i] == '"')
            in_string = false;
        else if (text[i] == '\\' && i + 1 < len) {
            if (text[i + 1] == 'u' && len - i >= 6 && memcmp (text + i + 2, "0000", 4) == 0)
                return i;
            i++;        /* the escaped character, which may be a quote */
        }
    }
    return len;
}

/* ---------------------------------------------------------------------------------------------
 * Mapping */

static int s_map (safetensors_t *self, char *err, size_t errlen)
{
    /* O_NONBLOCK: opening a FIFO would otherwise wait for a writer, and the server's start with it;
     * it changes nothing for the regular file that the check below insists on. */
    int fd = open (self->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        sig_set_error (err, errlen, "%s: cannot open: %s", self->path, strerror (errno));
        return -1;
    }
    struct stat st;
    int rc = -1;
    if (fstat (fd, &st) != 0)
        sig_set_error (err, errlen, "%s: cannot stat: %s", self->path, strerror (errno));
    else if (S_ISDIR (st.st_mode))
        sig_set_error (err, errlen, "%s: not a regular file (a directory)", self->path);
    else if (!S_ISREG (st.st_mode))
        sig_set_error (err, errlen, "%s: not a regular file (a FIFO, socket or device)", self->path);
    else if (st.st_size < 8)
        sig_set_error (err, errlen, "%s: file is %lld bytes, shorter than the 8-byte header length",
                self->path, (long long) st.st_size);
    else if ((uint64_t) st.st_size > SIZE_MAX)
        sig_set_error (err, errlen, "%s: file is too large to map (%lld bytes)", self->path,
                (long long) st.st_size);
    else {
        void *map = mmap (NULL, (size_t) st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED)
            sig_set_error (err, errlen, "%s: cannot map %lld bytes: %s", self->path,
                    (long long) st.st_size, strerror (errno));
        else {
            self->map = map;
            self->map_size = (size_t) st.st_size;
            rc = 0;
        }
    }
    /* The mapping keeps the file's pages; the descriptor is no longer needed. A file truncated
     * by someone else while mapped would fault on access, so users copy what they need out
     * (model.c does) and close the object soon. */
    close (fd);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Header */

/* The header as a parsed JSON object, or NULL with ERR. */
static cJSON *s_parse_header_json (const safetensors_t *self, uint64_t n, char *err, size_t errlen)
{
    const char *text = (const char *) self->map + 8;
    const char *nul = memchr (text, 0, (size_t) n);
    if (nul) {
        sig_set_error (err, errlen, "%s: header contains a NUL byte at offset %zu (expected JSON text)",
                self->path, (size_t) (nul - text));
        return NULL;
    }
    /* A terminated copy: cJSON then stops at our NUL, never at the end of the mapping. */
    char *copy = malloc ((size_t) n + 1);
    if (!copy) {
        sig_set_error (err, errlen, "%s: out of memory for a %" PRIu64 "-byte header", self->path, n);
        return NULL;
    }
    memcpy (copy, text, (size_t) n);
    copy[n] = 0;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts (copy, &end, false);
    size_t at = end ? (size_t) (end - copy) : 0;
    if (root) {
        /* The writers pad the header with spaces up to an 8-byte boundary. */
        while (at < n && strchr (" \t\r\n", copy[at]))
            at++;
        if (at < n) {
            cJSON_Delete (root);
            root = NULL;
        }
    }
    size_t escaped_nul = root ? s_escaped_nul_at (copy, (size_t) n) : (size_t) n;
    free (copy);
    if (!root)
        sig_set_error (err, errlen, "%s: header is not valid JSON (error near byte %zu of %" PRIu64 ")",
                self->path, at, n);
    else if (escaped_nul < n) {
        sig_set_error (err, errlen, "%s: header has an escaped NUL (\\u0000) at byte %zu; names and "
                "values must not contain NUL", self->path, escaped_nul);
        cJSON_Delete (root);
        root = NULL;
    }
    else if (!cJSON_IsObject (root)) {
        sig_set_error (err, errlen, "%s: header is not a JSON object", self->path);
        cJSON_Delete (root);
        root = NULL;
    }
    return root;
}

static int s_check_metadata (const safetensors_t *self, const cJSON *meta, char *err, size_t errlen)
{
    char found[64];
    if (!cJSON_IsObject (meta)) {
        sig_set_error (err, errlen, "%s: \"" ST_METADATA "\" is %s, expected an object of strings",
                self->path, s_describe (meta, found, sizeof found));
        return -1;
    }
    bool oom;
    const char *dup = s_duplicate_key (meta, &oom);
    if (dup || oom) {
        if (oom)
            sig_set_error (err, errlen, "%s: out of memory", self->path);
        else
            sig_set_error (err, errlen, "%s: \"" ST_METADATA "\": duplicate key \"%s\"", self->path, dup);
        return -1;
    }
    const cJSON *item;
    cJSON_ArrayForEach (item, meta) {
        if (!cJSON_IsString (item)) {
            sig_set_error (err, errlen, "%s: \"" ST_METADATA "\" key \"%s\" is %s, expected a string",
                    self->path, item->string, s_describe (item, found, sizeof found));
            return -1;
        }
    }
    return 0;
}

static int s_parse_dtype (const safetensors_t *self, const cJSON *entry, st_tensor_t *t,
                          unsigned *size, char *err, size_t errlen)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive (entry, "dtype");
    char found[64];
    if (!cJSON_IsString (v)) {
        sig_set_error (err, errlen, "%s: tensor \"%s\": \"dtype\" is %s, expected a string such as \"F32\"",
                self->path, t->name, s_describe (v, found, sizeof found));
        return -1;
    }
    const s_dtype_info_t *info = s_dtype_lookup (v->valuestring);
    if (!info) {
        sig_set_error (err, errlen, "%s: tensor \"%s\": unknown dtype \"%.32s\" (known: F32, F16, BF16, F64, "
                "I64, I32, I16, I8, U64, U32, U16, U8, BOOL, F8_E4M3, F8_E5M2)",
                self->path, t->name, v->valuestring);
        return -1;
    }
    t->dtype = info->dtype;
    t->dtype_name = info->name;     /* static, equal to the header's text */
    *size = info->size;
    return 0;
}

static int s_parse_shape (const safetensors_t *self, const cJSON *entry, st_tensor_t *t,
                          char *err, size_t errlen)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive (entry, "shape");
    char found[64];
    if (!cJSON_IsArray (v)) {
        sig_set_error (err, errlen, "%s: tensor \"%s\": \"shape\" is %s, expected an array of integers",
                self->path, t->name, s_describe (v, found, sizeof found));
        return -1;
    }
    int ndim = cJSON_GetArraySize (v);
    if (ndim > SAFETENSORS_MAX_DIMS) {
        sig_set_error (err, errlen, "%s: tensor \"%s\": shape has %d dimensions, at most %d are supported",
                self->path, t->name, ndim, SAFETENSORS_MAX_DIMS);
        return -1;
    }
    t->ndim = (size_t) ndim;
    t->numel = 1;       /* a 0-dim tensor is a scalar */
    const cJSON *dim;
    size_t i = 0;
    cJSON_ArrayForEach (dim, v) {
        if (!s_json_u64 (dim, &t->shape[i])) {
            sig_set_error (err, errlen, "%s: tensor \"%s\": shape[%zu] is %s, expected a non-negative integer",
                    self->path, t->name, i, s_describe (dim, found, sizeof found));
            return -1;
        }
        if (!s_mul_u64 (t->numel, t->shape[i], &t->numel)) {
            sig_set_error (err, errlen, "%s: tensor \"%s\": shape %s has more than 2^64 elements",
                    self->path, t->name,
                    safetensors_format_shape (t->shape, i + 1, found, sizeof found));
            return -1;
        }
        i++;
    }
    return 0;
}

static int s_parse_offsets (const safetensors_t *self, const cJSON *entry, st_tensor_t *t,
                            uint64_t *end, char *err, size_t errlen)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive (entry, "data_offsets");
    char found[64];
    if (!cJSON_IsArray (v) || cJSON_GetArraySize (v) != 2) {
        sig_set_error (err, errlen, "%s: tensor \"%s\": \"data_offsets\" is %s, expected an array of 2 "
                "integers [begin, end]", self->path, t->name, s_describe (v, found, sizeof found));
        return -1;
    }
    for (int i = 0; i < 2; i++) {
        const cJSON *x = cJSON_GetArrayItem (v, i);
        if (!s_json_u64 (x, i == 0 ? &t->offset : end)) {
            sig_set_error (err, errlen, "%s: tensor \"%s\": data_offsets[%d] is %s, expected a "
                    "non-negative integer", self->path, t->name, i, s_describe (x, found, sizeof found));
            return -1;
        }
    }
    return 0;
}

/* Fills T from one header entry and checks it against the data section of DATA_SIZE bytes. */
static int s_parse_entry (const safetensors_t *self, const cJSON *entry, st_tensor_t *t,
                          uint64_t data_size, char *err, size_t errlen)
{
    if (!cJSON_IsObject (entry)) {
        sig_set_error (err, errlen, "%s: tensor \"%s\": expected an object with dtype, shape and "
                "data_offsets", self->path, t->name);
        return -1;
    }
    bool oom;
    const char *dup = s_duplicate_key (entry, &oom);
    if (dup || oom) {
        if (oom)
            sig_set_error (err, errlen, "%s: out of memory", self->path);
        else
            sig_set_error (err, errlen, "%s: tensor \"%s\": duplicate key \"%s\"", self->path, t->name, dup);
        return -1;
    }
    unsigned size;
    uint64_t end;
    if (s_parse_dtype (self, entry, t, &size, err, errlen) != 0
        || s_parse_shape (self, entry, t, err, errlen) != 0
        || s_parse_offsets (self, entry, t, &end, err, errlen) != 0)
        return -1;
    char shape[160];
    safetensors_format_shape (t->shape, t->ndim, shape, sizeof shape);
    if (end < t->offset) {
        sig_set_error (err, errlen, "%s: tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64 "] end "
                "before they begin", self->path, t->name, t->offset, end);
        return -1;
    }
    if (end > data_size) {
        sig_set_error (err, errlen, "%s: tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64 "] run past "
                "the end of the data section (%" PRIu64 " bytes)", self->path, t->name, t->offset,
                end, data_size);
        return -1;
    }
    if (!s_mul_u64 (t->numel, size, &t->nbytes)) {
        sig_set_error (err, errlen, "%s: tensor \"%s\": %s %s is more than 2^64 bytes", self->path,
                t->name, t->dtype_name, shape);
        return -1;
    }
    if (end - t->offset != t->nbytes) {
        sig_set_error (err, errlen, "%s: tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64 "] hold %"
                PRIu64 " bytes, expected %" PRIu64 " (%s %s)", self->path, t->name, t->offset,
                end, end - t->offset, t->nbytes, t->dtype_name, shape);
        return -1;
    }
    t->data = (const uint8_t *) self->map + (self->map_size - data_size) + t->offset;
    return 0;
}

static int s_by_name (const void *a, const void *b)
{
    return strcmp ((*(const st_tensor_t *const *) a)->name, (*(const st_tensor_t *const *) b)->name);
}

static int s_by_offset (const void *a, const void *b)
{
    const st_tensor_t *x = *(const st_tensor_t *const *) a, *y = *(const st_tensor_t *const *) b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    if (x->nbytes != y->nbytes)     /* empty tensors first, so they sit where the next one starts */
        return x->nbytes < y->nbytes ? -1 : 1;
    return 0;
}

static int s_check_unique (safetensors_t *self, char *err, size_t errlen)
{
    for (size_t i = 0; i < self->count; i++)
        self->by_name[i] = &self->tensors[i];
    qsort (self->by_name, self->count, sizeof *self->by_name, s_by_name);
    for (size_t i = 1; i < self->count; i++)
        if (strcmp (self->by_name[i - 1]->name, self->by_name[i]->name) == 0) {
            sig_set_error (err, errlen, "%s: duplicate tensor \"%s\" in the header", self->path,
                    self->by_name[i]->name);
            return -1;
        }
    return 0;
}

/* The format (and the reference implementation) requires the tensors to tile the data section:
 * no gaps, no overlaps, nothing after the last one. A file that breaks this was not written by a
 * safetensors library, so we refuse it rather than guess which bytes belong to which tensor. */
static int s_check_tiling (const safetensors_t *self, uint64_t data_size, char *err, size_t errlen)
{
    const st_tensor_t **order = malloc ((self->count ? self->count : 1) * sizeof *order);
    if (!order) {
        sig_set_error (err, errlen, "%s: out of memory", self->path);
        return -1;
    }
    for (size_t i = 0; i < self->count; i++)
        order[i] = &self->tensors[i];
    qsort (order, self->count, sizeof *order, s_by_offset);
    uint64_t pos = 0;
    const char *prev = NULL;
    int rc = 0;
    for (size_t i = 0; i < self->count && rc == 0; i++) {
        const st_tensor_t *t = order[i];
        if (t->offset > pos)
            sig_set_error (err, errlen, "%s: tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64 "] leave "
                    "bytes %" PRIu64 " to %" PRIu64 " of the data section unused (the format allows "
                    "no gaps)", self->path, t->name, t->offset, t->offset + t->nbytes, pos, t->offset);
        else if (t->offset < pos)
            sig_set_error (err, errlen, "%s: tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64 "] "
                    "overlap tensor \"%s\", which ends at %" PRIu64, self->path, t->name, t->offset,
                    t->offset + t->nbytes, prev, pos);
        rc = t->offset == pos ? 0 : -1;
        pos = t->offset + t->nbytes;
        prev = t->name;
    }
    free (order);
    if (rc == 0 && pos != data_size) {
        sig_set_error (err, errlen, "%s: the tensors cover %" PRIu64 " of the %" PRIu64 " bytes of the "
                "data section (the format allows no trailing bytes)", self->path, pos, data_size);
        rc = -1;
    }
    return rc;
}

static int s_parse_entries (safetensors_t *self, const cJSON *root, uint64_t data_size,
                            char *err, size_t errlen)
{
    /* Two tensors of one name are reported by s_check_unique, once both have parsed. */
    const cJSON *item;
    size_t count = 0, metadata = 0;
    cJSON_ArrayForEach (item, root) {
        bool is_metadata = strcmp (item->string, ST_METADATA) == 0;
        count += !is_metadata;
        metadata += is_metadata;
    }
    if (metadata > 1) {
        sig_set_error (err, errlen, "%s: duplicate key \"" ST_METADATA "\" in the header", self->path);
        return -1;
    }
    size_t alloc = count ? count : 1;
    self->tensors = calloc (alloc, sizeof *self->tensors);
    self->names = calloc (alloc, sizeof *self->names);
    self->by_name = calloc (alloc, sizeof *self->by_name);
    if (!self->tensors || !self->names || !self->by_name) {
        sig_set_error (err, errlen, "%s: out of memory for %zu tensors", self->path, count);
        return -1;
    }
    cJSON_ArrayForEach (item, root) {
        if (strcmp (item->string, ST_METADATA) == 0) {
            if (s_check_metadata (self, item, err, errlen) != 0)
                return -1;
            continue;
        }
        st_tensor_t *t = &self->tensors[self->count];
        if (!(self->names[self->count] = strdup (item->string))) {
            sig_set_error (err, errlen, "%s: out of memory", self->path);
            return -1;
        }
        t->name = self->names[self->count++];
        if (s_parse_entry (self, item, t, data_size, err, errlen) != 0)
            return -1;
    }
    if (s_check_unique (self, err, errlen) != 0)
        return -1;
    return s_check_tiling (self, data_size, err, errlen);
}

/* A file whose first 8 bytes make no sense as a header length and whose header does not start with
 * '{': not a safetensors file at all. Says what it looks like, when it can tell. */
static int s_not_safetensors (const safetensors_t *self, char *err, size_t errlen)
{
    const unsigned char *b = (const unsigned char *) self->map;
    const char *looks = "";
    if (b[0] == 'P' && b[1] == 'K')
        looks = " It is a zip archive: torch.save writes those (.pt, .pth); save the state dict with "
                "safetensors.torch.save_file (model.state_dict (), PATH) instead.";
    else if (b[0] == 0x80)
        looks = " It starts like a Python pickle (an older torch.save); save the state dict with "
                "safetensors.torch.save_file (model.state_dict (), PATH) instead.";
    else if (b[0] == 0x89 && b[1] == 'H' && b[2] == 'D' && b[3] == 'F')
        looks = " It is an HDF5 file (Keras); export the weights to safetensors instead.";
    sig_set_error (err, errlen, "%s: not a safetensors file (one starts with an 8-byte little-endian header length, "
                   "then a JSON header beginning with '{'; this one's first bytes are %02x %02x %02x %02x %02x %02x "
                   "%02x %02x %02x).%s", self->path, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], looks);
    return -1;
}

static int s_parse (safetensors_t *self, char *err, size_t errlen)
{
    uint64_t n = s_le64 (self->map);
    uint64_t avail = self->map_size - 8;
    if (n == 0) {
        sig_set_error (err, errlen, "%s: header length is 0, expected at least 2 (\"{}\")", self->path);
        return -1;
    }
    if (n > avail && avail > 0 && ((const char *) self->map)[8] != '{')
        return s_not_safetensors (self, err, errlen);
    if (n > avail) {
        sig_set_error (err, errlen, "%s: header length %" PRIu64 " runs past the end of the file (%zu "
                "bytes)", self->path, n, self->map_size);
        return -1;
    }
    if (n > ST_MAX_HEADER) {
        sig_set_error (err, errlen, "%s: header length %" PRIu64 " is over the limit of %" PRIu64
                " bytes", self->path, n, ST_MAX_HEADER);
        return -1;
    }
    cJSON *root = s_parse_header_json (self, n, err, errlen);
    if (!root)
        return -1;
    int rc = s_parse_entries (self, root, avail - n, err, errlen);
    cJSON_Delete (root);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Public API */

safetensors_t *safetensors_open (const char *path, char *err, size_t errlen)
{
    assert (path);
    safetensors_t *self = calloc (1, sizeof *self);
    if (!self || !(self->path = strdup (path))) {
        sig_set_error (err, errlen, "%s: out of memory", path);
        free (self);
        return NULL;
    }
    if (s_map (self, err, errlen) != 0 || s_parse (self, err, errlen) != 0)
        safetensors_destroy (&self);
    return self;
}

void safetensors_destroy (safetensors_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    safetensors_t *self = *self_p;
    if (self->map)
        munmap (self->map, self->map_size);
    for (size_t i = 0; self->names && i < self->count; i++)
        free (self->names[i]);
    free (self->names);
    free (self->tensors);
    free (self->by_name);
    free (self->path);
    free (self);
    *self_p = NULL;
}

size_t safetensors_count (const safetensors_t *self)
{
    assert (self);
    return self->count;
}

const st_tensor_t *safetensors_at (const safetensors_t *self, size_t index)
{
    assert (self);
    return index < self->count ? &self->tensors[index] : NULL;
}

const st_tensor_t *safetensors_find (const safetensors_t *self, const char *name)
{
    assert (self && name);
    st_tensor_t key = { .name = name };
    const st_tensor_t *kp = &key;
    const st_tensor_t **hit = self->count
        ? bsearch (&kp, self->by_name, self->count, sizeof *self->by_name, s_by_name) : NULL;
    return hit ? *hit : NULL;
}
