/* Which CPUs sit next to a PCI device (a GPU), from sysfs: the device's numa_node, then that
 * node's cpulist. Workers of a CUDA model instance are pinned there by default, so the thread
 * that writes a GPU's pinned buffers runs on the memory controller closest to it. */
#ifndef SIGSERVE_NUMA_H
#define SIGSERVE_NUMA_H

#include <stddef.h>

/* The CPUs of the NUMA node of PCI device BUS_ID ("0000:3b:00.0", as cudaDeviceGetPCIBusId writes
 * it, any case) into CPUS (up to CAP). Returns how many, 0 when sysfs does not say (no NUMA
 * information, a VM, node -1). SYSFS is the root ("/sys"; tests pass a folder of their own). */
size_t numa_device_cpus (const char *sysfs, const char *bus_id, int *cpus, size_t cap);
/* Parses a cpulist ("0-3,8,10-11") into CPUS; how many, or 0 when it does not parse. */
size_t numa_parse_cpulist (const char *text, int *cpus, size_t cap);

#endif
