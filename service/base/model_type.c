/* The model types table (model_type.h): a row per type, and the configuration keys of each type as a
 * table of the config walker (config_walk.h), read after the keys every model has. */
#include "base/model_type.h"

#include "base/config.h"
#include "base/config_walk.h"

#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------- the keys of a type */

/* An absent "bias" is the weight's name with ".weight" replaced by ".bias", which is how
 * PyTorch names an nn.Linear's tensors. */
static int s_derive_bias (parser_t *p, const void *object, char *dst, size_t size)
{
    const layer_config_t *layer = object;
    const char *suffix = ".weight";
    size_t n = strlen (layer->weight), sn = strlen (suffix);
    if (n < sn || strcmp (layer->weight + n - sn, suffix) != 0) {
        char q[160];
        return config_fail (p, "required key missing: the weight %s does not end in \".weight\", so the "
                          "bias name cannot be derived; give \"bias\" (a tensor name, or null for none)",
                       config_quote (layer->weight, q, sizeof q));
    }
    snprintf (dst, size, "%.*s.bias", (int) (n - sn), layer->weight);
    return 0;
}

const char *const config_activation_names[] = { "none", "relu", "sigmoid", "tanh", NULL };
const char *const config_split_names[] = { "off", "auto", "on", NULL };

/* A dense layer: an MLP's layers, a recurrent model's head. */
static const key_spec_t s_layer_keys[] = {
    { .name = "weight", .type = KEY_STRING, .required = true, FIELD (layer_config_t, weight),
      .len_min = 1, .len_max = CONFIG_NAME_MAX - 1 },
    { .name = "bias", .type = KEY_STRING, FIELD (layer_config_t, bias),
      .len_min = 1, .len_max = CONFIG_NAME_MAX - 1, .nullable = true, .derive = s_derive_bias },
    { .name = "activation", .type = KEY_ENUM, FIELD (layer_config_t, activation),
      .choices = config_activation_names, .def = ACTIVATION_NONE },
};
static const table_t s_layer_table = TABLE ("layer", s_layer_keys);

static const key_spec_t s_mlp_keys[] = {
    { .name = "layers", .type = KEY_OBJECT_ARRAY, .required = true, .offset = offsetof (model_config_t, layers),
      .size = sizeof (layer_config_t), .count_offset = offsetof (model_config_t, layer_count),
      .min = 1, .max = CONFIG_MAX_LAYERS, .what = "layer", .sub = &s_layer_table },
    /* with cpus of at least 2 an instance: checked once the model is read (config.c's s_resolve_model) */
    { .name = "split", .type = KEY_ENUM, FIELD (model_config_t, split), .choices = config_split_names,
      .def = CPU_SPLIT_OFF },
};

/* Every recurrent type's keys, PREFIX the key of its tensors' prefix (the type's name). */
#define RECURRENT_KEYS(prefix)                                                                                  \
    { .name = prefix, .type = KEY_STRING, FIELD (model_config_t, rnn_prefix),                                  \
      .len_min = 0, .len_max = CONFIG_NAME_MAX - 16, .def_str = "" },                                          \
    { .name = "window", .type = KEY_U32, .required = true, FIELD (model_config_t, window), .min = 1, .max = 4096 }, \
    { .name = "head", .type = KEY_OBJECT, .required = true, .offset = offsetof (model_config_t, head),          \
      .sub = &s_layer_table },                                                                                  \
    { .name = "max_streams", .type = KEY_U32, FIELD (model_config_t, max_streams),                             \
      .min = 1, .max = 1000000, .def = 1024 },                                                                  \
    { .name = "stream_idle_s", .type = KEY_U32, FIELD (model_config_t, stream_idle_s),                         \
      .min = 1, .max = 86400, .def = 300 },                                                                     \
    { .name = "stream_history", .type = KEY_U32, FIELD (model_config_t, stream_history),                       \
      .min = 0, .max = 1000000, .def = 0 }

static const key_spec_t s_lstm_keys[] = {
    RECURRENT_KEYS ("lstm"),
    { .name = "advances_apart", .type = KEY_BOOL, FIELD (model_config_t, advances_apart), .def = false },
};

static const key_spec_t s_gru_keys[] = { RECURRENT_KEYS ("gru") };

#define TYPE_KEYS(type, rows) { .what = "model", .keys = rows, .count = sizeof (rows) / sizeof (rows)[0], \
                                .required_for = "\"type\": \"" type "\"" }
static const table_t s_mlp_table = TYPE_KEYS ("mlp", s_mlp_keys);
static const table_t s_lstm_table = TYPE_KEYS ("lstm", s_lstm_keys);
static const table_t s_gru_table = TYPE_KEYS ("gru", s_gru_keys);

