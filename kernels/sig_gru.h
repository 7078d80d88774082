/* The GRU's kernels (the CUDA GRU backend, service/backends/cuda/backend_gru_cuda.c), as C entry
 * points (sig_common.h: what every kernel entry does). The backend captures them, with the dense
 * kernel `warp` (sig_dense.h) for the input projections and the head, into one CUDA graph per
 * request shape.
 *
 * Layout: PyTorch's. A layer's W_ih is [3H][in] and W_hh [3H][H], row-major, the gate blocks r, z, n
 * in that order; its biases are held as B_I [3H] = (b_ir + b_hr, b_iz + b_hz, b_in), added to W_ih x
 * (the input projection), and B_HN [H] = b_hn, which n needs apart:
 *
 *   r = sig (gi_r + W_hr h)   z = sig (gi_z + W_hz h)   n = tanh (gi_n + r (W_hn h + b_hn))
 *   h' = n + z (h - n)        with gi = W_ih x + B_I
 *
 * Every dot product is one warp's (lanes strided over the inputs, a shuffle sum), fp32 with FMA; the
 * sigmoid and tanh are the CUDA LSTM kernel's (__expf, __fdividef), whose rounding the tests' bounds
 * model (tests/tolerance.c, s_sig_err). Shapes: 1 <= H <= SIG_GRU_MAX_HIDDEN, 1 <= in <= 2^24, rows
 * <= 65535. Device pointers throughout; nothing here allocates. */
#ifndef SIGSERVE_SIG_GRU_H
#define SIGSERVE_SIG_GRU_H

#include "sig_common.h"

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The widest hidden layer: the recurrence keeps h (twice, sequence mode) in shared memory. */
#define SIG_GRU_MAX_HIDDEN 4096
/* Warps of a block in the launches that spread a layer's units over blocks: one unit a warp. */
#define SIG_GRU_UNIT_WARPS 8
/* Warps of a block that runs a whole sequence (one block a row, every unit): at most 32. */
#define SIG_GRU_SEQ_MAX_WARPS 32

/* A layer's weights in device memory (the header comment's layout). */
typedef struct {
    const float *w_ih;          /* [3H][in] */
    const float *w_hh;          /* [3H][H] */
    const float *b_i;           /* [3H] */
    const float *b_hn;          /* [H] */
    uint32_t in, hidden;
} sig_gru_layer_t;

/* What a stream's step or advance acts on, in device memory (copied there from pinned memory by the
 * graph's first node, so one graph serves every slot): the slot, and a ring position: a step's own
 * entry, or for an advance the entry of the slot's next step (the W - 1 entries after it, oldest
 * first, are the steps it runs). A step's features follow the header (16 bytes: still aligned). */
typedef struct {
    uint32_t slot;
    uint32_t pos;
    uint32_t pad[2];
} sig_gru_cmd_t;

/* The recurrence of one layer over steps [t0, t0 + nsteps) of ROWS sequences of T steps, from their
 * input projections GI ([rows][T][3H], B_I included: the `warp` kernel's output). H0 [rows][H] is
 * the state before step t0 (NULL: zeros); H_OUT [rows][H] gets the state after the last step run;
 * SEQ [rows][T][H] (may be NULL) every step's h.
 * WHOLE 1: one block a row holding every unit, the steps looped inside with the state in shared
 *   memory (any nsteps; H0 may be H_OUT).
 * WHOLE 0: the units spread over ceil (H / SIG_GRU_UNIT_WARPS) blocks a row, one step a launch
 *   (nsteps must be 1; H0 must not be H_OUT: other blocks still read it). */
int sig_gru_seq (const sig_gru_layer_t *layer, const float *gi, uint32_t T, uint32_t t0, uint32_t nsteps,
                 uint32_t rows, const float *h0, float *h_out, float *seq, int whole, cudaStream_t stream);

/* One step of one layer for one sequence, the input projection computed here as well (a stream's
 * step): H_OUT [H] = the cell on X [in] and the state at H + slot x H_SLOT_STRIDE (slot: CMD's, 0
 * when CMD is NULL). RING (may be NULL; then CMD may be too): X is also stored as the slot's ring
 * entry, at RING + slot x RING_SLOT_STRIDE + pos x in. X and H must not overlap H_OUT or the ring. */
int sig_gru_cell (const sig_gru_layer_t *layer, const float *x, const float *h, uint64_t h_slot_stride, float *h_out,
                  const sig_gru_cmd_t *cmd, float *ring, uint64_t ring_slot_stride, cudaStream_t stream);

/* An advance's inputs in order: DST [T][in] = the slot's ring entries pos + 1, ..., pos + T (mod
 * WINDOW; slot and pos from CMD), the slot's ring at RING + slot x SLOT_STRIDE. T < WINDOW. */
int sig_gru_gather (const sig_gru_cmd_t *cmd, const float *ring, uint64_t slot_stride, uint32_t window, uint32_t in,
                    uint32_t T, float *dst, cudaStream_t stream);

/* An advance's result into the slot's state: STATE[slot x SLOT_STRIDE + k H + j] = SRC[k SRC_STRIDE
 * + j] for every layer k < LAYERS and unit j < H (slot from CMD). */
int sig_gru_store (const sig_gru_cmd_t *cmd, const float *src, uint64_t src_stride, uint32_t layers, uint32_t hidden,
                   float *state, uint64_t slot_stride, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
