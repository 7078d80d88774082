/* Model weights: loading a layer chain from safetensors (and every shape error a user can make),
 * random weights, the splitmix64 generator and the float64 reference forward pass. */
#define _GNU_SOURCE
#include "rng.h"
#include "st_write.h"
#include "reference.h"
#include "weights/weights.h"
#include "weights/safetensors.h"
#include "testutil.h"

#include <check.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *s_dir;
static char *s_path;            /* the test's weights file */
static model_config_t *s_cfg;
static char err[1024];

#define ASSERT_ERR(fragment) \
    ck_assert_msg (strstr (err, (fragment)) != NULL, "error \"%s\" lacks \"%s\"", err, (fragment))

static void s_setup (void)
{
    s_dir = tu_tmpdir ();
    ck_assert_ptr_nonnull (s_dir);
    size_t n = strlen (s_dir) + 32;
    s_path = malloc (n);
    snprintf (s_path, n, "%s/tick.safetensors", s_dir);
    s_cfg = calloc (1, sizeof *s_cfg);
    snprintf (s_cfg->name, sizeof s_cfg->name, "tick_mlp");
    snprintf (s_cfg->weights, sizeof s_cfg->weights, "%s", s_path);
    err[0] = 0;
}

static void s_teardown (void)
{
    tu_remove_tree (s_dir);
    free (s_dir);
    free (s_path);
    free (s_cfg);
}

/* Appends a layer to the config. */
static void s_layer (const char *weight, const char *bias, activation_t act)
{
    layer_config_t *l = &s_cfg->layers[s_cfg->layer_count++];
    snprintf (l->weight, sizeof l->weight, "%s", weight);
    snprintf (l->bias, sizeof l->bias, "%s", bias);
    l->activation = act;
}

/* A tensor for the file; DATA NULL means "fill with a ramp" from a static pool. */
static st_write_tensor_t s_t (const char *name, size_t ndim, uint64_t d0, uint64_t d1, const float *data)
{
    static float pool[1 << 16];
    static int filled;
    if (!filled) {
        for (size_t i = 0; i < sizeof pool / sizeof pool[0]; i++)
            pool[i] = (float) ((int) (i % 17) - 8) / 16.0f;
        filled = 1;
    }
    return (st_write_tensor_t) { .name = name, .ndim = ndim, .shape = { d0, d1 }, .data = data ? data : pool };
}

static void s_write (const st_write_tensor_t *t, size_t count)
{
    ck_assert_msg (safetensors_write_f32 (s_path, t, count, err, sizeof err) == 0, "write: %s", err);
}

static weights_t *s_load_fails (void)
{
    weights_t *w = weights_load (s_cfg, err, sizeof err);
    ck_assert_msg (w == NULL, "load succeeded");
    ASSERT_ERR ("model \"tick_mlp\": ");
    return w;
}

static weights_t *s_load_ok (void)
{
    weights_t *w = weights_load (s_cfg, err, sizeof err);
    ck_assert_msg (w != NULL, "load failed: %s", err);
    return w;
}

/* ------------------------------------------------------------------------------------------- */

