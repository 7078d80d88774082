/* The specialised persistent kernel's compile path, on a machine with NVRTC and no GPU (CI): a plan
 * for an sm_90 device described (not queried), the image packed, the source made from its header and
 * compiled for sm_90 by the very functions the server calls at load (sig_persistent_spec_source,
 * kernel_cache_cubin -> sig_spec_compile): a cubin with the kernel "sig_persistent_spec", for f32 and
 * f16 weights, the demo shape and odd ones; the cache finds it again in memory and on disk, and keeps
 * it in memory when the folder cannot be written. test_cuda runs the kernels themselves. */
#define _GNU_SOURCE
#include "reference.h"
#include "rng.h"
#include "testutil.h"
#include "weights/weights.h"

#include <check.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef SIGSERVE_HAVE_CUDA
#include "backends/cuda/kernel_cache.h"
#include "sig_common.h"
#include "sig_fused.h"
#include "sig_lstm.h"
#include "sig_persistent.h"
#include "sig_spec.h"
#include "backends/persistent_box.h"

enum { OPTIN_SM90 = 232448, STATIC_SMEM = 1536 };   /* cudaDevAttrMaxSharedMemoryPerBlockOptin on sm_90;
                                                       the generic kernel's static shared memory */

/* The source of the kernel specialised for SIZES (LAYERS + 1 sizes) in DTYPE, for MAX_ROWS rows (TRACED:
 * its traced instantiation's), planned with TUNING (NULL: the plan's own), the plan into PLAN_OUT. */
static char *s_source_as (const uint32_t *sizes, size_t layers, uint32_t max_rows, uint32_t dtype, bool traced,
                          const sig_persistent_tuning_t *tuning, sig_persistent_plan_t *plan_out)
{
    activation_t acts[SIG_FUSED_MAX_LAYERS] = { ACTIVATION_NONE };
    for (size_t l = 0; l < layers; l++)
        acts[l] = l + 1 < layers ? ACTIVATION_RELU : ACTIVATION_NONE;
    weights_t *w = weights_random (sizes, acts, layers, 11);
    ck_assert_ptr_nonnull (w);
    sig_fused_net_t net;
    memset (&net, 0, sizeof net);
    net.layer_count = (uint32_t) layers;
    net.widest = w->widest;
    for (size_t l = 0; l < layers; l++)
        net.layers[l] = (sig_fused_layer_t) { .w = w->layers[l].weight, .b = w->layers[l].bias, .in = w->layers[l].in,
                                              .out = w->layers[l].out, .act = (int) w->layers[l].activation };
    sig_persistent_plan_t plan;
    ck_assert_int_eq (sig_persistent_plan_offline (&net, max_rows, OPTIN_SM90, STATIC_SMEM, dtype, tuning, &plan), 0);
    if (plan_out)
        *plan_out = plan;
    sig_persistent_layout_t layout;
    ck_assert_int_eq (sig_persistent_layout (sizes[0], sizes[layers], max_rows, plan.ring, &layout), 0);
    void *image = malloc (plan.image_bytes);
    ck_assert_ptr_nonnull (image);
    ck_assert_int_eq (sig_persistent_pack (&net, &plan, &layout, image), 0);
    char *src = traced ? sig_persistent_spec_source_traced (image) : sig_persistent_spec_source (image);
    ck_assert_ptr_nonnull (src);
    free (image);
    weights_destroy (&w);
    return src;
}

static char *s_source (const uint32_t *sizes, size_t layers, uint32_t max_rows, uint32_t dtype)
{
    return s_source_as (sizes, layers, max_rows, dtype, false, NULL, NULL);
}

static void s_assert_cubin (const void *cubin, size_t bytes)
{
    ck_assert_uint_gt (bytes, 1024);
    ck_assert_int_eq (memcmp (cubin, "\177ELF", 4), 0);
    ck_assert_ptr_nonnull (memmem (cubin, bytes, "sig_persistent_spec", strlen ("sig_persistent_spec") + 1));
}

/* SRC compiles for sm_90 into a cubin with the kernel in it; SRC freed. */
static void s_compiles (char *src)
{
    void *cubin = NULL;
    size_t bytes = 0;
    char log[8192];
    ck_assert_msg (sig_spec_compile (src, 90, &cubin, &bytes, log, sizeof log) == 0, "%s", log);
    s_assert_cubin (cubin, bytes);
    free (cubin);
    free (src);
}

/* The host's copy of the mailbox layout (backends/persistent_box.h: the front and the tests' emulated
 * kernel use it) is the kernel's (sig_persistent_layout), for odd and even shapes, rows and rings. */
