/* Kernel "persistent": the whole MLP served by one resident thread-block cluster a model instance,
 * its weights on chip, requests through a mailbox in mapped pinned memory; and its ping-pong floor.
 * As C entry points (sig_common.h: what every kernel entry does; the network descriptor is
 * sig_fused.h's; the kernel specialised at load goes through sig_spec.h). */
#ifndef SIGSERVE_SIG_PERSISTENT_H
#define SIGSERVE_SIG_PERSISTENT_H

#include "sig_common.h"
#include "sig_fused.h"
#include "sig_spec.h"

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* persistent: one resident launch per model instance (mlp_persistent.cu says how it works). A
 * thread-block cluster of 1, 2, 4 or 8 blocks of SIG_PERSISTENT_THREADS threads loads the weights
 * once into shared memory and registers, then serves requests through a mailbox in mapped pinned
 * host memory until the stop flag is raised. Compute capability 9.0 only.
 *
 * The mailbox (sig_persistent_layout says where everything is, every part on its own 64-byte line):
 *   ctrl   host -> kernel: uint32 stop, uint32 stall (stall: stop answering, keep honouring stop; tests)
 *   status kernel -> host: uint32 ready (the weights are loaded), uint32 exited
 *   SIG_PERSISTENT_RING (layout.ring) slots, used in turn (request n in slot n % ring), each with
 *     request  uint64 (rows << 32) | sequence, sequence = n + 1 (low 32 bits): the host writes the
 *              features first, then this word with a release store
 *     features rows x row_floats floats, row_floats = in rounded up to a multiple of 4, the
 *              padding zero
 *     outputs  rows x out floats
 *     done     uint32 sequence, right after the outputs (the same cache line for a few outputs):
 *              the kernel's completion (SIG_DONE_SEQUENCE), after a system fence */
#define SIG_PERSISTENT_RING 4
#define SIG_PERSISTENT_THREADS 256
#define SIG_PERSISTENT_MAX_BLOCKS 8
/* SIG_DONE_OUTPUTS (the default): the host sets every output word it waits for to
 * SIG_PERSISTENT_SENTINEL (sig_common.h) before publishing and the kernel's stores of the outputs
 * themselves are the completion. SIG_DONE_SEQUENCE: the outputs, a system fence, then the request's
 * sequence in the done word. */
enum { SIG_DONE_OUTPUTS = 0, SIG_DONE_SEQUENCE = 1 };
/* How the persistent MLP holds its weights on chip (= weight_dtype_t): f32, or f16 / bf16 (each
 * weight rounded to nearest even once at load, half the bytes of shared memory and registers).
 * The arithmetic is fp32 in every case: each pair of half weights is widened to two floats (exact)
 * and multiplied into fp32 accumulators with FMA, the features, activations, biases and outputs
 * stay fp32. So the only error beyond an fp32 kernel's is the weights' own rounding:
 * |w~ - w| <= u_w |w| + eta_w, u_w = 2^-11 (f16, eta_w = 2^-25 for its subnormals) or 2^-8 (bf16). */
enum { SIG_DTYPE_F32 = 0, SIG_DTYPE_F16 = 1, SIG_DTYPE_BF16 = 2 };

typedef struct {            /* byte offsets in the mailbox */
    uint32_t ctrl, status;
    uint32_t slots;         /* slot 0; slot i at slots + i * slot_bytes */
    uint32_t slot_bytes;
    uint32_t request, done, features, outputs;   /* within a slot */
    uint32_t row_floats;    /* floats per feature row */
    uint32_t ring;          /* slots, used in turn (SIG_PERSISTENT_RING unless a test asks for fewer) */
    uint32_t total;         /* bytes of the whole mailbox */
} sig_persistent_layout_t;
/* RING slots (0: SIG_PERSISTENT_RING). 0, or cudaErrorInvalidValue when a size is 0, RING is over
 * SIG_PERSISTENT_RING or the mailbox would pass 1 GiB. */
