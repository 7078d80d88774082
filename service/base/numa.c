#include "base/numa.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t numa_parse_cpulist (const char *text, int *cpus, size_t cap)
{
    size_t n = 0;
    const char *p = text;
    while (*p && *p != '\n') {
        char *end;
        long lo = strtol (p, &end, 10), hi = lo;
        if (end == p || lo < 0)
            return 0;
        p = end;
        if (*p == '-') {
            hi = strtol (p + 1, &end, 10);
            if (end == p + 1 || hi < lo)
                return 0;
            p = end;
        }
        for (long c = lo; c <= hi && n < cap; c++)
            cpus[n++] = (int) c;
        if (*p == ',')
            p++;
        else if (*p && *p != '\n')
            return 0;
    }
    return n;
}

static int s_read_line (const char *path, char *buf, size_t len)
{
    FILE *f = fopen (path, "r");
    if (!f)
        return -1;
    char *ok = fgets (buf, (int) len, f);
    fclose (f);
    return ok ? 0 : -1;
}

size_t numa_device_cpus (const char *sysfs, const char *bus_id, int *cpus, size_t cap)
{
    char id[64], path[512], line[4096];
    size_t i = 0;
    for (; bus_id[i] && i < sizeof id - 1; i++)
        id[i] = (char) tolower ((unsigned char) bus_id[i]);
    id[i] = '\0';
    snprintf (path, sizeof path, "%s/bus/pci/devices/%s/numa_node", sysfs, id);
    if (s_read_line (path, line, sizeof line) != 0)
        return 0;
    int node = atoi (line);
    if (node < 0)
        return 0;
    snprintf (path, sizeof path, "%s/devices/system/node/node%d/cpulist", sysfs, node);
    if (s_read_line (path, line, sizeof line) != 0)
        return 0;
    return numa_parse_cpulist (line, cpus, cap);
}
