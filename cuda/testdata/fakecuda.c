/*
 * A fake libcuda for the tests of the cuda package's binding (fake_test.go).
 *
 * It exports only what a real libcuda exports for a binding that follows
 * the rules: cuGetProcAddress_v2 and the CUDA 11.3 cuGetProcAddress (each
 * can be left out with -DFAKE_NO_V2 / -DFAKE_NO_GPA). Every driver function
 * is static, reachable only through cuGetProcAddress, which also records the
 * version each name was asked at. Each function records its arguments,
 * decodes the structs it is given with this C compiler's idea of their
 * layout, writes configurable values to its out-parameters, and returns a
 * result the test can force. The fake_* functions are the test's controls.
 *
 * The structs below are written from the CUDA driver API's documented
 * layout (cuda.h), so a mismatch with the Go types shows up as wrong
 * decoded fields.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long u64;
typedef long long i64;

#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_INVALID_PTX 218
#define CUDA_ERROR_NOT_FOUND 500

typedef struct {
    int type;
    int id;
} loc_t;

typedef struct {
    int type;
    int requestedHandleTypes;
    loc_t location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} prop_t;

typedef struct {
    loc_t location;
    int flags;
} access_t;

typedef struct {
    unsigned int numDevices;
    size_t size;
    unsigned long long handleTypes;
    unsigned long long flags;
} mcprop_t;

/* ---- state ---- */

#define MAXREC 256
#define NAMELEN 64

static int driver_version = 13000;
static u64 out_u64[4];
static float out_f32;
static unsigned char fabric_out[64];
static int gpa_used;

struct named {
    char name[NAMELEN];
    int value;
    u64 extra;
    int count;
};
static struct named forced[MAXREC];
static int nforced;
static struct named missing[MAXREC];
static int nmissing;
static struct named reqs[MAXREC];
static int nreqs;
static struct named calls[MAXREC];
static int ncalls;

static char last_call[NAMELEN];
static u64 last_args[16];
static unsigned char blob[4096];
static u64 blob_len;

static struct named *find(struct named *t, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(t[i].name, name) == 0)
            return &t[i];
    return NULL;
}

