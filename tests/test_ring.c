/* base/ring.h: the single-producer/single-consumer ring between the front and a worker. First in,
 * first out; full at its capacity rounded up to a power of two; NULL when empty; peek leaves the
 * item where pop takes it; the indices wrap many times over; and two threads passing millions of
 * items lose, repeat or reorder none of them. */
#include "base/ring.h"
#include "testutil.h"

#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdint.h>

/* Items are small integers carried in the pointer (never NULL: NULL means empty). */
#define ITEM(i) ((void *) (uintptr_t) ((i) + 1))
#define VALUE(p) ((uintptr_t) (p) - 1)

START_TEST (items_come_out_in_the_order_they_went_in)
{
    ring_t r;
    ck_assert_int_eq (ring_init (&r, 8), 0);
    for (uintptr_t i = 0; i < 5; i++)
        ck_assert (ring_push (&r, ITEM (i)));
    ck_assert_uint_eq (ring_count (&r), 5);
    for (uintptr_t i = 0; i < 5; i++) {
        ck_assert_uint_eq (VALUE (ring_pop (&r)), i);
        ck_assert_uint_eq (ring_count (&r), 4 - i);
    }
    ring_release (&r);
    ck_assert_ptr_null (r.items);
}
END_TEST

START_TEST (full_at_the_capacity_rounded_up_to_a_power_of_two)
{
    const struct { size_t asked, holds; } cases[] = { { 1, 1 }, { 2, 2 }, { 3, 4 }, { 5, 8 }, { 8, 8 }, { 100, 128 } };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ring_t r;
        ck_assert_int_eq (ring_init (&r, cases[c].asked), 0);
        for (uintptr_t i = 0; i < cases[c].holds; i++)
            ck_assert_msg (ring_push (&r, ITEM (i)), "a ring asked for %zu refused item %zu", cases[c].asked, (size_t) i);
        ck_assert_msg (!ring_push (&r, ITEM (999)), "a ring asked for %zu took %zu items", cases[c].asked,
                       cases[c].holds + 1);
        ck_assert_uint_eq (ring_count (&r), cases[c].holds);
        /* Full is not lost: the first item is still first, and one pop makes room for one push. */
        ck_assert_uint_eq (VALUE (ring_pop (&r)), 0);
        ck_assert (ring_push (&r, ITEM (999)));
        ck_assert (!ring_push (&r, ITEM (1000)));
        for (uintptr_t i = 1; i < cases[c].holds; i++)
            ck_assert_uint_eq (VALUE (ring_pop (&r)), i);
        ck_assert_uint_eq (VALUE (ring_pop (&r)), 999);
        ck_assert_ptr_null (ring_pop (&r));
        ring_release (&r);
    }
}
END_TEST

START_TEST (an_empty_ring_pops_and_peeks_null)
{
    ring_t r;
    ck_assert_int_eq (ring_init (&r, 4), 0);
    ck_assert_ptr_null (ring_pop (&r));
    ck_assert_ptr_null (ring_peek (&r));
    ck_assert_uint_eq (ring_count (&r), 0);
    ck_assert (ring_push (&r, ITEM (7)));
    ck_assert_uint_eq (VALUE (ring_pop (&r)), 7);
    ck_assert_ptr_null (ring_pop (&r));     /* emptied again */
    ck_assert_ptr_null (ring_peek (&r));
    ring_release (&r);
}
END_TEST

START_TEST (peek_shows_the_oldest_and_leaves_it_for_pop)
{
    ring_t r;
    ck_assert_int_eq (ring_init (&r, 4), 0);
    ck_assert (ring_push (&r, ITEM (1)));
    ck_assert (ring_push (&r, ITEM (2)));
    ck_assert_uint_eq (VALUE (ring_peek (&r)), 1);
    ck_assert_uint_eq (VALUE (ring_peek (&r)), 1);      /* twice: still there */
    ck_assert_uint_eq (ring_count (&r), 2);
    ck_assert_uint_eq (VALUE (ring_pop (&r)), 1);
    ck_assert_uint_eq (VALUE (ring_peek (&r)), 2);
    ck_assert_uint_eq (VALUE (ring_pop (&r)), 2);
    ck_assert_ptr_null (ring_peek (&r));
    ring_release (&r);
}
END_TEST