START_TEST (the_hosts_mailbox_layout_is_the_kernels)
{
    const uint32_t shapes[][3] = { { 512, 1, 1 }, { 512, 1, 64 }, { 13, 3, 8 }, { 597, 3, 7 }, { 1, 1, 1 }, { 8192, 100, 3 } };
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        for (uint32_t ring = 1; ring <= SIG_PERSISTENT_RING; ring++) {
            sig_persistent_layout_t l;
            ck_assert_int_eq (sig_persistent_layout (shapes[k][0], shapes[k][1], shapes[k][2], ring, &l), 0);
            persistent_box_t b;
            const size_t total = pbox_layout (&b, shapes[k][0], shapes[k][1], shapes[k][2], ring);
            ck_assert_uint_eq (total, l.total);
            ck_assert_uint_eq (b.slots, l.slots);
            ck_assert_uint_eq (b.slot_bytes, l.slot_bytes);
            ck_assert_uint_eq (b.ring, l.ring);
            ck_assert_uint_eq (b.request, l.request);
            ck_assert_uint_eq (b.features, l.features);
            ck_assert_uint_eq (b.outputs, l.outputs);
            ck_assert_uint_eq (b.done, l.done);
            ck_assert_uint_eq (b.row_floats, l.row_floats);
        }
}
END_TEST

START_TEST (compiles_the_demo_shape_for_sm_90_in_f32_and_f16)
{
    const uint32_t sizes[] = { 512, 256, 64, 1 };
    for (uint32_t dtype = SIG_DTYPE_F32; dtype <= SIG_DTYPE_F16; dtype++) {
        char *src = s_source (sizes, 3, 1, dtype);
        ck_assert_ptr_nonnull (strstr (src, "#define P_SPEC 1"));
        s_compiles (src);
    }
}
END_TEST

START_TEST (compiles_odd_shapes_rows_and_a_split_layer)
{
    const uint32_t sizes[] = { 597, 293, 33, 3 };   /* 7 rows: layer 0 split over the workers */
    s_compiles (s_source (sizes, 3, 7, SIG_DTYPE_BF16));
}
END_TEST

/* sigbench --trace's instantiation of the specialised kernel: its own source (so its own cache key),
 * compiled for sm_90 like the serving one. */
START_TEST (the_traced_instantiation_compiles_with_its_own_source)
{
    const uint32_t sizes[] = { 512, 256, 64, 1 };
    char *plain = s_source (sizes, 3, 1, SIG_DTYPE_F32), *traced = s_source_as (sizes, 3, 1, SIG_DTYPE_F32, true, NULL, NULL);
    ck_assert_ptr_null (strstr (plain, "P_SPEC_TRACED"));
    ck_assert_ptr_nonnull (strstr (traced, "#define P_SPEC_TRACED 1"));
    ck_assert_uint_ne (kernel_cache_key (plain, 90), kernel_cache_key (traced, 90));
    free (plain);
    s_compiles (traced);
}
END_TEST

/* Every block polling (SIG_SYNC_WORKERS_POLL): planned only where it can run (several blocks, layer
 * 0 alone split, one chunk of rows), then with no start barrier, the workers reading, the partials
 * in two areas; its specialised kernel compiles for sm_90. */
START_TEST (workers_polling_is_planned_only_where_it_can_run)
{
    const uint32_t demo[] = { 512, 256, 64, 1 }, odd[] = { 293, 597, 31, 3 };
    sig_persistent_tuning_t tu;
    memset (&tu, 0, sizeof tu);
    tu.done_mode = SIG_DONE_OUTPUTS;
    sig_persistent_plan_t base, wp;
    free (s_source_as (demo, 3, 1, SIG_DTYPE_F32, false, &tu, &base));
    tu.sync = SIG_SYNC_WORKERS_POLL;
    char *src = s_source_as (demo, 3, 1, SIG_DTYPE_F32, false, &tu, &wp);
    ck_assert_uint_gt (base.cluster_blocks, 1);
    ck_assert_uint_eq (base.sync & SIG_PLAN_SYNC_WPOLL, 0);
    ck_assert_uint_eq (base.read_leader, 1);
    ck_assert_uint_eq (wp.sync & SIG_PLAN_SYNC_WPOLL, SIG_PLAN_SYNC_WPOLL);
    ck_assert_uint_eq (wp.read_leader, 0);
    ck_assert_uint_eq (wp.cluster_blocks, base.cluster_blocks);
    ck_assert_uint_eq (wp.cluster_barriers, base.cluster_barriers - 1);    /* no start barrier */
    ck_assert_uint_eq (wp.lead_end, base.lead_end + base.part_stride);     /* a second area of partials */
    s_compiles (src);
    /* rows in chunks (the leader's partials of 16 rows do not fit): not planned */
    sig_persistent_plan_t chunked;
    free (s_source_as (odd, 3, 16, SIG_DTYPE_F32, false, &tu, &chunked));
    ck_assert_uint_lt (chunked.chunk_rows, chunked.max_rows);
    ck_assert_uint_eq (chunked.sync & SIG_PLAN_SYNC_WPOLL, 0);
    /* every layer split: not planned; mbarrier hand-offs: not planned */
    tu.spread_all = 1;
    sig_persistent_plan_t all;
    free (s_source_as (demo, 3, 1, SIG_DTYPE_F32, false, &tu, &all));
    ck_assert_uint_eq (all.sync & SIG_PLAN_SYNC_WPOLL, 0);
    tu.spread_all = 0;
    tu.sync = SIG_SYNC_WORKERS_POLL | SIG_SYNC_MBAR_WARPS;
    sig_persistent_plan_t mb;
    free (s_source_as (demo, 3, 1, SIG_DTYPE_F32, false, &tu, &mb));
    ck_assert_uint_eq (mb.sync & SIG_PLAN_SYNC_WPOLL, 0);
}
END_TEST

