/* front/request.h without ZeroMQ: request_check_infer against a registry of two small CPU models
 * (an MLP "mlp", 5 -> 4 -> 2, max_rows 4; an LSTM "seq", window 6 of 3 inputs, max_rows 3) for
 * every outcome with the exact error text a client gets, and request_quote, the rule for echoing
 * client bytes. */
#define _GNU_SOURCE
#include "front/request.h"
#include "base/log.h"
#include "lstm_reference.h"
#include "reference.h"
#include "st_write.h"
#include "testutil.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MLP_IN 5
#define MAX_ROWS 4
#define WINDOW 6
#define STEP 3

static char *s_dir;
static config_t *s_cfg;
static model_registry_t *s_models;

static void s_setup (void)
{
    log_set_level (LOG_LEVEL_WARN);     /* the registry's load lines are not this test's business */
    s_dir = tu_tmpdir ();
    ck_assert_ptr_nonnull (s_dir);
    const uint32_t sizes[] = { MLP_IN, 4, 2 };
    const activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_NONE };
    weights_t *w = weights_random (sizes, acts, 2, 5);
    ck_assert_ptr_nonnull (w);
    st_write_tensor_t t[4] = {
        { "a.weight", 2, { 4, MLP_IN }, w->layers[0].weight }, { "a.bias", 1, { 4 }, w->layers[0].bias },
        { "b.weight", 2, { 2, 4 }, w->layers[1].weight }, { "b.bias", 1, { 2 }, w->layers[1].bias },
    };
    char path[4200], err[1024];
    snprintf (path, sizeof path, "%s/mlp.safetensors", s_dir);
    ck_assert_msg (safetensors_write_f32 (path, t, 4, err, sizeof err) == 0, "%s", err);
    weights_destroy (&w);
    const lstm_shape_t shape = { .layers = 1, .step_size = STEP, .hidden = 4, .out = 2, .window = WINDOW };
    snprintf (path, sizeof path, "%s/seq.safetensors", s_dir);
    ck_assert_msg (lstm_random_file (path, &shape, 6, err, sizeof err) == 0, "%s", err);
    char json[4096];
    snprintf (json, sizeof json,
              "{ \"server\": { \"endpoints\": [\"tcp://127.0.0.1:1\"] },\n"
              "  \"models\": [\n"
              "   { \"name\": \"mlp\", \"backend\": \"cpu\", \"max_rows\": %d, \"weights\": \"mlp.safetensors\",\n"
              "     \"layers\": [ { \"weight\": \"a.weight\", \"bias\": \"a.bias\", \"activation\": \"relu\" },\n"
              "                 { \"weight\": \"b.weight\", \"bias\": \"b.bias\" } ] },\n"
              "   { \"name\": \"seq\", \"type\": \"lstm\", \"backend\": \"cpu\", \"max_rows\": 3, \"weights\": \"seq.safetensors\",\n"
              "     \"lstm\": \"lstm.\", \"window\": %d, \"head\": { \"weight\": \"head.weight\", \"bias\": \"head.bias\" } } ] }\n",
              MAX_ROWS, WINDOW);
    char *config = tu_write_file (s_dir, "request.json", json, -1);
    s_cfg = config_load (config, err, sizeof err);
    free (config);
    ck_assert_msg (s_cfg != NULL, "%s", err);
    s_models = model_registry_new (s_cfg, err, sizeof err);
    ck_assert_msg (s_models != NULL, "%s", err);
}

static void s_teardown (void)
{
    model_registry_destroy (&s_models);
    config_destroy (&s_cfg);
    tu_remove_tree (s_dir);
    free (s_dir);
}

/* Checks MODEL with FEATURES (N of them), ROWS and STREAM: the status; the error in ERR (or ""). */
static sig_status_t s_check (const char *model, const float *features, size_t n, uint32_t rows, uint64_t stream,
                             model_t **m, uint32_t *rows_out, char *err, size_t errlen)
{
    Sigserve__V1__InferRequest req = SIGSERVE__V1__INFER_REQUEST__INIT;
    req.model = (char *) model;
    req.features = (float *) features;
    req.n_features = n;
    req.rows = rows;
    req.stream_id = stream;
    err[0] = '\0';
    *rows_out = 12345;
    return request_check_infer (s_models, &req, m, rows_out, err, errlen);
}

