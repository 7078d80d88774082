/* cpu-layer-probe: where a CPU MLP call's time goes, layer by layer, on the backend's own kernels
 * (cpu_dense.h, the best path this CPU has), for tick_mlp's shapes (512-256-64-1, ReLU, ReLU, none)
 * with random weights, one row. Each row of the table is timed call by call in turn with the others
 * (rotation: every row sees the same moments of a shared machine), p50 and min of CALLS calls:
 *   whole    the chain as backend_cpu.c runs it on one core (int8: quantize then dense, per layer)
 *   layer N  one layer's dense kernel alone (int8: its inputs already quantized)
 *   quant N  int8: quantizing layer N's inputs alone
 *   floor    one streaming read of the model's weight bytes in that dtype (64-byte loads)
 *   empty    the timer alone (subtracted from nothing: read it beside the others)
 * With "shares" as the third argument, instead: layer 0's outputs in shares of whole blocks of 16 as a split
 * gives them (its first B blocks, its last 16 - B), B from 6 to 10, and the whole layer: what a share that
 * ends inside a group of 4 blocks (reading some of each slice's lines) costs against one of whole groups.
 * Pin it:  taskset -c 1 build/cpu-layer-probe [calls] [dtypes] [shares]   (dtypes: f32,bf16,int8)
 * Not a test: numbers for docs/lab/cpu-dtypes.md. */
#define _GNU_SOURCE
#include "backends/cpu_dense.h"
#include "backends/cpu_isa.h"
#include "weights/weights.h"

#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LAYERS 3
static const uint32_t s_dims[LAYERS + 1] = { 512, 256, 64, 1 };
static const activation_t s_acts[LAYERS] = { ACTIVATION_RELU, ACTIVATION_RELU, ACTIVATION_NONE };

static double s_now_ns (void)
{
    struct timespec t;
    clock_gettime (CLOCK_MONOTONIC, &t);
    return (double) t.tv_sec * 1e9 + (double) t.tv_nsec;
}

