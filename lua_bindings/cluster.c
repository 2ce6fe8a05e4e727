/*
 * cluster.c - the C half of multi-worker training (ldist._cluster): clusters
 * of processes (engine/ld_cluster.h) and their collectives, child processes
 * with captured output, a safe serialiser for control messages, TF_CONFIG's
 * JSON, and the configuration and state of models and optimizers that
 * LocalCluster ships to its workers. The strategy itself is in
 * lua/distribute/multiworker.lua.
 */
#include "lbind.h"
#include "ld_cluster.h"
#include "ld_device.h"
#include "ld_executor.h"
#include "ld_nn.h"
#include "ld_optim.h"
#include "ld_ps_shm.h"
#include "ld_strategy.h"
#include "ld_pool.h"

#include <lauxlib.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CLUSTER_MT "ldist.Cluster"
#define PROCS_MT "ldist.Procs"
#define NCCL_MT "ldist.NcclComm"

/* ================================================================ clusters */
static ld_cluster *check_cluster(lua_State *L, int i) {
    ld_cluster **p = luaL_checkudata(L, i, CLUSTER_MT);
    if (!*p) luaL_argerror(L, i, "the cluster has been closed");
    return *p;
}

static double opt_num(lua_State *L, int t, const char *k, double def) {
    lua_getfield(L, t, k);
    double v = luaL_optnumber(L, -1, def);
    lua_pop(L, 1);
    return v;
}
static const char *opt_str(lua_State *L, int t, const char *k, size_t *len) {
    lua_getfield(L, t, k);
    const char *s = lua_isnil(L, -1) ? NULL : luaL_checklstring(L, -1, len);
    lua_pop(L, 1);   /* the string stays alive in the table */
    return s;
}

/* whether process pid has exited (a zombie not yet reaped counts: nobody
   reaps during a join) */
static int pid_exited(int pid) {
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')');          /* "pid (comm) S ..." */
    return p && (p[2] == 'Z' || p[2] == 'X');
}
/* join's give_up for the processes a LocalCluster started */
static int procs_gone(void *ud, char *why, size_t n) {
    ld_procs *p = ud;
    for (int i = 0; i < ld_procs_count(p); i++)
        if (!ld_procs_alive(p, i) || pid_exited(ld_procs_pid(p, i))) {
            snprintf(why, n, "process %d (pid %d) exited before joining the cluster", i, ld_procs_pid(p, i));
            return 1;
        }
    return 0;
}

/* join{rank=, size=, leader="host:port", listen=, secret=, timeout=, procs=, ...} -> cluster
   (procs: the children of procs_start that must join; one that dies ends the wait) */
static int c_join(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    ld_cluster_opts o;
    memset(&o, 0, sizeof o);
    o.rank = (int)opt_num(L, 1, "rank", 0);
    o.size = (int)opt_num(L, 1, "size", 1);
    o.leader = opt_str(L, 1, "leader", NULL);
    o.listen = opt_str(L, 1, "listen", NULL);
    o.name = opt_str(L, 1, "name", NULL);
    o.secret = opt_str(L, 1, "secret", &o.secret_len);
    o.timeout = opt_num(L, 1, "timeout", 30);
    o.rendezvous_timeout = opt_num(L, 1, "rendezvous_timeout", 0);
    o.heartbeat = opt_num(L, 1, "heartbeat", 0);
    o.heartbeat_timeout = opt_num(L, 1, "heartbeat_timeout", 0);
    o.chunk_bytes = (size_t)opt_num(L, 1, "chunk_bytes", 0);
    lua_getfield(L, 1, "mpi");
    o.mpi = lua_toboolean(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, 1, "data_plane");
    o.data_plane = lua_isnil(L, -1) ? 1 : lua_toboolean(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, 1, "quiet_loss");
    o.quiet_loss = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (o.size > 1 && !o.leader) return luaL_argerror(L, 1, "leader address (host:port) required");
    lua_getfield(L, 1, "procs");
    ld_procs **pp = luaL_testudata(L, -1, PROCS_MT);
    if (pp && *pp) { o.give_up = procs_gone; o.give_up_ud = *pp; }
    lua_pop(L, 1);              /* the caller's table keeps the procs alive */
    ld_cluster **p = lua_newuserdatauv(L, sizeof *p, 0);
    *p = NULL;
    luaL_setmetatable(L, CLUSTER_MT);
    *p = ld_cluster_join(&o);
    if (!*p) return luaL_error(L, "%s", ld_error());
    return 1;
}

static int cl_close(lua_State *L) {
    ld_cluster **p = luaL_checkudata(L, 1, CLUSTER_MT);
    ld_cluster *c = *p;
    *p = NULL;
    ld_cluster_free(c);
    return 0;
}

static int cl_rank(lua_State *L) { lua_pushinteger(L, ld_cluster_rank(check_cluster(L, 1))); return 1; }
static int cl_size(lua_State *L) { lua_pushinteger(L, ld_cluster_size(check_cluster(L, 1))); return 1; }
static int cl_peer_name(lua_State *L) {
    ld_cluster *c = check_cluster(L, 1);
    lua_pushstring(L, ld_cluster_peer_name(c, (int)luaL_checkinteger(L, 2)));
    return 1;
}
static int cl_peer_pid(lua_State *L) {
    ld_cluster *c = check_cluster(L, 1);
    lua_pushinteger(L, ld_cluster_peer_pid(c, (int)luaL_checkinteger(L, 2)));
    return 1;
}
static int cl_check(lua_State *L) {
    if (ld_cluster_check(check_cluster(L, 1))) return luaL_error(L, "%s", ld_error());
    lua_pushboolean(L, 1);
    return 1;
}

/* c:all_reduce(tensor | {tensors}, mean): sum (or average) in place */
static int cl_all_reduce(lua_State *L) {
    lua_settop(L, 3);
    ld_cluster *c = check_cluster(L, 1);
    ld_tensor **t;
    int k = lb_check_tensors(L, 2, 1, 1, &t);
    int mean = lua_toboolean(L, 3);
    if (ld_cluster_all_reduce_tensors(c, k, t, mean)) return luaL_error(L, "%s", ld_error());
    return 0;
}