/* MODEL with N features, ROWS, STREAM is refused with STATUS and exactly TEXT. */
static void s_refused (const char *model, const float *f, size_t n, uint32_t rows, uint64_t stream, sig_status_t status,
                       const char *text)
{
    model_t *m = (model_t *) 1;
    uint32_t r;
    char err[512];
    sig_status_t st = s_check (model, f, n, rows, stream, &m, &r, err, sizeof err);
    ck_assert_msg (st == status, "status %d, expected %d (%s)", st, status, err);
    ck_assert_str_eq (err, text);
    ck_assert_uint_eq (r, 12345);       /* rows are not written unless accepted */
    if (status == SIG_UNKNOWN_MODEL)
        ck_assert_ptr_null (m);
    else
        ck_assert_msg (m == model_registry_find (s_models, model), "the model is not reported for its version");
}

static float s_f[MAX_ROWS * WINDOW * STEP * 2];

START_TEST (a_good_request_is_accepted_with_its_rows)
{
    model_t *m = NULL;
    uint32_t rows;
    char err[512];
    ck_assert_int_eq (s_check ("mlp", s_f, 3 * MLP_IN, 3, 0, &m, &rows, err, sizeof err), SIG_OK);
    ck_assert_ptr_eq (m, model_registry_find (s_models, "mlp"));
    ck_assert_uint_eq (rows, 3);
    ck_assert_str_eq (err, "");
    ck_assert_int_eq (s_check ("mlp", s_f, MAX_ROWS * MLP_IN, MAX_ROWS, 0, &m, &rows, err, sizeof err), SIG_OK);
    ck_assert_uint_eq (rows, MAX_ROWS);
}
END_TEST

START_TEST (rows_zero_means_one)
{
    model_t *m = NULL;
    uint32_t rows;
    char err[512];
    ck_assert_int_eq (s_check ("mlp", s_f, MLP_IN, 0, 0, &m, &rows, err, sizeof err), SIG_OK);
    ck_assert_uint_eq (rows, 1);
    s_refused ("mlp", s_f, 2 * MLP_IN, 0, 0, SIG_BAD_SHAPE,
               "features: expected rows x input size = 1 x 5 = 5 values for model \"mlp\", got 10");
}
END_TEST

START_TEST (an_unknown_model_is_named_with_the_served_ones)
{
    s_refused ("nope", s_f, MLP_IN, 1, 0, SIG_UNKNOWN_MODEL, "model: \"nope\" is not served here (served: mlp, seq)");
    s_refused ("", s_f, MLP_IN, 1, 0, SIG_UNKNOWN_MODEL, "model: \"\" is not served here (served: mlp, seq)");
    s_refused ("MLP", s_f, MLP_IN, 1, 0, SIG_UNKNOWN_MODEL, "model: \"MLP\" is not served here (served: mlp, seq)");
    /* Client bytes come back quoted: control bytes and non-ASCII as \xNN, quotes escaped, cut at 64. */
    s_refused ("a\x01\"b\\\xc3\xa9\n", s_f, MLP_IN, 1, 0, SIG_UNKNOWN_MODEL,
               "model: \"a\\x01\\\"b\\\\\\xc3\\xa9\\x0a\" is not served here (served: mlp, seq)");
    char longname[101];
    memset (longname, 'n', 100);
    longname[100] = '\0';
    char want[512];
    snprintf (want, sizeof want, "model: \"%.64s...\" is not served here (served: mlp, seq)", longname);
    s_refused (longname, s_f, MLP_IN, 1, 0, SIG_UNKNOWN_MODEL, want);
}
END_TEST

START_TEST (rows_over_max_rows_are_refused)
{
    s_refused ("mlp", s_f, 5 * MLP_IN, 5, 0, SIG_BAD_SHAPE, "rows: expected 1 to 4 for model \"mlp\", got 5");
    s_refused ("mlp", s_f, 0, 4000000000u, 0, SIG_BAD_SHAPE, "rows: expected 1 to 4 for model \"mlp\", got 4000000000");
    s_refused ("seq", s_f, 4 * WINDOW * STEP, 4, 0, SIG_BAD_SHAPE, "rows: expected 1 to 3 for model \"seq\", got 4");
}
END_TEST

START_TEST (features_that_do_not_divide_into_rows_are_refused)
{
    s_refused ("mlp", s_f, 11, 2, 0, SIG_BAD_SHAPE,
               "features: 11 values do not divide into rows=2 rows of 5 (model \"mlp\" takes 5 features per row)");
    s_refused ("mlp", s_f, 7, 3, 0, SIG_BAD_SHAPE,
               "features: 7 values do not divide into rows=3 rows of 5 (model \"mlp\" takes 5 features per row)");
}
END_TEST