static struct named *find_or_add(struct named *t, int *n, const char *name) {
    struct named *e = find(t, *n, name);
    if (e || *n >= MAXREC)
        return e;
    e = &t[(*n)++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    return e;
}

static void record(const char *name) {
    snprintf(last_call, sizeof last_call, "%s", name);
    memset(last_args, 0, sizeof last_args);
    struct named *c = find_or_add(calls, &ncalls, name);
    if (c)
        c->count++;
}

static int forced_code(const char *name) {
    struct named *f = find(forced, nforced, name);
    return f ? f->value : 0;
}

static void set_blob(const void *p, size_t n) {
    if (n > sizeof blob)
        n = sizeof blob;
    memcpy(blob, p, n);
    blob_len = n;
}

#define A(i, v) (last_args[i] = (u64)(v))
#define FORCED(name)                 \
    do {                             \
        int fc_ = forced_code(name); \
        if (fc_)                     \
            return fc_;              \
    } while (0)

/* ---- controls ---- */

void fake_reset(void) {
    driver_version = 13000;
    memset(out_u64, 0, sizeof out_u64);
    out_f32 = 0;
    memset(fabric_out, 0, sizeof fabric_out);
    nforced = nmissing = nreqs = ncalls = 0;
    gpa_used = 0;
    last_call[0] = 0;
    memset(last_args, 0, sizeof last_args);
    blob_len = 0;
}
void fake_set_driver_version(int v) { driver_version = v; }
void fake_set_out(int i, u64 v) { out_u64[i & 3] = v; }
void fake_set_out_f32(float f) { out_f32 = f; }
void fake_set_fabric(const unsigned char *p) { memcpy(fabric_out, p, 64); }
void fake_force_result(const char *name, int code) {
    struct named *f = find_or_add(forced, &nforced, name);
    if (f)
        f->value = code;
}
void fake_set_missing(const char *name, int status) {
    struct named *m = find_or_add(missing, &nmissing, name);
    if (m)
        m->value = status;
}
int fake_requested_version(const char *name) {
    struct named *r = find(reqs, nreqs, name);
    return r ? r->value : -1;
}
u64 fake_requested_flags(const char *name) {
    struct named *r = find(reqs, nreqs, name);
    return r ? r->extra : ~0ull;
}
int fake_request_count(void) { return nreqs; }
const char *fake_request_name(int i) { return i >= 0 && i < nreqs ? reqs[i].name : ""; }
int fake_call_count(const char *name) {
    struct named *c = find(calls, ncalls, name);
    return c ? c->count : 0;
}
const char *fake_last_call(void) { return last_call; }
u64 fake_last_arg(int i) { return last_args[i & 15]; }
u64 fake_blob(unsigned char *out, u64 cap) {
    u64 n = blob_len < cap ? blob_len : cap;
    memcpy(out, blob, n);
    return blob_len;
}
int fake_gpa_used(void) { return gpa_used; }

/* ---- errors, init, version ---- */

static char name_buf[64], string_buf[96];

static CUresult cuGetErrorName(CUresult e, const char **p) {
    FORCED("cuGetErrorName");
    snprintf(name_buf, sizeof name_buf, "FAKE_NAME_%d", e);
    *p = name_buf;
    return 0;
}
static CUresult cuGetErrorString(CUresult e, const char **p) {
    FORCED("cuGetErrorString");
    snprintf(string_buf, sizeof string_buf, "fake description of error %d", e);
    *p = string_buf;
    return 0;
}
static CUresult cuInit(unsigned flags) {
    record("cuInit");
    A(0, flags);
    FORCED("cuInit");
    return 0;
}
static CUresult cuDriverGetVersion(int *v) {
    record("cuDriverGetVersion");
    FORCED("cuDriverGetVersion");
    *v = driver_version;
    return 0;
}

/* ---- devices and contexts ---- */

static CUresult cuDeviceGetCount(int *n) {
    record("cuDeviceGetCount");
    FORCED("cuDeviceGetCount");
    *n = (int)out_u64[0];
    return 0;
}
static CUresult cuDeviceGet(int *d, int ordinal) {
    record("cuDeviceGet");
    A(1, (i64)ordinal);
    FORCED("cuDeviceGet");
    *d = (int)out_u64[0];
    return 0;
}
static CUresult cuDeviceGetName(char *name, int len, int dev) {
    record("cuDeviceGetName");
    A(1, len);
    A(2, dev);
    FORCED("cuDeviceGetName");
    snprintf(name, (size_t)len, "Fake GPU %d", dev);
    return 0;
}
static CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
    record("cuDeviceGetAttribute");
    A(1, attr);
    A(2, dev);
    FORCED("cuDeviceGetAttribute");
    *v = (int)out_u64[0];
    return 0;
}
static CUresult cuDeviceTotalMem_v2(size_t *n, int dev) {
    record("cuDeviceTotalMem");
    A(1, dev);
    FORCED("cuDeviceTotalMem");
    *n = out_u64[0];
    return 0;
}
static CUresult cuDeviceCanAccessPeer(int *v, int dev, int peer) {
    record("cuDeviceCanAccessPeer");
    A(1, dev);
    A(2, peer);
    FORCED("cuDeviceCanAccessPeer");
    *v = (int)out_u64[0];
    return 0;
}
static CUresult cuDeviceGetPCIBusId(char *buf, int len, int dev) {
    record("cuDeviceGetPCIBusId");
    A(1, len);
    A(2, dev);
    FORCED("cuDeviceGetPCIBusId");
    snprintf(buf, (size_t)len, "0000:%02x:00.0", dev);
    return 0;
}
static CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
    record("cuDevicePrimaryCtxRetain");
    A(1, dev);
    FORCED("cuDevicePrimaryCtxRetain");
    *ctx = (void *)(uintptr_t)out_u64[0];
    return 0;
}
static CUresult cuDevicePrimaryCtxRelease_v2(int dev) {
    record("cuDevicePrimaryCtxRelease");
    A(0, dev);
    FORCED("cuDevicePrimaryCtxRelease");
    return 0;
}
static CUresult cuCtxSetCurrent(void *ctx) {
    record("cuCtxSetCurrent");
    A(0, ctx);
    FORCED("cuCtxSetCurrent");
    return 0;
}
static CUresult cuCtxGetCurrent(void **ctx) {
    record("cuCtxGetCurrent");
    FORCED("cuCtxGetCurrent");
    *ctx = (void *)(uintptr_t)out_u64[0];
    return 0;
}
static CUresult cuCtxSynchronize(void) {
    record("cuCtxSynchronize");
    FORCED("cuCtxSynchronize");
    return 0;
}

/* ---- streams, graphs, events ---- */