START_TEST (test_load_chain)
{
    float w0[12], b0[3], w1[6], b1[2], w2[2], b2[1];
    uint64_t rng = 7;
    float *all[] = { w0, b0, w1, b1, w2, b2 };
    size_t lens[] = { 12, 3, 6, 2, 2, 1 };
    for (int t = 0; t < 6; t++)
        for (size_t i = 0; i < lens[t]; i++)
            all[t][i] = rng_uniform (&rng, -1, 1);
    st_write_tensor_t t[] = { s_t ("0.weight", 2, 3, 4, w0), s_t ("0.bias", 1, 3, 0, b0),
                              s_t ("2.weight", 2, 2, 3, w1), s_t ("2.bias", 1, 2, 0, b1),
                              s_t ("4.weight", 2, 1, 2, w2), s_t ("4.bias", 1, 1, 0, b2) };
    s_write (t, 6);
    s_layer ("0.weight", "0.bias", ACTIVATION_RELU);
    s_layer ("2.weight", "2.bias", ACTIVATION_TANH);
    s_layer ("4.weight", "4.bias", ACTIVATION_SIGMOID);
    weights_t *w = s_load_ok ();
    ck_assert_uint_eq (w->layer_count, 3);
    ck_assert_uint_eq (w->input_size, 4);
    ck_assert_uint_eq (w->output_size, 1);
    ck_assert_uint_eq (w->widest, 4);
    uint32_t in[] = { 4, 3, 2 }, out[] = { 3, 2, 1 };
    activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_TANH, ACTIVATION_SIGMOID };
    for (int l = 0; l < 3; l++) {
        ck_assert_uint_eq (w->layers[l].in, in[l]);
        ck_assert_uint_eq (w->layers[l].out, out[l]);
        ck_assert_int_eq (w->layers[l].activation, acts[l]);
        ck_assert_mem_eq (w->layers[l].weight, all[2 * l], lens[2 * l] * sizeof (float));
        ck_assert_mem_eq (w->layers[l].bias, all[2 * l + 1], lens[2 * l + 1] * sizeof (float));
    }
    weights_destroy (&w);
    ck_assert_ptr_null (w);
    weights_destroy (&w);
    weights_destroy (NULL);
}
END_TEST

START_TEST (test_missing_tensor)
{
    st_write_tensor_t t[] = { s_t ("0.weight", 2, 3, 4, NULL), s_t ("0.bias", 1, 3, 0, NULL) };
    s_write (t, 2);
    s_layer ("0.weight", "0.bias", ACTIVATION_RELU);
    s_layer ("9.weight", "9.bias", ACTIVATION_NONE);
    s_load_fails ();
    char want[4300];
    snprintf (want, sizeof want, "model \"tick_mlp\": tensor \"9.weight\" not found in %s (it has: "
              "0.weight, 0.bias)", s_path);
    ASSERT_ERR (want);
}
END_TEST

START_TEST (test_missing_tensor_long_list)
{
    static const char *names[] = { "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k" };
    st_write_tensor_t t[11];
    for (int i = 0; i < 11; i++)
        t[i] = s_t (names[i], 1, 1, 0, NULL);
    s_write (t, 11);
    s_layer ("0.weight", "", ACTIVATION_NONE);
    s_load_fails ();
    ASSERT_ERR ("(it has: a, b, c, d, e, f, g, h, ... and 3 more)");
}
END_TEST

START_TEST (test_chain_mismatch)
{
    st_write_tensor_t t[] = { s_t ("0.weight", 2, 256, 8, NULL), s_t ("0.bias", 1, 256, 0, NULL),
                              s_t ("2.weight", 2, 64, 128, NULL), s_t ("2.bias", 1, 64, 0, NULL) };
    s_write (t, 4);
    s_layer ("0.weight", "0.bias", ACTIVATION_RELU);
    s_layer ("2.weight", "2.bias", ACTIVATION_NONE);
    s_load_fails ();
    ASSERT_ERR ("model \"tick_mlp\": layers[1].weight \"2.weight\" has shape [64, 128], expected "
                "[*, 256] (the previous layer's output size)");
}
END_TEST

START_TEST (test_bias_wrong_length)
{
    st_write_tensor_t t[] = { s_t ("0.weight", 2, 16, 8, NULL), s_t ("0.bias", 1, 15, 0, NULL) };
    s_write (t, 2);
    s_layer ("0.weight", "0.bias", ACTIVATION_RELU);
    s_load_fails ();
    ASSERT_ERR ("layers[0].bias \"0.bias\" has shape [15], expected [16] (the weight's output size)");
    /* a 2-D bias of the right size is still the wrong shape */
    t[1] = s_t ("0.bias", 2, 16, 1, NULL);
    s_write (t, 2);
    s_load_fails ();
    ASSERT_ERR ("layers[0].bias \"0.bias\" has shape [16, 1], expected [16]");
}
END_TEST

