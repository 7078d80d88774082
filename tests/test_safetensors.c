/* safetensors reader and writer: round trips, dtype conversions, and every way a file can be
 * malformed, each checked for the error text a user would read. */
#define _GNU_SOURCE
#include "rng.h"
#include "st_write.h"

#include "weights/safetensors.h"
#include "testutil.h"

#include <check.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *s_dir;         /* a fresh folder per test */
static char err[1024];

#define ASSERT_ERR(fragment) \
    ck_assert_msg (strstr (err, (fragment)) != NULL, "error \"%s\" lacks \"%s\"", err, (fragment))

static void s_setup (void)
{
    s_dir = tu_tmpdir ();
    ck_assert_ptr_nonnull (s_dir);
    err[0] = 0;
}

static void s_teardown (void)
{
    tu_remove_tree (s_dir);
    free (s_dir);
}

/* The bytes of a file: DECLARED as the header length, then HEADER, then DATA. */
static char *s_raw_len (const char *name, uint64_t declared, const char *header, const void *data,
                        size_t data_len)
{
    size_t hlen = strlen (header), total = 8 + hlen + data_len;
    unsigned char *buf = malloc (total);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char) (declared >> (8 * i));
    memcpy (buf + 8, header, hlen);
    if (data_len)
        memcpy (buf + 8 + hlen, data, data_len);
    char *path = tu_write_file (s_dir, name, buf, (long) total);
    free (buf);
    ck_assert_ptr_nonnull (path);
    return path;
}

static char *s_raw (const char *name, const char *header, const void *data, size_t data_len)
{
    return s_raw_len (name, strlen (header), header, data, data_len);
}

/* Opens a hand-built file that must be refused; leaves the message in ERR. */
static void s_expect_refused (const char *header, const void *data, size_t data_len)
{
    char *path = s_raw ("bad.safetensors", header, data, data_len);
    safetensors_t *st = safetensors_open (path, err, sizeof err);
    ck_assert_msg (st == NULL, "header %s was accepted", header);
    ck_assert_msg (strstr (err, path) == err, "error \"%s\" does not start with the path", err);
    free (path);
}

static safetensors_t *s_open_ok (const char *path)
{
    safetensors_t *st = safetensors_open (path, err, sizeof err);
    ck_assert_msg (st != NULL, "open failed: %s", err);
    return st;
}

static unsigned char *s_slurp (const char *path, size_t *len)
{
    FILE *f = fopen (path, "rb");
    ck_assert_ptr_nonnull (f);
    fseek (f, 0, SEEK_END);
    *len = (size_t) ftell (f);
    rewind (f);
    unsigned char *buf = malloc (*len ? *len : 1);
    ck_assert_uint_eq (fread (buf, 1, *len, f), *len);
    fclose (f);
    return buf;
}

