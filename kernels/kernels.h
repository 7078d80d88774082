/* Every CUDA kernel family's C face at once: sig_common.h (what every entry does), sig_dense.h,
 * sig_fused.h, sig_persistent.h, sig_spec.h, sig_lstm.h. Each file includes the families it uses;
 * this umbrella is kept for the benchmarks that drive nearly all of them (tools/sigbench/,
 * tools/lstmbench/). */
#ifndef SIGSERVE_KERNELS_H
#define SIGSERVE_KERNELS_H

#include "sig_common.h"
#include "sig_dense.h"
#include "sig_fused.h"
#include "sig_lstm.h"
#include "sig_persistent.h"
#include "sig_spec.h"

#endif
