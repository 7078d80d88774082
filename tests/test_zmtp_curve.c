/* transport/zmtp_curve.c: the CURVE handshake and MESSAGE boxes, our client against our server in
 * memory (every command's bytes where the RFC puts them, metadata both ways, frames of every kind
 * and size both ways, metadata up to its limit and a byte over), and Z85 against libzmq's.
 * test_zmtp_curve_refusals.c has every refusal, test_zmtp_curve_libzmq.c the handshake against
 * libzmq itself (tests/zmtp_curve_tests.h: what the three share). */
#define _GNU_SOURCE
#include "zmtp_curve_tests.h"

#define BIG_FRAME (64 * 1024)

/* ---- in memory ---------------------------------------------------------------------------- */

/* Seals DATA on FROM, opens it on TO, and checks what comes out, byte for byte. */
static void s_pass (zmtp_curve_t *from, zmtp_curve_t *to, uint8_t flags, const uint8_t *data, size_t len,
                    uint64_t expected_nonce)
{
    uint8_t *body = malloc (len + ZMTP_CURVE_OVERHEAD);
    ck_assert_ptr_nonnull (body);
    size_t n = zmtp_curve_seal (from, flags, data, len, body);
    ck_assert_uint_eq (n, len + ZMTP_CURVE_OVERHEAD);
    ck_assert_mem_eq (body, "\x07MESSAGE", 8);
    ck_assert_uint_eq (zmtp_get_u64 (body + 8), expected_nonce);
    uint8_t got_flags = 0xff, *got = NULL;
    size_t got_len = 12345;
    zmtp_curve_fail_t why = ZMTP_CURVE_FAIL_PROTOCOL;
    ck_assert_int_eq (zmtp_curve_open (to, body, n, &got_flags, &got, &got_len, &why), 0);
    ck_assert_int_eq (why, ZMTP_CURVE_OK);
    ck_assert_uint_eq (got_flags, flags);
    ck_assert_uint_eq (got_len, len);
    ck_assert (got >= body && got + got_len <= body + n);
    if (len)
        ck_assert_mem_eq (got, data, len);
    free (body);
}

