/* front/clients.h: requests in flight per client, for server.max_inflight_per_client. A client's
 * id is its key (cut at CLIENT_KEY_MAX bytes) with the key's hash; counts go up and down per
 * client; a client whose count returns to zero leaves the table (backward-shift deletion), and
 * removals never lose another client, however many share a place in the table. */
#include "front/clients.h"
#include "rng.h"
#include "testutil.h"

#include <check.h>
#include <stdio.h>
#include <string.h>

static client_id_t s_id (const char *key)
{
    client_id_t id;
    clients_id (&id, key, strlen (key));
    return id;
}

START_TEST (equal_keys_give_equal_ids_cut_at_client_key_max)
{
    client_id_t a = s_id ("routing-id-1"), b = s_id ("routing-id-1"), c = s_id ("routing-id-2");
    ck_assert_uint_eq (a.len, 12);
    ck_assert_mem_eq (a.key, "routing-id-1", 12);
    ck_assert_uint_eq (a.hash, b.hash);
    ck_assert_uint_ne (a.hash, c.hash);
    /* Binary keys (a ROUTER's routing id starts with a zero byte) are taken whole. */
    client_id_t z1, z2;
    clients_id (&z1, "\0\x01\x02", 3);
    clients_id (&z2, "\0\x01\x03", 3);
    ck_assert_uint_eq (z1.len, 3);
    ck_assert_uint_ne (z1.hash, z2.hash);
    /* Keys longer than CLIENT_KEY_MAX count by their first CLIENT_KEY_MAX bytes. */
    char long1[CLIENT_KEY_MAX + 36], long2[CLIENT_KEY_MAX + 36];
    memset (long1, 'k', sizeof long1);
    memcpy (long2, long1, sizeof long2);
    long2[CLIENT_KEY_MAX + 10] = 'X';       /* differs only past the cut */
    client_id_t l1, l2, prefix;
    clients_id (&l1, long1, sizeof long1);
    clients_id (&l2, long2, sizeof long2);
    clients_id (&prefix, long1, CLIENT_KEY_MAX);
    ck_assert_uint_eq (l1.len, CLIENT_KEY_MAX);
    ck_assert_uint_eq (l1.hash, l2.hash);
    ck_assert_mem_eq (l1.key, l2.key, CLIENT_KEY_MAX);
    ck_assert_uint_eq (l1.hash, prefix.hash);
    long2[CLIENT_KEY_MAX - 1] = 'X';        /* differs inside it */
    clients_id (&l2, long2, sizeof long2);
    ck_assert_uint_ne (l1.hash, l2.hash);
    /* The table counts keys that differ only past the cut as one client. */
    long2[CLIENT_KEY_MAX - 1] = 'k';
    clients_id (&l2, long2, sizeof long2);
    clients_t *t = clients_new (4);
    clients_add (t, &l1);
    ck_assert_uint_eq (clients_inflight (t, &l2), 1);
    clients_destroy (&t);
}
END_TEST

START_TEST (counts_go_up_and_down_per_client)
{
    clients_t *t = clients_new (8);
    ck_assert_ptr_nonnull (t);
    client_id_t a = s_id ("alice"), b = s_id ("bob"), c = s_id ("carol");
    ck_assert_uint_eq (clients_inflight (t, &a), 0);
    clients_add (t, &a);
    clients_add (t, &a);
    clients_add (t, &b);
    ck_assert_uint_eq (clients_inflight (t, &a), 2);
    ck_assert_uint_eq (clients_inflight (t, &b), 1);
    ck_assert_uint_eq (clients_inflight (t, &c), 0);
    clients_release (t, &a);
    ck_assert_uint_eq (clients_inflight (t, &a), 1);
    ck_assert_uint_eq (clients_inflight (t, &b), 1);
    clients_release (t, &a);
    ck_assert_uint_eq (clients_inflight (t, &a), 0);
    clients_release (t, &a);                /* one more release than adds: stays at zero */
    ck_assert_uint_eq (clients_inflight (t, &a), 0);
    clients_release (t, &c);                /* a client never added: nothing happens */
    ck_assert_uint_eq (clients_inflight (t, &b), 1);
    clients_destroy (&t);
    ck_assert_ptr_null (t);
    clients_destroy (&t);
}
END_TEST

START_TEST (a_client_back_to_zero_leaves_the_table)
{
    /* Capacity 4: a table of 16 places. Ten thousand clients, each added and released in turn,
     * then 16 at once: if released clients kept their places the table would be full after 16,
     * and a lookup would never end. */
    clients_t *t = clients_new (4);
    char key[32];
    for (int i = 0; i < 10000; i++) {
        snprintf (key, sizeof key, "client-%d", i);
        client_id_t id = s_id (key);
        clients_add (t, &id);
        if (clients_inflight (t, &id) != 1)
            ck_abort_msg ("%s: %u in flight after one add", key, clients_inflight (t, &id));
        clients_release (t, &id);
    }
    for (int i = 0; i < 16; i++) {
        snprintf (key, sizeof key, "again-%d", i);
        client_id_t id = s_id (key);
        clients_add (t, &id);
    }
    for (int i = 0; i < 16; i++) {
        snprintf (key, sizeof key, "again-%d", i);
        client_id_t id = s_id (key);
        ck_assert_uint_eq (clients_inflight (t, &id), 1);
    }
    clients_destroy (&t);
}
END_TEST

