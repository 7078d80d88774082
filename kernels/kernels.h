/* The CUDA kernels sigserve runs, as C entry points. One op per .cu file: a static __global__
 * kernel, a static launcher taking a stream, and the extern "C" entry below (the persistent
 * kernels keep their host-side planning and packing in a *_plan.cu beside them, sharing a private
 * *_impl.cuh). Every entry
 * launches on the stream it is given (never the legacy default stream), checks the launch, and
 * returns a cudaError_t value as int (0 = cudaSuccess). All are capturable into a CUDA graph.
 *
 * Shapes: a dense layer maps `in` (K) inputs to `out` (M) outputs for `rows` >= 1 rows; inputs are
 * rows x K row-major, outputs rows x M row-major. Every kernel is correct for any 1 <= K, M <= 8192
 * and rows >= 1. `rows` is a kernel argument: the backend captures one graph per batch size, so it
 * is a constant of each graph, never a value a replay changes. */
#ifndef SIGSERVE_KERNELS_H
#define SIGSERVE_KERNELS_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { SIG_ACT_NONE = 0, SIG_ACT_RELU = 1, SIG_ACT_SIGMOID = 2, SIG_ACT_TANH = 3 };  /* = activation_t */

/* warp: one warp per output neuron. W row-major [M][K] (the PyTorch layout). Fused GEMV + bias +
 * activation; 16-byte loads when K % 4 == 0 (rows then stay 16-byte aligned), scalar otherwise. */
int sig_dense_warp (const float *w, const float *b, const float *x, float *y, uint32_t in, uint32_t out,
                    uint32_t rows, int act, cudaStream_t stream);

/* mbyv (seed 000, thread per output): W packed K-major with M padded to a multiple of 32:
 * wp[k * out_pad + m] = W[m][k], zeros in the padding (sig_pack_kmajor does it on the host).
 * The input is broadcast by warp shuffle; edges by power-of-two row tiles with fixed shuffle
 * reductions and a shortened column tail. */
int sig_dense_mbyv (const float *wp, const float *b, const float *x, float *y, uint32_t in, uint32_t out,
                    uint32_t out_pad, uint32_t rows, int act, cudaStream_t stream);
uint32_t sig_mbyv_out_pad (uint32_t out);   /* out rounded up to a multiple of 32 */
/* Host-side packing: W row-major [out][in] -> wp [in][out_pad], padding zero. */
void sig_pack_kmajor (const float *w, uint32_t in, uint32_t out, float *wp, uint32_t out_pad);

/* cublas epilogue: y[r][m] = act(y[r][m] + b[m]) in place (cuBLAS GEMM with N = rows before it). */
int sig_bias_act (const float *b, float *y, uint32_t out, uint32_t rows, int act, cudaStream_t stream);

/* fused: the whole MLP in one launch, a thread-block cluster whose blocks split each layer's outputs
 * and meet at a cluster barrier between layers. The network description lives in device memory
 * (written once at load), so nothing about the model is frozen into a captured launch but the
 * pointer to it. Activations between layers go through `scratch` (2 x rows x widest floats), except
 * on the register path (small nets, see `fast`): weights loaded into registers once, activations
 * through distributed shared memory, scratch untouched. */
#define SIG_FUSED_MAX_LAYERS 16
typedef struct {
    const float *w;     /* row-major [out][in], like warp */
    const float *b;
    uint32_t in, out;
    int act;
} sig_fused_layer_t;
typedef struct {
    uint32_t layer_count;
    uint32_t widest;    /* max over every layer's in and out */
    uint32_t fast;      /* filled by sig_fused_net_validate: 1 = the shape allows the register path */
    sig_fused_layer_t layers[SIG_FUSED_MAX_LAYERS];
} sig_fused_net_t;
/* NET points to device memory holding a sig_fused_net_t. */
int sig_mlp_fused (const sig_fused_net_t *net, const float *x, float *y, float *scratch, uint32_t rows,
                   cudaStream_t stream);