/* c:set_step_reducer(on): while on, an all-reduce inside a replica's step
   (synchronized BatchNorm's statistics, ld_replica_all_reduce_sum) goes
   across the processes of c */
static int reduce_across(void *ctx, ld_tensor *t) { return ld_cluster_all_reduce_tensors(ctx, 1, &t, 0); }
static int cl_set_step_reducer(lua_State *L) {
    ld_cluster *c = check_cluster(L, 1);
    if (lua_toboolean(L, 2)) ld_replica_set_reducer(reduce_across, c);
    else ld_replica_set_reducer(NULL, NULL);
    return 0;
}

/* c:broadcast(tensor | {tensors}, root): root's values into everyone's tensors */
static int cl_broadcast(lua_State *L) {
    lua_settop(L, 3);
    ld_cluster *c = check_cluster(L, 1);
    ld_tensor **t;
    int k = lb_check_tensors(L, 2, 1, 1, &t);
    int root = (int)luaL_optinteger(L, 3, 0);
    for (int i = 0; i < k; i++) {
        if (!ld_tensor_is_contiguous(t[i]) || !ld_device_is_host(t[i]->storage->device))
            return luaL_error(L, "broadcast: tensor %d is not a contiguous host tensor", i + 1);
        if (ld_device_is_async(t[i]->storage->device)) ld_device_synchronize(t[i]->storage->device);
        size_t nb = (size_t)ld_tensor_numel(t[i]) * ld_dtype_size(t[i]->dtype);
        char *p = (char *)t[i]->storage->data + (size_t)t[i]->offset * ld_dtype_size(t[i]->dtype);
        if (ld_cluster_broadcast(c, root, p, nb)) return luaL_error(L, "%s", ld_error());
    }
    return 0;
}

/* c:broadcast_string(s, root) -> root's string on every rank */
static int cl_broadcast_string(lua_State *L) {
    ld_cluster *c = check_cluster(L, 1);
    int root = (int)luaL_optinteger(L, 3, 0);
    size_t n = 0;
    const char *s = ld_cluster_rank(c) == root ? luaL_checklstring(L, 2, &n) : NULL;
    uint64_t len = n;
    if (ld_cluster_broadcast(c, root, &len, sizeof len)) return luaL_error(L, "%s", ld_error());
    if (ld_cluster_rank(c) == root) { lua_pushvalue(L, 2); if (ld_cluster_broadcast(c, root, (void *)s, n)) return luaL_error(L, "%s", ld_error()); return 1; }
    if (len > ((uint64_t)1 << 34)) return luaL_error(L, "broadcast_string: %llu bytes is too long", (unsigned long long)len);
    char *buf = malloc(len ? len : 1);
    if (!buf) return luaL_error(L, "out of memory");
    if (ld_cluster_broadcast(c, root, buf, len)) { free(buf); return luaL_error(L, "%s", ld_error()); }
    lua_pushlstring(L, buf, len);
    free(buf);
    return 1;
}

static int cl_barrier(lua_State *L) {
    if (ld_cluster_barrier(check_cluster(L, 1))) return luaL_error(L, "%s", ld_error());
    return 0;
}

/* c:send(to, type, data) */
static int cl_send(lua_State *L) {
    ld_cluster *c = check_cluster(L, 1);
    int to = (int)luaL_checkinteger(L, 2);
    const char *type = luaL_checkstring(L, 3);
    size_t n;
    const char *d = luaL_optlstring(L, 4, "", &n);
    if (ld_cluster_send(c, to, type, d, n)) return luaL_error(L, "%s", ld_error());
    return 0;
}

/* c:recv(timeout) -> from, type, data | nil on timeout */
static int cl_recv(lua_State *L) {
    ld_cluster *c = check_cluster(L, 1);
    double timeout = luaL_optnumber(L, 2, -1);
    int from;
    char type[32];
    void *data;
    size_t n;
    int r = ld_cluster_recv(c, timeout, &from, type, &data, &n);
    /* Ctrl-C: the interpreter's hook raises "interrupted" at the next Lua
       instruction; raising here too would leave that hook pending */
    if (r < 0 && ld_error_status() == LD_EINTERRUPT) return 0;
    if (r < 0) return luaL_error(L, "%s", ld_error());
    if (r == 0) return 0;
    lua_pushinteger(L, from);
    lua_pushstring(L, type);
    lua_pushlstring(L, data, n);
    free(data);
    return 3;
}

/* c:recv_any(timeout) -> from, type, data | nil on timeout: recv that survives
   lost members (ParameterServerStrategy); c:peer_state(r) -> "joined"|"lost"|"left"|"none" */
static int cl_recv_any(lua_State *L) {
    ld_cluster *c = check_cluster(L, 1);
    double timeout = luaL_optnumber(L, 2, -1);
    int from;
    char type[32];
    void *data;
    size_t n;
    int r = ld_cluster_recv_any(c, timeout, &from, type, &data, &n);
    if (r < 0 && ld_error_status() == LD_EINTERRUPT) return 0;
    if (r < 0) return luaL_error(L, "%s", ld_error());
    if (r == 0) return 0;
    lua_pushinteger(L, from);
    lua_pushstring(L, type);
    lua_pushlstring(L, data, n);
    free(data);
    return 3;
}
static int cl_peer_state(lua_State *L) {
    static const char *const names[] = {"none", "joined", "lost", "left"};
    int s = ld_cluster_peer_state(check_cluster(L, 1), (int)luaL_checkinteger(L, 2));
    lua_pushstring(L, s < 0 ? "none" : names[s]);
    return 1;
}

