/* The host's half of the persistent MLP's mailbox protocol (backends/persistent_box.h), against a
 * thread that plays the kernel's part as kernels/mlp_persistent.cu does (the request word polled
 * with acquire, the features read, the outputs stored, the done word after them): every request
 * answered with its own outputs, both completion modes, rows padded to row_floats with the padding
 * zero, the ring reused slot by slot; and two publishers (a device process's worker and a front)
 * that take turns through a claim, sharing one descriptor, so sequences continue across them; and
 * pbox_call, the wait a front runs with its watchdog. */
#define _GNU_SOURCE
#include "testutil.h"

#include "backends/persistent_box.h"

#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RING 4u
#define LINE 64u

typedef struct {
    persistent_box_t b;
    _Atomic bool stop;
    _Atomic uint64_t bad_padding;       /* feature rows whose padding was not zero */
    _Atomic uint64_t served;
} fake_t;

/* Output k of a row: the sum of its features times (k + 1), plus the request's sequence (so an
 * answer read from the wrong request shows). */
static float s_expect (const float *row, uint32_t in, uint32_t k, uint32_t seq)
{
    float sum = 0.0f;
    for (uint32_t i = 0; i < in; i++)
        sum += row[i];
    return sum * (float) (k + 1) + (float) (seq % 1000u);
}

/* The kernel's part: slot n % ring, sequence n + 1, in order. */
static void *s_kernel (void *arg)
{
    fake_t *f = arg;
    const persistent_box_t *b = &f->b;
    for (uint64_t n = 0; !atomic_load (&f->stop); n++) {
        uint8_t *slot = b->box + b->slots + (size_t) (n % b->ring) * b->slot_bytes;
        const uint32_t seq = (uint32_t) (n + 1u);
        uint64_t word;
        while ((uint32_t) (word = __atomic_load_n ((uint64_t *) (slot + b->request), __ATOMIC_ACQUIRE)) != seq) {
            if (atomic_load (&f->stop))
                return NULL;
            sched_yield ();
        }
        const uint32_t rows = (uint32_t) (word >> 32);
        const float *x = (const float *) (slot + b->features);
        uint32_t *y = (uint32_t *) (slot + b->outputs);
        for (uint32_t r = 0; r < rows; r++) {
            const float *row = x + (size_t) r * b->row_floats;
            for (uint32_t p = b->input_size; p < b->row_floats; p++)
                if (row[p] != 0.0f)
                    atomic_fetch_add (&f->bad_padding, 1);
            for (uint32_t k = 0; k < b->output_size; k++) {
                const float v = s_expect (row, b->input_size, k, seq);
                uint32_t u;
                memcpy (&u, &v, sizeof u);
                __atomic_store_n (&y[r * b->output_size + k], u, __ATOMIC_RELEASE);
            }
        }
        if (b->done_mode == PBOX_DONE_SEQUENCE)
            __atomic_store_n ((uint32_t *) (slot + b->done), seq, __ATOMIC_RELEASE);
        atomic_fetch_add (&f->served, 1);
    }
    return NULL;
}

/* A mailbox laid out as the kernel's (pbox_layout), zeroed. */
static void s_fake_init (fake_t *f, uint32_t in, uint32_t out, uint32_t max_rows, uint32_t mode)
{
    memset (f, 0, sizeof *f);
    const size_t total = pbox_layout (&f->b, in, out, max_rows, RING);
    f->b.done_mode = mode;
    f->b.box = aligned_alloc (LINE, (total + LINE - 1) / LINE * LINE);
    ck_assert_ptr_nonnull (f->b.box);
    memset (f->b.box, 0, total);
}

/* One request through B: published, waited for, every output checked. */
static void s_request (persistent_box_t *b, uint64_t *state, uint32_t rows)
{
    float x[8 * 13], y[8 * 3];
    for (uint32_t i = 0; i < rows * b->input_size; i++) {
        *state ^= *state << 13, *state ^= *state >> 7, *state ^= *state << 17;
        x[i] = (float) (*state % 2001u) / 1000.0f - 1.0f;
    }
    const uint32_t seq = (uint32_t) (b->next + 1u);
    const pbox_answer_t a = pbox_publish (b, x, rows);
    ck_assert_uint_eq (a.seq, seq);
    ck_assert_uint_eq (a.words, rows * b->output_size);
    ck_assert_uint_eq (b->next, seq);
    while (!pbox_answered (&a))
        sched_yield ();
    pbox_read (&a, y);
    for (uint32_t r = 0; r < rows; r++)
        for (uint32_t k = 0; k < b->output_size; k++)
            ck_assert_float_eq (y[r * b->output_size + k], s_expect (x + r * b->input_size, b->input_size, k, seq));
}

