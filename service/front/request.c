#include "front/request.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

char *request_quote (const char *s, size_t max_bytes, char *buf, size_t len)
{
    size_t n = 0;
    if (len < 8) {
        if (len)
            buf[0] = '\0';
        return buf;
    }
    buf[n++] = '"';
    size_t i = 0;
    for (; s[i] && i < max_bytes && n + 9 < len; i++) {
        unsigned char c = (unsigned char) s[i];
        if (c == '"' || c == '\\') {
            buf[n++] = '\\';
            buf[n++] = (char) c;
        } else if (c < 0x20 || c >= 0x7f)
            n += (size_t) snprintf (buf + n, len - n, "\\x%02x", c);
        else
            buf[n++] = (char) c;
    }
    if (s[i]) {
        memcpy (buf + n, "...", 3);
        n += 3;
    }
    buf[n++] = '"';
    buf[n] = '\0';
    return buf;
}

sig_status_t request_check_infer (model_registry_t *models, const Sigserve__V1__InferRequest *req, model_t **model_p,
                                  uint32_t *rows_p, char *err, size_t errlen)
{
    *model_p = NULL;
    model_t *m = model_registry_find (models, req->model);
    if (!m) {
        char q[300];
        snprintf (err, errlen, "model: %s is not served here (served: %s)", request_quote (req->model, 64, q, sizeof q),
                  model_registry_names (models));
        return SIG_UNKNOWN_MODEL;
    }
    *model_p = m;
    uint32_t rows = req->rows ? req->rows : 1;
    uint32_t in = model_input_size (m);
    if (req->stream_id && !model_keeps_streams (m)) {
        snprintf (err, errlen, "stream_id: model \"%s\" is of type %s, which keeps no streams; send stream_id 0",
                  model_name (m), model_type_name (model_type (m)));
        return SIG_BAD_SHAPE;
    }
    if (req->stream_id) {
        uint32_t step = model_step_size (m);
        if (rows != 1) {
            snprintf (err, errlen, "rows: a streaming request (stream_id %llu) carries one step of model \"%s\": "
                      "expected 1, got %u", (unsigned long long) req->stream_id, model_name (m), rows);
            return SIG_BAD_SHAPE;
        }
        if (req->n_features != step) {
            snprintf (err, errlen, "features: expected one step of %u values for model \"%s\" (stream_id %llu), got "
                      "%zu; a whole window of %u x %u goes with stream_id 0", step, model_name (m),
                      (unsigned long long) req->stream_id, req->n_features, model_window (m), step);
            return SIG_BAD_SHAPE;
        }
        in = step;
    }
    if (rows > model_max_rows (m)) {
        snprintf (err, errlen, "rows: expected 1 to %u for model \"%s\", got %u", model_max_rows (m), model_name (m), rows);
        return SIG_BAD_SHAPE;
    }
    if (req->n_features % rows != 0) {
        snprintf (err, errlen, "features: %zu values do not divide into rows=%u rows of %u "
                  "(model \"%s\" takes %u features per row)", req->n_features, rows, in, model_name (m), in);
        return SIG_BAD_SHAPE;
    }
    if (req->n_features != (size_t) rows * in && model_type_can (model_type (m), MODEL_CAP_WINDOW)) {
        snprintf (err, errlen, "features: expected rows x window x step size = %u x %u x %u = %zu values for model "
                  "\"%s\" (whole windows; one step goes with a stream_id), got %zu", rows, model_window (m),
                  model_step_size (m), (size_t) rows * in, model_name (m), req->n_features);
        return SIG_BAD_SHAPE;
    }
    if (req->n_features != (size_t) rows * in) {
        snprintf (err, errlen, "features: expected rows x input size = %u x %u = %zu values for model "
                  "\"%s\", got %zu", rows, in, (size_t) rows * in, model_name (m), req->n_features);
        return SIG_BAD_SHAPE;
    }
    for (size_t i = 0; i < req->n_features; i++)
        if (!isfinite (req->features[i])) {
            snprintf (err, errlen, "features[%zu] (row %zu, column %zu) is %s; every feature must be finite",
                      i, i / in, i % in, isnan (req->features[i]) ? "NaN" : "Inf");
            return SIG_BAD_VALUE;
        }
    if (!model_serving (m)) {
        snprintf (err, errlen, "model \"%s\" is unavailable on backend %s: no instance of it can run%s", model_name (m),
                  model_backend_name (m), model_fallback (m, &(uint32_t) { 0 }, &(uint64_t) { 0 }, &(bool) { false })
                                          ? ", nor its CPU fallback" : " and it has no fallback");
        return SIG_UNAVAILABLE;
    }
    *rows_p = rows;
    return SIG_OK;
}
