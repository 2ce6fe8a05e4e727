/* ld_cluster_ps.c - what ParameterServerStrategy (lua_bindings/lua/80_parameter_server.lua)
   needs from the control plane beyond ld_cluster.c: a receive that survives
   lost peers (a parameter server or the coordinator carries on when a worker
   dies; the worker's scheduled functions go to another), and each peer's state.
   Messages stay authenticated exactly as ld_cluster_recv's: this only changes
   what a lost peer does to a waiting receive. */
#include "ld_cluster_int.h"
#include "ld_core.h"

#include <stdio.h>

#include <stdlib.h>
#include <string.h>

int ld_cluster_peer_state(ld_cluster *c, int r) {
    if (!c || r < 0 || r >= c->size) return -1;
    pthread_mutex_lock(&c->mu);
    int s = c->peers[r].state;
    pthread_mutex_unlock(&c->mu);
    return s == PEER_LOST ? 2 : s == PEER_DONE ? 3 : s == PEER_JOINED ? 1 : 0;
}

int ld_cluster_recv_any(ld_cluster *c, double timeout, int *from, char type[32], void **data, size_t *n) {
    *data = NULL;
    *n = 0;
    if (c->size == 1) return 0;
    if (timeout < 0) timeout = c->timeout;
    double t0 = cl_now();
    for (;;) {
        zmq_pollitem_t it = {c->pipe_main, 0, ZMQ_POLLIN, 0};
        double left = timeout - (cl_now() - t0);
        long ms = left > 0.05 ? 50 : (long)(left * 1000);
        if (ms < 0) ms = 0;
        int rc = zmq_poll(&it, 1, ms);
        if (rc > 0) {
            cl_frames f;
            if (cl_frames_recv(c->pipe_main, &f) == 0) {
                if (cl_frame_is(&f, 0, "MSG") && f.n == 4 && cl_fl(&f, 1) == 4 && cl_fl(&f, 2) < 32) {
                    int32_t fr;
                    memcpy(&fr, cl_fd(&f, 1), 4);
                    *from = fr;
                    memcpy(type, cl_fd(&f, 2), cl_fl(&f, 2));
                    type[cl_fl(&f, 2)] = 0;
                    *n = cl_fl(&f, 3);
                    *data = malloc(*n ? *n : 1);
                    if (!*data) { cl_frames_close(&f); return ld_fail(LD_ENOMEM, "out of memory"); }
                    memcpy(*data, cl_fd(&f, 3), *n);
                    cl_frames_close(&f);
                    return 1;
                }
                cl_frames_close(&f);
            }
            continue;
        }
        if (ld_interrupt_flag) return ld_fail(LD_EINTERRUPT, "interrupted");
        /* a member whose leader is lost has no one left to hear from */
        if (c->rank != 0 && ld_cluster_peer_state(c, 0) == 2) {
            pthread_mutex_lock(&c->mu);
            char msg[512];
            snprintf(msg, sizeof msg, "%s %s", c->peers[0].name, c->peers[0].reason);
            pthread_mutex_unlock(&c->mu);
            return ld_fail(LD_EDEVICE, "%s", msg);
        }
        if (cl_now() - t0 >= timeout) return 0;
    }
}