START_TEST (our_client_and_our_server_handshake_and_exchange_every_kind_of_frame)
{
    pair_t p;
    s_pair_new (&p, NULL, NULL, NULL);
    s_handshake_to (&p, 5);

    /* The commands' fixed bytes where RFC 26 puts them, and the short nonces as libzmq numbers
     * them: HELLO 1, INITIATE 2 from the client; READY 1 from the server. */
    uint8_t zeros[72] = { 0 };
    ck_assert_mem_eq (p.hello, "\x05HELLO\x01\x00", 8);
    ck_assert_mem_eq (p.hello + 8, zeros, 72);
    ck_assert_uint_eq (zmtp_get_u64 (p.hello + 112), 1);
    ck_assert_mem_eq (p.welcome, "\x07WELCOME", 8);
    ck_assert_mem_eq (p.initiate, "\x08INITIATE", 9);
    ck_assert_uint_eq (zmtp_get_u64 (p.initiate + 105), 2);
    ck_assert_mem_eq (p.ready, "\x05READY", 6);
    ck_assert_uint_eq (zmtp_get_u64 (p.ready + 6), 1);

    /* Each side has the other's metadata, byte for byte, and the server the client's key. */
    size_t md_len = 0;
    const uint8_t *md = zmtp_curve_peer_metadata (p.server, &md_len);
    ck_assert_uint_eq (md_len, p.client_md_len);
    ck_assert_mem_eq (md, p.client_md, md_len);
    md = zmtp_curve_peer_metadata (p.client, &md_len);
    ck_assert_uint_eq (md_len, p.server_md_len);
    ck_assert_mem_eq (md, p.server_md, md_len);
    const uint8_t *value;
    size_t value_len;
    ck_assert_int_eq (zmtp_property_find (md, md_len, "socket-type", &value, &value_len), 1);
    ck_assert_uint_eq (value_len, 6);
    ck_assert_mem_eq (value, "ROUTER", 6);
    ck_assert_ptr_nonnull (zmtp_curve_client_key (p.server));
    ck_assert_mem_eq (zmtp_curve_client_key (p.server), p.client_keys.public_key, 32);
    ck_assert_ptr_null (zmtp_curve_client_key (p.client));

    /* Frames both ways: empty, small, with MORE, COMMAND or both, and 64 KiB. MESSAGE nonces go on
     * from the handshake's: the client's from 3, the server's from 2. */
    uint8_t *big = malloc (BIG_FRAME);
    ck_assert_ptr_nonnull (big);
    randombytes_buf (big, BIG_FRAME);
    const struct { uint8_t flags; const uint8_t *data; size_t len; } frames[] = {
        { 0, NULL, 0 },
        { ZMTP_CURVE_MSG_MORE, (const uint8_t *) "first of two", 12 },
        { 0, (const uint8_t *) "second of two", 13 },
        { ZMTP_CURVE_MSG_COMMAND, (const uint8_t *) "\x04PING\x00\x00", 7 },
        { ZMTP_CURVE_MSG_MORE, NULL, 0 },
        { ZMTP_CURVE_MSG_MORE | ZMTP_CURVE_MSG_COMMAND, (const uint8_t *) "x", 1 },
        { ZMTP_CURVE_MSG_MORE, big, BIG_FRAME },
        { 0, big, BIG_FRAME },
    };
    uint64_t c_nonce = 3, s_nonce = 2;
    for (int round = 0; round < 2; round++)
        for (size_t i = 0; i < sizeof frames / sizeof frames[0]; i++) {
            s_pass (p.client, p.server, frames[i].flags, frames[i].data, frames[i].len, c_nonce++);
            s_pass (p.server, p.client, frames[i].flags, frames[i].data, frames[i].len, s_nonce++);
        }
    free (big);

    /* Once READY, a handshake command is out of turn on either side. */
    uint8_t out[ZMTP_CURVE_COMMAND_MAX];
    size_t out_len;
    zmtp_curve_fail_t why;
    ck_assert_int_eq (zmtp_curve_step (p.server, p.hello, p.hello_len, out, sizeof out, &out_len, &why),
                      ZMTP_CURVE_ERROR);
    ck_assert_int_eq (why, ZMTP_CURVE_FAIL_PROTOCOL);
    ck_assert_uint_eq (out_len, 0);
    s_pair_destroy (&p);
}
END_TEST

START_TEST (metadata_up_to_the_limit_passes_and_a_byte_more_is_refused_at_construction)
{
    zmtp_keypair_t s, c;
    s_keypair (&s);
    s_keypair (&c);
    uint8_t md[ZMTP_CURVE_METADATA_MAX + 1];
    size_t used = 0;
    char value[ZMTP_CURVE_METADATA_MAX];
    memset (value, 'v', sizeof value);
    /* One property filling MAX bytes: 1 + 11 + 4 + value. */
    ck_assert_int_eq (zmtp_property_write (md, sizeof md, &used, "Socket-Type", value, ZMTP_CURVE_METADATA_MAX - 16),
                      0);
    ck_assert_uint_eq (used, ZMTP_CURVE_METADATA_MAX);
    zmtp_curve_t *server = zmtp_curve_new_server (&s, NULL, NULL, md, used);
    zmtp_curve_t *client = zmtp_curve_new_client (&c, s.public_key, md, used);
    ck_assert_ptr_nonnull (server);
    ck_assert_ptr_nonnull (client);
    uint8_t a[ZMTP_CURVE_COMMAND_MAX], b[ZMTP_CURVE_COMMAND_MAX];
    size_t a_len, b_len;
    zmtp_curve_fail_t why;
    a_len = zmtp_curve_start (client, a, sizeof a);
    ck_assert_int_eq (zmtp_curve_step (server, a, a_len, b, sizeof b, &b_len, &why), ZMTP_CURVE_CONTINUE);
    ck_assert_int_eq (zmtp_curve_step (client, b, b_len, a, sizeof a, &a_len, &why), ZMTP_CURVE_CONTINUE);
    ck_assert_uint_eq (a_len, 257 + ZMTP_CURVE_METADATA_MAX);
    ck_assert_int_eq (zmtp_curve_step (server, a, a_len, b, sizeof b, &b_len, &why), ZMTP_CURVE_READY);
    ck_assert_uint_eq (b_len, 30 + ZMTP_CURVE_METADATA_MAX);
    ck_assert_int_eq (zmtp_curve_step (client, b, b_len, a, sizeof a, &a_len, &why), ZMTP_CURVE_READY);
    const uint8_t *got = zmtp_curve_peer_metadata (client, &a_len);
    ck_assert_uint_eq (a_len, ZMTP_CURVE_METADATA_MAX);
    ck_assert_mem_eq (got, md, a_len);
    zmtp_curve_destroy (&server);
    zmtp_curve_destroy (&client);

    md[used] = 0;
    ck_assert_ptr_null (zmtp_curve_new_server (&s, NULL, NULL, md, used + 1));
    ck_assert_ptr_null (zmtp_curve_new_client (&c, s.public_key, md, used + 1));
    /* Malformed metadata (a value length past the end) is refused too. */
    ck_assert_ptr_null (zmtp_curve_new_server (&s, NULL, NULL, md, used - 1));
    zmtp_curve_destroy (&server);       /* NULL: nothing to do */
}
END_TEST