static CUresult cuStreamCreate(void **s, unsigned flags) {
    record("cuStreamCreate");
    A(1, flags);
    FORCED("cuStreamCreate");
    *s = (void *)(uintptr_t)out_u64[0];
    return 0;
}
static CUresult cuStreamDestroy_v2(void *s) {
    record("cuStreamDestroy");
    A(0, s);
    FORCED("cuStreamDestroy");
    return 0;
}
static CUresult cuStreamSynchronize(void *s) {
    record("cuStreamSynchronize");
    A(0, s);
    FORCED("cuStreamSynchronize");
    return 0;
}
static CUresult cuStreamQuery(void *s) {
    record("cuStreamQuery");
    A(0, s);
    FORCED("cuStreamQuery");
    return 0;
}
static CUresult cuStreamGetCtx(void *s, void **ctx) {
    record("cuStreamGetCtx");
    A(0, s);
    FORCED("cuStreamGetCtx");
    *ctx = (void *)(uintptr_t)out_u64[0];
    return 0;
}
static CUresult cuStreamWaitEvent(void *s, void *e, unsigned flags) {
    record("cuStreamWaitEvent");
    A(0, s);
    A(1, e);
    A(2, flags);
    FORCED("cuStreamWaitEvent");
    return 0;
}
static CUresult cuStreamBeginCapture_v2(void *s, int mode) {
    record("cuStreamBeginCapture");
    A(0, s);
    A(1, mode);
    FORCED("cuStreamBeginCapture");
    return 0;
}
static CUresult cuStreamEndCapture(void *s, void **g) {
    record("cuStreamEndCapture");
    A(0, s);
    FORCED("cuStreamEndCapture");
    *g = (void *)(uintptr_t)out_u64[0];
    return 0;
}
static CUresult cuGraphInstantiateWithFlags(void **x, void *g, u64 flags) {
    record("cuGraphInstantiateWithFlags");
    A(1, g);
    A(2, flags);
    FORCED("cuGraphInstantiateWithFlags");
    *x = (void *)(uintptr_t)out_u64[0];
    return 0;
}
static CUresult cuGraphLaunch(void *x, void *s) {
    record("cuGraphLaunch");
    A(0, x);
    A(1, s);
    FORCED("cuGraphLaunch");
    return 0;
}
static CUresult cuGraphExecDestroy(void *x) {
    record("cuGraphExecDestroy");
    A(0, x);
    FORCED("cuGraphExecDestroy");
    return 0;
}
static CUresult cuGraphDestroy(void *g) {
    record("cuGraphDestroy");
    A(0, g);
    FORCED("cuGraphDestroy");
    return 0;
}
static CUresult cuEventCreate(void **e, unsigned flags) {
    record("cuEventCreate");
    A(1, flags);
    FORCED("cuEventCreate");
    *e = (void *)(uintptr_t)out_u64[0];
    return 0;
}
static CUresult cuEventDestroy_v2(void *e) {
    record("cuEventDestroy");
    A(0, e);
    FORCED("cuEventDestroy");
    return 0;
}
static CUresult cuEventRecord(void *e, void *s) {
    record("cuEventRecord");
    A(0, e);
    A(1, s);
    FORCED("cuEventRecord");
    return 0;
}
static CUresult cuEventSynchronize(void *e) {
    record("cuEventSynchronize");
    A(0, e);
    FORCED("cuEventSynchronize");
    return 0;
}
static CUresult cuEventQuery(void *e) {
    record("cuEventQuery");
    A(0, e);
    FORCED("cuEventQuery");
    return 0;
}
static CUresult cuEventElapsedTime(float *ms, void *start, void *end) {
    record("cuEventElapsedTime");
    A(1, start);
    A(2, end);
    FORCED("cuEventElapsedTime");
    *ms = out_f32;
    return 0;
}

/* ---- modules and launches ---- */

static const char fake_error_log[] = "fake ptxas error: line 7: unknown instruction 'frobnicate'";
static const char fake_info_log[] = "fake ptxas info: used 0 registers";

static void write_log(unsigned n, const int *opts, void **vals, int bufOpt, int sizeOpt, const char *text) {
    char *buf = NULL;
    int sizeIdx = -1;
    for (unsigned i = 0; i < n; i++) {
        if (opts[i] == bufOpt)
            buf = (char *)vals[i];
        if (opts[i] == sizeOpt)
            sizeIdx = (int)i;
    }
    if (!buf || sizeIdx < 0)
        return;
    size_t cap = (size_t)(uintptr_t)vals[sizeIdx];
    if (cap == 0)
        return;
    snprintf(buf, cap, "%s", text);
    size_t used = strlen(buf) + 1;
    vals[sizeIdx] = (void *)(uintptr_t)used;
}

