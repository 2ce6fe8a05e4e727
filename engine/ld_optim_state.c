/* ld_optim_state.c - an optimizer's state (step count and slots) read
   and written from outside, so that a checkpoint (BackupAndRestore) or a
   model shipped to workers (LocalCluster) resumes exactly where it was:
   Adam's m and v and its step decide the next update as much as the weights. */
#include "ld_core.h"
#include "ld_optim.h"
#include "ld_device.h"
#include "ld_replica.h"

#include <stdlib.h>
#include <string.h>

int ld_optimizer_state_get(ld_optimizer *o, int n, ld_tensor *const *vars, ld_tensor **slots) {
    for (int q = 0; q < LD_OPT_SLOTS * n; q++) slots[q] = NULL;
    if (ld_optimizer_consolidate(o)) return ld_error_status();
    for (int i = 0; i < n; i++)
        for (int k = 0; k < o->n_slots; k++)
            if (o->slots[k].var == vars[i])
                for (int q = 0; q < LD_OPT_SLOTS; q++)
                    slots[q * n + i] = o->slots[k].s[q] ? ld_tensor_retain(o->slots[k].s[q]) : NULL;
    return LD_OK;
}

/* slot `which` (1-based) of variable i (its copy `var`) := src, made on var's device when missing */
static int copy_slot(ld_tensor **dst, ld_tensor *src, ld_tensor *var, int i, int which) {
    char b1[64], b2[64];
    if (!src) return LD_OK;
    if (!ld_same_shape(src, var))
        return ld_fail(LD_ESHAPE, "optimizer state: slot %d of variable %d has shape %s, the variable %s", which, i + 1,
                       ld_shape_str(src, b1, sizeof b1), ld_shape_str(var, b2, sizeof b2));
    if (!*dst) {
        *dst = ld_tensor_zeros(LD_F32, var->ndim, var->shape, var->storage->device);
        if (!*dst) return ld_error_status();
    }
    return ld_variable_write(*dst, src);   /* src moved to the copy's device */
}

/* Slots are keyed by the copy of a variable that a replica updates
   (ld_optimizer_apply uses ld_var), so a mirrored variable's state is
   restored into the slots of every copy, as its values are (a restore is a
   cross-replica write: inside a replica context only that replica's). */
int ld_optimizer_state_set(ld_optimizer *o, int64_t iterations, int n, ld_tensor *const *vars,
                           ld_tensor *const *slots) {
    if (ld_optimizer_consolidate(o)) return ld_error_status();
    const ld_replica_ctx *rc = ld_replica_get();
    for (int i = 0; i < n; i++) {
        int any = 0;
        for (int q = 0; q < LD_OPT_SLOTS; q++) any |= slots[q * n + i] != NULL;
        if (!any) continue;
        int copies = rc ? 1 : ld_mirror_count(vars[i]);
        for (int r = 0; r < copies; r++) {
            ld_tensor *var = rc ? ld_var(vars[i]) : ld_mirror_copy(vars[i], r);
            ld_slot *s = ld_optimizer_slot(o, var);
            if (!s) return ld_error_status();
            for (int q = 0; q < LD_OPT_SLOTS; q++)
                if (copy_slot(&s->s[q], slots[q * n + i], var, i, q + 1)) return ld_error_status();
        }
    }
    o->iterations = iterations;
    return LD_OK;
}