START_TEST (a_wrong_feature_count_is_refused_with_the_expected_one)
{
    s_refused ("mlp", s_f, 8, 2, 0, SIG_BAD_SHAPE,
               "features: expected rows x input size = 2 x 5 = 10 values for model \"mlp\", got 8");
    s_refused ("mlp", s_f, 0, 1, 0, SIG_BAD_SHAPE,
               "features: expected rows x input size = 1 x 5 = 5 values for model \"mlp\", got 0");
    s_refused ("mlp", s_f, 4, 1, 0, SIG_BAD_SHAPE,
               "features: expected rows x input size = 1 x 5 = 5 values for model \"mlp\", got 4");
}
END_TEST

START_TEST (a_nan_or_inf_is_refused_naming_its_row_and_column)
{
    float f[2 * MLP_IN] = { 0 };
    f[7] = NAN;
    s_refused ("mlp", f, 2 * MLP_IN, 2, 0, SIG_BAD_VALUE,
               "features[7] (row 1, column 2) is NaN; every feature must be finite");
    f[7] = 1;
    f[0] = INFINITY;
    s_refused ("mlp", f, 2 * MLP_IN, 2, 0, SIG_BAD_VALUE,
               "features[0] (row 0, column 0) is Inf; every feature must be finite");
    f[0] = 0;
    f[9] = -INFINITY;
    f[4] = NAN;         /* the first one is named */
    s_refused ("mlp", f, 2 * MLP_IN, 2, 0, SIG_BAD_VALUE,
               "features[4] (row 0, column 4) is NaN; every feature must be finite");
    f[4] = 0;
    s_refused ("mlp", f, 2 * MLP_IN, 2, 0, SIG_BAD_VALUE,
               "features[9] (row 1, column 4) is Inf; every feature must be finite");
    /* The largest finite float is fine. */
    f[9] = 3.4e38f;
    model_t *m;
    uint32_t rows;
    char err[512];
    ck_assert_int_eq (s_check ("mlp", f, 2 * MLP_IN, 2, 0, &m, &rows, err, sizeof err), SIG_OK);
}
END_TEST

START_TEST (a_stream_id_on_an_mlp_is_refused)
{
    s_refused ("mlp", s_f, MLP_IN, 1, 7, SIG_BAD_SHAPE,
               "stream_id: model \"mlp\" is of type mlp, which keeps no streams; send stream_id 0");
}
END_TEST

START_TEST (a_stream_request_carries_one_step_of_one_row)
{
    model_t *m = NULL;
    uint32_t rows;
    char err[512];
    ck_assert_int_eq (s_check ("seq", s_f, STEP, 1, 5, &m, &rows, err, sizeof err), SIG_OK);
    ck_assert_uint_eq (rows, 1);
    ck_assert_int_eq (s_check ("seq", s_f, STEP, 0, 5, &m, &rows, err, sizeof err), SIG_OK);     /* rows 0: 1 */
    ck_assert_uint_eq (rows, 1);
    s_refused ("seq", s_f, 2 * STEP, 2, 5, SIG_BAD_SHAPE,
               "rows: a streaming request (stream_id 5) carries one step of model \"seq\": expected 1, got 2");
    s_refused ("seq", s_f, 4, 1, 5, SIG_BAD_SHAPE,
               "features: expected one step of 3 values for model \"seq\" (stream_id 5), got 4; a whole window of "
               "6 x 3 goes with stream_id 0");
    s_refused ("seq", s_f, WINDOW * STEP, 1, 18446744073709551615ull, SIG_BAD_SHAPE,
               "features: expected one step of 3 values for model \"seq\" (stream_id 18446744073709551615), got 18; "
               "a whole window of 6 x 3 goes with stream_id 0");
    float f[STEP] = { 0, 0, NAN };
    s_refused ("seq", f, STEP, 1, 5, SIG_BAD_VALUE, "features[2] (row 0, column 2) is NaN; every feature must be finite");
}
END_TEST

START_TEST (an_lstm_request_without_a_stream_carries_whole_windows)
{
    model_t *m = NULL;
    uint32_t rows;
    char err[512];
    ck_assert_int_eq (s_check ("seq", s_f, 2 * WINDOW * STEP, 2, 0, &m, &rows, err, sizeof err), SIG_OK);
    ck_assert_uint_eq (rows, 2);
    s_refused ("seq", s_f, WINDOW * STEP, 2, 0, SIG_BAD_SHAPE,
               "features: expected rows x window x step size = 2 x 6 x 3 = 36 values for model \"seq\" (whole "
               "windows; one step goes with a stream_id), got 18");
    s_refused ("seq", s_f, STEP, 1, 0, SIG_BAD_SHAPE,
               "features: expected rows x window x step size = 1 x 6 x 3 = 18 values for model \"seq\" (whole "
               "windows; one step goes with a stream_id), got 3");
    s_refused ("seq", s_f, 19, 2, 0, SIG_BAD_SHAPE,
               "features: 19 values do not divide into rows=2 rows of 18 (model \"seq\" takes 18 features per row)");
    float f[WINDOW * STEP] = { 0 };
    f[17] = -INFINITY;
    s_refused ("seq", f, WINDOW * STEP, 1, 0, SIG_BAD_VALUE,
               "features[17] (row 0, column 17) is Inf; every feature must be finite");
}
END_TEST