static CUresult cuModuleLoadDataEx(void **m, const void *image, unsigned n, int *opts, void **vals) {
    record("cuModuleLoadDataEx");
    A(1, image);
    A(2, n);
    for (unsigned i = 0; i < n && i < 8; i++)
        A(4 + i, opts[i]);
    const char *text = (const char *)image;
    set_blob(image, strlen(text));
    FORCED("cuModuleLoadDataEx");
    if (strstr(text, "FAKE_JIT_ERROR")) {
        write_log(n, opts, vals, 5, 6, fake_error_log);
        write_log(n, opts, vals, 3, 4, fake_info_log);
        return CUDA_ERROR_INVALID_PTX;
    }
    *m = (void *)(uintptr_t)out_u64[0];
    return 0;
}
static CUresult cuModuleUnload(void *m) {
    record("cuModuleUnload");
    A(0, m);
    FORCED("cuModuleUnload");
    return 0;
}
static CUresult cuModuleGetFunction(void **f, void *m, const char *name) {
    record("cuModuleGetFunction");
    A(1, m);
    set_blob(name, strlen(name));
    FORCED("cuModuleGetFunction");
    if (strcmp(name, "no_such_kernel") == 0)
        return CUDA_ERROR_NOT_FOUND;
    *f = (void *)(uintptr_t)out_u64[0];
    return 0;
}
static CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shmem, void *s, void **params, void **extra) {
    record("cuLaunchKernel");
    A(0, f);
    A(1, gx);
    A(2, gy);
    A(3, gz);
    A(4, bx);
    A(5, by);
    A(6, bz);
    A(7, shmem);
    A(8, s);
    A(9, params);
    A(10, extra);
    blob_len = 0;
    if (params)
        set_blob(params[0], 64);
    FORCED("cuLaunchKernel");
    if (extra)
        return CUDA_ERROR_INVALID_VALUE;
    return 0;
}

typedef struct {
    int id;
    char pad[4];
    union {
        char pad[64];
        int programmaticStreamSerializationAllowed;
    } value;
} launch_attr_t;

typedef struct {
    unsigned gridDimX, gridDimY, gridDimZ;
    unsigned blockDimX, blockDimY, blockDimZ;
    unsigned sharedMemBytes;
    void *hStream;
    launch_attr_t *attrs;
    unsigned numAttrs;
} launch_config_t;

/* Arguments 0-8 as cuLaunchKernel's (f, grid, block, shmem, stream), 9
 * kernelParams, 10 extra, 11 numAttrs, 12 attrs[0].id, 13 its int value,
 * 14 sizeof(launch_config_t) << 32 | sizeof(launch_attr_t). */
static CUresult cuLaunchKernelEx(const launch_config_t *c, void *f, void **params, void **extra) {
    record("cuLaunchKernelEx");
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    A(0, f);
    A(1, c->gridDimX);
    A(2, c->gridDimY);
    A(3, c->gridDimZ);
    A(4, c->blockDimX);
    A(5, c->blockDimY);
    A(6, c->blockDimZ);
    A(7, c->sharedMemBytes);
    A(8, c->hStream);
    A(9, params);
    A(10, extra);
    A(11, c->numAttrs);
    if (c->numAttrs > 0) {
        A(12, c->attrs[0].id);
        A(13, c->attrs[0].value.programmaticStreamSerializationAllowed);
    }
    A(14, (u64)sizeof(launch_config_t) << 32 | sizeof(launch_attr_t));
    blob_len = 0;
    if (params)
        set_blob(params[0], 64);
    FORCED("cuLaunchKernelEx");
    if (extra || (c->numAttrs > 0 && !c->attrs))
        return CUDA_ERROR_INVALID_VALUE;
    return 0;
}

/* ---- memory ---- */

static CUresult cuMemGetInfo_v2(size_t *free, size_t *total) {
    record("cuMemGetInfo");
    FORCED("cuMemGetInfo");
    *free = out_u64[0];
    *total = out_u64[1];
    return 0;
}
static CUresult cuMemAlloc_v2(u64 *p, size_t n) {
    record("cuMemAlloc");
    A(1, n);
    FORCED("cuMemAlloc");
    *p = out_u64[0];
    return 0;
}
static CUresult cuMemFree_v2(u64 p) {
    record("cuMemFree");
    A(0, p);
    FORCED("cuMemFree");
    return 0;
}
static CUresult cuMemAllocManaged(u64 *p, size_t n, unsigned flags) {
    record("cuMemAllocManaged");
    A(1, n);
    A(2, flags);
    FORCED("cuMemAllocManaged");
    *p = out_u64[0];
    return 0;
}
static CUresult cuMemPrefetchAsync(u64 p, size_t n, int dev, void *s) {
    record("cuMemPrefetchAsync");
    A(0, p);
    A(1, n);
    A(2, (i64)dev);
    A(3, s);
    FORCED("cuMemPrefetchAsync");
    return 0;
}
/* Host memory: the fake hands out a static buffer of its own (the test
   reads it back through the pointer), and a device address of
   out_u64[1] + the offset into it. */
