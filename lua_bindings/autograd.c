/*
 * autograd.c - the `autograd` module: GradientTape.
 *
 *   local tape = autograd.GradientTape()
 *   local loss = tape:record(function() return loss_fn(y, model(x)) end)
 *   local grads = tape:gradient(loss, model.trainable_variables)
 *
 * tape:record runs the function with the tape recording and stops it even
 * when the function raises; it returns the function's results. For code that
 * does not fit in a function, tape:start() ... tape:stop() does the same.
 */
#include "lbind.h"
#include "ld_autograd.h"

#include <lauxlib.h>

#define TAPE_MT "ldist.GradientTape"

typedef struct { ld_tape *tape; int active; } lb_tape;

static lb_tape *check_tape(lua_State *L, int i) {
    lb_tape *t = luaL_checkudata(L, i, TAPE_MT);
    if (!t->tape) luaL_argerror(L, i, "tape has been freed");
    return t;
}

static int tape_new(lua_State *L) {
    int persistent = 0;
    if (lua_istable(L, 1)) { lua_getfield(L, 1, "persistent"); persistent = lua_toboolean(L, -1); lua_pop(L, 1); }
    lb_tape *t = lua_newuserdatauv(L, sizeof *t, 0);
    t->tape = NULL;
    t->active = 0;
    luaL_setmetatable(L, TAPE_MT);
    t->tape = ld_tape_new(persistent);
    if (!t->tape) return lb_engine_error(L, 0);
    return 1;
}

static int tape_gc(lua_State *L) {
    lb_tape *t = luaL_checkudata(L, 1, TAPE_MT);
    if (t->active) { ld_tape_pop(t->tape); t->active = 0; }
    ld_tape_free(t->tape);
    t->tape = NULL;
    return 0;
}

static int tape_start(lua_State *L) {
    lb_tape *t = check_tape(L, 1);
    if (!t->active) { ld_tape_push(t->tape); t->active = 1; }
    lua_settop(L, 1);
    return 1;
}

static int tape_stop(lua_State *L) {
    lb_tape *t = check_tape(L, 1);
    if (t->active) { ld_tape_pop(t->tape); t->active = 0; }
    return 0;
}

static int tape_record(lua_State *L) {
    lb_tape *t = check_tape(L, 1);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    int was = t->active;
    if (!was) { ld_tape_push(t->tape); t->active = 1; }
    int base = 2, nargs = lua_gettop(L) - 2;
    int st = lb_pcall_kept(L, nargs, LUA_MULTRET);
    if (!was) { ld_tape_pop(t->tape); t->active = 0; }
    if (st != LUA_OK) return lua_error(L);
    return lua_gettop(L) - base + 1;
}

static int tape_watch(lua_State *L) {
    lb_tape *t = check_tape(L, 1);
    if (lua_istable(L, 2) && !lb_test_tensor(L, 2)) {
        lua_Integer n = luaL_len(L, 2);
        for (lua_Integer i = 1; i <= n; i++) {
            lua_geti(L, 2, i);
            if (ld_tape_watch(t->tape, lb_check_tensor(L, -1))) return lb_engine_error(L, 2);
            lua_pop(L, 1);
        }
        return 0;
    }
    if (ld_tape_watch(t->tape, lb_check_tensor(L, 2))) return lb_engine_error(L, 2);
    return 0;
}

/* tape:gradient(target, sources[, output_gradients | {output_gradients=}]) -> gradients, shaped like
   sources (a tensor or a table) */
