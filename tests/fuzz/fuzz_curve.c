/* libFuzzer target: the server side of CURVE (transport/zmtp_curve.c) with fixed keys, fed the
 * commands an input describes, then MESSAGEs once the handshake is over. Nothing may crash or
 * leak, and what the module answers must be consistent with what it was given (s_check aborts).
 *
 * Input: byte 0 is the mode.
 *   bit 0  0 raw: the commands are the input's own; 1 client: a real client writes them
 *   bit 1  the server's authorizer refuses every client
 *   bit 2  client mode: the client holds another server's key
 *   bit 3  client mode: the first MESSAGE is delivered twice (the second must be refused)
 * Raw mode, then chunks (a 2-byte big-endian length, that many bytes, cut at the input's end): the
 * server's handshake commands until it is READY, MESSAGE bodies to zmtp_curve_open after.
 * Client mode, then 4 bytes: which command to alter (0 HELLO, 1 WELCOME, 2 INITIATE, 3 READY, 4 + k
 * the client's k-th MESSAGE; others none), where (2 bytes, modulo its length) and how (a byte to
 * XOR there; 0 cuts the command at that point instead); then chunks, frames the client seals (the
 * first byte's low bits are the flags), the server opens and seals back, and the client opens.
 *
 * libsodium's randombytes is replaced by two seeded streams, the server's and the client's, each
 * restarted for every input: the server draws the same bytes for the same commands in either mode,
 * so a transcript a real client wrote is valid again in raw mode, and the fuzzer mutates from deep
 * inside the handshake. The seeds in tests/fuzz/corpus/curve are such transcripts, written by this
 * file built with -DFUZZ_CURVE_SEEDS (see the end). */
#include "zmtp_curve.h"
#include "zmtp_wire.h"

#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_MAX_INPUT 8192
#define FUZZ_MAX_CHUNKS 64

static void s_check (int ok)
{
    if (!ok)
        abort ();
}

/* ---- deterministic randomness --------------------------------------------------------------- */

static uint64_t s_server_rng, s_client_rng, *s_rng = &s_server_rng;

static uint64_t s_next (uint64_t *state)     /* splitmix64 */
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void s_rng_buf (void *const buf, const size_t size)
{
    uint8_t *p = buf;
    uint64_t v = 0;
    for (size_t i = 0; i < size; i++) {
        if (i % 8 == 0)
            v = s_next (s_rng);
        p[i] = (uint8_t) (v >> (8 * (i % 8)));
    }
}

static uint32_t s_rng_random (void)
{
    return (uint32_t) s_next (s_rng);
}

static const char *s_rng_name (void)
{
    return "fuzz_curve";
}

static randombytes_implementation s_rng_impl = {
    .implementation_name = s_rng_name, .random = s_rng_random, .buf = s_rng_buf,
};

#define AS_SERVER (s_rng = &s_server_rng)
#define AS_CLIENT (s_rng = &s_client_rng)

/* ---- fixed keys and metadata ---------------------------------------------------------------- */

static zmtp_keypair_t s_server_keys, s_client_keys, s_other_keys;
static uint8_t s_server_md[64], s_client_md[64];
static size_t s_server_md_len, s_client_md_len;

static void s_setup (void)
{
    static int done;
    if (done)
        return;
    /* Before sodium_init, which draws its own canary from whatever randombytes is set. */
    randombytes_set_implementation (&s_rng_impl);
    s_check (sodium_init () >= 0);
    uint8_t seed[crypto_box_SEEDBYTES];
    memset (seed, 's', sizeof seed);
    s_check (crypto_box_seed_keypair (s_server_keys.public_key, s_server_keys.secret_key, seed) == 0);
    memset (seed, 'c', sizeof seed);
    s_check (crypto_box_seed_keypair (s_client_keys.public_key, s_client_keys.secret_key, seed) == 0);
    memset (seed, 'o', sizeof seed);
    s_check (crypto_box_seed_keypair (s_other_keys.public_key, s_other_keys.secret_key, seed) == 0);
    s_check (zmtp_property_write (s_server_md, sizeof s_server_md, &s_server_md_len, "Socket-Type", "ROUTER", 6) == 0);
    s_check (zmtp_property_write (s_client_md, sizeof s_client_md, &s_client_md_len, "Socket-Type", "DEALER", 6) == 0);
    s_check (zmtp_property_write (s_client_md, sizeof s_client_md, &s_client_md_len, "Identity", "", 0) == 0);
    done = 1;
}

static void s_reset_rng (void)
{
    s_server_rng = 0x5345525645520001ULL;
    s_client_rng = 0x434c49454e540001ULL;
}

