/*
 * A fake HIP runtime (libamdhip64.so) for the probe fault tests: it exports every function
 * trine's HIP backend loads (backends/src/hip/ffi.rs: the runtime table, the hiprtc table and
 * hipGetDevicePropertiesR0600), claims to be ROCm 6.3 with one gfx1030 device, keeps "device"
 * memory in host memory, and misbehaves in one place chosen at compile time:
 *
 *   -DFAKE_HANG_INIT    hipInit never returns (a runtime stuck opening the device)
 *   -DFAKE_HANG_LAUNCH  hipModuleLaunchKernel never returns (a stuck first launch)
 *   -DFAKE_ABORT        hipMemcpyHtoDAsync prints glibc's message and aborts (a heap
 *                       corruption in the upload path)
 *
 * Built by tests/probe_faults.rs with `cc -shared -fPIC`; never shipped.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int hipError_t;
#define HIP_SUCCESS 0

#if defined(FAKE_HANG_INIT) || defined(FAKE_HANG_LAUNCH)
/* A function that never returns, the way a stuck driver call looks from outside. */
static void block_forever(void) {
    for (;;) {
        sleep(3600);
    }
}
#endif

static void copy_string(char *dst, int len, const char *src) {
    if (len <= 0) {
        return;
    }
    strncpy(dst, src, (size_t)len - 1);
    dst[len - 1] = '\0';
}

/* Distinct non-null handles for streams, events, modules, functions and programs. */
static char handle_storage[8];

hipError_t hipInit(unsigned int flags) {
    (void)flags;
#ifdef FAKE_HANG_INIT
    block_forever();
#endif
    return HIP_SUCCESS;
}

/* HIP_VERSION encoding: major * 10^7 + minor * 10^5 + patch. */
hipError_t hipRuntimeGetVersion(int *v) { *v = 60300000; return HIP_SUCCESS; }
hipError_t hipDriverGetVersion(int *v) { *v = 60300000; return HIP_SUCCESS; }
hipError_t hipGetDeviceCount(int *n) { *n = 1; return HIP_SUCCESS; }

hipError_t hipDeviceGetAttribute(int *v, int attr, int device) {
    (void)device;
    switch (attr) {
    case 16: *v = 0; break;           /* integrated */
    case 29: *v = 2147483647; break;  /* max grid x */
    case 30: case 31: *v = 65535; break;
    case 56: *v = 1024; break;        /* max threads per block */
    case 63: *v = 1; break;           /* compute units */
    case 74: *v = 65536; break;       /* shared memory per block */
    case 87: *v = 32; break;          /* warp size */
    default: *v = 0; break;
    }
    return HIP_SUCCESS;
}

hipError_t hipDeviceGetName(char *name, int len, int device) {
    (void)device;
    copy_string(name, len, "trine fake HIP device");
    return HIP_SUCCESS;
}

hipError_t hipDeviceGetPCIBusId(char *id, int len, int device) {
    (void)device;
    copy_string(id, len, "0000:ff:00.0");
    return HIP_SUCCESS;
}

/* The ROCm 6 layout: gcnArchName at byte 1160 of hipDeviceProp_tR0600. */
hipError_t hipGetDevicePropertiesR0600(void *props, int device) {
    (void)device;
    memset(props, 0, 1472);
    strcpy((char *)props + 1160, "gfx1030");
    return HIP_SUCCESS;
}

hipError_t hipSetDevice(int device) { (void)device; return HIP_SUCCESS; }

hipError_t hipMemGetInfo(size_t *free_bytes, size_t *total) {
    *free_bytes = (size_t)1 << 30;
    *total = (size_t)1 << 30;
    return HIP_SUCCESS;
}

hipError_t hipMalloc(void **p, size_t size) {
    *p = calloc(1, size ? size : 1);
    return *p ? HIP_SUCCESS : 2;
}

hipError_t hipFree(void *p) { free(p); return HIP_SUCCESS; }

hipError_t hipMemset(void *dst, int value, size_t n) {
    memset(dst, value, n);
    return HIP_SUCCESS;
}

hipError_t hipHostMalloc(void **p, size_t size, unsigned int flags) {
    (void)flags;
    return hipMalloc(p, size);
}