/* Host-side check of a descriptor (in host memory) before it is uploaded: 1..SIG_FUSED_MAX_LAYERS
 * layers, every in/out in 1..widest, each layer's in = the previous layer's out, non-NULL w and b,
 * max_rows x widest < 2^32. 0 (cudaSuccess) or cudaErrorInvalidValue. The kernel makes the same
 * checks and, on a bad descriptor, returns without writing y.
 * It also fills NET->fast (0 when the descriptor is bad): 1 when every layer's share of the weights
 * fits the kernel's register path (weights loaded once into registers, activations passed through
 * distributed shared memory), 0 otherwise. The kernel takes that path only when fast is 1, its own
 * check of the shape agrees, and the launch's rows x every layer's in fits its shared buffers; so
 * a caller may set fast = 0 after validating to force the general path (e.g. to compare them). */
int sig_fused_net_validate (sig_fused_net_t *net, uint32_t max_rows);

/* Whether DEVICE runs the thread-block cluster kernels (fused, persistent, lstm): cluster launch and
 * compute capability 9.0. EXACT 1: exactly 9.0, as the persistent kernels require (built for sm_90
 * and measured there); 0: 9.0 or later, which the fused kernel runs on from its PTX. 1 or 0;
 * MAJOR and MINOR (may be NULL) get the capability (0.0 when the device cannot be queried). */
int sig_clusters_supported (int device, int exact, int *major, int *minor);

/* An empty kernel, for the launch-overhead table. */
int sig_empty_kernel (cudaStream_t stream);

/* A kernel that executes a trap: the context is lost (tests of the unavailable path only). */
int sig_fault_kernel (cudaStream_t stream);
/* A kernel that spins for MS ms (tests of a launch that hangs past a model's watchdog_ms). */
int sig_hang_kernel (cudaStream_t stream, unsigned ms);

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
/* SIG_DONE_OUTPUTS (the default): the host sets every output word it waits for to this NaN before
 * publishing and the kernel's stores of the outputs themselves are the completion (no fence, no
 * sequence: 1.3 us less a request, docs/perf.md). No arithmetic produces this payload (the GPU's
 * NaNs are 0x7fffffff), and the kernels store any output that holds it as the canonical NaN
 * (sig_st_sys_output), so no value the model computes can leave the host waiting.
 * SIG_DONE_SEQUENCE: the outputs, a system fence, then the request's sequence in the done word. */
#define SIG_PERSISTENT_SENTINEL 0x7fbadbadu
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

/* The persistent kernel specialised for one model at load (mlp_persistent_spec.cu, NVRTC). */
typedef struct sig_spec_module sig_spec_module_t;
/* The NVRTC source of the kernel specialised for IMAGE's header (host memory, as sig_persistent_pack
 * wrote it; only the header is read): a string the caller frees, or NULL (a bad header, no memory). */
char *sig_persistent_spec_source (const void *image);
/* The same for the traced instantiation (sigbench --trace: stamps into the plan's trace buffer, which
 * sig_spec_launch then passes); a different source, so a different cache key. */
char *sig_persistent_spec_source_traced (const void *image);
/* NVRTC's version. 0, or -1 when it cannot say. */
int sig_spec_nvrtc_version (int *major, int *minor);
/* Compiles SRC (sig_persistent_spec_source) for sm_ARCH (90: compute capability 9.0) into *CUBIN (the
 * caller frees it) of *BYTES bytes, with the function "sig_persistent_spec". 0, or -1 with the reason
 * (and the compiler's log) in LOG. Needs no GPU. */
int sig_spec_compile (const char *src, int arch, void **cubin, size_t *bytes, char *log, size_t loglen);
/* Loads CUBIN into the calling thread's current context (the runtime's primary context of the device
 * set), its kernel allowed SMEM_BYTES of dynamic shared memory. 0, or -1 with the reason in ERR. */
int sig_spec_load (const void *cubin, uint32_t smem_bytes, sig_spec_module_t **module, char *err, size_t errlen);
/* sig_persistent_launch with MODULE's kernel (its image must be the one it was compiled for; no trace):
 * 0 or a CUDA error code. */