/* ---- collisions ---- */

/* N keys "KIND-i" whose hash lands on place HOME of a table of MASK + 1 places (clients_new sizes
 * it: 16, or twice the capacity rounded up to a power of two). */
static int s_colliding (char keys[][32], int n, const char *kind, size_t home, size_t mask)
{
    int found = 0;
    for (int i = 0; found < n; i++) {
        snprintf (keys[found], 32, "%s-%d", kind, i);
        client_id_t id = s_id (keys[found]);
        if ((id.hash & mask) == home)
            found++;
    }
    return found;
}

START_TEST (clients_sharing_a_place_stay_findable_after_removals)
{
    /* Capacity 64: 128 places. 20 keys whose home is place 126, 20 at place 127: one probe run of
     * 40 that wraps past the end of the table. Removing clients from the middle of the run, one at
     * a time, must leave every other one findable with its own count. */
    enum { N = 40 };
    static char keys[N][32];
    s_colliding (keys, 20, "p126", 126, 127);
    s_colliding (keys + 20, 20, "p127", 127, 127);
    clients_t *t = clients_new (64);
    uint32_t count[N];
    for (int i = 0; i < N; i++) {
        client_id_t id = s_id (keys[i]);
        count[i] = 1 + (uint32_t) i % 3;
        for (uint32_t k = 0; k < count[i]; k++)
            clients_add (t, &id);
    }
    /* Remove in an order that cuts the run here and there: 7, 14, 21, ... (mod 40). */
    for (int r = 0; r < N; r++) {
        int gone = (r * 7 + 7) % N;
        client_id_t id = s_id (keys[gone]);
        while (count[gone] > 0) {
            clients_release (t, &id);
            count[gone]--;
        }
        for (int i = 0; i < N; i++) {
            client_id_t other = s_id (keys[i]);
            uint32_t have = clients_inflight (t, &other);
            if (have != count[i])
                ck_abort_msg ("after removing %s: %s has %u in flight, expected %u", keys[gone], keys[i], have,
                              count[i]);
        }
    }
    clients_destroy (&t);
}
END_TEST

START_TEST (random_adds_and_releases_match_a_plain_count)
{
    /* 120 keys, 60 of them in two crafted probe runs, capacity 64 (128 places); 200 000 random
     * adds and releases, never more than 64 clients in flight at once, each answer checked
     * against plain counters. */
    enum { N = 120 };
    static char keys[N][32];
    s_colliding (keys, 30, "a", 40, 127);
    s_colliding (keys + 30, 30, "b", 41, 127);
    for (int i = 60; i < N; i++)
        snprintf (keys[i], 32, "plain-%d", i);
    client_id_t ids[N];
    for (int i = 0; i < N; i++)
        ids[i] = s_id (keys[i]);
    uint32_t count[N] = { 0 };
    int live = 0;
    clients_t *t = clients_new (64);
    uint64_t seed = 7;
    for (int step = 0; step < 200000; step++) {
        int i = (int) (rng_next (&seed) % N);
        if (rng_next (&seed) % 2 && (count[i] > 0 || live < 64)) {
            live += count[i] == 0;
            count[i]++;
            clients_add (t, &ids[i]);
        } else if (count[i] > 0) {
            count[i]--;
            live -= count[i] == 0;
            clients_release (t, &ids[i]);
        }
        int j = (int) (rng_next (&seed) % N);
        if (clients_inflight (t, &ids[i]) != count[i] || clients_inflight (t, &ids[j]) != count[j])
            ck_abort_msg ("step %d: %s has %u (expected %u), %s has %u (expected %u)", step, keys[i],
                          clients_inflight (t, &ids[i]), count[i], keys[j], clients_inflight (t, &ids[j]), count[j]);
    }
    for (int i = 0; i < N; i++)
        ck_assert_uint_eq (clients_inflight (t, &ids[i]), count[i]);
    clients_destroy (&t);
}
END_TEST

int main (void)
{
    Suite *s = suite_create ("clients");
    TCase *tc = tcase_create ("in_flight_per_client");
    tcase_add_test (tc, equal_keys_give_equal_ids_cut_at_client_key_max);
    tcase_add_test (tc, counts_go_up_and_down_per_client);
    tcase_add_test (tc, a_client_back_to_zero_leaves_the_table);
    tcase_add_test (tc, clients_sharing_a_place_stay_findable_after_removals);
    tcase_add_test (tc, random_adds_and_releases_match_a_plain_count);
    suite_add_tcase (s, tc);
    return tu_run_suite (s);
}
