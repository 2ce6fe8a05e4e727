/*
 * distribute.c - the C half of the `distribute` module: logical CPU devices,
 * the replica context, mirrored variables, the in-process all-reduce and
 * tracing. The strategies themselves are in lua/distribute/protocol.lua and
 * lua/distribute/mirrored.lua.
 */
#include "lbind.h"
#include "ld_strategy.h"
#include "ld_optim.h"
#include "ld_device.h"
#include "ld_executor.h"
#include "ld_pool.h"
#include "ld_half.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#define COMM_MT "ldist.Comm"

static ld_device *check_device(lua_State *L, int idx) {
    ld_device *d = ld_device_find(luaL_checkstring(L, idx));
    if (!d) lb_engine_error(L, idx);
    return d;
}

int lb_check_devices(lua_State *L, int idx, ld_device **devs) {
    luaL_checktype(L, idx, LUA_TTABLE);
    int n = (int)luaL_len(L, idx);
    if (n < 1 || n > LD_MAX_LOGICAL) luaL_argerror(L, idx, "need 1 to 64 devices");
    for (int i = 0; i < n; i++) {
        lua_geti(L, idx, i + 1);
        devs[i] = check_device(L, -1);
        for (int j = 0; j < i; j++)
            if (devs[j] == devs[i]) luaL_error(L, "device %s is listed twice", devs[i]->name);
        lua_pop(L, 1);
    }
    return n;
}

/* config.cpu_devices(n): split the CPU into n logical devices */
static int d_cpu_devices(lua_State *L) {
    lua_Integer n = luaL_checkinteger(L, 1);
    if (ld_cpu_devices((int)n)) return lb_engine_error(L, 1);
    lua_pushinteger(L, ld_cpu_device_count());
    return 1;
}

static void push_ids(lua_State *L, const int *ids, int n) {
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) { lua_pushinteger(L, ids[i]); lua_rawseti(L, -2, i + 1); }
}

/* cpu_split() -> {cores = {ids}, physical_cores =, smt =, local_rank =, local_size =, text =, blas =, bf16_gemm =, denormals =,
   devices = {{name =, threads =, cores = {ids}, pinned =}, ...}} */
static int d_cpu_split(lua_State *L) {
    enum { MAX = 1024 };
    int *ids = lua_newuserdatauv(L, sizeof(int) * MAX, 0);
    int n = ld_cpu_process_cores(ids, MAX), rank, size;
    ld_cpu_local_process(&rank, &size);
    lua_createtable(L, 0, 5);
    push_ids(L, ids, n);
    lua_setfield(L, -2, "cores");
    int smt = 1;
    lua_pushinteger(L, ld_cpu_physical_cores(&smt));
    lua_setfield(L, -2, "physical_cores");
    lua_pushinteger(L, smt);
    lua_setfield(L, -2, "smt");
    lua_pushinteger(L, rank);
    lua_setfield(L, -2, "local_rank");
    lua_pushinteger(L, size);
    lua_setfield(L, -2, "local_size");
    lua_pushstring(L, ld_cpu_split_describe());
    lua_setfield(L, -2, "text");
    lua_pushstring(L, ld_cpu_isa_name());
    lua_setfield(L, -2, "isa");
    lua_pushstring(L, ld_cpu_blas_describe());
    lua_setfield(L, -2, "blas");
    lua_pushstring(L, ld_cpu_bf16_gemm_describe());
    lua_setfield(L, -2, "bf16_gemm");
    lua_pushstring(L, ld_cpu_flush_wanted() ? "flushed" : "kept");   /* subnormals in CPU kernels (ld_device.h) */
    lua_setfield(L, -2, "denormals");
    int nd = ld_cpu_device_count();
    lua_createtable(L, nd, 0);
    for (int d = 0; d < nd; d++) {
        int pinned = 0, k = ld_cpu_device_cores(d, ids, MAX, &pinned);
        lua_createtable(L, 0, 4);
        lua_pushfstring(L, "cpu:%d", d);
        lua_setfield(L, -2, "name");
        lua_pushinteger(L, ld_cpu_device_threads(d));
        lua_setfield(L, -2, "threads");
        push_ids(L, ids, k);
        lua_setfield(L, -2, "cores");
        lua_pushboolean(L, pinned);
        lua_setfield(L, -2, "pinned");
        lua_rawseti(L, -2, d + 1);
    }
    lua_setfield(L, -2, "devices");
    return 1;
}