static unsigned char host_mem[256];
static CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags) {
    record("cuMemHostAlloc");
    A(1, n);
    A(2, flags);
    FORCED("cuMemHostAlloc");
    if (n > sizeof host_mem)
        return CUDA_ERROR_INVALID_VALUE;
    memset(host_mem, 0xA5, sizeof host_mem);
    *p = host_mem;
    return 0;
}
static CUresult cuMemHostGetDevicePointer_v2(u64 *d, void *p, unsigned flags) {
    record("cuMemHostGetDevicePointer");
    A(1, p);
    A(2, flags);
    FORCED("cuMemHostGetDevicePointer");
    *d = out_u64[1] + (u64)((unsigned char *)p - host_mem);
    return 0;
}
static CUresult cuMemFreeHost(void *p) {
    record("cuMemFreeHost");
    A(0, p);
    FORCED("cuMemFreeHost");
    return 0;
}
static CUresult cuMemcpyHtoD_v2(u64 dst, const void *src, size_t n) {
    record("cuMemcpyHtoD");
    A(0, dst);
    A(1, src);
    A(2, n);
    set_blob(src, n);
    FORCED("cuMemcpyHtoD");
    return 0;
}
static void fill(void *dst, size_t n) {
    unsigned char *d = dst;
    for (size_t i = 0; i < n; i++)
        d[i] = (unsigned char)(out_u64[0] + 7 * i);
}
static CUresult cuMemcpyDtoH_v2(void *dst, u64 src, size_t n) {
    record("cuMemcpyDtoH");
    A(0, dst);
    A(1, src);
    A(2, n);
    FORCED("cuMemcpyDtoH");
    fill(dst, n);
    return 0;
}
static CUresult cuMemcpyDtoD_v2(u64 dst, u64 src, size_t n) {
    record("cuMemcpyDtoD");
    A(0, dst);
    A(1, src);
    A(2, n);
    FORCED("cuMemcpyDtoD");
    return 0;
}
static CUresult cuMemcpyHtoDAsync_v2(u64 dst, const void *src, size_t n, void *s) {
    record("cuMemcpyHtoDAsync");
    A(0, dst);
    A(1, src);
    A(2, n);
    A(3, s);
    set_blob(src, n);
    FORCED("cuMemcpyHtoDAsync");
    return 0;
}
static CUresult cuMemcpyDtoHAsync_v2(void *dst, u64 src, size_t n, void *s) {
    record("cuMemcpyDtoHAsync");
    A(0, dst);
    A(1, src);
    A(2, n);
    A(3, s);
    FORCED("cuMemcpyDtoHAsync");
    fill(dst, n);
    return 0;
}
static CUresult cuMemcpyDtoDAsync_v2(u64 dst, u64 src, size_t n, void *s) {
    record("cuMemcpyDtoDAsync");
    A(0, dst);
    A(1, src);
    A(2, n);
    A(3, s);
    FORCED("cuMemcpyDtoDAsync");
    return 0;
}
static CUresult cuMemsetD8_v2(u64 dst, unsigned char v, size_t n) {
    record("cuMemsetD8");
    A(0, dst);
    A(1, v);
    A(2, n);
    FORCED("cuMemsetD8");
    return 0;
}
static CUresult cuMemsetD32_v2(u64 dst, unsigned v, size_t n) {
    record("cuMemsetD32");
    A(0, dst);
    A(1, v);
    A(2, n);
    FORCED("cuMemsetD32");
    return 0;
}
static CUresult cuMemsetD8Async(u64 dst, unsigned char v, size_t n, void *s) {
    record("cuMemsetD8Async");
    A(0, dst);
    A(1, v);
    A(2, n);
    A(3, s);
    FORCED("cuMemsetD8Async");
    return 0;
}
static CUresult cuMemsetD32Async(u64 dst, unsigned v, size_t n, void *s) {
    record("cuMemsetD32Async");
    A(0, dst);
    A(1, v);
    A(2, n);
    A(3, s);
    FORCED("cuMemsetD32Async");
    return 0;
}
static CUresult cuPointerGetAttribute(void *data, int attr, u64 p) {
    record("cuPointerGetAttribute");
    A(1, attr);
    A(2, p);
    FORCED("cuPointerGetAttribute");
    switch (attr) {
    case 2: /* memory type: unsigned int */
    case 9: /* device ordinal: int */
        *(unsigned *)data = (unsigned)out_u64[0];
        break;
    case 13: /* mapped: bool */
        *(unsigned char *)data = out_u64[0] != 0;
        break;
    default: /* context, range start, range size: 8 bytes */
        *(u64 *)data = out_u64[0];
    }
    return 0;
}

/* ---- virtual memory management ---- */

