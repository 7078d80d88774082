/* --watch (watch.h): a stat of each watched file, compared with the one taken when it was read. */
#include "ops/watch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    char path[CONFIG_PATH_MAX];
    char model[CONFIG_NAME_MAX];    /* the first model that loads it */
    bool present;                   /* it could be stat'ed when read */
    struct stat st;
} watched_t;

struct _watch_t {
    const char *config_path;
    watched_t config;
    size_t count;
    watched_t weights[CONFIG_MAX_MODELS];
};

static void s_read (watched_t *w)
{
    w->present = stat (w->path, &w->st) == 0;
}

static bool s_changed (const watched_t *w)
{
    struct stat now;
    if (stat (w->path, &now) != 0)
        return false;       /* being replaced: a change once it is back */
    return !w->present || now.st_dev != w->st.st_dev || now.st_ino != w->st.st_ino || now.st_size != w->st.st_size
           || now.st_mtim.tv_sec != w->st.st_mtim.tv_sec || now.st_mtim.tv_nsec != w->st.st_mtim.tv_nsec;
}

watch_t *watch_new (const char *config_path)
{
    watch_t *self = calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->config_path = config_path;
    snprintf (self->config.path, sizeof self->config.path, "%s", config_path);
    return self;
}

void watch_destroy (watch_t **self_p)
{
    if (self_p && *self_p) {
        free (*self_p);
        *self_p = NULL;
    }
}

void watch_config_read (watch_t *self) { s_read (&self->config); }

void watch_weights_read (watch_t *self, const config_t *cfg)
{
    self->count = 0;
    for (size_t i = 0; i < cfg->model_count; i++) {
        size_t k = 0;
        while (k < self->count && strcmp (self->weights[k].path, cfg->models[i].weights) != 0)
            k++;
        if (k < self->count)
            continue;       /* shared with a model before it */
        watched_t *w = &self->weights[self->count++];
        snprintf (w->path, sizeof w->path, "%s", cfg->models[i].weights);
        snprintf (w->model, sizeof w->model, "%s", cfg->models[i].name);
        s_read (w);
    }
}

bool watch_changed (watch_t *self, char *why, size_t whylen)
{
    if (s_changed (&self->config)) {
        snprintf (why, whylen, "the file changed");
        return true;
    }
    for (size_t k = 0; k < self->count; k++)
        if (s_changed (&self->weights[k])) {
            snprintf (why, whylen, "the weights file of model \"%s\" changed", self->weights[k].model);
            return true;
        }
    return false;
}