int sig_spec_launch (const sig_spec_module_t *module, const void *image, void *box, const sig_persistent_plan_t *plan,
                     cudaStream_t stream);
/* Unloads the module (no kernel of it may still run). Safe on NULL. */
void sig_spec_unload (sig_spec_module_t **module);

/* Loads CUBIN as sig_spec_load does, its kernel the function NAME (extern "C"). */
int sig_spec_load_fn (const void *cubin, const char *name, uint32_t smem_bytes, sig_spec_module_t **module, char *err,
                      size_t errlen);
/* Launches MODULE's kernel on BLOCKS blocks of THREADS threads with SMEM_BYTES of dynamic shared memory
 * on STREAM: as one cluster of BLOCKS (CLUSTER), cooperatively (COOPERATIVE: every block resident at
 * once, or the launch fails), or plainly; ARGS the kernel's arguments. 0 or a CUDA error. */
int sig_spec_launch_args (const sig_spec_module_t *module, uint32_t blocks, uint32_t threads, uint32_t smem_bytes,
                          int cluster, int cooperative, cudaStream_t stream, void **args);

/* The ping-pong floor: a one-block persistent kernel on the same mailbox protocol. FLAGS: 0 echoes
 * the sequence only; SIG_PINGPONG_READ also reads the IN features (all loads at once) and writes
 * their sum as output 0; SIG_PINGPONG_OUTPUT writes output 0 (a constant) without reading. In
 * SIG_DONE_SEQUENCE mode a written output is fenced (system scope) before the sequence. */
enum { SIG_PINGPONG_READ = 1, SIG_PINGPONG_OUTPUT = 2 };
int sig_pingpong_launch (void *box, const sig_persistent_layout_t *layout, uint32_t in, uint32_t flags,
                         uint32_t done_mode, cudaStream_t stream);

/* lstm persistent (lstm_persistent.cu says how it works): an LSTM of 1..SIG_LSTM_MAX_LAYERS layers
 * served by one resident launch per model instance: a thread-block cluster (mode CLUSTER, 1 to 16
 * blocks) or a cooperative grid of one block per SM (mode GRID, for weights no cluster holds), each
 * block owning a range of hidden units (their four gate rows in every layer) with its weights in
 * shared memory (a prefix of each matrix; the rest read from device memory) in f32, f16 or bf16,
 * accumulating in fp32 (products in the weights' type under SIG_LSTM_MATH_HALF). Commands come through a ring of SIG_LSTM_RING entries in mapped pinned
 * memory, every 64-bit word tagged with the command's sequence (a word is current when its high
 * half equals the sequence: no separate flag). Compute capability 9.0 only.
 *
 * Mailbox (sig_lstm_layout): ctrl (u32 stop), hold (u32, SIG_LSTM_OP_HOLD), ready[blocks] and
 * exited[blocks] (u32 each, written by the kernel), SIG_LSTM_RING entries (entry n % RING carries command n, sequence n + 1):
 *   cmd      2 + in u64 words: word 0 = seq << 32 | pos << 8 | op, word 1 = seq << 32 | slot (rows
 *            for a window), | SIG_LSTM_WIDE_INPUTS where the features need the widening math, word
 *            2 + i = seq << 32 | the bits of feature i (steps and pings)
 *   done     u32: the sequence, once the command is complete (steps: after their outputs)
 *   outputs  out floats: a step's; the host sets them to SIG_PERSISTENT_SENTINEL before publishing
 *            and each store of the kernel is its own completion (no fence on the critical path)
 * and the full-window area: window_in (max_rows x window x in floats, written before the command)
 * and window_out (max_rows x out floats, complete when done says so).
 * Device memory besides the image: the stream state (sig_lstm_plan_t.state_bytes: per slot a ring
 * of layer 0's input projections and the precomputed G = W_hh h + b and c of every layer) and, in
 * GRID mode, the exchange buffers (xchg_bytes), both zeroed before the launch. */