START_TEST (z85_matches_libzmq_and_refuses_what_is_not_40_z85_characters)
{
    /* RFC 32's example, extended to a key: the bytes 86 4F D2 6F B5 59 F7 5B are "HelloWorld". */
    uint8_t key[32] = { 0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B };
    char text[41], theirs[41];
    ck_assert_int_eq (zmtp_z85_encode (key, text), 0);
    ck_assert_str_eq (text, "HelloWorld000000000000000000000000000000");
    for (int i = 0; i < 200; i++) {
        randombytes_buf (key, sizeof key);
        if (i == 0)
            memset (key, 0xff, sizeof key);
        ck_assert_int_eq (zmtp_z85_encode (key, text), 0);
        ck_assert_ptr_nonnull (zmq_z85_encode (theirs, key, sizeof key));
        ck_assert_str_eq (text, theirs);
        uint8_t back[32];
        ck_assert_int_eq (zmtp_z85_decode (text, back), 0);
        ck_assert_mem_eq (back, key, 32);
    }
    uint8_t back[32];
    ck_assert_int_eq (zmtp_z85_decode ("HelloWorld00000000000000000000000000000", back), -1);      /* 39 */
    ck_assert_int_eq (zmtp_z85_decode ("HelloWorld0000000000000000000000000000000", back), -1);    /* 41 */
    ck_assert_int_eq (zmtp_z85_decode ("Hello World000000000000000000000000000000", back), -1);    /* a space */
    ck_assert_int_eq (zmtp_z85_decode ("Hello\"orld000000000000000000000000000000", back), -1);
    ck_assert_int_eq (zmtp_z85_decode ("#####00000000000000000000000000000000000", back), -1);     /* > 2^32 */
    ck_assert_int_eq (zmtp_z85_decode ("%nSc000000000000000000000000000000000000", back), 0);      /* 2^32 - 1 */
    ck_assert_mem_eq (back, "\xff\xff\xff\xff", 4);
    ck_assert_int_eq (zmtp_z85_decode (NULL, back), -1);
}
END_TEST

int main (void)
{
    if (sodium_init () < 0)
        return 1;
    Suite *s = suite_create ("zmtp_curve");
    TCase *mem = tcase_create ("in_memory");
    tcase_set_timeout (mem, 60);
    tcase_add_test (mem, our_client_and_our_server_handshake_and_exchange_every_kind_of_frame);
    tcase_add_test (mem, metadata_up_to_the_limit_passes_and_a_byte_more_is_refused_at_construction);
    tcase_add_test (mem, z85_matches_libzmq_and_refuses_what_is_not_40_z85_characters);
    suite_add_tcase (s, mem);
    SRunner *sr = srunner_create (s);
    srunner_run_all (sr, CK_NORMAL);
    int failed = srunner_ntests_failed (sr);
    srunner_free (sr);
    return failed;
}
