/* A stand-in for the NVIDIA driver's libnvidia-ml.so.1 on machines without a GPU (tests and
 * benchmarks only). It exports the NVML functions preflight's NVML probe calls, with nvml.h's
 * signatures, struct layouts and return codes, and answers from a flat key=value file,
 * $PREFLIGHT_FAKE_DIR/nvml.kv (tests/fakes/fake_nvml.py writes it from a scenario's nvml.json):
 *
 *   init=9                       nvmlInit_v2's return code (absent: 0)
 *   driver=535.154.05            nvml_version=12.535.154.05      cuda=12020      count=8
 *   gpu.0.name=NVIDIA H100 ...   gpu.0.memory_total=<bytes>      gpu.0.mig_mode=1
 *   gpu.1.handle=!15             a value "!<code>" makes that call return <code>
 *
 * A GPU key that is absent answers NVML_ERROR_NOT_SUPPORTED. Without the file the library
 * behaves as a machine whose kernel driver is not loaded: nvmlInit_v2 returns
 * NVML_ERROR_DRIVER_NOT_LOADED. Built with -DFAKE_OLD_DRIVER it lacks the functions an old
 * driver lacks (nvmlDeviceGetMigMode, nvmlDeviceGetPciInfo_v3, nvmlSystemGetCudaDriverVersion_v2).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum nvmlReturn_enum {
    NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2, NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4, NVML_ERROR_ALREADY_INITIALIZED = 5, NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7, NVML_ERROR_INSUFFICIENT_POWER = 8, NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10, NVML_ERROR_IRQ_ISSUE = 11, NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13, NVML_ERROR_CORRUPTED_INFOROM = 14, NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16, NVML_ERROR_OPERATING_SYSTEM = 17, NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_IN_USE = 19, NVML_ERROR_MEMORY = 20, NVML_ERROR_NO_DATA = 21, NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

typedef struct nvmlDevice_st *nvmlDevice_t;
typedef enum nvmlEnableState_enum { NVML_FEATURE_DISABLED = 0, NVML_FEATURE_ENABLED = 1 } nvmlEnableState_t;

typedef struct nvmlPciInfo_st {
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct nvmlMemory_st {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

#define MAX_KEYS 2048
#define KEY_LEN 64
#define VALUE_LEN 256

static char keys[MAX_KEYS][KEY_LEN];
static char values[MAX_KEYS][VALUE_LEN];
static int n_keys;
static int refcount;

static const char *lookup(const char *key) {
    for (int i = 0; i < n_keys; i++)
        if (strcmp(keys[i], key) == 0)
            return values[i];
    return NULL;
}

/* 0: no file; 1: read */
static int load(void) {
    const char *dir = getenv("PREFLIGHT_FAKE_DIR");
    char path[4096];
    char line[KEY_LEN + VALUE_LEN + 2];
    n_keys = 0;
    if (dir == NULL || *dir == '\0')
        return 0;
    snprintf(path, sizeof path, "%s/nvml.kv", dir);
    FILE *fh = fopen(path, "r");
    if (fh == NULL)
        return 0;
    while (n_keys < MAX_KEYS && fgets(line, sizeof line, fh) != NULL) {
        char *eq = strchr(line, '=');
        if (eq == NULL || line[0] == '#')
            continue;
        *eq = '\0';
        char *value = eq + 1;
        value[strcspn(value, "\r\n")] = '\0';
        strncpy(keys[n_keys], line, KEY_LEN - 1);
        keys[n_keys][KEY_LEN - 1] = '\0';
        strncpy(values[n_keys], value, VALUE_LEN - 1);
        values[n_keys][VALUE_LEN - 1] = '\0';
        n_keys++;
    }
    fclose(fh);
    return 1;
}