/* ---- request_quote ---- */

static const char *s_quote (const char *s, size_t max, size_t len)
{
    static char buf[512];
    memset (buf, '#', sizeof buf);
    const char *r = request_quote (s, max, buf, len);
    ck_assert_ptr_eq (r, buf);
    ck_assert_uint_lt (strlen (buf), len ? len : 1);
    return buf;
}

START_TEST (quote_keeps_printable_ascii_and_escapes_the_rest)
{
    ck_assert_str_eq (s_quote ("tick_mlp v2 (x=1)~", 64, 512), "\"tick_mlp v2 (x=1)~\"");
    ck_assert_str_eq (s_quote ("", 64, 512), "\"\"");
    ck_assert_str_eq (s_quote ("say \"hi\"", 64, 512), "\"say \\\"hi\\\"\"");
    ck_assert_str_eq (s_quote ("a\\b", 64, 512), "\"a\\\\b\"");
    ck_assert_str_eq (s_quote ("\x01\t\n\x1f\x7f", 64, 512), "\"\\x01\\x09\\x0a\\x1f\\x7f\"");
    ck_assert_str_eq (s_quote ("caf\xc3\xa9 \xff", 64, 512), "\"caf\\xc3\\xa9 \\xff\"");
    /* Every byte of the result is printable ASCII: valid UTF-8 for any strict decoder. */
    char all[256];
    for (int i = 1; i < 256; i++)
        all[i - 1] = (char) i;
    all[255] = '\0';
    const char *q = s_quote (all, 255, 512);
    for (const char *p = q; *p; p++)
        ck_assert_msg (*p >= 0x20 && *p < 0x7f, "byte 0x%02x in the quoted text", (unsigned char) *p);
}
END_TEST

START_TEST (quote_cuts_after_max_bytes_or_at_the_buffer_with_dots)
{
    ck_assert_str_eq (s_quote ("abcdef", 3, 512), "\"abc...\"");
    ck_assert_str_eq (s_quote ("abc", 3, 512), "\"abc\"");         /* exactly max: no dots */
    ck_assert_str_eq (s_quote ("\x01\x02\x03", 2, 512), "\"\\x01\\x02...\"");
    /* A buffer too small for the whole text: cut where it fits, dots and the closing quote kept. */
    const char *q = s_quote ("abcdefghijklmnopqrstuvwxyz", 64, 20);
    ck_assert_str_eq (q, "\"abcdefghij...\"");
    q = s_quote ("\xff\xff\xff\xff\xff\xff", 64, 24);
    ck_assert_str_eq (q, "\"\\xff\\xff\\xff\\xff...\"");     /* 21 bytes and the NUL in 24 */
    /* Smaller than 8 bytes: nothing fits, the result is empty. */
    ck_assert_str_eq (s_quote ("abc", 64, 7), "");
    char one = 'x';
    ck_assert_str_eq (request_quote ("abc", 64, &one, 1), "");
}
END_TEST

int main (void)
{
    Suite *s = suite_create ("request");
    TCase *tc = tcase_create ("check_infer");
    tcase_add_checked_fixture (tc, s_setup, s_teardown);
    tcase_set_timeout (tc, 30);
    tcase_add_test (tc, a_good_request_is_accepted_with_its_rows);
    tcase_add_test (tc, rows_zero_means_one);
    tcase_add_test (tc, an_unknown_model_is_named_with_the_served_ones);
    tcase_add_test (tc, rows_over_max_rows_are_refused);
    tcase_add_test (tc, features_that_do_not_divide_into_rows_are_refused);
    tcase_add_test (tc, a_wrong_feature_count_is_refused_with_the_expected_one);
    tcase_add_test (tc, a_nan_or_inf_is_refused_naming_its_row_and_column);
    tcase_add_test (tc, a_stream_id_on_an_mlp_is_refused);
    tcase_add_test (tc, a_stream_request_carries_one_step_of_one_row);
    tcase_add_test (tc, an_lstm_request_without_a_stream_carries_whole_windows);
    suite_add_tcase (s, tc);
    TCase *tq = tcase_create ("quote");
    tcase_add_test (tq, quote_keeps_printable_ascii_and_escapes_the_rest);
    tcase_add_test (tq, quote_cuts_after_max_bytes_or_at_the_buffer_with_dots);
    suite_add_tcase (s, tq);
    return tu_run_suite (s);
}