static uint64_t s_le64 (const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint32_t s_bits (float f)
{
    uint32_t u;
    memcpy (&u, &f, 4);
    return u;
}

/* ------------------------------------------------------------------------------------------- */

START_TEST (test_round_trip)
{
    float w[6] = { 1.5f, -0.0f, 1e-40f /* f32 subnormal */, 3.4e38f, -7.25f, 0.1f };
    float scalar = 42.5f, v[5] = { 1, 2, 3, 4, 5 };
    st_write_tensor_t in[] = {
        { .name = "w", .ndim = 2, .shape = { 2, 3 }, .data = w },
        { .name = "scalar", .ndim = 0, .data = &scalar },
        { .name = "needs \"escaping\"\n", .ndim = 1, .shape = { 5 }, .data = v },
        { .name = "empty", .ndim = 2, .shape = { 0, 4 }, .data = NULL },
    };
    char *path = tu_write_file (s_dir, "rt.safetensors", "", 0);
    ck_assert_int_eq (safetensors_write_f32 (path, in, 4, err, sizeof err), 0);

    size_t len;
    unsigned char *bytes = s_slurp (path, &len);
    uint64_t n = s_le64 (bytes);
    ck_assert_uint_eq ((8 + n) % 8, 0);                 /* data starts 8-aligned */
    ck_assert_uint_eq (len, 8 + n + (6 + 1 + 5) * 4);
    free (bytes);

    safetensors_t *st = s_open_ok (path);
    ck_assert_uint_eq (safetensors_count (st), 4);
    for (size_t i = 0; i < 4; i++) {
        const st_tensor_t *t = safetensors_at (st, i);
        ck_assert_str_eq (t->name, in[i].name);          /* header order is kept */
        ck_assert_ptr_eq (safetensors_find (st, in[i].name), t);
        ck_assert_int_eq (t->dtype, ST_DTYPE_F32);
        ck_assert_str_eq (t->dtype_name, "F32");
        ck_assert_uint_eq (t->ndim, in[i].ndim);
        for (size_t d = 0; d < t->ndim; d++)
            ck_assert_uint_eq (t->shape[d], in[i].shape[d]);
        float out[6];
        ck_assert_int_eq (safetensors_read_f32 (t, out, err, sizeof err), 0);
        for (uint64_t k = 0; k < t->numel; k++)        /* bit-exact, -0 and subnormals included */
            ck_assert_uint_eq (s_bits (out[k]), s_bits (in[i].data[k]));
    }
    ck_assert_uint_eq (safetensors_find (st, "scalar")->numel, 1);
    ck_assert_uint_eq (safetensors_find (st, "empty")->numel, 0);
    ck_assert_ptr_null (safetensors_find (st, "nope"));
    ck_assert_ptr_null (safetensors_at (st, 4));
    safetensors_destroy (&st);
    ck_assert_ptr_null (st);
    safetensors_destroy (&st);          /* twice is fine */
    safetensors_destroy (NULL);
    free (path);
}
END_TEST

START_TEST (test_overwrite_leaves_no_temp)
{
    float x = 1;
    st_write_tensor_t t = { .name = "x", .ndim = 1, .shape = { 1 }, .data = &x };
    char *path = tu_write_file (s_dir, "o.safetensors", "old contents", -1);
    ck_assert_int_eq (safetensors_write_f32 (path, &t, 1, err, sizeof err), 0);
    ck_assert_int_eq (safetensors_write_f32 (path, &t, 1, err, sizeof err), 0);
    safetensors_t *st = s_open_ok (path);
    safetensors_destroy (&st);
    char cmd[4200];
    snprintf (cmd, sizeof cmd, "test $(ls -A '%s' | wc -l) -eq 1", s_dir);
    ck_assert_int_eq (system (cmd), 0);
    free (path);
}
END_TEST

/* The layout the Python library writes (captured from safetensors.numpy.save_file): metadata
 * first, entries sorted by dtype alignment, an empty tensor, a scalar, 2-space padding. */
START_TEST (test_python_layout)
{
    const char *header = "{\"__metadata__\":{\"format\":\"np\"},"
        "\"i\":{\"dtype\":\"I64\",\"shape\":[3],\"data_offsets\":[0,24]},"
        "\"e\":{\"dtype\":\"F32\",\"shape\":[0,4],\"data_offsets\":[24,24]},"
        "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[24,28]},"
        "\"a\":{\"dtype\":\"F16\",\"shape\":[2,3],\"data_offsets\":[28,40]}}  ";
    unsigned char data[40] = { 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,
                               0x00, 0x00, 0x60, 0x40,                      /* 3.5f */
                               0x00, 0x00, 0x00, 0x3c, 0x00, 0x40, 0x00, 0x42, 0x00, 0x44, 0x00, 0x45 };
    char *path = s_raw ("py.safetensors", header, data, sizeof data);
    safetensors_t *st = s_open_ok (path);
    ck_assert_uint_eq (safetensors_count (st), 4);      /* __metadata__ is not a tensor */
    ck_assert_ptr_null (safetensors_find (st, "__metadata__"));
    const st_tensor_t *i = safetensors_find (st, "i"), *s = safetensors_find (st, "s");
    const st_tensor_t *a = safetensors_find (st, "a");
    ck_assert_int_eq (i->dtype, ST_DTYPE_OTHER);
    ck_assert_str_eq (i->dtype_name, "I64");
    ck_assert_uint_eq (i->nbytes, 24);
    ck_assert_uint_eq (s->ndim, 0);
    ck_assert_uint_eq (s->numel, 1);
    float f[6];
    ck_assert_int_eq (safetensors_read_f32 (s, f, err, sizeof err), 0);
    ck_assert_float_eq (f[0], 3.5f);
    ck_assert_int_eq (a->dtype, ST_DTYPE_F16);
    ck_assert_int_eq (safetensors_read_f32 (a, f, err, sizeof err), 0);
    for (int k = 0; k < 6; k++)
        ck_assert_float_eq (f[k], (float) k);
    safetensors_destroy (&st);
    free (path);
}
END_TEST

/* A U8 tensor first puts the next one at an odd address: reads must not assume alignment. */
static const st_tensor_t *s_open_16bit (safetensors_t **st, const char *dtype, const uint16_t *bits,
                                        size_t n)
{
    char header[256];
    snprintf (header, sizeof header, "{\"pad\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
              "\"h\":{\"dtype\":\"%s\",\"shape\":[%zu],\"data_offsets\":[1,%zu]}}", dtype, n, 1 + 2 * n);
    unsigned char data[64] = { 0xee };
    for (size_t i = 0; i < n; i++) {
        data[1 + 2 * i] = (unsigned char) bits[i];
        data[2 + 2 * i] = (unsigned char) (bits[i] >> 8);
    }
    char *path = s_raw ("h.safetensors", header, data, 1 + 2 * n);
    *st = s_open_ok (path);
    free (path);
    return safetensors_find (*st, "h");
}

START_TEST (test_f16)
{
    static const uint16_t bits[] = { 0x0000, 0x8000, 0x3c00, 0xc000, 0x0001, 0x03ff, 0x0400,
                                     0x7bff, 0x7c00, 0xfc00, 0x3555, 0x8001, 0x7e00 };
    static const float want[] = { 0.0f, -0.0f, 1.0f, -2.0f, 0x1p-24f, 1023 * 0x1p-24f, 0x1p-14f,
                                  65504.0f, INFINITY, -INFINITY, 0.333251953125f, -0x1p-24f, NAN };
    safetensors_t *st;
    const st_tensor_t *t = s_open_16bit (&st, "F16", bits, 13);
    ck_assert_int_eq (t->dtype, ST_DTYPE_F16);
    float out[13];
    ck_assert_int_eq (safetensors_read_f32 (t, out, err, sizeof err), 0);
    for (int i = 0; i < 12; i++)
        ck_assert_msg (s_bits (out[i]) == s_bits (want[i]), "F16 0x%04x -> %a, expected %a",
                       bits[i], (double) out[i], (double) want[i]);
    ck_assert (isnan (out[12]));
    ck_assert (signbit (out[1]) && !signbit (out[0]));
    safetensors_destroy (&st);
}
END_TEST

START_TEST (test_bf16)
{
    static const uint16_t bits[] = { 0x3f80, 0xc000, 0x8000, 0x7f80, 0xff80, 0x0001, 0x0080,
                                     0x3eab, 0x7fc0 };
    static const float want[] = { 1.0f, -2.0f, -0.0f, INFINITY, -INFINITY, 0x1p-133f, 0x1p-126f,
                                  0.333984375f, NAN };
    safetensors_t *st;
    const st_tensor_t *t = s_open_16bit (&st, "BF16", bits, 9);
    ck_assert_int_eq (t->dtype, ST_DTYPE_BF16);
    float out[9];
    ck_assert_int_eq (safetensors_read_f32 (t, out, err, sizeof err), 0);
    for (int i = 0; i < 8; i++)
        ck_assert_msg (s_bits (out[i]) == s_bits (want[i]), "BF16 0x%04x -> %a, expected %a",
                       bits[i], (double) out[i], (double) want[i]);
    ck_assert (isnan (out[8]));
    ck_assert (signbit (out[2]));
    safetensors_destroy (&st);
}
END_TEST

START_TEST (test_f32_unaligned)
{
    const char *header = "{\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]},"
                         "\"f\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[3,11]}}";
    unsigned char data[11] = { 1, 2, 3, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x20, 0xc1 };
    char *path = s_raw ("u.safetensors", header, data, sizeof data);
    safetensors_t *st = s_open_ok (path);
    float out[2];
    ck_assert_int_eq (safetensors_read_f32 (safetensors_find (st, "f"), out, err, sizeof err), 0);
    ck_assert_float_eq (out[0], 1.0f);
    ck_assert_float_eq (out[1], -10.0f);
    ck_assert_uint_eq (safetensors_find (st, "f")->offset, 3);
    safetensors_destroy (&st);
    free (path);
}
END_TEST

/* A valid file cut short anywhere: in the length, in the header, in the data. */
START_TEST (test_truncated)
{
    float w[16] = { 0 };
    st_write_tensor_t t = { .name = "w", .ndim = 2, .shape = { 4, 4 }, .data = w };
    char *full = tu_write_file (s_dir, "full.safetensors", "", 0);
    ck_assert_int_eq (safetensors_write_f32 (full, &t, 1, err, sizeof err), 0);
    size_t len;
    unsigned char *bytes = s_slurp (full, &len);
    size_t n = (size_t) s_le64 (bytes);
    struct { size_t cut; const char *fragment; } cases[] = {
        { 0, "file is 0 bytes, shorter than the 8-byte header length" },
        { 3, "file is 3 bytes, shorter than the 8-byte header length" },
        { 7, "file is 7 bytes" },
        { 8, "runs past the end of the file (8 bytes)" },
        { 8 + n / 2, "runs past the end of the file" },
        { 8 + n - 1, "runs past the end of the file" },
        { 8 + n, "data_offsets [0, 64] run past the end of the data section (0 bytes)" },
        { 8 + n + 1, "data_offsets [0, 64] run past the end of the data section (1 bytes)" },
        { len - 1, "run past the end of the data section (63 bytes)" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *path = tu_write_file (s_dir, "cut.safetensors", bytes, (long) cases[i].cut);
        ck_assert_ptr_null (safetensors_open (path, err, sizeof err));
        ASSERT_ERR (cases[i].fragment);
        ASSERT_ERR (path);
        free (path);
    }
    free (bytes);
    free (full);
}
END_TEST

START_TEST (test_bad_json)
{
    s_expect_refused ("{\"a\": ", NULL, 0);
    ASSERT_ERR ("header is not valid JSON");
    s_expect_refused ("{} x", NULL, 0);
    ASSERT_ERR ("header is not valid JSON");
    s_expect_refused ("[1, 2]", NULL, 0);
    ASSERT_ERR ("header is not a JSON object");
    s_expect_refused ("\"a string\"", NULL, 0);
    ASSERT_ERR ("header is not a JSON object");
    s_expect_refused ("{\"a\": 1}", NULL, 0);
    ASSERT_ERR ("tensor \"a\": expected an object with dtype, shape and data_offsets");

    unsigned char raw[12] = { 4, 0, 0, 0, 0, 0, 0, 0, '{', '}', 0, ' ' };
    char *path = tu_write_file (s_dir, "nul.safetensors", raw, sizeof raw);
    ck_assert_ptr_null (safetensors_open (path, err, sizeof err));
    ASSERT_ERR ("header contains a NUL byte at offset 2");
    free (path);
}
END_TEST

START_TEST (test_header_length)
{
    s_expect_refused ("", NULL, 0);
    ASSERT_ERR ("header length is 0");

    char zeros[92] = { 0 };
    char *path = s_raw_len ("long.safetensors", 4096, "{}", zeros, sizeof zeros);
    ck_assert_ptr_null (safetensors_open (path, err, sizeof err));
    ASSERT_ERR ("long.safetensors: header length 4096 runs past the end of the file (102 bytes)");
    free (path);

    path = s_raw_len ("huge.safetensors", UINT64_MAX, "{}", NULL, 0);
    ck_assert_ptr_null (safetensors_open (path, err, sizeof err));
    ASSERT_ERR ("header length 18446744073709551615 runs past the end of the file (10 bytes)");

    /* over the 100 MiB limit inside a (sparse) file large enough to hold it */
    uint64_t n = (100u << 20) + 8;
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char) (n >> (8 * i));
    int fd = open (path, O_WRONLY | O_TRUNC);
    ck_assert_int_ge (fd, 0);
    ck_assert_int_eq (write (fd, len8, 8), 8);
    ck_assert_int_eq (ftruncate (fd, (off_t) (8 + n)), 0);
    close (fd);
    ck_assert_ptr_null (safetensors_open (path, err, sizeof err));
    ASSERT_ERR ("header length 104857608 is over the limit of 104857600 bytes");
    free (path);
}
END_TEST

/* Files that are not safetensors at all get said so, with what they look like, instead of a
 * nonsense header length ("header length 3832624001754279472 runs past the end of the file"). */
START_TEST (test_not_safetensors)
{
    static const struct { const char *bytes; size_t len; const char *said; } cases[] = {
        { "PK\x03\x04\x14\x00\x00\x00\x08\x00archive/data.pkl", 26,
          "not a safetensors file (one starts with an 8-byte little-endian header length, then a JSON header "
          "beginning with '{'; this one's first bytes are 50 4b 03 04 14 00 00 00 08). It is a zip archive: "
          "torch.save writes those (.pt, .pth); save the state dict with safetensors.torch.save_file "
          "(model.state_dict (), PATH) instead." },
        { "\x80\x02\x8a\x0a" "lz\xfc\x9c" "F\xf9 j\xa8" "P\x19.", 16, "It starts like a Python pickle" },
        { "\x89HDF\r\n\x1a\n\x00\x00\x00\x00", 12, "It is an HDF5 file (Keras)" },
        { "weights, as text: 0.1 0.2 0.3\n", 30, "this one's first bytes are 77 65 69 67 68 74 73 2c 20)." },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *path = tu_write_file (s_dir, "not.safetensors", cases[i].bytes, (long) cases[i].len);
        ck_assert_ptr_null (safetensors_open (path, err, sizeof err));
        ASSERT_ERR (cases[i].said);
        ASSERT_ERR ("not a safetensors file");
        free (path);
    }
}
END_TEST

START_TEST (test_offsets_out_of_range)
{
    float x[2] = { 1, 2 };
    s_expect_refused ("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", x, 4);
    ASSERT_ERR ("tensor \"a\": data_offsets [0, 8] run past the end of the data section (4 bytes)");
    s_expect_refused ("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", x, 8);
    ASSERT_ERR ("tensor \"a\": data_offsets [8, 4] end before they begin");
    s_expect_refused ("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", x, 8);
    ASSERT_ERR ("\"data_offsets\" is an array of 1, expected an array of 2 integers [begin, end]");
    s_expect_refused ("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,-8]}}", x, 8);
    ASSERT_ERR ("data_offsets[1] is -8, expected a non-negative integer");
    s_expect_refused ("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", x, 8);
    ASSERT_ERR ("\"data_offsets\" is missing");
}
END_TEST

START_TEST (test_size_disagrees_with_shape)
{
    static char data[1024];
    char *path = s_raw ("model.safetensors",
                        "{\"0.weight\":{\"dtype\":\"F32\",\"shape\":[16,32],\"data_offsets\":[0,1024]}}",
                        data, sizeof data);
    ck_assert_ptr_null (safetensors_open (path, err, sizeof err));
    ASSERT_ERR ("model.safetensors: tensor \"0.weight\": data_offsets [0, 1024] hold 1024 bytes, "
                "expected 2048 (F32 [16, 32])");
    free (path);
    s_expect_refused ("{\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,8]}}", data, 8);
    ASSERT_ERR ("hold 8 bytes, expected 6 (BF16 [3])");
}
END_TEST

START_TEST (test_known_dtype_sizes)
{
    static const struct { const char *name; unsigned size; } dtypes[] = {
        { "F64", 8 }, { "I64", 8 }, { "I32", 4 }, { "I16", 2 }, { "I8", 1 }, { "U8", 1 },
        { "BOOL", 1 }, { "U16", 2 }, { "U32", 4 }, { "U64", 8 }, { "F32", 4 }, { "F16", 2 },
        { "BF16", 2 }, { "F8_E4M3", 1 }, { "F8_E5M2", 1 },
    };
    static char data[48];
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++) {
        char header[160];
        snprintf (header, sizeof header, "{\"t\":{\"dtype\":\"%s\",\"shape\":[3],\"data_offsets\":[0,%u]}}",
                  dtypes[i].name, 3 * dtypes[i].size);
        char *path = s_raw ("d.safetensors", header, data, 3 * dtypes[i].size);
        safetensors_t *st = s_open_ok (path);
        ck_assert_uint_eq (safetensors_at (st, 0)->nbytes, 3 * dtypes[i].size);
        ck_assert_str_eq (safetensors_at (st, 0)->dtype_name, dtypes[i].name);
        safetensors_destroy (&st);
        free (path);
        /* one element too many bytes is refused */
        s_expect_refused (header, data, 3 * dtypes[i].size + 1);
        ASSERT_ERR ("trailing bytes");
    }
}
END_TEST