int sig_persistent_layout (uint32_t in, uint32_t out, uint32_t max_rows, uint32_t ring, sig_persistent_layout_t *layout);

/* Knobs for tests and benchmarks; all zero is the service's choice. */
typedef struct {
    uint32_t cluster_blocks;  /* 0: the plan's cost estimate chooses; else 1, 2, 4 or 8 */
    uint32_t spread_all;      /* 1: split every layer over the cluster (exercises the scatter path) */
    uint32_t no_registers;    /* 0: registers only when shared memory cannot hold the plan; 1: never;
                                 2: always (one layer per role, its first 20 slots) */
    uint32_t done_mode;       /* SIG_DONE_OUTPUTS (default) or SIG_DONE_SEQUENCE */
    uint32_t read_workers;    /* 1: each worker reads its own features from host memory (else the
                                 leader reads them all and scatters them through DSMEM) */
    uint32_t ring;            /* 0: SIG_PERSISTENT_RING slots; else 1..SIG_PERSISTENT_RING */
    uint64_t trace;           /* sigbench --trace: the device address of SIG_TRACE_RING x SIG_TRACE_STAMPS
                                 clock64 stamps; the traced instantiation of the kernel runs (0: the
                                 serving kernel) */
    uint32_t split_by;        /* a split layer divided by 0: whichever holds fewer bytes, 1: input columns,
                                 2: outputs (exercises that path), 3: outputs for even layers, columns for
                                 odd ones (with spread_all: every pair fused, see .fuse), 4: outputs, 4 a
                                 thread (the narrow layout, see .by_out) */
    uint32_t sync;            /* how the cluster hands off and the leader runs its tail: 0, the plan's
                                 default; else one of SIG_SYNC_BARRIERS.. SIG_SYNC_MBAR_BLOCKS, with the flags
                                 SIG_SYNC_OLD_TAIL and SIG_SYNC_TRACE_REPEAT or-ed in */
} sig_persistent_tuning_t;
/* tuning.sync. The hand-offs (start and scatter: leader -> workers; gather: workers -> leader):
 *   SIG_SYNC_BARRIERS: full cluster barriers (barrier.cluster arrive.release / wait.acquire);
 *   SIG_SYNC_MBAR_WARPS: DSMEM stores + remote mbarrier arrivals, one per warp (each warp's lanes
 *     __syncwarp, then one lane arrives on each receiving block's mbarrier);
 *   SIG_SYNC_MBAR_BLOCKS: the same with one arrival per block (each thread fences at cluster scope,
 *     a block barrier, then one thread arrives on each receiving block's mbarrier);
 *   SIG_SYNC_ASYNC: the stores complete the receiver's mbarrier themselves (st.async with
 *     complete_tx: no fence, no arrival after them); the sender says how many bytes come with one
 *     arrive.expect_tx (the leader on each worker's input barrier, on its own gather barrier).
 *     The plan's default.
 * The mbarrier kinds need layer 0 split and the leader reading the features (else the plan uses
 * cluster barriers). Kind 0 (the plan's choice): SIG_SYNC_ASYNC where the leader reads, else
 * SIG_SYNC_BARRIERS. Flags: SIG_SYNC_OLD_TAIL, the leader's layers after the last split layer one
 * by one with a block barrier after each (else one compact loop, warp 0 alone on the one-warp
 * layers at the end); SIG_SYNC_TRACE_REPEAT, the traced kernel computes each compact-tail layer
 * twice and stamps both (sigbench --trace: is a layer's fixed cost cold code or data?);
 * SIG_SYNC_WORKERS_POLL, every block polls the request itself and the workers read their own
 * slices of the features at once: no start barrier, no scatter (the partials double-buffered by
 * the request's parity); only with cluster barriers, layer 0 alone split and one chunk of rows (else
 * ignored); SIG_SYNC_NO_FUSE, a layer split by outputs hands its outputs to the leader (a gather,
 * then a scatter) even where the next layer is split by columns (else they stay in the workers:
 * sig_persistent_layer_plan_t.fuse); SIG_SYNC_NO_STREAM, a narrow layer kept in the workers stores its
 * outputs for the next layer even where that one has 8 outputs or fewer (else it is streamed: .fuse 2). */
