/*
 * cuda_nccl.cu - all-reduce over GPUs with NCCL.
 *
 * In one process (MirroredStrategy over cuda:0..N-1): one communicator per
 * device, made once per device list with ncclCommInitAll and kept; each call
 * queues one ncclAllReduce per tensor per device, on the device's stream,
 * between ncclGroupStart and ncclGroupEnd, so NCCL runs them together and
 * the Lua thread does not wait. A single GPU is a valid communicator.
 *
 * Across processes (the multi-worker strategy): rank 0 makes an id with
 * ncclGetUniqueId, the cluster's rendezvous hands it to every rank, and each
 * makes its communicator with ncclCommInitRank.
 *
 * NCCL is opened with dlopen (libnccl.so.2) the first time it is needed, so a
 * machine without it still trains on one GPU (an all-reduce over one GPU is
 * then the identity); over several, the error says what is missing.
 */
#include "cuda_common.cuh"

#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct {
    pthread_once_t once;
    int ok, version;
    char why[300];
    decltype(&ncclGetVersion) get_version;
    decltype(&ncclGetUniqueId) get_unique_id;
    decltype(&ncclCommInitAll) comm_init_all;
    decltype(&ncclCommInitRank) comm_init_rank;
    decltype(&ncclCommDestroy) comm_destroy;
    decltype(&ncclAllReduce) all_reduce;
    decltype(&ncclGroupStart) group_start;
    decltype(&ncclGroupEnd) group_end;
    decltype(&ncclGetErrorString) error_string;
} nccl = {PTHREAD_ONCE_INIT, 0, 0, "", 0, 0, 0, 0, 0, 0, 0, 0, 0};

static void nccl_open(void) {
    static const char *const libs[] = {"libnccl.so.2", "libnccl.so"};
    const cu_sym syms[] = {
        {(void **)&nccl.get_version, "ncclGetVersion"},     {(void **)&nccl.get_unique_id, "ncclGetUniqueId"},
        {(void **)&nccl.comm_init_all, "ncclCommInitAll"},  {(void **)&nccl.comm_init_rank, "ncclCommInitRank"},
        {(void **)&nccl.comm_destroy, "ncclCommDestroy"},   {(void **)&nccl.all_reduce, "ncclAllReduce"},
        {(void **)&nccl.group_start, "ncclGroupStart"},     {(void **)&nccl.group_end, "ncclGroupEnd"},
        {(void **)&nccl.error_string, "ncclGetErrorString"},
    };
    if (!cu_open_library("NCCL", libs, 2, syms, 9, nccl.why, sizeof nccl.why)) return;
    if (nccl.get_version(&nccl.version) != ncclSuccess) nccl.version = 0;
    nccl.ok = 1;
}

static int nccl_ready(const char *what) {
    pthread_once(&nccl.once, nccl_open);
    if (!nccl.ok) return cu_fail(LD_EDEVICE, "%s needs NCCL: %s", what, nccl.why);
    return LD_OK;
}

static int nccl_failed(cu_dev *cd, const char *call, ncclResult_t r) {
    char msg[400];
    snprintf(msg, sizeof msg, "%s%s%s failed: %s (NCCL error %d)", cd ? cd->dev->name : "", cd ? ": " : "", call,
             nccl.error_string ? nccl.error_string(r) : "", (int)r);
    return cd ? cu_record_msg(cd, msg) : cu_fail(LD_EDEVICE, "%s", msg);
}

/* ncclAvg arrived in NCCL 2.10; before it, sum and scale */
static int have_avg(void) { return nccl.version >= 21000; }

__global__ void k_scale(float *x, float s, int64_t n) {
    CU_LOOP(i, n) x[i] *= s;
}

/* ================================================================ in one process */
#define MAX_SETS 8
struct comm_set {
    int n;
    int ordinals[64];
    ncclComm_t comms[64];
};
static comm_set sets[MAX_SETS];
static int n_sets;
static pthread_mutex_t sets_mu = PTHREAD_MUTEX_INITIALIZER;