/* the return code a value stands for: "!<code>" is that code, anything else success */
static nvmlReturn_t code_of(const char *value) {
    if (value == NULL)
        return NVML_ERROR_NOT_SUPPORTED;
    if (value[0] == '!')
        return (nvmlReturn_t)atoi(value + 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) {
    if (!load())
        return NVML_ERROR_DRIVER_NOT_LOADED;
    const char *init = lookup("init");
    if (init != NULL && atoi(init) != 0)
        return (nvmlReturn_t)atoi(init);
    refcount++;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }

nvmlReturn_t nvmlShutdown(void) {
    if (refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    refcount--;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt request issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires reset";
    case NVML_ERROR_OPERATING_SYSTEM: return "GPU access blocked by the operating system";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "Driver/library version mismatch";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    default: return "Unknown Error";
    }
}

static nvmlReturn_t system_text(const char *key, char *out, unsigned int length) {
    if (refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    const char *value = lookup(key);
    nvmlReturn_t rc = code_of(value);
    if (rc != NVML_SUCCESS)
        return rc;
    if (strlen(value) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(out, value);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    return system_text("driver", version, length);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    return system_text("nvml_version", version, length);
}

static nvmlReturn_t cuda_version(int *cuda) {
    if (refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (cuda == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    const char *value = lookup("cuda");
    if (value == NULL)
        return NVML_ERROR_LIBRARY_NOT_FOUND; /* what NVML says when libcuda.so.1 is absent */
    nvmlReturn_t rc = code_of(value);
    if (rc != NVML_SUCCESS)
        return rc;
    *cuda = atoi(value);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cuda) { return cuda_version(cuda); }
#ifndef FAKE_OLD_DRIVER
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cuda) { return cuda_version(cuda); }
#endif

static int gpu_count(void) {
    const char *value = lookup("count");
    return value == NULL || value[0] == '!' ? 0 : atoi(value);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = code_of(lookup("count") == NULL ? "0" : lookup("count"));
    if (rc != NVML_SUCCESS)
        return rc;
    *count = (unsigned int)gpu_count();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

/* a handle is the GPU's index + 1, as a pointer value */
static int index_of(nvmlDevice_t device) {
    intptr_t i = (intptr_t)device - 1;
    return i >= 0 && i < gpu_count() ? (int)i : -1;
}

static const char *gpu_value(nvmlDevice_t device, const char *field, nvmlReturn_t *rc) {
    char key[KEY_LEN];
    int i = index_of(device);
    if (refcount == 0) {
        *rc = NVML_ERROR_UNINITIALIZED;
        return NULL;
    }
    if (i < 0) {
        *rc = NVML_ERROR_INVALID_ARGUMENT;
        return NULL;
    }
    snprintf(key, sizeof key, "gpu.%d.%s", i, field);
    const char *value = lookup(key);
    *rc = code_of(value);
    return *rc == NVML_SUCCESS ? value : NULL;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    char key[KEY_LEN];
    if (refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (device == NULL || (int)index >= gpu_count())
        return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(key, sizeof key, "gpu.%u.handle", index);
    const char *value = lookup(key);
    if (value != NULL && code_of(value) != NVML_SUCCESS)
        return code_of(value);
    *device = (nvmlDevice_t)(intptr_t)(index + 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

static nvmlReturn_t device_text(nvmlDevice_t device, const char *field, char *out, unsigned int length) {
    nvmlReturn_t rc;
    const char *value = gpu_value(device, field, &rc);
    if (value == NULL)
        return rc;
    if (out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(out, value);
    return NVML_SUCCESS;
}

static nvmlReturn_t device_uint(nvmlDevice_t device, const char *field, unsigned int *out) {
    nvmlReturn_t rc;
    const char *value = gpu_value(device, field, &rc);
    if (value == NULL)
        return rc;
    if (out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *out = (unsigned int)strtoul(value, NULL, 10);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    return device_text(device, "name", name, length);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    return device_text(device, "uuid", uuid, length);
}

nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char *version, unsigned int length) {
    return device_text(device, "vbios", version, length);
}

#ifndef FAKE_OLD_DRIVER
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    nvmlReturn_t rc;
    const char *value = gpu_value(device, "pci_bus_id", &rc);
    if (value == NULL)
        return rc;
    if (pci == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busId, sizeof pci->busId, "%s", value);
    /* busIdLegacy: the domain in 4 digits (0000:1B:00.0) */
    const char *tail = strlen(value) > 8 ? value + strlen(value) - 12 : value;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%s", tail);
    sscanf(value, "%x:%x:%x", &pci->domain, &pci->bus, &pci->device);
    pci->pciDeviceId = 0x233010de; /* H100 SXM5 80GB, vendor 10de */
    return NVML_SUCCESS;
}
#endif

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode) {
    unsigned int value = 0;
    nvmlReturn_t rc = device_uint(device, "persistence", &value);
    if (rc == NVML_SUCCESS && mode != NULL)
        *mode = value ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return mode == NULL && rc == NVML_SUCCESS ? NVML_ERROR_INVALID_ARGUMENT : rc;
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *gen) {
    return device_uint(device, "pcie_gen", gen);
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *gen) {
    return device_uint(device, "pcie_gen_max", gen);
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *width) {
    return device_uint(device, "pcie_width", width);
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int *width) {
    return device_uint(device, "pcie_width_max", width);
}

#ifndef FAKE_OLD_DRIVER
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode) {
    nvmlReturn_t rc = device_uint(device, "mig_mode", currentMode);
    if (rc != NVML_SUCCESS)
        return rc;
    if (device_uint(device, "mig_mode_pending", pendingMode) != NVML_SUCCESS && pendingMode != NULL)
        *pendingMode = *currentMode;
    return NVML_SUCCESS;
}
#endif

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    nvmlReturn_t rc;
    const char *value = gpu_value(device, "memory_total", &rc);
    if (value == NULL)
        return rc;
    if (memory == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    memory->total = strtoull(value, NULL, 10);
    memory->used = 0;
    memory->free = memory->total;
    return NVML_SUCCESS;
}