enum {
    SIG_SYNC_BARRIERS = 1, SIG_SYNC_MBAR_WARPS = 2, SIG_SYNC_MBAR_BLOCKS = 3, SIG_SYNC_ASYNC = 4, SIG_SYNC_KIND_MASK = 7,
    SIG_SYNC_OLD_TAIL = 8, SIG_SYNC_TRACE_REPEAT = 16, SIG_SYNC_WORKERS_POLL = 32, SIG_SYNC_NO_FUSE = 64,
    SIG_SYNC_NO_STREAM = 128
};
/* plan.sync bits (what the kernel does). */
enum {
    SIG_PLAN_SYNC_TAIL = 1, SIG_PLAN_SYNC_MBAR = 2, SIG_PLAN_SYNC_MBAR_BLOCK = 4, SIG_PLAN_SYNC_REPEAT = 8,
    SIG_PLAN_SYNC_WPOLL = 16, SIG_PLAN_SYNC_ASYNC = 32
};

/* The trace of one request (index sequence % SIG_TRACE_RING), in the leader SM's clock64 cycles,
 * taken by its thread 0 (0: the phase did not happen): seen (its poll returned), started (the start
 * barrier passed), per layer l the gather barrier passed (split layers), the leader's share computed,
 * the scatter barrier passed (before a split layer), and the end (the outputs stored). */
#define SIG_TRACE_RING 4096u
#define SIG_TRACE_STAMPS 64u
enum { SIG_TRACE_SEEN = 0, SIG_TRACE_STARTED = 1, SIG_TRACE_LAYER0 = 2, SIG_TRACE_END = 63 };
/* SIG_SYNC_TRACE_REPEAT: for compact-tail layer l < SIG_TRACE_SUB_LAYERS, its start (after its
 * hand-off), its first pass and its repeat */
#define SIG_TRACE_SUB(l, k) (40u + 3u * (l) + (k))
#define SIG_TRACE_SUB_LAYERS 7u
#define SIG_TRACE_GATHER(l) (SIG_TRACE_LAYER0 + 3u * (l))
#define SIG_TRACE_COMPUTED(l) (SIG_TRACE_LAYER0 + 3u * (l) + 1u)
#define SIG_TRACE_SCATTER(l) (SIG_TRACE_LAYER0 + 3u * (l) + 2u)
/* The smallest step of %globaltimer seen over N reads on DEVICE, in ns (into *NS); 0 or a cudaError_t. */
int sig_globaltimer_step (int device, uint32_t n, unsigned long long *ns);