/* set_replica(id, n, global_batch [, device_name [, row_offset]]) or set_replica(nil) */
static int d_set_replica(lua_State *L) {
    if (lua_isnoneornil(L, 1)) { ld_replica_set(NULL); return 0; }
    ld_replica_ctx c = {(int)luaL_checkinteger(L, 1), (int)luaL_checkinteger(L, 2), luaL_optnumber(L, 3, 0), NULL, 0};
    if (c.n < 1 || c.id < 0 || c.id >= c.n) return luaL_argerror(L, 1, lua_pushfstring(L, "replica %d of %d", c.id, c.n));
    if (!lua_isnoneornil(L, 4)) c.device = check_device(L, 4);
    c.row_offset = (int64_t)luaL_optinteger(L, 5, 0);
    if (c.row_offset < 0) return luaL_argerror(L, 5, "the first row cannot be negative");
    ld_replica_set(&c);
    return 0;
}

/* replica() -> id, n, global_batch, device_name (nil when none), row_offset; nothing outside a replica */
static int d_replica(lua_State *L) {
    const ld_replica_ctx *c = ld_replica_get();
    if (!c) return 0;
    lua_pushinteger(L, c->id);
    lua_pushinteger(L, c->n);
    lua_pushnumber(L, c->global_batch);
    if (c->device) lua_pushstring(L, c->device->name); else lua_pushnil(L);
    lua_pushinteger(L, (lua_Integer)c->row_offset);
    return 5;
}

/* step_begin(n) / step_end(): per-replica random streams for one step (ld_strategy.h) */
static int d_step_begin(lua_State *L) {
    if (ld_replica_step_begin((int)luaL_checkinteger(L, 1))) return lb_engine_error(L, 1);
    return 0;
}
static int d_step_end(lua_State *L) { (void)L; ld_replica_step_end(); return 0; }

static int d_mirror_devices(lua_State *L) {
    ld_device *devs[LD_MAX_LOGICAL];
    int n = lua_isnoneornil(L, 1) ? 0 : lb_check_devices(L, 1, devs);
    if (ld_mirror_set_devices(n, devs)) return lb_engine_error(L, 1);
    return 0;
}

/* mirror_copies(v) -> {copy0, copy1, ...} */
static int d_mirror_copies(lua_State *L) {
    ld_tensor *v = lb_check_tensor(L, 1);
    int n = ld_mirror_count(v);
    lua_createtable(L, n, 0);
    for (int r = 0; r < n; r++) {
        lb_push_tensor(L, ld_tensor_retain(ld_mirror_copy(v, r)), 0);
        lua_rawseti(L, -2, r + 1);
    }
    return 1;
}

static int d_comm_new(lua_State *L) {
    ld_device *devs[LD_MAX_LOGICAL];
    int n = lb_check_devices(L, 1, devs);
    const char *impl = luaL_optstring(L, 2, "all_reduce");
    ld_comm_impl k;
    if (!strcmp(impl, "all_reduce")) k = LD_COMM_ALL_REDUCE;
    else if (!strcmp(impl, "reduce_to_one_device")) k = LD_COMM_REDUCE_TO_ONE;
    else return luaL_argerror(L, 2, "cross_device_ops must be \"all_reduce\" or \"reduce_to_one_device\"");
    ld_comm **p = lua_newuserdatauv(L, sizeof *p, 0);
    *p = NULL;
    luaL_setmetatable(L, COMM_MT);
    *p = ld_comm_new(n, devs, k);
    if (!*p) return lb_engine_error(L, 1);
    return 1;
}