static int s_cmp (const void *a, const void *b)
{
    const double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

static float s_rand (uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float) ((double) (*s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

typedef struct {
    cpu_dense_t L[LAYERS];
    const cpu_dense_ops_t *ops;
    float *act[2];
    uint8_t *q;
    float q_scale[LAYERS];
    int32_t q_zero[LAYERS];
    uint8_t *qs[LAYERS];        /* each layer's inputs, quantized once (the "layer N" rows) */
    float *xs[LAYERS];          /* each layer's inputs (the "layer N" rows) */
    const char *floor_buf;
    size_t bytes;
} s_model_t;

static volatile float s_sink;

__attribute__ ((target ("avx512f"))) static void s_floor (const char *p, size_t bytes)
{
    __m512 a0 = _mm512_setzero_ps (), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 256 <= bytes; i += 256) {
        a0 = _mm512_add_ps (a0, _mm512_load_ps (p + i));
        a1 = _mm512_add_ps (a1, _mm512_load_ps (p + i + 64));
        a2 = _mm512_add_ps (a2, _mm512_load_ps (p + i + 128));
        a3 = _mm512_add_ps (a3, _mm512_load_ps (p + i + 192));
    }
    s_sink = _mm512_reduce_add_ps (_mm512_add_ps (_mm512_add_ps (a0, a1), _mm512_add_ps (a2, a3)));
}

static cpu_dense_io_t s_io (s_model_t *m, uint32_t i, const float *x, uint8_t *q, int qi)
{
    return (cpu_dense_io_t) { .rows = 1, .x = x, .x_stride = 512, .y = m->act[(i & 1) ^ 1], .y_stride = 512,
                              .q = q, .q_stride = 512, .q_scale = &m->q_scale[qi], .q_zero = &m->q_zero[qi] };
}

static void s_whole (s_model_t *m)
{
    for (uint32_t i = 0; i < LAYERS; i++) {
        const cpu_dense_t *L = &m->L[i];
        cpu_dense_io_t io = s_io (m, i, m->act[i & 1], m->q, 0);
        if (L->dtype == WEIGHT_DTYPE_INT8)
            m->ops->quantize (io.x, io.x_stride, 1, L->in, L->in_pad, io.q, io.q_stride, io.q_scale, io.q_zero);
        m->ops->dense[L->dtype] (L, &io);
    }
}

#define SHARE_ROWS 11          /* blocks [0, B) and [B, 16) for B = 6 .. 10, then the whole layer */

static void s_share (s_model_t *m, int row)
{
    cpu_dense_io_t io = s_io (m, 0, m->xs[0], m->qs[0], 0);
    io.y = m->act[1];
    const uint32_t b = 6 + (uint32_t) row / 2;
    if (row < SHARE_ROWS - 1) {
        io.o_begin = row & 1 ? b * 16 : 0;
        io.o_end = row & 1 ? 256 : b * 16;
    }
    m->ops->dense[m->L[0].dtype] (&m->L[0], &io);
}

static void s_run (s_model_t *m, int row, int shares)
{
    if (shares)
        s_share (m, row);
    else if (row == 0)
        s_whole (m);
    else if (row <= LAYERS) {
        const uint32_t i = (uint32_t) row - 1;
        cpu_dense_io_t io = s_io (m, i, m->xs[i], m->qs[i], (int) i);
        io.y = m->act[1];           /* not the chain's: the next whole call starts from its own inputs */
        if (i == 1)
            io.y = m->act[0] + 256;
        m->ops->dense[m->L[i].dtype] (&m->L[i], &io);
    } else if (row <= 2 * LAYERS) {
        const uint32_t i = (uint32_t) row - LAYERS - 1;
        const cpu_dense_t *L = &m->L[i];
        m->ops->quantize (m->xs[i], 512, 1, L->in, L->in_pad, m->q + 512, 512, &m->q_scale[0], &m->q_zero[0]);
    } else if (row == 2 * LAYERS + 1)
        s_floor (m->floor_buf, m->bytes);
}

int main (int argc, char **argv)
{
    const int calls = argc > 1 ? atoi (argv[1]) : 20000;
    const char *dtypes = argc > 2 ? argv[2] : "f32,bf16,int8";
    const int shares = argc > 3 && strcmp (argv[3], "shares") == 0;
    const cpu_features_t *f = cpu_isa_features ();
    if (!f->avx512) {
        fprintf (stderr, "cpu-layer-probe: needs AVX-512\n");
        return 1;
    }
    uint64_t seed = 42;
    dense_layer_t src[LAYERS];
    for (int i = 0; i < LAYERS; i++) {
        src[i] = (dense_layer_t) { .in = s_dims[i], .out = s_dims[i + 1], .activation = s_acts[i] };
        src[i].weight = malloc (sizeof (float) * s_dims[i] * s_dims[i + 1]);
        src[i].bias = malloc (sizeof (float) * s_dims[i + 1]);
        for (uint32_t j = 0; j < s_dims[i] * s_dims[i + 1]; j++)
            src[i].weight[j] = s_rand (&seed) / 16.0f;
        for (uint32_t j = 0; j < s_dims[i + 1]; j++)
            src[i].bias[j] = s_rand (&seed) / 8.0f;
    }
    const weight_dtype_t all[3] = { WEIGHT_DTYPE_F32, WEIGHT_DTYPE_BF16, WEIGHT_DTYPE_INT8 };
    const char *names[3] = { "f32", "bf16", "int8" };
    printf ("| dtype | row | p50 ns | min ns |\n| --- | --- | ---: | ---: |\n");
    for (int d = 0; d < 3; d++) {
        if (!strstr (dtypes, names[d]))
            continue;
        s_model_t m = { .ops = &cpu_dense_avx512 };
        char err[256];
        for (int i = 0; i < LAYERS; i++)
            if (cpu_dense_pack (&m.L[i], &src[i], all[d], "probe", err, sizeof err)) {
                fprintf (stderr, "cpu-layer-probe: %s\n", err);
                return 1;
            }
        for (int i = 0; i < 2; i++)
            m.act[i] = aligned_alloc (64, 4096);
        m.q = aligned_alloc (64, 2048);
        memset (m.act[1], 0, 4096);
        memset (m.q, 0, 2048);
        for (int i = 0; i < 512; i++)
            m.act[0][i] = s_rand (&seed);
        m.bytes = 0;
        for (int i = 0; i < LAYERS; i++) {
            m.xs[i] = aligned_alloc (64, 2048);
            m.qs[i] = aligned_alloc (64, 512);
            memset (m.xs[i], 0, 2048);
            memset (m.qs[i], 0, 512);
            for (uint32_t j = 0; j < s_dims[i]; j++)
                m.xs[i][j] = i ? (s_rand (&seed) + 1.0f) / 2.0f : s_rand (&seed);
            m.ops->quantize (m.xs[i], 512, 1, m.L[i].in, m.L[i].in_pad, m.qs[i], 512, &m.q_scale[i], &m.q_zero[i]);
            m.bytes += (size_t) m.L[i].in * m.L[i].out * cpu_dense_bytes (all[d]);
        }
        m.bytes = (m.bytes + 255) / 256 * 256;
        char *fb = aligned_alloc (64, m.bytes);
        memset (fb, 1, m.bytes);
        m.floor_buf = fb;
        const int rows = shares ? SHARE_ROWS + 1 : 2 * LAYERS + 3;
        double *t = malloc (sizeof (double) * (size_t) rows * (size_t) calls);
        float keep[512];
        memcpy (keep, m.act[0], sizeof keep);
        for (int c = -calls / 10; c < calls; c++)
            for (int r = 0; r < rows; r++) {
                if (!shares && all[d] != WEIGHT_DTYPE_INT8 && r > LAYERS && r <= 2 * LAYERS)
                    continue;
                memcpy (m.act[0], keep, sizeof keep);
                const double t0 = s_now_ns ();
                if (r < rows - 1)
                    s_run (&m, r, shares);
                const double t1 = s_now_ns ();
                if (c >= 0)
                    t[(size_t) r * (size_t) calls + (size_t) c] = t1 - t0;
            }
        const char *label[] = { "whole", "layer 0 (512x256)", "layer 1 (256x64)", "layer 2 (64x1)", "quant 0 (512)",
                                "quant 1 (256)", "quant 2 (64)", "floor", "empty" };
        for (int r = 0; r < rows; r++) {
            if (!shares && all[d] != WEIGHT_DTYPE_INT8 && r > LAYERS && r <= 2 * LAYERS)
                continue;
            double *v = t + (size_t) r * (size_t) calls;
            qsort (v, (size_t) calls, sizeof *v, s_cmp);
            char name[64];
            if (shares && r < SHARE_ROWS - 1)
                snprintf (name, sizeof name, "layer 0 blocks [%d, %d)", r & 1 ? 6 + r / 2 : 0, r & 1 ? 16 : 6 + r / 2);
            else
                snprintf (name, sizeof name, "%s", shares ? r == rows - 1 ? "empty" : "layer 0 (512x256)" : label[r]);
            printf ("| %s | %s | %.0f | %.0f |\n", names[d], name, v[calls / 2], v[0]);
        }
        free (t);
        free (fb);
        for (int i = 0; i < LAYERS; i++) {
            cpu_dense_free (&m.L[i]);
            free (m.xs[i]);
            free (m.qs[i]);
        }
        free (m.act[0]);
        free (m.act[1]);
        free (m.q);
    }
    for (int i = 0; i < LAYERS; i++) {
        free (src[i].weight);
        free (src[i].bias);
    }
    return 0;
}