/* What the load-time plan decided, per layer and for the launch (filled by sig_persistent_plan). */
typedef struct {
    uint32_t spread;        /* split by input columns over the workers (blocks 1..C-1); else the leader's */
    uint32_t glog;          /* log2 of the threads per output (G <= 32) */
    uint32_t passes;        /* outputs per thread (more than the block has threads: > 1) */
    uint32_t active;        /* threads with work, a multiple of 32; the slot array's row length (every
                               pass but the last: SIG_PERSISTENT_THREADS when there are several) */
    uint32_t last_active;   /* the same for the last pass (the rest of the outputs, rounded up to a warp):
                               pass p's slots start at p x slots x active */
    uint32_t by_out;        /* a split layer divided by outputs (worker w: outputs out w / W .. out (w + 1) / W,
                               every input) instead of by input columns: for narrow inputs, where
                               columns do not divide evenly over the workers. 1: a thread an output;
                               2 (narrow): a thread 4 outputs, their slot k the 4 weights of input k
                               (an input of a few features is not padded to whole chunks), outputs
                               divided by float4 chunks as for .fuse */
    uint32_t slots;         /* weight slots per thread and pass: 4 weights each (16 bytes in f32, 8 in f16 and
                               bf16), for one float4 chunk of the input (narrow: for one input) */
    uint32_t bank;          /* 0: the first `regs` slots (of the first pass) live in registers; 2: none do */
    uint32_t regs;
    uint32_t xs;            /* the input's row stride in float4 (slots << glog) */
    uint32_t w_smem;        /* float4 offset of the layer's shared-memory slots */
    uint32_t bias;          /* float offset of its bias in the image's bias area: the leader's area holds
                               those of the layers it finishes (a prefix), a fused layer's come after */
    uint32_t fuse;          /* a layer split by outputs whose outputs stay in the workers: each adds the
                               bias, applies the activation and keeps them as its column slice of the
                               next layer (split by columns): no gather, no scatter between the two. Its
                               outputs are divided by float4 chunks: worker w has outputs
                               4 (out4 w / W) .. 4 (out4 (w + 1) / W), out4 = outputs / 4 rounded up.
                               2 (streamed, narrow layers before a layer of <= 8 outputs): each thread
                               multiplies its 4 outputs by the next layer's weights at once, the block
                               sums the products as that layer's partials (the hidden layer is never
                               stored); the next layer's slots then follow this layer's threads and
                               passes (slot o: output o's 4 weights on the thread's 4 inputs) */
    uint32_t wbias;         /* a fused layer: float offset of the worker's biases in its shared memory */
    uint64_t image;         /* 16-byte offset of its slots in the image (worker w at + w * per_block) */
    uint64_t per_block;     /* 16-byte units of one block's slots */
} sig_persistent_layer_plan_t;
typedef struct {
    uint32_t cluster_blocks, threads;
    uint32_t smem_bytes;        /* dynamic shared memory of every block */
    uint32_t smem_limit;        /* the device's per-block opt-in limit (dynamic + static) */
    uint32_t cluster_barriers;  /* per request */
    uint32_t done_mode;
    uint32_t read_leader;       /* the leader reads the features and scatters them (split layer 0) */
    uint32_t ring;
    uint32_t dtype;             /* SIG_DTYPE_*: how the weights are held on chip */
    uint32_t sync;              /* SIG_PLAN_SYNC_* bits: the compact tail, mbarrier hand-offs */
    uint64_t trace;             /* the tuning's trace buffer (0: none) */
    uint64_t image_bytes;       /* what sig_persistent_pack writes */
    uint64_t weight_bytes;      /* the model's fp32 weights and biases */
    uint64_t need_bytes;        /* on chip: every block's shared memory + the registers used */
    uint64_t cluster_bytes;     /* what the cluster offers: blocks x smem_limit + those registers */
    uint32_t max_cluster;       /* the largest cluster tried (for the message) */
    uint32_t layer_count, max_rows;
    uint32_t chunk_rows;        /* rows computed at a time (<= max_rows): a request of more rows runs in
                                   chunks, one start barrier each; every buffer holds this many rows */
    uint32_t pad1;
    uint64_t budget_bytes;      /* the fp32 weights the plan promises to hold: the largest cluster's shared
                                   memory (blocks x (smem_limit - static)); a model whose raw fp32 weights are
                                   within it is accepted (registers cover the layout's overhead; test_spec walks
                                   17 families to 1.0 x), except a hidden layer of tens of thousands of units
                                   between a few inputs and outputs, whose biases and activations are on chip
                                   too (5-N-2 to 0.73 x, 1-N-1 to 0.45 x) */
    /* float offsets in dynamic shared memory, each role its own layout after its weights: the
     * leader's biases, two activation buffers, the partials (chunk_rows x mpad floats: per split layer,
     * W areas of chunk_rows x its outputs rounded up to 4, or one area when split by outputs) and its end;
     * a worker's input slice and its end */
    uint32_t bias_off, act_off0, act_off1, part_off, lead_end, part_stride, mpad;
    uint32_t slice_off, work_end;
    uint32_t slice2_off;        /* a worker's second input slice: the input of a layer after a fused one */
    uint32_t pad2;
    uint64_t bias_image;        /* float offset of the biases after the slots in the image */
    sig_persistent_layer_plan_t layers[SIG_FUSED_MAX_LAYERS];
} sig_persistent_plan_t;