START_TEST (test_weight_not_2d)
{
    st_write_tensor_t t[] = { s_t ("0.weight", 1, 8, 0, NULL) };
    s_write (t, 1);
    s_layer ("0.weight", "", ACTIVATION_RELU);
    s_load_fails ();
    ASSERT_ERR ("model \"tick_mlp\": layers[0].weight \"0.weight\" has shape [8], expected 2 "
                "dimensions [out, in]");
    t[0] = s_t ("0.weight", 2, 0, 8, NULL);
    s_write (t, 1);
    s_load_fails ();
    ASSERT_ERR ("has shape [0, 8], expected sizes from 1 to 4294967295");
}
END_TEST

START_TEST (test_non_finite_weight)
{
    float w[8] = { 1, 2, 3, 4, 5, NAN, 7, 8 }, b[2] = { 0, INFINITY };
    st_write_tensor_t t[] = { s_t ("0.weight", 2, 2, 4, w), s_t ("0.bias", 1, 2, 0, b) };
    s_write (t, 2);
    s_layer ("0.weight", "0.bias", ACTIVATION_RELU);
    s_load_fails ();
    ASSERT_ERR ("layers[0].weight \"0.weight\" element 5 (row 1, column 1) is NaN, expected a finite value");
    w[5] = 6;
    s_write (t, 2);
    s_load_fails ();
    ASSERT_ERR ("layers[0].bias \"0.bias\" element 1 is inf, expected a finite value");
}
END_TEST

START_TEST (test_no_bias)
{
    st_write_tensor_t t[] = { s_t ("w", 2, 5, 3, NULL) };
    s_write (t, 1);
    s_layer ("w", "", ACTIVATION_NONE);
    weights_t *w = s_load_ok ();
    for (int i = 0; i < 5; i++)
        ck_assert_float_eq (w->layers[0].bias[i], 0.0f);
    weights_destroy (&w);
}
END_TEST

START_TEST (test_wrong_dtype_and_missing_file)
{
    s_layer ("0.weight", "", ACTIVATION_NONE);
    s_load_fails ();
    ASSERT_ERR ("cannot open: No such file or directory");
    ASSERT_ERR (s_path);

    const char *header = "{\"0.weight\":{\"dtype\":\"I64\",\"shape\":[1,1],\"data_offsets\":[0,8]}}";
    unsigned char bytes[8 + 128] = { (unsigned char) strlen (header) };
    memcpy (bytes + 8, header, strlen (header));
    char *path = tu_write_file (s_dir, "tick.safetensors", bytes, (long) (8 + strlen (header) + 8));
    free (path);
    s_load_fails ();
    ASSERT_ERR ("layers[0].weight: tensor \"0.weight\": dtype I64 cannot be read as floats, "
                "expected F32, F16 or BF16");
}
END_TEST

START_TEST (test_no_layers)
{
    weights_t *w = weights_load (s_cfg, err, sizeof err);
    ck_assert_ptr_null (w);
    ASSERT_ERR ("model \"tick_mlp\": 0 layers, expected 1 to 64");
}
END_TEST

/* 2 -> 2 (relu) -> 1, worked by hand:
 *   x = [3, 1]:  h = relu([3 - 1 + 0.5, 1.5 + 2 - 3]) = [2.5, 0.5];  y = 5 - 0.5 + 0.25 = 4.75
 *   x = [-1, 2]: h = relu([-1 - 2 + 0.5, -0.5 + 4 - 3]) = [0, 0.5];   y = 0 - 0.5 + 0.25 = -0.25 */
