/* The tables behind "type" and "kernel" (base/model_type.h, base/cuda_kernel.h): every row complete,
 * the config's names taken from them, and what each row says of its type or kernel, as the layers
 * read it (placement, "auto", the CUDA backend's weight types). No GPU needed. */
#include "backends/backends.h"
#include "base/config.h"
#include "base/cuda_kernel.h"
#include "base/model_type.h"
#include "testutil.h"

#include <check.h>
#include <stdio.h>
#include <string.h>

START_TEST (kernel_rows)
{
    size_t n = 0;
    while (cuda_kernel_names[n])
        n++;
    ck_assert_uint_eq (n, CUDA_KERNEL_COUNT);
    for (int k = 0; k < CUDA_KERNEL_COUNT; k++) {
        ck_assert_ptr_nonnull (cuda_kernel_info ((cuda_kernel_t) k));
        ck_assert_str_eq (cuda_kernel_name ((cuda_kernel_t) k), cuda_kernel_names[k]);
    }
    ck_assert_ptr_null (cuda_kernel_info (CUDA_KERNEL_COUNT));
    ck_assert_str_eq (cuda_kernel_name (CUDA_KERNEL_COUNT), "unknown");
    /* what the placement, "auto" and the backend read */
    for (int k = 0; k < CUDA_KERNEL_COUNT; k++) {
        const cuda_kernel_info_t *i = cuda_kernel_info ((cuda_kernel_t) k);
        const bool persistent = k == CUDA_KERNEL_PERSISTENT;
        ck_assert_msg (i->resident == persistent, "%s: resident", cuda_kernel_names[k]);
        ck_assert_msg (i->zero_copy_choice == !persistent, "%s: zero_copy a choice", cuda_kernel_names[k]);
        ck_assert_msg (i->whole_model == (persistent || k == CUDA_KERNEL_FUSED), "%s: one launch", cuda_kernel_names[k]);
        ck_assert_msg (i->clusters == (persistent || k == CUDA_KERNEL_FUSED), "%s: clusters", cuda_kernel_names[k]);
        ck_assert_msg (i->beside_resident == (k != CUDA_KERNEL_CUBLAS), "%s: beside", cuda_kernel_names[k]);
        ck_assert_uint_eq (i->weight_dtypes, persistent ? (1u << WEIGHT_DTYPE_F16 | 1u << WEIGHT_DTYPE_BF16) : 0u);
    }
}
END_TEST

START_TEST (the_config_names_come_from_the_tables)
{
    char err[512];
    for (int k = 0; k < CUDA_KERNEL_COUNT; k++) {
        char json[512];
        snprintf (json, sizeof json, "{ \"server\": { \"endpoints\": [\"tcp://127.0.0.1:5555\"] }, \"models\": [ { \"name\":"
                  " \"m\", \"weights\": \"w\", \"kernel\": \"%s\", \"layers\": [ { \"weight\": \"0.weight\" } ] } ] }",
                  cuda_kernel_names[k]);
        config_t *c = config_parse (json, "t.json", NULL, err, sizeof err);
        ck_assert_msg (c != NULL, "%s", err);
        ck_assert_int_eq (c->models[0].kernel, k);
        config_destroy (&c);
    }
    for (int t = 0; t < MODEL_TYPE_COUNT; t++) {
        ck_assert_str_eq (model_type_name ((model_type_t) t), model_type_names[t]);
        ck_assert_ptr_nonnull (model_type_info ((model_type_t) t)->keys);
        ck_assert_ptr_nonnull (backends_type ((model_type_t) t)->cpu);
        ck_assert_ptr_nonnull (backends_type ((model_type_t) t)->reference);
        /* a type that keeps streams has the stream reference and backend entries; a recurrent one, gates */
        const bool stream = model_type_can ((model_type_t) t, MODEL_CAP_STREAM);
        ck_assert (stream == (backends_type ((model_type_t) t)->reference_stream != NULL));
        ck_assert (stream == (backends_type ((model_type_t) t)->cpu->stream_step != NULL));
        ck_assert (stream == (model_type_info ((model_type_t) t)->gates > 0));
        ck_assert (stream == model_type_can ((model_type_t) t, MODEL_CAP_WINDOW));
        ck_assert (!(stream && model_type_can ((model_type_t) t, MODEL_CAP_INLINE)));
    }
    ck_assert_ptr_null (model_type_info (MODEL_TYPE_COUNT));
    ck_assert_str_eq (model_type_name (MODEL_TYPE_COUNT), "unknown");
    /* green_context: a resident kernel, from the kernels table */
    config_t *c = config_parse ("{ \"server\": { \"endpoints\": [\"tcp://127.0.0.1:5555\"] }, \"models\": [ { \"name\": "
                                "\"m\", \"weights\": \"w\", \"backend\": \"cuda\", \"kernel\": \"mbyv\", \"green_context\": "
                                "true, \"layers\": [ { \"weight\": \"0.weight\" } ] } ] }", "t.json", NULL, err, sizeof err);
    ck_assert_ptr_null (c);
    ck_assert_str_eq (err, "t.json: models[0].green_context: only with \"kernel\": \"persistent\" (a resident kernel holds "
                           "SMs; a launched one gives them back); this model's kernel is \"mbyv\"");
}
END_TEST

int main (void)
{
    Suite *s = suite_create ("kernel_table");
    TCase *tc = tcase_create ("tables");
    tcase_add_test (tc, kernel_rows);
    tcase_add_test (tc, the_config_names_come_from_the_tables);
    suite_add_tcase (s, tc);
    return tu_run_suite (s);
}
