/*
 * netload.c - the network half of ldist (the Jupyter kernel, the cluster
 * control plane and ring all-reduce: everything that needs ZeroMQ, OpenSSL
 * and jansson) lives in a plugin, build/ldist_net.so, opened on first use.
 * Loading those libraries costs ~10 ms; a REPL or a script that never uses
 * them should not pay it at start-up.
 *
 * The `ldist` program calls ldist_net_symbol() for `ldist kernel` / `ldist
 * launch`, and ldist._cluster is a table that fills itself from the plugin
 * the first time a field is read. ldist.so (the module for stock lua5.4)
 * links the same code in and never opens the plugin.
 */
#include "ldist.h"
#include "lbind.h"

#include <dlfcn.h>
#include <lauxlib.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef LD_PREFIX
#define LD_PREFIX "/usr/local"
#endif

static void *net_handle;
static char net_error[1024];

static void *try_open(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!h && !net_error[0]) snprintf(net_error, sizeof net_error, "%s", dlerror());
    return h;
}

void *ldist_net_symbol(const char *name) {
    if (!net_handle) {
        const char *env = getenv("LDIST_NET_PLUGIN");
        if (env && *env) net_handle = try_open(env);
        if (!net_handle) {
            char exe[PATH_MAX], path[PATH_MAX + 64];
            ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
            if (n > 0) {
                exe[n] = 0;
                char *slash = strrchr(exe, '/');
                if (slash) *slash = 0;
                const char *rel[] = {"/build/ldist_net.so", "/ldist_net.so", "/../lib/ldist/ldist_net.so"};
                for (size_t i = 0; i < sizeof rel / sizeof *rel && !net_handle; i++) {
                    snprintf(path, sizeof path, "%s%s", exe, rel[i]);
                    if (access(path, R_OK) == 0) net_handle = try_open(path);
                }
            }
        }
        if (!net_handle && access(LD_PREFIX "/lib/ldist/ldist_net.so", R_OK) == 0)
            net_handle = try_open(LD_PREFIX "/lib/ldist/ldist_net.so");
        if (!net_handle) return NULL;
    }
    return dlsym(net_handle, name);
}

const char *ldist_net_error(void) {
    return net_error[0] ? net_error : "ldist_net.so not found next to ldist, in build/, or in " LD_PREFIX "/lib/ldist";
}

/* ldist._cluster when the cluster module is not linked in: the first field
   read opens the plugin and copies the module's functions into the table. */
static int lazy_cluster_index(lua_State *L) {
    lua_CFunction open = (lua_CFunction)ldist_net_symbol("lb_open_cluster");
    if (!open) return luaL_error(L, "the cluster module is not available: %s", ldist_net_error());
    lua_pushnil(L);
    lua_setmetatable(L, 1);
    lua_pushcfunction(L, open);
    lua_call(L, 0, 1);
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        lua_pushvalue(L, -2);
        lua_insert(L, -2);
        lua_rawset(L, 1);
    }
    lua_pop(L, 1);
    lua_pushvalue(L, 2);
    lua_rawget(L, 1);
    return 1;
}

void ldist_push_lazy_cluster(lua_State *L) {
    lua_newtable(L);
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, lazy_cluster_index);
    lua_setfield(L, -2, "__index");
    lua_setmetatable(L, -2);
}
