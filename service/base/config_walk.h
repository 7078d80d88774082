/* The table-driven JSON reader that config.c is built on, private to base/config*.c (and
 * model_type.c, which holds the keys of each model type): a table row
 * names a key, its type, bounds, default and target field, so adding a key is adding a row; the
 * walker knows nothing about any particular key except through the rows' optional check and derive
 * hooks. Every failure is one message "<file>: <json path>: <problem>" that says what was expected
 * and what was found. */
#ifndef SIGSERVE_CONFIG_WALK_H
#define SIGSERVE_CONFIG_WALK_H

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>

typedef enum {
    KEY_BOOL,           /* bool */
    KEY_INT,            /* int, min..max */
    KEY_U32,            /* uint32_t, min..max */
    KEY_ENUM,           /* int-sized enum: the index of the value in choices */
    KEY_ENUM_NAME,      /* char[size]: one of choices, stored as its name */
    KEY_STRING,         /* char[size]: min..max bytes */
    KEY_PATH,           /* char[size]: a relative path is joined to the config file's folder */
    KEY_STRING_ARRAY,   /* char[max][size] at offset, size_t count at count_offset */
    KEY_INT_ARRAY,      /* int[] at offset (size: the array's bytes), count at count_offset; each
                           element elem_min..elem_max, no two alike when unique */
    KEY_OBJECT,         /* an object read with table sub into the struct at offset */
    KEY_OBJECT_ARRAY,   /* objects read with sub, stride bytes apart, count at count_offset */
    KEY_CUSTOM,         /* read by the row's read hook (a value of several shapes); absent: size bytes zeroed */
} key_type_t;

typedef struct s_parser parser_t;
typedef struct s_table table_t;

/* Extra validation of a string value; returns s_fail's -1 or 0. */
typedef int (*check_fn) (parser_t *p, const char *value);
/* Value of an absent optional string computed from keys read before it (rows are read in
 * table order); writes DST or fails. */
typedef int (*derive_fn) (parser_t *p, const void *object, char *dst, size_t size);
/* KEY_CUSTOM: V read into DST (the row's field); 0, or config_fail's -1. */
typedef int (*read_fn) (parser_t *p, const cJSON *v, char *dst);

typedef struct {
    const char *name;
    key_type_t type;
    bool required;
    size_t offset;              /* target field in the struct the table fills */
    size_t size;                /* strings: buffer bytes (incl. NUL); arrays: element bytes */
    size_t count_offset;        /* arrays: the size_t element count */
    long long min, max;         /* integers: the value; arrays: the element count */
    long long elem_min, elem_max;   /* integer arrays: each element */
    size_t len_min, len_max;    /* strings (and string array elements): bytes, without NUL */
    long long def;              /* bool, integer and enum (an index) default */
    const char *def_str;        /* string default when derive is NULL */
    const char *const *choices; /* enum values */
    const char *what;           /* arrays: the element noun in messages ("endpoint") */
    bool unique;                /* strings: no two alike among array siblings */
    bool nullable;              /* strings: JSON null stores "" */
    check_fn check;
    derive_fn derive;
    read_fn read;               /* KEY_CUSTOM */
    const table_t *sub;         /* objects and object arrays */
} key_spec_t;

struct s_table {
    const char *what;           /* noun for messages about one such object ("model") */
    const key_spec_t *keys;
    size_t count;
    /* Optional: the keys OBJ takes besides these, chosen by OBJ itself (a model's, by its type): 0 with
     * *EXTRA (NULL: none), or -1 with the parser's ERR. Read after these, in their table's order. */
    int (*extra) (struct s_parser *p, const cJSON *obj, const struct s_table **extra);
    /* Optional: KEY of OBJ is in neither table: -1 with a message saying whose key it is (another
     * type's), or 0 (then it is an unknown key). */
    int (*elsewhere) (struct s_parser *p, const cJSON *obj, const char *key);
    const char *required_for;   /* a missing required key's message ends "for <this>" (a type's keys) */
};

#define KEYS_MAX 40
#define TABLE(noun, rows) { .what = noun, .keys = rows, .count = sizeof (rows) / sizeof (rows)[0] }
#define FIELD(type, member) .offset = offsetof (type, member), .size = sizeof (((type *) 0)->member)

struct s_parser {
    const char *file;           /* the name used in messages */
    const char *base_dir;       /* relative paths are joined to it; NULL or "": kept as is */
    char *err;
    size_t errlen;
    char path[512];             /* JSON path of the value being read, "models[0].name" */
};

/* Formats "<file>: <path>: <problem>" into the parser's ERR. Returns -1. */
__attribute__ ((format (printf, 2, 3)))
int config_fail (parser_t *p, const char *fmt, ...);
/* Appends ".KEY" (or "KEY" at the top) or "[INDEX]" to the path; returns the length to pop back to. */
size_t config_path_push_key (parser_t *p, const char *key);
size_t config_path_push_index (parser_t *p, size_t index);
void config_path_pop (parser_t *p, size_t mark);
/* What a value is, for "got ..." when its type is wrong: "a string", "an array", ... */
const char *config_kind (const cJSON *v);
/* S in double quotes with JSON escapes, cut (with "...") so a message stays readable. */
const char *config_quote (const char *s, char *buf, size_t size);
/* "none, relu, sigmoid, tanh": NAMES (NULL-terminated) joined. */
const char *config_join (const char *const *names, char *buf, size_t size);
/* model_type.c's part: the keys of a model's type (s_table's extra and elsewhere for the model
 * table), and the values of a dense layer's "activation" (activation_t's names, NULL-terminated). */
int model_type_config_keys (parser_t *p, const cJSON *obj, const table_t **extra);
int model_type_config_elsewhere (parser_t *p, const cJSON *obj, const char *key);
extern const char *const config_activation_names[];
extern const char *const config_split_names[];   /* "off", "auto", "on" (cpu_split_mode_t) */

/* Reads OBJ with table T into TARGET: unknown and repeated keys refused first, then every row in
 * table order (a derived default sees the rows above it). 0, or -1 with the parser's ERR. */
int config_walk_object (parser_t *p, const cJSON *obj, const table_t *t, char *target);

#endif