static void s_one_publisher (uint32_t mode)
{
    fake_t f;
    s_fake_init (&f, 13, 3, 8, mode);     /* 13 features: rows padded to 16 floats */
    ck_assert_uint_eq (f.b.row_floats, 16);
    pthread_t t;
    ck_assert_int_eq (pthread_create (&t, NULL, s_kernel, &f), 0);
    uint64_t state = 0x9e3779b97f4a7c15ull;
    for (uint32_t i = 0; i < 1000; i++)
        s_request (&f.b, &state, 1u + i % 8u);     /* every row count, the ring reused 250 times */
    atomic_store (&f.stop, true);
    pthread_join (t, NULL);
    ck_assert_uint_eq (atomic_load (&f.served), 1000);
    ck_assert_uint_eq (atomic_load (&f.bad_padding), 0);
    ck_assert_uint_eq (f.b.next, 1000);
    free (f.b.box);
}

START_TEST (answers_come_back_by_outputs) { s_one_publisher (PBOX_DONE_OUTPUTS); }
END_TEST

START_TEST (answers_come_back_by_sequence) { s_one_publisher (PBOX_DONE_SEQUENCE); }
END_TEST

/* Before publishing, the outputs it waits for hold the sentinel (a stale answer in the slot from the
 * ring's last turn never reads as complete). */
