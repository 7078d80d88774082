/* What lstm_persistent.cu (the kernel, its launch, the kernel instantiations the planner queries) and
 * lstm_persistent_plan.cu (the host side: plan, layout, pack) share: the constants, the image
 * header, and l_kernel_for. Private to those files. */
#ifndef SIGSERVE_LSTM_PERSISTENT_IMPL_CUH
#define SIGSERVE_LSTM_PERSISTENT_IMPL_CUH

#include "sig_lstm.h"

#include <stdint.h>

#define L_T SIG_LSTM_THREADS
#define L_MAGIC 0x4c53544du     /* "LSTM" */
#define L_LINE 64u
#define L_OP_STOP 0xffu
#define L_HEAD_SMEM_MAX (32u * 1024u)
#define L_ADVANCER_POLL_NS 1000u   /* plan 4: the advancer's pause between polls of its ring */

static_assert (L_T % 32u == 0u, "whole warps");

struct alignas (16) l_header_t {
    uint32_t magic, pad[3];
    sig_lstm_plan_t plan;
    sig_lstm_layout_t box;
};

/* lstm_persistent.cu: the kernel instantiation for DTYPE and MODE (SIG_LSTM_CLUSTER or
 * SIG_LSTM_GRID), the serving one or the TRACED one (per-phase stamps, lstmbench --trace), the one of
 * ROLE_ALL or (APART, a cluster's only) the one of the two apart launches (sig_lstm.h: plan 4), as the
 * pointer the runtime's queries and launches take; nullptr for any other. */
const void *l_kernel_for (uint32_t dtype, uint32_t mode, bool traced, bool apart);

#endif