/* SIG_SYNC_ASYNC (the stores complete the hand-offs, st.async): planned where the leader reads the
 * features, with the mbarriers it runs on, also where a layer is kept or streamed; the default (the
 * plan with no kind named is the same, byte for byte); the specialised kernels
 * compile for sm_90 (tick_mlp f32 and f16, every layer split: scatters too, in bf16, rows in
 * chunks, a kept pair, a streamed pair). */
START_TEST (st_async_hand_offs_are_planned_where_the_leader_reads)
{
    const uint32_t demo[] = { 512, 256, 64, 1 }, odd[] = { 293, 597, 31, 3 }, narrow[] = { 37, 3000, 5 };
    sig_persistent_tuning_t tu;
    memset (&tu, 0, sizeof tu);
    tu.done_mode = SIG_DONE_OUTPUTS;
    tu.sync = SIG_SYNC_ASYNC;
    sig_persistent_plan_t a, all, chunked, fused;
    char *src = s_source_as (demo, 3, 1, SIG_DTYPE_F32, false, &tu, &a);
    ck_assert_uint_gt (a.cluster_blocks, 1);
    ck_assert_uint_eq (a.read_leader, 1);
    ck_assert_uint_eq (a.sync & (SIG_PLAN_SYNC_MBAR | SIG_PLAN_SYNC_ASYNC | SIG_PLAN_SYNC_MBAR_BLOCK),
                       SIG_PLAN_SYNC_MBAR | SIG_PLAN_SYNC_ASYNC);
    s_compiles (src);
    s_compiles (s_source_as (demo, 3, 1, SIG_DTYPE_F16, false, &tu, NULL));
    s_compiles (s_source_as (demo, 3, 1, SIG_DTYPE_F32, true, &tu, NULL));   /* traced */
    tu.spread_all = 1;
    tu.split_by = 1;   /* every split layer by columns: nothing fused */
    src = s_source_as (demo, 3, 1, SIG_DTYPE_BF16, false, &tu, &all);
    ck_assert_uint_eq (all.layers[1].spread, 1);
    ck_assert_uint_eq (all.layers[1].fuse, 0);
    ck_assert_uint_eq (all.sync & SIG_PLAN_SYNC_ASYNC, SIG_PLAN_SYNC_ASYNC);
    s_compiles (src);
    tu.spread_all = 0;
    tu.split_by = 0;
    src = s_source_as (odd, 3, 16, SIG_DTYPE_F32, false, &tu, &chunked);
    ck_assert_uint_lt (chunked.chunk_rows, chunked.max_rows);
    ck_assert_uint_eq (chunked.sync & SIG_PLAN_SYNC_ASYNC, SIG_PLAN_SYNC_ASYNC);
    s_compiles (src);
    src = s_source_as (narrow, 2, 3, SIG_DTYPE_F32, false, &tu, &fused);
    ck_assert_uint_eq (fused.layers[0].fuse, 1);
    s_compiles (src);
    ck_assert_uint_eq (fused.sync & (SIG_PLAN_SYNC_MBAR | SIG_PLAN_SYNC_ASYNC), SIG_PLAN_SYNC_MBAR | SIG_PLAN_SYNC_ASYNC);
    tu.sync = 0;   /* no kind named: the same plan, byte for byte (the GPU tests name the kind) */
    sig_persistent_plan_t fd;
    free (s_source_as (narrow, 2, 3, SIG_DTYPE_F32, false, &tu, &fd));
    ck_assert_int_eq (memcmp (&fd, &fused, sizeof fd), 0);
    /* no kind named (tu.sync still 0): st.async on tick_mlp too */
    sig_persistent_plan_t d;
    free (s_source_as (demo, 3, 1, SIG_DTYPE_F32, false, &tu, &d));
    ck_assert_uint_eq (d.sync & (SIG_PLAN_SYNC_MBAR | SIG_PLAN_SYNC_ASYNC), SIG_PLAN_SYNC_MBAR | SIG_PLAN_SYNC_ASYNC);
    ck_assert_int_eq (memcmp (&d, &a, sizeof d), 0);   /* the plan the tuning named, byte for byte */
    tu.sync = SIG_SYNC_BARRIERS;   /* a kind named: that kind */
    free (s_source_as (demo, 3, 1, SIG_DTYPE_F32, false, &tu, &d));
    ck_assert_uint_eq (d.sync & (SIG_PLAN_SYNC_MBAR | SIG_PLAN_SYNC_ASYNC), 0);
    tu.sync = SIG_SYNC_ASYNC;
    const uint32_t streamed[] = { 5, 20000, 2 };
    sig_persistent_plan_t st;
    src = s_source_as (streamed, 2, 1, SIG_DTYPE_F16, false, &tu, &st);
    ck_assert_uint_eq (st.layers[0].fuse, 2);
    ck_assert_uint_eq (st.sync & SIG_PLAN_SYNC_ASYNC, SIG_PLAN_SYNC_ASYNC);
    s_compiles (src);
    tu.read_workers = 1;   /* the leader does not read: cluster barriers */
    sig_persistent_plan_t rw;
    free (s_source_as (demo, 3, 1, SIG_DTYPE_F32, false, &tu, &rw));
    ck_assert_uint_eq (rw.read_leader, 0);
    ck_assert_uint_eq (rw.sync & (SIG_PLAN_SYNC_MBAR | SIG_PLAN_SYNC_ASYNC), 0);
}
END_TEST