START_TEST (indices_wrap_around_many_times)
{
    /* A ring of 4 slots passing 100 003 items in uneven bursts: every slot is reused tens of
     * thousands of times, each time in order. */
    ring_t r;
    ck_assert_int_eq (ring_init (&r, 4), 0);
    uintptr_t next_in = 0, next_out = 0;
    for (int round = 0; next_in < 100003; round++) {
        size_t burst = 1 + (size_t) round % 4, room = 4 - ring_count (&r);
        for (size_t k = 0; k < burst && k < room && next_in < 100003; k++)
            if (!ring_push (&r, ITEM (next_in++)))
                ck_abort_msg ("round %d: item %zu refused with room for %zu", round, (size_t) next_in - 1, room);
        if (ring_count (&r) != next_in - next_out)
            ck_abort_msg ("round %d: %zu counted, %zu in", round, ring_count (&r), (size_t) (next_in - next_out));
        size_t take = 1 + (size_t) (round * 7) % 3;
        for (size_t k = 0; k < take && next_out < next_in; k++, next_out++) {
            uintptr_t v = VALUE (ring_pop (&r));
            if (v != next_out)
                ck_abort_msg ("round %d: item %zu came out where %zu was expected", round, (size_t) v, (size_t) next_out);
        }
    }
    void *p;
    while ((p = ring_pop (&r)) != NULL)
        ck_assert_uint_eq (VALUE (p), next_out++);
    ck_assert_uint_eq (next_out, 100003);
    ring_release (&r);
}
END_TEST

/* ---- two threads ---- */

#define PASSED 4000000u

typedef struct {
    ring_t ring;
    uint64_t full;                  /* pushes the producer found the ring full for */
} handoff_t;

static void *s_producer (void *arg)
{
    handoff_t *h = arg;
    for (uintptr_t i = 0; i < PASSED; i++)
        while (!ring_push (&h->ring, ITEM (i)))
            if (++h->full % 16 == 0)
                sched_yield ();     /* the two threads may share one core on a loaded machine */
    return NULL;
}

START_TEST (two_threads_pass_millions_of_items_each_once_in_order)
{
    /* A small ring (256 slots for 4 million items), so the producer often finds it full and the
     * consumer often finds it empty: both edges are crossed over and over. The consumer checks each
     * value against the next one expected, so a lost, repeated or reordered item fails at the first
     * one. */
    handoff_t h = { .full = 0 };
    ck_assert_int_eq (ring_init (&h.ring, 256), 0);
    pthread_t producer;
    ck_assert_int_eq (pthread_create (&producer, NULL, s_producer, &h), 0);
    uintptr_t expected = 0;
    uint64_t empty = 0, peeked = 0;
    while (expected < PASSED) {
        void *seen = ring_peek (&h.ring);
        if (!seen) {
            if (++empty % 16 == 0)
                sched_yield ();
            continue;
        }
        peeked++;
        void *p = ring_pop (&h.ring);
        /* (plain ifs: a passing ck_assert costs Check a write to its pipe, millions of times here) */
        if (p != seen)      /* only the consumer takes: pop returns what peek showed */
            ck_abort_msg ("peek showed item %zu, pop took %zu", (size_t) VALUE (seen), (size_t) VALUE (p));
        if (VALUE (p) != expected)
            ck_abort_msg ("item %zu arrived where %zu was expected", (size_t) VALUE (p), (size_t) expected);
        expected++;
    }
    ck_assert_int_eq (pthread_join (producer, NULL), 0);
    ck_assert_ptr_null (ring_pop (&h.ring));        /* nothing more than was sent */
    ck_assert_uint_eq (peeked, PASSED);
    printf ("%u items: the producer found the ring full %llu times, the consumer found it empty %llu times\n",
            PASSED, (unsigned long long) h.full, (unsigned long long) empty);
    ring_release (&h.ring);
}
END_TEST

int main (void)
{
    Suite *s = suite_create ("ring");
    TCase *tc = tcase_create ("one_thread");
    tcase_add_test (tc, items_come_out_in_the_order_they_went_in);
    tcase_add_test (tc, full_at_the_capacity_rounded_up_to_a_power_of_two);
    tcase_add_test (tc, an_empty_ring_pops_and_peeks_null);
    tcase_add_test (tc, peek_shows_the_oldest_and_leaves_it_for_pop);
    tcase_add_test (tc, indices_wrap_around_many_times);
    suite_add_tcase (s, tc);
    TCase *tt = tcase_create ("producer_and_consumer");
    tcase_set_timeout (tt, 120);
    tcase_add_test (tt, two_threads_pass_millions_of_items_each_once_in_order);
    suite_add_tcase (s, tt);
    return tu_run_suite (s);
}
