/* One CPU model instance's layers split across the cores the config gave it (issue 36 part 2,
 * "split" in config/README.md): the caller of cpu_split_run (the instance's worker, or a front that
 * claimed the instance) is the leader, part 0; a helper thread on each further core is part 1, 2, ...
 * Each part computes its slice of a split layer's outputs (the backend's LAYER function decides which)
 * from the weights it alone reads, so each core's L2 holds its slice; the layers are dependent, so a
 * split layer ends in a barrier: every part publishes a counter in a cache line of its own and waits
 * for the others' (spinning: no syscall, no lock, no allocation). A layer not split runs on the leader.
 *
 * THE COUNTERS. Each part owns a line with a monotonic tick. A call of split segments s_1 .. s_m (a split
 * layer and the layers chained to it: cpu_split_run) starts
 * when the leader publishes tick base (the rows and the plan beside it: the input is ready); a part
 * computes s_j once the leader's tick and, for j >= 2, every helper's have reached base + j - 1, and
 * then publishes base + j (the leader: after its slice and any unsplit layers before s_{j+1}, which it
 * runs once every helper reached base + j). Each hand-off is one line crossing cores each way, both
 * ways at once: the cost the load's measurement weighs against the bytes each core no longer reads.
 *
 * IDLE. A helper spins (pause) while calls come within spin_ns of its last one (0: never spins;
 * UINT64_MAX: never sleeps), then sleeps on a futex. A call that finds a helper asleep runs every
 * layer on the leader, and wakes it (a syscall on that call alone, the first after an idle spell):
 * the leader never waits for a wake-up. Helpers are started with their affinity set (they never run
 * anywhere else, not even before they begin) and stopped by cpu_split_destroy. */
#ifndef SIGSERVE_CPU_SPLIT_H
#define SIGSERVE_CPU_SPLIT_H

#include "backends/backend.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CPU_SPLIT_MAX_PARTS 16      /* cores one instance may split over */

typedef struct cpu_split cpu_split_t;

/* Part PART of PARTS computes its slice of layer LAYER for ROWS rows (PARTS 1: the whole layer); ARG is the
 * call's (cpu_split_run's: the inputs, say). */
typedef void (*cpu_split_layer_fn) (void *ctx, const void *arg, uint32_t layer, uint32_t rows, uint32_t part,
                                    uint32_t parts);

/* Starts a helper pinned to each of CPUS[1 .. COUNT - 1] (CPUS[0] is the leader's: the caller pins it),
 * named NAME-k. LAYERS layers (at most 64), each run by FN (CTX). NULL with ERR when a helper cannot
 * start on its CPU (none is left running). */
cpu_split_t *cpu_split_new (const int *cpus, size_t count, uint32_t layers, cpu_split_layer_fn fn, void *ctx,
                            uint64_t spin_ns, const char *name, char *err, size_t errlen);
void cpu_split_destroy (cpu_split_t **self_p);

/* One call on the calling thread, with ARG (handed to every part's layer function: it travels with the
 * call's tick, on the line a helper reads first, so a helper pays no further crossing to learn it): the
 * layers in order, those whose bit is set in MASK over every core, the others here. A split layer whose bit
 * is set in CHAIN too (the one before it split as well) follows that one with no barrier between them: each
 * part's slice of it reads only what the same part wrote (the backend splits it by inputs: cpu_dense.h's
 * raw sums). True when it ran split, false when it ran alone (MASK 0, or a helper was asleep: then woken). */
bool cpu_split_run (cpu_split_t *self, uint64_t mask, uint64_t chain, uint32_t rows, const void *arg);

/* Phase stamps (the time stamp counter) of split calls, for tools (sigbench --split A,B --trace): the n-th
 * split call after cpu_split_set_trace writes STAMPS[(n % CALLS) * parts + p] for part p (a line pair each,
 * written only by that part; read them after the calls): stamp e 0 the call's start (the leader: as it
 * publishes; a helper: as it sees it), 2j - 1 its slice of segment j done, 2j the segment's barrier
 * passed (the others' ticks seen), for j up to 3; the leader's also CPU_SPLIT_STAMP_LAYER + l as its
 * part of layer l ends (l up to 6), and CPU_SPLIT_STAMPS - 1 its end; left as they were where that did not
 * happen (clear them first). NULL: off (a call then costs one predicted branch a phase). Set it between
 * calls. */
#define CPU_SPLIT_STAMPS 16
#define CPU_SPLIT_STAMP_LAYER 8
typedef struct {
    _Alignas (64) uint64_t t[CPU_SPLIT_STAMPS];
} cpu_split_stamps_t;
void cpu_split_set_trace (cpu_split_t *self, cpu_split_stamps_t *stamps, uint32_t calls);

uint32_t cpu_split_parts (const cpu_split_t *self);
/* Calls that ran split and calls that found a helper asleep (and ran alone), since cpu_split_new. */
void cpu_split_counts (const cpu_split_t *self, uint64_t *split, uint64_t *woke);
/* Whether every helper is asleep now (tests: a helper past its spin sleeps). */
bool cpu_split_helpers_asleep (const cpu_split_t *self);

/* The CPU MLP backend's (backend_cpu.c) plan of a split. */
typedef struct {
    uint64_t mask;      /* the layers split (a bit each; 0: none) */
    /* of those, the ones split by inputs (each part its share of the outputs of the layer before, which
     * it computed: no barrier between them; the leader adds the parts' sums up before the next layer),
     * where the layer before is split by outputs, the one after is not split, and the weights are not int8 */
    uint64_t chain;
    int32_t lead;       /* the leader's extra share of each, in eighths of a share (at least -8): it meets a
                           call a hand-off before its helpers, but its core may be the slower one (a guest's
                           neighbours), so less than a share is measured too */
} cpu_split_plan_t;

/* M's plan as its load decided, and another from now on (sigbench times the plans of one model side by
 * side; the tests run each): what cannot be split is left out (a layer of one block of 16 outputs, a
 * chain where the rules above do not hold); a model loaded without a split has none. */
cpu_split_plan_t backend_cpu_split_plan (const backend_model_t *m);
void backend_cpu_set_split_plan (backend_model_t *m, cpu_split_plan_t plan);
/* The leader's extra share, in eighths of a share, that makes one block of 16 outputs more of the largest
 * layer in MASK over M's cores (at least 1): the load measures -1 to 3 of those steps (the shares between
 * round to whole blocks: over 4 cores 1/8 of a 16-block layer's share is half a block). */
uint32_t backend_cpu_split_lead_step (const backend_model_t *m, uint64_t mask);
/* M's split (its helpers), NULL where it has none: tools set its trace (cpu_split_set_trace). */
cpu_split_t *backend_cpu_split (backend_model_t *m);

#endif