hipError_t hipHostFree(void *p) { free(p); return HIP_SUCCESS; }

hipError_t hipMemcpyHtoDAsync(void *dst, void *src, size_t n, void *stream) {
    (void)stream;
#ifdef FAKE_ABORT
    fprintf(stderr, "munmap_chunk(): invalid pointer\n");
    abort();
#endif
    memcpy(dst, src, n);
    return HIP_SUCCESS;
}

hipError_t hipMemcpyDtoHAsync(void *dst, void *src, size_t n, void *stream) {
    (void)stream;
    memcpy(dst, src, n);
    return HIP_SUCCESS;
}

hipError_t hipStreamCreate(void **stream) { *stream = &handle_storage[0]; return HIP_SUCCESS; }
hipError_t hipStreamSynchronize(void *stream) { (void)stream; return HIP_SUCCESS; }
hipError_t hipStreamDestroy(void *stream) { (void)stream; return HIP_SUCCESS; }

hipError_t hipModuleLoadData(void **module, const void *image) {
    (void)image;
    *module = &handle_storage[1];
    return HIP_SUCCESS;
}

hipError_t hipModuleUnload(void *module) { (void)module; return HIP_SUCCESS; }

hipError_t hipModuleGetFunction(void **function, void *module, const char *name) {
    (void)module;
    (void)name;
    *function = &handle_storage[2];
    return HIP_SUCCESS;
}

hipError_t hipModuleLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                 unsigned by, unsigned bz, unsigned shared, void *stream,
                                 void **params, void **extra) {
    (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz;
    (void)shared; (void)stream; (void)params; (void)extra;
#ifdef FAKE_HANG_LAUNCH
    block_forever();
#endif
    return HIP_SUCCESS;
}

hipError_t hipEventCreate(void **event) { *event = &handle_storage[3]; return HIP_SUCCESS; }
hipError_t hipEventRecord(void *event, void *stream) { (void)event; (void)stream; return HIP_SUCCESS; }
hipError_t hipEventSynchronize(void *event) { (void)event; return HIP_SUCCESS; }
hipError_t hipEventElapsedTime(float *ms, void *start, void *end) {
    (void)start;
    (void)end;
    *ms = 0.0f;
    return HIP_SUCCESS;
}
hipError_t hipEventDestroy(void *event) { (void)event; return HIP_SUCCESS; }

const char *hipGetErrorString(hipError_t e) { return e == 0 ? "hipSuccess" : "fake HIP error"; }

/* hiprtc, exported from the runtime itself as in ROCm 5. */
int hiprtcVersion(int *major, int *minor) { *major = 6; *minor = 3; return 0; }

int hiprtcCreateProgram(void **prog, const char *src, const char *name, int n,
                        const char *const *headers, const char *const *names) {
    (void)src; (void)name; (void)n; (void)headers; (void)names;
    *prog = &handle_storage[4];
    return 0;
}

int hiprtcCompileProgram(void *prog, int n, const char *const *options) {
    (void)prog; (void)n; (void)options;
    return 0;
}

int hiprtcGetProgramLogSize(void *prog, size_t *size) { (void)prog; *size = 1; return 0; }
int hiprtcGetProgramLog(void *prog, char *log) { (void)prog; log[0] = '\0'; return 0; }

/* The smallest thing the backend accepts as a code object: an ELF64 header with
 * e_machine = EM_AMDGPU (224). */
#define CODE_SIZE 64
int hiprtcGetCodeSize(void *prog, size_t *size) { (void)prog; *size = CODE_SIZE; return 0; }

int hiprtcGetCode(void *prog, char *code) {
    (void)prog;
    memset(code, 0, CODE_SIZE);
    memcpy(code, "\x7f" "ELF", 4);
    code[4] = 2; /* 64-bit */
    code[5] = 1; /* little-endian */
    code[6] = 1; /* ELF version */
    code[18] = (char)224;
    return 0;
}

int hiprtcDestroyProgram(void **prog) { *prog = NULL; return 0; }
const char *hiprtcGetErrorString(int e) { return e == 0 ? "HIPRTC_SUCCESS" : "fake hiprtc error"; }
