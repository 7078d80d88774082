/* gen_demo_weights OUT_PATH: writes the demo model "tick_mlp" as a safetensors file, laid out
 * like the state dict of PyTorch's
 *     nn.Sequential(Linear(512, 256), ReLU, Linear(256, 64), ReLU, Linear(64, 1))
 * so tensors are "0.weight" [256, 512], "0.bias" [256], "2.weight", "2.bias", "4.weight",
 * "4.bias" (the ReLUs at 1 and 3 hold no parameters). The seed is fixed, so every run writes the
 * same bytes and the build can regenerate the file instead of shipping it. */
#include "st_write.h"
#include "reference.h"
#include "weights/weights.h"
#include "weights/safetensors.h"

#include <stdio.h>

#define DEMO_SEED 0x7469636b5f6d6c70ull     /* "tick_mlp" */
#define DEMO_LAYERS 3

int main (int argc, char **argv)
{
    if (argc != 2) {
        fprintf (stderr, "usage: %s OUT_PATH\n", argv[0]);
        return 1;
    }
    static const uint32_t sizes[DEMO_LAYERS + 1] = { 512, 256, 64, 1 };
    static const activation_t acts[DEMO_LAYERS] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };
    /* nn.Sequential numbers its children; the Linear layers sit at 0, 2 and 4 */
    static const char *names[DEMO_LAYERS][2] = {
        { "0.weight", "0.bias" }, { "2.weight", "2.bias" }, { "4.weight", "4.bias" },
    };
    weights_t *w = weights_random (sizes, acts, DEMO_LAYERS, DEMO_SEED);
    if (!w) {
        fprintf (stderr, "%s: out of memory generating the demo weights\n", argv[0]);
        return 1;
    }
    st_write_tensor_t tensors[2 * DEMO_LAYERS];
    for (size_t i = 0; i < DEMO_LAYERS; i++) {
        const dense_layer_t *l = &w->layers[i];
        tensors[2 * i] = (st_write_tensor_t) {
            .name = names[i][0], .ndim = 2, .shape = { l->out, l->in }, .data = l->weight };
        tensors[2 * i + 1] = (st_write_tensor_t) {
            .name = names[i][1], .ndim = 1, .shape = { l->out }, .data = l->bias };
    }
    char err[512];
    int rc = safetensors_write_f32 (argv[1], tensors, 2 * DEMO_LAYERS, err, sizeof err);
    weights_destroy (&w);
    if (rc != 0) {
        fprintf (stderr, "%s: %s\n", argv[0], err);
        return 1;
    }
    return 0;
}
