/* lstm persistent, specialised at load: the kernel of lstm_persistent.cu compiled with NVRTC for one
 * plan, the model's image header (plan and layout) given as constant words (L_SPEC_WORDS: every field
 * the kernel reads becomes a constant, lstm_persistent.cu says how), compiled by sig_spec_compile,
 * loaded by sig_spec_load_fn and launched through the driver API (mlp_persistent_spec.cu has both).
 * The text of lstm_persistent.cu and the headers it includes are embedded at build time
 * (tools/embed-sources.sh). Host code only. */
#include "sig_lstm.h"
#include "sig_spec.h"
#include "lstm_persistent_impl.cuh"

#include <stdio.h>
#include <stdlib.h>

extern "C" char *sig_lstm_spec_source (const void *image)
{
    const l_header_t *h = static_cast<const l_header_t *> (image);
    if (!h || h->magic != L_MAGIC || h->plan.dtype > SIG_LSTM_BF16 || h->plan.mode > SIG_LSTM_GRID || h->plan.apart
        || (h->plan.sync & SIG_LSTM_SYNC_GENERIC) || !h->plan.blocks)
        return NULL;
    const size_t words = sizeof (l_header_t) / 4u, cap = 1024u + 16u * words;   /* a word: at most 10 digits, "u, " */
    char *t = static_cast<char *> (malloc (cap));
    if (!t)
        return NULL;
    const sig_lstm_plan_t &p = h->plan;
    int n = snprintf (t, cap,
                      "/* sigserve: the LSTM kernel specialised for %u layers of %u units, %u inputs, %u outputs, window "
                      "%u, %s of %u, dtype %u */\n#define L_SPEC 1\n#define L_SPEC_DT %u\n#define L_SPEC_MODE %u\n"
                      "#define L_SPEC_TRACED %u\n#define L_SPEC_WORDS {",
                      p.layers, p.hidden, p.in, p.out, p.window, p.mode == SIG_LSTM_GRID ? "grid" : "cluster", p.blocks,
                      p.dtype, p.dtype, p.mode, p.trace ? 1u : 0u);
    const uint32_t *w = static_cast<const uint32_t *> (image);
    for (size_t i = 0; i < words && n > 0 && (size_t) n < cap; ++i)
        n += snprintf (t + n, cap - (size_t) n, "%s%uu,", i % 16u ? " " : " \\\n  ", w[i]);
    if (n > 0 && (size_t) n < cap)
        n += snprintf (t + n, cap - (size_t) n, " }\n#include \"lstm_persistent.cu\"\n");
    if (n <= 0 || (size_t) n >= cap) {
        free (t);
        return NULL;
    }
    return t;
}

extern "C" int sig_lstm_spec_launch (const sig_spec_module_t *module, const void *image, void *state, void *xchg,
                                     void *box, const sig_lstm_plan_t *p, cudaStream_t stream)
{
    if (!module || !image || !state || !box || !p || !p->blocks || p->apart || (p->mode == SIG_LSTM_GRID && !xchg))
        return (int) cudaErrorInvalidValue;
    const l_header_t *img = static_cast<const l_header_t *> (image);
    char *st = static_cast<char *> (state);
    uint64_t *xc = static_cast<uint64_t *> (xchg);
    char *bx = static_cast<char *> (box);
    uint32_t role = SIG_LSTM_ROLE_ALL;
    void *args[5] = { &img, &st, &xc, &bx, &role };
    /* as sig_lstm_launch: a grid cooperatively, one block without a cluster */
    return sig_spec_launch_args (module, p->blocks, L_T, p->smem_bytes, p->mode == SIG_LSTM_CLUSTER && p->blocks > 1u,
                                 p->mode == SIG_LSTM_GRID, stream, args);
}
