/* serving/streams.h: the LSTM streams one worker instance holds. A new id gets a fresh slot, the
 * same id its slot again; with every slot held by a stream active within idle_ns a new id is
 * refused, and once one has been idle that long its slot goes to the new id; removing streams
 * (backward-shift deletion) never loses another. And serving/stream_history.h, what rebuilds a
 * stream after its device process is lost: the last window - 1 steps replayed oldest first, the
 * least recently stepped stream evicted
 * (counted, named as evicted), an entry re-entered after an eviction not replayable until it holds
 * a window again, idle streams' entries reused without counting. Time is an argument, so nothing
 * here sleeps. */
#include "serving/stream_history.h"
#include "serving/streams.h"
#include "rng.h"
#include "testutil.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

START_TEST (a_new_id_gets_a_fresh_slot_and_the_same_id_keeps_it)
{
    streams_t *s = streams_new (4, 1000);
    ck_assert_ptr_nonnull (s);
    ck_assert_uint_eq (streams_active (s), 0);
    bool fresh = false, used[4] = { false };
    const uint64_t ids[4] = { 7, 1000003, 42, (uint64_t) -1 };
    int slot[4];
    for (int i = 0; i < 4; i++) {
        slot[i] = streams_slot (s, ids[i], (uint64_t) i, &fresh);
        ck_assert_msg (fresh, "id %llu: a new stream, not said to be fresh", (unsigned long long) ids[i]);
        ck_assert_int_ge (slot[i], 0);
        ck_assert_int_lt (slot[i], 4);
        ck_assert_msg (!used[slot[i]], "slot %d given twice", slot[i]);
        used[slot[i]] = true;
        ck_assert_uint_eq (streams_active (s), (uint32_t) i + 1);
    }
    for (int i = 3; i >= 0; i--) {
        fresh = true;
        ck_assert_int_eq (streams_slot (s, ids[i], 10, &fresh), slot[i]);
        ck_assert (!fresh);
    }
    ck_assert_uint_eq (streams_active (s), 4);
    streams_destroy (&s);
    ck_assert_ptr_null (s);
    streams_destroy (&s);   /* twice: nothing happens */
}
END_TEST

START_TEST (with_every_slot_active_a_new_id_is_refused)
{
    streams_t *s = streams_new (3, 1000);
    bool fresh;
    int slot[3];
    for (int i = 0; i < 3; i++)
        slot[i] = streams_slot (s, 100 + (uint64_t) i, 0, &fresh);
    /* 999 ns after their last step: none has been idle for idle_ns. */
    fresh = true;
    ck_assert_int_eq (streams_slot (s, 500, 999, &fresh), -1);
    ck_assert (!fresh);
    ck_assert_uint_eq (streams_active (s), 3);
    /* The refused id was not taken in: the three are still there, with their slots. */
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq (streams_slot (s, 100 + (uint64_t) i, 999, &fresh), slot[i]);
        ck_assert (!fresh);
    }
    ck_assert_int_eq (streams_slot (s, 500, 1998, &fresh), -1);    /* stepped at 999: still active */
    streams_destroy (&s);
    /* No slots at all: every stream is refused. */
    s = streams_new (0, 1000);
    ck_assert_ptr_nonnull (s);
    ck_assert_int_eq (streams_slot (s, 1, 0, &fresh), -1);
    ck_assert_int_eq (streams_slot (s, 1, 1000000, &fresh), -1);
    ck_assert_uint_eq (streams_active (s), 0);
    streams_destroy (&s);
}
END_TEST

START_TEST (a_stream_idle_for_idle_ns_gives_its_slot_to_a_new_id)
{
    streams_t *s = streams_new (3, 1000);
    bool fresh;
    int a = streams_slot (s, 1, 0, &fresh), b = streams_slot (s, 2, 0, &fresh), c = streams_slot (s, 3, 0, &fresh);
    streams_slot (s, 2, 600, &fresh);       /* 2 and 3 step again; 1 does not */
    streams_slot (s, 3, 600, &fresh);
    ck_assert_int_eq (streams_slot (s, 9, 999, &fresh), -1);       /* 1 idle 999 ns: not yet */
    int nine = streams_slot (s, 9, 1000, &fresh);                   /* 1 idle exactly idle_ns */
    ck_assert (fresh);
    ck_assert_int_eq (nine, a);                                     /* 1's slot, the only one free */
    ck_assert_uint_eq (streams_active (s), 3);
    /* 1 is forgotten: coming back, it is a new stream, and there is no room for it. */
    ck_assert_int_eq (streams_slot (s, 1, 1000, &fresh), -1);
    ck_assert_int_eq (streams_slot (s, 2, 1000, &fresh), b);
    ck_assert (!fresh);
    ck_assert_int_eq (streams_slot (s, 3, 1000, &fresh), c);
    ck_assert (!fresh);
    /* Every stream idle long: one new id frees them all, and takes one slot. */
    ck_assert_int_ge (streams_slot (s, 1, 50000, &fresh), 0);
    ck_assert (fresh);
    ck_assert_uint_eq (streams_active (s), 1);
    for (uint64_t id = 2; id <= 3; id++) {
        ck_assert_int_ge (streams_slot (s, id, 50000, &fresh), 0);
        ck_assert_msg (fresh, "id %llu survived a spell of idleness that freed its slot", (unsigned long long) id);
    }
    ck_assert_uint_eq (streams_active (s), 3);
    streams_destroy (&s);
}
END_TEST