#define SIG_LSTM_MAX_LAYERS 16
#define SIG_LSTM_THREADS 512
#define SIG_LSTM_RING 4
enum { SIG_LSTM_F32 = 0, SIG_LSTM_F16 = 1, SIG_LSTM_BF16 = 2 };   /* = weight_dtype_t */
enum { SIG_LSTM_CLUSTER = 0, SIG_LSTM_GRID = 1 };
/* Commands. STEP: step at ring position pos of stream slot `slot`, from its precomputed state;
 * ADVANCE: recompute the slot's state over the W - 1 steps before position pos (its next step's);
 * RESET: the slot's window all zeros, and its state; WINDOW: `rows` full windows from window_in;
 * PING: output 0 = feature 0 (the protocol's floor); STALL: stop answering, keep honouring stop. */
enum { SIG_LSTM_OP_STEP = 1, SIG_LSTM_OP_ADVANCE = 2, SIG_LSTM_OP_RESET = 3, SIG_LSTM_OP_WINDOW = 4,
       SIG_LSTM_OP_PING = 5, SIG_LSTM_OP_STALL = 6, SIG_LSTM_OP_HOLD = 7 };
/* HOLD (tests): block 0 takes no further command while the mailbox's hold word is non-zero (stop
 * still ends it), then marks the command done.
 *
 * Plan 4 (docs/lstm-notes.md): the advances on other SMs. Where the plan says `apart` (asked for
 * with SIG_LSTM_SYNC_ADVANCE_APART: a single stream's step measured slower apart, so not the
 * default; a cluster plan, and two of its clusters fit the device), a model runs two resident launches of the same
 * kernel, each with its own mailbox (the same layout): the serving one (ROLE_SERVE: STEP, WINDOW,
 * PING) and the advancer (ROLE_ADVANCE: ADVANCE, RESET, PING), with its own copy of the weights in
 * its own shared memory; ROLE_ALL runs every command (the default, and always the grid).
 * Apart, the state's G and c are LL words (version << 32 | float bits; per slot, layer, block and
 * unit a record of 6: G's four, c, a pad, copied whole into shared memory), written by the advancer at
 * the version its command carries and read by a step that waits for the version its command
 * carries: word 1 of STEP, ADVANCE and RESET is then seq << 32 | WIDE | version << 16 | slot
 * (slot < 2^16, version mod 2^15: a slot's state words hold the version a step needs or the one
 * before it, never an older one). The ring of layer-0 projections (written by a step, read by the
 * advancer) is ordered through the host: a step's writers fence at gpu scope before its done word
 * (so done, not the outputs, says they are visible), the host posts the advance only after that
 * done, and the advancer fences after seeing its command and reads the ring at L2 (ld.cg). */
enum { SIG_LSTM_ROLE_ALL = 0, SIG_LSTM_ROLE_SERVE = 1, SIG_LSTM_ROLE_ADVANCE = 2 };
#define SIG_LSTM_VERSION_SHIFT 16
#define SIG_LSTM_VERSION_MASK 0x7fffu
#define SIG_LSTM_APART_SLOTS 0xffffu

typedef struct {            /* host pointers, PyTorch layouts */
    uint32_t layers, in, hidden, out, window;
    int head_act;           /* SIG_ACT_* */
    const float *w_ih[SIG_LSTM_MAX_LAYERS];   /* [4H][in_k], gates i, f, g, o */
    const float *w_hh[SIG_LSTM_MAX_LAYERS];   /* [4H][H] */
    const float *bias[SIG_LSTM_MAX_LAYERS];   /* [4H]: bias_ih + bias_hh */
    const float *head_w, *head_b;             /* [out][H], [out] */
} sig_lstm_net_t;