static bool s_authorize (const uint8_t key[ZMTP_CURVE_KEY_BYTES], void *arg)
{
    volatile uint8_t touch = key[0] ^ key[ZMTP_CURVE_KEY_BYTES - 1];      /* all 32 bytes are there */
    (void) touch;
    return !*(bool *) arg;
}

/* ---- shared checks -------------------------------------------------------------------------- */

static uint8_t s_in[FUZZ_MAX_INPUT + 64], s_out[FUZZ_MAX_INPUT + 64], s_back[FUZZ_MAX_INPUT + 64];

/* What a server step answered is what it was made to answer. */
static void s_check_server_step (zmtp_curve_t *server, zmtp_curve_step_t st, size_t out_len, zmtp_curve_fail_t why)
{
    s_check (out_len <= ZMTP_CURVE_COMMAND_MAX);
    if (st == ZMTP_CURVE_CONTINUE) {
        s_check (why == ZMTP_CURVE_OK && out_len == 168 && memcmp (s_out, "\x07WELCOME", 8) == 0);
    } else if (st == ZMTP_CURVE_READY) {
        s_check (why == ZMTP_CURVE_OK && out_len == 30 + s_server_md_len && memcmp (s_out, "\x05READY", 6) == 0);
        s_check (zmtp_curve_client_key (server) != NULL);
        size_t md_len;
        const uint8_t *md = zmtp_curve_peer_metadata (server, &md_len);
        s_check (md != NULL && md_len <= ZMTP_CURVE_METADATA_MAX);
        volatile uint8_t sum = 0;
        for (size_t i = 0; i < md_len; i++)
            sum ^= md[i];
        (void) sum;
    } else {
        s_check (st == ZMTP_CURVE_ERROR && why != ZMTP_CURVE_OK);
        s_check (zmtp_curve_client_key (server) == NULL);
        if (why == ZMTP_CURVE_FAIL_DENIED)
            s_check (out_len == 10 && memcmp (s_out, "\x05" "ERROR\x03" "400", 10) == 0);
        else
            s_check (out_len == 0);
    }
}

/* Opens BODY (LEN bytes, in place) on TO; on success seals the frame back on TO into s_back. */
static int s_open (zmtp_curve_t *to, uint8_t *body, size_t len, uint8_t *flags, uint8_t **data, size_t *data_len)
{
    zmtp_curve_fail_t why = ZMTP_CURVE_OK;
    int rc = zmtp_curve_open (to, body, len, flags, data, data_len, &why);
    if (rc != 0) {
        s_check (rc == -1 && why != ZMTP_CURVE_OK);
        return -1;
    }
    s_check (why == ZMTP_CURVE_OK && *data == body + 17 && *data_len == len - ZMTP_CURVE_OVERHEAD);
    s_check ((*flags & ~(ZMTP_CURVE_MSG_MORE | ZMTP_CURVE_MSG_COMMAND)) == 0);
    return 0;
}

/* The next chunk of the input: its bytes and length; false when none is left. */
static bool s_chunk (const uint8_t *data, size_t size, size_t *at, const uint8_t **chunk, size_t *len)
{
    if (*at >= size)
        return false;
    size_t n = size - *at;
    if (n >= 2) {
        size_t want = zmtp_get_u16 (data + *at);
        *at += 2;
        n = want < size - *at ? want : size - *at;
    }
    *chunk = data + *at;
    *len = n;
    *at += n;
    return true;
}

/* ---- raw mode ------------------------------------------------------------------------------- */

/* How far the last raw input went: the seed writer checks its transcripts replay to the end. */
static bool s_raw_ready;
static unsigned s_raw_opened;

static void s_raw (zmtp_curve_t *server, const uint8_t *data, size_t size)
{
    s_raw_ready = false;
    s_raw_opened = 0;
    size_t at = 1, len, out_len;
    const uint8_t *chunk;
    bool ready = false;
    for (int n = 0; n < FUZZ_MAX_CHUNKS && s_chunk (data, size, &at, &chunk, &len); n++) {
        memcpy (s_in, chunk, len);
        if (!ready) {
            zmtp_curve_fail_t why = ZMTP_CURVE_OK;
            AS_SERVER;
            zmtp_curve_step_t st = zmtp_curve_step (server, s_in, len, s_out, ZMTP_CURVE_COMMAND_MAX, &out_len, &why);
            s_check_server_step (server, st, out_len, why);
            if (st == ZMTP_CURVE_ERROR)
                return;
            ready = s_raw_ready = st == ZMTP_CURVE_READY;
            continue;
        }
        uint8_t flags, *frame;
        size_t frame_len;
        if (s_open (server, s_in, len, &flags, &frame, &frame_len) != 0)
            return;
        s_check (zmtp_curve_seal (server, flags, frame, frame_len, s_back) == frame_len + ZMTP_CURVE_OVERHEAD);
        s_raw_opened++;
    }
}