/* ---- many streams, with collisions, against a plain model ---- */

#define SLOTS 64
#define IDLE 100

/* Ids whose hash lands on the same home place of the table (a table of 128 for 64 slots), found
 * with the hash streams.c uses: long probe runs, which is where backward-shift deletion can go
 * wrong. If the hash changes they merely stop colliding, and the test still holds. */
static size_t s_home (uint64_t id)
{
    uint64_t h = id * 0x9e3779b97f4a7c15ull;
    return (size_t) (h ^ (h >> 32)) & 127;
}

typedef struct {
    uint64_t id;
    int slot;           /* -1: not held */
    uint64_t last;
} model_stream_t;

START_TEST (removals_keep_every_other_stream_findable)
{
    /* 160 ids: 40 sharing one home place, 40 sharing the next one, 80 others. 200 000 steps of
     * random ids at a random pace; each answer is checked against a model of what the module
     * promises: a held id keeps its slot, a new one gets a slot no held id has, and a full set
     * refuses until a stream has been idle for IDLE, when every idle one is let go. */
    enum { IDS = 160 };
    model_stream_t m[IDS];
    size_t n = 0;
    for (uint64_t id = 1; n < 40; id++)
        if (s_home (id) == 17)
            m[n++] = (model_stream_t) { .id = id, .slot = -1 };
    for (uint64_t id = 1; n < 80; id++)
        if (s_home (id) == 18)
            m[n++] = (model_stream_t) { .id = id, .slot = -1 };
    for (uint64_t id = 1000000; n < IDS; id += 7919)
        m[n++] = (model_stream_t) { .id = id, .slot = -1 };
    streams_t *s = streams_new (SLOTS, IDLE);
    uint64_t seed = 99, now = 1000;
    size_t refused = 0, evictions = 0, fresh_count = 0;
    for (int step = 0; step < 200000; step++) {
        now += rng_next (&seed) % 4;
        model_stream_t *x = &m[rng_next (&seed) % IDS];
        bool fresh = false;
        int slot = streams_slot (s, x->id, now, &fresh);
        size_t held = 0;
        for (size_t i = 0; i < IDS; i++)
            held += m[i].slot >= 0;
        /* (plain ifs: a passing ck_assert costs Check a write to its pipe, 200 000 times here) */
        if (x->slot >= 0) {
            if (slot != x->slot || fresh)
                ck_abort_msg ("step %d: id %llu held slot %d, got %d (fresh %d)", step,
                           (unsigned long long) x->id, x->slot, slot, fresh);
            x->last = now;
            continue;
        }
        if (held == SLOTS) {
            bool any_idle = false;
            for (size_t i = 0; i < IDS; i++)
                any_idle |= m[i].slot >= 0 && now - m[i].last >= IDLE;
            if (!any_idle) {
                if (slot != -1)
                    ck_abort_msg ("step %d: id %llu given slot %d with every slot active", step,
                               (unsigned long long) x->id, slot);
                refused++;
                continue;
            }
            for (size_t i = 0; i < IDS; i++)
                if (m[i].slot >= 0 && now - m[i].last >= IDLE) {
                    m[i].slot = -1;
                    evictions++;
                }
        }
        if (slot < 0 || slot >= SLOTS || !fresh)
            ck_abort_msg ("step %d: new id %llu got slot %d (fresh %d)", step,
                       (unsigned long long) x->id, slot, fresh);
        for (size_t i = 0; i < IDS; i++)
            if (m[i].slot == slot)
                ck_abort_msg ("step %d: slot %d given to id %llu while id %llu holds it", step, slot,
                           (unsigned long long) x->id, (unsigned long long) m[i].id);
        x->slot = slot;
        x->last = now;
        fresh_count++;
        held = 0;
        for (size_t i = 0; i < IDS; i++)
            held += m[i].slot >= 0;
        if (streams_active (s) != held)
            ck_abort_msg ("step %d: %u streams active, %zu held", step, streams_active (s), held);
    }
    /* Every held stream is still found where the model says, without touching its time. */
    size_t held = 0;
    for (size_t i = 0; i < IDS; i++)
        if (m[i].slot >= 0) {
            bool fresh = true;
            ck_assert_int_eq (streams_slot (s, m[i].id, m[i].last, &fresh), m[i].slot);
            ck_assert (!fresh);
            held++;
        }
    ck_assert_uint_eq (streams_active (s), held);
    printf ("200000 steps: %zu new streams, %zu refused, %zu let go after idling\n", fresh_count, refused, evictions);
    ck_assert_uint_gt (refused, 0);     /* both the refusing and the letting go were exercised */
    ck_assert_uint_gt (evictions, 0);
    streams_destroy (&s);
}
END_TEST