static int tape_gradient(lua_State *L) {
    lb_tape *t = check_tape(L, 1);
    ld_tensor *target = lb_check_tensor(L, 2), *seed = NULL;
    if (lua_istable(L, 4) && !lb_test_tensor(L, 4)) {
        static const char *const names[] = {"output_gradients", NULL};
        lb_check_options(L, 4, "tape:gradient", names);
        lua_getfield(L, 4, "output_gradients");
        lua_replace(L, 4);
    }
    if (!lua_isnoneornil(L, 4)) seed = lb_check_tensor(L, 4);
    int single = lb_test_tensor(L, 3) != NULL;
    if (!single) luaL_checktype(L, 3, LUA_TTABLE);
    int n = single ? 1 : (int)luaL_len(L, 3);
    ld_tensor **src = lua_newuserdatauv(L, sizeof *src * (size_t)(n ? n : 1) * 2, 0);
    ld_tensor **grads = src + n;
    if (single) src[0] = lb_check_tensor(L, 3);
    else for (int i = 0; i < n; i++) {
        lua_geti(L, 3, i + 1);
        ld_tensor *s = lb_test_tensor(L, -1);
        if (!s) return luaL_error(L, "bad argument #2 to 'gradient' (source %d is a %s, not a tensor)", i + 1, luaL_typename(L, -1));
        src[i] = s;
        lua_pop(L, 1);
    }
    if (ld_tape_gradient_seeded(t->tape, target, seed, n, src, grads)) return lb_engine_error(L, 0);
    if (single) { lb_push_tensor(L, grads[0], 0); return 1; }
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        /* a gradient must not alias the cached variable userdata */
        lb_push_tensor(L, grads[i], 0);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* tape:jacobian(target, source | {sources}) -> [target's shape..., source's shape...] (a table for a table) */
static int tape_jacobian(lua_State *L) {
    lb_tape *t = check_tape(L, 1);
    ld_tensor *target = lb_check_tensor(L, 2), *j = NULL;
    if (lb_test_tensor(L, 3)) {
        if (ld_tape_jacobian(t->tape, target, lb_check_tensor(L, 3), &j)) return lb_engine_error(L, 0);
        lb_push_tensor(L, j, 0);
        return 1;
    }
    luaL_checktype(L, 3, LUA_TTABLE);
    int n = (int)luaL_len(L, 3);
    if (n > 1 && !ld_tape_persistent(t->tape))
        return luaL_error(L, "jacobian() of %d sources on a non-persistent tape: use GradientTape{persistent=true}", n);
    lua_createtable(L, n, 0);
    for (int i = 1; i <= n; i++) {
        lua_geti(L, 3, i);
        ld_tensor *s = lb_test_tensor(L, -1);
        if (!s) return luaL_error(L, "bad argument #2 to 'jacobian' (source %d is a %s, not a tensor)", i, luaL_typename(L, -1));
        if (ld_tape_jacobian(t->tape, target, s, &j)) return lb_engine_error(L, 0);
        lua_pop(L, 1);
        lb_push_tensor(L, j, 0);
        lua_rawseti(L, -2, i);
    }
    return 1;
}

/* tape:stop_recording(fn, ...): fn(...) with recording paused (on this
   thread), resumed even if fn raises; returns fn's results */
static int tape_stop_recording(lua_State *L) {
    check_tape(L, 1);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    int was = ld_tape_pause(1), nargs = lua_gettop(L) - 2;
    int st = lb_pcall_kept(L, nargs, LUA_MULTRET);
    ld_tape_pause(was);
    if (st != LUA_OK) return lua_error(L);
    return lua_gettop(L) - 1;
}

static int is_recording(lua_State *L) { lua_pushboolean(L, ld_tape_recording()); return 1; }

static const char *const docs[] = {
    "GradientTape", "autograd.GradientTape{persistent=false}\n\nRecords tensor ops so gradients can be computed (TensorFlow's tf.GradientTape).\n"
    "  local tape = autograd.GradientTape()\n"
    "  local loss = tape:record(function() return loss_fn(y, model(x, {training=true})) end)\n"
    "  local grads = tape:gradient(loss, model.trainable_variables)\n"
    "Variables are watched automatically; tape:watch(t) adds any float32 tensor.\n"
    "A non-persistent tape computes gradients once.",
    "GradientTape:record", "tape:record(fn, ...)\n\nRun fn(...) while recording; returns fn's results. Recording stops even if fn raises.",
    "GradientTape:gradient", "tape:gradient(target, sources[, output_gradients])\n\nGradients of target with respect to each source (a tensor, or a table of tensors: a table comes back).\n"
    "A target of several elements is summed, as TF's is; output_gradients (a tensor of target's shape, or\n"
    "{output_gradients = g}) weights its elements instead: the vector-Jacobian product g^T J. A source the\n"
    "target does not depend on gets zeros (TF's unconnected_gradients=\"zero\").",
    "GradientTape:jacobian", "tape:jacobian(target, source)\n\nTF's tape.jacobian: d target[i...] / d source[j...], of shape target.shape .. source.shape\n"
    "(a table of them for a table of sources, on a persistent tape); one backward pass per element of target.",
    "GradientTape:stop_recording", "tape:stop_recording(fn, ...)\n\nRun fn(...) without recording (TF's `with tape.stop_recording():`); returns fn's results.\n"
    "Every tape of this thread pauses, not only this one. tensor.stop_gradient(t) keeps one value out instead.",
    "GradientTape:watch", "tape:watch(t)\n\nRecord ops on a tensor that is not a Variable.",
    NULL};

int lb_open_autograd(lua_State *L) {
    luaL_newmetatable(L, TAPE_MT);
    static const luaL_Reg m[] = {{"start", tape_start}, {"stop", tape_stop}, {"record", tape_record},
                                 {"watch", tape_watch}, {"gradient", tape_gradient}, {"jacobian", tape_jacobian},
                                 {"stop_recording", tape_stop_recording}, {NULL, NULL}};
    lua_newtable(L);
    luaL_setfuncs(L, m, 0);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, tape_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, tape_stop);
    lua_setfield(L, -2, "__close");
    lua_pop(L, 1);
    static const luaL_Reg f[] = {{"GradientTape", tape_new}, {"is_recording", is_recording}, {NULL, NULL}};
    luaL_newlib(L, f);
    lb_set_docs(L, "autograd.", docs);
    return 1;
}