static int cl_stats(lua_State *L) {
    ld_cluster *c = check_cluster(L, 1);
    ld_cluster_stats s;
    ld_cluster_stats_get(c, &s, lua_toboolean(L, 2));
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, s.calls); lua_setfield(L, -2, "calls");
    lua_pushinteger(L, s.bytes); lua_setfield(L, -2, "bytes");
    lua_pushnumber(L, s.seconds); lua_setfield(L, -2, "seconds");
    const char *to, *from;
    ld_cluster_links(c, &to, &from);
    lua_pushstring(L, to); lua_setfield(L, -2, "link_to_next");
    lua_pushstring(L, from); lua_setfield(L, -2, "link_from_prev");
    return 1;
}

static int cl_tostring(lua_State *L) {
    ld_cluster **p = luaL_checkudata(L, 1, CLUSTER_MT);
    if (!*p) lua_pushliteral(L, "<cluster (closed)>");
    else lua_pushfstring(L, "<cluster: rank %d of %d>", ld_cluster_rank(*p), ld_cluster_size(*p));
    return 1;
}

/* ---- the GPU path: c:nccl(device) -> communicator ---- */
static int cl_nccl(lua_State *L) {
    ld_cluster *c = check_cluster(L, 1);
    ld_device *d = ld_device_find(luaL_checkstring(L, 2));
    if (!d) return lb_engine_error(L, 2);
    void **p = lua_newuserdatauv(L, sizeof *p, 0);
    *p = NULL;
    luaL_setmetatable(L, NCCL_MT);
    if (ld_cluster_nccl_init(c, d, p)) return luaL_error(L, "%s", ld_error());
    return 1;
}
static int nccl_all_reduce(lua_State *L) {
    lua_settop(L, 3);
    void **p = luaL_checkudata(L, 1, NCCL_MT);
    if (!*p) return luaL_argerror(L, 1, "communicator closed");
    ld_tensor **t;
    int k = lb_check_tensors(L, 2, 1, 1, &t);
    if (ld_cluster_nccl_all_reduce(*p, k, t, lua_toboolean(L, 3))) return luaL_error(L, "%s", ld_error());
    return 0;
}
static int nccl_gc(lua_State *L) {
    void **p = luaL_checkudata(L, 1, NCCL_MT);
    ld_cluster_nccl_free(*p);
    *p = NULL;
    return 0;
}

/* ================================================================ child processes */
static ld_procs *check_procs(lua_State *L, int i) {
    ld_procs **p = luaL_checkudata(L, i, PROCS_MT);
    if (!*p) luaL_argerror(L, i, "the processes have been stopped");
    return *p;
}

/* procs_start(argv, {env_1, env_2, ...}, new_group) with env_i a table of "NAME=value" */
static int c_procs_start(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TTABLE);
    int na = (int)luaL_len(L, 1), n = (int)luaL_len(L, 2);
    if (na < 1) return luaL_argerror(L, 1, "empty command");
    if (n < 1 || n > 256) return luaL_argerror(L, 2, "1 to 256 processes");
    char **argv = lua_newuserdatauv(L, sizeof *argv * (size_t)(na + 1), 0);
    for (int i = 0; i < na; i++) { lua_geti(L, 1, i + 1); argv[i] = (char *)luaL_checkstring(L, -1); lua_pop(L, 1); }
    argv[na] = NULL;
    char ***envs = lua_newuserdatauv(L, sizeof *envs * (size_t)n, 0);
    for (int i = 0; i < n; i++) {
        lua_geti(L, 2, i + 1);
        luaL_checktype(L, -1, LUA_TTABLE);
        int ne = (int)luaL_len(L, -1);
        char **e = lua_newuserdatauv(L, sizeof *e * (size_t)(ne + 1), 0);
        for (int j = 0; j < ne; j++) { lua_geti(L, -2, j + 1); e[j] = (char *)luaL_checkstring(L, -1); lua_pop(L, 1); }
        e[ne] = NULL;
        envs[i] = e;
        lua_setfield(L, -2, "__env_block");     /* keep it alive in the env table */
        lua_pop(L, 1);
    }
    ld_procs **p = lua_newuserdatauv(L, sizeof *p, 0);
    *p = NULL;
    luaL_setmetatable(L, PROCS_MT);
    *p = ld_procs_start(n, argv, (char *const *const *)envs, lua_toboolean(L, 3) ? LD_PROCS_NEW_GROUP : 0);
    if (!*p) return luaL_error(L, "%s", ld_error());
    return 1;
}

/* procs:poll(timeout) -> {index=, kind="out"|"err"|"exit", line=, status=, signal=} | nil */
static int procs_poll(lua_State *L) {
    ld_procs *p = check_procs(L, 1);
    ld_proc_event ev;
    if (!ld_procs_poll(p, luaL_optnumber(L, 2, 0), &ev)) return 0;
    lua_createtable(L, 0, 5);
    lua_pushinteger(L, ev.index); lua_setfield(L, -2, "index");
    if (ev.kind == LD_PROC_EXIT) {
        lua_pushliteral(L, "exit"); lua_setfield(L, -2, "kind");
        lua_pushinteger(L, ev.status); lua_setfield(L, -2, "status");
        lua_pushinteger(L, ev.signal); lua_setfield(L, -2, "signal");
        if (ev.signal) { lua_pushstring(L, strsignal(ev.signal)); lua_setfield(L, -2, "signal_name"); }
    } else {
        lua_pushstring(L, ev.kind == LD_PROC_OUT ? "out" : "err"); lua_setfield(L, -2, "kind");
        lua_pushlstring(L, ev.line, ev.len); lua_setfield(L, -2, "line");
        char e[2] = {ev.end ? ev.end : '\n', 0};
        lua_pushstring(L, e); lua_setfield(L, -2, "ending");
    }
    return 1;
}
static int procs_pid(lua_State *L) { lua_pushinteger(L, ld_procs_pid(check_procs(L, 1), (int)luaL_checkinteger(L, 2))); return 1; }
static int procs_alive(lua_State *L) { lua_pushboolean(L, ld_procs_alive(check_procs(L, 1), (int)luaL_checkinteger(L, 2))); return 1; }
static int procs_running(lua_State *L) { lua_pushinteger(L, ld_procs_running(check_procs(L, 1))); return 1; }
static int procs_count(lua_State *L) { lua_pushinteger(L, ld_procs_count(check_procs(L, 1))); return 1; }