typedef struct {            /* tests and benchmarks; all zero is the plan's own choice */
    uint32_t blocks;        /* cluster size (1..16) or grid size */
    uint32_t grid;          /* 1: GRID mode */
    uint32_t smem_cap;      /* bytes of shared memory per block the plan may use (0: the device's) */
    uint32_t sync;          /* SIG_LSTM_SYNC_* bits: an earlier synchronisation, to compare (lstmbench --sync) */
    uint32_t math;          /* SIG_LSTM_MATH_*: the gate products of f16 / bf16 weights (0: SIG_LSTM_MATH_DEFAULT) */
    uint64_t trace;         /* device address of SIG_LSTM_TRACE_BLOCKS x SIG_LSTM_TRACE_RECORDS x
                             * SIG_LSTM_TRACE_WORDS zeroed u64: the traced instantiation (lstmbench --trace),
                             * else 0 */
} sig_lstm_tuning_t;
/* The synchronisation before plans 1 and 2 (docs/lstm-notes.md), kept to compare in one binary:
 * POLL_ROUNDS, block 0 polls the whole ring entry (command words and features) in block-wide
 * rounds; XCHG_ROUNDS, a cluster's exchanges too re-read every word in block-wide rounds
 * (__syncthreads_or) until all are current (a grid's always do: measured faster there). */
enum { SIG_LSTM_SYNC_POLL_ROUNDS = 1, SIG_LSTM_SYNC_XCHG_ROUNDS = 2 };
/* A command's features start on the 128-byte line after its command words (layout.feat 16), so the
 * line the poll reads holds no feature: measured 0.9-1.2 us faster a step than features right after
 * the words in the same line (docs/lstm-notes.md: the read after the poll). FEAT_SHARED: the layout
 * before (layout.feat 2), to compare; the only one with POLL_ROUNDS. */
enum { SIG_LSTM_SYNC_FEAT_SHARED = 4 };
/* Plan 4 (kernels.h above): the advances in a second resident launch (the plan's `apart`, where it
 * applies), so that no stream's step waits behind another's advance. Not the default: a single
 * stream's step measured 0.5-1.0 us slower apart on an H100 (docs/lstm-notes.md, plan 4); without
 * it, the advances run in the serving kernel (ROLE_ALL), as before plan 4. */
enum { SIG_LSTM_SYNC_ADVANCE_APART = 8 };
/* With several blocks, block 0 sends a step's command words to the other blocks as LL words the
 * moment its poll sees them, and each feature as soon as its thread has read it from the ring entry
 * (all loads in flight), instead of a broadcast after the whole read: measured -0.6 us a step on a
 * grid, nothing on a cluster of 4 (docs/lstm-notes.md, "The features forwarded as read").
 * BCAST_AFTER: the broadcast after the read, as before, to compare. */
enum { SIG_LSTM_SYNC_BCAST_AFTER = 16 };
/* The serving kernel is specialised for its plan at load (lstm_persistent_spec.cu: NVRTC compiles
 * lstm_persistent.cu with the image's header as constants), as the MLP's is: measured 1.5-2.6 us a
 * step faster (docs/lstm-notes.md). GENERIC: the generic kernel (one instantiation per dtype and
 * mode, the plan read from shared memory), as before, to compare (lstmbench --sync 64); also what the
 * model key specialise false, a failed compile or load, and the advances apart (plan 4) run. */
enum { SIG_LSTM_SYNC_GENERIC = 64 };
/* The gate products of f16 / bf16 weights (docs/lstm-notes.md, plan 3). WIDE: each weight widened
 * to fp32, fp32 FMA. HALF: the inputs (x, h) rounded to the weights' type, SIG_LSTM_HALF_RUN products
 * per lane summed in it (packed HFMA2, fused, round to nearest), each run added into an fp32 sum
 * (tests/tolerance.c bounds its error). f32 weights are always WIDE. With f16, a command whose
 * features pass the plan's half_x_max (a partial sum could leave f16's range) has its products of
 * the features in WIDE: the host sets SIG_LSTM_WIDE_INPUTS in its word 1. */
enum { SIG_LSTM_MATH_WIDE = 1, SIG_LSTM_MATH_HALF = 2 };
#define SIG_LSTM_MATH_DEFAULT SIG_LSTM_MATH_WIDE   /* HALF measured no faster: docs/lstm-notes.md, plan 3 */
#define SIG_LSTM_HALF_RUN 4
#define SIG_LSTM_WIDE_INPUTS 0x80000000u
/* A trace record (block 0, thread 0, each step and ping): word 0 the op, 1 and 2 %globaltimer (ns)
 * when the command was seen and when its record was written, 3 + i clock64 at stamp i (0 where
 * not reached): 0 command seen, 1 features read, 2 broadcast to the other blocks sent, then per
 * layer k 3 + 3k the gate sums reduced, 4 + 3k h published, 5 + 3k the layer's all-gather complete,
 * and 3 + 3 L the head's output stored (a ping: 2 its output stored). Records wrap. */