/* ---- client mode ---------------------------------------------------------------------------- */

typedef struct {
    unsigned target;                /* the command to alter: 0 HELLO ... 4 + k the k-th MESSAGE */
    size_t where;                   /* the offset, modulo the command's length */
    uint8_t how;                    /* XOR with it; 0 cuts the command there */
} alter_t;

/* Alters command number INDEX (BODY, *LEN bytes) when it is the target: whether it changed, and
 * whether the change falls where HELLO does not authenticate it: its padding, never read, or only
 * the top bit of the last byte of C', which X25519 ignores (RFC 7748, 5): HELLO then passes, and it is
 * INITIATE that fails, its vouch naming the C' the client sent (*KEY_BIT). */
static bool s_alter (const alter_t *a, unsigned index, uint8_t *body, size_t *len, bool *unauthenticated,
                     bool *key_bit)
{
    *unauthenticated = *key_bit = false;
    if (a->target != index || *len == 0)
        return false;
    if (a->how == 0) {
        size_t cut = a->where % (*len + 1);
        bool changed = cut != *len;
        *len = cut;
        return changed;
    }
    size_t at = a->where % *len;
    body[at] ^= a->how;
    *key_bit = index == 0 && at == 111 && (a->how & 0x7f) == 0;
    *unauthenticated = (index == 0 && at >= 8 && at < 80) || *key_bit;
    return true;
}