START_TEST (a_stale_answer_is_not_complete)
{
    fake_t f;
    s_fake_init (&f, 4, 2, 2, PBOX_DONE_OUTPUTS);
    uint8_t *slot = f.b.box + f.b.slots;
    memset (slot + f.b.outputs, 0, 4 * sizeof (float));     /* what a finished request left */
    const float x[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    const pbox_answer_t a = pbox_publish (&f.b, x, 2);
    ck_assert (!pbox_answered (&a));
    const uint32_t *y = (const uint32_t *) (slot + f.b.outputs);
    for (int k = 0; k < 4; k++)
        ck_assert_uint_eq (y[k], PBOX_SENTINEL);
    ck_assert_uint_eq (*(uint64_t *) (slot + f.b.request), (2ull << 32) | 1u);
    ck_assert (memcmp (slot + f.b.features, x, sizeof x) == 0);   /* row_floats == in: no padding */
    ((uint32_t *) (slot + f.b.outputs))[3] = 0;                   /* three of four written: still waiting */
    ((uint32_t *) (slot + f.b.outputs))[0] = ((uint32_t *) (slot + f.b.outputs))[1] = 0;
    ck_assert (!pbox_answered (&a));
    ((uint32_t *) (slot + f.b.outputs))[2] = 0;
    ck_assert (pbox_answered (&a));
    free (f.b.box);
}
END_TEST

/* A worker and a front publish in turn through one descriptor, each holding the claim for its
 * request: every request is answered with its own outputs and the sequence never repeats. */
typedef struct {
    fake_t *f;
    _Atomic uint32_t *claim;
    uint32_t me, count;
    uint64_t seed;
} publisher_t;

static void *s_publisher (void *arg)
{
    publisher_t *p = arg;
    uint64_t state = p->seed;
    for (uint32_t i = 0; i < p->count; i++) {
        uint32_t free_ = 0;
        while (!atomic_compare_exchange_weak (p->claim, &free_, p->me))
            free_ = 0, sched_yield ();
        s_request (&p->f->b, &state, 1u + (i + p->me) % 4u);
        atomic_store_explicit (p->claim, 0, memory_order_release);
        if (i % 3 == 0)
            sched_yield ();
    }
    return NULL;
}

START_TEST (two_publishers_share_the_sequence)
{
    fake_t f;
    s_fake_init (&f, 7, 1, 4, PBOX_DONE_OUTPUTS);
    _Atomic uint32_t claim = 0;
    pthread_t kernel, a, b;
    publisher_t pa = { &f, &claim, 1, 600, 1 }, pb = { &f, &claim, 2, 400, 2 };
    ck_assert_int_eq (pthread_create (&kernel, NULL, s_kernel, &f), 0);
    ck_assert_int_eq (pthread_create (&a, NULL, s_publisher, &pa), 0);
    ck_assert_int_eq (pthread_create (&b, NULL, s_publisher, &pb), 0);
    pthread_join (a, NULL);
    pthread_join (b, NULL);
    atomic_store (&f.stop, true);
    pthread_join (kernel, NULL);
    ck_assert_uint_eq (f.b.next, 1000);
    ck_assert_uint_eq (atomic_load (&f.served), 1000);
    ck_assert_uint_eq (atomic_load (&f.bad_padding), 0);
    free (f.b.box);
}
END_TEST

/* pbox_call, the front's whole request through a device process's mailbox: answered by the kernel
 * (outputs back, busy_since set for the call and cleared after it); the instance lost or no longer
 * available while it waits (SIG_UNAVAILABLE naming the model, the instance and why, busy_since
 * cleared); and a kernel that never answers, past watchdog_ms + 1 s (the same, saying so). */
typedef struct {
    _Atomic int lost;
    _Atomic bool available;
    _Atomic uint64_t busy_since;
    char state[64];
} watched_t;

static pbox_watch_t s_watch (watched_t *w, uint32_t watchdog_ms)
{
    atomic_store (&w->lost, 0);
    atomic_store (&w->available, true);
    atomic_store (&w->busy_since, 0);
    snprintf (w->state, sizeof w->state, "its device process was lost");
    return (pbox_watch_t) { .lost = &w->lost, .available = &w->available, .busy_since = &w->busy_since,
                            .state = w->state, .model = "m", .instance = 3, .watchdog_ms = watchdog_ms };
}

START_TEST (a_call_is_answered_and_its_busy_time_cleared)
{
    fake_t f;
    s_fake_init (&f, 5, 2, 4, PBOX_DONE_SEQUENCE);
    watched_t w;
    const pbox_watch_t watch = s_watch (&w, 0);
    pthread_t t;
    ck_assert_int_eq (pthread_create (&t, NULL, s_kernel, &f), 0);
    const float x[10] = { 1, 2, 3, 4, 5, 0.5f, 0.25f, -1, -2, 8 };
    float y[4] = { 0 };
    char err[256] = "";
    for (uint32_t seq = 1; seq <= 3; seq++) {
        ck_assert_int_eq (pbox_call (&f.b, x, 2, y, &watch, err, sizeof err), SIG_OK);
        for (uint32_t r = 0; r < 2; r++)
            for (uint32_t k = 0; k < 2; k++)
                ck_assert_float_eq (y[r * 2 + k], s_expect (x + r * 5, 5, k, seq));
        ck_assert_uint_eq (atomic_load (&w.busy_since), 0);
    }
    ck_assert_str_eq (err, "");
    atomic_store (&f.stop, true);
    pthread_join (t, NULL);
    free (f.b.box);
}
END_TEST

/* Sets the instance lost (or unavailable) once the call is waiting: busy_since says it is. */
typedef struct {
    watched_t *w;
    bool unavailable;
    uint64_t seen;
} loser_t;

static void *s_lose (void *arg)
{
    loser_t *l = arg;
    while (!(l->seen = atomic_load (&l->w->busy_since)))
        sched_yield ();
    if (l->unavailable)
        atomic_store (&l->w->available, false);
    else
        atomic_store (&l->w->lost, 1);
    return NULL;
}

START_TEST (a_lost_or_unavailable_instance_ends_the_wait)
{
    for (int unavailable = 0; unavailable < 2; unavailable++) {
        fake_t f;
        s_fake_init (&f, 3, 1, 2, PBOX_DONE_OUTPUTS);       /* no kernel: nothing answers */
        watched_t w;
        const pbox_watch_t watch = s_watch (&w, 0);
        loser_t l = { &w, unavailable == 1, 0 };
        pthread_t t;
        ck_assert_int_eq (pthread_create (&t, NULL, s_lose, &l), 0);
        const float x[3] = { 1, 2, 3 };
        float y[1];
        char err[256];
        ck_assert_int_eq (pbox_call (&f.b, x, 1, y, &watch, err, sizeof err), SIG_UNAVAILABLE);
        pthread_join (t, NULL);
        ck_assert_uint_gt (l.seen, 0);
        ck_assert_str_eq (err, "model \"m\" instance 3: its device process was lost; the request was not answered by it");
        ck_assert_uint_eq (atomic_load (&w.busy_since), 0);
        ck_assert_uint_eq (f.b.next, 1);
        free (f.b.box);
    }
}
END_TEST

START_TEST (a_kernel_that_never_answers_is_given_up_after_its_watchdog)
{
    fake_t f;
    s_fake_init (&f, 3, 1, 2, PBOX_DONE_SEQUENCE);           /* no kernel: nothing answers */
    watched_t w;
    const pbox_watch_t watch = s_watch (&w, 1);
    const float x[3] = { 1, 2, 3 };
    float y[1];
    char err[256];
    ck_assert_int_eq (pbox_call (&f.b, x, 1, y, &watch, err, sizeof err), SIG_UNAVAILABLE);
    ck_assert_str_eq (err, "model \"m\" instance 3: its persistent kernel did not answer within watchdog_ms (1) + 1 s; "
                           "the model is unavailable there until its process is started again");
    ck_assert_uint_eq (atomic_load (&w.busy_since), 0);
    free (f.b.box);
}
END_TEST

int main (void)
{
    Suite *s = suite_create ("persistent_box");
    TCase *c = tcase_create ("protocol");
    tcase_set_timeout (c, 120);
    tcase_add_test (c, answers_come_back_by_outputs);
    tcase_add_test (c, answers_come_back_by_sequence);
    tcase_add_test (c, a_stale_answer_is_not_complete);
    tcase_add_test (c, two_publishers_share_the_sequence);
    tcase_add_test (c, a_call_is_answered_and_its_busy_time_cleared);
    tcase_add_test (c, a_lost_or_unavailable_instance_ends_the_wait);
    tcase_add_test (c, a_kernel_that_never_answers_is_given_up_after_its_watchdog);
    suite_add_tcase (s, c);
    return tu_run_suite (s);
}
