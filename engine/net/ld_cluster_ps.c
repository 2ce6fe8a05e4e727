/* ld_cluster_ps.c - what ParameterServerStrategy (lua_bindings/lua/distribute/parameter_server.lua)
   needs from the control plane beyond ld_cluster.c: a receive that survives
   lost peers (a parameter server or the coordinator carries on when a worker
   dies; the worker's scheduled functions go to another), and each peer's state.
   Messages stay authenticated exactly as ld_cluster_recv's: this only changes
   what a lost peer does to a waiting receive. */
#include "ld_cluster_internal.h"
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
    return cl_recv(c, timeout, 1, from, type, data, n);
}

/* Wait for a control message or for fd to be readable (the parameter
   server's doorbell, ld_ps_shm.c): 1 a message is there, 2 fd is readable
   (3 both), 0 timeout. */
int ld_cluster_wait_fd(ld_cluster *c, int fd, double timeout) {
    zmq_pollitem_t it[2] = {{c->pipe_main, 0, ZMQ_POLLIN, 0}, {NULL, fd, ZMQ_POLLIN, 0}};
    long ms = timeout < 0 ? -1 : (long)(timeout * 1000);
    int rc = zmq_poll(it, 2, ms);
    if (rc <= 0) return 0;
    return ((it[0].revents & ZMQ_POLLIN) ? 1 : 0) | ((it[1].revents & ZMQ_POLLIN) ? 2 : 0);
}
