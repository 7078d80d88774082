/* Reading the tensors a model config names from its safetensors file: what the dense chain
 * (weights.c) and the LSTM loader (lstm.c) are both made of. WHERE names the part of the model in
 * messages ("layers[2]", "head", "lstm layer 1"). */
#ifndef SIGSERVE_TENSORS_H
#define SIGSERVE_TENSORS_H

#include "base/config.h"
#include "weights/safetensors.h"
#include <stddef.h>
#include <stdint.h>

/* One dense layer, f32 in host memory: W [out][in] row-major (PyTorch's nn.Linear layout), a bias
 * [out] (zeros when the config names none) and an activation. */
typedef struct {
    uint32_t in, out;
    activation_t activation;
    float *weight;      /* [out][in] */
    float *bias;        /* [out] */
} dense_layer_t;

/* The tensor NAME of ST, or NULL with ERR listing what the file has. */
const st_tensor_t *tensor_find (const safetensors_t *st, const model_config_t *cfg, const char *name, char *err,
                                size_t errlen);
/* A malloc'd f32 copy of T (WHAT: "weight", "bias"), every element checked finite; a non-zero
 * ROW_LEN lets a message give a bad element's row and column. NULL with ERR. */
float *tensor_read (const model_config_t *cfg, const char *where, const char *what, const st_tensor_t *t,
                    uint64_t row_len, char *err, size_t errlen);
/* A dense layer named by LC ([out, in] weight, [out] bias or none), IN_EXPECTED columns when not
 * 0 (IN_MEANING says why, in a message). 0, or -1 with ERR. */
int tensor_read_dense (const safetensors_t *st, const model_config_t *cfg, const char *where,
                       const layer_config_t *lc, uint32_t in_expected, const char *in_meaning, dense_layer_t *layer,
                       char *err, size_t errlen);

#endif
