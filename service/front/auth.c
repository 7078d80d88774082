/* CURVE with czmq (auth.h). */
#define _GNU_SOURCE
#include "front/auth.h"

#include "base/log.h"

#include "zmtp_curve.h"

#include <czmq.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ZAP_DOMAIN "sigserve"
/* Draft in libzmq 4.3's header (ZMQ_BUILD_DRAFT_API), honoured by the library all the same. */
#ifndef ZMQ_ZAP_ENFORCE_DOMAIN
#define ZMQ_ZAP_ENFORCE_DOMAIN 93
#endif
#define PROVE_TIMEOUT_MS 5000

struct _auth_t {
    zactor_t *zauth;                /* the ZAP handler (the libzmq transport) */
    zcertstore_t *store;            /* the allowlist (the zmtp transport), under LOCK */
    pthread_mutex_t lock;
    zcert_t *cert;
    char folder[CONFIG_PATH_MAX];
};

/* zcert reads the file given, and first FILE_secret when there is one: both the public and the
 * secret certificate's path work. The certificate must hold a secret key. */
static zcert_t *s_load_cert (const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (stat (path, &st) != 0) {
        snprintf (err, errlen, "server.curve.secret_key_file: %s: %s", path, strerror (errno));
        return NULL;
    }
    if (!S_ISREG (st.st_mode)) {
        snprintf (err, errlen, "server.curve.secret_key_file: %s: not a regular file", path);
        return NULL;
    }
    /* zcert reads PATH_secret where there is one, else PATH: the one it reads must be readable by this
     * user (else zcert_load fails as if the file were no certificate) */
    char secret[CONFIG_PATH_MAX + 8];
    snprintf (secret, sizeof secret, "%s_secret", path);
    const char *file = access (secret, F_OK) == 0 ? secret : path;
    if (access (file, R_OK) != 0) {
        snprintf (err, errlen, "server.curve.secret_key_file: %s: %s (the server's user must read it)", file,
                  strerror (errno));
        return NULL;
    }
    zcert_t *cert = zcert_load (path);
    if (!cert) {
        snprintf (err, errlen, "server.curve.secret_key_file: %s: cannot be read as a czmq certificate (make one "
                  "with sigserve --keygen PATH and give PATH_secret)", path);
        return NULL;
    }
    static const char zero[] = "0000000000000000000000000000000000000000";
    if (strcmp (zcert_secret_txt (cert), zero) == 0) {
        snprintf (err, errlen, "server.curve.secret_key_file: %s holds no secret key (a public certificate); give the "
                  "_secret file sigserve --keygen wrote", path);
        zcert_destroy (&cert);
        return NULL;
    }
    return cert;
}

static int s_check_folder (const char *folder, char *err, size_t errlen)
{
    struct stat st;
    if (stat (folder, &st) != 0) {
        snprintf (err, errlen, "server.curve.allowed_clients: %s: %s", folder, strerror (errno));
        return -1;
    }
    if (!S_ISDIR (st.st_mode)) {
        snprintf (err, errlen, "server.curve.allowed_clients: %s: not a folder (expected a folder of client "
                  "certificates)", folder);
        return -1;
    }
    /* unreadable, czmq would find no certificate in it and every client would be refused */
    if (access (folder, R_OK | X_OK) != 0) {
        snprintf (err, errlen, "server.curve.allowed_clients: %s: %s (the server's user must read it)", folder,
                  strerror (errno));
        return -1;
    }
    return 0;
}

int auth_check (const curve_config_t *curve, bool zap, char *err, size_t errlen)
{
    if (zap && !zsys_has_curve ()) {
        snprintf (err, errlen, "server.curve: this libzmq was built without CURVE support");
        return -1;
    }
    zcert_t *cert = s_load_cert (curve->secret_key_file, err, errlen);
    if (!cert)
        return -1;
    zcert_destroy (&cert);
    return s_check_folder (curve->allowed_clients, err, errlen);
}

