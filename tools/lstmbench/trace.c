/* lstmbench --trace: the records of the traced LSTM kernel as rows, a phase each (kernels.h:
 * SIG_LSTM_TRACE_*). */
#define _GNU_SOURCE
#include "lstmbench.h"

#ifdef SIGSERVE_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

/* The name of trace stamp I of a model of L layers in block BLOCK's records (kernels.h:
 * SIG_LSTM_TRACE_*). */
static void s_stamp_name (uint32_t i, uint32_t L, bool ping, uint32_t block, char *out, size_t len)
{
    if (i == 0)
        snprintf (out, len, block ? "words received" : "seen");
    else if (i == 1)
        snprintf (out, len, block ? "features copied" : "features read");
    else if (i == 2)
        snprintf (out, len, ping ? "output stored" : "broadcast sent");
    else if (i == 3 + 3 * L)
        snprintf (out, len, "output stored");
    else
        snprintf (out, len, "L%u %s", (i - 3) / 3, (i - 3) % 3 == 0 ? "gates" : (i - 3) % 3 == 1 ? "h published" : "gathered");
}

static int s_trace_block (const options_t *o, const char *size, const char *dname, const char *how, uint64_t trace,
                          size_t layers, uint32_t block, row_t *r);

/* The records of the traced kernel (stopped) at device address TRACE, block 0's and then (a model of
 * several blocks) block 1's (s_trace_block). The buffer is zeroed again for the next use. */
int lb_trace_rows (const options_t *o, const char *size, const char *dname, const char *how, uint64_t trace,
                   size_t layers, row_t *r)
{
    const size_t bytes = (size_t) SIG_LSTM_TRACE_RECORDS * SIG_LSTM_TRACE_WORDS * sizeof (uint64_t);
    int rc = 0;
    for (uint32_t b = 0; b < SIG_LSTM_TRACE_BLOCKS && rc == 0; b++)
        rc = s_trace_block (o, size, dname, how, trace + b * bytes, layers, b, r);
    return rc;
}

/* Block BLOCK's records at device address TRACE: for the steps (or, when there are none, the pings)
 * a row per phase, from each stamp to the next one reached, and seen -> output (the kernel's part of
 * the critical path); clock64 converted at the clock measured over the records (%globaltimer against
 * clock64). Block 1 (none in a model of one block: no rows) has its own clock: its rows compare
 * with each other only. */