/* A layer split by outputs before one split by columns keeps its outputs in the workers (fused): no
 * gather or scatter between the two, nothing of it on the leader (no partials, no bias); its outputs
 * divided in whole float4 chunks; each worker's biases and second slice in its own memory. A next
 * layer small enough for the leader is split for it (as many barriers: the leader no longer holds
 * 3000-wide buffers); where both were split anyway, 2 barriers a request instead of 4.
 * SIG_SYNC_NO_FUSE plans the old way. The specialised kernels compile for sm_90 (f32, bf16). */
START_TEST (a_layer_split_by_outputs_keeps_them_for_the_next)
{
    const uint32_t narrow[] = { 37, 3000, 5 };
    sig_persistent_tuning_t tu;
    memset (&tu, 0, sizeof tu);
    tu.done_mode = SIG_DONE_OUTPUTS;
    sig_persistent_plan_t f, nf;
    char *src = s_source_as (narrow, 2, 3, SIG_DTYPE_F32, false, &tu, &f);
    ck_assert_uint_eq (f.cluster_blocks, 8);
    ck_assert_uint_eq (f.layers[0].spread, 1);
    ck_assert_uint_eq (f.layers[0].by_out, 1);
    ck_assert_uint_eq (f.layers[0].fuse, 1);
    ck_assert_uint_eq (f.layers[1].spread, 1);
    ck_assert_uint_eq (f.layers[1].by_out, 0);
    ck_assert_uint_eq (f.layers[1].fuse, 0);
    ck_assert_uint_eq (f.cluster_barriers, 2);   /* start, the gather of layer 1 */
    ck_assert_uint_eq (f.sync & (SIG_PLAN_SYNC_MBAR | SIG_PLAN_SYNC_ASYNC),
                       SIG_PLAN_SYNC_MBAR | SIG_PLAN_SYNC_ASYNC);   /* st.async hand-offs, fused too */
    s_compiles (src);
    sig_persistent_plan_t fb;
    tu.sync = SIG_SYNC_BARRIERS;   /* a kind named: that kind */
    free (s_source_as (narrow, 2, 3, SIG_DTYPE_F32, false, &tu, &fb));
    ck_assert_uint_eq (fb.layers[0].fuse, 1);
    ck_assert_uint_eq (fb.sync & SIG_PLAN_SYNC_MBAR, 0);
    tu.sync = SIG_SYNC_NO_FUSE;
    free (s_source_as (narrow, 2, 3, SIG_DTYPE_F32, false, &tu, &nf));
    ck_assert_uint_eq (nf.sync & (SIG_PLAN_SYNC_MBAR | SIG_PLAN_SYNC_ASYNC),
                       SIG_PLAN_SYNC_MBAR | SIG_PLAN_SYNC_ASYNC);   /* nothing fused: st.async hand-offs */
    ck_assert_uint_eq (nf.layers[0].by_out, 1);
    ck_assert_uint_eq (nf.layers[0].fuse, 0);
    ck_assert_uint_eq (nf.layers[1].spread, 0);   /* 60 KB: the leader's */
    ck_assert_uint_eq (nf.cluster_barriers, 2);   /* start, gather */
    /* the leader: no bias, partials or act buffer as wide as the hidden layer */
    ck_assert_uint_eq (f.act_off0 - f.bias_off, 8);                   /* layer 1's 5 biases, padded */
    ck_assert_uint_eq (nf.act_off0 - nf.bias_off, 3000 + 8);
    ck_assert_uint_lt (f.lead_end, nf.lead_end - 3 * 3000);
    /* a worker: the weights, its biases of layer 0 (3000 / 4 = 750 chunks over 7: 108 at most, 432
     * floats), its slices */
    ck_assert_uint_eq (f.chunk_rows, 3);
    ck_assert_uint_eq (f.layers[0].wbias, f.slice_off - 432);
    ck_assert_uint_eq (f.slice2_off, f.slice_off + 4 * 3 * f.layers[0].xs);
    ck_assert_uint_eq (f.work_end, f.slice2_off + 4 * 3 * f.layers[1].xs);
    /* chunk-aligned outputs (worker w: 4 (750 w / 7) .. 4 (750 (w + 1) / 7)): 432 at most, a pass of
     * 256 and one of 176 (6 warps) */
    ck_assert_uint_eq (f.layers[0].passes, 2);
    ck_assert_uint_eq (f.layers[0].last_active, 192);
    /* both layers split anyway (layer 1 160 KB): start, gather, scatter, gather when not fused */
    const uint32_t wider[] = { 37, 8000, 5 };
    sig_persistent_plan_t wf, wnf;
    free (s_source_as (wider, 2, 1, SIG_DTYPE_F32, false, &tu, &wnf));
    tu.sync = 0;
    free (s_source_as (wider, 2, 1, SIG_DTYPE_F32, false, &tu, &wf));
    ck_assert_uint_eq (wnf.layers[1].spread, 1);
    ck_assert_uint_eq (wnf.cluster_barriers, 4);
    ck_assert_uint_eq (wf.layers[0].fuse, 1);
    ck_assert_uint_eq (wf.cluster_barriers, 2);
    /* the specialised kernel of the fused plan compiles in bf16 (on 8 blocks: one would hold it) */
    tu.cluster_blocks = 8;
    const uint32_t chain[] = { 5, 9000, 3, 7 };
    sig_persistent_plan_t c;
    s_compiles (s_source_as (chain, 3, 16, SIG_DTYPE_BF16, false, &tu, &c));
    ck_assert_uint_eq (c.layers[0].fuse, 2);   /* narrow, before 3 outputs: streamed (below) */
    /* 5 inputs: the narrow layout (a thread 4 outputs, a slot an input: 5 slots, not 2 chunks of 4 per
     * output), chunk-aligned outputs: 9000 / 4 = 2250 chunks over 7, 322 at most a worker */
    ck_assert_uint_eq (c.layers[0].by_out, 2);
    ck_assert_uint_eq (c.layers[0].slots, 5);
    ck_assert_uint_eq (c.layers[0].passes, 2);
    ck_assert_uint_eq (c.layers[0].last_active, 96);
    ck_assert_uint_eq (f.layers[0].by_out, 1);   /* 37 inputs: 10 chunks an output, 9.25 slots narrow */
}
END_TEST