static ld_comm *check_comm(lua_State *L, int i) {
    ld_comm **p = luaL_checkudata(L, i, COMM_MT);
    if (!*p) luaL_argerror(L, i, "communicator has been freed");
    return *p;
}

static int comm_gc(lua_State *L) {
    ld_comm **p = luaL_checkudata(L, 1, COMM_MT);
    ld_comm_free(*p);
    *p = NULL;
    return 0;
}

/* comm:all_reduce(per_replica_lists, mean): lists[r] is replica r's table of tensors */
static int comm_all_reduce(lua_State *L) {
    ld_comm *c = check_comm(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    int mean = lua_toboolean(L, 3);
    int n = (int)luaL_len(L, 2);
    lua_geti(L, 2, 1);
    luaL_checktype(L, -1, LUA_TTABLE);
    int k = (int)luaL_len(L, -1);
    lua_pop(L, 1);
    ld_tensor **t = lua_newuserdatauv(L, sizeof *t * (size_t)(n * k > 0 ? n * k : 1), 0);
    for (int r = 0; r < n; r++) {
        lua_geti(L, 2, r + 1);
        luaL_checktype(L, -1, LUA_TTABLE);
        if ((int)luaL_len(L, -1) != k)
            return luaL_error(L, "all_reduce: replica %d gave %d tensors, replica 0 gave %d", r, (int)luaL_len(L, -1), k);
        for (int i = 0; i < k; i++) {
            lua_geti(L, -1, i + 1);
            t[r * k + i] = lb_check_tensor_raw(L, -1);
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    if (ld_comm_all_reduce(c, k, t, mean)) return luaL_error(L, "%s", ld_error());
    return 0;
}

/* comm:apply_sharded(opt, per_replica_grads, vars) -> true when the sharded
   step was queued, false when this optimizer cannot shard (the caller then
   all-reduces and applies on every replica) */
static int comm_apply_sharded(lua_State *L) {
    ld_comm *c = check_comm(L, 1);
    ld_optimizer *o = lb_check_optimizer(L, 2);
    luaL_checktype(L, 3, LUA_TTABLE);
    luaL_checktype(L, 4, LUA_TTABLE);
    int n = (int)luaL_len(L, 3), k = (int)luaL_len(L, 4);
    if (n != ld_comm_size(c)) return luaL_error(L, "apply_sharded: %d gradient lists for %d replicas", n, ld_comm_size(c));
    ld_tensor **t = lua_newuserdatauv(L, sizeof *t * (size_t)(n * k + k + 1), 0);
    ld_tensor **v = t + n * k;
    for (int i = 0; i < k; i++) {
        lua_geti(L, 4, i + 1);
        v[i] = lb_check_tensor(L, -1);
        lua_pop(L, 1);
    }
    for (int r = 0; r < n; r++) {
        lua_geti(L, 3, r + 1);
        luaL_checktype(L, -1, LUA_TTABLE);
        for (int i = 0; i < k; i++) {
            lua_geti(L, -1, i + 1);
            t[r * k + i] = lua_isnil(L, -1) ? NULL : lb_check_tensor_raw(L, -1);
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    int st = ld_optimizer_apply_sharded(o, c, k, t, v);
    if (st > 0) return luaL_error(L, "%s", ld_error());
    lua_pushboolean(L, st == 0);
    return 1;
}

static int comm_stats(lua_State *L) {
    ld_comm *c = check_comm(L, 1);
    ld_comm_stats s;
    ld_comm_stats_get(c, &s, lua_toboolean(L, 2));
    lua_createtable(L, 0, 4);
    lua_pushinteger(L, s.calls); lua_setfield(L, -2, "calls");
    lua_pushinteger(L, s.bytes); lua_setfield(L, -2, "bytes");
    lua_pushnumber(L, s.seconds); lua_setfield(L, -2, "seconds");
    lua_pushinteger(L, s.products); lua_setfield(L, -2, "products");
    return 1;
}

static int d_sync(lua_State *L) {
    ld_device_synchronize(check_device(L, 1));
    return 0;
}

static int d_trace_enable(lua_State *L) {
    ld_device *devs[LD_MAX_LOGICAL];
    int n = lb_check_devices(L, 1, devs), on = lua_toboolean(L, 2);
    for (int i = 0; i < n; i++) ld_trace_enable(devs[i], on);
    return 0;
}

/* span kinds by name, as ld_executor.h numbers them */
static const char *const span_kinds[] = {"none", "compute", "wait", "allreduce", "input", "forward", "backward",
                                         "optimizer", NULL};

/* trace_take(device) -> {{kind, start, end, step}, ...} (kinds: span_kinds; step 0: none) */
static int d_trace_take(lua_State *L) {
    ld_device *d = check_device(L, 1);
    ld_span *s;
    int n = ld_trace_take(d, &s);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_createtable(L, 4, 0);
        int k = s[i].kind >= 0 && s[i].kind < LD_SPAN_KINDS ? s[i].kind : 0;
        lua_pushstring(L, span_kinds[k]); lua_rawseti(L, -2, 1);
        lua_pushnumber(L, s[i].start); lua_rawseti(L, -2, 2);
        lua_pushnumber(L, s[i].end); lua_rawseti(L, -2, 3);
        lua_pushinteger(L, s[i].step); lua_rawseti(L, -2, 4);
        lua_rawseti(L, -2, i + 1);
    }
    free(s);
    return 1;
}

static int d_trace_record(lua_State *L) {
    ld_device *d = check_device(L, 1);
    int k = luaL_checkoption(L, 2, NULL, span_kinds);
    ld_executor_record(d, k, luaL_checknumber(L, 3), luaL_checknumber(L, 4));
    return 0;
}

/* trace_phase(name | nil) -> the previous phase's name (or nil): the phase of
   the work this thread issues from now on ("compute", "input", "forward",
   "backward", "optimizer"; nil: none), see ld_trace_phase */
static int d_trace_phase(lua_State *L) {
    int k = lua_isnoneornil(L, 1) ? LD_SPAN_NONE : luaL_checkoption(L, 1, NULL, span_kinds);
    if (k == LD_SPAN_WAIT || k == LD_SPAN_ALLREDUCE)
        return luaL_argerror(L, 1, "a phase: compute, input, forward, backward or optimizer");
    int was = ld_trace_phase(k);
    if (was) lua_pushstring(L, span_kinds[was]); else lua_pushnil(L);
    return 1;
}

/* trace_step(n) -> the previous step number: spans recorded for the work
   issued from now on carry step n (0: none) */
static int d_trace_step(lua_State *L) {
    lua_pushinteger(L, ld_trace_step((int)luaL_optinteger(L, 1, 0)));
    return 1;
}

static int d_host_async(lua_State *L) {
    if (ld_host_async(lua_toboolean(L, 1))) return lb_engine_error(L, 1);
    return 0;
}

/* read_async(t) -> a pending read whose :item() waits only for the kernels
   queued before it (model:fit reads a step's loss one step late this way,
   while the next step is already queued behind it) */
#define PENDING_MT "ldist.PendingRead"
static int d_read_async(lua_State *L) {
    ld_tensor *t = lb_check_tensor(L, 1);
    ld_pending_read **u = lua_newuserdatauv(L, sizeof *u, 0);
    *u = NULL;
    luaL_setmetatable(L, PENDING_MT);
    if (!(*u = ld_tensor_read_async(t))) return lb_engine_error(L, 1);
    return 1;
}
static int pending_item(lua_State *L) {
    ld_pending_read **u = luaL_checkudata(L, 1, PENDING_MT);
    if (!*u) return luaL_error(L, "this pending read is closed");
    ld_dtype dt;
    int64_t n;
    const void *p = ld_pending_read_wait(*u, &dt, &n);
    if (!p) { lua_pushstring(L, ld_error()); return lua_error(L); }   /* bad input a queued kernel found: its own words */
    if (n != 1) return luaL_error(L, "item: the tensor read has %I elements, not one", (lua_Integer)n);
    switch (dt) {
    case LD_F32: lua_pushnumber(L, *(const float *)p); break;
    case LD_I32: lua_pushinteger(L, *(const int32_t *)p); break;
    case LD_I64: lua_pushinteger(L, *(const int64_t *)p); break;
    case LD_U8: lua_pushinteger(L, *(const uint8_t *)p); break;
    case LD_F16: lua_pushnumber(L, ld_f16_to_f32(*(const uint16_t *)p)); break;
    case LD_BF16: lua_pushnumber(L, ld_bf16_to_f32(*(const uint16_t *)p)); break;
    default: return luaL_error(L, "item: unsupported dtype");
    }
    return 1;
}
static int pending_gc(lua_State *L) {
    ld_pending_read **u = luaL_checkudata(L, 1, PENDING_MT);
    ld_pending_read_free(*u);
    *u = NULL;
    return 0;
}

/* _distribute.collector_steps(on) -> the previous setting: model:fit's
   device collections at its steps' ends (tensor.c); _distribute.
   collector_step(): a step's end */
static int d_collector_steps(lua_State *L) {
    lua_pushboolean(L, lb_collector_steps(L, lua_toboolean(L, 1)));
    return 1;
}
static int d_collector_step(lua_State *L) {
    lb_collector_step(L);
    return 0;
}

/* _distribute.kernel_calls() -> {name = calls} for every kernel slot (ld_kernels.h) */
static int d_kernel_calls(lua_State *L) {
    lua_createtable(L, 0, ld_kernel_count());
    for (int k = 0; k < ld_kernel_count(); k++) {
        lua_pushinteger(L, (lua_Integer)ld_kernel_calls(k));
        lua_setfield(L, -2, ld_kernel_name(k));
    }
    return 1;
}

static int d_is_async(lua_State *L) { lua_pushboolean(L, ld_device_is_async(check_device(L, 1))); return 1; }

int lb_open_distribute_c(lua_State *L) {
    luaL_newmetatable(L, COMM_MT);
    static const luaL_Reg cm[] = {{"all_reduce", comm_all_reduce}, {"apply_sharded", comm_apply_sharded}, {"stats", comm_stats}, {NULL, NULL}};
    lua_newtable(L);
    luaL_setfuncs(L, cm, 0);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, comm_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
    luaL_newmetatable(L, PENDING_MT);
    lua_newtable(L);
    lua_pushcfunction(L, pending_item);
    lua_setfield(L, -2, "item");
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, pending_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
    static const luaL_Reg f[] = {
        {"read_async", d_read_async},
        {"cpu_devices", d_cpu_devices}, {"cpu_split", d_cpu_split}, {"set_replica", d_set_replica}, {"replica", d_replica},
        {"step_begin", d_step_begin}, {"step_end", d_step_end},
        {"mirror_devices", d_mirror_devices}, {"mirror_copies", d_mirror_copies}, {"comm_new", d_comm_new},
        {"sync", d_sync}, {"trace_enable", d_trace_enable}, {"trace_take", d_trace_take},
        {"trace_record", d_trace_record}, {"trace_phase", d_trace_phase}, {"trace_step", d_trace_step}, {"is_async", d_is_async}, {"host_async", d_host_async},
        {"kernel_calls", d_kernel_calls}, {"collector_steps", d_collector_steps},
        {"collector_step", d_collector_step}, {NULL, NULL}};
    luaL_newlib(L, f);
    return 1;
}
