/* The persistent LSTM: one resident launch a model instance serving stream steps and full windows
 * through a mailbox in mapped pinned memory, as C entry points (sig_common.h: what every kernel
 * entry does, and the completion sentinel; the kernel specialised at load goes through sig_spec.h). */
#ifndef SIGSERVE_SIG_LSTM_H
#define SIGSERVE_SIG_LSTM_H

#include "sig_common.h"
#include "sig_spec.h"

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

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
/* Plan 4 (above): the advances in a second resident launch (the plan's `apart`, where it
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