static int signal_of(lua_State *L, int idx) {
    static const char *const names[] = {"TERM", "KILL", "INT", "STOP", "CONT", "HUP", NULL};
    static const int sigs[] = {SIGTERM, SIGKILL, SIGINT, SIGSTOP, SIGCONT, SIGHUP};
    if (lua_isinteger(L, idx)) return (int)lua_tointeger(L, idx);
    const char *s = luaL_optstring(L, idx, "TERM");
    if (!strncmp(s, "SIG", 3)) s += 3;
    for (int i = 0; names[i]; i++) if (!strcmp(s, names[i])) return sigs[i];
    return luaL_argerror(L, idx, "signal: TERM, KILL, INT, STOP, CONT or HUP");
}
static int procs_signal(lua_State *L) { ld_procs_signal(check_procs(L, 1), signal_of(L, 2)); return 0; }
static int procs_close(lua_State *L) {
    ld_procs **p = luaL_checkudata(L, 1, PROCS_MT);
    ld_procs *q = *p;
    *p = NULL;
    ld_procs_free(q, luaL_optnumber(L, 2, 2.0));
    return 0;
}

/* ================================================================ pack / unpack
   A small binary format for control messages: nil, booleans, integers,
   floats, strings, tables and tensors. unpack checks every length, so a
   malformed message is an error, never a crash. */
enum { P_NIL = 'n', P_FALSE = 'f', P_TRUE = 't', P_INT = 'i', P_NUM = 'd', P_STR = 's', P_TABLE = 'T', P_TENSOR = 'X' };
#define PACK_MAGIC "LDP1"

/* The output grows in a userdata that owns a malloc'ed block (freed by its
   __gc even when packing raises), kept at a fixed stack slot: a luaL_Buffer
   may not be used while the packer pushes keys and values. */
#define PBUF_MT "ldist.PackBuffer"
typedef struct { char *p; size_t n, cap; } pbuf;
static int pbuf_gc(lua_State *L) { pbuf *b = luaL_checkudata(L, 1, PBUF_MT); free(b->p); b->p = NULL; return 0; }
static void put(lua_State *L, pbuf *b, const void *d, size_t n) {
    if (b->cap - b->n < n) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap - b->n < n) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) { luaL_error(L, "pack: out of memory"); return; }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void put_c(lua_State *L, pbuf *b, char c) { put(L, b, &c, 1); }
static void put_u64(lua_State *L, pbuf *b, uint64_t v) { put(L, b, &v, 8); }

static void pack_tensor(lua_State *L, pbuf *b, ld_tensor *t) {
    ld_tensor *h;
    if (!ld_device_is_host(t->storage->device)) h = ld_to_device(t, ld_device_cpu());
    else {
        if (ld_device_is_async(t->storage->device)) ld_device_synchronize(t->storage->device);
        h = ld_contiguous(t);
    }
    if (!h) { luaL_error(L, "pack: %s", ld_error()); return; }
    size_t nb = (size_t)ld_tensor_numel(h) * ld_dtype_size(h->dtype);
    /* reserve first, so a failure cannot leak h */
    size_t need = 3 + 8 * (size_t)h->ndim + nb;
    if (b->cap - b->n < need) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap - b->n < need) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) { ld_tensor_release(h); luaL_error(L, "pack: out of memory"); return; }
        b->p = q;
        b->cap = cap;
    }
    put_c(L, b, P_TENSOR);
    put_c(L, b, (char)h->dtype);
    put_c(L, b, (char)h->ndim);
    for (int i = 0; i < h->ndim; i++) put_u64(L, b, (uint64_t)h->shape[i]);
    put(L, b, (const char *)h->storage->data + (size_t)h->offset * ld_dtype_size(h->dtype), nb);
    ld_tensor_release(h);
}

static void pack_value(lua_State *L, pbuf *b, int idx, int depth) {
    idx = lua_absindex(L, idx);
    if (depth > 64) { luaL_error(L, "pack: tables nested too deeply (or a cycle)"); return; }
    luaL_checkstack(L, 6, "pack");
    switch (lua_type(L, idx)) {
    case LUA_TNIL: put_c(L, b, P_NIL); return;
    case LUA_TBOOLEAN: put_c(L, b, lua_toboolean(L, idx) ? P_TRUE : P_FALSE); return;
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx)) { put_c(L, b, P_INT); lua_Integer v = lua_tointeger(L, idx); put(L, b, &v, 8); }
        else { put_c(L, b, P_NUM); lua_Number v = lua_tonumber(L, idx); put(L, b, &v, 8); }
        return;
    case LUA_TSTRING: {
        size_t n;
        const char *s = lua_tolstring(L, idx, &n);
        put_c(L, b, P_STR);
        put_u64(L, b, n);
        put(L, b, s, n);
        return;
    }
    case LUA_TTABLE: {
        uint64_t n = 0;
        lua_pushnil(L);
        while (lua_next(L, idx)) { n++; lua_pop(L, 1); }
        put_c(L, b, P_TABLE);
        put_u64(L, b, n);
        lua_pushnil(L);
        while (lua_next(L, idx)) {
            pack_value(L, b, -2, depth + 1);
            pack_value(L, b, -1, depth + 1);
            lua_pop(L, 1);
        }
        return;
    }
    case LUA_TUSERDATA: {
        ld_tensor *t = lb_test_tensor(L, idx);
        if (t) { pack_tensor(L, b, t); return; }
    }
    /* fall through */
    default:
        luaL_error(L, "pack: cannot send a %s (only nil, booleans, numbers, strings, tables and tensors travel)",
                   luaL_typename(L, idx));
    }
}

