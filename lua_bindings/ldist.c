/*
 * ldist.c - luaopen_ldist: the module table every front end shares.
 *
 * C modules are opened into fields of the table (ldist.tensor, ldist.nn, ...),
 * then the Lua prelude (the files lua_bindings/lua/prelude.lua lists, embedded at
 * build time, run in its order) adds what is simpler in Lua; each chunk receives the module
 * table as its argument. `ldist.globals` lists the names ldist_newstate makes
 * global, so the seed's example runs without a single `require`.
 */
#include "ldist.h"
#include "lbind.h"
#include "ld_core.h"
#include "ld_device.h"
#include "ld_pool.h"

#include <lauxlib.h>
#include <string.h>
#include <time.h>

extern const char *const ldist_prelude_names[];
extern const char *const ldist_prelude_chunks[];
extern const size_t ldist_prelude_sizes[];

/* The cluster module is weak: the ldist program keeps it (with ZeroMQ and
   OpenSSL) in the network plugin and opens it on first use; ldist.so links it. */
#pragma weak lb_open_cluster

static const struct { const char *name; int (*open)(lua_State *); } c_modules[] = {
    {"tensor", lb_open_tensor},
    {"autograd", lb_open_autograd},
    {"nn", lb_open_nn},
    {"losses", lb_open_losses},
    {"_distribute", lb_open_distribute_c},
    {"optim", lb_open_optim},
    {"data", lb_open_data},
    {"io", lb_open_io},
    {"json", lb_open_json},
    {"_cluster", lb_open_cluster},
    {"_summary", lb_open_summary},
    {"_image", lb_open_image},
};

static void pressure_gc(void *ud) {
    /* Called by the engine when an allocation fails: a full collection frees
       tensors Lua no longer references, then the engine retries once. Only
       safe on the Lua thread, which is the one that allocates from Lua. */
    lua_State *L = ud;
    lua_gc(L, LUA_GCCOLLECT);
    lb_collector_pressure();   /* the device pace was too slow for this machine's memory */
}

/* ldist.clock(): monotonic wall-clock seconds (os.clock is CPU time, which
   counts every thread and so misleads on parallel work). */
static int l_clock(lua_State *L) {
    lua_pushnumber(L, ld_now());
    return 1;
}

/* ldist.set_num_threads(n) / ldist.get_num_threads(): threads of cpu:0's kernels */
static int l_set_threads(lua_State *L) {
    lua_Integer n = luaL_checkinteger(L, 1);
    if (n < 1 || n > 256) return luaL_argerror(L, 1, "number of threads must be in 1..256");
    ld_cpu_set_threads((int)n);
    return 0;
}
static int l_get_threads(lua_State *L) { lua_pushinteger(L, ld_cpu_threads()); return 1; }

int lb_call_hook(lua_State *L, const char *module, const char *name, int nargs) {
    lua_getfield(L, LUA_REGISTRYINDEX, "ldist.module");
    if (lua_istable(L, -1)) lua_getfield(L, -1, module);
    else lua_pushnil(L);
    if (lua_istable(L, -1)) lua_getfield(L, -1, name);
    else lua_pushnil(L);
    if (!lua_isfunction(L, -1)) { lua_pop(L, 3 + nargs); return 0; }
    lua_replace(L, -3);                      /* fn, module, args... -> fn below the args */
    lua_pop(L, 1);
    lua_insert(L, -1 - nargs);
    lua_call(L, nargs, 0);
    return 1;
}

int luaopen_ldist(lua_State *L) {
    lua_newtable(L);
    lua_pushliteral(L, LD_VERSION);
    lua_setfield(L, -2, "version");
    lua_newtable(L);                         /* ldist.docs: object or name -> text */
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, "ldist.docs");
    lua_setfield(L, -2, "docs");
    lua_newtable(L);
    lua_setfield(L, -2, "globals");
    lua_pushvalue(L, -1);                    /* bindings reach the prelude's hooks (lb_call_hook) */
    lua_setfield(L, LUA_REGISTRYINDEX, "ldist.module");
    lua_pushcfunction(L, l_clock);
    lua_setfield(L, -2, "clock");
    lua_pushcfunction(L, l_set_threads);
    lua_setfield(L, -2, "set_num_threads");
    lua_pushcfunction(L, l_get_threads);
    lua_setfield(L, -2, "get_num_threads");
    for (size_t i = 0; i < sizeof c_modules / sizeof c_modules[0]; i++) {
        if (!c_modules[i].open) {
            /* in the ldist program the cluster module lives in the network plugin */
            if (!strcmp(c_modules[i].name, "_cluster")) {
                ldist_push_lazy_cluster(L);
                lua_setfield(L, -2, "_cluster");
            }
            continue;
        }
        lua_pushcfunction(L, c_modules[i].open);
        lua_call(L, 0, 1);
        lua_setfield(L, -2, c_modules[i].name);
    }
    ldist_set_helpers(L);
    ld_set_pressure_hook(pressure_gc, L);
    /* ldist_newstate_deferred leaves the prelude to ldist_finish_state */
    int deferred = lua_getfield(L, LUA_REGISTRYINDEX, LDIST_PRELUDE_DEFERRED) != LUA_TNIL;
    lua_pop(L, 1);
    if (!deferred) ldist_run_prelude(L);
    return 1;
}

void ldist_run_prelude(lua_State *L) {
    for (int i = 0; ldist_prelude_names[i]; i++) {
        /* precompiled at build time (scripts/embed.lua): loading bytecode is
           several times faster than parsing, and start-up matters in a REPL */
        if (luaL_loadbufferx(L, ldist_prelude_chunks[i], ldist_prelude_sizes[i], ldist_prelude_names[i], "b") != LUA_OK)
            lua_error(L);
        lua_pushvalue(L, -2);
        lua_call(L, 1, 0);
    }
}
