/*
 * tensor.c - the `tensor` module and the Tensor type.
 *
 * Indices and axes count from 0, like NumPy and TensorFlow (negative ones from
 * the end), so a TF example ports without renumbering; Lua tables given to
 * tensor.new still list elements in their natural order.
 */
#include "lbind.h"
#include "ld_ops.h"
#include "ld_ops_index.h"
#include "ld_ops_attn.h"
#include "ld_autograd.h"
#include "ld_device.h"
#include "ld_strategy.h"

#include <lauxlib.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ shared helpers */
int lb_engine_error(lua_State *L, int arg) {
    const char *msg = ld_error();
    if (!*msg) msg = "unknown engine error";
    if (arg > 0) return luaL_argerror(L, arg, msg);
    return luaL_error(L, "%s", msg);
}

/* A weight gradient that model:_grads left as its product (ld_ops.h) is
   computed the first time Lua code hands it to anything but the strategy's
   collective (which reads it with lb_check_tensor_raw). */
/* Inside a replica (strategy:run), a mirrored variable stands for that
   replica's copy in every op, as a MirroredVariable does in TF: reading it,
   computing with it and differentiating against it all use the copy on the
   replica's device. Outside, it is the variable (writes reach every copy,
   ld_variable_write). */
static ld_tensor *replica_view(ld_tensor *t) { return t && t->ext && ld_replica_get() ? ld_var(t) : t; }

/* A tensor whose values a strategy lost (ld_tensor_set_lost) is stale:
   every read through the bindings raises, naming why. */
static void check_not_lost(lua_State *L, const ld_tensor *t) {
    const char *why = ld_tensor_lost(t);
    if (why && t->name) luaL_error(L, "variable %s: %s", t->name, why);
    if (why) luaL_error(L, "tensor: %s", why);
}

ld_tensor *lb_test_tensor(lua_State *L, int idx) {
    ld_tensor **p = luaL_testudata(L, idx, LB_TENSOR_MT);
    if (p && *p) check_not_lost(L, *p);
    if (p && *p && (*p)->pending) ld_tensor_materialize(*p);
    return p ? replica_view(*p) : NULL;
}

ld_tensor *lb_check_tensor_raw(lua_State *L, int idx) {
    ld_tensor **p = luaL_testudata(L, idx, LB_TENSOR_MT);
    if (!p) luaL_typeerror(L, idx, "Tensor");
    if (!*p) luaL_argerror(L, idx, "tensor has been freed");
    check_not_lost(L, *p);
    return replica_view(*p);
}

ld_tensor *lb_check_tensor(lua_State *L, int idx) {
    ld_tensor *t = lb_check_tensor_raw(L, idx);
    if (t->pending) ld_tensor_materialize(t);
    return t;
}

int lb_check_tensors(lua_State *L, int idx, int argn, int single_ok, ld_tensor ***out) {
    if (single_ok && lb_test_tensor(L, idx)) {
        ld_tensor **t = lua_newuserdatauv(L, sizeof *t, 0);
        t[0] = lb_check_tensor(L, idx);
        *out = t;
        return 1;
    }
    luaL_checktype(L, idx, LUA_TTABLE);
    int k = (int)luaL_len(L, idx);
    ld_tensor **t = lua_newuserdatauv(L, sizeof *t * (size_t)(k ? k : 1), 0);
    for (int i = 0; i < k; i++) {
        lua_geti(L, idx, i + 1);
        t[i] = lb_test_tensor(L, -1);
        if (!t[i]) return luaL_error(L, "bad argument #%d (item %d is a %s, not a tensor)", argn, i + 1, luaL_typename(L, -1));
        lua_pop(L, 1);
    }
    *out = t;
    return k;
}

/* Variables keep one userdata per engine tensor (weak cache), so
   model.trainable_variables[1] == model.trainable_variables[1]. */
static const char *VAR_CACHE = "ldist.varcache";

/* Lua's collector cannot see the memory a tensor holds, only its small
   userdata, so each new tensor tells it. Once per interpreter (a process has
   one: statics).
   - Host memory: a large tensor (4 MB and more) counts whole, so that it goes
     soon after its last use (a 64 MB pull kept alive longer halved the ps
     pull rate: fresh pages every time); a medium one at 1/16 of its size: the
     Lua heap is ~1 MB, so counting those whole ran a full cycle per MB of
     tensors (~20 per transformer step, 12% of the main thread) while the tape
     still held most of them.
   - A GPU's memory (any device that is not the host's) is counted apart, as
     Go's collector paces itself: a full collection once the tensors made
     since the last one add up to the device memory that collection left in
     use (at least 256 MB). Counted as host tensors are, every 16 MB
     activation of the bench transformer (d_model 512, batch 32 x 256) ran
     a full cycle: 126 cycles and 13 ms of the host's time per step, most of
     a bf16 step's budget on an H200. Now a few cycles a step; what garbage
     waits for them stays below what is live, and an allocation that fails
     still collects everything and retries (ld_device_alloc). Such a retry
     (a GPU fuller than the pace allows for: live + garbage past its memory)
     halves the pace from then on (lb_collector_pressure), so a nearly full
     GPU does not flush its caching allocator every cycle. */
#define DEVICE_GC_FLOOR ((size_t)256 << 20)
#define DEVICE_GC_MIN ((size_t)16 << 20)
static size_t device_made, device_pace = DEVICE_GC_FLOOR, device_cap = SIZE_MAX;

void lb_collector_pressure(void) {
    size_t p = device_pace < device_cap ? device_pace : device_cap;
    device_cap = p / 2 > DEVICE_GC_MIN ? p / 2 : DEVICE_GC_MIN;
    device_pace = device_cap;
    device_made = 0;
}

/* Inside model:fit the device's collections wait for the end of a step
   (lb_collector_step): a collection in the middle of a step fell at a
   different point of each step, so the garbage it found, and the caching
   allocator's peak, changed from step to step, and a GPU's pool kept growing
   (cudaMalloc in timed steps) until some step had met the worst phase: up
   to step ~28 for the bf16 bench transformer. At the step's end the garbage
   is the same every time (that step's tensors); it waits for one step at
   most, and a failed allocation still collects at once (ld_device_alloc). */
static int device_gc_at_steps;

static void collect_device(lua_State *L) {
    lua_gc(L, LUA_GCCOLLECT);
    size_t live = 0;
    for (int i = 0, n = ld_device_count(); i < n; i++) {
        ld_device *d = ld_device_at(i);
        if (d && !ld_device_is_host(d)) live += __atomic_load_n(&d->bytes_in_use, __ATOMIC_RELAXED);
    }
    device_pace = live > DEVICE_GC_FLOOR ? live : DEVICE_GC_FLOOR;
    if (device_pace > device_cap) device_pace = device_cap;
    device_made = 0;
}

static void tell_collector(lua_State *L, const ld_tensor *t) {
    size_t nb = (size_t)ld_tensor_numel(t) * ld_dtype_size(t->dtype);
    if (!t->storage || ld_device_is_host(t->storage->device)) {
        if (nb > 65536) lua_gc(L, LUA_GCSTEP, (int)(nb >= ((size_t)4 << 20) ? nb >> 10 : nb >> 14));   /* in KB */
        return;
    }
    device_made += nb;
    if (device_made >= device_pace && !device_gc_at_steps) collect_device(L);
}

int lb_collector_steps(lua_State *L, int on) {
    int was = device_gc_at_steps;
    device_gc_at_steps = on;
    if (!on && device_made >= device_pace) collect_device(L);
    return was;
}

void lb_collector_step(lua_State *L) {
    if (device_made >= device_pace) collect_device(L);
}

void lb_push_tensor(lua_State *L, ld_tensor *t, int arg) {
    if (!t) { lb_engine_error(L, arg); return; }
    if (t->requires_grad) {
        lua_getfield(L, LUA_REGISTRYINDEX, VAR_CACHE);
        lua_rawgetp(L, -1, t);
        if (!lua_isnil(L, -1)) { lua_remove(L, -2); ld_tensor_release(t); return; }
        lua_pop(L, 1);
    }
    ld_tensor **p = lua_newuserdatauv(L, sizeof *p, 1);
    *p = t;
    luaL_setmetatable(L, LB_TENSOR_MT);
    tell_collector(L, t);
    if (t->requires_grad) {
        lua_pushvalue(L, -1);
        lua_rawsetp(L, -3, t);
        lua_remove(L, -2);
    }
}

/* Read a nested Lua table of numbers: shape first, then values. */
static int table_shape(lua_State *L, int idx, int depth, int64_t *shape, int *ndim) {
    if (depth >= LD_MAX_DIMS) return luaL_error(L, "table nested too deeply for a tensor");
    lua_Integer n = luaL_len(L, idx);
    shape[depth] = n;
    if (depth + 1 > *ndim) *ndim = depth + 1;
    if (n > 0) {
        lua_geti(L, idx, 1);
        if (lua_istable(L, -1)) table_shape(L, lua_gettop(L), depth + 1, shape, ndim);
        lua_pop(L, 1);
    }
    return 0;
}

/* Write the Lua value at vidx into element pos of t: integers exactly,
   out-of-range values refused (ld_tensor_set_flat) as argument arg's error. */
static void set_elem(lua_State *L, int vidx, ld_tensor *t, int64_t pos, int arg) {
    ld_tensor *e = lb_test_tensor(L, vidx);
    int st;
    if (e && ld_tensor_numel(e) == 1)
        st = ld_dtype_is_float(e->dtype) ? ld_tensor_init_flat(t, pos, ld_tensor_get_flat(e, 0))
                                : ld_tensor_init_flat_int(t, pos, ld_tensor_get_flat_int(e, 0));
    else if (lua_isinteger(L, vidx)) st = ld_tensor_init_flat_int(t, pos, lua_tointeger(L, vidx));
    else if (lua_isnumber(L, vidx)) st = ld_tensor_init_flat(t, pos, lua_tonumber(L, vidx));
    else if (lua_isboolean(L, vidx)) st = ld_tensor_init_flat_int(t, pos, lua_toboolean(L, vidx));
    else if (e) {
        char sb[64];
        luaL_error(L, "expected a number at position %d of the table, got a tensor of shape %s (a table of tensors "
                   "is not a tensor: tensor.stack(t) joins them)", (int)pos + 1, ld_shape_str(e, sb, sizeof sb));
        return;
    } else {
        luaL_error(L, "expected a number at position %d of the table, got %s", (int)pos + 1, luaL_typename(L, vidx));
        return;
    }
    if (st) lb_engine_error(L, arg);
}

static void table_fill(lua_State *L, int idx, int depth, int ndim, const int64_t *shape, ld_tensor *t, int64_t *pos, int arg) {
    lua_Integer n = luaL_len(L, idx);
    if (n != shape[depth]) luaL_error(L, "ragged table: expected %d elements at depth %d, got %d", (int)shape[depth], depth + 1, (int)n);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_geti(L, idx, i);
        if (depth + 1 < ndim) {
            if (!lua_istable(L, -1)) luaL_error(L, "ragged table: expected a table at depth %d", depth + 2);
            table_fill(L, lua_gettop(L), depth + 1, ndim, shape, t, pos, arg);
        } else {
            set_elem(L, lua_gettop(L), t, (*pos)++, arg);
        }
        lua_pop(L, 1);
    }
}

static ld_dtype opt_dtype(lua_State *L, int idx, ld_dtype def) {
    if (!lua_isnoneornil(L, idx) && !lua_istable(L, idx)) luaL_typeerror(L, idx, "options table");
    if (!lua_istable(L, idx)) return def;
    lua_getfield(L, idx, "dtype");
    ld_dtype dt = def;
    if (!lua_isnil(L, -1)) {
        if (ld_dtype_from_name(luaL_checkstring(L, -1), &dt)) lb_engine_error(L, 0);
    }
    lua_pop(L, 1);
    return dt;
}

/* Where a tensor made without {device=} goes: inside a replica with a
   device, that device (TF places what strategy.run's function creates on
   the replica's device); NULL (cpu:0) otherwise. */
