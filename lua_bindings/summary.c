/*
 * summary.c - ldist._summary: TensorBoard event-file writers for the
 * TensorBoard callback (lua_bindings/lua/keras/callbacks.lua).
 *
 *     local w = ldist._summary.open("logs/train")   -- a new events.out.tfevents.* file
 *     w:scalar("epoch_loss", 0.42, 3)                -- tag, value, step
 *     w:histogram("dense/kernel/histogram", t, 3)    -- tag, tensor, step (30 buckets, as TF)
 *     w:flush(); w:close()                            -- (closed when collected too)
 *     w:path()
 *     ldist._summary.crc32c(s), .masked_crc32c(s), .frame(s)   -- TFRecord pieces
 */
#include "lbind.h"
#include "ld_core.h"
#include "ld_io_tfevents.h"
#include "ld_tensor.h"

#include <lauxlib.h>
#include <stdlib.h>

#define WRITER_MT "ldist.SummaryWriter"

static ld_tfevents **check_writer(lua_State *L) {
    ld_tfevents **w = luaL_checkudata(L, 1, WRITER_MT);
    if (!*w) luaL_error(L, "the summary writer is closed");
    return w;
}

static int l_open(lua_State *L) {
    const char *dir = luaL_checkstring(L, 1);
    ld_tfevents **w = lua_newuserdatauv(L, sizeof *w, 0);
    *w = NULL;
    luaL_setmetatable(L, WRITER_MT);
    if (!(*w = ld_tfevents_open(dir))) return lb_engine_error(L, 1);
    return 1;
}

static int l_scalar(lua_State *L) {
    ld_tfevents **w = check_writer(L);
    const char *tag = luaL_checkstring(L, 2);
    lua_Number v = luaL_checknumber(L, 3);
    lua_Integer step = luaL_checkinteger(L, 4);
    int st = lua_isnoneornil(L, 5) ? ld_tfevents_scalar(*w, tag, (float)v, (int64_t)step)
                                   : ld_tfevents_scalar_at(*w, tag, (float)v, (int64_t)step, luaL_checknumber(L, 5));
    if (st != LD_OK) return lb_engine_error(L, 0);
    return 0;
}

static int l_histogram(lua_State *L) {
    ld_tfevents **w = check_writer(L);
    const char *tag = luaL_checkstring(L, 2);
    ld_tensor *t = lb_check_tensor(L, 3);
    lua_Integer step = luaL_checkinteger(L, 4);
    /* the values in float32 on the host, wherever t lives and whatever its dtype */
    ld_tensor *f = t->dtype == LD_F32 ? ld_tensor_retain(t) : ld_cast(t, LD_F32);
    if (!f) return lb_engine_error(L, 3);
    ld_pending_read *r = ld_tensor_read_async(f);
    if (!r) { ld_tensor_release(f); return lb_engine_error(L, 3); }
    ld_dtype dt;
    int64_t n;
    const void *p = ld_pending_read_wait(r, &dt, &n);
    int st = p ? ld_tfevents_histogram(*w, tag, p, (size_t)n, (int64_t)step) : LD_EARG;
    ld_pending_read_free(r);
    ld_tensor_release(f);
    if (st != LD_OK) return lb_engine_error(L, 0);
    return 0;
}

static int l_flush(lua_State *L) {
    ld_tfevents **w = check_writer(L);
    if (ld_tfevents_flush(*w) != LD_OK) return lb_engine_error(L, 0);
    return 0;
}

static int l_close(lua_State *L) {
    ld_tfevents **w = luaL_checkudata(L, 1, WRITER_MT);
    ld_tfevents *e = *w;
    *w = NULL;
    if (e && ld_tfevents_close(e) != LD_OK) return lb_engine_error(L, 0);
    return 0;
}

static int l_gc(lua_State *L) {
    ld_tfevents **w = luaL_checkudata(L, 1, WRITER_MT);
    if (*w) { ld_tfevents_close(*w); *w = NULL; }
    return 0;
}

static int l_path(lua_State *L) {
    ld_tfevents **w = check_writer(L);
    lua_pushstring(L, ld_tfevents_path(*w));
    return 1;
}

static int l_tostring(lua_State *L) {
    ld_tfevents **w = luaL_checkudata(L, 1, WRITER_MT);
    if (*w) lua_pushfstring(L, "<SummaryWriter %s>", ld_tfevents_path(*w));
    else lua_pushliteral(L, "<SummaryWriter (closed)>");
    return 1;
}

static int l_crc32c(lua_State *L) {
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    lua_pushinteger(L, (lua_Integer)ld_crc32c(0, s, n));
    return 1;
}

static int l_masked(lua_State *L) {
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    lua_pushinteger(L, (lua_Integer)ld_crc32c_masked(s, n));
    return 1;
}

static int l_frame(lua_State *L) {
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    luaL_Buffer b;
    unsigned char *out = (unsigned char *)luaL_buffinitsize(L, &b, n + 16);
    ld_tfevents_frame(s, n, out);
    luaL_pushresultsize(&b, n + 16);
    return 1;
}

static const luaL_Reg writer_methods[] = {
    {"scalar", l_scalar},
    {"histogram", l_histogram},
    {"flush", l_flush},
    {"close", l_close},
    {"path", l_path},
    {NULL, NULL},
};

static const luaL_Reg summary_funcs[] = {
    {"open", l_open},
    {"crc32c", l_crc32c},
    {"masked_crc32c", l_masked},
    {"frame", l_frame},
    {NULL, NULL},
};

int lb_open_summary(lua_State *L) {
    if (luaL_newmetatable(L, WRITER_MT)) {
        luaL_newlib(L, writer_methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, l_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, l_gc);
        lua_setfield(L, -2, "__close");
        lua_pushcfunction(L, l_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pop(L, 1);
    luaL_newlib(L, summary_funcs);
    return 1;
}