START_TEST (test_forward_by_hand)
{
    float w1[4] = { 1, -1, 0.5f, 2 }, b1[2] = { 0.5f, -3 }, w2[2] = { 2, -1 }, b2[1] = { 0.25f };
    st_write_tensor_t t[] = { s_t ("0.weight", 2, 2, 2, w1), s_t ("0.bias", 1, 2, 0, b1),
                              s_t ("2.weight", 2, 1, 2, w2), s_t ("2.bias", 1, 1, 0, b2) };
    s_write (t, 4);
    s_layer ("0.weight", "0.bias", ACTIVATION_RELU);
    s_layer ("2.weight", "2.bias", ACTIVATION_NONE);
    weights_t *w = s_load_ok ();
    float x[4] = { 3, 1, -1, 2 };
    double y[2] = { NAN, NAN };
    ck_assert_int_eq (reference_forward (w, x, 2, y), 0);
    ck_assert_double_eq (y[0], 4.75);
    ck_assert_double_eq (y[1], -0.25);
    ck_assert_int_eq (reference_forward (w, x + 2, 1, y), 0);     /* rows are independent */
    ck_assert_double_eq (y[0], -0.25);
    weights_destroy (&w);
}
END_TEST

/* 1 -> 1 (sigmoid) -> 1 (tanh) with unit weights: y = tanh(sigmoid(x)). */
START_TEST (test_forward_sigmoid_tanh)
{
    float one = 1, zero = 0;
    dense_layer_t layers[2] = {
        { .in = 1, .out = 1, .activation = ACTIVATION_SIGMOID, .weight = &one, .bias = &zero },
        { .in = 1, .out = 1, .activation = ACTIVATION_TANH, .weight = &one, .bias = &zero },
    };
    weights_t w = { .layer_count = 2, .layers = layers, .input_size = 1, .output_size = 1, .widest = 1 };
    float x[4] = { 0, 2, -1000, 1000 };
    double y[4];
    ck_assert_int_eq (reference_forward (&w, x, 4, y), 0);
    ck_assert_double_eq_tol (y[0], tanh (0.5), 1e-15);
    ck_assert_double_eq_tol (y[0], 0.46211715726000974, 1e-15);
    ck_assert_double_eq_tol (y[1], tanh (1.0 / (1.0 + exp (-2.0))), 1e-15);
    ck_assert_double_eq (y[2], 0.0);                  /* sigmoid saturates without NaN */
    ck_assert_double_eq_tol (y[3], tanh (1.0), 1e-15);
    ck_assert_int_eq (reference_forward (&w, x, 0, y), 0);   /* no rows: nothing to do */
}
END_TEST

START_TEST (test_random_weights)
{
    uint32_t sizes[] = { 512, 256, 64, 1 };
    activation_t acts[] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    weights_t *a = weights_random (sizes, acts, 3, 42);
    weights_t *b = weights_random (sizes, acts, 3, 42);
    weights_t *c = weights_random (sizes, acts, 3, 43);
    ck_assert (a && b && c);
    ck_assert_uint_eq (a->input_size, 512);
    ck_assert_uint_eq (a->output_size, 1);
    ck_assert_uint_eq (a->widest, 512);
    for (int l = 0; l < 3; l++) {
        size_t n = (size_t) sizes[l] * sizes[l + 1];
        ck_assert_mem_eq (a->layers[l].weight, b->layers[l].weight, n * sizeof (float));
        ck_assert_int_ne (memcmp (a->layers[l].weight, c->layers[l].weight, n * sizeof (float)), 0);
        float bound = 1.0f / sqrtf ((float) sizes[l]);
        for (size_t k = 0; k < n; k++)
            ck_assert (fabsf (a->layers[l].weight[k]) <= bound);
        for (size_t k = 0; k < sizes[l + 1]; k++)
            ck_assert (fabsf (a->layers[l].bias[k]) <= bound);
        ck_assert_int_eq (a->layers[l].activation, acts[l]);
    }
    weights_destroy (&a);
    weights_destroy (&b);
    weights_destroy (&c);
    uint32_t bad[] = { 4, 0, 1 };
    ck_assert_ptr_null (weights_random (bad, acts, 2, 1));
    ck_assert_ptr_null (weights_random (sizes, acts, 0, 1));
}
END_TEST

/* A batch of rows gives the same numbers as the rows one at a time, and a saved-then-loaded
 * model gives the same numbers as the one in memory. */