auth_t *auth_new (const curve_config_t *curve, uint32_t io_threads, bool zap, char *err, size_t errlen)
{
    if (zap && !zsys_has_curve ()) {
        snprintf (err, errlen, "server.curve: this libzmq was built without CURVE support");
        return NULL;
    }
    auth_t *self = calloc (1, sizeof *self);
    if (!self) {
        snprintf (err, errlen, "out of memory");
        return NULL;
    }
    if (!(self->cert = s_load_cert (curve->secret_key_file, err, errlen))
        || s_check_folder (curve->allowed_clients, err, errlen) != 0) {
        auth_destroy (&self);
        return NULL;
    }
    snprintf (self->folder, sizeof self->folder, "%s", curve->allowed_clients);
    pthread_mutex_init (&self->lock, NULL);
    if (!zap) {
        self->store = zcertstore_new (self->folder);
        if (!self->store) {
            snprintf (err, errlen, "server.curve.allowed_clients: %s: cannot be read as a folder of certificates",
                      self->folder);
            auth_destroy (&self);
            return NULL;
        }
        log_info ("CURVE on: server key %s, clients allowed from %s", zcert_public_txt (self->cert), self->folder);
        return self;
    }
    /* czmq must not take over SIGINT/SIGTERM (the control thread handles them) */
    zsys_handler_set (NULL);
    zsys_set_io_threads (io_threads);
    if (!zsys_init ()) {
        snprintf (err, errlen, "server.curve: czmq could not start its ZeroMQ context");
        auth_destroy (&self);
        return NULL;
    }
    self->zauth = zactor_new (zauth, NULL);
    if (!self->zauth || zstr_sendx (self->zauth, "CURVE", self->folder, NULL) != 0 || zsock_wait (self->zauth) != 0) {
        snprintf (err, errlen, "server.curve: the ZAP handler (czmq zauth) did not start");
        auth_destroy (&self);
        return NULL;
    }
    log_info ("CURVE on: server key %s, clients allowed from %s", zcert_public_txt (self->cert), self->folder);
    return self;
}

void auth_destroy (auth_t **self_p)
{
    if (self_p && *self_p) {
        zactor_destroy (&(*self_p)->zauth);
        zcertstore_destroy (&(*self_p)->store);
        zcert_destroy (&(*self_p)->cert);
        free (*self_p);
        *self_p = NULL;
    }
}

void *auth_context (auth_t *self)
{
    (void) self;
    return zsys_init ();
}

const char *auth_public_key (const auth_t *self) { return zcert_public_txt (self->cert); }

void auth_keypair (const auth_t *self, uint8_t *public_key, uint8_t *secret_key)
{
    memcpy (public_key, zcert_public_key (self->cert), 32);
    memcpy (secret_key, zcert_secret_key (self->cert), 32);
}

bool auth_allows (auth_t *self, const uint8_t *key)
{
    char text[41];
    if (!self->store || zmtp_z85_encode (key, text) != 0)
        return false;
    pthread_mutex_lock (&self->lock);
    bool ok = zcertstore_lookup (self->store, text) != NULL;   /* re-reads the folder when it changed */
    pthread_mutex_unlock (&self->lock);
    return ok;
}

int auth_apply (auth_t *self, void *socket, char *err, size_t errlen)
{
    int one = 1;
    const char *domain = ZAP_DOMAIN;
    if (zmq_setsockopt (socket, ZMQ_CURVE_SERVER, &one, sizeof one) != 0
        || zmq_setsockopt (socket, ZMQ_CURVE_SECRETKEY, zcert_secret_key (self->cert), 32) != 0
        || zmq_setsockopt (socket, ZMQ_ZAP_DOMAIN, domain, strlen (domain)) != 0
        || zmq_setsockopt (socket, ZMQ_ZAP_ENFORCE_DOMAIN, &one, sizeof one) != 0) {
        snprintf (err, errlen, "server.curve: cannot set CURVE on a socket: %s", zmq_strerror (zmq_errno ()));
        return -1;
    }
    return 0;
}