static ld_device *default_device(void) {
    const ld_replica_ctx *c = ld_replica_get();
    return c ? c->device : NULL;
}

/* lb_to_tensor, with numbers and tables made on dev (NULL: cpu:0) */
/* t (a new reference, made on the host) on dev (NULL: where it is); takes
   ownership of t; raises as argument idx when the move fails */
static ld_tensor *moved_to(lua_State *L, ld_tensor *t, ld_device *dev, int idx) {
    if (!dev || dev == t->storage->device) return t;
    ld_tensor *moved = ld_to_device(t, dev);
    ld_tensor_release(t);
    if (!moved) lb_engine_error(L, idx);
    return moved;
}

static ld_tensor *to_tensor_on(lua_State *L, int idx, ld_dtype dt, ld_device *dev) {
    idx = lua_absindex(L, idx);
    ld_tensor *t = lb_test_tensor(L, idx);
    if (t) return ld_tensor_retain(t);
    if (lua_isinteger(L, idx) && !ld_dtype_is_float(dt)) {   /* exact, not through a double */
        ld_tensor *s = ld_tensor_empty(dt, 0, NULL, NULL);
        if (!s) lb_engine_error(L, idx);
        if (ld_tensor_init_flat_int(s, 0, lua_tointeger(L, idx))) { ld_tensor_release(s); lb_engine_error(L, idx); }
        return moved_to(L, s, dev, idx);
    }
    if (lua_isnumber(L, idx)) {
        ld_tensor *s = ld_tensor_full(dt, 0, NULL, lua_tonumber(L, idx), dev);
        if (!s) lb_engine_error(L, idx);
        return s;
    }
    if (!lua_istable(L, idx)) luaL_typeerror(L, idx, "Tensor, number or table");
    int64_t shape[LD_MAX_DIMS] = {0};
    int ndim = 0;
    table_shape(L, idx, 0, shape, &ndim);
    ld_tensor *r = ld_tensor_empty(dt, ndim, shape, NULL);
    if (!r) lb_engine_error(L, idx);
    /* protect against a ragged-table error leaking r: anchor it in a userdata first */
    lb_push_tensor(L, r, 0);
    int64_t pos = 0;
    table_fill(L, idx, 0, ndim, shape, r, &pos, idx);
    ld_tensor_retain(r);
    lua_pop(L, 1);
    /* filled on the host (element writes would wait for a queueing device), then moved */
    return moved_to(L, r, dev, idx);
}

ld_tensor *lb_to_tensor(lua_State *L, int idx, ld_dtype dt) { return to_tensor_on(L, idx, dt, default_device()); }