static void decode_prop(const prop_t *p) {
    A(4, p->type);
    A(5, p->requestedHandleTypes);
    A(6, p->location.type);
    A(7, p->location.id);
    A(8, p->win32HandleMetaData);
    A(9, p->allocFlags.compressionType);
    A(10, p->allocFlags.gpuDirectRDMACapable);
    A(11, p->allocFlags.usage);
    set_blob(p, sizeof *p);
}
static void decode_mcprop(const mcprop_t *p) {
    A(4, p->numDevices);
    A(5, p->size);
    A(6, p->handleTypes);
    A(7, p->flags);
    set_blob(p, sizeof *p);
}

static CUresult cuMemGetAllocationGranularity(size_t *g, const prop_t *prop, int option) {
    record("cuMemGetAllocationGranularity");
    A(2, option);
    decode_prop(prop);
    FORCED("cuMemGetAllocationGranularity");
    *g = out_u64[0];
    return 0;
}
static CUresult cuMemCreate(u64 *h, size_t size, const prop_t *prop, u64 flags) {
    record("cuMemCreate");
    A(1, size);
    A(3, flags);
    decode_prop(prop);
    FORCED("cuMemCreate");
    *h = out_u64[0];
    return 0;
}
static CUresult cuMemRelease(u64 h) {
    record("cuMemRelease");
    A(0, h);
    FORCED("cuMemRelease");
    return 0;
}
static CUresult cuMemAddressReserve(u64 *p, size_t size, size_t align, u64 addr, u64 flags) {
    record("cuMemAddressReserve");
    A(1, size);
    A(2, align);
    A(3, addr);
    A(4, flags);
    FORCED("cuMemAddressReserve");
    *p = out_u64[0];
    return 0;
}
static CUresult cuMemAddressFree(u64 p, size_t size) {
    record("cuMemAddressFree");
    A(0, p);
    A(1, size);
    FORCED("cuMemAddressFree");
    return 0;
}
static CUresult cuMemMap(u64 p, size_t size, size_t offset, u64 h, u64 flags) {
    record("cuMemMap");
    A(0, p);
    A(1, size);
    A(2, offset);
    A(3, h);
    A(4, flags);
    FORCED("cuMemMap");
    return 0;
}
static CUresult cuMemUnmap(u64 p, size_t size) {
    record("cuMemUnmap");
    A(0, p);
    A(1, size);
    FORCED("cuMemUnmap");
    return 0;
}
static CUresult cuMemSetAccess(u64 p, size_t size, const access_t *desc, size_t count) {
    record("cuMemSetAccess");
    A(0, p);
    A(1, size);
    A(3, count);
    /* args 4.. : type, id, flags of each descriptor, up to four */
    for (size_t i = 0; i < count && i < 4; i++) {
        A(4 + 3 * i, desc[i].location.type);
        A(5 + 3 * i, desc[i].location.id);
        A(6 + 3 * i, desc[i].flags);
    }
    set_blob(desc, count * sizeof *desc);
    FORCED("cuMemSetAccess");
    return 0;
}
static CUresult cuMemGetAccess(u64 *flags, const loc_t *loc, u64 p) {
    record("cuMemGetAccess");
    A(2, p);
    A(4, loc->type);
    A(5, loc->id);
    FORCED("cuMemGetAccess");
    *flags = out_u64[0];
    return 0;
}
static CUresult cuMemGetAllocationPropertiesFromHandle(prop_t *prop, u64 h) {
    record("cuMemGetAllocationPropertiesFromHandle");
    A(1, h);
    FORCED("cuMemGetAllocationPropertiesFromHandle");
    memset(prop, 0, sizeof *prop);
    prop->type = 1;
    prop->requestedHandleTypes = (int)out_u64[0];
    prop->location.type = 1;
    prop->location.id = (int)out_u64[1];
    prop->allocFlags.compressionType = 1;
    prop->allocFlags.gpuDirectRDMACapable = 1;
    prop->allocFlags.usage = (unsigned short)out_u64[2];
    return 0;
}
static CUresult cuMemRetainAllocationHandle(u64 *h, void *addr) {
    record("cuMemRetainAllocationHandle");
    A(1, addr);
    FORCED("cuMemRetainAllocationHandle");
    *h = out_u64[0];
    return 0;
}
static CUresult cuMemExportToShareableHandle(void *sh, u64 h, int type, u64 flags) {
    record("cuMemExportToShareableHandle");
    A(1, h);
    A(2, type);
    A(3, flags);
    FORCED("cuMemExportToShareableHandle");
    if (type == 1)
        *(int *)sh = (int)out_u64[0];
    else if (type == 8)
        memcpy(sh, fabric_out, 64);
    else
        return CUDA_ERROR_INVALID_VALUE;
    return 0;
}
static CUresult cuMemImportFromShareableHandle(u64 *h, void *os, int type) {
    record("cuMemImportFromShareableHandle");
    A(1, os);
    A(2, type);
    blob_len = 0;
    if (type == 8)
        set_blob(os, 64);
    FORCED("cuMemImportFromShareableHandle");
    *h = out_u64[0];
    return 0;
}