static void s_client_mode (zmtp_curve_t *server, bool denied, const uint8_t *data, size_t size)
{
    if (size < 5)
        return;
    bool wrong_key = data[0] & 0x04, replay = data[0] & 0x08;
    alter_t a = { .target = data[1], .where = zmtp_get_u16 (data + 2), .how = data[4] };
    AS_CLIENT;
    zmtp_curve_t *client = zmtp_curve_new_client (&s_client_keys, wrong_key ? s_other_keys.public_key
                                                                             : s_server_keys.public_key,
                                                  s_client_md, s_client_md_len);
    s_check (client != NULL);
    size_t len, out_len;
    zmtp_curve_fail_t why;
    zmtp_curve_step_t st;
    bool altered, free_bytes, key_bit = false, hello_key_bit;

    /* HELLO, WELCOME, INITIATE, READY: an altered command must fail where it lands, except in
     * HELLO's padding; an unaltered one must pass unless the key is wrong or the client refused. */
    len = zmtp_curve_start (client, s_in, sizeof s_in);
    s_check (len == 200);
    altered = s_alter (&a, 0, s_in, &len, &free_bytes, &hello_key_bit);
    AS_SERVER;
    st = zmtp_curve_step (server, s_in, len, s_out, ZMTP_CURVE_COMMAND_MAX, &out_len, &why);
    s_check_server_step (server, st, out_len, why);
    if (wrong_key && (!altered || free_bytes))
        s_check (st == ZMTP_CURVE_ERROR && why == ZMTP_CURVE_FAIL_CRYPTO);
    else if (altered && !free_bytes)
        s_check (st == ZMTP_CURVE_ERROR);
    else
        s_check (st == ZMTP_CURVE_CONTINUE);   /* libzmq does not look at the padding either */
    if (st != ZMTP_CURVE_CONTINUE)
        goto done;

    len = out_len;
    memcpy (s_in, s_out, len);
    altered = s_alter (&a, 1, s_in, &len, &free_bytes, &key_bit);
    AS_CLIENT;
    st = zmtp_curve_step (client, s_in, len, s_out, ZMTP_CURVE_COMMAND_MAX, &out_len, &why);
    s_check (altered ? st == ZMTP_CURVE_ERROR && out_len == 0 : st == ZMTP_CURVE_CONTINUE);
    if (st != ZMTP_CURVE_CONTINUE)
        goto done;

    len = out_len;
    memcpy (s_in, s_out, len);
    altered = s_alter (&a, 2, s_in, &len, &free_bytes, &key_bit);
    AS_SERVER;
    st = zmtp_curve_step (server, s_in, len, s_out, ZMTP_CURVE_COMMAND_MAX, &out_len, &why);
    s_check_server_step (server, st, out_len, why);
    if (altered || hello_key_bit)
        s_check (st == ZMTP_CURVE_ERROR && why != ZMTP_CURVE_FAIL_DENIED);
    else
        s_check (denied ? st == ZMTP_CURVE_ERROR && why == ZMTP_CURVE_FAIL_DENIED : st == ZMTP_CURVE_READY);
    if (st == ZMTP_CURVE_ERROR && why != ZMTP_CURVE_FAIL_DENIED)
        goto done;

    /* READY to the client, or the server's ERROR, which the client must take as DENIED. */
    len = out_len;
    memcpy (s_in, s_out, len);
    altered = s_alter (&a, 3, s_in, &len, &free_bytes, &key_bit);
    AS_CLIENT;
    zmtp_curve_step_t cst = zmtp_curve_step (client, s_in, len, s_out, ZMTP_CURVE_COMMAND_MAX, &out_len, &why);
    s_check (out_len == 0);
    if (altered)
        s_check (cst == ZMTP_CURVE_ERROR);
    else if (st == ZMTP_CURVE_ERROR)
        s_check (cst == ZMTP_CURVE_ERROR && why == ZMTP_CURVE_FAIL_DENIED);
    else
        s_check (cst == ZMTP_CURVE_READY);
    if (cst != ZMTP_CURVE_READY || st != ZMTP_CURVE_READY)
        goto done;

    /* Frames both ways. */
    size_t at = 5;
    const uint8_t *chunk;
    for (unsigned k = 0; k < FUZZ_MAX_CHUNKS && s_chunk (data, size, &at, &chunk, &len); k++) {
        uint8_t flags = len ? chunk[0] & (ZMTP_CURVE_MSG_MORE | ZMTP_CURVE_MSG_COMMAND) : 0, *frame;
        const uint8_t *payload = len ? chunk + 1 : chunk;
        size_t payload_len = len ? len - 1 : 0, frame_len;
        size_t n = zmtp_curve_seal (client, flags, payload, payload_len, s_in);
        s_check (n == payload_len + ZMTP_CURVE_OVERHEAD);
        memcpy (s_back, s_in, n);
        size_t sent = n;
        altered = s_alter (&a, 4 + k, s_in, &n, &free_bytes, &key_bit);
        int rc = s_open (server, s_in, n, &flags, &frame, &frame_len);
        if (altered) {
            s_check (rc == -1);         /* every byte of a MESSAGE is authenticated */
            break;
        }
        s_check (rc == 0 && frame_len == payload_len
                 && (payload_len == 0 || memcmp (frame, payload, payload_len) == 0));
        if (replay) {
            uint8_t *again;
            size_t again_len;
            s_check (s_open (server, s_back, sent, &flags, &again, &again_len) == -1);
            break;
        }
        n = zmtp_curve_seal (server, flags, frame, frame_len, s_out);
        s_check (n == payload_len + ZMTP_CURVE_OVERHEAD);
        uint8_t back_flags, *back;
        size_t back_len;
        s_check (s_open (client, s_out, n, &back_flags, &back, &back_len) == 0);
        s_check (back_flags == flags && back_len == payload_len
                 && (payload_len == 0 || memcmp (back, payload, payload_len) == 0));
    }
done:
    zmtp_curve_destroy (&client);
    s_check (client == NULL);
}

/* ---- the target ----------------------------------------------------------------------------- */

int LLVMFuzzerInitialize (int *argc, char ***argv);
int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int LLVMFuzzerInitialize (int *argc, char ***argv)
{
    (void) argc, (void) argv;
    s_setup ();
    return 0;
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    s_setup ();
    if (size < 1)
        return 0;
    if (size > FUZZ_MAX_INPUT)
        return -1;                      /* not added to the corpus */
    s_reset_rng ();
    bool denied = data[0] & 0x02;
    AS_SERVER;
    zmtp_curve_t *server = zmtp_curve_new_server (&s_server_keys, s_authorize, &denied, s_server_md, s_server_md_len);
    s_check (server != NULL);
    if (data[0] & 0x01)
        s_client_mode (server, denied, data, size);
    else
        s_raw (server, data, size);
    zmtp_curve_destroy (&server);
    s_check (server == NULL);
    return 0;
}

#ifdef FUZZ_CURVE_SEEDS
/* The seeds: clang -DFUZZ_CURVE_SEEDS -Itransport -Icommon tests/fuzz/fuzz_curve.c
 * transport/zmtp_curve.c transport/zmtp_wire.c -lsodium -o /tmp/curve_seeds && /tmp/curve_seeds
 * tests/fuzz/corpus/curve. Raw transcripts are recorded from a real client, with the streams as the
 * target restarts them, so the server draws the same WELCOME when they are replayed. */
