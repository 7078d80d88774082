/* The CPU recurrent backends' head (rnn_head.h). */
#include "backends/rnn_head.h"
#include "backends/backend.h"
#include "backends/vec16.h"
#include "base/floats.h"

#include <stdlib.h>
#include <string.h>

int rnn_head_init (rnn_head_t *self, const dense_layer_t *src, uint32_t Hp)
{
    memset (self, 0, sizeof *self);
    self->out = src->out;
    self->Hp = Hp;
    self->act = src->activation;
    if (!(self->w = floats_zeroed ((size_t) self->out * Hp)) || !(self->b = floats_zeroed (self->out)))
        return -1;
    for (uint32_t o = 0; o < self->out; o++)
        memcpy (self->w + (size_t) o * Hp, src->weight + (size_t) o * src->in, src->in * sizeof (float));
    memcpy (self->b, src->bias, self->out * sizeof (float));
    return 0;
}

void rnn_head_free (rnn_head_t *self)
{
    if (!self)
        return;
    free (self->w);
    free (self->b);
    memset (self, 0, sizeof *self);
}

void rnn_head_apply (const rnn_head_t *self, const float *h, float *out)
{
    for (uint32_t o = 0; o < self->out; o++) {
        const v16 *w = (const v16 *) (self->w + (size_t) o * self->Hp), *hv = (const v16 *) h;
        v16 acc = vec16_splat (0.0f);
        for (uint32_t b = 0; b < self->Hp / 16; b++)
            acc += w[b] * hv[b];
        float s = 0.0f;
        for (int k = 0; k < 16; k++)
            s += acc[k];
        out[o] = backend_activate (s + self->b[o], self->act);
    }
}