/* Plans NET (host pointers: w and b in host memory, the fused descriptor's checks) for MAX_ROWS rows
 * on DEVICE, its weights held in DTYPE (SIG_DTYPE_*). 0 when it fits; cudaErrorInvalidValue for a
 * bad descriptor or dtype; cudaErrorMemoryAllocation when it does not fit on chip (need_bytes and
 * cluster_bytes say by how much); another cudaError_t when the device cannot be queried. */
int sig_persistent_plan (const sig_fused_net_t *net, uint32_t max_rows, int device, uint32_t dtype,
                         const sig_persistent_tuning_t *tuning, sig_persistent_plan_t *plan);
/* The first weight of NET that DTYPE cannot hold (f16: |w| > 65504, which would round to
 * infinity; bf16: a finite weight that would round to infinity), as its layer and index (row-major
 * [out][in]); 0 when every weight fits, -1 when one does not. */
int sig_persistent_dtype_check (const sig_fused_net_t *net, uint32_t dtype, uint32_t *layer, uint64_t *index);
/* Writes the device image (plan->image_bytes, host memory): a header with the plan and LAYOUT,
 * every layer's weights in the kernel's slot order (rounded to plan->dtype), the biases (fp32). */
int sig_persistent_pack (const sig_fused_net_t *net, const sig_persistent_plan_t *plan,
                         const sig_persistent_layout_t *layout, void *image);
/* Launches the resident kernel: IMAGE in device memory, BOX the device address of the mapped
 * mailbox. Returns at once; the kernel sets status.ready once the weights are loaded. */
int sig_persistent_launch (const void *image, void *box, const sig_persistent_plan_t *plan, cudaStream_t stream);
/* sig_persistent_plan for a device described, not queried (OPTIN: its per-block opt-in shared memory,
 * STATIC_SMEM: the kernel's static shared memory), without the placement check: a machine with no
 * GPU can plan, pack and compile a specialised kernel (tests). */
int sig_persistent_plan_offline (const sig_fused_net_t *net, uint32_t max_rows, int optin, uint32_t static_smem,
                                 uint32_t dtype, const sig_persistent_tuning_t *tuning, sig_persistent_plan_t *plan);

/* The persistent kernel specialised for one model at load (mlp_persistent_spec.cu, NVRTC; sig_spec.h). */
/* The NVRTC source of the kernel specialised for IMAGE's header (host memory, as sig_persistent_pack
 * wrote it; only the header is read): a string the caller frees, or NULL (a bad header, no memory). */
char *sig_persistent_spec_source (const void *image);
/* The same for the traced instantiation (sigbench --trace: stamps into the plan's trace buffer, which
 * sig_spec_launch then passes); a different source, so a different cache key. */
char *sig_persistent_spec_source_traced (const void *image);
/* sig_persistent_launch with MODULE's kernel (its image must be the one it was compiled for; no trace):
 * 0 or a CUDA error code. */
int sig_spec_launch (const sig_spec_module_t *module, const void *image, void *box, const sig_persistent_plan_t *plan,
                     cudaStream_t stream);

/* The ping-pong floor: a one-block persistent kernel on the same mailbox protocol. FLAGS: 0 echoes
 * the sequence only; SIG_PINGPONG_READ also reads the IN features (all loads at once) and writes
 * their sum as output 0; SIG_PINGPONG_OUTPUT writes output 0 (a constant) without reading. In
 * SIG_DONE_SEQUENCE mode a written output is fenced (system scope) before the sequence. */
enum { SIG_PINGPONG_READ = 1, SIG_PINGPONG_OUTPUT = 2 };
int sig_pingpong_launch (void *box, const sig_persistent_layout_t *layout, uint32_t in, uint32_t flags,
                         uint32_t done_mode, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