/* The communicators for this device list, made on first use. */
static comm_set *set_for(int n, ld_device *const *devs) {
    pthread_mutex_lock(&sets_mu);
    for (int s = 0; s < n_sets; s++) {
        if (sets[s].n != n) continue;
        int same = 1;
        for (int r = 0; r < n && same; r++) same = sets[s].ordinals[r] == cu_of(devs[r])->ordinal;
        if (same) { pthread_mutex_unlock(&sets_mu); return &sets[s]; }
    }
    if (n_sets == MAX_SETS) {   /* forget the oldest */
        for (int r = 0; r < sets[0].n; r++) nccl.comm_destroy(sets[0].comms[r]);
        memmove(&sets[0], &sets[1], sizeof sets[0] * (MAX_SETS - 1));
        n_sets--;
    }
    comm_set *cs = &sets[n_sets];
    cs->n = n;
    for (int r = 0; r < n; r++) cs->ordinals[r] = cu_of(devs[r])->ordinal;
    ncclResult_t res = nccl.comm_init_all(cs->comms, n, cs->ordinals);
    if (res != ncclSuccess) {
        pthread_mutex_unlock(&sets_mu);
        nccl_failed(NULL, "ncclCommInitAll", res);
        return NULL;
    }
    n_sets++;
    pthread_mutex_unlock(&sets_mu);
    return cs;
}

int cu_all_reduce(int n, ld_device *const *devs, int k, ld_tensor *const *t, int mean) {
    if (n < 1 || n > 64) return cu_fail(LD_EARG, "all_reduce: %d devices (1..64 allowed)", n);
    for (int r = 0; r < n; r++) {
        if (devs[r]->kind != LD_DEV_CUDA) return cu_fail(LD_EDEVICE, "all_reduce: %s is not a CUDA device", devs[r]->name);
        for (int q = 0; q < r; q++)
            if (devs[q] == devs[r]) return cu_fail(LD_EARG, "all_reduce: %s is listed twice", devs[r]->name);
    }
    if (k <= 0) return LD_OK;
    if (nccl_ready("all_reduce over CUDA devices")) {
        if (n > 1) return LD_EDEVICE;
        cu_host->clear_error();   /* one GPU without NCCL: the sum over one replica is itself */
        return LD_OK;
    }
    cu_dev *cds[64];
    for (int r = 0; r < n; r++)
        if (!(cds[r] = cu_begin(devs[r]))) return LD_EDEVICE;
    comm_set *cs = set_for(n, devs);
    if (!cs) return LD_EDEVICE;
    ncclRedOp_t op = mean && have_avg() ? ncclAvg : ncclSum;
    ncclResult_t res = nccl.group_start();
    if (res != ncclSuccess) return nccl_failed(NULL, "ncclGroupStart", res);
    int st = LD_OK;
    for (int r = 0; r < n && st == LD_OK; r++)
        for (int i = 0; i < k; i++) {
            ld_tensor *x = t[r * k + i];
            int64_t cnt = cu_numel(x);
            if (cnt == 0) continue;
            float *p = (float *)x->storage->data + x->offset;
            res = nccl.all_reduce(p, p, (size_t)cnt, ncclFloat32, op, cs->comms[r], cds[r]->stream);
            if (res != ncclSuccess) { st = nccl_failed(cds[r], "ncclAllReduce", res); break; }
        }
    res = nccl.group_end();   /* always close the group, even after a failure */
    if (st) return st;
    if (res != ncclSuccess) return nccl_failed(NULL, "ncclGroupEnd", res);
    if (mean && !have_avg() && n > 1) {
        for (int r = 0; r < n; r++) {
            if (!cu_begin(devs[r])) return LD_EDEVICE;
            for (int i = 0; i < k; i++) {
                ld_tensor *x = t[r * k + i];
                int64_t cnt = cu_numel(x);
                if (cnt == 0) continue;
                k_scale<<<cu_grid(cnt, 256), 256, 0, cds[r]->stream>>>((float *)x->storage->data + x->offset,
                                                                        1.0f / (float)n, cnt);
                if (cu_launched(cds[r], "all_reduce kernel (mean)")) return LD_EDEVICE;
            }
        }
    }
    return LD_OK;
}