/* A narrow layer before a layer of at most 8 outputs is streamed into it (fuse 2): the next layer's
 * slots follow the narrow layer's threads and passes (a slot per output), no slice holds the hidden
 * layer (only the block's sums, two rows of a sum per warp and output), start and gather are the
 * request's only hand-offs; SIG_SYNC_NO_STREAM keeps the hidden layer (fuse 1); 9 outputs are not
 * streamed. Every such specialised kernel compiles for sm_90. */
START_TEST (a_narrow_layer_streams_into_a_few_outputs)
{
    sig_persistent_tuning_t tu;
    memset (&tu, 0, sizeof tu);
    tu.done_mode = SIG_DONE_OUTPUTS;
    const uint32_t net[] = { 5, 20000, 2 };
    sig_persistent_plan_t s, k;
    char *src = s_source_as (net, 2, 3, SIG_DTYPE_F32, false, &tu, &s);
    ck_assert_uint_eq (s.cluster_blocks, 8);
    ck_assert_uint_eq (s.layers[0].by_out, 2);
    ck_assert_uint_eq (s.layers[0].fuse, 2);
    /* 5000 chunks over 7 workers: 715 at most, 3 passes (256, 256, 203 -> 224 threads) */
    ck_assert_uint_eq (s.layers[0].passes, 3);
    ck_assert_uint_eq (s.layers[1].spread, 1);
    ck_assert_uint_eq (s.layers[1].by_out, 0);
    ck_assert_uint_eq (s.layers[1].fuse, 0);
    ck_assert_uint_eq (s.layers[1].passes, s.layers[0].passes);
    ck_assert_uint_eq (s.layers[1].active, s.layers[0].active);
    ck_assert_uint_eq (s.layers[1].last_active, s.layers[0].last_active);
    ck_assert_uint_eq (s.layers[1].slots, 2);
    ck_assert_uint_eq (s.layers[1].xs, 0);
    ck_assert_uint_eq (s.cluster_barriers, 2);
    ck_assert_uint_eq (s.layers[1].last_active, 224);
    ck_assert_uint_eq (s.work_end - s.slice2_off, 4 * 3 * 32);   /* the sums' scratch (32 float4), sized as a slice of 3 rows */
    s_compiles (src);
    tu.sync = SIG_SYNC_NO_STREAM;
    free (s_source_as (net, 2, 3, SIG_DTYPE_F32, false, &tu, &k));
    ck_assert_uint_eq (k.layers[0].fuse, 1);
    ck_assert_uint_eq (k.layers[1].xs, k.layers[1].slots << k.layers[1].glog);
    ck_assert_uint_gt (k.work_end - k.slice2_off, 4 * 3 * 700);   /* the hidden layer's slice */
    const uint32_t nine[] = { 3, 30000, 9 }, eight[] = { 3, 30000, 8 };
    tu.sync = 0;
    free (s_source_as (nine, 2, 1, SIG_DTYPE_F32, false, &tu, &k));
    ck_assert_uint_eq (k.layers[0].fuse, 1);
    s_compiles (s_source_as (eight, 2, 1, SIG_DTYPE_F16, false, &tu, &k));
    ck_assert_uint_eq (k.layers[0].fuse, 2);
    ck_assert_uint_eq (k.layers[1].slots, 8);
}
END_TEST

