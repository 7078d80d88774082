/* What both transports report about their connections (endpoint_impl.h): refused CURVE handshakes and
 * connections past max_connections, counted and logged at warn level at most once a second with the
 * counts since the last line. */
#include "front/endpoint_impl.h"

#include "base/log.h"

#include <string.h>

void endpoints_auth_failed (endpoints_t *self, const char *where, stats_auth_failure_t why, uint64_t now_ns)
{
    if (self->stats)
        stats_count_auth_failure (self->stats, why);
    self->auth_since_warn[why]++;
    if (now_ns - self->last_auth_warn < 1000000000ull)
        return;
    log_warn ("%s: CURVE handshakes refused since the last warning: %llu denied (a key not in "
              "server.curve.allowed_clients), %llu from plaintext clients, %llu with another server key, %llu "
              "protocol errors", where, (unsigned long long) self->auth_since_warn[AUTH_FAIL_DENIED],
              (unsigned long long) self->auth_since_warn[AUTH_FAIL_PLAINTEXT],
              (unsigned long long) self->auth_since_warn[AUTH_FAIL_WRONG_KEY],
              (unsigned long long) self->auth_since_warn[AUTH_FAIL_PROTOCOL]);
    memset (self->auth_since_warn, 0, sizeof self->auth_since_warn);
    self->last_auth_warn = now_ns;
}

void endpoints_limit_refused (endpoints_t *self, const char *where, const char *peer, uint64_t now_ns)
{
    self->refused_since_warn++;
    if (now_ns - self->last_limit_warn < 1000000000ull)
        return;
    log_warn ("%s: connection limit reached (server.max_connections = %u): closed a connection from %s; "
              "%llu refused since the last warning", where, self->cfg.max_connections, peer,
              (unsigned long long) self->refused_since_warn);
    self->last_limit_warn = now_ns;
    self->refused_since_warn = 0;
}