/* pack(value) -> string */
static int c_pack(lua_State *L) {
    lua_settop(L, 1);
    pbuf *b = lua_newuserdatauv(L, sizeof *b, 0);
    memset(b, 0, sizeof *b);
    if (luaL_newmetatable(L, PBUF_MT)) { lua_pushcfunction(L, pbuf_gc); lua_setfield(L, -2, "__gc"); }
    lua_setmetatable(L, -2);
    put(L, b, PACK_MAGIC, 4);
    pack_value(L, b, 1, 0);
    lua_pushlstring(L, b->p, b->n);
    free(b->p);
    b->p = NULL;
    return 1;
}

typedef struct { const unsigned char *p, *end; } reader;

static int rd_fail(lua_State *L, const char *why) { return luaL_error(L, "malformed message: %s", why); }
static uint64_t rd_u64(lua_State *L, reader *r) {
    if (r->end - r->p < 8) rd_fail(L, "truncated");
    uint64_t v;
    memcpy(&v, r->p, 8);
    r->p += 8;
    return v;
}

static void unpack_value(lua_State *L, reader *r, int depth) {
    if (depth > 64) rd_fail(L, "nested too deeply");
    luaL_checkstack(L, 4, "unpack");
    if (r->p >= r->end) rd_fail(L, "truncated");
    int tag = *r->p++;
    switch (tag) {
    case P_NIL: lua_pushnil(L); return;
    case P_FALSE: lua_pushboolean(L, 0); return;
    case P_TRUE: lua_pushboolean(L, 1); return;
    case P_INT: { uint64_t v = rd_u64(L, r); lua_Integer x; memcpy(&x, &v, 8); lua_pushinteger(L, x); return; }
    case P_NUM: { uint64_t v = rd_u64(L, r); lua_Number x; memcpy(&x, &v, 8); lua_pushnumber(L, x); return; }
    case P_STR: {
        uint64_t n = rd_u64(L, r);
        if (n > (uint64_t)(r->end - r->p)) rd_fail(L, "a string longer than the message");
        lua_pushlstring(L, (const char *)r->p, (size_t)n);
        r->p += n;
        return;
    }
    case P_TABLE: {
        uint64_t n = rd_u64(L, r);
        if (n > (uint64_t)(r->end - r->p)) rd_fail(L, "more table entries than bytes");
        lua_createtable(L, 0, n < 1024 ? (int)n : 1024);
        for (uint64_t i = 0; i < n; i++) {
            unpack_value(L, r, depth + 1);
            unpack_value(L, r, depth + 1);
            if (lua_isnil(L, -2) || (lua_type(L, -2) == LUA_TNUMBER && isnan(lua_tonumber(L, -2)))) rd_fail(L, "a nil or NaN table key");
            lua_rawset(L, -3);
        }
        return;
    }
    case P_TENSOR: {
        if (r->end - r->p < 2) rd_fail(L, "truncated tensor");
        int dt = r->p[0], nd = r->p[1];
        r->p += 2;
        if (dt < 0 || dt >= LD_DTYPE_COUNT || nd > LD_MAX_DIMS) rd_fail(L, "a tensor with a bad dtype or rank");
        int64_t shape[LD_MAX_DIMS];
        uint64_t numel = 1;
        for (int i = 0; i < nd; i++) {
            uint64_t s = rd_u64(L, r);
            if (s > ((uint64_t)1 << 40)) rd_fail(L, "a tensor dimension too large");
            shape[i] = (int64_t)s;
            numel *= s;
            if (numel > ((uint64_t)1 << 40)) rd_fail(L, "a tensor too large");
        }
        uint64_t nb = numel * ld_dtype_size((ld_dtype)dt);
        if (nb > (uint64_t)(r->end - r->p)) rd_fail(L, "tensor data shorter than its shape");
        ld_tensor *t = ld_tensor_from_data((ld_dtype)dt, nd, shape, r->p, NULL);
        if (!t) luaL_error(L, "%s", ld_error());
        r->p += nb;
        lb_push_tensor(L, t, 0);
        return;
    }
    default:
        rd_fail(L, "an unknown type tag");
    }
}

/* unpack(string) -> value (raises "malformed message: ..." on bad input) */
static int c_unpack(lua_State *L) {
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    if (n < 4 || memcmp(s, PACK_MAGIC, 4)) return rd_fail(L, "not an ldist message");
    reader r = {(const unsigned char *)s + 4, (const unsigned char *)s + n};
    unpack_value(L, &r, 0);
    if (r.p != r.end) return rd_fail(L, "trailing bytes");
    return 1;
}