/* The planner takes every model whose raw fp32 parameters (weights and biases, as the model file
 * holds them) are within the budget (the largest cluster's shared memory): nets of growing width in
 * families of narrow and wide inputs and outputs, one and two hidden layers, at max_rows 1 and 16,
 * each planned at 0.25, 0.5, 0.75 and 1.0 x the budget; the register banks cover the layout's overhead
 * (a bank may span passes: at 1.0 x, 37-N-5's layer 0 has 10 slots a pass and 20 in registers).
 * Narrow-input nets with one very wide hidden layer (1-N-1, 5-N-2) stream it into their few outputs
 * (nothing of it stored but its weights and biases), the next layer's first passes in registers. */
START_TEST (the_planner_takes_every_family_up_to_the_budget)
{
    static const float dummy[1];
    const struct { uint32_t in, out, hidden; double upto; } fams[] = {
        { 512, 1, 1, 1.0 }, { 293, 3, 1, 1.0 }, { 37, 5, 1, 1.0 }, { 1000, 7, 1, 1.0 }, { 64, 2, 2, 1.0 },
        { 293, 3, 2, 1.0 }, { 512, 1, 2, 1.0 }, { 100, 100, 1, 1.0 }, { 31, 33, 2, 1.0 }, { 8192, 3, 1, 1.0 },
        { 3, 1, 2, 1.0 }, { 7, 7, 2, 1.0 }, { 2048, 1, 1, 1.0 }, { 129, 65, 2, 1.0 }, { 17, 300, 1, 1.0 },
        { 5, 2, 1, 1.0 }, { 1, 1, 1, 1.0 } };
    const double budget = (double) SIG_PERSISTENT_MAX_BLOCKS * (OPTIN_SM90 - STATIC_SMEM);
    const double fractions[] = { 0.25, 0.5, 0.75, 1.0 };
    for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++)
        for (size_t k = 0; k < 5; k++) {
            const double x = k < 4 ? fractions[k] : fams[f].upto;
            if (x > fams[f].upto)
                continue;
            /* the widest N whose raw fp32 weights and biases are within x budget */
            const uint64_t per = fams[f].in + 1 + fams[f].out, out1 = fams[f].out;
            uint32_t N = 1;
            for (uint32_t step = 1u << 21; step; step >>= 1) {
                const uint64_t n = N + step;
                const uint64_t raw = 4 * (fams[f].hidden == 1 ? n * per + out1 : n * per + n * (n + 1) + out1);
                if ((double) raw <= x * budget)
                    N = (uint32_t) n;
            }
            const uint32_t s[4] = { fams[f].in, N, fams[f].hidden == 1 ? fams[f].out : N, fams[f].out };
            sig_fused_net_t net;
            memset (&net, 0, sizeof net);
            net.layer_count = fams[f].hidden + 1;
            for (uint32_t l = 0; l < net.layer_count; l++)
                net.layers[l] = (sig_fused_layer_t) { .w = dummy, .b = dummy, .in = s[l], .out = s[l + 1], .act = 1 };
            for (uint32_t rows = 1; rows <= 16; rows += 15) {
                sig_persistent_plan_t p;
                const int rc = sig_persistent_plan_offline (&net, rows, OPTIN_SM90, STATIC_SMEM, SIG_DTYPE_F32, NULL, &p);
                ck_assert_msg (rc == 0, "%u-%u%s-%u (%.2f x budget), max_rows %u: refused (need %llu KiB, the cluster holds %llu)",
                               s[0], N, fams[f].hidden == 2 ? "-N" : "", fams[f].out, x, rows,
                               (unsigned long long) (p.need_bytes >> 10), (unsigned long long) (p.cluster_bytes >> 10));
                if (f == 2 && x == 1.0)
                    ck_assert_uint_gt (p.layers[0].regs, p.layers[0].slots);   /* the bank spans passes */
                if (fams[f].in <= 5 && fams[f].hidden == 1 && x == 1.0) {   /* streamed, layer 1 banked */
                    ck_assert_uint_eq (p.layers[0].fuse, 2);
                    ck_assert_uint_eq (p.layers[1].bank, 0);
                    ck_assert_uint_gt (p.layers[1].regs, p.layers[1].slots);
                }
            }
        }
}
END_TEST