/* ---- multicast ---- */

static CUresult cuMulticastGetGranularity(size_t *g, const mcprop_t *prop, int option) {
    record("cuMulticastGetGranularity");
    A(2, option);
    decode_mcprop(prop);
    FORCED("cuMulticastGetGranularity");
    *g = out_u64[0];
    return 0;
}
static CUresult cuMulticastCreate(u64 *h, const mcprop_t *prop) {
    record("cuMulticastCreate");
    decode_mcprop(prop);
    FORCED("cuMulticastCreate");
    *h = out_u64[0];
    return 0;
}
static CUresult cuMulticastAddDevice(u64 mc, int dev) {
    record("cuMulticastAddDevice");
    A(0, mc);
    A(1, dev);
    FORCED("cuMulticastAddDevice");
    return 0;
}
static CUresult cuMulticastBindMem(u64 mc, size_t mcOff, u64 mem, size_t memOff, size_t size, u64 flags) {
    record("cuMulticastBindMem");
    A(0, mc);
    A(1, mcOff);
    A(2, mem);
    A(3, memOff);
    A(4, size);
    A(5, flags);
    FORCED("cuMulticastBindMem");
    return 0;
}
static CUresult cuMulticastBindAddr(u64 mc, size_t mcOff, u64 p, size_t size, u64 flags) {
    record("cuMulticastBindAddr");
    A(0, mc);
    A(1, mcOff);
    A(2, p);
    A(3, size);
    A(4, flags);
    FORCED("cuMulticastBindAddr");
    return 0;
}
static CUresult cuMulticastUnbind(u64 mc, int dev, size_t mcOff, size_t size) {
    record("cuMulticastUnbind");
    A(0, mc);
    A(1, dev);
    A(2, mcOff);
    A(3, size);
    FORCED("cuMulticastUnbind");
    return 0;
}

/* ---- the entry point table: name, function, version of its ABI ---- */

struct entry {
    const char *name;
    void *fn;
    int version;
};

