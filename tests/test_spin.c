/* base/spin.h: when an idle serving thread spins. With synthetic times (no clock): requests every
 * 100 us are caught by a spin of twice that, not longer; a thread waiting for an answer of its own
 * spins up to the cap; a thread whose work stopped sleeps within the cap, and the average starts
 * again after a quiet spell; a spin that ended in a sleep is counted once; a cap of 0 never spins.
 * Where spinning is allowed: a cgroup v2 cpu.max line in whole CPUs, and the cap given only when
 * every serving thread has a CPU, with the reason either way. */
#include "base/spin.h"
#include "testutil.h"

#include <check.h>
#include <stdio.h>

#define US 1000ull
#define T0 1000000000ull        /* any start: times are differences */

START_TEST (arrivals_every_100_us_are_caught_by_a_spin_of_200)
{
    spin_t s;
    spin_init (&s, 1000 * US);
    ck_assert (!spin_idle (&s, T0, false));                 /* nothing has come yet */
    for (int i = 0; i < 32; i++)
        spin_arrival (&s, T0 + (uint64_t) i * 100 * US);
    const uint64_t last = T0 + 31 * 100 * US;
    ck_assert_uint_eq (s.gap_ns, 100 * US);
    ck_assert (spin_idle (&s, last + 1 * US, false));
    ck_assert (spin_idle (&s, last + 199 * US, false));
    ck_assert (!spin_idle (&s, last + 200 * US, false));    /* twice the gap: then sleep */
    ck_assert (spin_ended (&s));                             /* it had spun: counted once */
    ck_assert (!spin_ended (&s));
}
END_TEST

START_TEST (waiting_for_its_own_answer_spins_up_to_the_cap)
{
    spin_t s;
    spin_init (&s, 500 * US);
    spin_arrival (&s, T0);                                   /* one arrival: no gap known */
    ck_assert (!spin_idle (&s, T0 + 10 * US, false));
    ck_assert (spin_idle (&s, T0 + 10 * US, true));
    ck_assert (spin_idle (&s, T0 + 499 * US, true));
    ck_assert (!spin_idle (&s, T0 + 500 * US, true));
    /* Rare arrivals (every 2 ms, over the cap): the window is the cap, never more. */
    for (int i = 1; i < 16; i++)
        spin_arrival (&s, T0 + (uint64_t) i * 2000 * US);
    const uint64_t last = T0 + 15 * 2000 * US;
    ck_assert (spin_idle (&s, last + 499 * US, false));
    ck_assert (!spin_idle (&s, last + 500 * US, false));
}
END_TEST

START_TEST (after_a_quiet_spell_the_average_starts_from_the_cap)
{
    spin_t s;
    spin_init (&s, 1000 * US);
    for (int i = 0; i < 32; i++)
        spin_arrival (&s, T0 + (uint64_t) i * 50 * US);
    ck_assert_uint_eq (s.gap_ns, 50 * US);
    /* An hour of nothing counts as four caps, not an hour: the next burst is caught again soon. */
    const uint64_t later = T0 + 3600ull * 1000000 * US;
    spin_arrival (&s, later);
    ck_assert_uint_eq (s.gap_ns, 50 * US - 50 * US / 8 + 4000 * US / 8);
    ck_assert (!spin_ended (&s));                            /* an arrival clears it */
}
END_TEST

START_TEST (a_cap_of_zero_never_spins)
{
    spin_t s;
    spin_init (&s, 0);
    for (int i = 0; i < 8; i++)
        spin_arrival (&s, T0 + (uint64_t) i * US);
    ck_assert (!spin_idle (&s, T0 + 8 * US, false));
    ck_assert (!spin_idle (&s, T0 + 8 * US, true));
    ck_assert (!spin_ended (&s));
}
END_TEST

START_TEST (cgroup_cpu_max_in_whole_cpus)
{
    ck_assert_int_eq (spin_cgroup_cpus ("max 100000\n"), -1);
    ck_assert_int_eq (spin_cgroup_cpus ("200000 100000\n"), 2);
    ck_assert_int_eq (spin_cgroup_cpus ("150000 100000"), 1);
    ck_assert_int_eq (spin_cgroup_cpus ("50000 100000"), 1);     /* half a CPU: at least 1 */
    ck_assert_int_eq (spin_cgroup_cpus ("400000 100000"), 4);
    ck_assert_int_eq (spin_cgroup_cpus ("0 100000"), -1);
    ck_assert_int_eq (spin_cgroup_cpus ("12x 100000"), -1);
    ck_assert_int_eq (spin_cgroup_cpus ("100000"), -1);
    ck_assert_int_eq (spin_cgroup_cpus (""), -1);
    ck_assert_int_eq (spin_cgroup_cpus (NULL), -1);
    ck_assert_int_ge (spin_cpus_available (), 1);               /* this process may use one at least */
}
END_TEST

START_TEST (the_cap_only_where_every_thread_has_a_cpu_and_one_is_left)
{
    char why[256];
    ck_assert_uint_eq (spin_cap (1000 * US, 3, 16, why, sizeof why), 1000 * US);
    ck_assert_str_eq (why, "up to 1000 us (3 serving thread(s), 16 CPU(s))");
    ck_assert_uint_eq (spin_cap (1000 * US, 3, 4, why, sizeof why), 1000 * US);
    /* a CPU each and none left over: off */
    ck_assert_uint_eq (spin_cap (1000 * US, 2, 2, why, sizeof why), 0);
    ck_assert_str_eq (why, "off: 2 serving thread(s) on 2 CPU(s) (affinity and cgroup quota) would leave none for the "
                           "rest (the kernel's network work, a client on this host)");
    ck_assert_uint_eq (spin_cap (1000 * US, 3, 2, why, sizeof why), 0);
    ck_assert_str_eq (why, "off: 3 serving thread(s) and 2 CPU(s) to run them on (affinity and cgroup quota): a "
                           "spinning thread would take the time another needs");
    ck_assert_uint_eq (spin_cap (0, 3, 16, why, sizeof why), 0);
    ck_assert_str_eq (why, "off (server.spin_us 0)");
    ck_assert_uint_eq (spin_cap (1000 * US, 3, -1, why, sizeof why), 0);
    ck_assert_str_eq (why, "off: the CPUs this process may use cannot be read");
}
END_TEST

int main (void)
{
    Suite *s = suite_create ("spin");
    TCase *tc = tcase_create ("policy");
    tcase_add_test (tc, arrivals_every_100_us_are_caught_by_a_spin_of_200);
    tcase_add_test (tc, waiting_for_its_own_answer_spins_up_to_the_cap);
    tcase_add_test (tc, after_a_quiet_spell_the_average_starts_from_the_cap);
    tcase_add_test (tc, a_cap_of_zero_never_spins);
    suite_add_tcase (s, tc);
    TCase *cpus = tcase_create ("cpus");
    tcase_add_test (cpus, cgroup_cpu_max_in_whole_cpus);
    tcase_add_test (cpus, the_cap_only_where_every_thread_has_a_cpu_and_one_is_left);
    suite_add_tcase (s, cpus);
    return tu_run_suite (s);
}