/* ================================================================ small helpers */
static int c_random_hex(lua_State *L) {
    int n = (int)luaL_optinteger(L, 1, 32);
    if (n < 1 || n > 256) return luaL_argerror(L, 1, "1..256 bytes");
    unsigned char b[256];
    char h[513];
    if (ld_random_bytes(b, (size_t)n)) return luaL_error(L, "%s", ld_error());
    for (int i = 0; i < n; i++) sprintf(h + 2 * i, "%02x", b[i]);
    lua_pushlstring(L, h, 2 * (size_t)n);
    return 1;
}
static int c_getpid(lua_State *L) { lua_pushinteger(L, getpid()); return 1; }
static int c_hostname(lua_State *L) {
    char h[256] = "";
    gethostname(h, sizeof h - 1);
    lua_pushstring(L, h);
    return 1;
}
static int c_self_exe(lua_State *L) { lua_pushstring(L, ld_self_exe()); return 1; }
/* kill(pid, sig) -> true, or false when no such process */
static int c_kill(lua_State *L) {
    pid_t pid = (pid_t)luaL_checkinteger(L, 1);
    if (pid <= 0) return luaL_argerror(L, 1, "a process id");
    lua_pushboolean(L, kill(pid, signal_of(L, 2)) == 0);
    return 1;
}
/* sleep(seconds), interruptible by Ctrl-C */
static int c_sleep(lua_State *L) {
    double s = luaL_checknumber(L, 1);
    while (s > 0 && !ld_interrupt_flag) {
        double d = s < 0.05 ? s : 0.05;
        struct timespec ts = {(time_t)d, (long)((d - (time_t)d) * 1e9)};
        nanosleep(&ts, NULL);
        s -= d;
    }
    if (ld_interrupt_flag) return luaL_error(L, "interrupted");
    return 0;
}
/* free_port(host) -> a port free now on host (bound to 0, then released) */
static int c_free_port(lua_State *L) {
    const char *host = luaL_optstring(L, 1, "127.0.0.1");
    int port = ld_free_port(host);
    if (port < 0) return luaL_error(L, "no free port on %s: %s", host, strerror(errno));
    lua_pushinteger(L, port);
    return 1;
}
/* ---- MPI (engine/net/ld_mpi.c): the rendezvous under mpirun or srun ---- */
/* mpi_available() -> true, or false and why */
static int c_mpi_available(lua_State *L) {
    if (ld_mpi_available()) { lua_pushboolean(L, 1); return 1; }
    lua_pushboolean(L, 0);
    lua_pushstring(L, ld_error());
    return 2;
}
/* mpi_init() -> rank, size of MPI_COMM_WORLD (MPI initialised once) */
static int c_mpi_init(lua_State *L) {
    int r, n;
    if (ld_mpi_init(&r, &n)) return luaL_error(L, "%s", ld_error());
    lua_pushinteger(L, r);
    lua_pushinteger(L, n);
    return 2;
}
/* mpi_broadcast_string(s, root) -> root's string on every rank (s ignored elsewhere) */
static int c_mpi_broadcast_string(lua_State *L) {
    int root = (int)luaL_optinteger(L, 2, 0), r;
    if (ld_mpi_init(&r, NULL)) return luaL_error(L, "%s", ld_error());
    size_t n = 0;
    const char *s = r == root ? luaL_checklstring(L, 1, &n) : NULL;
    uint64_t len = n;
    if (ld_mpi_broadcast(root, &len, sizeof len)) return luaL_error(L, "%s", ld_error());
    if (r == root) {
        if (ld_mpi_broadcast(root, (void *)s, n)) return luaL_error(L, "%s", ld_error());
        lua_pushvalue(L, 1);
        return 1;
    }
    if (len > ((uint64_t)1 << 30)) return luaL_error(L, "mpi_broadcast_string: %llu bytes is too long", (unsigned long long)len);
    char *buf = malloc(len ? len : 1);
    if (!buf) return luaL_error(L, "out of memory");
    if (ld_mpi_broadcast(root, buf, len)) { free(buf); return luaL_error(L, "%s", ld_error()); }
    lua_pushlstring(L, buf, len);
    free(buf);
    return 1;
}

static int c_cores(lua_State *L) { lua_pushinteger(L, ld_cpu_cores()); return 1; }
/* tensor_id(t) -> an integer naming the engine tensor (userdata differ, the
   tensor is one), never given to another tensor of this process: its serial,
   not its address, which a tensor made after this one is freed may reuse */
static int c_tensor_id(lua_State *L) { lua_pushinteger(L, (lua_Integer)lb_check_tensor(L, 1)->serial); return 1; }
/* clear_interrupt(): a Ctrl-C that was handled must not stop the next wait */
static int c_clear_interrupt(lua_State *L) { (void)L; ld_interrupt_flag = 0; return 0; }


/* ================================================================ ps shared memory
   The parameter server's link between processes of one host
   (engine/net/ld_ps_shm.c): C.shm_create(bytes), C.shm_open(name, tag, bytes)
   -> segment | nil, why; seg:write(offset, tensor) copies a tensor's values
   in, seg:tensor(offset, shape) copies float32 values out into a new tensor,
   seg:view(offset, shape) is a tensor over them (no copy); all check the
   bounds. */
#define PSHM_MT "ldist.PsShm"
static ld_ps_shm *check_pshm(lua_State *L, int i) {
    ld_ps_shm **p = luaL_checkudata(L, i, PSHM_MT);
    if (!*p) luaL_argerror(L, i, "the shared-memory segment has been closed");
    return *p;
}
static int push_pshm(lua_State *L, ld_ps_shm *s) {
    if (!s) { lua_pushnil(L); lua_pushstring(L, ld_error()); return 2; }
    ld_ps_shm **p = lua_newuserdatauv(L, sizeof *p, 0);
    *p = s;
    luaL_setmetatable(L, PSHM_MT);
    return 1;
}
static size_t check_size(lua_State *L, int i) {
    lua_Integer n = luaL_checkinteger(L, i);
    luaL_argcheck(L, n >= 0 && n <= ((lua_Integer)1 << 40), i, "a size in bytes expected");
    return (size_t)n;
}
static int c_shm_create(lua_State *L) { return push_pshm(L, ld_ps_shm_create(check_size(L, 1))); }
static int c_shm_open(lua_State *L) {
    return push_pshm(L, ld_ps_shm_open(luaL_checkstring(L, 1), luaL_checkstring(L, 2), check_size(L, 3)));
}
static int pshm_name(lua_State *L) { lua_pushstring(L, ld_ps_shm_name(check_pshm(L, 1))); return 1; }
static int pshm_tag(lua_State *L) { lua_pushstring(L, ld_ps_shm_tag(check_pshm(L, 1))); return 1; }
static int pshm_size(lua_State *L) { lua_pushinteger(L, (lua_Integer)ld_ps_shm_size(check_pshm(L, 1))); return 1; }
static int pshm_unlink(lua_State *L) { ld_ps_shm_unlink(check_pshm(L, 1)); return 0; }
static int pshm_close(lua_State *L) {
    ld_ps_shm **p = luaL_checkudata(L, 1, PSHM_MT);
    ld_ps_shm_close(*p);
    *p = NULL;
    return 0;
}
/* seg:write(offset, tensor) -> bytes written */
static int pshm_write(lua_State *L) {
    ld_ps_shm *s = check_pshm(L, 1);
    size_t off = check_size(L, 2);
    ld_tensor *t = lb_check_tensor(L, 3), *h;
    if (!ld_device_is_host(t->storage->device)) h = ld_to_device(t, ld_device_cpu());
    else {
        if (ld_device_is_async(t->storage->device)) ld_device_synchronize(t->storage->device);
        h = ld_contiguous(t);
    }
    if (!h) return luaL_error(L, "shm write: %s", ld_error());
    size_t nb = (size_t)ld_tensor_numel(h) * ld_dtype_size(h->dtype);
    if (off > ld_ps_shm_size(s) || nb > ld_ps_shm_size(s) - off) {
        ld_tensor_release(h);
        return luaL_error(L, "shm write: %zu bytes at %zu do not fit in the segment (%zu bytes)", nb, off, ld_ps_shm_size(s));
    }
    ld_ps_shm_copy(ld_ps_shm_data(s) + off, (const char *)h->storage->data + (size_t)h->offset * ld_dtype_size(h->dtype), nb);
    ld_tensor_release(h);
    lua_pushinteger(L, (lua_Integer)nb);
    return 1;
}

