/* What a device can run (sig_common.h: sig_clusters_supported). */
#include "sig_common.h"

extern "C" int sig_clusters_supported (int device, int exact, int *major, int *minor)
{
    int ma = 0, mi = 0, cluster = 0;
    if (cudaDeviceGetAttribute (&ma, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess
        || cudaDeviceGetAttribute (&mi, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess
        || cudaDeviceGetAttribute (&cluster, cudaDevAttrClusterLaunch, device) != cudaSuccess) {
        (void) cudaGetLastError ();   /* a bad device number is an answer (0), not a pending error */
        ma = mi = 0;
    }
    if (major)
        *major = ma;
    if (minor)
        *minor = mi;
    const bool capable = exact ? ma == 9 && mi == 0 : ma >= 9;
    return capable && cluster != 0 ? 1 : 0;
}
