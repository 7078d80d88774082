/* sigserve --watch: what a reload reads, watched for changes (the control thread looks about once a
 * second): the config file, and the weights file of each model of the config as last read, so that
 * new weights written over a model's file reload it as SIGHUP would (a reload takes over every model
 * whose configuration and weights file are unchanged: only that model loads anew). A file counts as
 * changed when its inode, size or modification time does (an editor's or exporter's rename over it
 * included); a file missing for a moment (being replaced) is not a change until it is back. */
#ifndef SIGSERVE_WATCH_H
#define SIGSERVE_WATCH_H

#include "base/config.h"
#include <stdbool.h>
#include <stddef.h>

typedef struct _watch_t watch_t;

/* Watches CONFIG_PATH (borrowed: it must outlive the watch). NULL when memory runs out. */
watch_t *watch_new (const char *config_path);
void watch_destroy (watch_t **self_p);
/* The config file as it is now: called as a reload reads it. */
void watch_config_read (watch_t *self);
/* The weights files of CFG's models as they are now, in place of those watched before: called with a
 * config as read (before its models load, so a file written during the load reloads again). */
void watch_weights_read (watch_t *self, const config_t *cfg);
/* Whether a watched file changed since it was read: true with WHY ("the file changed", "the weights
 * file of model \"tick_mlp\" changed"). */
bool watch_changed (watch_t *self, char *why, size_t whylen);

#endif
