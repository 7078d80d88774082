// The persistent kernel's planner on the host, no GPU (tools/plan-walk.sh builds and runs it):
// kernels/mlp_persistent_plan.cu linked with stand-ins for the three device queries it makes (the
// H100/H200 opt-in shared memory per block, the kernel's static shared memory, and whether the
// cluster can be placed: always). Two uses:
//   plan-walk ROWS DTYPE W0 W1 ... : one plan (DTYPE 0 f32, 1 f16, 2 bf16), its layers and buffers
//   plan-walk --walk ROWS          : families of nets, growing width: the largest raw fp32 size (weights
//                                    and biases) accepted and the smallest refused, as fractions of the budget
#include "sig_fused.h"
#include "sig_persistent.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int OPTIN = 232448;        // cudaDevAttrMaxSharedMemoryPerBlockOptin on sm_90
static const uint32_t STATIC = 1536;    // the kernel's static shared memory (ptxas -v)

uint32_t p_static_smem (void) { return STATIC; }
int p_placeable (const sig_persistent_plan_t *, int, uint32_t) { return 0; }

static float s_dummy[1];

static int s_plan (const uint32_t *s, int n, uint32_t rows, uint32_t dtype, sig_persistent_plan_t *p, uint64_t *raw)
{
    sig_fused_net_t net;
    memset (&net, 0, sizeof net);
    net.layer_count = (uint32_t) n - 1u;
    *raw = 0;
    for (int l = 0; l + 1 < n; l++) {
        net.layers[l] = { s_dummy, s_dummy, s[l], s[l + 1], 1 };
        *raw += 4ull * (s[l] + 1ull) * s[l + 1];   /* the model's fp32 parameters: weights and biases */
    }
    sig_persistent_tuning_t tu;
    memset (&tu, 0, sizeof tu);
    return sig_persistent_plan (&net, rows, 0, dtype, &tu, p);
}

int main (int argc, char **argv)
{
    if (argc >= 3 && strcmp (argv[1], "--walk") == 0) {
        const uint32_t rows = (uint32_t) atoi (argv[2]);
        const double budget = 8.0 * (OPTIN - STATIC);
        const struct { uint32_t in, out, hidden; } fam[] = { { 512, 1, 1 }, { 293, 3, 1 }, { 37, 5, 1 }, { 1000, 7, 1 },
            { 64, 2, 2 }, { 293, 3, 2 }, { 512, 1, 2 }, { 100, 100, 1 }, { 31, 33, 2 }, { 8192, 3, 1 },
            { 1, 1, 1 }, { 3, 1, 2 }, { 7, 7, 2 }, { 2048, 1, 1 }, { 129, 65, 2 }, { 17, 300, 1 }, { 5, 2, 1 } };
        for (const auto &f : fam) {
            double ok = 0, bad = 9;
            for (uint32_t N = 8; N < 4000000; N += N / 64 + 1) {
                uint32_t s[4] = { f.in, N, N, f.out };
                if (f.hidden == 1)
                    s[2] = f.out;
                sig_persistent_plan_t p;
                uint64_t raw;
                const int rc = s_plan (s, (int) f.hidden + 2, rows, 0, &p, &raw);
                const double x = (double) raw / budget;
                if (x > 2)
                    break;
                if (rc == 0 && x > ok)
                    ok = x;
                if (rc != 0 && x < bad)
                    bad = x;
            }
            printf ("%5u-N%s-%-4u max_rows %u: largest accepted %.3f x budget, smallest refused %.3f\n", f.in,
                    f.hidden == 2 ? "-N" : "", f.out, rows, ok, bad);
        }
        return 0;
    }
    if (argc < 5) {
        fprintf (stderr, "usage: plan-walk ROWS DTYPE W0 W1 ... | plan-walk --walk ROWS\n");
        return 2;
    }
    uint32_t s[SIG_FUSED_MAX_LAYERS + 1];
    int n = 0;
    for (int i = 3; i < argc && n <= SIG_FUSED_MAX_LAYERS; i++)
        s[n++] = (uint32_t) atoi (argv[i]);
    sig_persistent_plan_t p;
    uint64_t raw;
    const int rc = s_plan (s, n, (uint32_t) atoi (argv[1]), (uint32_t) atoi (argv[2]), &p, &raw);
    printf ("rc %d: raw fp32 %llu KiB, need %llu KiB, cluster holds %llu KiB, budget %llu KiB; cluster %u, chunk %u rows, "
            "%u KiB of shared memory a block, %u barriers\n", rc, (unsigned long long) (raw >> 10),
            (unsigned long long) (p.need_bytes >> 10), (unsigned long long) (p.cluster_bytes >> 10),
            (unsigned long long) (p.budget_bytes >> 10), p.cluster_blocks, p.chunk_rows,
            p.smem_bytes == UINT32_MAX ? 0u : p.smem_bytes >> 10, p.cluster_barriers);
    for (uint32_t l = 0; l < p.layer_count; l++)
        printf ("  layer %u: %s, glog %u, passes %u, active %u (last %u), slots %u, %u in registers\n", l,
                p.layers[l].spread ? (p.layers[l].fuse ? "split by outputs, kept in the workers" : p.layers[l].by_out ? "split by outputs" : "split by columns") : "leader's",
                p.layers[l].glog, p.layers[l].passes, p.layers[l].active, p.layers[l].last_active, p.layers[l].slots,
                p.layers[l].bank == 0 ? p.layers[l].regs : 0u);
    return 0;
}