START_TEST (test_forward_rows_and_file_agree)
{
    uint32_t sizes[] = { 32, 16, 8 };
    activation_t acts[] = { ACTIVATION_TANH, ACTIVATION_SIGMOID };
    weights_t *m = weights_random (sizes, acts, 2, 9);
    st_write_tensor_t t[] = { s_t ("0.weight", 2, 16, 32, m->layers[0].weight),
                              s_t ("0.bias", 1, 16, 0, m->layers[0].bias),
                              s_t ("1.weight", 2, 8, 16, m->layers[1].weight),
                              s_t ("1.bias", 1, 8, 0, m->layers[1].bias) };
    s_write (t, 4);
    s_layer ("0.weight", "0.bias", ACTIVATION_TANH);
    s_layer ("1.weight", "1.bias", ACTIVATION_SIGMOID);
    weights_t *f = s_load_ok ();
    enum { ROWS = 5 };
    float x[ROWS * 32];
    uint64_t rng = 3;
    for (int i = 0; i < ROWS * 32; i++)
        x[i] = rng_uniform (&rng, -2, 2);
    double batch[ROWS * 8], one[8], from_file[ROWS * 8];
    ck_assert_int_eq (reference_forward (m, x, ROWS, batch), 0);
    ck_assert_int_eq (reference_forward (f, x, ROWS, from_file), 0);
    ck_assert_mem_eq (batch, from_file, sizeof batch);
    for (int r = 0; r < ROWS; r++) {
        ck_assert_int_eq (reference_forward (m, x + r * 32, 1, one), 0);
        ck_assert_mem_eq (one, batch + r * 8, sizeof one);
    }
    float as_float[ROWS * 8];
    for (int i = 0; i < ROWS * 8; i++)
        as_float[i] = (float) batch[i];
    ck_assert (tu_rel_error (as_float, batch, ROWS * 8) < 1e-6);
    weights_destroy (&m);
    weights_destroy (&f);
}
END_TEST

START_TEST (test_rng)
{
    /* splitmix64's published sequence from seed 0 */
    uint64_t s = 0;
    ck_assert_uint_eq (rng_next (&s), 0xe220a8397b1dcdafull);
    ck_assert_uint_eq (rng_next (&s), 0x6e789e6aa1b965f4ull);
    ck_assert_uint_eq (rng_next (&s), 0x06c45d188009454full);
    s = 1;
    double sum = 0;
    for (int i = 0; i < 100000; i++) {
        float u = rng_uniform (&s, -0.5f, 0.5f);
        ck_assert (u >= -0.5f && u < 0.5f);
        sum += u;
    }
    ck_assert (fabs (sum / 100000) < 0.01);
    ck_assert_float_eq (rng_uniform (&s, 3.0f, 3.0f), 3.0f);
}
END_TEST

static Suite *s_suite (void)
{
    Suite *s = suite_create ("weights");
    TCase *tc = tcase_create ("core");
    tcase_add_checked_fixture (tc, s_setup, s_teardown);
    tcase_add_test (tc, test_load_chain);
    tcase_add_test (tc, test_missing_tensor);
    tcase_add_test (tc, test_missing_tensor_long_list);
    tcase_add_test (tc, test_chain_mismatch);
    tcase_add_test (tc, test_bias_wrong_length);
    tcase_add_test (tc, test_weight_not_2d);
    tcase_add_test (tc, test_non_finite_weight);
    tcase_add_test (tc, test_no_bias);
    tcase_add_test (tc, test_wrong_dtype_and_missing_file);
    tcase_add_test (tc, test_no_layers);
    tcase_add_test (tc, test_forward_by_hand);
    tcase_add_test (tc, test_forward_sigmoid_tanh);
    tcase_add_test (tc, test_random_weights);
    tcase_add_test (tc, test_forward_rows_and_file_agree);
    tcase_add_test (tc, test_rng);
    suite_add_tcase (s, tc);
    return s;
}

int main (void)
{
    return tu_run_suite (s_suite ());
}