#define E(name, fn, v) {name, (void *)fn, v}
static const struct entry table[] = {
    E("cuGetErrorName", cuGetErrorName, 6000),
    E("cuGetErrorString", cuGetErrorString, 6000),
    E("cuInit", cuInit, 2000),
    E("cuDriverGetVersion", cuDriverGetVersion, 2020),
    E("cuDeviceGetCount", cuDeviceGetCount, 2000),
    E("cuDeviceGet", cuDeviceGet, 2000),
    E("cuDeviceGetName", cuDeviceGetName, 2000),
    E("cuDeviceGetAttribute", cuDeviceGetAttribute, 2000),
    E("cuDeviceTotalMem", cuDeviceTotalMem_v2, 3020),
    E("cuDeviceCanAccessPeer", cuDeviceCanAccessPeer, 4000),
    E("cuDeviceGetPCIBusId", cuDeviceGetPCIBusId, 4010),
    E("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain, 7000),
    E("cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease_v2, 11000),
    E("cuCtxSetCurrent", cuCtxSetCurrent, 4000),
    E("cuCtxGetCurrent", cuCtxGetCurrent, 4000),
    E("cuCtxSynchronize", cuCtxSynchronize, 2000),
    E("cuStreamCreate", cuStreamCreate, 2000),
    E("cuStreamDestroy", cuStreamDestroy_v2, 4000),
    E("cuStreamSynchronize", cuStreamSynchronize, 2000),
    E("cuStreamQuery", cuStreamQuery, 2000),
    E("cuStreamGetCtx", cuStreamGetCtx, 9020),
    E("cuStreamWaitEvent", cuStreamWaitEvent, 3020),
    E("cuStreamBeginCapture", cuStreamBeginCapture_v2, 10010),
    E("cuStreamEndCapture", cuStreamEndCapture, 10000),
    E("cuGraphInstantiateWithFlags", cuGraphInstantiateWithFlags, 11040),
    E("cuGraphLaunch", cuGraphLaunch, 10000),
    E("cuGraphExecDestroy", cuGraphExecDestroy, 10000),
    E("cuGraphDestroy", cuGraphDestroy, 10000),
    E("cuEventCreate", cuEventCreate, 2000),
    E("cuEventDestroy", cuEventDestroy_v2, 4000),
    E("cuEventRecord", cuEventRecord, 2000),
    E("cuEventSynchronize", cuEventSynchronize, 2000),
    E("cuEventQuery", cuEventQuery, 2000),
    E("cuEventElapsedTime", cuEventElapsedTime, 2000),
    E("cuModuleLoadDataEx", cuModuleLoadDataEx, 2010),
    E("cuModuleUnload", cuModuleUnload, 2000),
    E("cuModuleGetFunction", cuModuleGetFunction, 2000),
    E("cuLaunchKernel", cuLaunchKernel, 4000),
    E("cuLaunchKernelEx", cuLaunchKernelEx, 11060),
    E("cuMemGetInfo", cuMemGetInfo_v2, 3020),
    E("cuMemAlloc", cuMemAlloc_v2, 3020),
    E("cuMemFree", cuMemFree_v2, 3020),
    E("cuMemAllocManaged", cuMemAllocManaged, 6000),
    E("cuMemPrefetchAsync", cuMemPrefetchAsync, 8000),
    E("cuMemHostAlloc", cuMemHostAlloc, 2020),
    E("cuMemHostGetDevicePointer", cuMemHostGetDevicePointer_v2, 3020),
    E("cuMemFreeHost", cuMemFreeHost, 2000),
    E("cuMemcpyHtoD", cuMemcpyHtoD_v2, 3020),
    E("cuMemcpyDtoH", cuMemcpyDtoH_v2, 3020),
    E("cuMemcpyDtoD", cuMemcpyDtoD_v2, 3020),
    E("cuMemcpyHtoDAsync", cuMemcpyHtoDAsync_v2, 3020),
    E("cuMemcpyDtoHAsync", cuMemcpyDtoHAsync_v2, 3020),
    E("cuMemcpyDtoDAsync", cuMemcpyDtoDAsync_v2, 3020),
    E("cuMemsetD8", cuMemsetD8_v2, 3020),
    E("cuMemsetD32", cuMemsetD32_v2, 3020),
    E("cuMemsetD8Async", cuMemsetD8Async, 3020),
    E("cuMemsetD32Async", cuMemsetD32Async, 3020),
    E("cuPointerGetAttribute", cuPointerGetAttribute, 4000),
    E("cuMemGetAllocationGranularity", cuMemGetAllocationGranularity, 10020),
    E("cuMemCreate", cuMemCreate, 10020),
    E("cuMemRelease", cuMemRelease, 10020),
    E("cuMemAddressReserve", cuMemAddressReserve, 10020),
    E("cuMemAddressFree", cuMemAddressFree, 10020),
    E("cuMemMap", cuMemMap, 10020),
    E("cuMemUnmap", cuMemUnmap, 10020),
    E("cuMemSetAccess", cuMemSetAccess, 10020),
    E("cuMemGetAccess", cuMemGetAccess, 10020),
    E("cuMemGetAllocationPropertiesFromHandle", cuMemGetAllocationPropertiesFromHandle, 10020),
    E("cuMemRetainAllocationHandle", cuMemRetainAllocationHandle, 11000),
    E("cuMemExportToShareableHandle", cuMemExportToShareableHandle, 10020),
    E("cuMemImportFromShareableHandle", cuMemImportFromShareableHandle, 10020),
    E("cuMulticastGetGranularity", cuMulticastGetGranularity, 12010),
    E("cuMulticastCreate", cuMulticastCreate, 12010),
    E("cuMulticastAddDevice", cuMulticastAddDevice, 12010),
    E("cuMulticastBindMem", cuMulticastBindMem, 12010),
    E("cuMulticastBindAddr", cuMulticastBindAddr, 12010),
    E("cuMulticastUnbind", cuMulticastUnbind, 12010),
};

/* lookup: 0 found, 1 symbol not found, 2 version not sufficient */
__attribute__((unused)) static int lookup(const char *sym, void **pfn, int version, u64 flags) {
    struct named *r = find_or_add(reqs, &nreqs, sym);
    if (r) {
        r->value = version;
        r->extra = flags;
        r->count++;
    }
    *pfn = NULL;
    struct named *m = find(missing, nmissing, sym);
    if (m)
        return m->value;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(table[i].name, sym) != 0)
            continue;
        if (version < table[i].version)
            return 2;
        *pfn = table[i].fn;
        return 0;
    }
    return 1;
}

#ifndef FAKE_NO_GPA
#ifndef FAKE_NO_V2
CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int version, u64 flags, int *status) {
    gpa_used = 2;
    int s = lookup(sym, pfn, version, flags);
    if (status)
        *status = s;
    return s == 0 ? 0 : CUDA_ERROR_NOT_FOUND;
}
#endif
CUresult cuGetProcAddress(const char *sym, void **pfn, int version, u64 flags) {
    if (gpa_used == 0)
        gpa_used = 1;
    return lookup(sym, pfn, version, flags) == 0 ? 0 : CUDA_ERROR_NOT_FOUND;
}
#endif