/* the shape (argument 3) of float32 values at `off` in segment s, checked
   to lie inside it -> the dimension count */
static int shm_shape_arg(lua_State *L, ld_ps_shm *s, size_t off, int64_t shape[LD_MAX_DIMS]) {
    luaL_checktype(L, 3, LUA_TTABLE);
    int nd = (int)luaL_len(L, 3);
    luaL_argcheck(L, nd >= 0 && nd <= LD_MAX_DIMS, 3, "too many dimensions");
    uint64_t numel = 1;
    for (int i = 0; i < nd; i++) {
        lua_geti(L, 3, i + 1);
        lua_Integer d = lua_tointeger(L, -1);
        lua_pop(L, 1);
        if (d < 0 || d > ((lua_Integer)1 << 40)) return luaL_argerror(L, 3, "a bad dimension");
        shape[i] = d;
        numel *= (uint64_t)d;
        if (numel > ((uint64_t)1 << 40)) return luaL_argerror(L, 3, "a tensor too large");
    }
    uint64_t nb = numel * 4;
    if (off % 4 || off > ld_ps_shm_size(s) || nb > ld_ps_shm_size(s) - off)
        return luaL_error(L, "shm: %llu bytes at %zu lie outside the segment (%zu bytes)", (unsigned long long)nb, off,
                          ld_ps_shm_size(s));
    return nd;
}
/* seg:view(offset, shape) -> a float32 tensor over the values there, no
   copy (the mapping stays while it lives). Only for what is read at once
   (the ps applying a push): the other end may write there again after the
   answer. */
static void pshm_view_release(void *ctx) { ld_ps_shm_release(ctx); }
static int pshm_view(lua_State *L) {
    ld_ps_shm *s = check_pshm(L, 1);
    size_t off = check_size(L, 2);
    int64_t shape[LD_MAX_DIMS];
    int nd = shm_shape_arg(L, s, off, shape);
    ld_ps_shm_retain(s);
    ld_tensor *t = ld_tensor_borrow(LD_F32, nd, shape, ld_ps_shm_data(s) + off, NULL, pshm_view_release, s);
    if (!t) { ld_ps_shm_release(s); return luaL_error(L, "%s", ld_error()); }
    lb_push_tensor(L, t, 0);
    return 1;
}

/* seg:tensor(offset, shape) -> a new float32 tensor of the values there */
static int pshm_tensor(lua_State *L) {
    ld_ps_shm *s = check_pshm(L, 1);
    size_t off = check_size(L, 2);
    int64_t shape[LD_MAX_DIMS];
    int nd = shm_shape_arg(L, s, off, shape);
    ld_tensor *t = ld_tensor_empty(LD_F32, nd, shape, NULL);
    if (!t) return luaL_error(L, "%s", ld_error());
    ld_ps_shm_copy(ld_tensor_data_unsynced(t), ld_ps_shm_data(s) + off, (size_t)ld_tensor_numel(t) * 4);
    lb_push_tensor(L, t, 0);
    return 1;
}

/* the mailbox (engine/net/ld_ps_shm.c): seg:room(), seg:post(type, body) ->
   bool, seg:wait(timeout) -> type, body | nil, seg:take() -> type, body |
   nil, seg:answer(type, body), seg:set_bell(path), seg:set_client_bell(path); C.ps_bell() -> bell | nil
   (bell:path(), bell:drain(), bell:close()); C.ps_wait(cluster, bell, timeout)
   -> 1 a control message, 2 the doorbell rang, 3 both, 0 nothing */