#define SIG_LSTM_TRACE_RECORDS 4096u
/* Blocks 0 and 1 record (block b's records at b x SIG_LSTM_TRACE_RECORDS): block 1 (a cluster's or a
 * grid's, where there is one) has its own clock, so only its own phases compare; its stamp 0 is when
 * the command's words reached it, 1 when it had copied every feature, 2 never, the rest as block 0's. */
#define SIG_LSTM_TRACE_BLOCKS 2u
#define SIG_LSTM_TRACE_WORDS 24u
#define SIG_LSTM_TRACE_STAMPS (SIG_LSTM_TRACE_WORDS - 3u)
/* A stamp slot the phases never reach with up to 5 layers (at most 3 + 3 x 5 = 18): 1 + the feature
 * words of the command read again because their tag was not yet the command's (a count, not a clock). */
#define SIG_LSTM_TRACE_STALE (SIG_LSTM_TRACE_STAMPS - 1u)
/* Finer stamps inside a step of up to 4 layers (3 + 3 x 4 = 15 < 16), in slots the phases above never
 * reach: the step entered (l_step, after the command's dispatch), layer 0's dot products summed by
 * thread 0 (before the reduction over the unit's lanes), and its cell's state read (G and c). */
#define SIG_LSTM_TRACE_FINE_LAYERS 4u
#define SIG_LSTM_TRACE_ENTER 16u
#define SIG_LSTM_TRACE_L0_DOT 17u
#define SIG_LSTM_TRACE_L0_STATE 18u

typedef struct {            /* one weight matrix's share of every block: [S][4 gates][active] uint4 */
    uint32_t k;             /* its inputs (K) */
    uint32_t slots;         /* S: 16-byte chunks per thread and gate */
    uint32_t smem_slots;    /* the first ones, in shared memory at smem_off; the rest read from the image */
    uint32_t smem_off;
    uint64_t image_off;     /* block b's at image_off + b * block_bytes */
    uint64_t block_bytes;
} sig_lstm_array_t;

typedef struct {
    uint32_t mode, dtype, blocks, threads;
    uint32_t group;         /* G: threads per hidden unit (a power of two, <= 32) */
    uint32_t active;        /* threads holding a unit (units x G rounded up to a warp) */
    uint32_t units;         /* the most units a block owns (block b: H b / B .. H (b + 1) / B) */
    uint32_t layers, in, hidden, out, window, head_act;
    uint32_t chunk;         /* weights per 16-byte chunk: 4 (f32) or 8 */
    uint32_t in_pad, hs;    /* input and hidden vectors as the dot products read them (zero padded) */
    uint32_t tb;            /* steps of a full window projected per batch */
    uint32_t xf;            /* floats of the input buffer (tb x in_pad) */
    uint32_t bc_words, ag_words;   /* LL words per parity: broadcast (2 + tb x in), all-gather (L x H) */
    uint32_t slots;         /* stream slots (slot `slots` is the full window's scratch) */
    uint32_t max_rows;
    uint32_t smem_bytes, smem_limit;
    uint32_t off_bias, off_hot_g, off_gates, off_hot_c, off_c_run, off_xf, off_hv, off_head, off_bc, off_ag;
    uint32_t off_stage;     /* apart: a step's state records copied in (48 bytes a unit and layer) */
    uint32_t head_in_smem;
    uint32_t sync;          /* SIG_LSTM_SYNC_* (tuning) */
    uint32_t math;          /* SIG_LSTM_MATH_*, resolved (f32: WIDE) */
    uint32_t apart;         /* 1: the advances run in a second resident launch (plan 4), else 0 */
    float half_x_max;       /* HALF: the largest |feature| the half products take (FLT_MAX for bf16) */
    uint64_t image_bytes, bias_image, head_image;
    uint64_t state_bytes, state_g, state_c;
    uint64_t xchg_bytes;
    uint64_t trace;                  /* tuning's: the traced instantiation's records, else 0 */
    uint64_t weight_bytes;           /* every matrix in this dtype, as packed */
    uint64_t smem_weight_bytes;      /* of which in shared memory (every block together) */
    uint64_t critical_smem_bytes, critical_global_bytes;   /* W_ih (the step's) per block */
    uint64_t cost;                   /* the plan's estimate of a step, clocks */
    sig_lstm_array_t arrays[2 * SIG_LSTM_MAX_LAYERS];   /* 2k: W_ih of layer k; 2k + 1: W_hh */
    char why[224];                   /* a refusal's reason; planned with apart 0, why the advances stay inline */
} sig_lstm_plan_t;

