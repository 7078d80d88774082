/* The mailboxes' source (backends/box_source.h) over an arena of the shared region, as a device
 * process sets it up: whole pages, and the registered pool: the first mailbox registers a chunk of
 * BOX_SOURCE_CHUNK bytes, later ones are cut from it without registering, what is left fits exactly,
 * a refused registration gives nothing, one that does not fit takes a new chunk of its own size, a
 * full arena gives nothing, and unsetting the source forgets the pool. */
#include "testutil.h"

#include "backends/box_source.h"
#include "base/shm.h"

#include <check.h>
#include <stdint.h>
#include <string.h>

#define ARENA (4u * BOX_SOURCE_CHUNK)

static int s_registered, s_refuse;
static uint8_t *s_last;
static size_t s_last_bytes;

static int s_reg (void *arg, void *p, size_t bytes)
{
    ck_assert_ptr_eq (arg, &s_registered);
    if (s_refuse)
        return -1;
    s_registered++;
    s_last = p;
    s_last_bytes = bytes;
    return 0;
}

static void *s_alloc (void *arena, size_t bytes) { return shm_alloc_aligned (arena, bytes, 4096, false); }

START_TEST (the_pool_registers_a_chunk_once_and_cuts_mailboxes_from_it)
{
    char err[256];
    shm_t *region = shm_new (ARENA + (1u << 20), err, sizeof err);
    ck_assert_msg (region != NULL, "%s", err);
    uint8_t *range = shm_alloc_aligned (region, ARENA, 4096, false);
    shm_t *arena = shm_arena_new (range, ARENA);
    size_t got = 0;
    ck_assert (!box_source_active ());
    ck_assert_ptr_null (box_source_take (100, s_reg, &s_registered, &got));     /* no source */
    box_source_set (s_alloc, arena);
    ck_assert (box_source_active ());
    s_registered = s_refuse = 0;
    /* the first: a chunk registered, the mailbox at its start, whole pages */
    uint8_t *a = box_source_take (5000, s_reg, &s_registered, &got);
    ck_assert_ptr_eq (a, range);
    ck_assert_uint_eq (got, 8192);
    ck_assert_int_eq (s_registered, 1);
    ck_assert_ptr_eq (s_last, range);
    ck_assert_uint_eq (s_last_bytes, BOX_SOURCE_CHUNK);
    /* later ones from the same chunk, without registering */
    uint8_t *b = box_source_take (4096, s_reg, &s_registered, &got);
    ck_assert_ptr_eq (b, a + 8192);
    ck_assert_uint_eq (got, 4096);
    uint8_t *c = box_source_take (1, s_reg, &s_registered, &got);
    ck_assert_ptr_eq (c, b + 4096);
    ck_assert_int_eq (s_registered, 1);
    /* what is left exactly fits, without registering */
    const size_t big = BOX_SOURCE_CHUNK - 4 * 4096;     /* 4 pages used (2 + 1 + 1): what is left */
    uint8_t *d = box_source_take (big, s_reg, &s_registered, &got);
    ck_assert_ptr_eq (d, c + 4096);
    ck_assert_int_eq (s_registered, 1);
    /* a refused registration gives nothing (its chunk stays taken from the arena: this process's alone) */
    s_refuse = 1;
    ck_assert_ptr_null (box_source_take (4096, s_reg, &s_registered, &got));
    ck_assert_int_eq (s_registered, 1);
    s_refuse = 0;
    /* a new chunk when the pool has no room: a large mailbox gets a chunk of its own size */
    uint8_t *e = box_source_take (BOX_SOURCE_CHUNK + 1, s_reg, &s_registered, &got);
    ck_assert_ptr_nonnull (e);
    ck_assert_uint_eq ((uintptr_t) e % 4096, 0);
    ck_assert_uint_eq (got, BOX_SOURCE_CHUNK + 4096);
    ck_assert_int_eq (s_registered, 2);
    ck_assert_uint_eq (s_last_bytes, BOX_SOURCE_CHUNK + 4096);
    ck_assert (e >= range + 2u * BOX_SOURCE_CHUNK && e + got <= range + ARENA);   /* after the refused one */
    /* the arena full: nothing */
    ck_assert_ptr_null (box_source_take (ARENA, s_reg, &s_registered, &got));
    /* unset: the pool forgotten */
    box_source_set (NULL, NULL);
    ck_assert (!box_source_active ());
    ck_assert_ptr_null (box_source_take (100, s_reg, &s_registered, &got));
    shm_destroy (&arena);
    shm_destroy (&region);
}
END_TEST

int main (void)
{
    Suite *s = suite_create ("box_source");
    TCase *c = tcase_create ("pool");
    tcase_add_test (c, the_pool_registers_a_chunk_once_and_cuts_mailboxes_from_it);
    suite_add_tcase (s, c);
    return tu_run_suite (s);
}