static uint8_t s_seed[FUZZ_MAX_INPUT];
static size_t s_seed_len;

static void s_put (const uint8_t *body, size_t len)
{
    zmtp_put_u16 (s_seed + s_seed_len, (uint16_t) len);
    memcpy (s_seed + s_seed_len + 2, body, len);
    s_seed_len += 2 + len;
}

static void s_write (const char *dir, const char *name)
{
    char path[1024];
    snprintf (path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen (path, "wb");
    s_check (f && fwrite (s_seed, 1, s_seed_len, f) == s_seed_len && fclose (f) == 0);
    /* Each seed must pass the target's own checks. */
    s_check (LLVMFuzzerTestOneInput (s_seed, s_seed_len) == 0);
}

/* A raw transcript: MODE, HELLO, INITIATE, then MESSAGES frames (text, flags) from the client. */
static void s_transcript (uint8_t mode, const char *const *frames, const uint8_t *flags, size_t n)
{
    s_reset_rng ();
    s_seed[0] = mode;
    s_seed_len = 1;
    bool denied = mode & 0x02;
    AS_SERVER;
    zmtp_curve_t *server = zmtp_curve_new_server (&s_server_keys, s_authorize, &denied, s_server_md, s_server_md_len);
    AS_CLIENT;
    zmtp_curve_t *client = zmtp_curve_new_client (&s_client_keys, s_server_keys.public_key, s_client_md,
                                                  s_client_md_len);
    size_t len = zmtp_curve_start (client, s_in, sizeof s_in), out_len;
    zmtp_curve_fail_t why;
    s_put (s_in, len);
    AS_SERVER;
    s_check (zmtp_curve_step (server, s_in, len, s_out, ZMTP_CURVE_COMMAND_MAX, &out_len, &why) == ZMTP_CURVE_CONTINUE);
    AS_CLIENT;
    s_check (zmtp_curve_step (client, s_out, out_len, s_in, ZMTP_CURVE_COMMAND_MAX, &len, &why) == ZMTP_CURVE_CONTINUE);
    s_put (s_in, len);
    AS_SERVER;
    zmtp_curve_step_t st = zmtp_curve_step (server, s_in, len, s_out, ZMTP_CURVE_COMMAND_MAX, &out_len, &why);
    s_check (st == (denied ? ZMTP_CURVE_ERROR : ZMTP_CURVE_READY));
    AS_CLIENT;
    if (!denied)
        s_check (zmtp_curve_step (client, s_out, out_len, s_in, ZMTP_CURVE_COMMAND_MAX, &len, &why)
                 == ZMTP_CURVE_READY);
    for (size_t i = 0; i < n; i++) {
        len = zmtp_curve_seal (client, flags[i], (const uint8_t *) frames[i], strlen (frames[i]), s_in);
        s_put (s_in, len);
    }
    zmtp_curve_destroy (&server);
    zmtp_curve_destroy (&client);
}

int main (int argc, char **argv)
{
    if (argc != 2) {
        fprintf (stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    s_setup ();
    s_transcript (0x00, NULL, NULL, 0);
    s_write (argv[1], "raw-handshake");
    s_check (s_raw_ready && s_raw_opened == 0);
    const char *frames[] = { "hello", "first of two", "second of two" };
    const uint8_t flags[] = { 0, ZMTP_CURVE_MSG_MORE, 0 };
    s_transcript (0x00, frames, flags, 3);
    s_write (argv[1], "raw-handshake-messages");
    s_check (s_raw_ready && s_raw_opened == 3);
    s_transcript (0x02, NULL, NULL, 0);
    s_write (argv[1], "raw-handshake-denied");
    s_check (!s_raw_ready);
    /* Client mode, nothing altered, two frames (a flags byte, then the frame). */
    static const uint8_t clean[] = { 0x01, 0xff, 0, 0, 0, 0, 6, 0, 'h', 'e', 'l', 'l', 'o', 0, 4, 1, 'a', 'b', 'c' };
    memcpy (s_seed, clean, sizeof clean);
    s_seed_len = sizeof clean;
    s_write (argv[1], "client-clean");
    /* Client mode, INITIATE's byte 150 flipped, then one frame. */
    static const uint8_t flip[] = { 0x01, 2, 0, 150, 0x01, 0, 3, 0, 'h', 'i' };
    memcpy (s_seed, flip, sizeof flip);
    s_seed_len = sizeof flip;
    s_write (argv[1], "client-initiate-flipped");
    return 0;
}
#endif