START_TEST (a_compile_error_returns_the_compilers_log)
{
    void *cubin = (void *) 1;
    size_t bytes = 7;
    char log[4096];
    ck_assert_int_eq (sig_spec_compile ("this is not C++;", 90, &cubin, &bytes, log, sizeof log), -1);
    ck_assert_ptr_null (cubin);
    ck_assert_uint_eq (bytes, 0);
    ck_assert_msg (strstr (log, "nvrtcCompileProgram") && strstr (log, "error"), "%s", log);
    ck_assert_ptr_null (sig_persistent_spec_source (NULL));
    char zero[2048] = { 0 };
    ck_assert_ptr_null (sig_persistent_spec_source (zero));   /* no header there */
}
END_TEST

START_TEST (the_cache_finds_a_cubin_in_memory_and_on_disk)
{
    const uint32_t sizes[] = { 37, 19, 2 };
    char *src = s_source (sizes, 2, 3, SIG_DTYPE_F32);
    char *base = tu_tmpdir (), dir[512];
    ck_assert_ptr_nonnull (base);
    snprintf (dir, sizeof dir, "%s/kernels", base);   /* made by the cache */
    const void *cubin = NULL;
    size_t bytes = 0;
    const char *how = "";
    char err[8192];
    ck_assert_msg (kernel_cache_cubin (dir, 90, src, &cubin, &bytes, &how, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq (how, "compiled");
    s_assert_cubin (cubin, bytes);
    char path[700];
    snprintf (path, sizeof path, "%s/sigserve-mlp-%016llx.cubin", dir, (unsigned long long) kernel_cache_key (src, 90));
    struct stat st;
    ck_assert_int_eq (stat (path, &st), 0);
    ck_assert_uint_eq ((size_t) st.st_size, bytes);
    ck_assert_int_eq (kernel_cache_cubin (dir, 90, src, &cubin, &bytes, &how, err, sizeof err), 0);
    ck_assert_str_eq (how, "memory");
    /* another key (another architecture's) is not this one */
    ck_assert_uint_ne (kernel_cache_key (src, 90), kernel_cache_key (src, 100));
    free (base);
    free (src);
}
END_TEST

START_TEST (an_unwritable_folder_keeps_the_cubin_in_memory)
{
    const uint32_t sizes[] = { 41, 23, 5 };
    char *src = s_source (sizes, 2, 2, SIG_DTYPE_F32);
    const char *dir = "/proc/sigserve-no-such-folder";   /* cannot be created, by root either */
    const void *cubin = NULL;
    size_t bytes = 0;
    const char *how = "";
    char err[8192];
    ck_assert_msg (kernel_cache_cubin (dir, 90, src, &cubin, &bytes, &how, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq (how, "compiled");
    s_assert_cubin (cubin, bytes);
    ck_assert_int_eq (kernel_cache_cubin (dir, 90, src, &cubin, &bytes, &how, err, sizeof err), 0);
    ck_assert_str_eq (how, "memory");
    free (src);
}
END_TEST

typedef struct {   /* the start of the LSTM image: lstm_persistent_impl.cuh's l_header_t */
    uint32_t magic, pad[3];
    sig_lstm_plan_t plan;
} lstm_image_head_t;

/* The LSTM kernel specialised for a plan (lstm_persistent_spec.cu): LAYERS of H units, IN inputs, OUT
 * outputs, window W, random weights, planned offline in DTYPE as MODE of BLOCKS blocks (TRACE: the
 * traced instantiation's address), packed, its source compiled for sm_90 into a cubin with the kernel
 * "sig_lstm_spec"; the same image with a plan that asks for the generic kernel has none. */
static void s_lstm_compiles (uint32_t layers, uint32_t in, uint32_t H, uint32_t out, uint32_t W, uint32_t dtype,
                             uint32_t mode, uint32_t blocks, uint64_t trace)
{
    sig_lstm_net_t net;
    memset (&net, 0, sizeof net);
    net.layers = layers;
    net.in = in;
    net.hidden = H;
    net.out = out;
    net.window = W;
    net.head_act = SIG_ACT_TANH;
    float *all[3 * SIG_LSTM_MAX_LAYERS + 2];
    size_t na = 0;
    uint64_t seed = 7;
    for (uint32_t k = 0; k < layers; k++) {
        const size_t sizes[3] = { 4u * H * (k ? H : in), 4u * H * H, 4u * H };
        for (int i = 0; i < 3; i++) {
            float *v = malloc (sizes[i] * sizeof *v);
            ck_assert_ptr_nonnull (v);
            for (size_t j = 0; j < sizes[i]; j++)
                v[j] = rng_uniform (&seed, -0.3f, 0.3f);
            all[na++] = v;
        }
        net.w_ih[k] = all[na - 3];
        net.w_hh[k] = all[na - 2];
        net.bias[k] = all[na - 1];
    }
    float *hw = calloc ((size_t) out * H, sizeof *hw), *hb = calloc (out, sizeof *hb);
    ck_assert (hw && hb);
    net.head_w = all[na++] = hw;
    net.head_b = all[na++] = hb;
    const sig_lstm_tuning_t tuning = { .trace = trace };
    sig_lstm_plan_t plan;
    ck_assert_int_eq (sig_lstm_plan_offline (&net, dtype, mode, blocks, 2, 1, OPTIN_SM90 - 4096, &tuning, &plan), 0);
    ck_assert_uint_eq (plan.blocks, blocks);
    ck_assert (!(plan.sync & SIG_LSTM_SYNC_GENERIC));
    sig_lstm_layout_t lay;
    ck_assert_int_eq (sig_lstm_layout (&plan, &lay), 0);
    void *image = malloc (plan.image_bytes);
    ck_assert_ptr_nonnull (image);
    ck_assert_int_eq (sig_lstm_pack (&net, &plan, &lay, image), 0);
    char *src = sig_lstm_spec_source (image);
    ck_assert_ptr_nonnull (src);
    ck_assert_ptr_nonnull (strstr (src, "#define L_SPEC 1"));
    sig_lstm_plan_t generic;   /* a plan that asks for the generic kernel has no specialised source */
    const sig_lstm_tuning_t gt = { .sync = SIG_LSTM_SYNC_GENERIC };
    ck_assert_int_eq (sig_lstm_plan_offline (&net, dtype, mode, blocks, 2, 1, OPTIN_SM90 - 4096, &gt, &generic), 0);
    ck_assert (generic.sync & SIG_LSTM_SYNC_GENERIC);
    memcpy ((char *) image + offsetof (lstm_image_head_t, plan), &generic, sizeof generic);
    ck_assert_ptr_null (sig_lstm_spec_source (image));
    void *cubin = NULL;
    size_t bytes = 0;
    char log[8192];
    ck_assert_msg (sig_spec_compile (src, 90, &cubin, &bytes, log, sizeof log) == 0, "%s", log);
    ck_assert_uint_gt (bytes, 1024);
    ck_assert_ptr_nonnull (memmem (cubin, bytes, "sig_lstm_spec", strlen ("sig_lstm_spec") + 1));
    free (cubin);
    free (src);
    free (image);
    for (size_t i = 0; i < na; i++)
        free (all[i]);
}

/* The LSTM kernel specialised at load compiles for sm_90: the small size in f16 on one block,
 * an odd three-layer model in f32 on a cluster of 4, one in bf16 on a grid of 6 (traced); a header
 * that is not an LSTM image, or a plan whose advances run apart, has no source. */
START_TEST (the_lstm_kernel_compiles_specialised_for_sm_90)
{
    s_lstm_compiles (2, 128, 96, 1, 64, SIG_LSTM_F16, SIG_LSTM_CLUSTER, 1, 0);
    s_lstm_compiles (3, 37, 45, 3, 9, SIG_LSTM_F32, SIG_LSTM_CLUSTER, 4, 0);
    s_lstm_compiles (2, 19, 45, 5, 6, SIG_LSTM_BF16, SIG_LSTM_GRID, 6, 0x7f0000001000ull);
    uint32_t junk[1024] = { 0 };
    ck_assert_ptr_null (sig_lstm_spec_source (junk));
    ck_assert_ptr_null (sig_lstm_spec_source (NULL));
}
END_TEST

int main (void)
{
    Suite *s = suite_create ("spec");
    TCase *tc = tcase_create ("nvrtc");
    tcase_set_timeout (tc, 600);
    tcase_add_test (tc, the_hosts_mailbox_layout_is_the_kernels);
    tcase_add_test (tc, compiles_the_demo_shape_for_sm_90_in_f32_and_f16);
    tcase_add_test (tc, compiles_odd_shapes_rows_and_a_split_layer);
    tcase_add_test (tc, the_traced_instantiation_compiles_with_its_own_source);
    tcase_add_test (tc, workers_polling_is_planned_only_where_it_can_run);
    tcase_add_test (tc, st_async_hand_offs_are_planned_where_the_leader_reads);
    tcase_add_test (tc, a_layer_split_by_outputs_keeps_them_for_the_next);
    tcase_add_test (tc, a_narrow_layer_streams_into_a_few_outputs);
    tcase_add_test (tc, the_planner_takes_every_family_up_to_the_budget);
    tcase_add_test (tc, a_compile_error_returns_the_compilers_log);
    tcase_add_test (tc, the_cache_finds_a_cubin_in_memory_and_on_disk);
    tcase_add_test (tc, an_unwritable_folder_keeps_the_cubin_in_memory);
    tcase_add_test (tc, the_lstm_kernel_compiles_specialised_for_sm_90);
    suite_add_tcase (s, tc);
    return tu_run_suite (s);
}
#else
int main (void)
{
    printf ("SKIP: built without CUDA (no nvcc): no NVRTC\n");
    return 0;
}
#endif
