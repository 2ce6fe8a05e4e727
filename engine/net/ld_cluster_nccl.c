/* ld_cluster_nccl.c - the GPU path of a cluster: one NCCL communicator per
   process through the CUDA plugin, its unique id handed out over the ring. */
#include "ld_cluster_internal.h"
#include "ld_core.h"
#include "ld_device.h"
#include "cuda/ld_cuda.h"

#include <stdio.h>
#include <string.h>

static const ld_cuda_plugin *plugin(void) {
    ld_cuda_load();
    const ld_cuda_plugin *p = ld_cuda_plugin_get();
    if (!p || !p->nccl_unique_id || !p->nccl_comm_init_rank || !p->nccl_comm_all_reduce) {
        ld_fail(LD_EDEVICE, "NCCL across processes needs the CUDA plugin and a GPU (%s); "
                "use communication=\"ring\" to train on the CPUs", ld_device_note());
        return NULL;
    }
    return p;
}

int ld_cluster_nccl_init(ld_cluster *c, ld_device *dev, void **comm) {
    *comm = NULL;
    if (!dev || dev->kind != LD_DEV_CUDA)
        return ld_fail(LD_EDEVICE, "NCCL needs a CUDA device, got %s", dev ? dev->name : "none");
    const ld_cuda_plugin *p = plugin();
    /* every rank must take part in the broadcast, even one that lacks NCCL:
       rank 0 sends an all-zero id when it cannot make one */
    unsigned char id[LD_NCCL_ID_BYTES];
    memset(id, 0, sizeof id);
    int st = LD_OK;
    char why[400] = "";
    if (c->rank == 0) {
        if (!p) st = ld_error_status();
        else st = p->nccl_unique_id(id);
        if (st) snprintf(why, sizeof why, "%s", ld_error());
    }
    if (ld_cluster_broadcast(c, 0, id, sizeof id)) return ld_error_status();
    static const unsigned char zero[LD_NCCL_ID_BYTES];
    if (st) return ld_fail((ld_status)st, "%s", why);
    if (!memcmp(id, zero, sizeof id))
        return ld_fail(LD_EDEVICE, "rank 0 could not make an NCCL id (see its error)");
    if (!p) return ld_error_status();
    return p->nccl_comm_init_rank(dev, id, c->size, c->rank, comm);
}

int ld_cluster_nccl_all_reduce(void *comm, int k, ld_tensor *const *t, int mean) {
    const ld_cuda_plugin *p = plugin();
    if (!p) return ld_error_status();
    return p->nccl_comm_all_reduce(comm, k, t, mean);
}

void ld_cluster_nccl_free(void *comm) {
    const ld_cuda_plugin *p = ld_cuda_plugin_get();
    if (p && comm && p->nccl_comm_destroy) p->nccl_comm_destroy(comm);
}
