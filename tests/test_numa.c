/* numa.c: cpulists, and the CPUs next to a PCI device read from a sysfs tree written here. */
#include "base/numa.h"
#include "testutil.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

START_TEST (cpulists_parse)
{
    int c[16];
    ck_assert_uint_eq (numa_parse_cpulist ("0-3,8,10-11\n", c, 16), 7);
    const int want[] = { 0, 1, 2, 3, 8, 10, 11 };
    for (int i = 0; i < 7; i++)
        ck_assert_int_eq (c[i], want[i]);
    ck_assert_uint_eq (numa_parse_cpulist ("5", c, 16), 1);
    ck_assert_int_eq (c[0], 5);
    ck_assert_uint_eq (numa_parse_cpulist ("0-63", c, 16), 16);     /* cut at the capacity */
    ck_assert_uint_eq (numa_parse_cpulist ("3-1", c, 16), 0);
    ck_assert_uint_eq (numa_parse_cpulist ("a", c, 16), 0);
    ck_assert_uint_eq (numa_parse_cpulist ("1;2", c, 16), 0);
}
END_TEST

static void s_write (const char *dir, const char *rel, const char *text)
{
    char cmd[4400];
    snprintf (cmd, sizeof cmd, "mkdir -p \"$(dirname '%s/%s')\"", dir, rel);
    ck_assert_int_eq (system (cmd), 0);
    char *p = tu_write_file (dir, rel, text, -1);
    ck_assert_ptr_nonnull (p);
    free (p);
}

START_TEST (device_cpus_from_sysfs)
{
    char *root = tu_tmpdir ();
    s_write (root, "bus/pci/devices/0000:3b:00.0/numa_node", "1\n");
    s_write (root, "bus/pci/devices/0000:af:00.0/numa_node", "-1\n");
    s_write (root, "devices/system/node/node1/cpulist", "16-19,48\n");
    int c[32];
    /* cudaDeviceGetPCIBusId writes upper case hex */
    ck_assert_uint_eq (numa_device_cpus (root, "0000:3B:00.0", c, 32), 5);
    ck_assert_int_eq (c[0], 16);
    ck_assert_int_eq (c[4], 48);
    ck_assert_uint_eq (numa_device_cpus (root, "0000:AF:00.0", c, 32), 0);     /* no node */
    ck_assert_uint_eq (numa_device_cpus (root, "0000:00:04.0", c, 32), 0);     /* no such device */
    tu_remove_tree (root);
    free (root);
}
END_TEST

int main (void)
{
    Suite *s = suite_create ("numa");
    TCase *tc = tcase_create ("numa");
    tcase_add_test (tc, cpulists_parse);
    tcase_add_test (tc, device_cpus_from_sysfs);
    suite_add_tcase (s, tc);
    return tu_run_suite (s);
}