static int s_trace_block (const options_t *o, const char *size, const char *dname, const char *how, uint64_t trace,
                          size_t layers, uint32_t block, row_t *r)
{
    const size_t words = (size_t) SIG_LSTM_TRACE_RECORDS * SIG_LSTM_TRACE_WORDS;
    uint64_t *h = malloc (words * sizeof *h);
    if (!h || cudaMemcpy (h, (void *) (uintptr_t) trace, words * sizeof *h, cudaMemcpyDeviceToHost) != cudaSuccess
        || cudaMemset ((void *) (uintptr_t) trace, 0, words * sizeof *h) != cudaSuccess) {
        fprintf (stderr, "lstmbench: --trace: the records could not be read\n");
        free (h);
        return -1;
    }
    char who[32] = "";   /* block 1's rows say so */
    if (block)
        snprintf (who, sizeof who, ", block %u", block);
    /* the last stamp: the output stored (block 0), the last layer gathered (block 1: no head) */
    const uint32_t L = (uint32_t) layers, end_stamp = block ? 2 + 3 * L : 3 + 3 * L,
                   last = end_stamp < SIG_LSTM_TRACE_STAMPS ? end_stamp : SIG_LSTM_TRACE_STAMPS - 1;
    uint32_t steps = 0, pings = 0;
    double cycles = 0, ns = 0;
    for (uint32_t k = 0; k < SIG_LSTM_TRACE_RECORDS; k++) {
        const uint64_t *rec = h + (size_t) k * SIG_LSTM_TRACE_WORDS;
        steps += rec[0] == SIG_LSTM_OP_STEP;
        pings += rec[0] == SIG_LSTM_OP_PING;
        const uint32_t end = rec[0] == SIG_LSTM_OP_PING ? 2 : last;
        if (rec[0] && rec[3] && rec[3 + end] && rec[2] > rec[1]) {
            cycles += (double) (rec[3 + end] - rec[3]);
            ns += (double) (rec[2] - rec[1]);
        }
    }
    const bool ping = steps == 0;
    const uint64_t op = ping ? SIG_LSTM_OP_PING : SIG_LSTM_OP_STEP;
    const double mhz = ns > 0 ? cycles / ns * 1e3 : 0;
    if (!(steps || pings) || mhz <= 0) {
        if (!block)
            printf ("| %s cuda %s traced [%s]: no records | | | | | | | | |\n", size, dname, how);
        free (h);
        return 0;
    }
    char label[256], a[32], b[32];
    const uint32_t end = ping ? 2 : last, cap = o->iterations + 16;
    for (uint32_t i = 0; i <= end; i++) {   /* the phase ending at stamp i (i = 0: seen -> output) */
        r->n = 0;
        uint32_t shown = 0;                  /* the stamp the phase starts at, as first found */
        for (uint32_t k = 0; k < SIG_LSTM_TRACE_RECORDS && r->n < cap; k++) {
            const uint64_t *rec = h + (size_t) k * SIG_LSTM_TRACE_WORDS;
            const uint32_t to = i == 0 ? end : i;
            if (rec[0] != op || !rec[3 + to] || !rec[3])
                continue;
            uint32_t from = 0;
            if (i > 0) {   /* the latest earlier stamp reached (no broadcast in one block) */
                from = i - 1;
                while (from > 0 && !rec[3 + from])
                    from--;
            }
            if (r->n == 0)
                shown = from;
            r->samples[r->n++] = (double) (rec[3 + to] - rec[3 + from]) / mhz;
        }
        if (!r->n)
            continue;
        if (i == 0) {
            s_stamp_name (0, L, ping, block, a, sizeof a);
            s_stamp_name (end, L, ping, block, b, sizeof b);
            snprintf (label, sizeof label, "%s cuda %s traced %s%s, in the kernel: %s -> %s [%s]", size, dname,
                      ping ? "ping" : "step", who, a, b, how);
        } else {
            const uint32_t from = shown;
            s_stamp_name (from, L, ping, block, a, sizeof a);
            s_stamp_name (i, L, ping, block, b, sizeof b);
            snprintf (label, sizeof label, "%s cuda %s traced %s%s: %s -> %s", size, dname, ping ? "ping" : "step", who,
                      a, b);
        }
        snprintf (r->note, sizeof r->note, "SM clock %.0f MHz", mhz);
        lb_print (label, r);
    }
    /* kernels.h SIG_LSTM_TRACE_ENTER ..: the finer stamps of a step of up to 4 layers, a row per pair */
    static const struct {
        uint32_t from, to;
        const char *name;
    } fine[] = {
        { 2, SIG_LSTM_TRACE_ENTER, "features read (or broadcast sent) -> step entered" },
        { SIG_LSTM_TRACE_ENTER, SIG_LSTM_TRACE_L0_DOT, "step entered -> L0 dot summed (thread 0, before the reduction)" },
        { SIG_LSTM_TRACE_L0_DOT, 3, "L0 dot summed -> L0 gates (the reduction over the unit's lanes)" },
        { 3, SIG_LSTM_TRACE_L0_STATE, "L0 gates -> L0 state read (G and c)" },
    };
    for (size_t f = 0; f < sizeof fine / sizeof fine[0] && !ping && L <= SIG_LSTM_TRACE_FINE_LAYERS; f++) {
        r->n = 0;
        for (uint32_t k = 0; k < SIG_LSTM_TRACE_RECORDS && r->n < cap; k++) {
            const uint64_t *rec = h + (size_t) k * SIG_LSTM_TRACE_WORDS;
            const uint32_t from = fine[f].from == 2 && !rec[3 + 2] ? 1 : fine[f].from;   /* one block: no broadcast */
            if (rec[0] != op || !rec[3 + from] || !rec[3 + fine[f].to])
                continue;
            r->samples[r->n++] = (double) ((int64_t) (rec[3 + fine[f].to] - rec[3 + from])) / mhz;
        }
        if (!r->n)
            continue;
        snprintf (label, sizeof label, "%s cuda %s traced step%s: %s", size, dname, who, fine[f].name);
        snprintf (r->note, sizeof r->note, "SM clock %.0f MHz", mhz);
        lb_print (label, r);
    }
    /* kernels.h SIG_LSTM_TRACE_STALE (up to 5 layers): the feature words read again because their tag
     * was stale */
    uint64_t stale = 0, stale_max = 0, counted = 0, with_stale = 0;
    for (uint32_t k = 0; k < SIG_LSTM_TRACE_RECORDS && L <= 5u; k++) {
        const uint64_t *rec = h + (size_t) k * SIG_LSTM_TRACE_WORDS;
        if (rec[0] != op || !rec[3])
            continue;
        if (rec[3 + SIG_LSTM_TRACE_STALE]) {
            const uint64_t s = rec[3 + SIG_LSTM_TRACE_STALE] - 1u;
            stale += s;
            stale_max = s > stale_max ? s : stale_max;
            with_stale += s > 0;
            counted++;
        }
    }
    if (counted)
        printf ("%s cuda %s traced %s [%s]: stale feature words re-read after the poll: %.3f a command, at most %llu, "
                "in %llu of %llu commands\n", size, dname, ping ? "ping" : "step", how,
                (double) stale / (double) counted, (unsigned long long) stale_max, (unsigned long long) with_stale,
                (unsigned long long) counted);
    free (h);
    return 0;
}
#endif
