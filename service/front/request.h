/* What the server does with one decoded request, apart from sockets: checking an infer request
 * against the served models (the error texts clients see), and the text-safety rule for
 * echoing client bytes. Separate from the front's socket loop so it can be tested without ZeroMQ. */
#ifndef SIGSERVE_REQUEST_H
#define SIGSERVE_REQUEST_H

#include "serving/registry.h"
#include "signal.pb-c.h"
#include "base/status.h"

/* Finds REQ's model in MODELS and checks rows, the feature count and every value. SIG_OK with
 * *MODEL_P and *ROWS_P (rows 0 means 1), or UNKNOWN_MODEL / BAD_SHAPE / BAD_VALUE /
 * UNAVAILABLE with the message in ERR naming the field, the expected and the received values
 * (*MODEL_P is still set when the model was found, for the reply's model_version). */
sig_status_t request_check_infer (model_registry_t *models, const Sigserve__V1__InferRequest *req, model_t **model_p,
                                  uint32_t *rows_p, char *err, size_t errlen);

/* Writes S in double quotes into BUF: printable ASCII as is, quotes and backslashes escaped, any
 * other byte as \xNN, cut after MAX_BYTES input bytes with "...". The result is plain ASCII, so an
 * error text that echoes client bytes is always valid UTF-8 for strict decoders. Returns BUF. */
char *request_quote (const char *s, size_t max_bytes, char *buf, size_t len);

#endif
