/*
 * io.c - the `io` module of ldist (ldist.io; not Lua's own io library):
 * safetensors files, the format Hugging Face, PyTorch and Keras 3 share.
 *
 *     ldist.io.save_safetensors("w.safetensors", {["dense/kernel"] = w, bias = b}, {epoch = 3})
 *     local tensors, meta = ldist.io.load_safetensors("w.safetensors")
 *
 * and, for the prelude's own writers (CSVLogger, plots, traces), Lua file
 * handles that never follow a planted link (engine/ld_file.h):
 *
 *     local f = ldist.io._open_write(path)        -- "w": a temporary file, renamed over path by f:close()
 *     local f = ldist.io._open_write(path, "s")   -- "s": a new file written as it goes (what was at
 *                                                 --      path, a link included, is removed first)
 *     local f = ldist.io._open_write(path, "a")   -- "a": appends; refuses a link or a hard-linked file
 */
#include "lbind.h"
#include "ld_io.h"
#include "ld_file.h"

#include <lauxlib.h>
#include <unistd.h>
#include <errno.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>

static int sort_names(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* save_safetensors(path, {name = tensor, ...}, {key = value, ...}?) */
static int l_save_safetensors(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    if (!lua_isnoneornil(L, 3)) luaL_checktype(L, 3, LUA_TTABLE);
    lua_settop(L, 3);
    /* count, then collect into Lua-owned memory (nothing leaks if we raise) */
    int n = 0, nm = 0;
    lua_pushnil(L);
    while (lua_next(L, 2)) {
        if (lua_type(L, -2) != LUA_TSTRING)
            return luaL_argerror(L, 2, lua_pushfstring(L, "tensor names must be strings, got a %s key", luaL_typename(L, -2)));
        if (!lb_test_tensor(L, -1))
            return luaL_argerror(L, 2, lua_pushfstring(L, "'%s' is a %s, not a tensor", lua_tostring(L, -2), luaL_typename(L, -1)));
        n++;
        lua_pop(L, 1);
    }
    if (!lua_isnil(L, 3)) {
        lua_pushnil(L);
        while (lua_next(L, 3)) { nm++; lua_pop(L, 1); }
    }
    const char **names = lua_newuserdatauv(L, sizeof *names * (size_t)(n + 1), 0);
    ld_tensor **ts = lua_newuserdatauv(L, sizeof *ts * (size_t)(n + 1), 0);
    const char **kv = lua_newuserdatauv(L, sizeof *kv * (size_t)(2 * nm + 1), 0);
    lua_newtable(L);                                  /* anchors converted metadata strings */
    int anchor = lua_gettop(L);
    int i = 0;
    lua_pushnil(L);
    while (lua_next(L, 2)) {
        names[i++] = lua_tostring(L, -2);             /* keys stay alive in the table */
        lua_pop(L, 1);
    }
    qsort(names, (size_t)n, sizeof *names, sort_names); /* a stable file for a given table */
    for (i = 0; i < n; i++) {
        lua_getfield(L, 2, names[i]);
        ts[i] = lb_test_tensor(L, -1);
        lua_pop(L, 1);
    }
    i = 0;
    if (nm) {
        lua_pushnil(L);
        while (lua_next(L, 3)) {
            int tk = lua_type(L, -2), tv = lua_type(L, -1);
            if (tk != LUA_TSTRING)
                return luaL_argerror(L, 3, lua_pushfstring(L, "metadata keys must be strings, got a %s", luaL_typename(L, -2)));
            if (tv != LUA_TSTRING && tv != LUA_TNUMBER && tv != LUA_TBOOLEAN)
                return luaL_argerror(L, 3, lua_pushfstring(L, "metadata '%s' is a %s; strings, numbers or booleans expected",
                                                           lua_tostring(L, -2), luaL_typename(L, -1)));
            kv[2 * i] = lua_tostring(L, -2);
            luaL_tolstring(L, -1, NULL);              /* 3 -> "3", true -> "true" */
            kv[2 * i + 1] = lua_tostring(L, -1);
            lua_rawseti(L, anchor, i + 1);
            lua_pop(L, 1);
            i++;
        }
    }
    if (ld_save_safetensors(path, n, names, ts, nm, kv) != LD_OK) return lb_engine_error(L, 0);
    lua_pushboolean(L, 1);
    return 1;
}

/* load_safetensors(path) -> {name = tensor}, {key = value} */
static int l_load_safetensors(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    ld_tensor_dict d = {0};
    int nm = 0;
    char **kv = NULL;
    if (ld_load_safetensors_meta(path, &d, &nm, &kv) != LD_OK) return lb_engine_error(L, 0);
    /* Hand every tensor to Lua first (each push takes its reference), then
       free the C arrays; a memory error midway leaks at most the rest. */
    lua_createtable(L, 0, d.n);
    for (int i = 0; i < d.n; i++) {
        ld_tensor *t = d.tensors[i];
        d.tensors[i] = NULL;
        lb_push_tensor(L, t, 0);
        lua_setfield(L, -2, d.names[i]);
    }
    ld_tensor_dict_free(&d);
    lua_createtable(L, 0, nm);
    for (int i = 0; i < nm; i++) {
        lua_pushstring(L, kv[2 * i + 1]);
        lua_setfield(L, -2, kv[2 * i]);
    }
    ld_strings_free(kv, 2 * nm);
    return 2;
}

/* io._mkdir_p(path): the directory and its parents (0755), for checkpoints */
static int l_mkdir_p(lua_State *L) {
    const char *p = luaL_checkstring(L, 1);
    char buf[4096];
    if (strlen(p) >= sizeof buf) return luaL_argerror(L, 1, "path too long");
    strcpy(buf, p);
    for (char *q = buf + 1; ; q++) {
        if (*q == '/' || *q == 0) {
            char c = *q;
            *q = 0;
            if (mkdir(buf, 0755) && errno != EEXIST) return luaL_error(L, "cannot create directory %s: %s", buf, strerror(errno));
            *q = c;
            if (!c) break;
        }
    }
    return 0;
}

/* A Lua file handle (Lua's own io methods work on it) whose close commits the
   temporary file: the luaL_Stream comes first, so io's functions see a
   stream; the rest says where the data goes. */
typedef struct {
    luaL_Stream s;
    ld_wfile w;       /* "w": the temporary file (w.f is s.f); empty for "a" */
} write_stream;

static int ws_close_replace(lua_State *L) {
    write_stream *ws = (write_stream *)luaL_checkudata(L, 1, LUA_FILEHANDLE);
    ws->s.f = NULL;                       /* ld_wfile_commit closes it */
    if (ld_wfile_commit(&ws->w) != LD_OK) {
        luaL_pushfail(L);
        lua_pushstring(L, ld_error());
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}

static int ws_close_plain(lua_State *L) {
    luaL_Stream *s = (luaL_Stream *)luaL_checkudata(L, 1, LUA_FILEHANDLE);
    int ok = fclose(s->f) == 0;
    s->f = NULL;
    return luaL_fileresult(L, ok, NULL);
}

/* io._open_write(path [, "w"|"s"|"a"]) -> a file handle, or nil and a message */
static int l_open_write(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    const char *mode = luaL_optstring(L, 2, "w");
    int append = !strcmp(mode, "a"), stream = !strcmp(mode, "s");
    if (!append && !stream && strcmp(mode, "w")) return luaL_argerror(L, 2, "mode must be \"w\", \"s\" or \"a\"");
    write_stream *ws = (write_stream *)lua_newuserdatauv(L, sizeof *ws, 0);
    memset(ws, 0, sizeof *ws);
    ws->s.closef = NULL;                  /* "closed" until the file is open (liolib's way) */
    luaL_setmetatable(L, LUA_FILEHANDLE);
    if (append) ws->s.f = ld_file_append(path, NULL);
    else if (stream) {
        /* unlink removes a link itself, never its target; a name planted
           again before the exclusive create makes the create fail */
        if (unlink(path) != 0 && errno != ENOENT) {
            luaL_pushfail(L);
            lua_pushfstring(L, "cannot replace '%s': %s", path, strerror(errno));
            return 2;
        }
        ws->s.f = ld_file_create(path);
    } else if (ld_wfile_begin(&ws->w, path) == LD_OK) ws->s.f = ws->w.f;
    if (!ws->s.f) {
        luaL_pushfail(L);
        lua_pushstring(L, ld_error());
        return 2;
    }
    ws->s.closef = append || stream ? ws_close_plain : ws_close_replace;
    return 1;
}

static const luaL_Reg io_funcs[] = {
    {"save_safetensors", l_save_safetensors},
    {"load_safetensors", l_load_safetensors},
    {"_mkdir_p", l_mkdir_p},
    {"_open_write", l_open_write},
    {NULL, NULL},
};

int lb_open_io(lua_State *L) {
    luaL_newlib(L, io_funcs);
    return 1;
}