#define BELL_MT "ldist.PsBell"
static int pshm_room(lua_State *L) { lua_pushinteger(L, ld_ps_shm_room(check_pshm(L, 1))); return 1; }
static int pshm_post(lua_State *L) {
    ld_ps_shm *s = check_pshm(L, 1);
    size_t n;
    const char *ty = luaL_checkstring(L, 2), *b = luaL_checklstring(L, 3, &n);
    lua_pushboolean(L, n <= ld_ps_shm_msg_max() && ld_ps_shm_post(s, ty, b, n) == 0);
    return 1;
}
static int pshm_wait(lua_State *L) {
    ld_ps_shm *s = check_pshm(L, 1);
    char type[32];
    const void *b;
    size_t n;
    int r = ld_ps_shm_wait(s, luaL_checknumber(L, 2), type, &b, &n);
    if (r < 0 && ld_error_status() == LD_EINTERRUPT) return 0;
    if (r < 0) return luaL_error(L, "%s", ld_error());
    if (r == 0) return 0;
    lua_pushstring(L, type);
    lua_pushlstring(L, b, n);
    return 2;
}
static int pshm_take(lua_State *L) {
    ld_ps_shm *s = check_pshm(L, 1);
    char type[32];
    const void *b;
    size_t n;
    int r = ld_ps_shm_take(s, type, &b, &n);
    if (r < 0) return luaL_error(L, "%s", ld_error());
    if (r == 0) return 0;
    lua_pushstring(L, type);
    lua_pushlstring(L, b, n);
    return 2;
}
static int pshm_answer(lua_State *L) {
    ld_ps_shm *s = check_pshm(L, 1);
    size_t n;
    const char *ty = luaL_checkstring(L, 2), *b = luaL_checklstring(L, 3, &n);
    if (ld_ps_shm_answer(s, ty, b, n)) return luaL_error(L, "%s", ld_error());
    return 0;
}
static int pshm_set_bell(lua_State *L) { ld_ps_shm_set_bell(check_pshm(L, 1), luaL_checkstring(L, 2)); return 0; }
static int pshm_set_client_bell(lua_State *L) { ld_ps_shm_set_client_bell(check_pshm(L, 1), luaL_checkstring(L, 2)); return 0; }
static ld_ps_bell *check_bell(lua_State *L, int i) {
    ld_ps_bell **p = luaL_checkudata(L, i, BELL_MT);
    if (!*p) luaL_argerror(L, i, "the doorbell has been closed");
    return *p;
}
static int c_ps_bell(lua_State *L) {
    ld_ps_bell *b = ld_ps_bell_create();
    if (!b) return 0;
    ld_ps_bell **p = lua_newuserdatauv(L, sizeof *p, 0);
    *p = b;
    luaL_setmetatable(L, BELL_MT);
    return 1;
}
static int bell_path(lua_State *L) { lua_pushstring(L, ld_ps_bell_path(check_bell(L, 1))); return 1; }
static int bell_drain(lua_State *L) { ld_ps_bell_drain(check_bell(L, 1)); return 0; }
static int bell_close(lua_State *L) {
    ld_ps_bell **p = luaL_checkudata(L, 1, BELL_MT);
    ld_ps_bell_close(*p);
    *p = NULL;
    return 0;
}
static int c_ps_wait(lua_State *L) {
    ld_cluster *c = check_cluster(L, 1);
    ld_ps_bell *b = check_bell(L, 2);
    lua_pushinteger(L, ld_cluster_wait_fd(c, ld_ps_bell_fd(b), luaL_checknumber(L, 3)));
    return 1;
}

/* ================================================================ module */
int lb_open_cluster(lua_State *L) {
    static const luaL_Reg cm[] = {
        {"rank", cl_rank}, {"size", cl_size}, {"peer_name", cl_peer_name}, {"peer_pid", cl_peer_pid},
        {"check", cl_check}, {"all_reduce", cl_all_reduce}, {"set_step_reducer", cl_set_step_reducer}, {"broadcast", cl_broadcast},
        {"broadcast_string", cl_broadcast_string}, {"barrier", cl_barrier}, {"send", cl_send}, {"recv", cl_recv},
        {"stats", cl_stats}, {"recv_any", cl_recv_any}, {"peer_state", cl_peer_state}, {"nccl", cl_nccl}, {"close", cl_close}, {NULL, NULL}};
    luaL_newmetatable(L, CLUSTER_MT);
    luaL_newlib(L, cm);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, cl_close); lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, cl_close); lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, cl_tostring); lua_setfield(L, -2, "__tostring");
    lua_pop(L, 1);

    static const luaL_Reg pm[] = {
        {"poll", procs_poll}, {"pid", procs_pid}, {"alive", procs_alive}, {"running", procs_running},
        {"count", procs_count}, {"signal", procs_signal}, {"close", procs_close}, {NULL, NULL}};
    luaL_newmetatable(L, PROCS_MT);
    luaL_newlib(L, pm);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, procs_close); lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);

    luaL_newmetatable(L, NCCL_MT);
    lua_newtable(L);
    lua_pushcfunction(L, nccl_all_reduce); lua_setfield(L, -2, "all_reduce");
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, nccl_gc); lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);

    static const luaL_Reg sm[] = {
        {"name", pshm_name}, {"tag", pshm_tag}, {"size", pshm_size}, {"unlink", pshm_unlink}, {"close", pshm_close},
        {"write", pshm_write}, {"tensor", pshm_tensor}, {"view", pshm_view}, {"room", pshm_room}, {"post", pshm_post}, {"wait", pshm_wait},
        {"take", pshm_take}, {"answer", pshm_answer}, {"set_bell", pshm_set_bell},
        {"set_client_bell", pshm_set_client_bell}, {NULL, NULL}};
    luaL_newmetatable(L, PSHM_MT);
    luaL_newlib(L, sm);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, pshm_close); lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, pshm_close); lua_setfield(L, -2, "__close");
    lua_pop(L, 1);

    static const luaL_Reg bm[] = {{"path", bell_path}, {"drain", bell_drain}, {"close", bell_close}, {NULL, NULL}};
    luaL_newmetatable(L, BELL_MT);
    luaL_newlib(L, bm);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, bell_close); lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, bell_close); lua_setfield(L, -2, "__close");
    lua_pop(L, 1);

    static const luaL_Reg f[] = {
        {"shm_create", c_shm_create}, {"shm_open", c_shm_open}, {"ps_bell", c_ps_bell}, {"ps_wait", c_ps_wait},
        {"join", c_join}, {"procs_start", c_procs_start}, {"pack", c_pack}, {"unpack", c_unpack},
        {"random_hex", c_random_hex}, {"getpid", c_getpid}, {"hostname", c_hostname}, {"self_exe", c_self_exe},
        {"kill", c_kill}, {"sleep", c_sleep}, {"free_port", c_free_port}, {"cores", c_cores},
        {"tensor_id", c_tensor_id}, {"clear_interrupt", c_clear_interrupt}, {"mpi_available", c_mpi_available},
        {"mpi_init", c_mpi_init}, {"mpi_broadcast_string", c_mpi_broadcast_string}, {NULL, NULL}};
    luaL_newlib(L, f);
    return 1;
}