/* ================================================================ across processes */
struct rank_comm {
    ncclComm_t comm;
    ld_device *dev;
    int nranks;
};

int cu_nccl_unique_id(unsigned char id[LD_NCCL_ID_BYTES]) {
    static_assert(sizeof(ncclUniqueId) == LD_NCCL_ID_BYTES, "ncclUniqueId changed size");
    if (nccl_ready("ncclGetUniqueId")) return LD_EDEVICE;
    ncclUniqueId u;
    ncclResult_t res = nccl.get_unique_id(&u);
    if (res != ncclSuccess) return nccl_failed(NULL, "ncclGetUniqueId", res);
    memcpy(id, &u, sizeof u);
    return LD_OK;
}

int cu_nccl_comm_init_rank(ld_device *d, const unsigned char id[LD_NCCL_ID_BYTES], int nranks, int rank,
                           void **out) {
    *out = NULL;
    if (d->kind != LD_DEV_CUDA) return cu_fail(LD_EDEVICE, "ncclCommInitRank: %s is not a CUDA device", d->name);
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return cu_fail(LD_EARG, "ncclCommInitRank: rank %d of %d is out of range", rank, nranks);
    if (nccl_ready("ncclCommInitRank")) return LD_EDEVICE;
    cu_dev *cd = cu_begin(d);   /* the communicator belongs to the current device */
    if (!cd) return LD_EDEVICE;
    rank_comm *rc = (rank_comm *)calloc(1, sizeof *rc);
    if (!rc) return cu_fail(LD_ENOMEM, "out of memory");
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclResult_t res = nccl.comm_init_rank(&rc->comm, nranks, u, rank);
    if (res != ncclSuccess) {
        free(rc);
        return nccl_failed(cd, "ncclCommInitRank", res);
    }
    rc->dev = d;
    rc->nranks = nranks;
    *out = rc;
    return LD_OK;
}

int cu_nccl_comm_all_reduce(void *comm, int k, ld_tensor *const *t, int mean) {
    rank_comm *rc = (rank_comm *)comm;
    if (!rc) return cu_fail(LD_EARG, "all_reduce: no communicator");
    cu_dev *cd = cu_begin(rc->dev);
    if (!cd) return LD_EDEVICE;
    for (int i = 0; i < k; i++)
        if (t[i]->storage->device != rc->dev || t[i]->dtype != LD_F32 || !cu_is_contiguous(t[i]))
            return cu_fail(LD_EARG, "all_reduce: tensor %d is not a contiguous float32 tensor on %s", i + 1, rc->dev->name);
    ncclRedOp_t op = mean && have_avg() ? ncclAvg : ncclSum;
    ncclResult_t res = nccl.group_start();
    if (res != ncclSuccess) return nccl_failed(cd, "ncclGroupStart", res);
    int st = LD_OK;
    for (int i = 0; i < k; i++) {
        int64_t cnt = cu_numel(t[i]);
        if (cnt == 0) continue;
        float *p = (float *)t[i]->storage->data + t[i]->offset;
        res = nccl.all_reduce(p, p, (size_t)cnt, ncclFloat32, op, rc->comm, cd->stream);
        if (res != ncclSuccess) { st = nccl_failed(cd, "ncclAllReduce", res); break; }
    }
    res = nccl.group_end();
    if (st) return st;
    if (res != ncclSuccess) return nccl_failed(cd, "ncclGroupEnd", res);
    if (mean && !have_avg() && rc->nranks > 1)
        for (int i = 0; i < k; i++) {
            int64_t cnt = cu_numel(t[i]);
            if (cnt == 0) continue;
            k_scale<<<cu_grid(cnt, 256), 256, 0, cd->stream>>>((float *)t[i]->storage->data + t[i]->offset,
                                                                1.0f / (float)rc->nranks, cnt);
            if (cu_launched(cd, "all_reduce kernel (mean)")) return LD_EDEVICE;
        }
    return LD_OK;
}

void cu_nccl_comm_destroy(void *comm) {
    rank_comm *rc = (rank_comm *)comm;
    if (!rc) return;
    if (nccl.comm_destroy) nccl.comm_destroy(rc->comm);
    free(rc);
}
