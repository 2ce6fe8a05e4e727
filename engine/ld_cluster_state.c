/* ld_cluster_state.c - an optimizer's state (step count and slots) read
   and written from outside, so that a checkpoint (BackupAndRestore) or a
   model shipped to workers (LocalCluster) resumes exactly where it was:
   Adam's m and v and its step decide the next update as much as the weights. */
#include "ld_cluster.h"
#include "ld_core.h"
#include "ld_optim.h"
#include "ld_device.h"

#include <stdlib.h>
#include <string.h>

int ld_optimizer_state_get(ld_optimizer *o, int n, ld_tensor *const *vars, ld_tensor **s1, ld_tensor **s2) {
    if (ld_optimizer_consolidate(o)) return ld_error_status();
    for (int i = 0; i < n; i++) {
        s1[i] = s2[i] = NULL;
        for (int k = 0; k < o->n_slots; k++)
            if (o->slots[k].var == vars[i]) {
                s1[i] = o->slots[k].s1 ? ld_tensor_retain(o->slots[k].s1) : NULL;
                s2[i] = o->slots[k].s2 ? ld_tensor_retain(o->slots[k].s2) : NULL;
            }
    }
    return LD_OK;
}

static int copy_slot(ld_tensor **dst, ld_tensor *src, ld_tensor *var, int i, const char *which) {
    char b1[64], b2[64];
    if (!src) return LD_OK;
    if (!ld_same_shape(src, var))
        return ld_fail(LD_ESHAPE, "optimizer state: slot %s of variable %d has shape %s, the variable %s", which, i + 1,
                       ld_shape_str(src, b1, sizeof b1), ld_shape_str(var, b2, sizeof b2));
    if (!*dst) {
        *dst = ld_tensor_zeros(LD_F32, var->ndim, var->shape, var->storage->device);
        if (!*dst) return ld_error_status();
    }
    return ld_copy_into(*dst, src);
}

int ld_optimizer_state_set(ld_optimizer *o, int64_t iterations, int n, ld_tensor *const *vars, ld_tensor *const *s1,
                           ld_tensor *const *s2) {
    if (ld_optimizer_consolidate(o)) return ld_error_status();
    for (int i = 0; i < n; i++) {
        if (!s1[i] && !s2[i]) continue;
        ld_slot *s = NULL;
        for (int k = 0; k < o->n_slots && !s; k++) if (o->slots[k].var == vars[i]) s = &o->slots[k];
        if (!s) {
            if (o->n_slots == o->cap_slots) {
                int cap = o->cap_slots ? 2 * o->cap_slots : 16;
                ld_slot *ns = realloc(o->slots, (size_t)cap * sizeof *ns);
                if (!ns) return ld_fail(LD_ENOMEM, "out of memory");
                o->slots = ns;
                o->cap_slots = cap;
            }
            s = &o->slots[o->n_slots++];
            memset(s, 0, sizeof *s);
            s->var = ld_tensor_retain(vars[i]);
        }
        if (copy_slot(&s->s1, s1[i], vars[i], i, "1") || copy_slot(&s->s2, s2[i], vars[i], i, "2")) return ld_error_status();
    }
    o->iterations = iterations;
    return LD_OK;
}