typedef struct {            /* byte offsets in the mailbox */
    uint32_t ctrl, hold, ready, exited, ring, entry_bytes;   /* hold: u32, SIG_LSTM_OP_HOLD's */
    uint32_t cmd, done, outputs;     /* within an entry */
    uint32_t feat;                   /* the cmd word holding feature 0: 16 (2: SIG_LSTM_SYNC_FEAT_SHARED) */
    uint32_t window_in, window_out, total;
} sig_lstm_layout_t;

/* Plans NET in DTYPE for SLOTS stream slots and MAX_ROWS full windows per command on DEVICE. 0; or
 * cudaErrorNotSupported / cudaErrorInvalidValue with plan->why saying what does not fit; or the
 * error of a device query. */
int sig_lstm_plan (const sig_lstm_net_t *net, uint32_t dtype, uint32_t slots, uint32_t max_rows, int device,
                   const sig_lstm_tuning_t *tuning, sig_lstm_plan_t *plan);
/* The plan of NET in DTYPE as MODE of BLOCKS blocks with SMEM_LIMIT bytes of dynamic shared memory a
 * block, without any device (no query, no placement check, advances never apart): tests on a machine
 * with no GPU plan, pack and compile the specialised kernel with it. 0, cudaErrorNotSupported with
 * plan->why, or cudaErrorInvalidValue. */
int sig_lstm_plan_offline (const sig_lstm_net_t *net, uint32_t dtype, uint32_t mode, uint32_t blocks, uint32_t slots,
                           uint32_t max_rows, uint32_t smem_limit, const sig_lstm_tuning_t *tuning,
                           sig_lstm_plan_t *plan);
int sig_lstm_layout (const sig_lstm_plan_t *plan, sig_lstm_layout_t *layout);
/* The device image (plan->image_bytes, host memory). */
int sig_lstm_pack (const sig_lstm_net_t *net, const sig_lstm_plan_t *plan, const sig_lstm_layout_t *layout,
                   void *image);
/* Launches the resident kernel (IMAGE, STATE, XCHG in device memory, BOX the device address of the
 * mailbox) in ROLE (SIG_LSTM_ROLE_*: ALL, or apart the serving one and the advancer, each with its
 * own mailbox). Returns at once; every block sets its ready word once its weights are loaded. */
int sig_lstm_launch (const void *image, void *state, void *xchg, void *box, const sig_lstm_plan_t *plan,
                     uint32_t role, cudaStream_t stream);
/* The NVRTC source of the LSTM kernel specialised for IMAGE's header (host memory, as sig_lstm_pack
 * wrote it), its function "sig_lstm_spec": a string the caller frees, or NULL (a bad header, a plan
 * whose advances run apart, no memory). Compile it with sig_spec_compile. */
char *sig_lstm_spec_source (const void *image);
/* sig_lstm_launch (ROLE_ALL) with MODULE's kernel, compiled for IMAGE's header. */
int sig_lstm_spec_launch (const sig_spec_module_t *module, const void *image, void *state, void *xchg, void *box,
                          const sig_lstm_plan_t *plan, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