int auth_prove (auth_t *self, const char *endpoint, char *err, size_t errlen)
{
    void *ctx = zsys_init ();
    char pub[41], sec[41], monitor[64];
    zmq_curve_keypair (pub, sec);
    static int count;
    snprintf (monitor, sizeof monitor, "inproc://sigserve-auth-prove-%d", count++);
    void *client = zmq_socket (ctx, ZMQ_DEALER);
    void *events = zmq_socket (ctx, ZMQ_PAIR);
    int linger = 0, timeout = PROVE_TIMEOUT_MS, rc = -1;
    zmq_setsockopt (client, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt (client, ZMQ_CURVE_SERVERKEY, zcert_public_txt (self->cert), 40);
    zmq_setsockopt (client, ZMQ_CURVE_PUBLICKEY, pub, 40);
    zmq_setsockopt (client, ZMQ_CURVE_SECRETKEY, sec, 40);
    zmq_setsockopt (events, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    zmq_setsockopt (events, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_socket_monitor (client, monitor, ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH
                                                 | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
                                                 | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) != 0
        || zmq_connect (events, monitor) != 0 || zmq_connect (client, endpoint) != 0) {
        snprintf (err, errlen, "server.curve: cannot test %s with an unknown key: %s", endpoint, zmq_strerror (zmq_errno ()));
    } else {
        /* One event: a 16-bit number and a 32-bit value, then the endpoint. */
        zmq_msg_t msg;
        zmq_msg_init (&msg);
        int n = zmq_msg_recv (&msg, events, 0);
        uint16_t event = 0;
        if (n >= 2)
            memcpy (&event, zmq_msg_data (&msg), 2);
        while (zmq_msg_more (&msg))
            zmq_msg_recv (&msg, events, 0);
        zmq_msg_close (&msg);
        if (n < 0)
            snprintf (err, errlen, "server.curve: a client with an unknown key got no answer from %s within %d ms; "
                      "cannot show that unknown keys are refused", endpoint, PROVE_TIMEOUT_MS);
        else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
            log_info ("CURVE on %s: a client with an unknown key was refused, as it must be", endpoint);
            rc = 0;
        } else if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED)
            snprintf (err, errlen, "server.curve: %s accepted a client with an unknown key: authentication is not "
                      "enforced (no ZAP handler answered); refusing to serve", endpoint);
        else
            snprintf (err, errlen, "server.curve: the handshake of a client with an unknown key on %s failed for "
                      "another reason (event 0x%x); cannot show that unknown keys are refused", endpoint, event);
    }
    zmq_socket_monitor (client, NULL, 0);
    zmq_close (events);
    zmq_close (client);
    return rc;
}

int auth_reload (auth_t *self, const curve_config_t *curve, char *err, size_t errlen)
{
    if (s_check_folder (curve->allowed_clients, err, errlen) != 0)
        return -1;
    snprintf (self->folder, sizeof self->folder, "%s", curve->allowed_clients);
    if (self->store) {
        zcertstore_t *store = zcertstore_new (self->folder);
        if (!store) {
            snprintf (err, errlen, "server.curve.allowed_clients: %s: cannot be read as a folder of certificates",
                      self->folder);
            return -1;
        }
        pthread_mutex_lock (&self->lock);
        zcertstore_destroy (&self->store);
        self->store = store;
        pthread_mutex_unlock (&self->lock);
    } else if (zstr_sendx (self->zauth, "CURVE", self->folder, NULL) != 0 || zsock_wait (self->zauth) != 0) {
        snprintf (err, errlen, "server.curve: the ZAP handler did not take the folder %s", self->folder);
        return -1;
    }
    log_info ("CURVE: clients allowed from %s (re-read)", self->folder);
    return 0;
}

int auth_keygen (const char *path, char *err, size_t errlen)
{
    zcert_t *cert = zcert_new ();
    if (!cert) {
        snprintf (err, errlen, "cannot make a certificate: out of memory");
        return -1;
    }
    char when[64], host[256] = "";
    time_t now = time (NULL);
    struct tm tm;
    strftime (when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r (&now, &tm));
    gethostname (host, sizeof host - 1);
    zcert_set_meta (cert, "created-by", "sigserve %s --keygen", SIGSERVE_VERSION);
    zcert_set_meta (cert, "created", "%s", when);
    zcert_set_meta (cert, "host", "%s", host);
    mode_t old = umask (077);   /* the secret file is readable by its owner alone */
    int rc = zcert_save (cert, path);
    umask (old);
    if (rc != 0)
        snprintf (err, errlen, "cannot write %s and %s_secret: %s", path, path, strerror (errno));
    else {
        char secret[CONFIG_PATH_MAX + 8];
        snprintf (secret, sizeof secret, "%s_secret", path);
        chmod (path, 0644);     /* the public one is meant to be handed out */
        chmod (secret, 0600);
        printf ("wrote %s (public key %s) and %s (keep it secret)\n", path, zcert_public_txt (cert), secret);
    }
    zcert_destroy (&cert);
    return rc == 0 ? 0 : -1;
}