START_TEST (test_read_wrong_dtype)
{
    static char data[24];
    char *path = s_raw ("i.safetensors", "{\"steps\":{\"dtype\":\"I64\",\"shape\":[3],\"data_offsets\":[0,24]}}",
                        data, sizeof data);
    safetensors_t *st = s_open_ok (path);
    float out[3];
    ck_assert_int_eq (safetensors_read_f32 (safetensors_find (st, "steps"), out, err, sizeof err), -1);
    ASSERT_ERR ("tensor \"steps\": dtype I64 cannot be read as floats, expected F32, F16 or BF16");
    safetensors_destroy (&st);
    free (path);
}
END_TEST

START_TEST (test_unknown_dtype)
{
    static char data[8];
    s_expect_refused ("{\"q\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,2]}}", data, 2);
    ASSERT_ERR ("tensor \"q\": unknown dtype \"Q7\" (known: F32, F16, BF16");
    s_expect_refused ("{\"q\":{\"dtype\":5,\"shape\":[2],\"data_offsets\":[0,2]}}", data, 2);
    ASSERT_ERR ("tensor \"q\": \"dtype\" is 5, expected a string");
    s_expect_refused ("{\"q\":{\"dtype\":\"f32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8);
    ASSERT_ERR ("unknown dtype \"f32\"");       /* names are case-sensitive, as in the format */
}
END_TEST

START_TEST (test_duplicate_names)
{
    static char data[8];
    s_expect_refused ("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                      "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", data, 8);
    ASSERT_ERR ("duplicate tensor \"a\" in the header");
}
END_TEST

/* Opens HEADER + DATA and expects exactly "<path>: " WANT. */
static void s_expect_error (const char *header, const void *data, size_t data_len, const char *want)
{
    char *path = s_raw ("dup.safetensors", header, data, data_len);
    ck_assert_msg (safetensors_open (path, err, sizeof err) == NULL, "header %s was accepted", header);
    char expected[1024];
    snprintf (expected, sizeof expected, "%s: %s", path, want);
    ck_assert_str_eq (err, expected);
    free (path);
}

/* cJSON keeps both of two equal keys and its lookups see the first: a header with two dtypes would
 * be read as one thing here and as another by a reader that keeps the last. */
START_TEST (test_duplicate_keys)
{
    static char data[8];
    s_expect_error ("{\"t\":{\"dtype\":\"F32\",\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,4]}}", data, 4,
                    "tensor \"t\": duplicate key \"dtype\"");
    s_expect_error ("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"shape\":[2],\"data_offsets\":[0,4]}}", data, 4,
                    "tensor \"t\": duplicate key \"shape\"");
    s_expect_error ("{\"t\":{\"data_offsets\":[0,8],\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}",
                    data, 8, "tensor \"t\": duplicate key \"data_offsets\"");
    s_expect_error ("{\"__metadata__\":{\"format\":\"pt\"},\"t\":{\"dtype\":\"F32\",\"shape\":[1],"
                    "\"data_offsets\":[0,4]},\"__metadata__\":{\"format\":\"np\"}}", data, 4,
                    "duplicate key \"__metadata__\" in the header");
    s_expect_error ("{\"__metadata__\":{\"format\":\"pt\",\"format\":\"np\"}}", NULL, 0,
                    "\"__metadata__\": duplicate key \"format\"");
    /* keys that only look alike are different keys */
    char *path = s_raw ("ok.safetensors", "{\"__metadata__\":{\"a\":\"1\",\"A\":\"2\",\"a \":\"3\"},"
                        "\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"Dtype\":\"I64\"}}", data, 4);
    safetensors_t *st = s_open_ok (path);
    ck_assert_str_eq (safetensors_find (st, "t")->dtype_name, "F32");
    safetensors_destroy (&st);
    free (path);
}
END_TEST

/* cJSON decodes \u0000 into a NUL that ends the C string early: "w\u0000x" would be tensor "w". */
START_TEST (test_escaped_nul)
{
    static char data[8];
    s_expect_error ("{\"w\\u0000x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", data, 4,
                    "header has an escaped NUL (\\u0000) at byte 3; names and values must not contain NUL");
    s_expect_error ("{\"t\":{\"dtype\":\"F32\\u0000junk\",\"shape\":[1],\"data_offsets\":[0,4]}}", data, 4,
                    "header has an escaped NUL (\\u0000) at byte 18; names and values must not contain NUL");
    /* an escaped backslash followed by the text u0000 is not a NUL, nor is \u00000 after a quote */
    char *path = s_raw ("ok.safetensors", "{\"w\\\\u0000\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                        "\"__metadata__\":{\"k\\\"\":\"\\u0001\"}}", data, 4);
    safetensors_t *st = s_open_ok (path);
    ck_assert_ptr_nonnull (safetensors_find (st, "w\\u0000"));
    safetensors_destroy (&st);
    free (path);
}
END_TEST

START_TEST (test_bad_shapes)
{
    static char data[64];
    struct { const char *shape; const char *fragment; } cases[] = {
        { "[-1,2]", "tensor \"t\": shape[0] is -1, expected a non-negative integer" },
        { "[2,2.5]", "shape[1] is 2.5, expected a non-negative integer" },
        { "[\"2\"]", "shape[0] is the string \"2\", expected a non-negative integer" },
        { "[true]", "shape[0] is true" },
        { "[1e300]", "shape[0] is 1.0000000000000001e+300" },
        { "[9007199254740992]", "shape[0] is 9007199254740992" },       /* 2^53: not exact */
        { "[1,1,1,1,1,1,1,1,1]", "shape has 9 dimensions, at most 8 are supported" },
        { "{}", "\"shape\" is an object, expected an array of integers" },
        { "null", "\"shape\" is null" },
        { "[4294967296,4294967295,7]", "shape [4294967296, 4294967295, 7] has more than 2^64 "
          "elements" },
        { "[4503599627370496,2048]", "F32 [4503599627370496, 2048] is more than 2^64 bytes" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char header[256];
        snprintf (header, sizeof header, "{\"t\":{\"dtype\":\"F32\",\"shape\":%s,\"data_offsets\":[0,8]}}",
                  cases[i].shape);
        s_expect_refused (header, data, 8);
        ASSERT_ERR (cases[i].fragment);
    }
}
END_TEST

START_TEST (test_zero_dim)
{
    unsigned char data[4] = { 0x00, 0x00, 0x28, 0x42 };    /* 42.0f */
    char *path = s_raw ("z.safetensors", "{\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}",
                        data, 4);
    safetensors_t *st = s_open_ok (path);
    const st_tensor_t *t = safetensors_find (st, "s");
    ck_assert_uint_eq (t->ndim, 0);
    ck_assert_uint_eq (t->numel, 1);
    ck_assert_uint_eq (t->nbytes, 4);
    float v;
    ck_assert_int_eq (safetensors_read_f32 (t, &v, err, sizeof err), 0);
    ck_assert_float_eq (v, 42.0f);
    char shape[16];
    ck_assert_str_eq (safetensors_format_shape (t->shape, t->ndim, shape, sizeof shape), "[]");
    safetensors_destroy (&st);
    free (path);
    /* a scalar is 4 bytes, not 0 */
    s_expect_refused ("{\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,0]}}", NULL, 0);
    ASSERT_ERR ("hold 0 bytes, expected 4 (F32 [])");
}
END_TEST

/* The data section must be tiled exactly, as the reference implementation requires. */
START_TEST (test_gaps_and_overlaps)
{
    static char data[16];
    s_expect_refused ("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                      "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", data, 12);
    ASSERT_ERR ("tensor \"b\": data_offsets [8, 12] leave bytes 4 to 8 of the data section unused");
    s_expect_refused ("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                      "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", data, 8);
    ASSERT_ERR ("tensor \"b\": data_offsets [4, 8] overlap tensor \"a\", which ends at 8");
    s_expect_refused ("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", data, 16);
    ASSERT_ERR ("the tensors cover 4 of the 16 bytes of the data section");
    s_expect_refused ("{}", data, 1);
    ASSERT_ERR ("the tensors cover 0 of the 1 bytes");
}
END_TEST

START_TEST (test_metadata_and_empty)
{
    char *path = s_raw ("m.safetensors", "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"\"}}   ", NULL, 0);
    safetensors_t *st = s_open_ok (path);
    ck_assert_uint_eq (safetensors_count (st), 0);
    ck_assert_ptr_null (safetensors_find (st, "format"));
    ck_assert_ptr_null (safetensors_at (st, 0));
    safetensors_destroy (&st);
    free (path);
    s_expect_refused ("{\"__metadata__\":{\"epoch\":3}}", NULL, 0);
    ASSERT_ERR ("\"__metadata__\" key \"epoch\" is 3, expected a string");
    s_expect_refused ("{\"__metadata__\":[\"x\"]}", NULL, 0);
    ASSERT_ERR ("\"__metadata__\" is an array of 1, expected an object of strings");
}
END_TEST

START_TEST (test_not_a_file)
{
    char path[4200];
    snprintf (path, sizeof path, "%s/missing.safetensors", s_dir);
    ck_assert_ptr_null (safetensors_open (path, err, sizeof err));
    ASSERT_ERR ("missing.safetensors: cannot open: No such file or directory");
    ck_assert_ptr_null (safetensors_open (s_dir, err, sizeof err));
    ASSERT_ERR ("not a regular file (a directory)");
    /* a NULL or empty error buffer is allowed */
    ck_assert_ptr_null (safetensors_open (path, NULL, 0));
}
END_TEST

/* Opening a FIFO waits for a writer: a weights path naming one hung the server's start. This case
 * runs with a short timeout, so a hang fails it rather than stalls the suite. */
START_TEST (test_fifo_and_devices)
{
    char path[4200];
    snprintf (path, sizeof path, "%s/weights.safetensors", s_dir);
    ck_assert_int_eq (mkfifo (path, 0600), 0);
    ck_assert_ptr_null (safetensors_open (path, err, sizeof err));
    char want[4300];
    snprintf (want, sizeof want, "%s: not a regular file (a FIFO, socket or device)", path);
    ck_assert_str_eq (err, want);
    ck_assert_ptr_null (safetensors_open ("/dev/null", err, sizeof err));
    ck_assert_str_eq (err, "/dev/null: not a regular file (a FIFO, socket or device)");
}
END_TEST

START_TEST (test_write_errors)
{
    float x[2] = { 1, 2 };
    char path[4200];
    snprintf (path, sizeof path, "%s/no/such/dir/w.safetensors", s_dir);
    st_write_tensor_t t[2] = { { .name = "a", .ndim = 1, .shape = { 2 }, .data = x },
                               { .name = "a", .ndim = 1, .shape = { 2 }, .data = x } };
    ck_assert_int_eq (safetensors_write_f32 (path, t, 1, err, sizeof err), -1);
    ASSERT_ERR ("w.safetensors: cannot create: No such file or directory");

    snprintf (path, sizeof path, "%s/w.safetensors", s_dir);
    ck_assert_int_eq (safetensors_write_f32 (path, t, 2, err, sizeof err), -1);
    ASSERT_ERR ("duplicate tensor \"a\"");
    t[1] = (st_write_tensor_t) { .name = "b", .ndim = 2, .shape = { 2, 2 }, .data = NULL };
    ck_assert_int_eq (safetensors_write_f32 (path, t, 2, err, sizeof err), -1);
    ASSERT_ERR ("tensor \"b\": data is NULL");
    t[1] = (st_write_tensor_t) { .name = "__metadata__", .ndim = 1, .shape = { 2 }, .data = x };
    ck_assert_int_eq (safetensors_write_f32 (path, t, 2, err, sizeof err), -1);
    ASSERT_ERR ("name is reserved");
    t[1] = (st_write_tensor_t) { .name = "c", .ndim = 9, .data = x };
    ck_assert_int_eq (safetensors_write_f32 (path, t, 2, err, sizeof err), -1);
    ASSERT_ERR ("tensor \"c\": 9 dimensions, at most 8");
    ck_assert_int_eq (access (path, F_OK), -1);            /* nothing was written */

    /* a device that refuses data: reported, and the device itself is left alone */
    struct stat st;
    if (stat ("/dev/full", &st) == 0 && S_ISCHR (st.st_mode)) {
        ck_assert_int_eq (safetensors_write_f32 ("/dev/full", t, 1, err, sizeof err), -1);
        ASSERT_ERR ("/dev/full: write failed: No space left on device");
        ck_assert_int_eq (stat ("/dev/full", &st), 0);
        ck_assert (S_ISCHR (st.st_mode));
    }
}
END_TEST

/* Every mutation of a valid file either fails with a message or yields tensors that lie inside
 * the file where their header says; ASan/UBSan catch any stray read. */
static void s_check_mutant (const char *path, const unsigned char *bytes, size_t len, int *ok, int *bad)
{
    safetensors_t *st = safetensors_open (path, err, sizeof err);
    if (!st) {
        ck_assert_msg (strstr (err, path) == err, "error \"%s\" does not name the file", err);
        (*bad)++;
        return;
    }
    uint64_t n = s_le64 (bytes);
    ck_assert (len >= 8 && n <= len - 8);
    uint64_t data_size = len - 8 - n;
    for (size_t i = 0; i < safetensors_count (st); i++) {
        const st_tensor_t *t = safetensors_at (st, i);
        ck_assert (t->offset <= data_size && t->nbytes <= data_size - t->offset);
        ck_assert (t->nbytes == 0 || memcmp (t->data, bytes + 8 + n + t->offset, t->nbytes) == 0);
        if (t->dtype != ST_DTYPE_OTHER) {
            float *dst = malloc ((size_t) t->numel * sizeof *dst + 1);
            ck_assert_int_eq (safetensors_read_f32 (t, dst, err, sizeof err), 0);
            free (dst);
        }
    }
    safetensors_destroy (&st);
    (*ok)++;
}

START_TEST (test_fuzz_mutations)
{
    const char *header = "{\"__metadata__\":{\"k\":\"v\"},"
        "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
        "\"h\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[24,30]},"
        "\"b\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[30,32]},"
        "\"i\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[32,40]}}";
    unsigned char data[40];
    for (int i = 0; i < 40; i++)
        data[i] = (unsigned char) (i * 37);
    char *base = s_raw ("base.safetensors", header, data, sizeof data);
    size_t len;
    unsigned char *orig = s_slurp (base, &len);
    unsigned char *m = malloc (len);
    static const char json_chars[] = "{}[]\":,0123456789-.eE tfn\\";
    uint64_t rng = 12345;
    int ok = 0, bad = 0;
    for (int iter = 0; iter < 2000; iter++) {
        memcpy (m, orig, len);
        size_t mlen = len;
        int kind = (int) (rng_next (&rng) % 4);
        int flips = 1 + (int) (rng_next (&rng) % 4);
        for (int f = 0; f < flips && kind != 3; f++) {
            size_t at = (size_t) (rng_next (&rng) % len);
            if (kind == 0)          /* any byte anywhere */
                m[at] = (unsigned char) rng_next (&rng);
            else if (kind == 1)     /* JSON-ish bytes inside the header, to get past the parser */
                m[8 + at % (len - 8)] = (unsigned char) json_chars[rng_next (&rng) % (sizeof json_chars - 1)];
            else                    /* the length field, nudged */
                m[rng_next (&rng) % 2] ^= (unsigned char) (1u << (rng_next (&rng) % 8));
        }
        if (kind == 3 || rng_next (&rng) % 8 == 0)
            mlen = (size_t) (rng_next (&rng) % (len + 1));
        char *path = tu_write_file (s_dir, "mutant.safetensors", m, (long) mlen);
        s_check_mutant (path, m, mlen, &ok, &bad);
        free (path);
    }
    printf ("fuzz: %d mutants accepted, %d refused\n", ok, bad);
    ck_assert_int_eq (ok + bad, 2000);
    ck_assert_int_gt (ok, 0);           /* some mutations (in the data) leave a valid file */
    ck_assert_int_gt (bad, 0);
    free (m);
    free (orig);
    free (base);
}
END_TEST

static Suite *s_suite (void)
{
    Suite *s = suite_create ("safetensors");
    TCase *tc = tcase_create ("core");
    tcase_add_checked_fixture (tc, s_setup, s_teardown);
    tcase_set_timeout (tc, 60);
    tcase_add_test (tc, test_round_trip);
    tcase_add_test (tc, test_overwrite_leaves_no_temp);
    tcase_add_test (tc, test_python_layout);
    tcase_add_test (tc, test_f16);
    tcase_add_test (tc, test_bf16);
    tcase_add_test (tc, test_f32_unaligned);
    tcase_add_test (tc, test_truncated);
    tcase_add_test (tc, test_bad_json);
    tcase_add_test (tc, test_header_length);
    tcase_add_test (tc, test_not_safetensors);
    tcase_add_test (tc, test_offsets_out_of_range);
    tcase_add_test (tc, test_size_disagrees_with_shape);
    tcase_add_test (tc, test_known_dtype_sizes);
    tcase_add_test (tc, test_read_wrong_dtype);
    tcase_add_test (tc, test_unknown_dtype);
    tcase_add_test (tc, test_duplicate_names);
    tcase_add_test (tc, test_duplicate_keys);
    tcase_add_test (tc, test_escaped_nul);
    tcase_add_test (tc, test_bad_shapes);
    tcase_add_test (tc, test_zero_dim);
    tcase_add_test (tc, test_gaps_and_overlaps);
    tcase_add_test (tc, test_metadata_and_empty);
    tcase_add_test (tc, test_not_a_file);
    tcase_add_test (tc, test_write_errors);
    tcase_add_test (tc, test_fuzz_mutations);
    suite_add_tcase (s, tc);
    TCase *special = tcase_create ("special files");
    tcase_add_checked_fixture (special, s_setup, s_teardown);
    tcase_set_timeout (special, 5);
    tcase_add_test (special, test_fifo_and_devices);
    suite_add_tcase (s, special);
    return s;
}

int main (void)
{
    SRunner *sr = srunner_create (s_suite ());
    srunner_run_all (sr, CK_NORMAL);
    int failed = srunner_ntests_failed (sr);
    srunner_free (sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
