/* The model types table: one row per "type" a model may have ("mlp", "lstm", "gru"), holding
 * everything a layer asks of a type instead of a branch on it: its name and the configuration keys
 * of its own (the config reads them from here, with their rules), the shape of its weights (a
 * dense chain, or recurrent layers of `gates` gate blocks in PyTorch's layout, which weights/rnn.c
 * reads for every such type), and what serving it can do (the capabilities below). The rest of
 * the row is above this layer and so is kept there under the same index: the CPU backend and the
 * float64 reference (backends/backends.h: backends_type), the CUDA backend (the GPU library's
 * gpu_backend_t.by_type). A new type is a value of model_type_t, its row in model_type.c, and its
 * row in backends.c. */
#ifndef SIGSERVE_MODEL_TYPE_H
#define SIGSERVE_MODEL_TYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { MODEL_TYPE_MLP = 0, MODEL_TYPE_LSTM, MODEL_TYPE_GRU, MODEL_TYPE_COUNT } model_type_t;

/* What serving a type can do. */
#define MODEL_CAP_BATCH (1u << 0)       /* several requests' rows go into one launch */
#define MODEL_CAP_INLINE (1u << 1)      /* a request may run on a front's own context (nothing held per
                                           instance between requests) */
#define MODEL_CAP_WINDOW (1u << 2)      /* a row is a window of steps (window x step_size features) */
#define MODEL_CAP_STREAM (1u << 3)      /* keeps streams: a request with a stream_id carries one step,
                                           its window held by an instance (backend.h's stream entries) */
#define MODEL_CAP_CUDA_KERNELS (1u << 4)    /* its CUDA backend runs the "kernel" (and "zero_copy") the
                                               config names: "auto" measures each */
#define MODEL_CAP_CUDA_RESIDENT (1u << 5)   /* its CUDA backend keeps a kernel resident whatever "kernel" says */

struct s_table;         /* base/config_walk.h */

typedef struct {
    const char *title;          /* in messages: "MLP", "LSTM" */
    uint32_t caps;              /* MODEL_CAP_* */
    uint32_t gates;             /* recurrent: the gate blocks of hidden rows in weight_ih and weight_hh; 0: a dense chain */
    const char *gate_names;     /* recurrent: the blocks in PyTorch's order, for messages ("i, f, g, o") */
    const struct s_table *keys; /* the configuration keys of its own, besides every model's (config.c) */
} model_type_info_t;

/* T's row; NULL for a value outside the table. */
const model_type_info_t *model_type_info (model_type_t t);
/* T's name in the config ("mlp"), "unknown" outside the table. */
const char *model_type_name (model_type_t t);
/* Every type's name in table order, NULL-terminated (the "type" key's choices). */
extern const char *const model_type_names[];
/* Whether T has every capability in CAPS (false outside the table). */
bool model_type_can (model_type_t t, uint32_t caps);
/* "lstm or gru": the types with every capability in CAPS (CAPS 0: the types whose keys include KEY;
 * KEY NULL: every type), joined with ", " and a last " or ", each in double quotes when QUOTED. */
const char *model_type_list (uint32_t caps, const char *key, bool quoted, char *buf, size_t len);

#endif