/* Step T of stream ID (step_size 2): { ID, T }. */
static const float *s_x (uint64_t id, uint64_t t)
{
    static float x[2];
    x[0] = (float) id;
    x[1] = (float) t;
    return x;
}

START_TEST (the_history_replays_the_last_window_and_evicts_the_oldest)
{
    enum { STREAMS = 2, WINDOW = 4, STEP = 2 };
    void *mem = calloc (1, stream_history_bytes (STREAMS, WINDOW, STEP));
    stream_history_t *h = stream_history_init (mem, STREAMS, WINDOW, STEP, 1000);
    ck_assert_int_eq (stream_history_find (h, 5, 0), -1);
    /* stream 5: 6 steps; the rebuild replays 3, 4, 5 (window - 1), oldest first */
    const int e5 = stream_history_enter (h, 5, 0, 1);
    for (uint64_t t = 1; t <= 6; t++)
        stream_history_record (h, e5, s_x (5, t), t);
    ck_assert_int_eq (stream_history_find (h, 5, 6), e5);
    ck_assert_uint_eq (stream_history_steps (h, e5), 6);
    ck_assert_int_eq (stream_history_replay_count (h, e5), WINDOW - 1);
    for (uint32_t k = 0; k < WINDOW - 1; k++)
        ck_assert_float_eq (stream_history_replay_step (h, e5, k)[1], (float) (4 + k));
    /* fewer steps than a window: all of them */
    const int e6 = stream_history_enter (h, 6, 0, 7);
    stream_history_record (h, e6, s_x (6, 1), 7);
    ck_assert_int_eq (stream_history_replay_count (h, e6), 1);
    ck_assert_float_eq (stream_history_replay_step (h, e6, 0)[0], 6.0f);
    /* a third stream evicts the least recently stepped (5), counted and named */
    const int e7 = stream_history_enter (h, 7, 0, 8);
    ck_assert_int_eq (e7, e5);
    ck_assert_uint_eq (stream_history_evictions (h), 1);
    ck_assert (stream_history_evicted (h, 5));
    ck_assert (!stream_history_holds (h, e5, 5));
    ck_assert_int_eq (stream_history_find (h, 5, 8), -1);
    stream_history_record (h, e7, s_x (7, 1), 8);
    /* 5 going on in its worker re-enters at step 7, evicting 6: not replayable until a window again */
    const int again = stream_history_enter (h, 5, 6, 9);
    ck_assert_int_eq (again, e6);
    ck_assert (!stream_history_evicted (h, 5));
    ck_assert (stream_history_evicted (h, 6));
    stream_history_record (h, again, s_x (5, 7), 9);
    ck_assert_int_eq (stream_history_replay_count (h, again), -1);
    stream_history_record (h, again, s_x (5, 8), 10);
    stream_history_record (h, again, s_x (5, 9), 11);
    ck_assert_int_eq (stream_history_replay_count (h, again), WINDOW - 1);
    ck_assert_float_eq (stream_history_replay_step (h, again, 0)[1], 7.0f);
    /* idle for idle_ns: its entry is reused, not counted as an eviction; an idle stream is not found */
    ck_assert_int_eq (stream_history_find (h, 7, 8 + 1000), -1);
    ck_assert_int_eq (stream_history_enter (h, 8, 0, 8 + 1000), e7);
    ck_assert_uint_eq (stream_history_evictions (h), 2);
    ck_assert (!stream_history_evicted (h, 7));
    free (mem);
}
END_TEST

START_TEST (a_forgotten_stream_gives_its_slot_back)
{
    streams_t *s = streams_new (2, 1000);
    bool fresh;
    const int a = streams_slot (s, 11, 0, &fresh);
    streams_applied (s, a);
    streams_set_steps (s, a, 40);
    ck_assert_uint_eq (streams_steps (s, a), 40);
    streams_slot (s, 12, 0, &fresh);
    streams_forget (s, 11);
    ck_assert_int_eq (streams_lookup (s, 11), -1);
    ck_assert_int_ge (streams_lookup (s, 12), 0);
    ck_assert_uint_eq (streams_active (s), 1);
    ck_assert_int_eq (streams_slot (s, 13, 0, &fresh), a);
    ck_assert (fresh);
    ck_assert_uint_eq (streams_steps (s, a), 0);
    streams_destroy (&s);
}
END_TEST

int main (void)
{
    Suite *s = suite_create ("streams");
    TCase *tc = tcase_create ("slots");
    tcase_add_test (tc, a_new_id_gets_a_fresh_slot_and_the_same_id_keeps_it);
    tcase_add_test (tc, with_every_slot_active_a_new_id_is_refused);
    tcase_add_test (tc, a_stream_idle_for_idle_ns_gives_its_slot_to_a_new_id);
    tcase_add_test (tc, removals_keep_every_other_stream_findable);
    tcase_add_test (tc, a_forgotten_stream_gives_its_slot_back);
    tcase_add_test (tc, the_history_replays_the_last_window_and_evicts_the_oldest);
    suite_add_tcase (s, tc);
    return tu_run_suite (s);
}