void lb_set_docs(lua_State *L, const char *prefix, const char *const *docs) {
    int mod = lua_gettop(L);
    lua_getfield(L, LUA_REGISTRYINDEX, "ldist.docs");
    if (!lua_istable(L, -1)) { lua_pop(L, 1); return; }
    int dt = lua_gettop(L);
    for (int i = 0; docs[i]; i += 2) {
        const char *name = docs[i], *text = docs[i + 1];
        const char *key = strchr(name, ':') ? name : lua_pushfstring(L, "%s%s", prefix, name);
        lua_pushstring(L, text);
        lua_setfield(L, dt, key);
        if (key != name) lua_pop(L, 1);
        if (!strchr(name, ':') && !strchr(name, '.')) {
            lua_getfield(L, mod, name);
            if (!lua_isnil(L, -1)) { lua_pushstring(L, text); lua_rawset(L, dt); }
            else lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
}

/* ================================================================ arguments */
/* An axis of a tensor with ndim dimensions, checked as the 64-bit integer
   Lua gave before it is narrowed to int (1 << 32 is not axis 0). */
static int axis_value(lua_State *L, int arg, lua_Integer v, int ndim) {
    if (v < -(lua_Integer)ndim || v >= ndim)
        luaL_argerror(L, arg, lua_pushfstring(L, "axis %I out of range for a tensor with %d dimensions", v, ndim));
    return (int)v;
}

static int check_axis(lua_State *L, int arg, int ndim) {
    return axis_value(L, arg, luaL_checkinteger(L, arg), ndim);
}

static int check_axis_arg(lua_State *L, int idx, int def, int ndim) {
    if (lua_isnoneornil(L, idx)) return def;
    return check_axis(L, idx, ndim);
}

/* The integers of the list at idx (at most LD_MAX_DIMS), into out; errors
   are argument arg's, with the messages given */
static int int_list(lua_State *L, int idx, int arg, int64_t *out, const char *too_many, const char *not_int) {
    lua_Integer len = luaL_len(L, idx);
    if (len > LD_MAX_DIMS) luaL_argerror(L, arg, too_many);
    for (lua_Integer i = 1; i <= len; i++) {
        lua_geti(L, idx, i);
        int ok;
        lua_Integer v = lua_tointegerx(L, -1, &ok);
        if (!ok) luaL_argerror(L, arg, not_int);
        out[i - 1] = v;
        lua_pop(L, 1);
    }
    return (int)len;
}

/* Shape from varargs (2, 3) or one table ({2, 3}) starting at idx. */
static int read_shape(lua_State *L, int idx, int64_t *shape) {
    int n = 0;
    if (lua_istable(L, idx) && !lb_test_tensor(L, idx))
        return int_list(L, idx, idx, shape, "too many dimensions", "shape entries must be integers");
    int top = lua_gettop(L);
    for (int i = idx; i <= top && lua_type(L, i) == LUA_TNUMBER; i++) {
        if (n == LD_MAX_DIMS) luaL_argerror(L, i, "too many dimensions");
        int ok;
        lua_Integer v = lua_tointegerx(L, i, &ok);
        if (!ok) luaL_argerror(L, i, "dimensions must be integers");
        shape[n++] = v;
    }
    return n;
}

/* {device=} at idx, else the default device (default_device) */
static ld_device *opt_device(lua_State *L, int idx) {
    if (!lua_istable(L, idx)) return default_device();
    lua_getfield(L, idx, "device");
    ld_device *d = default_device();
    if (!lua_isnil(L, -1)) {
        d = ld_device_find(luaL_checkstring(L, -1));
        if (!d) lb_engine_error(L, 0);
    }
    lua_pop(L, 1);
    return d;
}

/* index of the options table after a shape given at idx (a table or integers) */
static int opts_after_shape(lua_State *L, int idx) {
    if (lua_istable(L, idx) && !lb_test_tensor(L, idx)) return idx + 1;
    int top = lua_gettop(L), i = idx;
    while (i <= top && lua_type(L, i) == LUA_TNUMBER) i++;
    return i;
}

/* ================================================================ creation */
static int t_new(lua_State *L) {
    ld_dtype dt = opt_dtype(L, 2, LD_F32);
    ld_device *d = opt_device(L, 2);
    ld_tensor *t = to_tensor_on(L, 1, dt, d);
    if (t->dtype != dt) {
        if (ld_cast_check(t, dt)) { ld_tensor_release(t); return lb_engine_error(L, 1); }
        ld_tensor *c = ld_cast(t, dt);
        ld_tensor_release(t);
        t = c;
    }
    if (t && d) { ld_tensor *c = ld_to_device(t, d); ld_tensor_release(t); t = c; }
    lb_push_tensor(L, t, 1);
    return 1;
}

static int t_fill_common(lua_State *L, double v, int has_value) {
    int64_t shape[LD_MAX_DIMS];
    int n, o;
    if (has_value && !lua_istable(L, 1)) {
        /* tensor.full(d1, d2, ..., value): the last number is the value */
        o = opts_after_shape(L, 1);
        if (o <= 2) return luaL_argerror(L, 1, "expected the shape, then the value");
        v = luaL_checknumber(L, o - 1);
        lua_pushnil(L); lua_replace(L, o - 1);
        n = read_shape(L, 1, shape);
    } else {
        n = read_shape(L, 1, shape);
        o = opts_after_shape(L, 1);
        if (has_value) { v = luaL_checknumber(L, o); o++; }
    }
    lb_push_tensor(L, ld_tensor_full(opt_dtype(L, o, LD_F32), n, shape, v, opt_device(L, o)), 1);
    return 1;
}
static int t_zeros(lua_State *L) { return t_fill_common(L, 0, 0); }
static int t_ones(lua_State *L) { return t_fill_common(L, 1, 0); }
static int t_full(lua_State *L) { return t_fill_common(L, 0, 1); }

static int t_arange(lua_State *L) {
    double a = luaL_checknumber(L, 1), b, s = 1;
    int o;
    if (lua_isnumber(L, 2)) { b = lua_tonumber(L, 2); o = 3; if (lua_isnumber(L, 3)) { s = lua_tonumber(L, 3); o = 4; } }
    else { b = a; a = 0; o = 2; }
    int all_int = lua_isinteger(L, 1) && (o < 3 || lua_isinteger(L, 2)) && (o < 4 || lua_isinteger(L, 3));
    ld_dtype dt = opt_dtype(L, o, all_int ? LD_I64 : LD_F32);
    lb_push_tensor(L, ld_tensor_arange(a, b, s, dt, opt_device(L, o)), 1);
    return 1;
}

static double opt_num(lua_State *L, int idx, const char *k, double def) {
    if (!lua_istable(L, idx)) return def;
    lua_getfield(L, idx, k);
    double v = luaL_optnumber(L, -1, def);
    lua_pop(L, 1);
    return v;
}

static int t_uniform(lua_State *L) {
    int64_t shape[LD_MAX_DIMS];
    int n = read_shape(L, 1, shape), o = opts_after_shape(L, 1);
    lb_push_tensor(L, ld_tensor_uniform(n, shape, (float)opt_num(L, o, "min", 0), (float)opt_num(L, o, "max", 1),
                                        NULL, opt_device(L, o)), 1);
    return 1;
}

static int t_normal(lua_State *L) {
    int64_t shape[LD_MAX_DIMS];
    int n = read_shape(L, 1, shape), o = opts_after_shape(L, 1);
    lb_push_tensor(L, ld_tensor_normal(n, shape, (float)opt_num(L, o, "mean", 0), (float)opt_num(L, o, "stddev", 1),
                                       NULL, opt_device(L, o)), 1);
    return 1;
}

static int t_seed(lua_State *L) {
    ld_rng_seed(ld_global_rng(), (uint64_t)luaL_checkinteger(L, 1));
    return 0;
}

/* get_rng_state() -> the generator's state as a string; set_rng_state(s)
   puts it back: another process (a worker a model is shipped to) then draws
   the initialisers and dropout keys this one would have */
static int t_get_rng_state(lua_State *L) {
    const ld_rng *r = ld_global_rng();
    lua_pushlstring(L, (const char *)r->s, sizeof r->s);
    return 1;
}
static int t_set_rng_state(lua_State *L) {
    size_t n;
    const char *p = luaL_checklstring(L, 1, &n);
    ld_rng *r = ld_global_rng();
    if (n != sizeof r->s)
        return luaL_argerror(L, 1, lua_pushfstring(L, "a state from tensor.get_rng_state() (%d bytes), got %d bytes",
                                                   (int)sizeof r->s, (int)n));
    ld_rng st;
    memcpy(st.s, p, sizeof st.s);
    if (!(st.s[0] | st.s[1] | st.s[2] | st.s[3]))   /* xoshiro's one stuck state */
        return luaL_argerror(L, 1, "an all-zero state is not a generator state");
    *r = st;
    return 0;
}

/* ================================================================ methods */
#define SELF lb_check_tensor(L, 1)

static int t_gc(lua_State *L) {
    ld_tensor **p = luaL_checkudata(L, 1, LB_TENSOR_MT);
    ld_tensor_release(*p);
    *p = NULL;
    return 0;
}

static int t_shape(lua_State *L) {
    ld_tensor *t = SELF;
    lua_createtable(L, t->ndim, 0);
    for (int i = 0; i < t->ndim; i++) { lua_pushinteger(L, t->shape[i]); lua_rawseti(L, -2, i + 1); }
    return 1;
}

static int t_item(lua_State *L) {
    double v;
    ld_tensor *t = SELF;
    /* the engine's message alone: it names the shape, or the queued kernel's error this read reports */
    if (ld_tensor_item(t, &v)) return lb_engine_error(L, 0);
    if (ld_dtype_is_float(t->dtype)) lua_pushnumber(L, v); else lua_pushinteger(L, ld_tensor_get_flat_int(t, 0));
    return 1;
}

static void push_elem(lua_State *L, ld_tensor *t, int64_t i) {
    if (ld_dtype_is_float(t->dtype)) lua_pushnumber(L, ld_tensor_get_flat(t, i));
    else lua_pushinteger(L, ld_tensor_get_flat_int(t, i));
}

static void to_table(lua_State *L, ld_tensor *t, int d, int64_t *pos) {
    if (t->ndim == 0) { push_elem(L, t, (*pos)++); return; }
    lua_createtable(L, (int)t->shape[d], 0);
    for (int64_t i = 0; i < t->shape[d]; i++) {
        if (d + 1 == t->ndim) push_elem(L, t, (*pos)++);
        else to_table(L, t, d + 1, pos);
        lua_rawseti(L, -2, i + 1);
    }
}

static int t_totable(lua_State *L) {
    ld_tensor *t = SELF;
    ld_tensor *c = ld_to_device(t, ld_device_cpu());
    if (!c) return lb_engine_error(L, 1);
    int64_t pos = 0;
    lb_push_tensor(L, c, 0);  /* anchor */
    to_table(L, c, 0, &pos);
    return 1;
}

static int t_reshape(lua_State *L) {
    ld_tensor *t = SELF;
    int64_t shape[LD_MAX_DIMS];
    int n = read_shape(L, 2, shape);
    lb_push_tensor(L, ld_reshape_op(t, n, shape), 2);
    return 1;
}

static int t_transpose(lua_State *L) {
    ld_tensor *t = SELF;
    if (t->ndim < 2) return luaL_argerror(L, 1, "transpose needs at least 2 dimensions");
    int d0 = check_axis_arg(L, 2, -2, t->ndim), d1 = check_axis_arg(L, 3, -1, t->ndim);
    lb_push_tensor(L, ld_transpose_op(t, d0, d1), 2);
    return 1;
}

static int t_permute(lua_State *L) {
    ld_tensor *t = SELF;
    int64_t s[LD_MAX_DIMS];
    int n = read_shape(L, 2, s), perm[LD_MAX_DIMS];
    if (n != t->ndim) return luaL_argerror(L, 2, "permutation must list every dimension");
    for (int i = 0; i < n; i++) perm[i] = axis_value(L, 2, s[i], t->ndim);
    lb_push_tensor(L, ld_permute_op(t, perm), 2);
    return 1;
}

static int t_slice(lua_State *L) {
    ld_tensor *t = SELF;
    int dim = check_axis(L, 2, t->ndim);
    int64_t start = luaL_optinteger(L, 3, 0), stop = luaL_optinteger(L, 4, INT64_MAX / 2);
    int64_t step = luaL_optinteger(L, 5, 1);
    lb_push_tensor(L, ld_slice_view_op(t, dim, start, stop, step), 2);
    return 1;
}

/* tensor.top_k(x, k=1) -> values, indices (tf.math.top_k; sorted=true, TF's default, the only order) */
static int t_top_k(lua_State *L) {
    ld_tensor *x = lb_check_tensor(L, 1), *v, *i;
    lua_Integer k = luaL_optinteger(L, 2, 1);
    if (lua_istable(L, 3)) {
        static const char *const names[] = {"sorted", NULL};
        lb_check_options(L, 3, "tensor.top_k", names);
        lua_getfield(L, 3, "sorted");
        if (!lua_isnil(L, -1) && !lua_toboolean(L, -1))
            return luaL_argerror(L, 3, "sorted=false is not supported: the k values come sorted, as TF's default");
        lua_pop(L, 1);
    }
    if (ld_top_k(x, k, &v, &i)) return lb_engine_error(L, 1);
    lb_push_tensor(L, v, 1);
    lb_push_tensor(L, i, 1);
    return 2;
}

/* t:sort([axis=-1], [direction="ASCENDING"]) or ({axis=, direction=}); t:argsort(...) the same */
static int sort_args(lua_State *L, const ld_tensor *t, int *axis, int *desc, const char *what) {
    static const char *const names[] = {"axis", "direction", NULL};
    *axis = -1;
    const char *dir = "ASCENDING";
    if (lua_istable(L, 2)) {
        lb_check_options(L, 2, what, names);
        lua_getfield(L, 2, "axis");
        if (!lua_isnil(L, -1)) *axis = axis_value(L, 2, luaL_checkinteger(L, -1), t->ndim);
        lua_getfield(L, 2, "direction");
        if (!lua_isnil(L, -1)) dir = luaL_checkstring(L, -1);
        lua_pop(L, 2);
    } else {
        if (!lua_isnoneornil(L, 2)) *axis = check_axis(L, 2, t->ndim);
        dir = luaL_optstring(L, 3, dir);
    }
    if (strcmp(dir, "ASCENDING") && strcmp(dir, "DESCENDING"))
        return luaL_error(L, "%s: direction must be \"ASCENDING\" or \"DESCENDING\" (TF's), got \"%s\"", what, dir);
    *desc = !strcmp(dir, "DESCENDING");
    return 0;
}
static int sorted(lua_State *L, int values) {
    ld_tensor *t = SELF;
    int axis, desc;
    sort_args(L, t, &axis, &desc, values ? "t:sort" : "t:argsort");
    lb_push_tensor(L, values ? ld_sort(t, axis, desc) : ld_argsort(t, axis, desc), 1);
    return 1;
}
static int t_sort(lua_State *L) { return sorted(L, 1); }
static int t_argsort(lua_State *L) { return sorted(L, 0); }

static int t_stop_gradient(lua_State *L) { lb_push_tensor(L, ld_stop_gradient(lb_check_tensor(L, 1)), 1); return 1; }
/* tensor._pad_axis(x, axis, before, after, value): ld_pad_op (zeros, or the value, on one axis; tensor.pad's CONSTANT) */
static int t_pad_axis(lua_State *L) {
    ld_tensor *x = lb_check_tensor(L, 1);
    lb_push_tensor(L, ld_pad_op(x, (int)luaL_checkinteger(L, 2), luaL_checkinteger(L, 3), luaL_checkinteger(L, 4),
                                luaL_optnumber(L, 5, 0.0)), 1);
    return 1;
}
static int t_contiguous(lua_State *L) { lb_push_tensor(L, ld_ops_contig(SELF), 1); return 1; }
static int t_clone(lua_State *L) { lb_push_tensor(L, ld_clone_op(SELF), 1); return 1; }

static int t_astype(lua_State *L) {
    ld_dtype dt;
    if (ld_dtype_from_name(luaL_checkstring(L, 2), &dt)) return lb_engine_error(L, 2);
    if (ld_cast_check(SELF, dt)) return lb_engine_error(L, 1);
    lb_push_tensor(L, ld_cast_op(SELF, dt), 1);   /* differentiable between float dtypes */
    return 1;
}
static int t_float(lua_State *L) { lb_push_tensor(L, ld_cast_op(SELF, LD_F32), 1); return 1; }
static int t_long(lua_State *L) {
    if (ld_cast_check(SELF, LD_I64)) return lb_engine_error(L, 1);
    lb_push_tensor(L, ld_cast(SELF, LD_I64), 1);
    return 1;
}

static int t_to(lua_State *L) {
    ld_tensor *t = SELF;
    ld_device *d = ld_device_find(luaL_checkstring(L, 2));
    if (!d) return lb_engine_error(L, 2);
    lb_push_tensor(L, ld_to_device_op(t, d), 1);
    return 1;
}
static int t_cpu(lua_State *L) { lb_push_tensor(L, ld_to_device_op(SELF, ld_device_cpu()), 1); return 1; }

static int t_numel(lua_State *L) { lua_pushinteger(L, ld_tensor_numel(SELF)); return 1; }
static int t_len(lua_State *L) {
    ld_tensor *t = SELF;
    lua_pushinteger(L, t->ndim ? t->shape[0] : 0);
    return 1;
}

/* ---- arithmetic ---- */
/* The dtype a number (or table) at idx takes beside a tensor t: a Lua
   integer with an integer tensor takes its dtype (int64 * 2 stays int64, as
   in TF), a number with a float16/bfloat16 tensor its half dtype (x * 0.5
   stays bfloat16, as in TF), else float32. Beside no tensor (t NULL): int64
   when it and the value at `other` (0: none) are integers, else float32
   (tensor.where(c, 1, 2)); binop passes other = -1 for float32 there. */
static ld_dtype number_dtype(lua_State *L, int idx, const ld_tensor *t, int other) {
    if (t) return (t->dtype != LD_F32 && lua_isinteger(L, idx)) || (ld_dtype_is_half(t->dtype) && lua_isnumber(L, idx))
                      ? t->dtype : LD_F32;
    return other >= 0 && lua_isinteger(L, idx) && (other == 0 || lua_isinteger(L, other)) ? LD_I64 : LD_F32;
}

static int binop(lua_State *L, ld_binary_op op) {
    ld_tensor *ta = lb_test_tensor(L, 1), *tb = lb_test_tensor(L, 2);
    /* a number or a table is made where the tensor it is combined with lives, in number_dtype's dtype */
    ld_device *at = tb ? tb->storage->device : default_device(), *bt = ta ? ta->storage->device : default_device();
    ld_dtype adt = number_dtype(L, 1, tb, -1), bdt = number_dtype(L, 2, ta, -1);
    ld_tensor *a = to_tensor_on(L, 1, adt, at);
    lb_push_tensor(L, a, 0);     /* anchor while converting b */
    ld_tensor *b = to_tensor_on(L, 2, bdt, bt);
    lb_push_tensor(L, b, 0);
    lb_push_tensor(L, ld_binary(op, a, b), 1);
    return 1;
}
static int unop(lua_State *L, ld_unary_op op) {
    ld_tensor *x = lb_to_tensor(L, 1, LD_F32);
    lb_push_tensor(L, x, 0);
    /* -x of an integer tensor stays an integer (ld_neg); the others compute in float */
    lb_push_tensor(L, op == LD_UN_NEG ? ld_neg(x) : ld_unary(op, x), 1);
    return 1;
}

/* The elementwise ops' functions (t_add, ..., t_square) and method rows come
   from the lists in ld_kernels.h: a new op there is a new method here. */
#define BIN_FN(E, name, ...) static int t_##name(lua_State *L) { return binop(L, LD_BIN_##E); }
#define UN_FN(E, name, ...) static int t_##name(lua_State *L) { return unop(L, LD_UN_##E); }
LD_BINARY_OPS(BIN_FN)
LD_UNARY_OPS(UN_FN)
#undef BIN_FN
#undef UN_FN
#define OP_ROW(E, name, ...) {#name, t_##name},
#define OP_NAME(E, name, ...) #name,
static const char *const bin_names[] = {LD_BINARY_OPS(OP_NAME) NULL};
static const char *const un_names[] = {LD_UNARY_OPS(OP_NAME) NULL};
#undef OP_NAME

/* One docstring per elementwise op, by its place in the list; lb_open_tensor
   refuses to start without one (a new op cannot be added undocumented). */
static const char *const bin_docs[LD_BIN_COUNT] = {
    [LD_BIN_ADD] = "a:add(b)  (a + b)\n\nElementwise sum, broadcasting like NumPy.",
    [LD_BIN_SUB] = "a:sub(b)  (a - b)\n\nElementwise difference, broadcasting like NumPy.",
    [LD_BIN_MUL] = "a:mul(b)  (a * b)\n\nElementwise product, broadcasting like NumPy.",
    [LD_BIN_DIV] = "a:div(b)  (a / b)\n\nElementwise quotient (IEEE: x/0 is inf or nan), broadcasting like NumPy.",
    [LD_BIN_POW] = "a:pow(b)  (a ^ b)\n\nElementwise power a^b, broadcasting like NumPy.",
    [LD_BIN_MAX] = "a:maximum(b)\n\nElementwise maximum, broadcasting (NaN wins, as tf.maximum).",
    [LD_BIN_MIN] = "a:minimum(b)\n\nElementwise minimum, broadcasting (NaN wins, as tf.minimum).",
    [LD_BIN_EQ] = "a:eq(b)\n\n1 where a == b, else 0, broadcasting (NaN equals nothing).",
    [LD_BIN_LT] = "a:lt(b)\n\n1 where a < b, else 0, broadcasting.",
    [LD_BIN_GT] = "a:gt(b)\n\n1 where a > b, else 0, broadcasting.",
    [LD_BIN_NE] = "a:ne(b)\n\n1 where a ~= b, else 0, broadcasting (NaN differs from everything: TF's not_equal).",
    [LD_BIN_LE] = "a:le(b)\n\n1 where a <= b, else 0, broadcasting.",
    [LD_BIN_GE] = "a:ge(b)\n\n1 where a >= b, else 0, broadcasting.",
};
static const char *const un_docs[LD_UN_COUNT] = {
    [LD_UN_NEG] = "t:neg()  (-t)\n\n-t elementwise; an integer tensor stays an integer.",
    [LD_UN_EXP] = "t:exp()\n\ne^t elementwise.",
    [LD_UN_LOG] = "t:log()\n\nNatural logarithm elementwise (-inf at 0, nan below).",
    [LD_UN_SQRT] = "t:sqrt()\n\nSquare root elementwise (nan below 0).",
    [LD_UN_ABS] = "t:abs()\n\n|t| elementwise.",
    [LD_UN_RELU] = "t:relu()\n\nmax(t, 0) elementwise.",
    [LD_UN_SIGMOID] = "t:sigmoid()\n\n1 / (1 + e^-t) elementwise.",
    [LD_UN_TANH] = "t:tanh()\n\nHyperbolic tangent elementwise.",
    [LD_UN_GELU] = "t:gelu()\n\nGaussian error linear unit, the exact erf form (Keras' default):\n0.5 t (1 + erf(t / sqrt 2)).",
    [LD_UN_SQUARE] = "t:square()\n\nt * t elementwise.",
    [LD_UN_ELU] = "t:elu()\n\nKeras's elu (alpha 1): t where t > 0, else e^t - 1.",
    [LD_UN_SELU] = "t:selu()\n\nKeras's selu: 1.0507 * (t where t > 0, else 1.6733 (e^t - 1)).",
    [LD_UN_SOFTPLUS] = "t:softplus()\n\nlog(1 + e^t), without overflow.",
    [LD_UN_SOFTSIGN] = "t:softsign()\n\nt / (1 + |t|).",
    [LD_UN_SILU] = "t:silu()\n\nt * sigmoid(t) (Keras's silu, also named swish).",
    [LD_UN_LEAKY_RELU] = "t:leaky_relu()\n\nt where t >= 0, else 0.2 t (Keras 3's negative_slope, tf.nn.leaky_relu's alpha).",
    [LD_UN_RELU6] = "t:relu6()\n\nmin(max(t, 0), 6).",
    [LD_UN_HARD_SIGMOID] = "t:hard_sigmoid()\n\nKeras's hard_sigmoid: clip(t / 6 + 0.5, 0, 1).",
    [LD_UN_HARD_SILU] = "t:hard_silu()\n\nt * hard_sigmoid(t) (Keras's hard_silu, also named hard_swish).",
    [LD_UN_MISH] = "t:mish()\n\nt * tanh(softplus(t)).",
    [LD_UN_SIN] = "t:sin()\n\nElementwise sine (radians): tf.sin.",
    [LD_UN_COS] = "t:cos()\n\nElementwise cosine (radians): tf.cos.",
    [LD_UN_FLOOR] = "t:floor()\n\nThe largest integer value not above each element (float32): tf.floor. No gradient (zeros).",
    [LD_UN_CEIL] = "t:ceil()\n\nThe smallest integer value not below each element (float32): tf.math.ceil. No gradient (zeros).",
    [LD_UN_ROUND] = "t:round()\n\nEach element to the nearest integer value, halves to even (2.5 -> 2), as tf.round.\nNo gradient (zeros).",
    [LD_UN_SIGN] = "t:sign()\n\n1, -1 or 0 by each element's sign (NaN stays NaN): tf.sign. Its gradient is zeros.",
    [LD_UN_RECIPROCAL] = "t:reciprocal()\n\n1 / t elementwise: tf.math.reciprocal.",
    [LD_UN_LOG1P] = "t:log1p()\n\nlog(1 + t), accurate for small t: tf.math.log1p.",
    [LD_UN_EXPM1] = "t:expm1()\n\nexp(t) - 1, accurate for small t: tf.math.expm1.",
    [LD_UN_RSQRT] = "t:rsqrt()\n\n1 / sqrt(t) elementwise: tf.math.rsqrt.",
    [LD_UN_ERF] = "t:erf()\n\nThe error function, elementwise: tf.math.erf.",
};

/* tensor.binary_ops / tensor.unary_ops: the names, in the engine's order, for
   help and for the op tests (tests/ops), which loop over them; and each
   op's docstring under "Tensor:<name>". */
static void push_op_names(lua_State *L, const char *const *names) {
    lua_newtable(L);
    for (int i = 0; names[i]; i++) { lua_pushstring(L, names[i]); lua_rawseti(L, -2, i + 1); }
}
enum { MAX_EW_OPS = 64 };
_Static_assert((int)LD_BIN_COUNT <= MAX_EW_OPS && (int)LD_UN_COUNT <= MAX_EW_OPS, "room for every op's docstring");
static void set_op_docs(lua_State *L, const char *const *names, const char *const *docs, int n) {
    char keys[MAX_EW_OPS][48];
    const char *d[2 * MAX_EW_OPS + 1];
    for (int i = 0; i < n; i++) {
        if (!docs[i]) luaL_error(L, "tensor: the elementwise op '%s' has no docstring (lua_bindings/tensor.c)", names[i]);
        snprintf(keys[i], sizeof keys[i], "Tensor:%s", names[i]);
        d[2 * i] = keys[i];
        d[2 * i + 1] = docs[i];
    }
    d[2 * n] = NULL;
    lb_set_docs(L, "tensor.", d);
}

/* t:softmax([axis=-1]) and t:log_softmax([axis=-1]), TF's axis= */
static int softmax_on(lua_State *L, int log) {
    ld_tensor *t = SELF;
    int axis = t->ndim > 0 ? check_axis_arg(L, 2, t->ndim - 1, t->ndim) : -1;
    lb_push_tensor(L, ld_softmax_axis(t, axis, log), 1);
    return 1;
}
static int t_softmax(lua_State *L) { return softmax_on(L, 0); }
static int t_log_softmax(lua_State *L) { return softmax_on(L, 1); }

static int t_matmul(lua_State *L) {
    ld_tensor *a = lb_check_tensor(L, 1), *b = lb_check_tensor(L, 2);
    ld_tensor *c = ld_matmul(a, b);
    if (!c) {
        /* name the shapes as Lua's own argument errors do */
        return luaL_error(L, "bad argument #1 to 'matmul' (%s)", ld_error());
    }
    lb_push_tensor(L, c, 0);
    return 1;
}

/* a boolean option of the table at idx (absent: 0) */
static int opt_flag(lua_State *L, int idx, const char *k) {
    if (lua_isnoneornil(L, idx)) return 0;
    luaL_checktype(L, idx, LUA_TTABLE);
    lua_getfield(L, idx, k);
    int v = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

/* tensor.bmm(a, b, {transpose_a=, transpose_b=}) */
static int t_bmm(lua_State *L) {
    ld_tensor *a = lb_check_tensor(L, 1), *b = lb_check_tensor(L, 2);
    ld_tensor *c = ld_bmm(a, b, opt_flag(L, 3, "transpose_a"), opt_flag(L, 3, "transpose_b"));
    if (!c) return luaL_error(L, "bad argument #1 to 'bmm' (%s)", ld_error());
    lb_push_tensor(L, c, 0);
    return 1;
}

/* tensor.attention(q, k, v, {causal=false, scale=0}) */
static int t_attention(lua_State *L) {
    ld_tensor *q = lb_check_tensor(L, 1), *k = lb_check_tensor(L, 2), *v = lb_check_tensor(L, 3);
    double scale = 0;
    if (!lua_isnoneornil(L, 4)) {
        luaL_checktype(L, 4, LUA_TTABLE);
        lua_getfield(L, 4, "scale");
        scale = luaL_optnumber(L, -1, 0);
        lua_pop(L, 1);
    }
    ld_tensor *o = ld_attention(q, k, v, opt_flag(L, 4, "causal") ? LD_CAUSAL : LD_CAUSAL_NONE, (float)scale, NULL);
    if (!o) return luaL_error(L, "bad argument #1 to 'attention' (%s)", ld_error());
    lb_push_tensor(L, o, 0);
    return 1;
}

/* sum/mean/max(t, axis?, {keepdims=}) or (t, {axis=, keepdims=}), or
   (t, axis, keepdims) as TF's reduce_sum(x, axis, keepdims) */
/* An axis or a list of axes at idx (TF's axis=[1, 2]): *n of them into
   axes; nil leaves *n as it is (-1: every axis) */
static void read_axes(lua_State *L, int idx, int arg, const ld_tensor *t, int *n, int *axes) {
    if (lua_isnil(L, idx)) return;
    if (lua_isinteger(L, idx)) { *n = 1; axes[0] = axis_value(L, arg, lua_tointeger(L, idx), t->ndim); return; }
    if (!lua_istable(L, idx) || lb_test_tensor(L, idx)) luaL_argerror(L, arg, "axis must be an integer or a list of integers");
    int64_t v[LD_MAX_DIMS];
    *n = int_list(L, idx, arg, v, "more axes than a tensor has dimensions", "axis must be an integer or a list of integers");
    for (int i = 0; i < *n; i++) axes[i] = axis_value(L, arg, v[i], t->ndim);
}

/* t:<reduction>([axis | {axes}], {axis=, keepdims=}) or (axis, keepdims) */
static int reduction(lua_State *L, ld_reduction r, const char *what) {
    static const char *const names[] = {"axis", "keepdims", NULL};
    ld_tensor *t = SELF;
    int n = -1, axes[LD_MAX_DIMS], keep = 0, o = 2;
    if (lua_isinteger(L, 2) || (lua_istable(L, 2) && lua_rawlen(L, 2) > 0)) { read_axes(L, 2, 2, t, &n, axes); o = 3; }
    else if (!lua_isnoneornil(L, 2) && !lua_istable(L, 2)) luaL_typeerror(L, 2, "integer axis, list of axes or options table");
    if (o == 3 && lua_isboolean(L, 3)) keep = lua_toboolean(L, 3);
    else {
        if (o == 3 && !lua_isnoneornil(L, 3) && !lua_istable(L, 3)) luaL_typeerror(L, 3, "keepdims boolean or options table");
        lb_check_options(L, o, what, names);
        if (lua_istable(L, o)) {
            lua_getfield(L, o, "axis");
            read_axes(L, -1, o, t, &n, axes);
            lua_getfield(L, o, "keepdims");
            keep = lua_toboolean(L, -1);
            lua_pop(L, 2);
        }
    }
    lb_push_tensor(L, ld_reduce_axes(r, t, n, n < 0 ? NULL : axes, keep), 2);
    return 1;
}
static int t_sum(lua_State *L) { return reduction(L, LD_REDUCE_SUM, "t:sum"); }
static int t_mean(lua_State *L) { return reduction(L, LD_REDUCE_MEAN, "t:mean"); }
static int t_max(lua_State *L) { return reduction(L, LD_REDUCE_MAX, "t:max"); }
static int t_min(lua_State *L) { return reduction(L, LD_REDUCE_MIN, "t:min"); }
static int t_var(lua_State *L) { return reduction(L, LD_REDUCE_VAR, "t:var"); }
static int t_std(lua_State *L) { return reduction(L, LD_REDUCE_STD, "t:std"); }
static int t_logsumexp(lua_State *L) { return reduction(L, LD_REDUCE_LOGSUMEXP, "t:logsumexp"); }
static int t_any(lua_State *L) { return reduction(L, LD_REDUCE_ANY, "t:any"); }
static int t_all(lua_State *L) { return reduction(L, LD_REDUCE_ALL, "t:all"); }
static int t_prod(lua_State *L) { return reduction(L, LD_REDUCE_PROD, "t:prod"); }

/* t:cumsum([axis=0], {exclusive=false, reverse=false}) or ({axis=, exclusive=,
   reverse=}): tf.math.cumsum's arguments and defaults (likewise cumprod) */
static int scan(lua_State *L, ld_tensor *(*op)(ld_tensor *, int, int, int), const char *what) {
    static const char *const names[] = {"axis", "exclusive", "reverse", NULL};
    ld_tensor *t = SELF;
    int axis = 0, o = 2;
    if (lua_isinteger(L, 2)) { axis = check_axis(L, 2, t->ndim); o = 3; }
    else if (!lua_isnoneornil(L, 2) && !lua_istable(L, 2)) luaL_typeerror(L, 2, "integer axis or options table");
    if (!lua_isnoneornil(L, o) && !lua_istable(L, o)) luaL_typeerror(L, o, "options table");
    lb_check_options(L, o, what, names);
    if (o == 2 && lua_istable(L, 2)) {
        lua_getfield(L, 2, "axis");
        if (!lua_isnil(L, -1)) {
            if (!lua_isinteger(L, -1)) luaL_argerror(L, 2, "axis must be an integer");
            axis = axis_value(L, 2, lua_tointeger(L, -1), t->ndim);
        }
        lua_pop(L, 1);
    }
    lb_push_tensor(L, op(t, axis, opt_flag(L, o, "exclusive"), opt_flag(L, o, "reverse")), 2);
    return 1;
}
static int t_cumsum(lua_State *L) { return scan(L, ld_cumsum, "t:cumsum"); }
static int t_cumprod(lua_State *L) { return scan(L, ld_cumprod, "t:cumprod"); }
static int t_argmin(lua_State *L) {
    ld_tensor *t = SELF;
    lb_push_tensor(L, ld_argmin(t, check_axis_arg(L, 2, t->ndim ? -1 : LD_ALL_AXES, t->ndim)), 2);
    return 1;
}
static int t_argmax(lua_State *L) {
    ld_tensor *t = SELF;
    lb_push_tensor(L, ld_argmax(t, check_axis_arg(L, 2, t->ndim ? -1 : LD_ALL_AXES, t->ndim)), 2);
    return 1;
}

/* t:gather(indices [, axis=0]), also named index_select */
static int t_gather(lua_State *L) {
    ld_tensor *t = SELF;
    if (t->ndim < 1) return luaL_argerror(L, 1, "cannot gather from a scalar");
    int axis = check_axis_arg(L, 3, 0, t->ndim);
    ld_tensor *idx = to_tensor_on(L, 2, LD_I64, t->storage->device);
    lb_push_tensor(L, idx, 0);
    lb_push_tensor(L, ld_gather(t, idx, axis), 2);
    return 1;
}

static int t_concat(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_Integer len = luaL_len(L, 1);
    if (len < 1) return luaL_argerror(L, 1, "need at least one tensor");
    if (len > INT_MAX / (lua_Integer)sizeof(ld_tensor *)) return luaL_argerror(L, 1, "too many tensors");
    int n = (int)len;
    lua_geti(L, 1, 1);
    int axis = check_axis_arg(L, 2, 0, lb_check_tensor(L, -1)->ndim);
    lua_pop(L, 1);
    ld_tensor **ts = lua_newuserdatauv(L, sizeof *ts * (size_t)n, 0);
    for (int i = 0; i < n; i++) {
        lua_geti(L, 1, i + 1);
        ts[i] = lb_check_tensor(L, -1);
        lua_pop(L, 1);
    }
    lb_push_tensor(L, ld_concat_op(n, ts, axis), 1);
    return 1;
}

static int t_stack(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    int n = (int)luaL_len(L, 1);
    if (n < 1) return luaL_argerror(L, 1, "need at least one tensor");
    /* the new axis goes at `axis` (0 .. ndim, or negative from the end), as tf.stack's */
    lua_geti(L, 1, 1);
    int nd0 = lb_check_tensor(L, -1)->ndim;
    lua_pop(L, 1);
    if (nd0 + 1 > LD_MAX_DIMS) return luaL_argerror(L, 1, "the tensors already have the most dimensions a tensor can");
    int axis = check_axis_arg(L, 2, 0, nd0 + 1);
    if (axis < 0) axis += nd0 + 1;
    ld_tensor **ts = lua_newuserdatauv(L, sizeof *ts * (size_t)n, 0);
    int base = lua_gettop(L);
    luaL_checkstack(L, n + 4, "too many tensors to stack");   /* each reshaped one stays on the stack */
    for (int i = 0; i < n; i++) {
        lua_geti(L, 1, i + 1);
        ld_tensor *t = lb_check_tensor(L, -1);
        if (t->ndim != nd0) {
            char a[LD_SHAPE_STR_MAX], b[LD_SHAPE_STR_MAX];
            lua_geti(L, 1, 1);
            return luaL_error(L, "bad argument #1 to 'stack' (tensor %d is %s, tensor 1 is %s: stacked tensors need "
                              "equal shapes)", i + 1, ld_shape_str(t, b, sizeof b),
                              ld_shape_str(lb_check_tensor(L, -1), a, sizeof a));
        }
        int64_t s[LD_MAX_DIMS];
        for (int d = 0, k = 0; d <= t->ndim; d++) s[d] = d == axis ? 1 : t->shape[k++];
        ts[i] = ld_reshape_op(t, t->ndim + 1, s);
        lb_push_tensor(L, ts[i], 1);   /* anchored on the stack */
        lua_remove(L, -2);
    }
    ld_tensor *r = ld_concat_op(n, ts, axis);
    lua_settop(L, base);
    lb_push_tensor(L, r, 1);
    return 1;
}

/* ---- selection ---- */
/* tensor.where(cond, a, b) / tensor.where(cond) */
static int t_where(lua_State *L) {
    int top = lua_gettop(L);
    if (top >= 2 && lua_isnoneornil(L, 3))
        return luaL_error(L, "tensor.where(cond, a, b) needs both a and b (or neither: tensor.where(cond) gives the "
                             "indices of cond's true elements)");
    ld_tensor *tc = lb_test_tensor(L, 1), *ta = top >= 2 ? lb_test_tensor(L, 2) : NULL,
              *tb = top >= 3 ? lb_test_tensor(L, 3) : NULL;
    ld_device *dev = ta ? ta->storage->device : tb ? tb->storage->device : tc ? tc->storage->device : default_device();
    ld_tensor *c = to_tensor_on(L, 1, LD_F32, dev);
    lb_push_tensor(L, c, 0);
    if (top < 2) {
        lb_push_tensor(L, ld_where_indices(c), 1);
        return 1;
    }
    ld_tensor *a = to_tensor_on(L, 2, number_dtype(L, 2, tb, 3), dev);
    lb_push_tensor(L, a, 0);
    ld_tensor *b = to_tensor_on(L, 3, number_dtype(L, 3, a, 0), dev);
    lb_push_tensor(L, b, 0);
    lb_push_tensor(L, ld_where(c, a, b), 1);
    return 1;
}

/* t:clip(lo, hi), also tensor.clip_by_value(t, lo, hi) */
static int t_clip(lua_State *L) {
    ld_tensor *t = SELF;
    if (lua_isnoneornil(L, 2) || lua_isnoneornil(L, 3))
        return luaL_error(L, "clip needs both bounds: t:clip(lo, hi) (tf.clip_by_value's clip_value_min and "
                             "clip_value_max; math.huge for no bound)");
    ld_tensor *lo = to_tensor_on(L, 2, number_dtype(L, 2, t, 0), t->storage->device);
    lb_push_tensor(L, lo, 0);
    ld_tensor *hi = to_tensor_on(L, 3, number_dtype(L, 3, t, 0), t->storage->device);
    lb_push_tensor(L, hi, 0);
    lb_push_tensor(L, ld_clip_by_value(t, lo, hi), 1);
    return 1;
}

/* tensor.one_hot(ids, depth, {on_value=1, off_value=0, axis=-1, dtype="float32"}) */
static int t_one_hot(lua_State *L) {
    lua_settop(L, 3);
    lua_Integer depth = luaL_checkinteger(L, 2);
    static const char *const opts[] = {"on_value", "off_value", "axis", "dtype", NULL};
    double on = 1, off = 0;
    lua_Integer axis = -1;
    ld_dtype dt = LD_F32;
    if (!lua_isnoneornil(L, 3)) {
        luaL_checktype(L, 3, LUA_TTABLE);
        lb_check_options(L, 3, "tensor.one_hot", opts);
        lua_getfield(L, 3, "on_value"); on = luaL_optnumber(L, -1, 1); lua_pop(L, 1);
        lua_getfield(L, 3, "off_value"); off = luaL_optnumber(L, -1, 0); lua_pop(L, 1);
        lua_getfield(L, 3, "axis"); axis = luaL_optinteger(L, -1, -1); lua_pop(L, 1);
        lua_getfield(L, 3, "dtype");
        if (!lua_isnil(L, -1) && ld_dtype_from_name(luaL_checkstring(L, -1), &dt)) return lb_engine_error(L, 3);
        lua_pop(L, 1);
    }
    if (axis < INT_MIN || axis > INT_MAX || depth > INT64_MAX / 2) return luaL_argerror(L, 3, "axis or depth out of range");
    ld_tensor *ids = lb_test_tensor(L, 1);
    ld_tensor *ti = to_tensor_on(L, 1, LD_I64, ids ? ids->storage->device : default_device());
    lb_push_tensor(L, ti, 0);
    lb_push_tensor(L, ld_one_hot(ti, (int64_t)depth, (float)on, (float)off, (int)axis, dt), 1);
    return 1;
}

/* t:squeeze([axis]) and t:expand_dims(axis): views that the tape records */
static int t_squeeze(lua_State *L) {
    ld_tensor *t = SELF;
    int64_t s[LD_MAX_DIMS];
    int n = 0;
    if (lua_isnoneornil(L, 2)) {
        for (int i = 0; i < t->ndim; i++) if (t->shape[i] != 1) s[n++] = t->shape[i];
    } else {
        int ax = check_axis(L, 2, t->ndim);
        if (ax < 0) ax += t->ndim;
        if (t->shape[ax] != 1) {
            char b[LD_SHAPE_STR_MAX];
            return luaL_error(L, "squeeze: axis %d of a tensor of shape %s has size %I, not 1", (int)lua_tointeger(L, 2),
                              ld_shape_str(t, b, sizeof b), (lua_Integer)t->shape[ax]);
        }
        for (int i = 0; i < t->ndim; i++) if (i != ax) s[n++] = t->shape[i];
    }
    lb_push_tensor(L, ld_reshape_op(t, n, s), 1);
    return 1;
}
static int t_expand_dims(lua_State *L) {
    ld_tensor *t = SELF;
    if (t->ndim + 1 > LD_MAX_DIMS) return luaL_argerror(L, 1, "the tensor already has the most dimensions a tensor can");
    int ax = check_axis(L, 2, t->ndim + 1);
    if (ax < 0) ax += t->ndim + 1;
    int64_t s[LD_MAX_DIMS];
    for (int i = 0, k = 0; i <= t->ndim; i++) s[i] = i == ax ? 1 : t->shape[k++];
    lb_push_tensor(L, ld_reshape_op(t, t->ndim + 1, s), 1);
    return 1;
}

/* t[i] selects along dim 0; t.shape etc. through the method table */
static int t_index(lua_State *L) {
    if (lua_isinteger(L, 2)) {
        ld_tensor *t = SELF;
        if (t->ndim == 0) return luaL_error(L, "cannot index a scalar tensor");
        ld_tensor *s = ld_select_op(t, 0, lua_tointeger(L, 2));
        if (!s) return lb_engine_error(L, 2);
        if (s->ndim == 0) { push_elem(L, s, 0); ld_tensor_release(s); return 1; }
        lb_push_tensor(L, s, 2);
        return 1;
    }
    const char *k = luaL_checkstring(L, 2);
    ld_tensor *t = SELF;
    if (!strcmp(k, "shape")) return t_shape(L);
    if (!strcmp(k, "dtype")) { lua_pushstring(L, ld_dtype_name(t->dtype)); return 1; }
    if (!strcmp(k, "device")) { lua_pushstring(L, t->storage->device->name); return 1; }
    if (!strcmp(k, "ndim")) { lua_pushinteger(L, t->ndim); return 1; }
    if (!strcmp(k, "name")) { if (t->name) lua_pushstring(L, t->name); else lua_pushnil(L); return 1; }
    if (!strcmp(k, "trainable")) { lua_pushboolean(L, t->requires_grad); return 1; }
    if (!strcmp(k, "T")) { lb_push_tensor(L, ld_transpose_op(t, -2, -1), 1); return 1; }
    if (!strcmp(k, "keras_mask")) {   /* Keras's _keras_mask: what a layer left on its output, or nil */
        if (t->keras_mask) lb_push_tensor(L, ld_tensor_retain(t->keras_mask), 1);
        else lua_pushnil(L);
        return 1;
    }
    lua_getfield(L, lua_upvalueindex(1), k);
    return 1;
}

/* t[i] = x; on a mirrored variable, the replica's copy or every copy (ld_variable_write) */
static int t_newindex(lua_State *L) {
    ld_tensor *t = SELF;
    if (!lua_isinteger(L, 2)) return luaL_argerror(L, 2, "tensors are indexed by integers");
    lua_Integer i = lua_tointeger(L, 2);
    ld_tensor *row = ld_select(t, 0, i);   /* a bad index is argument 2's error, before the value is read */
    if (!row) return lb_engine_error(L, 2);
    ld_tensor_release(row);
    ld_tensor *src = to_tensor_on(L, 3, t->dtype, ld_var(t)->storage->device);
    lb_push_tensor(L, src, 0);
    if (src->dtype != t->dtype && ld_cast_check(src, t->dtype)) return lb_engine_error(L, 3);
    if (ld_variable_write_index(t, i, src)) return lb_engine_error(L, 3);
    return 0;
}

/* The value argument of assign/assign_add/assign_sub, converted (on the
   device of the copy written first) and anchored; the variable's shape or
   one element, as TF asks. */
static ld_tensor *assign_value(lua_State *L, ld_tensor *t, const char *fname) {
    ld_tensor *src = to_tensor_on(L, 2, t->dtype, ld_var(t)->storage->device);
    lb_push_tensor(L, src, 0);
    if (src->dtype != t->dtype && ld_cast_check(src, t->dtype)) lb_engine_error(L, 2);
    if (!ld_same_shape(t, src) && ld_tensor_numel(src) != 1) {
        char b1[64], b2[64];
        luaL_error(L, "bad argument #1 to '%s' (shape %s does not match the variable's %s)", fname,
                   ld_shape_str(src, b1, sizeof b1), ld_shape_str(t, b2, sizeof b2));
    }
    return src;
}

/* v:assign(x), v:assign_add(x), v:assign_sub(x): every write goes through
   ld_variable_write, so a mirrored variable gets TF's rule (the replica's
   copy inside strategy.run, every copy outside) */
static int t_assign(lua_State *L) {
    ld_tensor *t = SELF;
    if (ld_variable_write(t, assign_value(L, t, "assign"))) return lb_engine_error(L, 2);
    lua_settop(L, 1);
    return 1;
}

static int t_assign_add(lua_State *L) {
    ld_tensor *t = SELF;
    if (ld_variable_add(t, assign_value(L, t, "assign_add"), 0)) return lb_engine_error(L, 2);
    lua_settop(L, 1);
    return 1;
}

static int t_assign_sub(lua_State *L) {
    ld_tensor *t = SELF;
    if (ld_variable_add(t, assign_value(L, t, "assign_sub"), 1)) return lb_engine_error(L, 2);
    lua_settop(L, 1);
    return 1;
}

/* ---- printing, NumPy style ---- */
/* NumPy's names for the values that are not numbers: "nan" whatever its
   sign bit (C's printf may say "-nan"), "inf", "-inf". NULL for a number. */
static const char *nonfinite_name(double v) {
    if (isnan(v)) return "nan";
    if (isinf(v)) return v > 0 ? "inf" : "-inf";
    return NULL;
}

/* What printing needs to know of a (host) tensor's values. */
typedef struct {
    double max, min;   /* largest and smallest nonzero finite magnitude */
    int neg;           /* a negative value */
    int named;         /* length of the longest nonfinite name ("-inf": 4) */
    int finite;        /* a finite value */
} value_scan;

/* Scan (the first 100000 of) c's values; returns whether they print in
   scientific notation: PyTorch's rule at 4 decimals, when the nonzero finite
   magnitudes span more than 3 decades, reach 1e8 or fall below 1e-4 (1e-8
   would print as 0.0000), as NumPy switches too. */
static int scan_values(ld_tensor *c, value_scan *vs) {
    int64_t n = ld_tensor_numel(c);
    *vs = (value_scan){0, HUGE_VAL, 0, 0, 0};
    for (int64_t i = 0; i < n && i < 100000; i++) {
        double v = ld_tensor_get_flat(c, i);
        const char *name = ld_dtype_is_float(c->dtype) ? nonfinite_name(v) : NULL;
        if (name) {
            if ((int)strlen(name) > vs->named) vs->named = (int)strlen(name);
            continue;
        }
        vs->finite = 1;
        double a = fabs(v);
        if (a > vs->max) vs->max = a;
        if (a > 0 && a < vs->min) vs->min = a;
        if (v < 0) vs->neg = 1;
    }
    return ld_dtype_is_float(c->dtype) && vs->max > 0 && (vs->max / vs->min > 1000 || vs->max >= 1e8 || vs->min < 1e-4);
}

/* sci: "%.4e" for every element, when magnitudes span many decades */
static void fmt_elem(luaL_Buffer *b, ld_tensor *t, int64_t i, int width, int sci) {
    char s[64];   /* a float32 is at most 39 digits before the point: "%.4f" fits */
    if (ld_dtype_is_float(t->dtype)) {
        double v = ld_tensor_get_flat(t, i);
        const char *name = nonfinite_name(v);
        if (name) snprintf(s, sizeof s, "%*s", width, name);
        else snprintf(s, sizeof s, sci ? "%*.4e" : "%*.4f", width, v);
    } else {
        snprintf(s, sizeof s, "%*lld", width, (long long)ld_tensor_get_flat_int(t, i));
    }
    luaL_addstring(b, s);
}

static void fmt_dims(luaL_Buffer *b, ld_tensor *t, int d, int64_t base, int64_t *strides, int indent, int width,
                     int sci) {
    const int64_t edge = 3, maxn = 8;
    luaL_addchar(b, '[');
    int64_t n = t->shape[d];
    for (int64_t i = 0; i < n; i++) {
        if (n > maxn && i == edge) {
            luaL_addstring(b, d + 1 == t->ndim ? " ..." : "\n");
            if (d + 1 != t->ndim) { for (int k = 0; k < indent + 1; k++) luaL_addchar(b, ' '); luaL_addstring(b, "..."); }
            i = n - edge;
        }
        if (i) {
            if (d + 1 == t->ndim) luaL_addchar(b, ' ');
            else {
                luaL_addchar(b, '\n');
                for (int k = d + 1; k < t->ndim - 1; k++) luaL_addchar(b, '\n');
                for (int k = 0; k < indent + 1; k++) luaL_addchar(b, ' ');
            }
        }
        if (d + 1 == t->ndim) fmt_elem(b, t, base + i * strides[d], width, sci);
        else fmt_dims(b, t, d + 1, base + i * strides[d], strides, indent + 1, width, sci);
    }
    luaL_addchar(b, ']');
}

static int t_tostring(lua_State *L) {
    ld_tensor *t = SELF;
    ld_tensor *c = ld_to_device(t, ld_device_cpu());
    if (!c) return lb_engine_error(L, 1);
    lb_push_tensor(L, c, 0);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addstring(&b, "tensor(");
    int64_t n = ld_tensor_numel(c);
    value_scan vs;
    int sci = scan_values(c, &vs);
    double mx = vs.max, mn = vs.min;
    int neg = vs.neg, named = vs.named, finite = vs.finite;
    if (c->ndim == 0) fmt_elem(&b, c, 0, 0, sci);
    else {
        int64_t strides[LD_MAX_DIMS], s = 1;
        for (int i = c->ndim - 1; i >= 0; i--) { strides[i] = s; s *= c->shape[i]; }
        /* the column width: digits of the largest finite magnitude (log10
           of inf is no width), a sign, the decimals; wide enough for
           "-inf" and "nan" where they occur. "%.4e": d.dddde+XX (10, more
           for a 3-digit exponent) and a sign. */
        int width;
        if (sci) width = 10 + (mx >= 1e100 || mn < 1e-99) + neg;
        else width = (int)(mx >= 1 ? floor(log10(mx)) + 1 : 1) + neg + (ld_dtype_is_float(c->dtype) ? 5 : 0);
        if (!finite || named > width) width = named;
        if (n == 0) luaL_addstring(&b, "[]");
        else fmt_dims(&b, c, 0, 0, strides, 7, width, sci);
    }
    char tail[256], sh[96];
    ld_shape_str(c, sh, sizeof sh);
    snprintf(tail, sizeof tail, ", shape=%s, dtype=%s, device=%s%s)", c->ndim ? sh : "()",
             ld_dtype_name(t->dtype), t->storage->device->name, t->requires_grad ? ", trainable" : "");
    luaL_addstring(&b, tail);
    luaL_pushresult(&b);
    return 1;
}

/* Rich display for the notebook: an HTML table of (at most 10x10 corner) values. */
static int t_mimebundle(lua_State *L) {
    ld_tensor *t = SELF;
    ld_tensor *c = ld_to_device(t, ld_device_cpu());
    if (!c) return lb_engine_error(L, 1);
    lb_push_tensor(L, c, 0);
    int anchor = lua_gettop(L);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    char sh[96], s[128];
    snprintf(s, sizeof s, "<div><small>tensor shape=%s dtype=%s device=%s</small><table>",
             c->ndim ? ld_shape_str(c, sh, sizeof sh) : "()", ld_dtype_name(c->dtype), c->storage->device->name);
    luaL_addstring(&b, s);
    value_scan vs;
    int sci = scan_values(c, &vs);
    int64_t rows = c->ndim >= 2 ? c->shape[c->ndim - 2] : 1, cols = c->ndim >= 1 ? c->shape[c->ndim - 1] : 1;
    for (int64_t i = 0; i < rows && i < 10; i++) {
        luaL_addstring(&b, "<tr>");
        for (int64_t j = 0; j < cols && j < 10; j++) {
            if (ld_dtype_is_float(c->dtype)) {
                double v = ld_tensor_get_flat(c, i * cols + j);
                const char *name = nonfinite_name(v);
                if (name) snprintf(s, sizeof s, "<td>%s</td>", name);
                else snprintf(s, sizeof s, sci ? "<td>%.4e</td>" : "<td>%.4f</td>", v);
            } else {
                snprintf(s, sizeof s, "<td>%lld</td>", (long long)ld_tensor_get_flat_int(c, i * cols + j));
            }
            luaL_addstring(&b, s);
        }
        if (cols > 10) luaL_addstring(&b, "<td>&hellip;</td>");
        luaL_addstring(&b, "</tr>");
    }
    if (rows > 10) luaL_addstring(&b, "<tr><td>&vellip;</td></tr>");
    luaL_addstring(&b, "</table></div>");
    luaL_pushresult(&b);
    lua_createtable(L, 0, 2);
    lua_insert(L, -2);
    lua_setfield(L, -2, "text/html");
    lua_pushcfunction(L, t_tostring);
    lua_pushvalue(L, 1);
    lua_call(L, 1, 1);
    lua_setfield(L, -2, "text/plain");
    lua_remove(L, anchor);
    return 1;
}

static int t_is_tensor(lua_State *L) { lua_pushboolean(L, lb_test_tensor(L, 1) != NULL); return 1; }

static int t_variable(lua_State *L) {
    ld_tensor *src = lb_to_tensor(L, 1, LD_F32);
    lb_push_tensor(L, src, 0);
    ld_tensor *v = ld_cast(src, LD_F32);
    if (!v) return lb_engine_error(L, 1);
    v->requires_grad = 1;
    if (lua_istable(L, 2)) {
        lua_getfield(L, 2, "name");
        if (lua_isstring(L, -1)) v->name = strdup(lua_tostring(L, -1));
        lua_getfield(L, 2, "trainable");
        if (lua_isboolean(L, -1) && !lua_toboolean(L, -1)) v->requires_grad = 0;
        lua_pop(L, 2);
    }
    /* inside a strategy's scope: one copy per replica device, as a layer's */
    if (ld_variable_created(v)) { ld_tensor_release(v); return lb_engine_error(L, 0); }
    lb_push_tensor(L, v, 1);
    /* known as a Variable (trainable or not), for a subclassed model's tracking (lb_is_variable) */
    if (lua_getfield(L, LUA_REGISTRYINDEX, "ldist.variables") != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_newtable(L);
        lua_pushliteral(L, "k");
        lua_setfield(L, -2, "__mode");
        lua_setmetatable(L, -2);
        lua_pushvalue(L, -1);
        lua_setfield(L, LUA_REGISTRYINDEX, "ldist.variables");
    }
    lua_pushvalue(L, -2);
    lua_pushboolean(L, 1);
    lua_rawset(L, -3);
    lua_pop(L, 1);
    return 1;
}

int lb_is_variable(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    if (!lb_test_tensor(L, idx)) return 0;
    int known = 0;
    if (lua_getfield(L, LUA_REGISTRYINDEX, "ldist.variables") == LUA_TTABLE) {
        lua_pushvalue(L, idx);
        known = lua_rawget(L, -2) != LUA_TNIL;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return known;
}

#define DEVICES_DOC "tensor.devices()\n\nNames of the devices ldist found, e.g. {\"cpu:0\", \"cuda:0\"}.\n" \
    "GPUs come from the CUDA plugin (build/ldist_cuda.so) where a driver and a GPU answer;\n" \
    "otherwise only CPU devices are listed and tensor.device_note() says why."
static int t_devices(lua_State *L);
/* Once devices have been listed (the CUDA plugin probed), help(tensor.devices)
   ends with the line saying which GPUs answered, or why none did. */
static void devices_doc_note(lua_State *L) {
    lua_getfield(L, LUA_REGISTRYINDEX, "ldist.docs");
    if (lua_istable(L, -1)) {
        const char *text = lua_pushfstring(L, "%s\nGPUs: %s", DEVICES_DOC, ld_device_note());
        lua_setfield(L, -2, "tensor.devices");
        lua_pushcfunction(L, t_devices);
        lua_pushstring(L, text);
        lua_rawset(L, -3);
    }
    lua_pop(L, 1);
}

static int t_device_note(lua_State *L) {
    lua_pushstring(L, ld_device_note());
    devices_doc_note(L);
    return 1;
}

static int t_devices(lua_State *L) {
    devices_doc_note(L);
    lua_newtable(L);
    for (int i = 0; i < ld_device_count(); i++) {
        lua_pushstring(L, ld_device_at(i)->name);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int t_memory(lua_State *L) {
    size_t now = ld_host_bytes_in_use(), peak = ld_host_bytes_peak(), retries = 0;
    if (!lua_isnoneornil(L, 1)) {   /* a device: a GPU's (or sim:0's) own counts; a CPU device's are the host's */
        ld_device *d = ld_device_find(luaL_checkstring(L, 1));
        if (!d) return lb_engine_error(L, 1);
        if (!ld_device_is_host(d)) {
            now = __atomic_load_n(&d->bytes_in_use, __ATOMIC_RELAXED);
            peak = __atomic_load_n(&d->bytes_peak, __ATOMIC_RELAXED);
            retries = __atomic_load_n(&d->alloc_retries, __ATOMIC_RELAXED);
        }
    }
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, (lua_Integer)retries);
    lua_setfield(L, -2, "alloc_retries");
    lua_pushinteger(L, (lua_Integer)now);
    lua_setfield(L, -2, "bytes_in_use");
    lua_pushinteger(L, (lua_Integer)peak);
    lua_setfield(L, -2, "peak_bytes");
    return 1;
}

static const luaL_Reg methods[] = {
    {"item", t_item}, {"totable", t_totable}, {"tolist", t_totable}, {"size", t_shape},
    {"reshape", t_reshape}, {"transpose", t_transpose}, {"permute", t_permute}, {"slice", t_slice},
    {"contiguous", t_contiguous}, {"clone", t_clone}, {"astype", t_astype}, {"float", t_float},
    {"long", t_long}, {"to", t_to}, {"cpu", t_cpu}, {"numel", t_numel},
    LD_BINARY_OPS(OP_ROW) LD_UNARY_OPS(OP_ROW)
    {"softmax", t_softmax}, {"log_softmax", t_log_softmax}, {"matmul", t_matmul},
    {"sum", t_sum}, {"mean", t_mean}, {"max", t_max}, {"argmax", t_argmax}, {"min", t_min}, {"argmin", t_argmin}, {"var", t_var}, {"std", t_std},
    {"logsumexp", t_logsumexp}, {"any", t_any}, {"all", t_all}, {"prod", t_prod}, {"cumsum", t_cumsum},
    {"cumprod", t_cumprod},
    {"index_select", t_gather}, {"gather", t_gather}, {"clip", t_clip}, {"squeeze", t_squeeze},
    {"expand_dims", t_expand_dims}, {"sort", t_sort}, {"argsort", t_argsort},
    {"assign", t_assign}, {"assign_add", t_assign_add}, {"assign_sub", t_assign_sub},
    {NULL, NULL}};

static const luaL_Reg functions[] = {
    {"new", t_new}, {"from", t_new}, {"zeros", t_zeros}, {"ones", t_ones}, {"full", t_full},
    {"arange", t_arange}, {"uniform", t_uniform}, {"rand", t_uniform}, {"normal", t_normal},
    {"randn", t_normal}, {"seed", t_seed}, {"get_rng_state", t_get_rng_state}, {"set_rng_state", t_set_rng_state}, {"concat", t_concat}, {"stack", t_stack},
    {"is_tensor", t_is_tensor}, {"Variable", t_variable}, {"devices", t_devices}, {"memory", t_memory},
    {"device_note", t_device_note}, {"bmm", t_bmm}, {"attention", t_attention},
    {"where", t_where}, {"clip_by_value", t_clip}, {"one_hot", t_one_hot}, {"stop_gradient", t_stop_gradient}, {"_pad_axis", t_pad_axis}, {"top_k", t_top_k},
    {NULL, NULL}};

/* the rule for values, in the help of everything that converts them */
#define VALUES_DOC "Values never wrap: a value an integer dtype cannot hold (uint8 -1 or 256, int64 2^63,\n" \
    "nan, inf) is an error naming it, as NumPy 2 refuses an out-of-bounds Python integer;\n" \
    "a fraction is dropped (2.7 -> 2), as int() does. float32 takes any number: past its\n" \
    "range it is inf (IEEE 754). Integers are stored exactly (math.maxinteger as int64)."

static const char *const docs[] = {
    "new", "tensor.new(values, {dtype=\"float32\", device=\"cpu:0\"})\n\nA tensor from a number, a nested table of numbers, or another tensor.\n  tensor.new{{1, 2}, {3, 4}}   --> 2x2 float32\n"
           VALUES_DOC,
    "zeros", "tensor.zeros(d1, d2, ... | {d1, d2, ...}, {dtype=, device=})\n\nA tensor of zeros.",
    "ones", "tensor.ones(d1, d2, ..., {dtype=, device=})\n\nA tensor of ones.",
    "full", "tensor.full(shape..., value, {dtype=, device=})\n\nA tensor filled with value.",
    "arange", "tensor.arange([start,] stop [, step], {dtype=})\n\nValues start, start+step, ... below stop (int64 when all arguments are integers).",
    "uniform", "tensor.uniform(shape..., {min=0, max=1})\n\nUniform random values from the seeded global generator (tensor.seed).",
    "normal", "tensor.normal(shape..., {mean=0, stddev=1})\n\nNormal random values from the seeded global generator.",
    "seed", "tensor.seed(n)\n\nReset the global random generator: initialisers, dropout and random tensors repeat.",
    "get_rng_state", "tensor.get_rng_state()\n\nThe global random generator's state, as a string (for tensor.set_rng_state).",
    "set_rng_state", "tensor.set_rng_state(state)\n\nPut back a state from tensor.get_rng_state(), here or in another process:\n"
                     "the same initialisers, dropout masks and random tensors follow.",
    "top_k", "tensor.top_k(x, k=1) -> values, indices\n\ntf.math.top_k: the k largest values along the last axis, largest first, and their int32\n"
             "indices (ties: the lower index first, as TF's). The values keep the gradient (to those places).\n"
             "NaN counts as above +inf (NumPy's rule; TF's NaN order is not a total order).",
    "stop_gradient", "tensor.stop_gradient(t)\n\nt's values, which no gradient flows through (tf.stop_gradient): a target network's\n"
                     "outputs, a GAN's fixed half, a straight-through estimator's x + stop_gradient(q - x).",
    "concat", "tensor.concat({t1, t2, ...}, axis=0)\n\nJoin tensors along an existing axis.",
    "stack", "tensor.stack({t1, t2, ...}, axis=0)\n\nJoin equally shaped tensors along a new axis (tf.stack's: axis 0 .. ndim, or negative\nfrom the end).",
    "Variable", "tensor.Variable(value, {name=, trainable=true})\n\nA trainable tensor: tapes watch it automatically and optimizers update it in place.",
    "devices", DEVICES_DOC,
    "device_note", "tensor.device_note()\n\nOne line about GPUs: which answered, or why none did\n"
                   "(\"no CUDA driver: libcuda.so.1 not found\", \"CUDA driver found but no GPU\").",
    "bmm", "tensor.bmm(a, b, {transpose_a=false, transpose_b=false})\n\nBatched matrix product, as torch.bmm: a [..., m, k] and b [..., k, n] with the same\n"
           "leading axes give [..., m, n]; a transpose option uses that operand's last two axes swapped.\n"
           "float32, float16 or bfloat16 (one dtype; half operands sum in float32).",
    "attention", "tensor.attention(q, k, v, {causal=false, scale=1/sqrt(dk)})\n\nScaled dot-product attention softmax(scale * q k^T) v for q [B, T, dk], k [B, S, dk],\n"
                 "v [B, S, dv] -> [B, T, dv] (heads folded into B, as MultiHeadAttention does). causal: query i\n"
                 "sees keys j <= i. float32, float16 or bfloat16: half inputs give half products with float32\n"
                 "sums and a float32 softmax, as torch.autocast does.",
    "where", "tensor.where(cond, a, b) | tensor.where(cond)\n\nTF's where: a where cond is true, b elsewhere, the three broadcast together (a and b\n"
             "tensors or numbers). True is nonzero: a NaN is true, -0 false. The gradient goes to the operand\n"
             "each element was taken from (zeros elsewhere, so an inf or NaN in the other branch stays out of it).\n"
             "With cond alone: the coordinates of its true elements, int64 [count, cond.ndim].",
    "clip_by_value", "tensor.clip_by_value(t, lo, hi)  (t:clip(lo, hi))\n\nEach value limited to [lo, hi] (numbers or broadcast tensors): tf.clip_by_value, with its\n"
                     "gradients (t's where lo <= t <= hi, the bound's where it was taken; a NaN stays NaN).",
    "one_hot", "tensor.one_hot(ids, depth, {on_value=1, off_value=0, axis=-1, dtype=\"float32\"})\n\nTF's one_hot: integer ids of shape S give S with a new axis of depth (at axis; -1 last),\n"
               "on_value at each id's class and off_value elsewhere; an id outside [0, depth) gives a row\n"
               "of off_value. As keras.utils.to_categorical(y, n): tensor.one_hot(y, n).",
    "binary_ops", "tensor.binary_ops\n\nThe names of the elementwise binary ops (Tensor methods), in the engine's order.",
    "unary_ops", "tensor.unary_ops\n\nThe names of the elementwise unary ops (Tensor methods), in the engine's order.",
    "memory", "tensor.memory([device])\n\nBytes of memory held by tensors now (bytes_in_use), and the peak (peak_bytes):\n"
              "the host's, or with a device name that device's (\"cuda:0\"; CPU devices share the host's).\n"
              "A GPU's caching allocator may hold more than this from the driver. alloc_retries: the device's\n"
              "allocations that failed, collected the garbage tensors and were retried (PyTorch's num_alloc_retries).",
    "Tensor", "Tensor\n\nAn n-dimensional array (float32, float16, bfloat16, int32, int64 or uint8) on a device.\n"
              "Indices and axes count from 0 as in NumPy/TF; negative ones from the end.\n"
              "Fields: shape, dtype, device, ndim, T.  t[i] selects along the first axis.\n"
              "Operators + - * / ^ and unary - broadcast like NumPy.\n"
              "Methods: reshape, transpose, permute, slice, sum, mean, max, min, prod, var, std,\n"
              "logsumexp, any, all, argmax, argmin, sort, argsort, cumsum, cumprod, matmul, exp, log,\n"
              "sqrt, abs, relu, sigmoid, tanh, gelu, softmax, log_softmax, item, totable, astype, to, cpu,\n"
              "clone, contiguous, index_select, gather, clip, squeeze, expand_dims, assign, assign_add,\n"
              "assign_sub; comparisons eq, ne, lt, le, gt, ge (1 or 0). tensor.where selects.",
    "Tensor:reshape", "t:reshape(d1, d2, ...)\n\nSame values, new shape; one dimension may be -1.",
    "Tensor:sum", "t:sum([axis | {axes}], {keepdims=false}) or (axis, keepdims)\n\nSum over an axis, a list of axes ({1, 2}: TF's axis=[1, 2]), or all of them;\n"
                  "{axis = {}} reduces over none. An integer tensor's sum is of its dtype and\n"
                  "exact (int64 16777217 stays 16777217), wrapping on overflow as TF's does; NaN in gives NaN.",
    "Tensor:mean", "t:mean([axis | {axes}], {keepdims=false}) or (axis, keepdims)\n\nMean over an axis, a list of axes, or all of them. Always float32: an integer\n"
                   "tensor's mean is its exact sum divided (TF's would truncate to an integer).",
    "Tensor:max", "t:max([axis | {axes}], {keepdims=false}) or (axis, keepdims)\n\nMaximum over an axis, a list of axes, or all of them (NaN if any is NaN; an\n"
                  "integer tensor's is of its dtype).",
    "Tensor:var", "t:var([axis | {axes}], {keepdims=false}) or (axis, keepdims)\n\nVariance (population: divided by the count) over an axis, a list of axes, or all of\n"
                  "them: tf.math.reduce_variance, the gradient too. Computed in float32; a float16 or\n"
                  "bfloat16 tensor's result is rounded once into its dtype, an integer tensor's is float32.",
    "Tensor:std", "t:std([axis | {axes}], {keepdims=false}) or (axis, keepdims)\n\nStandard deviation, sqrt(t:var(...)): tf.math.reduce_std (a constant slice's\n"
                  "gradient is NaN, as TF's).",
    "Tensor:logsumexp", "t:logsumexp([axis | {axes}], {keepdims=false}) or (axis, keepdims)\n\nlog(sum(exp(t))) without overflow: tf.math.reduce_logsumexp (the maximum taken out\n"
                        "first, outside the gradient); its gradient is the softmax over the axes.",
    "Tensor:any", "t:any([axis | {axes}], {keepdims=false}) or (axis, keepdims)\n\n1 where some element is nonzero (NaN counts), else 0, float32: tf.reduce_any of\n"
                  "t != 0.",
    "Tensor:all", "t:all([axis | {axes}], {keepdims=false}) or (axis, keepdims)\n\n1 where every element is nonzero (NaN counts), else 0, float32: tf.reduce_all of\n"
                  "t != 0.",
    "Tensor:prod", "t:prod([axis | {axes}], {keepdims=false}) or (axis, keepdims)\n\nProduct over an axis, a list of axes, or all of them: tf.math.reduce_prod (1 over no\n"
                   "values). Its gradient is TF's (no division: a zero gets the product of the others, two\n"
                   "zeros give 0). float32 inside, a float16 or bfloat16 tensor's result rounded once; an\n"
                   "integer tensor's is of its dtype and exact, wrapping on overflow as TF's does.",
    "Tensor:cumsum", "t:cumsum([axis=0], {exclusive=false, reverse=false}) or ({axis=, exclusive=, reverse=})\n\n"
                     "Running sums along an axis: tf.math.cumsum, its defaults too (axis 0). Element j is\n"
                     "t[0] + ... + t[j]; exclusive: up to t[j-1] (the first 0); reverse: from the end,\n"
                     "t[j] + ... + t[n-1]. Same shape and dtype (float32 sums in order; a float16 or bfloat16\n"
                     "tensor's each rounded once; integers exact). Its gradient is TF's: the cumsum of the\n"
                     "gradient run the other way.",
    "Tensor:cumprod", "t:cumprod([axis=0], {exclusive=false, reverse=false}) or ({axis=, exclusive=, reverse=})\n\n"
                      "Running products along an axis: tf.math.cumprod, its defaults too (axis 0); exclusive\n"
                      "starts from 1, reverse runs from the end, as t:cumsum. Same shape and dtype (float32\n"
                      "products in order; a float16 or bfloat16 tensor's each rounded once; integers exact).\n"
                      "Its gradient is TF's: 0 where t is 0 (TF divides by t with divide_no_nan; t:prod's\n"
                      "gradient gives a zero the product of the others).",
    "Tensor:argmax", "t:argmax([axis=-1])\n\nIndex (0-based, int64) of the maximum along an axis: the first one on ties, the\n"
                     "first NaN where there is one (NumPy's rule; TF's skips NaN).",
    "Tensor:min", "t:min([axis | {axes}], {keepdims=false}) or (axis, keepdims)\n\nMinimum over an axis, a list of axes, or all of them (NaN if any is NaN; an integer\n"
                  "tensor's is of its dtype).",
    "Tensor:argmin", "t:argmin([axis=-1])\n\nIndex (0-based, int64) of the minimum along an axis (the first NaN where there is one).",
    "Tensor:matmul", "a:matmul(b)\n\nMatrix product (OpenBLAS on the CPU); a may be batched [..., m, k], b is [k, n].",
    "Tensor:astype", "t:astype(dtype)\n\nA copy in another dtype (\"float32\", \"float16\", \"bfloat16\", \"int32\", \"int64\",\n\"uint8\"); to float16 and bfloat16 rounding to nearest even, as NumPy and TF do.\n"
                     "Unlike NumPy's astype, whose float-to-integer result for nan, inf or a value out of\n"
                     "range is undefined, a value the dtype cannot hold is an error naming it and its index.\n"
                     VALUES_DOC,
    "Tensor:clip", "t:clip(lo, hi)\n\ntensor.clip_by_value(t, lo, hi): each value limited to [lo, hi], with TF's gradients.",
    "Tensor:sort", "t:sort([axis=-1], [direction=\"ASCENDING\"|\"DESCENDING\"]) or ({axis=, direction=})\n\ntf.sort: the values in order along "
                   "an axis, stable (ties keep their order); the gradient goes back to\neach value's place. NaN counts as above +inf, as in t:argsort and tensor.top_k.",
    "Tensor:argsort", "t:argsort([axis=-1], [direction]) or ({axis=, direction=})\n\ntf.argsort: the int32 indices that order t along an axis "
                      "(stable: ties by the lower index).",
    "Tensor:squeeze", "t:squeeze([axis])\n\nThe tensor without its axes of size 1 (or only `axis`, which must have size 1): tf.squeeze.",
    "Tensor:expand_dims", "t:expand_dims(axis)\n\nThe tensor with a new axis of size 1 at `axis` (0 .. ndim, negative from the end): tf.expand_dims.",
    "Tensor:item", "t:item()\n\nThe value of a one-element tensor as a Lua number.",
    "Tensor:totable", "t:totable()\n\nThe values as nested Lua tables.",
    "Tensor:slice", "t:slice(axis, start, stop, step=1)\n\nA view of [start, stop) along an axis (0-based; negative from the end). Like t[i],\n"
                    "t:permute, t:clone, t:to and tensor.concat it keeps the gradient: in a tape the\n"
                    "gradient reaches t.",
    "Tensor:to", "t:to(\"cuda:0\")\n\nA copy on another device; in a tape the gradient goes back to t's device.",
    "Tensor:assign", "v:assign(value)\n\nOverwrite the tensor's values in place. A mirrored variable (made in a\n"
                     "MirroredStrategy's scope): inside strategy:run only this replica's copy, outside every copy.",
    "Tensor:assign_add", "v:assign_add(delta)\n\nv:assign(v + delta), in place.",
    "Tensor:assign_sub", "v:assign_sub(delta)\n\nv:assign(v - delta), in place.",
    NULL};

int lb_open_tensor(lua_State *L) {
    /* the variable cache: weak values */
    lua_newtable(L);
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "v");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_setfield(L, LUA_REGISTRYINDEX, VAR_CACHE);

    luaL_newmetatable(L, LB_TENSOR_MT);
    int mt = lua_gettop(L);
    {
        static const char *const f[] = {"shape", "dtype", "device", "ndim", "name", "trainable", "T", "keras_mask", NULL};
        lua_newtable(L);
        for (int i = 0; f[i]; i++) { lua_pushstring(L, f[i]); lua_rawseti(L, -2, i + 1); }
        lua_setfield(L, -2, "__fields");   /* computed fields, for completion */
    }

    lua_newtable(L);
    luaL_setfuncs(L, methods, 0);
    int mtab = lua_gettop(L);
    lua_pushvalue(L, mtab);
    lua_pushcclosure(L, t_index, 1);
    lua_setfield(L, mt, "__index");
    static const luaL_Reg meta[] = {
        {"__newindex", t_newindex}, {"__gc", t_gc}, {"__close", t_gc}, {"__tostring", t_tostring},
        {"__add", t_add}, {"__sub", t_sub}, {"__mul", t_mul}, {"__div", t_div}, {"__pow", t_pow},
        {"__unm", t_neg}, {"__len", t_len}, {"__mimebundle", t_mimebundle}, {NULL, NULL}};
    lua_pushvalue(L, mt);
    luaL_setfuncs(L, meta, 0);
    lua_pop(L, 1);
    lua_pushvalue(L, mtab);
    lua_setfield(L, mt, "methods");
    lua_settop(L, mt - 1);

    luaL_newlib(L, functions);
    luaL_getmetatable(L, LB_TENSOR_MT);
    lua_getfield(L, -1, "methods");
    lua_setfield(L, -3, "Tensor");
    lua_pop(L, 1);
    push_op_names(L, bin_names);
    lua_setfield(L, -2, "binary_ops");
    push_op_names(L, un_names);
    lua_setfield(L, -2, "unary_ops");
    lb_set_docs(L, "tensor.", docs);
    set_op_docs(L, bin_names, bin_docs, LD_BIN_COUNT);
    set_op_docs(L, un_names, un_docs, LD_UN_COUNT);
    return 1;
}
