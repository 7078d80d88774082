/* The host's half of the persistent MLP's mailbox protocol (backends/persistent_box.h), against a
 * thread that plays the kernel's part as kernels/mlp_persistent.cu does (the request word polled
 * with acquire, the features read, the outputs stored, the done word after them): every request
 * answered with its own outputs, both completion modes, rows padded to row_floats with the padding
 * zero, the ring reused slot by slot; and two publishers (a device process's worker and a front)
 * that take turns through a claim, sharing one descriptor, so sequences continue across them. */
#define _GNU_SOURCE
#include "testutil.h"

#include "backends/persistent_box.h"

#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
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

int main (void)
{
    Suite *s = suite_create ("persistent_box");
    TCase *c = tcase_create ("protocol");
    tcase_set_timeout (c, 120);
    tcase_add_test (c, answers_come_back_by_outputs);
    tcase_add_test (c, answers_come_back_by_sequence);
    tcase_add_test (c, a_stale_answer_is_not_complete);
    tcase_add_test (c, two_publishers_share_the_sequence);
    suite_add_tcase (s, c);
    return tu_run_suite (s);
}