/* ---------------------------------------------------------------- the table */

const char *const model_type_names[] = {
    [MODEL_TYPE_MLP] = "mlp",
    [MODEL_TYPE_LSTM] = "lstm",
    [MODEL_TYPE_GRU] = "gru",
    [MODEL_TYPE_COUNT] = NULL,
};

static const model_type_info_t s_types[MODEL_TYPE_COUNT] = {
    [MODEL_TYPE_MLP] = { .title = "MLP", .keys = &s_mlp_table,
                         .caps = MODEL_CAP_BATCH | MODEL_CAP_INLINE | MODEL_CAP_CUDA_KERNELS },
    [MODEL_TYPE_LSTM] = { .title = "LSTM", .keys = &s_lstm_table, .gates = 4, .gate_names = "i, f, g, o",
                          .caps = MODEL_CAP_BATCH | MODEL_CAP_WINDOW | MODEL_CAP_STREAM | MODEL_CAP_CUDA_RESIDENT },
    [MODEL_TYPE_GRU] = { .title = "GRU", .keys = &s_gru_table, .gates = 3, .gate_names = "r, z, n",
                         .caps = MODEL_CAP_BATCH | MODEL_CAP_WINDOW | MODEL_CAP_STREAM },
};

const model_type_info_t *model_type_info (model_type_t t)
{
    return (unsigned) t < MODEL_TYPE_COUNT ? &s_types[t] : NULL;
}

const char *model_type_name (model_type_t t) { return (unsigned) t < MODEL_TYPE_COUNT ? model_type_names[t] : "unknown"; }

bool model_type_can (model_type_t t, uint32_t caps)
{
    return (unsigned) t < MODEL_TYPE_COUNT && (s_types[t].caps & caps) == caps;
}

static bool s_has_key (const model_type_info_t *info, const char *key)
{
    for (size_t i = 0; i < info->keys->count; i++)
        if (strcmp (info->keys->keys[i].name, key) == 0)
            return true;
    return false;
}

const char *model_type_list (uint32_t caps, const char *key, bool quoted, char *buf, size_t len)
{
    size_t n = 0, count = 0, total = 0;
    for (int t = 0; t < MODEL_TYPE_COUNT; t++)
        total += model_type_can ((model_type_t) t, caps) && (!key || s_has_key (&s_types[t], key));
    buf[0] = '\0';
    for (int t = 0; t < MODEL_TYPE_COUNT && n < len; t++) {
        if (!model_type_can ((model_type_t) t, caps) || (key && !s_has_key (&s_types[t], key)))
            continue;
        count++;
        const char *sep = count == 1 ? "" : count == total ? " or " : ", ";
        n += (size_t) snprintf (buf + n, len - n, quoted ? "%s\"%s\"" : "%s%s", sep, model_type_names[t]);
    }
    return buf;
}

/* ---------------------------------------------------------------- the configuration's part */

/* The type OBJ names (the default, mlp, when it names none): 0, or -1 with a message at "type". */
static int s_type_of (parser_t *p, const cJSON *obj, model_type_t *type)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive (obj, "type");
    *type = MODEL_TYPE_MLP;
    if (!v)
        return 0;
    for (int t = 0; v && cJSON_IsString (v) && t < MODEL_TYPE_COUNT; t++)
        if (strcmp (v->valuestring, model_type_names[t]) == 0) {
            *type = (model_type_t) t;
            return 0;
        }
    char list[128], q[160];
    const size_t mark = config_path_push_key (p, "type");
    config_fail (p, "expected one of %s, got %s", config_join (model_type_names, list, sizeof list),
                 cJSON_IsString (v) ? config_quote (v->valuestring, q, sizeof q) : config_kind (v));
    config_path_pop (p, mark);
    return -1;
}

int model_type_config_keys (parser_t *p, const cJSON *obj, const table_t **extra)
{
    model_type_t type;
    *extra = NULL;
    if (s_type_of (p, obj, &type) != 0)
        return -1;
    *extra = s_types[type].keys;
    return 0;
}

int model_type_config_elsewhere (parser_t *p, const cJSON *obj, const char *key)
{
    model_type_t type;
    char list[128];
    if (s_type_of (p, obj, &type) != 0 || !*model_type_list (0, key, true, list, sizeof list))
        return 0;
    const bool chain = s_types[type].gates && strcmp (key, "layers") == 0;
    return config_fail (p, "only for models of \"type\": %s; this model is \"%s\"%s", list, model_type_names[type],
                        chain ? " (its layers come from the weight_ih_l{k}/weight_hh_l{k} tensors; its output layer "
                                "is \"head\")" : "");
}
