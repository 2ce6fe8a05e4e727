/*
 * nn.c - the `nn` and `losses` modules: layers, Sequential models, losses,
 * and the C training step model:fit uses.
 *
 * Layers and models are userdata; a model keeps its layers' userdata in its
 * user value (so Lua sees model.layers) and the engine model retains the
 * engine layers. A model's user value also holds per-model Lua state
 * (what compile() stored): unknown fields read and write there, so the Lua
 * prelude can add fit/evaluate/predict as methods of nn.Model.
 */
#include "ld_nn.h"   /* before lbind.h: its nn helpers */
#include "lbind.h"
#include "ld_optim.h"
#include "ld_autograd.h"
#include "ld_ops.h"
#include "ld_ops_attn.h"
#include "ld_io.h"
#include "ld_strategy.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <float.h>
#include <math.h>
#include <string.h>

#define LAYER_MT "ldist.Layer"
#define MODEL_MT "ldist.Model"
#define LOSS_MT "ldist.Loss"

/* ================================================================ helpers */
/* A layer or model whose finalizer has run (a finalizer of another object
   reaching it during a collection: Lua resurrects what finalized objects
   refer to) holds NULL: an error, never a NULL dereference. */
static ld_layer *check_layer(lua_State *L, int i) {
    ld_layer **p = luaL_checkudata(L, i, LAYER_MT);
    if (!*p) luaL_error(L, "this layer has been garbage-collected (reached from a finalizer)");
    return *p;
}
static ld_model *check_model(lua_State *L, int i) {
    ld_model **p = luaL_checkudata(L, i, MODEL_MT);
    if (!*p) luaL_error(L, "this model has been garbage-collected (reached from a finalizer)");
    return *p;
}

/* A model whose variables a strategy lost (a parameter server that died:
   model._lost says so) has stale values: reading them raises until they are
   restored (model:load_weights, BackupAndRestore). */
/* model._lost = why (or nil): the one switch. It also marks (or clears) every
   weight of the model and its optimizer's slots as lost (ld_tensor_set_lost),
   so a reference taken before (local w = model.weights[1]) refuses to be read
   too; the model's own paths (call, evaluate, save) check model._lost below. */
static void model_mark_lost(lua_State *L, int mi, const char *why) {
    ld_model *m = check_model(L, mi);
    int n = ld_model_weights(m, NULL, NULL, 0);
    ld_tensor **v = lua_newuserdatauv(L, (sizeof *v + 1) * (size_t)(n ? n : 1), 0);
    ld_model_weights(m, v, (unsigned char *)(v + (n ? n : 1)), n);
    int st = LD_OK;
    for (int i = 0; i < n; i++) st |= ld_tensor_set_lost(v[i], why);
    lua_pop(L, 1);
    lua_getiuservalue(L, mi, 1);
    if (lua_getfield(L, -1, "_optimizer") == LUA_TUSERDATA) {
        ld_optimizer *o = lb_check_optimizer(L, -1);
        for (int i = 0; i < o->n_slots; i++)
            for (int q = 0; q < LD_OPT_SLOTS; q++)
                if (o->slots[i].s[q]) st |= ld_tensor_set_lost(o->slots[i].s[q], why);
    }
    lua_pop(L, 2);
    if (st) luaL_error(L, "out of memory marking the model's variables");
}

static ld_model *check_model_live(lua_State *L, int i, const char *what) {
    ld_model *m = check_model(L, i);
    lua_getiuservalue(L, i, 1);
    int lost = lua_getfield(L, -1, "_lost") == LUA_TSTRING;
    if (lost) return luaL_error(L, "%s: %s", what, lua_tostring(L, -1)), m;
    lua_pop(L, 2);
    return m;
}


/* ================================================================ layer constructors
 * One constructor serves every class of ld_nn.h: nn.<Class>(positional...,
 * {options}) or nn.<Class>{positional..., option = value}. An option the
 * class does not have is an error naming the ones it has (Keras raises for
 * an unknown keyword too). */

/* whether the table at idx has only array entries (a list of integers) */
static int is_list(lua_State *L, int idx) {
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if (!lua_isinteger(L, -1)) { lua_pop(L, 1); return 0; }
    }
    return 1;
}

/* parameter i of l from the Lua value at v */
static void set_param(lua_State *L, ld_layer *l, int i, int v) {
    const ld_param_spec *ps = &l->cls->params[i];
    int st = LD_OK;
    switch (lua_type(L, v)) {
    case LUA_TNIL: return;
    case LUA_TBOOLEAN: st = ld_layer_set_bool(l, i, lua_toboolean(L, v)); break;
    case LUA_TNUMBER:
        st = lua_isinteger(L, v) ? ld_layer_set_int(l, i, lua_tointeger(L, v)) : ld_layer_set_float(l, i, lua_tonumber(L, v));
        break;
    case LUA_TSTRING: st = ld_layer_set_str(l, i, lua_tostring(L, v)); break;
    case LUA_TTABLE: {
        v = lua_absindex(L, v);
        lua_Integer n = luaL_len(L, v);
        int floats = ps->type == LD_P_FLOATS;   /* factor={-0.2, 0.3}; else kernel_size={3, 3} */
        if ((!floats && ps->type != LD_P_INTS) || n > (floats ? 4 : LD_MAX_DIMS) || !is_list(L, v))
            luaL_error(L, "%s: %s must be %s, got a table", l->cls->class_name, ps->name,
                       ps->type == LD_P_INTS ? "a list of at most 8 integers"
                       : floats ? "a number or a list of at most 4 numbers" : "a single value");
        int64_t ivals[LD_MAX_DIMS];
        double fvals[LD_MAX_DIMS];
        for (lua_Integer k = 1; k <= n; k++) {
            lua_geti(L, v, k);
            int ok;
            if (floats) fvals[k - 1] = lua_tonumberx(L, -1, &ok);
            else ivals[k - 1] = lua_tointegerx(L, -1, &ok);
            lua_pop(L, 1);
            if (!ok) luaL_error(L, "%s: %s entries must be %s", l->cls->class_name, ps->name, floats ? "numbers" : "integers");
        }
        st = floats ? ld_layer_set_floats(l, i, (int)n, fvals) : ld_layer_set_ints(l, i, (int)n, ivals);
        break;
    }
    default:
        luaL_error(L, "%s: %s cannot be a %s", l->cls->class_name, ps->name, luaL_typename(L, v));
    }
    if (st) luaL_error(L, "%s", ld_error());
}

/* "WHAT: unknown option 'unit'; did you mean 'units'? (it takes units,
   activation, ...)", raised: `list` is the index of a sequence of the names
   WHAT takes; the closest name by the REPL's own rule (ldist._closest,
   lua/ui/help.lua). One message for layers, losses and optimizers. */
void lb_unknown_option(lua_State *L, const char *what, const char *k, int list) {
    list = lua_absindex(L, list);
    const char *guess = NULL;
    lua_getfield(L, LUA_REGISTRYINDEX, "ldist.module");
    if (lua_istable(L, -1) && lua_getfield(L, -1, "_closest") == LUA_TFUNCTION) {
        lua_pushstring(L, k);
        lua_pushvalue(L, list);
        lua_call(L, 2, 1);
        guess = lua_tostring(L, -1);
    }
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    lua_Integer n = luaL_len(L, list);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, list, i);
        luaL_addvalue(&b);
        if (i < n) luaL_addstring(&b, ", ");
    }
    luaL_pushresult(&b);
    if (guess) luaL_error(L, "%s: unknown option '%s'; did you mean '%s'? (it takes %s)", what, k, guess, lua_tostring(L, -1));
    luaL_error(L, "%s: unknown option '%s' (it takes %s)", what, k, lua_tostring(L, -1));
}

/* lb_unknown_option for a null-terminated list of names (or two: a ++ b) */
void lb_unknown_option_in(lua_State *L, const char *what, const char *k, const char *const *a, const char *const *b) {
    lua_newtable(L);
    int list = lua_gettop(L), n = 0;
    for (; a && *a; a++) { lua_pushstring(L, *a); lua_rawseti(L, list, ++n); }
    for (; b && *b; b++) { lua_pushstring(L, *b); lua_rawseti(L, list, ++n); }
    lb_unknown_option(L, what, k, list);
}

void lb_check_options(lua_State *L, int idx, const char *what, const char *const *names) {
    if (!lua_istable(L, idx)) return;
    idx = lua_absindex(L, idx);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        int ok = 0;
        for (int i = 0; k && names[i] && !ok; i++) ok = !strcmp(names[i], k);
        if (!ok) lb_unknown_option_in(L, what, k ? k : "?", names, NULL);
    }
}

static void unknown_option(lua_State *L, const ld_layer_class *c, const char *k) {
    lua_newtable(L);
    int list = lua_gettop(L), n = 0;
    for (int i = 0; c->params[i].name; i++) { lua_pushstring(L, c->params[i].name); lua_rawseti(L, list, ++n); }
    lua_pushliteral(L, "name"); lua_rawseti(L, list, ++n);
    lua_pushliteral(L, "dtype"); lua_rawseti(L, list, ++n);
    char w[48];
    for (int i = 0; ld_weight_option_name(c, i, w, sizeof w); i++) { lua_pushstring(L, w); lua_rawseti(L, list, ++n); }
    char what[80];
    snprintf(what, sizeof what, "nn.%s", c->class_name);
    lb_unknown_option(L, what, k, list);
}

/* the layer's dtype= option: a policy name ("mixed_bfloat16"), a
   mixed_precision.Policy (a table with its name), or Keras 3's serialized
   policy ({class_name = "DTypePolicy", config = {name = ...}}) */
static void set_policy(lua_State *L, ld_layer *l, int v) {
    const char *name = NULL;
    int top = lua_gettop(L);
    if (lua_type(L, v) == LUA_TSTRING) name = lua_tostring(L, v);
    else if (lua_istable(L, v)) {
        if (lua_getfield(L, v, "name") != LUA_TSTRING && lua_getfield(L, v, "config") == LUA_TTABLE)
            lua_getfield(L, -1, "name");
        name = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;   /* it stays alive in the table */
        lua_settop(L, top);
    }
    if (!name) luaL_error(L, "nn.%s: dtype must be a policy name or a mixed_precision.Policy, got a %s",
                          l->cls->class_name, luaL_typename(L, v));
    if (ld_policy_from_name(name, &l->policy)) luaL_error(L, "nn.%s: %s", l->cls->class_name, ld_error());
}

/* whether parameter pi of class c holds a layer itself (TimeDistributed's
   "layer", any class: no choices), not the name of one whose options the
   wrapper takes (Bidirectional's) */
static int holds_layer(const ld_layer_class *c, int pi) {
    return c->params[pi].type == LD_P_STR && !strcmp(c->params[pi].name, "layer") && !c->params[pi].choices;
}

/* A layer given where a class takes one (Keras's Bidirectional(layer)): its
   class name into l's "layer" option at pi, and its options that l has by
   name (units, activation, ...) into l's, with its dtype policy. A class
   that holds the layer itself (TimeDistributed) wraps it, and the wrapper's
   userdata (at ud) keeps the layer's in its user value (wrapper.layer). */
static void take_layer(lua_State *L, ld_layer *l, int ud, int pi, int a, int *given) {
    ld_layer *in = check_layer(L, a);
    given[pi] = 1;
    if (holds_layer(l->cls, pi)) {
        if (ld_layer_wrap(l, in)) lb_engine_error(L, 0);
        lua_pushvalue(L, a);
        lua_setiuservalue(L, ud, 1);
        return;
    }
    lua_pushstring(L, in->cls->class_name);
    set_param(L, l, pi, lua_gettop(L));
    lua_pop(L, 1);
    for (int i = 0; in->cls->params[i].name; i++) {
        const char *n = in->cls->params[i].name;
        int j = ld_layer_param_index(l->cls, n);
        if (j < 0 || j == pi || !strcmp(n, "go_backwards")) continue;
        l->p[j] = in->p[i];
        given[j] = 1;
    }
    l->policy = in->policy;
}

static ld_layer *layer_from_args(lua_State *L, const ld_layer_class *c, int first);

/* the layer of the config {class_name=, config={...}} at idx, pushed
   (Keras's layers.deserialize: nn.layer_from_config, a wrapper's layer) */
static void push_layer_from_config(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    lua_getfield(L, idx, "class_name");
    const char *cn = lua_tostring(L, -1);
    if (!cn) luaL_error(L, "a layer config needs a class_name");
    const ld_layer_class *c = ld_layer_class_find(cn);
    if (!c) luaL_error(L, "unknown layer class '%s'", cn);
    lua_pop(L, 1);
    if (lua_getfield(L, idx, "config") != LUA_TTABLE) luaL_error(L, "the %s layer's config is missing", c->class_name);
    int cfg = lua_gettop(L);
    layer_from_args(L, c, cfg);
    lua_remove(L, cfg);
}

/* the value at v for l's "layer" parameter pi, when it is a layer (or, for
   a class that holds one, a layer's config): 1 when taken, else 0 */
static int layer_arg(lua_State *L, ld_layer *l, int ud, int pi, int v, int *given) {
    if (l->cls->params[pi].type != LD_P_STR || strcmp(l->cls->params[pi].name, "layer")) return 0;
    v = lua_absindex(L, v);
    if (luaL_testudata(L, v, LAYER_MT)) { take_layer(L, l, ud, pi, v, given); return 1; }
    if (!holds_layer(l->cls, pi) || !lua_istable(L, v)) return 0;
    push_layer_from_config(L, v);
    take_layer(L, l, ud, pi, lua_gettop(L), given);
    lua_pop(L, 1);
    return 1;
}

/* a new layer of class c from the arguments from index `first` on */
static ld_layer *layer_from_args(lua_State *L, const ld_layer_class *c, int first) {
    int top = lua_gettop(L);
    ld_layer *l = ld_layer_new(c);
    if (!l) { lb_engine_error(L, 0); return NULL; }
    ld_layer **p = lua_newuserdatauv(L, sizeof *p, 1);   /* owns l from here, so an error frees it */
    *p = l;
    luaL_setmetatable(L, LAYER_MT);
    int ud = lua_gettop(L);
    int given[LD_LAYER_MAX_PARAMS] = {0}, pos = 0, opts = 0;
    for (int a = first; a <= top; a++) {
        const char *pn = pos < 4 ? c->positional[pos] : NULL;
        int pi = pn ? ld_layer_param_index(c, pn) : -1;
        /* a table is the options, unless a list of numbers where the class takes one ({} is no options:
           nn.ZeroPadding1D{} and Keras's empty config {} give the defaults) */
        if (lua_istable(L, a) && !(pi >= 0 && (c->params[pi].type == LD_P_INTS || c->params[pi].type == LD_P_FLOATS) &&
                                   luaL_len(L, a) > 0 && is_list(L, a))) {
            if (a != top) luaL_error(L, "nn.%s: the options table must be the last argument", c->class_name);
            opts = a;
            break;
        }
        if (pi < 0) luaL_error(L, "nn.%s takes at most %d positional argument%s, got %d", c->class_name, pos,
                               pos == 1 ? "" : "s", top - first + 1);
        if (layer_arg(L, l, ud, pi, a, given)) {
        } else if (c->params[pi].type == LD_P_INTS && !c->params[pi].width && lua_isinteger(L, a)) {
            /* nn.Reshape(28, 28, 1): the rest of the numbers are the list */
            lua_createtable(L, top - a + 1, 0);
            int k = 0;
            while (a <= top && lua_isinteger(L, a)) { lua_pushvalue(L, a++); lua_rawseti(L, -2, ++k); }
            a--;
            set_param(L, l, pi, lua_gettop(L));
            lua_pop(L, 1);
        } else set_param(L, l, pi, a);
        given[pi] = 1;
        pos++;
    }
    if (opts) {
        lua_Integer n = luaL_len(L, opts);                /* {64, activation = "relu"}: 64 is positional */
        for (lua_Integer k = 1; k <= n; k++) {
            const char *pn = k <= 4 ? c->positional[pos + k - 1] : NULL;
            int pi = pn ? ld_layer_param_index(c, pn) : -1;
            if (pi < 0) luaL_error(L, "nn.%s: too many positional entries in the options table", c->class_name);
            lua_geti(L, opts, k);
            set_param(L, l, pi, -1);
            lua_pop(L, 1);
            given[pi] = 1;
        }
        lua_pushnil(L);
        while (lua_next(L, opts)) {
            if (lua_type(L, -2) == LUA_TSTRING) {
                const char *k = lua_tostring(L, -2);
                int pi = ld_layer_param_index(c, k);
                if (!strcmp(k, "name")) {
                    if (ld_layer_set_name(l, luaL_checkstring(L, -1))) lb_engine_error(L, 0);
                } else if (!strcmp(k, "dtype")) {
                    set_policy(L, l, lua_gettop(L));
                } else if (!strcmp(k, "trainable")) {       /* Keras's Layer(trainable=) */
                    if (!lua_isboolean(L, -1)) luaL_error(L, "nn.%s: trainable must be true or false", c->class_name);
                    ld_layer_set_trainable(l, lua_toboolean(L, -1));
                } else if (pi < 0) {
                    if (!lb_layer_weight_option(L, l, k, lua_gettop(L))) unknown_option(L, c, k);
                }
                else if (!layer_arg(L, l, ud, pi, -1, given)) { set_param(L, l, pi, -1); given[pi] = !lua_isnil(L, -1); }
            } else if (!lua_isinteger(L, -2) || lua_tointeger(L, -2) < 1 || lua_tointeger(L, -2) > n)
                luaL_error(L, "nn.%s: option names must be strings", c->class_name);
            lua_pop(L, 1);
        }
    }
    for (int i = 0; c->params[i].name; i++)
        if (!c->params[i].def && !given[i]) luaL_error(L, "nn.%s: %s is required", c->class_name, c->params[i].name);
    if (ld_layer_check(l)) lb_engine_error(L, 0);
    return l;
}

static int nn_layer_new(lua_State *L) {
    layer_from_args(L, lua_touserdata(L, lua_upvalueindex(1)), 1);
    return 1;
}

/* layer:get_config() -> {name=, <parameter>=value, ...}: Keras's get_config,
   enough to make the layer again with nn.<class_name>(config) */
static void push_param(lua_State *L, const ld_layer *l, int i) {
    const ld_param_value *v = &l->p[i];
    switch (l->cls->params[i].type) {
    case LD_P_INT: lua_pushinteger(L, v->i[0]); break;
    case LD_P_FLOAT:   /* a float whose default is none (Keras's None) reads nil while it has no value */
        if (v->f != v->f && l->cls->params[i].def && !l->cls->params[i].def[0]) lua_pushnil(L);
        else lua_pushnumber(L, v->f);
        break;
    case LD_P_BOOL: lua_pushboolean(L, (int)v->i[0]); break;
    case LD_P_STR: lua_pushstring(L, v->s); break;
    case LD_P_INTS:
        lua_createtable(L, v->n, 0);
        for (int k = 0; k < v->n; k++) { lua_pushinteger(L, v->i[k]); lua_rawseti(L, -2, k + 1); }
        break;
    case LD_P_FLOATS:   /* one number as given stays one (Keras's factor=0.2); none given (Keras's None): nil */
        if (v->n == 0) { lua_pushnil(L); break; }
        if (v->n == 1) { lua_pushnumber(L, v->fs[0]); break; }
        lua_createtable(L, v->n, 0);
        for (int k = 0; k < v->n; k++) { lua_pushnumber(L, v->fs[k]); lua_rawseti(L, -2, k + 1); }
        break;
    }
}
/* l's config, pushed; a layer it holds as {class_name=, config=} */
static void push_config(lua_State *L, ld_layer *l) {
    lua_newtable(L);
    lua_pushstring(L, l->name);
    lua_setfield(L, -2, "name");
    lua_pushstring(L, l->policy.name);    /* Keras's dtype policy, by name */
    lua_setfield(L, -2, "dtype");
    if (l->frozen) {                      /* Keras's configs say trainable; ldist's when it is false */
        lua_pushboolean(L, 0);
        lua_setfield(L, -2, "trainable");
    }
    for (int i = 0; l->cls->params[i].name; i++) {
        if (holds_layer(l->cls, i) && l->inner[0]) {
            lua_createtable(L, 0, 2);
            lua_pushstring(L, l->inner[0]->cls->class_name);
            lua_setfield(L, -2, "class_name");
            push_config(L, l->inner[0]);
            lua_setfield(L, -2, "config");
        } else push_param(L, l, i);
        lua_setfield(L, -2, l->cls->params[i].name);
    }
    lb_layer_push_weight_options(L, l, -1);
}
static int layer_get_config(lua_State *L) {
    push_config(L, check_layer(L, 1));
    return 1;
}

/* nn.layer_from_config{class_name=, config={...}} (Keras's layers.deserialize) */
static int nn_layer_from_config(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_getfield(L, 1, "class_name");
    const char *cn = lua_tostring(L, -1);
    if (!cn) return luaL_argerror(L, 1, "class_name missing");
    if (!ld_layer_class_find(cn)) return luaL_error(L, "unknown layer class '%s'", cn);
    if (lua_getfield(L, 1, "config") != LUA_TTABLE) return luaL_argerror(L, 1, "config missing");
    push_layer_from_config(L, 1);
    return 1;
}

/* nn._policy([name [, set]]) -> name, compute dtype: the policy of that name
   (checked: an unknown name raises, naming the valid ones), made the global
   one when set is true; without a name, the global policy
   (mixed_precision.Policy / set_global_policy / global_policy, lua/keras/mixed_precision.lua) */
static int nn_policy(lua_State *L) {
    ld_policy p = ld_policy_global();
    if (!lua_isnoneornil(L, 1) && ld_policy_from_name(luaL_checkstring(L, 1), &p)) return luaL_error(L, "%s", ld_error());
    if (lua_toboolean(L, 2)) ld_policy_set_global(&p);
    lua_pushstring(L, p.name);
    lua_pushstring(L, ld_dtype_name(p.compute));
    return 2;
}

/* ================================================================ layer methods */
/* {training = b} or b; LD_TRAINING_DEFAULT when absent or nil (each layer's
   own default: Keras's training=None) */
static void read_training(lua_State *L, int idx, int *training) {
    *training = LD_TRAINING_DEFAULT;
    if (lua_istable(L, idx)) {
        lua_getfield(L, idx, "training");
        if (!lua_isnil(L, -1)) *training = lua_toboolean(L, -1);
        lua_pop(L, 1);
    } else if (lua_isboolean(L, idx)) *training = lua_toboolean(L, idx);
}

/* layer(x, {training=}) and model(x, {training=}): x converted and anchored,
   the forward run, its result pushed (or its error raised) */
static int call_forward(lua_State *L, void *obj, ld_tensor *(*fwd)(void *, ld_tensor *, int)) {
    ld_tensor *x = lb_to_tensor(L, 2, LD_F32);
    lb_push_tensor(L, x, 0);
    int training;
    read_training(L, 3, &training);
    ld_tensor *y = fwd(obj, x, training);
    if (!y) return luaL_error(L, "%s", ld_error());
    lb_push_tensor(L, y, 0);
    return 1;
}

static ld_tensor *model_fwd(void *m, ld_tensor *x, int t) { return ld_model_forward(m, x, t); }

/* whether the value at idx is a symbolic tensor of the Functional API (nn.Input
   and what layers called on one give: its metatable has __symbolic), or a
   list starting with one */
static int is_symbolic(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    if (!lua_istable(L, idx)) return 0;
    int sym = 0;
    if (lua_getmetatable(L, idx)) {
        sym = lua_getfield(L, -1, "__symbolic") != LUA_TNIL;
        lua_pop(L, 2);
        if (sym) return 1;
    }
    if (lua_geti(L, idx, 1) == LUA_TTABLE && lua_getmetatable(L, -1)) {
        sym = lua_getfield(L, -1, "__symbolic") != LUA_TNIL;
        lua_pop(L, 2);
    }
    lua_pop(L, 1);
    return sym;
}

/* layer(x, {training=}), layer({x1, x2, ...}) for layers of several inputs
   (Add, Concatenate, attention), and layer(symbolic) in the Functional API
   (nn._symbolic_call, lua/keras/models.lua). A tensor goes in as it is (an
   Embedding takes integer ids); other values become float32 tensors. */
static int layer_call(lua_State *L) {
    ld_layer *l = check_layer(L, 1);
    lua_settop(L, 3);
    if (is_symbolic(L, 2)) {
        lua_getfield(L, LUA_REGISTRYINDEX, "ldist.module");
        lua_getfield(L, -1, "nn");
        lua_getfield(L, -1, "_symbolic_call");
        int base = lua_gettop(L) - 1;
        lua_pushvalue(L, 1); lua_pushvalue(L, 2); lua_pushvalue(L, 3);
        lua_call(L, 3, LUA_MULTRET);   /* several symbolic outputs for a layer of several (return_state) */
        return lua_gettop(L) - base;
    }
    int training;
    read_training(L, 3, &training);
    ld_tensor *xs[LD_LAYER_MAX_INPUTS];
    int n = 1, list = 0;
    if (lua_type(L, 2) == LUA_TTABLE && l->cls->max_inputs > 1) {   /* {x1, x2, ...} */
        lua_geti(L, 2, 1);
        list = lb_test_tensor(L, -1) || lua_istable(L, -1);
        lua_pop(L, 1);
    }
    if (list) {
        lua_Integer k = luaL_len(L, 2);
        if (k > LD_LAYER_MAX_INPUTS) return luaL_error(L, "%s: at most %d inputs", l->name, LD_LAYER_MAX_INPUTS);
        n = (int)k;
        for (int i = 0; i < n; i++) {
            lua_geti(L, 2, i + 1);
            xs[i] = lb_to_tensor(L, -1, LD_F32);
            lua_pop(L, 1);
            lb_push_tensor(L, xs[i], 0);            /* anchored on the stack */
        }
    } else {
        xs[0] = lb_to_tensor(L, 2, LD_F32);
        lb_push_tensor(L, xs[0], 0);
    }
    if (lua_istable(L, 3) && lua_getfield(L, 3, "initial_state") != LUA_TNIL) {
        /* an RNN's initial_state = {h[, c]}: its inputs after the first */
        if (!l->cls->initial_states)
            return luaL_error(L, "%s: initial_state is an option of the recurrent layers (SimpleRNN, LSTM, GRU)", l->name);
        if (!lua_istable(L, -1) || lb_test_tensor(L, -1))
            return luaL_error(L, "%s: initial_state must be a list of tensors ({h, c} for an LSTM, {h} for the others)", l->name);
        int k = (int)luaL_len(L, -1), st = lua_gettop(L);
        if (k < 1 || n + k > l->cls->max_inputs)
            return luaL_error(L, "%s takes %d initial state%s ({%s}), got %d", l->name, l->cls->max_inputs - 1,
                              l->cls->max_inputs == 2 ? "" : "s", l->cls->max_inputs == 2 ? "h" : "h, c", k);
        for (int i = 1; i <= k; i++) {
            lua_geti(L, st, i);
            xs[n] = lb_to_tensor(L, -1, LD_F32);
            lua_pop(L, 1);
            lb_push_tensor(L, xs[n++], 0);
        }
    } else if (lua_istable(L, 3)) lua_pop(L, 1);
    ld_tensor *mask = NULL;
    if (lua_istable(L, 3) && lua_getfield(L, 3, "mask") != LUA_TNIL) {
        /* layer(x, {mask=m}), Keras's mask argument: the first input's mask
           (1 or true where a step counts), in place of the one it carries */
        ld_tensor *m = lb_to_tensor(L, -1, LD_F32);
        lb_push_tensor(L, m, 0);
        if (m->ndim < 1 || m->ndim > xs[0]->ndim || memcmp(m->shape, xs[0]->shape, sizeof(int64_t) * (size_t)m->ndim)) {
            char b1[64], b2[64];
            return luaL_error(L, "%s: mask of shape %s for inputs %s (it takes the inputs' leading axes: [batch, steps])",
                              l->name, ld_shape_str(m, b1, sizeof b1), ld_shape_str(xs[0], b2, sizeof b2));
        }
        if (!(mask = ld_mask_not_equal(m, 0, 0))) return luaL_error(L, "%s", ld_error());
        lb_push_tensor(L, mask, 0);   /* anchored */
    } else if (lua_istable(L, 3)) lua_pop(L, 1);
    int n_out = ld_layer_outputs(l);
    if (n_out > 1) {   /* several outputs (return_state): returned as several values, y, h, c = lstm(x) */
        ld_tensor *ys[LD_LAYER_MAX_OUTPUTS];
        int k = ld_layer_call_outputs(l, n, xs, training, mask, ys, LD_LAYER_MAX_OUTPUTS);
        if (k < 0) return luaL_error(L, "%s", ld_error());
        luaL_checkstack(L, k, "outputs");
        for (int i = 0; i < k; i++) lb_push_tensor(L, ys[i], 0);
        return k;
    }
    ld_tensor *y = ld_layer_call_masked(l, n, xs, training, mask);
    if (!y) return luaL_error(L, "%s", ld_error());
    lb_push_tensor(L, y, 0);
    return 1;
}

/* layer:_build_shapes({shape, ...}): build for inputs of these shapes (no
   batch axis), as a Functional model's symbolic call does; a built layer
   checks that the shapes are those it was built for */
static int layer_build_shapes(lua_State *L) {
    ld_layer *l = check_layer(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    ld_shape in[LD_LAYER_MAX_INPUTS];
    lua_Integer n = luaL_len(L, 2);
    if (n < 1 || n > LD_LAYER_MAX_INPUTS) return luaL_argerror(L, 2, "1 to 8 input shapes expected");
    for (int i = 0; i < n; i++) {
        lua_geti(L, 2, i + 1);
        luaL_checktype(L, -1, LUA_TTABLE);
        lua_Integer nd = luaL_len(L, -1);
        if (nd > LD_MAX_DIMS - 1) return luaL_argerror(L, 2, "too many dimensions");
        in[i].ndim = (int)nd;
        for (int d = 0; d < nd; d++) {
            lua_geti(L, -1, d + 1);
            in[i].d[d] = luaL_checkinteger(L, -1);
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    if (!l->built) {
        if (ld_layer_build_n(l, (int)n, in)) return lb_engine_error(L, 2);
        return 0;
    }
    int states = l->cls->initial_states;   /* an RNN: its initial states or not, at any call */
    if (states && ld_layer_check_states(l, (int)n, in)) return luaL_error(L, "%s", ld_error());
    if (n != l->n_in && !states)
        return luaL_error(L, "%s was built for %d input%s, called with %d", l->name, l->n_in, l->n_in == 1 ? "" : "s", (int)n);
    for (int i = 0; i < (states ? 1 : n); i++) {
        int ok = in[i].ndim == l->in[i].ndim;
        for (int d = 0; ok && d < in[i].ndim; d++)
            ok = in[i].d[d] == l->in[i].d[d] || ld_layer_axis_flexible(l->cls, d, in[i].ndim);
        if (!ok) {
            char a[LD_SHAPE_STR_MAX], b[LD_SHAPE_STR_MAX];
            return luaL_error(L, "%s was built for inputs [%s], called on [%s]", l->name,
                              ld_shape_fmt(l->in[i].ndim, l->in[i].d, a, sizeof a), ld_shape_fmt(in[i].ndim, in[i].d, b, sizeof b));
        }
    }
    return 0;
}

static void push_vars(lua_State *L, ld_tensor **v, int n) {
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lb_push_tensor(L, ld_tensor_retain(v[i]), 0);
        lua_rawseti(L, -2, i + 1);
    }
}

static void push_weights(lua_State *L, ld_layer *l, int which) {   /* which: 1 trainable, 0 not, -1 all */
    lua_newtable(L);
    int k = 0;
    for (int i = 0; i < l->n_vars; i++)
        if (which < 0 || ld_layer_var_trainable(l, i) == which) {
            lb_push_tensor(L, ld_tensor_retain(l->vars[i]), 0);
            lua_rawseti(L, -2, ++k);
        }
}

static void push_shape(lua_State *L, const ld_shape *s) {
    lua_createtable(L, s->ndim, 0);
    for (int i = 0; i < s->ndim; i++) { lua_pushinteger(L, s->d[i]); lua_rawseti(L, -2, i + 1); }
}

static int layer_index(lua_State *L) {
    ld_layer *l = check_layer(L, 1);
    const char *k = luaL_checkstring(L, 2);
    lua_pushvalue(L, 2);                               /* methods */
    if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL) return 1;
    lua_pop(L, 1);
    if (!strcmp(k, "name")) { lua_pushstring(L, l->name); return 1; }
    if (!strcmp(k, "class_name")) { lua_pushstring(L, l->cls->class_name); return 1; }
    if (!strcmp(k, "kind")) { lua_pushstring(L, l->cls->kind); return 1; }
    if (!strcmp(k, "built")) { lua_pushboolean(L, l->built); return 1; }
    /* Keras's: dtype and variable_dtype are the variables' (float32), compute_dtype what it computes in */
    if (!strcmp(k, "dtype") || !strcmp(k, "variable_dtype")) { lua_pushliteral(L, "float32"); return 1; }
    if (!strcmp(k, "compute_dtype")) { lua_pushstring(L, ld_dtype_name(l->policy.compute)); return 1; }
    if (!strcmp(k, "dtype_policy")) {          /* a mixed_precision.Policy */
        lua_getfield(L, LUA_REGISTRYINDEX, "ldist.module");
        lua_getfield(L, -1, "mixed_precision");
        lua_getfield(L, -1, "Policy");
        lua_pushstring(L, l->policy.name);
        lua_call(L, 1, 1);
        return 1;
    }
    /* shapes without the batch axis, as Keras's (minus None); a list of them for several inputs */
    if (!strcmp(k, "input_shape") && l->built) {
        if (l->n_in == 1) { push_shape(L, &l->in[0]); return 1; }
        lua_createtable(L, l->n_in, 0);
        for (int i = 0; i < l->n_in; i++) { push_shape(L, &l->in[i]); lua_rawseti(L, -2, i + 1); }
        return 1;
    }
    if (!strcmp(k, "output_shape") && l->built) {   /* a list of them for several outputs (return_state) */
        if (l->n_out == 1) { push_shape(L, &l->out); return 1; }
        lua_createtable(L, l->n_out, 0);
        for (int i = 0; i < l->n_out; i++) { push_shape(L, i ? &l->outs[i - 1] : &l->out); lua_rawseti(L, -2, i + 1); }
        return 1;
    }
    if (!strcmp(k, "n_outputs")) { lua_pushinteger(L, ld_layer_outputs(l)); return 1; }
    if (!strcmp(k, "trainable_variables") || !strcmp(k, "trainable_weights")) { push_weights(L, l, 1); return 1; }
    if (!strcmp(k, "non_trainable_variables") || !strcmp(k, "non_trainable_weights")) { push_weights(L, l, 0); return 1; }
    if (!strcmp(k, "weights") || !strcmp(k, "variables")) { push_weights(L, l, -1); return 1; }
    if (!strcmp(k, "trainable")) { lua_pushboolean(L, !l->frozen); return 1; }
    int pi = ld_layer_param_index(l->cls, k);
    if (pi >= 0 && holds_layer(l->cls, pi) && lua_getiuservalue(L, 1, 1) != LUA_TNIL) return 1;   /* td.layer */
    if (pi >= 0) { push_param(L, l, pi); return 1; }
    if (lb_layer_get_weight_option(L, l, k)) return 1;
    /* a variable by its name in the layer: kernel, bias, gamma, moving_mean, embeddings, ... */
    size_t nl = strlen(l->name);
    for (int i = 0; i < l->n_vars; i++) {
        const char *vn = l->vars[i]->name;
        if (vn && !strncmp(vn, l->name, nl) && vn[nl] == '/' && !strcmp(vn + nl + 1, k)) {
            lb_push_tensor(L, ld_tensor_retain(l->vars[i]), 0);
            return 1;
        }
    }
    return 0;
}

/* layer.trainable = false (Keras's): the only field a layer takes after it is
   made; anything else names what can be set */
static int layer_newindex(lua_State *L) {
    ld_layer *l = check_layer(L, 1);
    const char *k = lua_tostring(L, 2);
    if (k && !strcmp(k, "trainable")) {
        if (!lua_isboolean(L, 3)) return luaL_error(L, "layer '%s': trainable must be true or false, got %s", l->name,
                                                    luaL_typename(L, 3));
        ld_layer_set_trainable(l, lua_toboolean(L, 3));
        return 0;
    }
    return luaL_error(L, "layer '%s': cannot set '%s' (a layer's options are given when it is made; "
                         "trainable is the one field that can be set)", l->name, k ? k : luaL_typename(L, 2));
}

/* layer:count_params() (Keras's): its weights' elements */
static int layer_count_params(lua_State *L) {
    ld_layer *l = check_layer(L, 1);
    if (!l->built) return luaL_error(L, "layer '%s' is not built yet: its weights are made on its first call", l->name);
    lua_pushinteger(L, ld_layer_param_count(l));
    return 1;
}

static int layer_tostring(lua_State *L) {
    ld_layer *l = check_layer(L, 1);
    lua_pushfstring(L, "<%s layer '%s'%s>", l->cls->class_name, l->name, l->built ? "" : " (not built)");
    return 1;
}

static int layer_gc(lua_State *L) {
    ld_layer **p = luaL_checkudata(L, 1, LAYER_MT);
    ld_layer_release(*p);
    *p = NULL;
    return 0;
}

/* ================================================================ Sequential */
/* the value at vi put into the list on top of the stack, last or first */
static void list_insert(lua_State *L, int vi, int first) {
    lua_Integer n = luaL_len(L, -1);
    if (first) for (lua_Integer k = n; k >= 1; k--) { lua_geti(L, -1, k); lua_rawseti(L, -2, k + 1); }
    lua_pushvalue(L, vi);
    lua_rawseti(L, -2, first ? 1 : n + 1);
}

static void add_member(lua_State *L, int st, int vi, int first);
static void relist(lua_State *L, int mi, int depth);
/* layer li joins model mi: last among its layers, or first (a model's own
   weights, which Keras 3 lists before its sublayers') */
static int add_layer_at(lua_State *L, int model_idx, int layer_idx, int first) {
    model_idx = lua_absindex(L, model_idx);
    layer_idx = lua_absindex(L, layer_idx);
    ld_model *m = check_model(L, model_idx);
    ld_layer *l = check_layer(L, layer_idx);
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i] == l) return luaL_argerror(L, layer_idx, "this layer is already in the model");
    if (ld_model_add(m, l)) return lb_engine_error(L, layer_idx);
    if (first) {
        memmove(m->layers + 1, m->layers, sizeof *m->layers * (size_t)(m->n_layers - 1));
        m->layers[0] = l;
    }
    lua_getiuservalue(L, model_idx, 1);
    lua_getfield(L, -1, "layers");
    list_insert(L, layer_idx, first);
    lua_pop(L, 1);
    add_member(L, lua_gettop(L), layer_idx, first);
    lua_pop(L, 1);
    return 0;
}
static int model_add_layer(lua_State *L, int model_idx, int layer_idx) { return add_layer_at(L, model_idx, layer_idx, 0); }

/* ---- models in models (Keras's model as a layer) ----
   state._members lists what a model holds directly, in order: its layers and
   the models it contains (a Sequential's items, a subclass's fields, a graph's
   nodes). A nested model may make its weights later (at its first call, or
   in its build), so the model's flat list of layers (m->layers and
   state.layers: what training, saving and the strategies read) is made again
   from the members after each call when it has a model among them
   (relist): a member layer, then each member model's own list, in order,
   each layer once. */
static void add_member(lua_State *L, int st, int vi, int first) {
    vi = lua_absindex(L, vi);
    if (lua_getfield(L, st, "_members") != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_setfield(L, st, "_members");
    }
    lua_Integer n = luaL_len(L, -1);
    for (lua_Integer k = 1; k <= n; k++) {
        lua_geti(L, -1, k);
        int same = lua_rawequal(L, -1, vi);
        lua_pop(L, 1);
        if (same) { lua_pop(L, 1); return; }
    }
    list_insert(L, vi, first);
    lua_pop(L, 1);
}

/* the layer on top of the stack appended to list flat unless table seen has it */
static void flat_add(lua_State *L, int flat, int seen, lua_Integer *k) {
    lua_pushvalue(L, -1);
    int had = lua_rawget(L, seen) != LUA_TNIL;
    lua_pop(L, 1);
    if (had) return;
    lua_pushvalue(L, -1); lua_pushboolean(L, 1); lua_rawset(L, seen);
    lua_pushvalue(L, -1); lua_rawseti(L, flat, ++*k);
}

static void relist(lua_State *L, int mi, int depth) {
    mi = lua_absindex(L, mi);
    ld_model *m = check_model(L, mi);
    int top = lua_gettop(L);
    lua_getiuservalue(L, mi, 1);
    int st = lua_gettop(L);
    if (depth > 8 || lua_getfield(L, st, "_nested") != LUA_TBOOLEAN || lua_getfield(L, st, "_members") != LUA_TTABLE) {
        lua_settop(L, top);
        return;
    }
    int mem = lua_gettop(L);
    /* nothing new (the usual case, at every step): as many layers as the members hold */
    lua_Integer count = 0, nm = luaL_len(L, mem);
    for (lua_Integer i = 1; i <= nm; i++) {
        lua_geti(L, mem, i);
        if (luaL_testudata(L, -1, MODEL_MT)) { relist(L, -1, depth + 1); count += check_model(L, -1)->n_layers; }
        else count++;
        lua_pop(L, 1);
    }
    if (count == m->n_layers) { lua_settop(L, top); return; }
    lua_newtable(L);   /* the flat list */
    int flat = lua_gettop(L);
    lua_newtable(L);   /* seen */
    int seen = lua_gettop(L);
    lua_Integer n = luaL_len(L, mem), k = 0;
    for (lua_Integer i = 1; i <= n; i++) {
        lua_geti(L, mem, i);
        int item = lua_gettop(L);
        if (luaL_testudata(L, item, MODEL_MT)) {   /* its list, relisted by the count above */
            lua_getiuservalue(L, item, 1);
            lua_getfield(L, -1, "layers");
            lua_Integer q = luaL_len(L, -1);
            for (lua_Integer j = 1; j <= q; j++) {
                lua_geti(L, -1, j);
                flat_add(L, flat, seen, &k);
                lua_pop(L, 1);
            }
        } else flat_add(L, flat, seen, &k);
        lua_settop(L, seen);
    }
    ld_layer **nl = malloc(sizeof *nl * (size_t)(k ? k : 1));
    if (!nl) { lua_settop(L, top); luaL_error(L, "out of memory"); }
    for (lua_Integer i = 1; i <= k; i++) {
        lua_geti(L, flat, i);
        nl[i - 1] = ld_layer_retain(check_layer(L, -1));
        lua_pop(L, 1);
    }
    for (int i = 0; i < m->n_layers; i++) ld_layer_release(m->layers[i]);
    free(m->layers);
    m->layers = nl;
    m->n_layers = m->cap_layers = (int)k;
    lua_pushvalue(L, flat);
    lua_setfield(L, st, "layers");
    lua_settop(L, top);
}

/* ---- a model builds its variables under the strategy it was created in ----
   distribute._on_model_created (lua/distribute/protocol.lua) stores the devices
   that strategy mirrors variables on as the model's _variable_devices; the
   first call or build places the variables there wherever it happens (inside
   the scope or not), as Keras builds under model.distribute_strategy. */
static int model_is_built(const ld_model *m) {
    for (int i = 0; i < m->n_layers; i++) if (!m->layers[i]->built) return 0;
    return m->n_layers > 0;
}

/* Variables made from now on go where the model's strategy mirrors them;
   returns 1 when that placement was set (undo it with unplace). */
static int place(lua_State *L, int mi) {
    lua_getiuservalue(L, mi, 1);
    lua_getfield(L, -1, "_variable_devices");
    if (!lua_istable(L, -1)) { lua_pop(L, 2); return 0; }
    ld_device *devs[LD_MAX_LOGICAL];
    int n = lb_check_devices(L, lua_gettop(L), devs);
    lua_pop(L, 2);
    if (ld_mirror_set_devices(n, devs)) lb_engine_error(L, 0);
    return 1;
}
static void unplace(lua_State *L) { lb_call_hook(L, "distribute", "_place_variables", 0); }   /* the open scope's */

/* The model's forward in Lua, pushed when it has one: a Functional model's
   graph or a subclass's call(self, x, training) (lua/keras/models.lua). */
static int push_lua_call(lua_State *L, int mi) {
    lua_getiuservalue(L, mi, 1);
    if (lua_getfield(L, -1, "call") == LUA_TFUNCTION) { lua_remove(L, -2); return 1; }
    lua_pop(L, 1);
    if (lua_getfield(L, -1, "_class") == LUA_TTABLE) {
        if (lua_getfield(L, -1, "call") == LUA_TFUNCTION) { lua_remove(L, -2); lua_remove(L, -2); return 1; }
        lua_pop(L, 1);
    }
    lua_pop(L, 2);
    return 0;
}

/* where the model computes: its variables' device (this replica's copy), or
   before they exist the replica's device or the first of its placement */
static ld_device *model_device(lua_State *L, int mi, ld_model *m) {
    ld_device *built = ld_model_device(m);
    if (built) return built;
    const ld_replica_ctx *c = ld_replica_get();
    if (c && c->device) return c->device;
    ld_device *dev = NULL;
    lua_getiuservalue(L, mi, 1);
    if (lua_getfield(L, -1, "_variable_devices") == LUA_TTABLE) {
        ld_device *devs[LD_MAX_LOGICAL];
        if (lb_check_devices(L, lua_gettop(L), devs) > 0) dev = devs[0];
    }
    lua_pop(L, 2);
    return dev;
}

/* the value at xi as the model's input, pushed: a tensor (moved to dev), or
   a list of them for a model of several inputs */
static void push_input(lua_State *L, int xi, ld_device *dev) {
    if (lua_type(L, xi) == LUA_TTABLE) {
        lua_geti(L, xi, 1);
        int list = lb_test_tensor(L, -1) != NULL;
        lua_pop(L, 1);
        if (list) {
            lua_Integer n = luaL_len(L, xi);
            lua_createtable(L, (int)n, 0);
            for (lua_Integer i = 1; i <= n; i++) {
                lua_geti(L, xi, i);
                push_input(L, lua_gettop(L), dev);
                lua_rawseti(L, -3, i);
                lua_pop(L, 1);
            }
            return;
        }
    }
    ld_tensor *x = lb_test_tensor(L, xi);
    if (!x) { lb_push_tensor(L, lb_to_tensor(L, xi, LD_F32), 0); x = lb_test_tensor(L, -1); lua_replace(L, xi); }
    if (dev && x->storage->device != dev) {
        ld_tensor *moved = ld_to_device(x, dev);
        if (!moved) lb_engine_error(L, xi);
        lb_push_tensor(L, moved, 0);
    } else lua_pushvalue(L, xi);
}

/* Tensors the model's call makes (tensor.arange, ones, new, ...) go where
   the model runs, as those made in strategy:run go to the replica's device
   (tensor.c's default_device reads the replica context): a call outside any
   replica, on a model whose variables live on one device other than cpu:0
   (OneDeviceStrategy("cpu:1"), a GPU), runs in a one-replica context on that
   device. Returns 1 when it entered one (leave it with ld_replica_set(NULL)).
   Mirrored variables called from the cross-replica context keep that context:
   a replica context there would write only one copy of them. */
static int enter_model_replica(ld_model *m, ld_device *dev) {
    if (!dev || ld_replica_get() || dev == ld_device_cpu()) return 0;
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i]->n_vars) { if (ld_mirror_count(m->layers[i]->vars[0]) > 1) return 0; break; }
    ld_replica_set(&(ld_replica_ctx){0, 1, 0, dev, 0});
    return 1;
}

/* Run the Lua forward (pushed by push_lua_call, below the call's place on
   the stack) on the input at xi, protected: LUA_OK with the result pushed,
   or an error status with the message pushed. A model not built yet builds
   under its strategy's placement. */
static int lua_forward_p(lua_State *L, int mi, ld_model *m, int xi, int training) {
    ld_tensor *x0 = lb_test_tensor(L, xi);
    if (!model_is_built(m) && x0 && x0->ndim >= 1) {   /* the shape it builds for (a saved model builds so again) */
        lua_getiuservalue(L, mi, 1);
        lua_createtable(L, x0->ndim - 1, 0);
        for (int i = 1; i < x0->ndim; i++) { lua_pushinteger(L, x0->shape[i]); lua_rawseti(L, -2, i); }
        lua_setfield(L, -2, "_build_input_shape");
        lua_pop(L, 1);
    }
    int placed = !model_is_built(m) && place(L, mi);
    ld_device *dev = model_device(L, mi, m);
    int own = enter_model_replica(m, dev);
    lua_pushvalue(L, mi);
    push_input(L, xi, dev);
    if (training < 0) lua_pushnil(L);   /* call(self, x, training): nil when the caller did not say, as Keras's None */
    else lua_pushboolean(L, training);
    int st = lb_pcall_kept(L, 3, 1);
    if (own) ld_replica_set(NULL);
    if (placed) unplace(L);
    if (st == LUA_OK) relist(L, mi, 0);   /* models in it may have made their weights in this call */
    if (st == LUA_OK && !lb_test_tensor(L, -1) && !lua_istable(L, -1)) {
        lua_pop(L, 1);
        lua_pushfstring(L, "model '%s': call must return a tensor (or a list of them)", m->name);
        st = LUA_ERRRUN;
    }
    return st;
}

static int build_placed(lua_State *L, int mi, ld_model *m, int ndim, const int64_t *shape) {
    if (model_is_built(m)) return LD_OK;
    if (push_lua_call(L, mi)) {          /* a subclass builds by running once on zeros of one row */
        int64_t s[LD_MAX_DIMS];
        s[0] = 1;
        memcpy(s + 1, shape, (size_t)ndim * sizeof *s);
        ld_tensor *z = ld_tensor_zeros(LD_F32, ndim + 1, s, NULL);
        if (!z) return ld_error_status();
        lb_push_tensor(L, z, 0);
        int xi = lua_gettop(L);
        lua_pushvalue(L, xi - 1);
        int st = lua_forward_p(L, mi, m, xi, 0);
        if (st != LUA_OK) lua_error(L);
        lua_pop(L, 3);
        return LD_OK;
    }
    int placed = place(L, mi);
    int st = ndim >= 0 ? ld_model_build(m, ndim, shape) : LD_OK;
    if (placed) unplace(L);
    return st;
}

/* build for an input x (batch axis first) */
static void build_for(lua_State *L, int mi, ld_model *m, const ld_tensor *x) {
    if (model_is_built(m) || x->ndim < 1) return;
    if (build_placed(L, mi, m, x->ndim - 1, x->shape + 1)) {
        char b[64];   /* model(x), predict, fit: x is the caller's argument, whatever its number here */
        luaL_error(L, "%s; the input's shape is %s (its first axis is the batch)", ld_error(),
                   ld_shape_str(x, b, sizeof b));
    }
}

/* a new empty model pushed (its state: the layers' userdata, and _kind =
   kind unless NULL, a Sequential); returns its stack index */
static int push_new_model(lua_State *L, const char *name, const char *kind) {
    ld_model **p = lua_newuserdatauv(L, sizeof *p, 1);
    *p = NULL;
    luaL_setmetatable(L, MODEL_MT);
    int mi = lua_gettop(L);
    lua_createtable(L, 0, 4);
    lua_newtable(L);
    lua_setfield(L, -2, "layers");
    if (kind) { lua_pushstring(L, kind); lua_setfield(L, -2, "_kind"); }
    lua_setiuservalue(L, mi, 1);
    *p = ld_model_new(name);
    if (!*p) lb_engine_error(L, 0);
    return mi;
}

/* nn.Input{shape=} at idx (keras/models.lua's symbolic tensor: its metatable
   says __symbolic): its shape into shape[], the number of dimensions, or -1 */
static int symbolic_input_shape(lua_State *L, int idx, int64_t *shape) {
    idx = lua_absindex(L, idx);
    if (!lua_istable(L, idx) || !lua_getmetatable(L, idx)) return -1;
    int sym = lua_getfield(L, -1, "__symbolic") == LUA_TBOOLEAN && lua_toboolean(L, -1);
    lua_pop(L, 2);
    if (!sym || lua_getfield(L, idx, "shape") != LUA_TTABLE) { if (sym) lua_pop(L, 1); return -1; }
    int n = (int)luaL_len(L, -1);
    if (n > LD_MAX_DIMS - 1) luaL_error(L, "bad argument #1 to 'Sequential' (the input has too many dimensions)");
    for (int i = 0; i < n; i++) { lua_geti(L, -1, i + 1); shape[i] = lua_tointeger(L, -1); lua_pop(L, 1); }
    lua_pop(L, 1);
    return n;
}

/* nn.Sequential{[nn.Input{shape=}], layer, layer, ..., name=}: with an input
   first (Keras's Sequential([keras.Input(shape), ...])) the model is built now */
/* item vi (a layer, or a model: Keras's model as a layer) appended to
   Sequential mi. A model's layers join mi's (track), and mi then runs in
   Lua over its items (nn._sequential_call, lua/keras/models.lua: the C
   forward runs layers only), which state._items lists once there is one. */
static void track(lua_State *L, int mi, int vi, int depth);
static void sequential_append(lua_State *L, int mi, int vi, lua_Integer i) {
    mi = lua_absindex(L, mi);
    vi = lua_absindex(L, vi);
    int model = luaL_testudata(L, vi, MODEL_MT) != NULL;
    if (!model && !luaL_testudata(L, vi, LAYER_MT))
        luaL_error(L, "bad argument #1 to 'Sequential' (item %d is a %s, not a layer or a model)", (int)i, luaL_typename(L, vi));
    if (model && lua_rawequal(L, mi, vi)) luaL_error(L, "a model cannot contain itself");
    lua_getiuservalue(L, mi, 1);
    int st = lua_gettop(L);
    if (lua_getfield(L, st, "_items") != LUA_TTABLE && model) {   /* the first model: the layers so far become items */
        lua_pop(L, 1);
        lua_getfield(L, st, "layers");
        lua_Integer n = luaL_len(L, -1);
        lua_createtable(L, (int)n + 1, 0);
        for (lua_Integer k = 1; k <= n; k++) { lua_geti(L, -2, k); lua_rawseti(L, -2, k); }
        lua_remove(L, -2);
        lua_pushvalue(L, -1);
        lua_setfield(L, st, "_items");
        lua_getfield(L, LUA_REGISTRYINDEX, "ldist.module");
        lua_getfield(L, -1, "nn");
        lua_getfield(L, -1, "_sequential_call");
        lua_setfield(L, st, "call");
        lua_pop(L, 2);
    }
    if (model) track(L, mi, vi, 0);
    else model_add_layer(L, mi, vi);
    if (lua_istable(L, -1)) { lua_pushvalue(L, vi); lua_rawseti(L, -2, luaL_len(L, -2) + 1); }
    lua_settop(L, st - 1);
}

static int nn_sequential(lua_State *L) {
    const char *name = NULL;
    int in_n = -1;
    int64_t in_shape[LD_MAX_DIMS];
    if (lua_istable(L, 1)) { lua_getfield(L, 1, "name"); name = lua_tostring(L, -1); lua_pop(L, 1); }
    int mi = push_new_model(L, name, NULL);
    if (lua_istable(L, 1)) {
        lua_Integer n = luaL_len(L, 1);
        for (lua_Integer i = 1; i <= n; i++) {
            lua_geti(L, 1, i);
            if (i == 1 && (in_n = symbolic_input_shape(L, -1, in_shape)) >= 0) { lua_pop(L, 1); continue; }
            sequential_append(L, mi, -1, i);
            lua_pop(L, 1);
        }
    }
    lua_settop(L, mi);
    lua_pushvalue(L, mi);
    lb_call_hook(L, "distribute", "_on_model_created", 1);
    lua_settop(L, mi);
    if (in_n >= 0 && build_placed(L, mi, check_model(L, mi), in_n, in_shape)) return luaL_error(L, "%s", ld_error());
    return 1;
}

/* nn._is_model(v): a model of any kind (Sequential, Functional, a subclass) */
static int nn_is_model(lua_State *L) { lua_pushboolean(L, luaL_testudata(L, 1, MODEL_MT) != NULL); return 1; }

static int model_add(lua_State *L) {
    check_model(L, 1);
    lua_getiuservalue(L, 1, 1);
    int seq = lua_getfield(L, -1, "_kind") == LUA_TNIL;   /* Sequential: a model may be added too */
    lua_pop(L, 2);
    if (seq) sequential_append(L, 1, 2, (lua_Integer)check_model(L, 1)->n_layers + 1);
    else model_add_layer(L, 1, 2);
    lua_settop(L, 1);
    return 1;
}

static int model_call(lua_State *L) {
    ld_model *m = check_model_live(L, 1, "model(x)");
    lua_settop(L, 3);
    if (is_symbolic(L, 2)) {   /* a model called in the Functional API: one node, as a layer's (Keras's) */
        lua_getfield(L, LUA_REGISTRYINDEX, "ldist.module");
        lua_getfield(L, -1, "nn");
        lua_getfield(L, -1, "_symbolic_call");
        int base = lua_gettop(L) - 1;
        lua_pushvalue(L, 1); lua_pushvalue(L, 2); lua_pushvalue(L, 3);
        lua_call(L, 3, LUA_MULTRET);
        return lua_gettop(L) - base;
    }
    if (push_lua_call(L, 1)) {
        int training;
        read_training(L, 3, &training);
        if (lua_forward_p(L, 1, m, 2, training) != LUA_OK) return lua_error(L);
        return 1;
    }
    ld_tensor *x = lb_test_tensor(L, 2);
    if (x) build_for(L, 1, m, x);
    return call_forward(L, m, model_fwd);
}

static int model_vars(lua_State *L, ld_model *m) {
    int n = ld_model_variables(m, NULL, 0);
    ld_tensor **v = lua_newuserdatauv(L, sizeof *v * (size_t)(n ? n : 1), 0);
    ld_model_variables(m, v, n);
    push_vars(L, v, n);
    lua_remove(L, -2);
    return 1;
}

/* model:build({28, 28}) : shape without the batch axis */
static int model_build(lua_State *L) {
    ld_model *m = check_model(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    int64_t s[LD_MAX_DIMS];
    int n = (int)luaL_len(L, 2);
    if (n > LD_MAX_DIMS - 1) return luaL_argerror(L, 2, "too many dimensions");
    for (int i = 0; i < n; i++) { lua_geti(L, 2, i + 1); s[i] = luaL_checkinteger(L, -1); lua_pop(L, 1); }
    if (build_placed(L, 1, m, n, s)) return luaL_error(L, "%s", ld_error());
    lua_settop(L, 1);
    return 1;
}

/* model:summary_text([width]): width defaults to 80 columns */
static int model_summary_text(lua_State *L) {
    ld_model *m = check_model(L, 1);
    lua_Integer width = luaL_optinteger(L, 2, 80);
    luaL_argcheck(L, width >= 40 && width <= 1000, 2, "width must be 40 to 1000 columns");
    char buf[16384];
    ld_model_summary(m, buf, sizeof buf, (int)width);
    lua_pushstring(L, buf);
    return 1;
}

static ld_loss *check_loss(lua_State *L, int i) { return luaL_checkudata(L, i, LOSS_MT); }

/* The forward and backward half of a step, shared by train_step and _grads:
   forward under a tape, loss, gradients of every trainable variable. Raises
   on failure. On return vars/grads point into a userdata left on the stack
   (grads are new references), and lv/pred are cut from their graphs. */
typedef struct {
    int n;
    ld_tensor **vars, **grads, *lv, *pred;
    int pred_idx;   /* a model of several outputs: its list of predictions, at this stack index (pred NULL) */
} step_result;

/* the step's loss plus the model's regularization losses (Keras's
   model.losses), on the tape; takes ownership of lv */
static ld_tensor *with_model_losses(ld_model *m, ld_tensor *lv) {
    ld_tensor *total = ld_model_add_losses(m, lv);
    ld_tensor_release(lv);
    return total;
}

/* the input of a Sequential model at xi (checked), or NULL for a model whose
   forward is in Lua (it takes a tensor or a list of them) */
static ld_tensor *lua_model_input(lua_State *L, int mi, int xi) {
    if (push_lua_call(L, mi)) { lua_pop(L, 1); return NULL; }
    return lb_check_tensor(L, xi);
}

/* The step's loss from compile's Lua loss (keras/training.lua: several outputs,
   loss_weights), called under the step's tape as loss(y, pred, w) with the
   Lua values at yi, the predictions (pred, or the list at pred_idx) and wi.
   Returns a new reference to the scalar it gives, or NULL with the error
   message pushed. */
static ld_tensor *lua_step_loss(lua_State *L, int li, int yi, ld_tensor *pred, int pred_idx, int wi) {
    lua_pushvalue(L, li);
    lua_pushvalue(L, yi);
    if (pred) lb_push_tensor(L, ld_tensor_retain(pred), 0);
    else lua_pushvalue(L, pred_idx);
    lua_pushvalue(L, wi);
    if (lb_pcall_kept(L, 3, 1) != LUA_OK) return NULL;
    ld_tensor *lv = lb_test_tensor(L, -1);
    if (!lv || lv->ndim != 0) {
        lua_pop(L, 1);
        lua_pushstring(L, "the compiled loss must return a scalar tensor");
        return NULL;
    }
    ld_tensor_retain(lv);
    lua_pop(L, 1);
    return lv;
}

/* x: the input of a Sequential model; NULL for a model whose forward is in
   Lua (push_lua_call), whose input (a tensor or a list) is at stack index xi.
   loss NULL: the loss is the Lua callable at stack index li, y and w the Lua
   values at yi and wi (lists for a model of several outputs). */
static void forward_backward(lua_State *L, ld_model *m, ld_tensor *x, int xi, ld_tensor *y, ld_loss *loss, int defer,
                             ld_tensor *w, double loss_factor, step_result *r) {
    enum { YI = 3, LI = 4, WI = 6 };   /* where train_step and _grads take y, the loss and w */
    ld_tape *tape = ld_tape_new(0);
    if (!tape) { lb_engine_error(L, 0); return; }
    ld_tape_push(tape);
    int was_phase = ld_trace_phase(LD_SPAN_FORWARD);   /* the trace's phases (ld_executor.h) */
    ld_tensor *pred = NULL;
    int pred_idx = 0;
    if (x) pred = ld_model_forward(m, x, 1);
    else {
        push_lua_call(L, 1);
        int st = lua_forward_p(L, 1, m, xi, 1);
        if (st == LUA_OK && !lb_test_tensor(L, -1) && loss) {
            lua_pop(L, 1);
            lua_pushfstring(L, "model '%s' has several outputs: compile it with a loss per output "
                            "(a list, or a table keyed by the output names)", m->name);
            st = LUA_ERRRUN;
        }
        if (st != LUA_OK) { ld_tape_pop(tape); ld_tape_free(tape); lua_error(L); return; }
        if (lb_test_tensor(L, -1)) {
            pred = ld_tensor_retain(lb_test_tensor(L, -1));
            lua_pop(L, 1);
        } else pred_idx = lua_gettop(L);   /* the list of outputs stays here */
    }
    ld_tensor *lv = NULL;
    /* the step's loss: weighted by w (sample_weight, or NULL), its masked positions left out */
    if (loss) lv = pred ? ld_loss_weighted(loss, y, pred, w) : NULL;
    else if (pred || pred_idx) {
        lv = lua_step_loss(L, LI, YI, pred, pred_idx, WI);
        if (!lv) { ld_tape_pop(tape); ld_tape_free(tape); ld_tensor_release(pred); lua_error(L); return; }
    }
    if (lv) lv = with_model_losses(m, lv);   /* + model.losses: Keras's training loss */
    /* a LossScaleOptimizer's scale (Keras's optimizer.scale_loss): the
       gradients are of the scaled loss, the loss reported is not */
    ld_tensor *lg = lv && loss_factor != 1.0 ? ld_mul_scalar(lv, (float)loss_factor) : lv;
    ld_tape_pop(tape);
    int n = ld_model_variables(m, NULL, 0), st = lv && lg ? LD_OK : ld_error_status();
    ld_tensor **vars = lua_newuserdatauv(L, sizeof *vars * (size_t)(n ? 2 * n : 1), 0);
    ld_tensor **grads = vars + n;
    if (!st) {
        ld_model_variables(m, vars, n);
        ld_trace_phase(LD_SPAN_BACKWARD);
        ld_defer_weight_grads(defer);
        st = ld_tape_gradient(tape, lg, n, vars, grads);
        ld_defer_weight_grads(0);
    }
    if (lg != lv) ld_tensor_release(lg);
    ld_tape_free(tape);
    ld_trace_phase(was_phase);
    if (st) { ld_tensor_release(lv); ld_tensor_release(pred); luaL_error(L, "%s", ld_error()); return; }
    /* the values without their graphs: callers only read them */
    if (lv->grad_fn) { ld_node_release(lv->grad_fn); lv->grad_fn = NULL; }
    if (pred && pred->grad_fn) { ld_node_release(pred->grad_fn); pred->grad_fn = NULL; }
    for (lua_Integer i = 1; pred_idx && i <= (lua_Integer)lua_rawlen(L, pred_idx); i++) {
        lua_rawgeti(L, pred_idx, i);
        ld_tensor *p = lb_test_tensor(L, -1);
        if (p && p->grad_fn) { ld_node_release(p->grad_fn); p->grad_fn = NULL; }
        lua_pop(L, 1);
    }
    *r = (step_result){n, vars, grads, lv, pred, pred_idx};
}

/* the step's predictions, pushed: a tensor, or the list of a model of several outputs */
static void push_pred(lua_State *L, const step_result *r) {
    if (r->pred) lb_push_tensor(L, r->pred, 0);
    else lua_pushvalue(L, r->pred_idx);
}

/* the loss at stack index 4: an ldist.Loss, or NULL for compile's Lua loss
   (a callable: a table or a function), which takes y as any Lua value */
static ld_loss *step_loss_arg(lua_State *L, ld_tensor **y) {
    int t = lua_type(L, 4);
    if ((t == LUA_TTABLE || t == LUA_TFUNCTION) && !luaL_testudata(L, 4, LOSS_MT)) { *y = NULL; return NULL; }
    *y = lb_check_tensor(L, 3);
    return check_loss(L, 4);
}

/* model:train_step(x, y, loss, optimizer) -> loss value, predictions
   One step in C: forward under a tape, loss, backward, update. */
static int model_train_step(lua_State *L) {
    ld_model *m = check_model_live(L, 1, "train_step");
    ld_tensor *x = lua_model_input(L, 1, 2), *y;
    ld_loss *loss = step_loss_arg(L, &y);
    ld_optimizer *opt = lb_check_optimizer(L, 5);
    ld_tensor *w = lua_isnoneornil(L, 6) || !loss ? NULL : lb_check_tensor(L, 6);
    lua_settop(L, 6);
    if (x) build_for(L, 1, m, x);
    step_result r;
    forward_backward(L, m, x, 2, y, loss, 0, w, ld_optimizer_loss_factor(opt), &r);
    double value = 0;
    int st = ld_tensor_item(r.lv, &value);
    if (!st) st = ld_optimizer_apply(opt, r.n, r.grads, r.vars);
    for (int i = 0; i < r.n; i++) ld_tensor_release(r.grads[i]);
    ld_tensor_release(r.lv);
    if (st) { ld_tensor_release(r.pred); return luaL_error(L, "%s", ld_error()); }
    lua_pushnumber(L, value);
    push_pred(L, &r);
    return 2;
}

/* model:_grads(x, y, loss [, defer [, w [, opt]]]) -> loss tensor, gradients (table), predictions
   The forward and backward half of a training step, for strategies that
   reduce gradients across replicas before applying them. Nothing here waits
   for the device: the values are queued on a logical device's executor.
   defer: dense kernels' gradients may be left as products for the
   collective to compute (ld_defer_weight_grads). opt: the optimizer that
   will apply them, whose loss scale (LossScaleOptimizer) scales the loss. */
static int model_grads(lua_State *L) {
    ld_model *m = check_model_live(L, 1, "gradients");
    ld_tensor *x = lua_model_input(L, 1, 2), *y;
    ld_loss *loss = step_loss_arg(L, &y);
    ld_tensor *w = lua_isnoneornil(L, 6) || !loss ? NULL : lb_check_tensor(L, 6);
    double factor = lua_isnoneornil(L, 7) ? 1.0 : ld_optimizer_loss_factor(lb_check_optimizer(L, 7));
    lua_settop(L, 6);
    if (x) build_for(L, 1, m, x);
    step_result r;
    forward_backward(L, m, x, 2, y, loss, lua_toboolean(L, 5), w, factor, &r);
    lb_push_tensor(L, r.lv, 0);
    lua_createtable(L, r.n, 0);
    for (int i = 0; i < r.n; i++) { lb_push_tensor(L, r.grads[i], 0); lua_rawseti(L, -2, i + 1); }
    push_pred(L, &r);
    return 3;
}

/* model:save_weights(path) / model:load_weights(path): safetensors keyed by variable name;
   model:save_weights(path, {dtype = "bfloat16"}) writes the float weights in
   that dtype (a half-precision checkpoint, as PyTorch's model.half() saves) */
static int model_save_weights(lua_State *L) {
    ld_model *m = check_model_live(L, 1, "save_weights");
    const char *path = luaL_checkstring(L, 2);
    int cast = 0;
    ld_dtype dt = LD_F32;
    if (!lua_isnoneornil(L, 3)) {
        luaL_checktype(L, 3, LUA_TTABLE);
        if (lua_getfield(L, 3, "dtype") != LUA_TNIL) {
            if (ld_dtype_from_name(luaL_checkstring(L, -1), &dt)) return lb_engine_error(L, 3);
            if (!ld_dtype_is_float(dt))
                return luaL_error(L, "save_weights: dtype must be float32, float16 or bfloat16, not %s", ld_dtype_name(dt));
            cast = 1;
        }
        lua_pop(L, 1);
    }
    int n = ld_model_variables(m, NULL, 0);
    if (n == 0) return luaL_error(L, "model has no weights yet (call it on data or model:build(shape) first)");
    ld_tensor **v = lua_newuserdatauv(L, sizeof *v * (size_t)n, 0);
    const char **names = lua_newuserdatauv(L, sizeof *names * (size_t)n, 0);
    ld_model_variables(m, v, n);
    for (int i = 0; i < n; i++) names[i] = lua_pushfstring(L, "%d/%s", i, v[i]->name ? v[i]->name : "var");
    for (int i = 0; cast && i < n; i++)
        if (ld_dtype_is_float(v[i]->dtype) && v[i]->dtype != dt) {
            ld_tensor *c = ld_cast(v[i], dt);
            lb_push_tensor(L, c, 1);   /* anchored on the stack until the file is written */
            v[i] = c;
        }
    const char *meta[] = {"format", "ldist", "model", m->name};
    if (ld_save_safetensors(path, n, names, v, 2, meta)) return lb_engine_error(L, 2);
    return 0;   /* Keras returns None: nothing to echo at the prompt */
}

/* load_weights' check of a file's header against the model, made before any
   tensor is allocated or read: one entry per variable, named "<index>/...",
   with the variable's shape and dtype. F32, F16 and BF16 entries load into
   any float variable on purpose (half-precision checkpoints are common); any
   other difference of dtype is refused. slot[i]: the entry for variable i. */
typedef struct { ld_tensor **v; int n; int *slot; } weights_check;

static int check_weights_file(void *ctx, const char *path, int n, const ld_safetensors_entry *e) {
    weights_check *w = ctx;
    if (n != w->n) return ld_fail(LD_ESHAPE, "'%s' holds %d tensors, the model has %d weights", path, n, w->n);
    for (int i = 0; i < n; i++) w->slot[i] = -1;
    for (int j = 0; j < n; j++) {
        char *end;
        long i = strtol(e[j].name, &end, 10);
        if (end == e[j].name || *end != '/' || i < 0 || i >= n)
            return ld_fail(LD_EFORMAT, "'%s': tensor '%s' is no weight of the model (names are \"<index>/<name>\", index 0 to %d)",
                           path, e[j].name, n - 1);
        if (w->slot[i] >= 0)
            return ld_fail(LD_EFORMAT, "'%s' holds two tensors for weight %ld: '%s' and '%s'", path, i, e[w->slot[i]].name, e[j].name);
        w->slot[i] = j;
    }
    for (int i = 0; i < n; i++) {            /* n distinct indices below n: every slot is filled */
        const ld_safetensors_entry *f = &e[w->slot[i]];
        ld_tensor *v = w->v[i];
        const char *vn = v->name ? v->name : "";
        int same = f->ndim == v->ndim;
        for (int d = 0; same && d < f->ndim; d++) same = f->shape[d] == v->shape[d];
        if (!same) {
            char b1[160], b2[64];
            size_t k = (size_t)snprintf(b1, sizeof b1, "[");
            for (int d = 0; d < f->ndim && k < sizeof b1; d++)
                k += (size_t)snprintf(b1 + k, sizeof b1 - k, d ? ", %lld" : "%lld", (long long)f->shape[d]);
            if (k < sizeof b1) snprintf(b1 + k, sizeof b1 - k, "]");
            return ld_fail(LD_ESHAPE, "weight %d (%s) has shape %s in '%s' but %s in the model", i, vn, b1, path,
                           ld_shape_str(v, b2, sizeof b2));
        }
        /* float weights take any float file dtype (a half checkpoint into a
           float32 model, or the other way), converted as astype does */
        int half = ld_dtype_is_float(v->dtype) && (!strcmp(f->dtype, "F16") || !strcmp(f->dtype, "BF16") ||
                                                   !strcmp(f->dtype, "F32"));
        const char *vd = ld_safetensors_dtype_name(v->dtype);
        if (!half && strcmp(f->dtype, vd ? vd : "?"))
            return ld_fail(LD_ETYPE, "weight %d (%s) is %s in '%s' but %s in the model (only F32, F16 and BF16 "
                           "convert into each other)", i, vn, f->dtype, path, ld_dtype_name(v->dtype));
    }
    return LD_OK;
}

static int model_load_weights(lua_State *L) {
    ld_model *m = check_model(L, 1);
    const char *path = luaL_checkstring(L, 2);
    int n = ld_model_variables(m, NULL, 0);
    if (n == 0) return luaL_error(L, "build the model before loading weights (call it on data or model:build(shape))");
    weights_check w = {lua_newuserdatauv(L, sizeof *w.v * (size_t)n, 0), n, lua_newuserdatauv(L, sizeof *w.slot * (size_t)n, 0)};
    ld_model_variables(m, w.v, n);
    ld_tensor_dict d = {0};
    if (ld_load_safetensors_checked(path, &d, NULL, NULL, check_weights_file, &w)) return lb_engine_error(L, 2);
    /* ld_variable_write: a mirrored variable gets the values on every replica's copy */
    char err[512] = "";
    for (int i = 0; i < n && !err[0]; i++)
        if (ld_variable_write(w.v[i], d.tensors[w.slot[i]]))
            snprintf(err, sizeof err, "weight %d (%s): %s", i, w.v[i]->name ? w.v[i]->name : "", ld_error());
    ld_tensor_dict_free(&d);
    if (err[0]) return luaL_error(L, "%s", err);
    /* every variable now holds the file's values: the model is whole again */
    lua_pushnil(L);
    lua_setfield(L, 1, "_lost");   /* model_newindex: clears every variable's mark too */
    return 0;   /* as save_weights: nothing to echo */
}

/* every weight (trainable or not: which = -1), the trainable ones (1) or the others (0) */
static int model_weights(lua_State *L, ld_model *m, int which) {
    int n = ld_model_weights(m, NULL, NULL, 0);
    ld_tensor **v = lua_newuserdatauv(L, (sizeof *v + 1) * (size_t)(n ? n : 1), 0);
    unsigned char *tr = (unsigned char *)(v + (n ? n : 1));
    ld_model_weights(m, v, tr, n);
    lua_newtable(L);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (which < 0 || tr[i] == which) { lb_push_tensor(L, ld_tensor_retain(v[i]), 0); lua_rawseti(L, -2, ++k); }
    lua_remove(L, -2);
    return 1;
}

/* model.losses: Keras's, the regularization terms of the model's layers
   (their activities' in the last call, their weights' now) */
static int model_losses(lua_State *L, ld_model *m) {
    int max = 0;
    for (int i = 0; i < m->n_layers; i++) max += m->layers[i]->n_vars + 1;
    ld_tensor **t = lua_newuserdatauv(L, sizeof *t * (size_t)(max ? max : 1), 0);
    int n = ld_model_losses(m, t, max);
    if (n < 0) return lb_engine_error(L, 1);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) { lb_push_tensor(L, t[i], 0); lua_rawseti(L, -2, i + 1); }
    return 1;
}

static void on_replica_device(lua_State *L, int st);
static int model_index(lua_State *L) {
    ld_model *m = check_model(L, 1);
    /* C methods first */
    lua_pushvalue(L, 2);
    lua_rawget(L, lua_upvalueindex(1));
    if (!lua_isnil(L, -1)) return 1;
    lua_pop(L, 1);
    if (lua_type(L, 2) == LUA_TSTRING) {
        const char *k = lua_tostring(L, 2);
        if (!strcmp(k, "trainable_variables") || !strcmp(k, "trainable_weights") || !strcmp(k, "weights") ||
            !strcmp(k, "variables") || !strcmp(k, "non_trainable_variables") || !strcmp(k, "non_trainable_weights")) {
            lua_pushfstring(L, "model.%s", k);
            check_model_live(L, 1, lua_tostring(L, -1));
            lua_pop(L, 1);
        }
        if (!strcmp(k, "trainable_variables") || !strcmp(k, "trainable_weights")) return model_vars(L, m);
        if (!strcmp(k, "weights") || !strcmp(k, "variables")) return model_weights(L, m, -1);
        if (!strcmp(k, "non_trainable_variables") || !strcmp(k, "non_trainable_weights")) return model_weights(L, m, 0);
        if (!strcmp(k, "name")) { lua_pushstring(L, m->name); return 1; }
        if (!strcmp(k, "built")) { lua_pushboolean(L, model_is_built(m)); return 1; }
        if (!strcmp(k, "losses")) return model_losses(L, m);
        if (!strcmp(k, "trainable")) {          /* true until model.trainable = false */
            lua_getiuservalue(L, 1, 1);
            lua_pushboolean(L, lua_getfield(L, -1, "trainable") == LUA_TNIL || lua_toboolean(L, -1));
            return 1;
        }
    }
    /* per-model state (compile's settings, history, a subclass's attributes) */
    lua_getiuservalue(L, 1, 1);
    lua_pushvalue(L, 2);
    lua_rawget(L, -2);
    if (!lua_isnil(L, -1)) {
        on_replica_device(L, lua_gettop(L) - 1);
        return 1;
    }
    lua_pop(L, 1);
    /* a subclass's methods (nn.Model:extend), which fall back to nn.Model's */
    if (lua_getfield(L, -1, "_class") == LUA_TTABLE) {
        lua_pushvalue(L, 2);
        lua_gettable(L, -2);
        return 1;
    }
    lua_pop(L, 2);
    /* methods added in Lua (nn.Model) */
    lua_pushvalue(L, 2);
    lua_rawget(L, lua_upvalueindex(2));
    return 1;
}

/* model:_track(layer | model | list of them): its layers join the model's
   (their variables are the model's); a layer already there is skipped (a
   shared layer) */
static void track(lua_State *L, int mi, int vi, int depth) {
    vi = lua_absindex(L, vi);
    if (depth > 8) return;
    ld_model *m = check_model(L, mi);
    ld_layer **lp = luaL_testudata(L, vi, LAYER_MT);
    if (lp) {
        for (int i = 0; i < m->n_layers; i++) if (m->layers[i] == *lp) return;
        model_add_layer(L, mi, vi);
        return;
    }
    if (luaL_testudata(L, vi, MODEL_MT)) {
        if (lua_rawequal(L, mi, vi)) return;
        lua_getiuservalue(L, mi, 1);
        add_member(L, lua_gettop(L), vi, 0);
        lua_pushboolean(L, 1);
        lua_setfield(L, -2, "_nested");
        lua_pop(L, 1);
        relist(L, mi, 0);
        return;
    }
    if (lua_type(L, vi) == LUA_TTABLE && !lua_getmetatable(L, vi)) {
        lua_Integer n = luaL_len(L, vi);
        for (lua_Integer i = 1; i <= n; i++) { lua_geti(L, vi, i); track(L, mi, -1, depth + 1); lua_pop(L, 1); }
    } else if (lua_type(L, vi) == LUA_TTABLE) lua_pop(L, 1);
}
static int model_track(lua_State *L) { check_model(L, 1); track(L, 1, 2, 0); lua_settop(L, 1); return 1; }

/* A subclassed model's own weights' holder (ld_layer_weights, named as the
   model), made at the first and kept in its state as _own_weights, among its
   layers: pushed */
static ld_layer *own_weights(lua_State *L, int mi) {
    mi = lua_absindex(L, mi);
    ld_model *m = check_model(L, mi);
    lua_getiuservalue(L, mi, 1);
    if (lua_getfield(L, -1, "_own_weights") == LUA_TUSERDATA) {
        lua_remove(L, -2);
        return check_layer(L, -1);
    }
    lua_pop(L, 1);
    ld_layer *l = ld_layer_new(&ld_layer_weights);
    if (!l) lb_engine_error(L, 0);
    ld_layer **p = lua_newuserdatauv(L, sizeof *p, 1);
    *p = l;
    luaL_setmetatable(L, LAYER_MT);
    if (ld_layer_set_name(l, m->name)) lb_engine_error(L, 0);
    l->built = 1;
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, "_own_weights");
    lua_remove(L, -2);
    add_layer_at(L, mi, -1, 1);   /* first among the model's layers and members (Keras 3's order) */
    return l;
}

/* model:add_weight{shape=, initializer=, trainable=true, name=, constraint=}
   (Keras's Layer.add_weight): a weight of the model's own, made now (in the
   model's strategy's placement), returned */
static int model_add_weight(lua_State *L) {
    ld_model *m = check_model_live(L, 1, "model:add_weight()");
    static const char *const keys[] = {"shape", "initializer", "trainable", "name", "constraint", "dtype", "regularizer", NULL};
    if (lua_isnoneornil(L, 2)) lua_newtable(L), lua_replace(L, 2);
    luaL_checktype(L, 2, LUA_TTABLE);
    lb_check_options(L, 2, "add_weight", keys);
    int64_t shape[LD_MAX_DIMS];
    int nd = 0;
    if (lua_getfield(L, 2, "shape") == LUA_TNUMBER) { shape[0] = luaL_checkinteger(L, -1); nd = 1; }
    else if (lua_istable(L, -1)) {
        lua_Integer n = luaL_len(L, -1);
        if (n > LD_MAX_DIMS) return luaL_error(L, "add_weight: shape has %d dimensions, at most %d", (int)n, LD_MAX_DIMS);
        for (lua_Integer i = 1; i <= n; i++) {
            lua_geti(L, -1, i);
            int ok;
            shape[nd++] = lua_tointegerx(L, -1, &ok);
            if (!ok || shape[nd - 1] < 0) return luaL_error(L, "add_weight: shape entries must be sizes >= 0");
            lua_pop(L, 1);
        }
    } else if (!lua_isnil(L, -1)) return luaL_error(L, "add_weight: shape must be a list of sizes, got %s", luaL_typename(L, -1));
    lua_pop(L, 1);
    if (lua_getfield(L, 2, "dtype") != LUA_TNIL && (!lua_isstring(L, -1) || strcmp(lua_tostring(L, -1), "float32")))
        return luaL_error(L, "add_weight: dtype '%s': weights are float32 (a mixed policy computes in half from them)",
                          luaL_tolstring(L, -1, NULL));
    if (lua_getfield(L, 2, "regularizer") != LUA_TNIL)
        return luaL_error(L, "add_weight: regularizer= is not supported on a model's own weights; add its penalty to "
                          "the loss, or use a layer's kernel_regularizer");
    lua_pop(L, 2);
    ld_initializer init;
    if (lua_getfield(L, 2, "initializer") == LUA_TNIL) ld_initializer_named("glorot_uniform", &init);   /* Keras's default */
    else lb_read_initializer(L, -1, &init, "add_weight");
    lua_pop(L, 1);
    int trainable = lua_getfield(L, 2, "trainable") == LUA_TNIL || lua_toboolean(L, -1);
    lua_pop(L, 1);
    char name[48];
    lua_getfield(L, 2, "name");
    ld_layer *l = own_weights(L, 1);
    int holder = lua_gettop(L);
    if (lua_isstring(L, -2)) snprintf(name, sizeof name, "%s", lua_tostring(L, -2));
    else snprintf(name, sizeof name, "variable_%d", l->n_vars);
    int placed = place(L, 1);
    ld_tensor *v = ld_layer_new_weight(l, name, nd, shape, &init, trainable);
    if (placed) unplace(L);
    if (!v) return lb_engine_error(L, 0);
    if (lua_getfield(L, 2, "constraint") != LUA_TNIL) {
        ld_constraint c;
        lb_read_constraint(L, -1, &c, "add_weight");
        if (ld_constraint_register(v, &c)) return lb_engine_error(L, 0);
    }
    lua_settop(L, holder);
    (void)m;
    lb_push_tensor(L, ld_tensor_retain(v), 0);
    return 1;
}

/* model.x = v: kept in the model's state; in a subclass (nn.Model:extend)
   a layer, a model or a list of layers assigned is tracked (Keras's
   attribute tracking): its variables become the model's */
static int model_newindex(lua_State *L) {
    check_model(L, 1);
    lua_getiuservalue(L, 1, 1);
    int sub = lua_getfield(L, -1, "_class") == LUA_TTABLE;
    lua_pop(L, 1);
    if (lua_type(L, 2) == LUA_TSTRING && !strcmp(lua_tostring(L, 2), "trainable")) {
        /* Keras's model.trainable: every layer of it (nested models' too) */
        if (!lua_isboolean(L, 3)) return luaL_error(L, "model.trainable must be true or false, got %s", luaL_typename(L, 3));
        ld_model *m = check_model(L, 1);
        for (int i = 0; i < m->n_layers; i++) ld_layer_set_trainable(m->layers[i], lua_toboolean(L, 3));
    }
    if (lua_type(L, 2) == LUA_TSTRING && !strcmp(lua_tostring(L, 2), "_lost")) {
        if (!lua_isnil(L, 3) && !lua_isstring(L, 3)) return luaL_error(L, "model._lost: a message or nil expected");
        model_mark_lost(L, 1, lua_tostring(L, 3));
    }
    lua_pushvalue(L, 2);
    lua_pushvalue(L, 3);
    lua_rawset(L, -3);
    if (sub && lua_type(L, 2) == LUA_TSTRING && lua_tostring(L, 2)[0] != '_') {
        track(L, 1, 3, 0);
        /* a Variable assigned (Keras 3 tracks them): the model's own weight from now on */
        if (lb_is_variable(L, 3)) {
            ld_layer *l = own_weights(L, 1);
            if (ld_layer_adopt_weight(l, lb_test_tensor(L, 3), lua_tostring(L, 2))) return lb_engine_error(L, 0);
        }
    }
    return 0;
}

/* A tensor attribute of a model (self.pe = a positional encoding made in
   init), read in a replica whose device is another (MirroredStrategy's
   cpu:1, OneDeviceStrategy("cuda:0")): that device's copy, as TensorFlow
   copies a constant to the op that reads it. Made at the first read there
   and kept in the state's _on_device (by tensor, then device), so a step
   copies nothing; a variable is left as it is (each replica reads its own
   copy of a mirrored one). The value on top of the stack is replaced; st is
   the state table's index. */
static void on_replica_device(lua_State *L, int st) {
    ld_tensor *t = lb_test_tensor(L, -1);
    const ld_replica_ctx *rc = ld_replica_get();
    if (!t || !rc || !rc->device || t->requires_grad || ld_mirror_count(t) > 1 || t->storage->device == rc->device ||
        lb_is_variable(L, -1))
        return;
    int v = lua_gettop(L);
    if (lua_getfield(L, st, "_on_device") != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_newtable(L);                  /* weak keys: a tensor no longer an attribute takes its copies with it */
        lua_pushliteral(L, "k");
        lua_setfield(L, -2, "__mode");
        lua_setmetatable(L, -2);
        lua_pushvalue(L, -1);
        lua_setfield(L, st, "_on_device");
    }
    lua_pushvalue(L, v);
    if (lua_rawget(L, -2) != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, v);
        lua_pushvalue(L, -2);
        lua_rawset(L, -4);
    }
    if (lua_getfield(L, -1, rc->device->name) == LUA_TNIL) {
        lua_pop(L, 1);
        ld_tensor *c = ld_to_device(t, rc->device);
        if (!c) lb_engine_error(L, 0);
        lb_push_tensor(L, c, 0);
        lua_pushvalue(L, -1);
        lua_setfield(L, -3, rc->device->name);
    }
    lua_replace(L, v);
    lua_settop(L, v);
}

/* model:count_params() (Keras's): the elements of its weights, each layer once */
static int model_count_params(lua_State *L) {
    ld_model *m = check_model_live(L, 1, "model:count_params()");
    if (!model_is_built(m)) return luaL_error(L, "model '%s' is not built yet: call it on data or model:build(shape) first",
                                              m->name);
    int64_t n = 0;
    for (int i = 0; i < m->n_layers; i++) n += ld_layer_param_count(m->layers[i]);
    lua_pushinteger(L, n);
    return 1;
}

/* nn._model_new(name, kind): an empty model of the Functional API or a
   subclass (lua/keras/models.lua fills it), bound to the open strategy */
static int nn_model_new(lua_State *L) {
    int mi = push_new_model(L, luaL_checkstring(L, 1), luaL_checkstring(L, 2));
    lua_pushvalue(L, mi);
    lb_call_hook(L, "distribute", "_on_model_created", 1);
    return 1;
}

static int model_tostring(lua_State *L) {
    ld_model *m = check_model(L, 1);
    lua_getiuservalue(L, 1, 1);
    lua_getfield(L, -1, "_kind");
    const char *kind = lua_isstring(L, -1) ? lua_tostring(L, -1) : "Sequential";
    lua_pushfstring(L, "<%s model '%s' with %d layers>", kind, m->name, m->n_layers);
    return 1;
}

static int model_gc(lua_State *L) {
    ld_model **p = luaL_checkudata(L, 1, MODEL_MT);
    ld_model_free(*p);
    *p = NULL;
    return 0;
}

/* ================================================================ losses */
/* Keras 3's options of each loss; an unknown one is an error naming it, and
   so is one of Keras's that ldist does not do unless it is off (an ignored
   option would train something else than asked) */
static const char *const loss_opts[LD_LOSS_COUNT][8] = {
    [LD_LOSS_SPARSE_CCE] = {"from_logits", "ignore_class", "axis", NULL},
    [LD_LOSS_CCE] = {"from_logits", "label_smoothing", "axis", NULL},
    [LD_LOSS_BCE] = {"from_logits", "label_smoothing", "axis", NULL},
    [LD_LOSS_HUBER] = {"delta", NULL},
    [LD_LOSS_COSINE] = {"axis", NULL},
    [LD_LOSS_BINARY_FOCAL] = {"apply_class_balancing", "alpha", "gamma", "from_logits", "label_smoothing", "axis", NULL},
    [LD_LOSS_CATEGORICAL_FOCAL] = {"alpha", "gamma", "from_logits", "label_smoothing", "axis", NULL},
    [LD_LOSS_DICE] = {"axis", NULL},
    [LD_LOSS_TVERSKY] = {"alpha", "beta", "axis", NULL},
};
static const char *const loss_class[] = {"SparseCategoricalCrossentropy", "CategoricalCrossentropy",
                                         "BinaryCrossentropy", "MeanSquaredError", "MeanAbsoluteError",
                                         "MeanAbsolutePercentageError", "MeanSquaredLogarithmicError", "Huber",
                                         "LogCosh", "KLDivergence", "Poisson", "CosineSimilarity", "Hinge",
                                         "SquaredHinge", "CategoricalHinge", "BinaryFocalCrossentropy",
                                         "CategoricalFocalCrossentropy", "Dice", "Tversky"};
_Static_assert(sizeof loss_class / sizeof *loss_class == LD_LOSS_COUNT, "a class name for each loss");

static void check_loss_options(lua_State *L, ld_loss_kind kind) {
    const char *cls = loss_class[kind];
    lua_pushnil(L);
    while (lua_next(L, 1)) {
        lua_pop(L, 1);
        const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "?";
        int ok = !strcmp(k, "reduction") || !strcmp(k, "name") || !strcmp(k, "dtype");
        for (int i = 0; !ok && loss_opts[kind][i]; i++) ok = !strcmp(k, loss_opts[kind][i]);
        /* from_logits = false on MeanSquaredError: a model saved with every loss's fields */
        if (!ok && !strcmp(k, "from_logits")) {
            lua_getfield(L, 1, k);
            ok = !lua_toboolean(L, -1);
            lua_pop(L, 1);
        }
        if (!ok) {
            static const char *const common[] = {"reduction", "name", "dtype", NULL};
            char what[80];
            snprintf(what, sizeof what, "losses.%s", cls);
            lb_unknown_option_in(L, what, k, loss_opts[kind], common);
        }
    }
    int overlap = kind == LD_LOSS_DICE || kind == LD_LOSS_TVERSKY;   /* their axis is checked by overlap_axes */
    if (lua_getfield(L, 1, "axis") != LUA_TNIL && !overlap && !(lua_isinteger(L, -1) && lua_tointeger(L, -1) == -1))
        luaL_error(L, "bad argument #1 to '%s' (axis must be -1: ldist's losses read the classes on the last axis)", cls);
    if (lua_getfield(L, 1, "dtype") != LUA_TNIL && !(lua_type(L, -1) == LUA_TSTRING && !strcmp(lua_tostring(L, -1), "float32")))
        luaL_error(L, "bad argument #1 to '%s' (dtype must be \"float32\": losses compute in float32, as Keras's "
                      "under mixed precision)", cls);
    lua_pop(L, 2);
}

/* opts[name] as a finite number, or def when absent */
static double loss_number(lua_State *L, ld_loss_kind kind, const char *name, double def) {
    int t = lua_getfield(L, 1, name);
    double v = def;
    if (t != LUA_TNIL) {
        if (t != LUA_TNUMBER || !isfinite(lua_tonumber(L, -1)))
            luaL_error(L, "bad argument #1 to '%s' (%s must be a finite number, got %s)", loss_class[kind], name,
                       t == LUA_TNUMBER ? lua_tostring(L, -1) : luaL_typename(L, -1));
        v = lua_tonumber(L, -1);
    }
    lua_pop(L, 1);
    return v;
}

/* Dice's and Tversky's axis: nil (Keras's None: every axis), an axis or a
   list of distinct axes (negative from the end) */
static void overlap_axes(lua_State *L, ld_loss *l) {
    const char *cls = loss_class[l->kind];
    int t = lua_getfield(L, 1, "axis");
    if (t == LUA_TNUMBER || t == LUA_TTABLE) {
        lua_Integer n = t == LUA_TTABLE ? (lua_Integer)lua_rawlen(L, -1) : 1;
        if (n < 1 || n > LD_MAX_DIMS)
            luaL_error(L, "bad argument #1 to '%s' (axis must list 1 to %d axes, got %d)", cls, LD_MAX_DIMS, (int)n);
        for (lua_Integer i = 1; i <= n; i++) {
            if (t == LUA_TTABLE) lua_rawgeti(L, -1, i);
            else lua_pushvalue(L, -1);
            if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < -LD_MAX_DIMS || lua_tointeger(L, -1) >= LD_MAX_DIMS)
                luaL_error(L, "bad argument #1 to '%s' (axis must be nil, an integer or a list of integers, got %s)", cls,
                           luaL_tolstring(L, -1, NULL));
            l->axes[i - 1] = (int)lua_tointeger(L, -1);
            lua_pop(L, 1);
        }
        l->naxes = (int)n;
    } else if (t != LUA_TNIL) {
        luaL_error(L, "bad argument #1 to '%s' (axis must be nil, an integer or a list of integers, got %s)", cls,
                   luaL_typename(L, -1));
    }
    lua_pop(L, 1);
}

static int loss_new(lua_State *L, ld_loss_kind kind) {
    ld_loss *l = lua_newuserdatauv(L, sizeof *l, 0);
    memset(l, 0, sizeof *l);
    l->kind = kind;
    l->delta = 1.0f;
    /* Keras's defaults: the focal losses' alpha 0.25 and gamma 2, Tversky's alpha and beta 0.5 */
    l->alpha = kind == LD_LOSS_TVERSKY ? 0.5 : 0.25;
    l->beta = 0.5;
    l->gamma = 2.0;
    if (lua_istable(L, 1)) {
        check_loss_options(L, kind);
        lua_getfield(L, 1, "label_smoothing");
        double ls = luaL_optnumber(L, -1, 0);
        if (!(ls >= 0 && ls <= 1))
            return luaL_error(L, "bad argument #1 to '%s' (label_smoothing must be in [0, 1], got %f)", loss_class[kind], ls);
        l->label_smoothing = (float)ls;
        lua_pop(L, 1);
        lua_getfield(L, 1, "delta");
        double d = luaL_optnumber(L, -1, 1.0);
        if (!(d > 0 && d <= DBL_MAX))
            return luaL_error(L, "bad argument #1 to '%s' (delta must be a positive number, got %f)", loss_class[kind], d);
        l->delta = (float)d;
        lua_pop(L, 1);
        l->alpha = loss_number(L, kind, "alpha", l->alpha);
        l->beta = loss_number(L, kind, "beta", l->beta);
        l->gamma = loss_number(L, kind, "gamma", l->gamma);
        lua_getfield(L, 1, "apply_class_balancing");
        l->class_balancing = lua_toboolean(L, -1);
        lua_pop(L, 1);
        if (lua_getfield(L, 1, "ignore_class") != LUA_TNIL) {
            if (!lua_isinteger(L, -1))
                return luaL_error(L, "bad argument #1 to '%s' (ignore_class must be an integer class id, got %s)",
                                  loss_class[kind], luaL_tolstring(L, -1, NULL));
            l->has_ignore_class = 1;
            l->ignore_class = (int64_t)lua_tointeger(L, -1);
        }
        lua_pop(L, 1);
        if (kind == LD_LOSS_DICE || kind == LD_LOSS_TVERSKY) overlap_axes(L, l);
        lua_getfield(L, 1, "from_logits");
        l->from_logits = lua_toboolean(L, -1);
        lua_getfield(L, 1, "reduction");
        const char *r = luaL_optstring(L, -1, "sum_over_batch_size");
        if (!strcmp(r, "sum")) l->reduction_sum = 1;
        else if (!strcmp(r, "none")) l->reduction_sum = 2;
        else if (strcmp(r, "sum_over_batch_size") && strcmp(r, "mean"))
            return luaL_argerror(L, 1, "reduction must be \"sum_over_batch_size\", \"sum\" or \"none\"");
        lua_pop(L, 2);
    }
    luaL_setmetatable(L, LOSS_MT);
    return 1;
}
static int loss_scce(lua_State *L) { return loss_new(L, LD_LOSS_SPARSE_CCE); }
static int loss_cce(lua_State *L) { return loss_new(L, LD_LOSS_CCE); }
static int loss_bce(lua_State *L) { return loss_new(L, LD_LOSS_BCE); }
static int loss_mse(lua_State *L) { return loss_new(L, LD_LOSS_MSE); }
static int loss_mae(lua_State *L) { return loss_new(L, LD_LOSS_MAE); }
static int loss_mape(lua_State *L) { return loss_new(L, LD_LOSS_MAPE); }
static int loss_msle(lua_State *L) { return loss_new(L, LD_LOSS_MSLE); }
static int loss_huber(lua_State *L) { return loss_new(L, LD_LOSS_HUBER); }
static int loss_logcosh(lua_State *L) { return loss_new(L, LD_LOSS_LOGCOSH); }
static int loss_kld(lua_State *L) { return loss_new(L, LD_LOSS_KLD); }
static int loss_poisson(lua_State *L) { return loss_new(L, LD_LOSS_POISSON); }
static int loss_cosine(lua_State *L) { return loss_new(L, LD_LOSS_COSINE); }
static int loss_hinge(lua_State *L) { return loss_new(L, LD_LOSS_HINGE); }
static int loss_squared_hinge(lua_State *L) { return loss_new(L, LD_LOSS_SQUARED_HINGE); }
static int loss_categorical_hinge(lua_State *L) { return loss_new(L, LD_LOSS_CATEGORICAL_HINGE); }
static int loss_binary_focal(lua_State *L) { return loss_new(L, LD_LOSS_BINARY_FOCAL); }
static int loss_categorical_focal(lua_State *L) { return loss_new(L, LD_LOSS_CATEGORICAL_FOCAL); }
static int loss_dice(lua_State *L) { return loss_new(L, LD_LOSS_DICE); }
static int loss_tversky(lua_State *L) { return loss_new(L, LD_LOSS_TVERSKY); }

/* loss(y_true, y_pred [, sample_weight]). With sample_weight (a number or a
   tensor broadcast against the per-example losses), as Keras 3's
   reduce_weighted_values: "none" gives w * l; "sum" sum(w * l);
   "sum_over_batch_size" sum(w * l) / number of weighted losses (not the sum
   of the weights). In a replica of a synchronous strategy that number is
   scaled to the global batch, as the unweighted loss is; a mask on y_pred
   (a layer's keras_mask) leaves its masked positions out (ld_loss_weighted). */
static int loss_call(lua_State *L) {
    ld_loss *l = check_loss(L, 1);
    lua_settop(L, 4);                                      /* 4: sample_weight or nil */
    ld_tensor *yt = lb_to_tensor(L, 2, l->kind == LD_LOSS_SPARSE_CCE ? LD_I64 : LD_F32);
    lb_push_tensor(L, yt, 0);
    ld_tensor *yp = lb_to_tensor(L, 3, LD_F32);
    lb_push_tensor(L, yp, 0);
    ld_tensor *w = NULL;
    if (!lua_isnil(L, 4)) {
        if (!lb_test_tensor(L, 4) && !lua_isnumber(L, 4) && !lua_istable(L, 4))
            return luaL_error(L, "bad argument #3 to 'loss' (sample_weight must be a number or a tensor, got %s)", luaL_typename(L, 4));
        w = lb_to_tensor(L, 4, LD_F32);
        lb_push_tensor(L, w, 0);
    }
    ld_tensor *v = ld_loss_weighted(l, yt, yp, w);
    if (!v) {
        if (w && ld_error_status() == LD_ESHAPE && strstr(ld_error(), "sample_weight"))
            return luaL_error(L, "bad argument #3 to 'loss' (%s)", ld_error());
        return luaL_error(L, "%s", ld_error());
    }
    lb_push_tensor(L, v, 0);
    return 1;
}

static int loss_tostring(lua_State *L) {
    ld_loss *l = check_loss(L, 1);
    lua_pushfstring(L, "<loss %s%s>", ld_loss_name(l->kind), l->from_logits ? " (from logits)" : "");
    return 1;
}

static int loss_index(lua_State *L) {
    ld_loss *l = check_loss(L, 1);
    const char *k = luaL_checkstring(L, 2);
    if (!strcmp(k, "name")) { lua_pushstring(L, ld_loss_name(l->kind)); return 1; }
    if (!strcmp(k, "from_logits")) { lua_pushboolean(L, l->from_logits); return 1; }
    if (!strcmp(k, "label_smoothing")) { lua_pushnumber(L, l->label_smoothing); return 1; }
    if (!strcmp(k, "sparse")) { lua_pushboolean(L, l->kind == LD_LOSS_SPARSE_CCE); return 1; }
    return 0;
}

/* losses._config(loss) -> {name=, from_logits=, reduction=, label_smoothing=}: enough to make it again */
static int loss_config(lua_State *L) {
    ld_loss *l = luaL_checkudata(L, 1, "ldist.Loss");
    static const char *const red[] = {"sum_over_batch_size", "sum", "none"};
    lua_createtable(L, 0, 3);
    lua_pushstring(L, ld_loss_name(l->kind)); lua_setfield(L, -2, "name");
    lua_pushboolean(L, l->from_logits); lua_setfield(L, -2, "from_logits");
    lua_pushstring(L, red[l->reduction_sum >= 0 && l->reduction_sum < 3 ? l->reduction_sum : 0]); lua_setfield(L, -2, "reduction");
    if (l->label_smoothing > 0) { lua_pushnumber(L, l->label_smoothing); lua_setfield(L, -2, "label_smoothing"); }
    if (l->kind == LD_LOSS_HUBER) { lua_pushnumber(L, l->delta); lua_setfield(L, -2, "delta"); }
    /* the options of the losses that have them, as Keras's get_config */
    for (int i = 0; loss_opts[l->kind][i]; i++) {
        const char *o = loss_opts[l->kind][i];
        if (!strcmp(o, "alpha")) lua_pushnumber(L, l->alpha);
        else if (!strcmp(o, "beta")) lua_pushnumber(L, l->beta);
        else if (!strcmp(o, "gamma")) lua_pushnumber(L, l->gamma);
        else if (!strcmp(o, "apply_class_balancing")) lua_pushboolean(L, l->class_balancing);
        else if (!strcmp(o, "ignore_class") && l->has_ignore_class) lua_pushinteger(L, (lua_Integer)l->ignore_class);
        else if (!strcmp(o, "axis") && (l->kind == LD_LOSS_DICE || l->kind == LD_LOSS_TVERSKY) && l->naxes > 0) {
            lua_createtable(L, l->naxes, 0);
            for (int a = 0; a < l->naxes; a++) { lua_pushinteger(L, l->axes[a]); lua_rawseti(L, -2, a + 1); }
        } else continue;
        lua_setfield(L, -2, o);
    }
    return 1;
}

/* nn._count_correct(y_true, y_pred, sparse [, sample_weight]) -> number of correct rows
   (with weights: their sum over the correct positions, and the weights' sum) */
/* nn._weight_budget(bytes | nil): the bytes of weights that layers built on
   this thread may still create (nil: no limit); returns nothing */
static int nn_weight_budget(lua_State *L) {
    lua_Integer b = luaL_optinteger(L, 1, -1);
    ld_layer_weight_budget(b < 0 ? -1 : (int64_t)b);
    return 0;
}

static int nn_count_correct(lua_State *L) {
    ld_tensor *yt = lb_check_tensor(L, 1), *yp = lb_check_tensor(L, 2);
    if (!lua_isnoneornil(L, 4)) {
        double c, t;
        if (ld_count_correct_weighted(yt, yp, lua_toboolean(L, 3), lb_check_tensor(L, 4), &c, &t))
            return lb_engine_error(L, 1);
        lua_pushnumber(L, c);
        lua_pushnumber(L, t);
        return 2;
    }
    int64_t c;
    if (ld_count_correct(yt, yp, lua_toboolean(L, 3), &c)) return lb_engine_error(L, 1);
    lua_pushinteger(L, c);
    return 1;
}

static const char *const nn_docs[] = {
    "layer_from_config", "nn.layer_from_config{class_name=, config=}\n\nA layer from its class name and layer:get_config() "
                         "(Keras's layers.deserialize).",
    "Sequential", "nn.Sequential{layer1, layer2, ..., name=}\n\nA stack of layers. model(x, {training=}) runs it;\n"
                  "model.trainable_variables lists the weights; model:summary() prints a table;\n"
                  "model:compile{optimizer=, loss=, metrics=}, model:fit(ds, {epochs=}), model:evaluate(ds), model:predict(x);\n"
                  "model:save_weights(path) and model:load_weights(path) use safetensors.",
    "Model:summary", "model:summary()\n\nPrint (and return) a table of the layers, output shapes and parameter counts.",
    "Model:train_step", "model:train_step(x, y, loss, optimizer)\n\nOne training step in C; returns the loss value and the predictions.",
    "Model:add_weight", "model:add_weight{shape=, initializer=\"glorot_uniform\", trainable=true, name=, constraint=}\n\n"
    "A weight of a subclassed model's own (Keras's Layer.add_weight), made now and returned: it trains,\n"
    "mirrors under the model's strategy and saves as a layer's. A tensor.Variable assigned to a field of a\n"
    "subclass (self.w = tensor.Variable(...)) becomes one too, as Keras 3 tracks it.",
    "Model:save_weights", "model:save_weights(path)\n\nWrite the weights as safetensors (readable by Python's safetensors).",
    "Model:load_weights", "model:load_weights(path)\n\nRead weights written by save_weights. The file is checked before any\n"
    "data is read: one entry per weight, shapes and dtypes must match (F16 and BF16 files are converted\n"
    "into float32 weights on purpose; any other dtype is an error naming both).",
    NULL};

static const char *const loss_docs[] = {
    "SparseCategoricalCrossentropy", "losses.SparseCategoricalCrossentropy{from_logits=false, ignore_class=nil, reduction=\"sum_over_batch_size\"}\n\n"
        "Cross-entropy between integer labels [batch] and predictions [batch, classes]; loss(y_true, y_pred).\n"
        "ignore_class k (Keras's): positions labelled k give 0 and no gradient, and the mean is over the\n"
        "other positions only (0 when none is left); under a strategy, over those of the global batch, so\n"
        "every strategy gives one device's loss.\n"
        "Probabilities (from_logits=false) are clipped to [1e-7, 1 - 1e-7] before their log, as Keras's;\n"
        "a NaN prediction gives a NaN loss (TerminateOnNaN sees it), as in every loss here.",
    "CategoricalCrossentropy", "losses.CategoricalCrossentropy{from_logits=false, label_smoothing=0, reduction=\"sum_over_batch_size\"}\n\nCross-entropy with one-hot labels. label_smoothing s: the labels become y (1 - s) + s / classes, as in Keras.",
    "BinaryCrossentropy", "losses.BinaryCrossentropy{from_logits=false, label_smoothing=0, reduction=\"sum_over_batch_size\"}\n\nCross-entropy for 0/1 labels. label_smoothing s: the labels become y (1 - s) + s / 2, as in Keras.",
    "MeanSquaredError", "losses.MeanSquaredError()\n\nMean of (y_pred - y_true)^2.",
    "MeanAbsoluteError", "losses.MeanAbsoluteError()  (losses.MAE, \"mae\")\n\nMean of |y_pred - y_true| over the last axis.",
    "MeanAbsolutePercentageError", "losses.MeanAbsolutePercentageError()  (losses.MAPE, \"mape\")\n\n"
        "100 * mean of |(y_true - y_pred) / max(|y_true|, 1e-7)| over the last axis.",
    "MeanSquaredLogarithmicError", "losses.MeanSquaredLogarithmicError()  (losses.MSLE, \"msle\")\n\n"
        "Mean of (log(max(y_pred, 1e-7) + 1) - log(max(y_true, 1e-7) + 1))^2 over the last axis.",
    "Huber", "losses.Huber{delta=1}  (\"huber\")\n\nWith e = y_pred - y_true: e^2 / 2 where |e| <= delta, else delta |e| - delta^2 / 2;\n"
        "the mean over the last axis (robust regression, as Keras's).",
    "LogCosh", "losses.LogCosh()  (\"log_cosh\")\n\nMean of log(cosh(y_pred - y_true)) over the last axis, computed as e + softplus(-2e) - log 2.",
    "KLDivergence", "losses.KLDivergence()  (\"kl_divergence\", \"kld\")\n\nsum(y_true log(y_true / y_pred)) over the last axis, both clipped to [1e-7, 1].",
    "Poisson", "losses.Poisson()  (\"poisson\")\n\nMean of y_pred - y_true log(y_pred + 1e-7) over the last axis.",
    "CosineSimilarity", "losses.CosineSimilarity()  (\"cosine_similarity\")\n\n-sum of the L2-normalized y_true and y_pred's product over the last axis\n"
        "(-1: the same direction; each norm at least 1e-7).",
    "Hinge", "losses.Hinge()  (\"hinge\")\n\nMean of max(1 - t y_pred, 0) over the last axis; labels that are all 0 or 1 become t = -1 or 1.",
    "SquaredHinge", "losses.SquaredHinge()  (\"squared_hinge\")\n\nMean of max(1 - t y_pred, 0)^2 over the last axis (t as Hinge's).",
    "CategoricalHinge", "losses.CategoricalHinge()  (\"categorical_hinge\")\n\nmax(max((1 - y_true) y_pred) - sum(y_true y_pred) + 1, 0) for one-hot labels.",
    "BinaryFocalCrossentropy", "losses.BinaryFocalCrossentropy{apply_class_balancing=false, alpha=0.25, gamma=2, from_logits=false,\n"
        "label_smoothing=0}  (\"binary_focal_crossentropy\")\n\n"
        "Keras's focal loss for 0/1 labels: (1 - p_t)^gamma times the binary cross-entropy, p_t = y p + (1 - y)(1 - p);\n"
        "with apply_class_balancing also times y alpha + (1 - y)(1 - alpha); the mean over the last axis.\n"
        "from_logits: p = sigmoid(y_pred). label_smoothing s: y (1 - s) + s / 2.",
    "CategoricalFocalCrossentropy", "losses.CategoricalFocalCrossentropy{alpha=0.25, gamma=2, from_logits=false, label_smoothing=0}\n"
        "(\"categorical_focal_crossentropy\")\n\n"
        "Keras's focal loss for one-hot labels: the sum over classes of -alpha (1 - p)^gamma y log p, p the\n"
        "predictions normalised to sum 1 and clipped to [1e-7, 1 - 1e-7] (from_logits: their softmax).",
    "Dice", "losses.Dice{axis=nil}  (\"dice\")\n\n"
        "1 - 2 sum(y_true y_pred) / (sum(y_true) + sum(y_pred) + 1e-7), the sums over axis (nil: every axis,\n"
        "one loss for the batch, as Keras's default; {1, 2, 3} for one per image: axes count from 0, as\n"
        "Keras's and ldist's tensor ops, negative ones from the end). Under a strategy the replicas' losses\n"
        "add up to one device's, gradients too.",
    "Tversky", "losses.Tversky{alpha=0.5, beta=0.5, axis=nil}  (\"tversky\")\n\n"
        "1 - I / (I + alpha sum((1 - y_pred) y_true) + beta sum(y_pred (1 - y_true)) + 1e-7), I = sum(y_true y_pred),\n"
        "the sums over axis as Dice's (Keras's formula and names: alpha weighs the missed positives).",
    NULL};

int lb_open_losses(lua_State *L) {
    luaL_newmetatable(L, LOSS_MT);
    {
        static const char *const f[] = {"name", "from_logits", "sparse", NULL};
        lua_newtable(L);
        for (int i = 0; f[i]; i++) { lua_pushstring(L, f[i]); lua_rawseti(L, -2, i + 1); }
        lua_setfield(L, -2, "__fields");   /* computed fields, for completion */
    }

    lua_pushcfunction(L, loss_call); lua_setfield(L, -2, "__call");
    lua_pushcfunction(L, loss_tostring); lua_setfield(L, -2, "__tostring");
    lua_pushcfunction(L, loss_index); lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
    static const luaL_Reg f[] = {
        {"SparseCategoricalCrossentropy", loss_scce}, {"CategoricalCrossentropy", loss_cce},
        {"BinaryCrossentropy", loss_bce}, {"MeanSquaredError", loss_mse}, {"MSE", loss_mse},
        {"MeanAbsoluteError", loss_mae}, {"MAE", loss_mae}, {"MeanAbsolutePercentageError", loss_mape},
        {"MAPE", loss_mape}, {"MeanSquaredLogarithmicError", loss_msle}, {"MSLE", loss_msle}, {"Huber", loss_huber},
        {"LogCosh", loss_logcosh}, {"KLDivergence", loss_kld}, {"Poisson", loss_poisson},
        {"CosineSimilarity", loss_cosine}, {"Hinge", loss_hinge}, {"SquaredHinge", loss_squared_hinge},
        {"CategoricalHinge", loss_categorical_hinge}, {"BinaryFocalCrossentropy", loss_binary_focal},
        {"CategoricalFocalCrossentropy", loss_categorical_focal}, {"Dice", loss_dice}, {"Tversky", loss_tversky},
        {"_config", loss_config}, {NULL, NULL}};
    luaL_newlib(L, f);
    /* losses._classes: a saved config's name -> the class that makes it again (nn._build_loss) */
    lua_createtable(L, 0, LD_LOSS_COUNT);
    for (int k = 0; k < LD_LOSS_COUNT; k++) {
        lua_pushstring(L, loss_class[k]);
        lua_setfield(L, -2, ld_loss_name((ld_loss_kind)k));
    }
    lua_setfield(L, -2, "_classes");
    lb_set_docs(L, "losses.", loss_docs);
    return 1;
}

/* nn._fused_attention([mode]) -> the mode before ("auto", "on", "off"):
   ldist.config.fused_attention (distribute/mirrored.lua) */
static int nn_fused_attention(lua_State *L) {
    static const char *const modes[] = {"auto", "on", "off", NULL};
    int mode = lua_isnoneornil(L, 1) ? -1 : luaL_checkoption(L, 1, NULL, modes);
    lua_pushstring(L, modes[ld_attention_fused(mode)]);
    return 1;
}

int lb_open_nn(lua_State *L) {
    luaL_newmetatable(L, LAYER_MT);
    {
        static const char *const f[] = {"name", "class_name", "kind", "built", "input_shape", "output_shape",
                                        "trainable_variables", "non_trainable_variables", "weights", "trainable",
                                        "dtype", "compute_dtype", "variable_dtype", "dtype_policy", NULL};
        lua_newtable(L);
        for (int i = 0; f[i]; i++) { lua_pushstring(L, f[i]); lua_rawseti(L, -2, i + 1); }
        lua_setfield(L, -2, "__fields");   /* computed fields, for completion */
    }

    lua_pushcfunction(L, layer_call); lua_setfield(L, -2, "__call");
    static const luaL_Reg lm[] = {{"get_config", layer_get_config}, {"_build_shapes", layer_build_shapes},
                                  {"count_params", layer_count_params}, {NULL, NULL}};
    luaL_newlib(L, lm);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, "ldist.layer_methods");   /* nn._layer_methods, below */
    lua_pushcclosure(L, layer_index, 1);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, layer_newindex); lua_setfield(L, -2, "__newindex");
    lua_pushcfunction(L, layer_tostring); lua_setfield(L, -2, "__tostring");
    lua_pushcfunction(L, layer_gc); lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);

    static const luaL_Reg f[] = {
        {"Sequential", nn_sequential}, {"_is_model", nn_is_model}, {"_count_correct", nn_count_correct}, {"layer_from_config", nn_layer_from_config},
        {"_model_new", nn_model_new}, {"_weight_budget", nn_weight_budget},
        {"_policy", nn_policy}, {"_fused_attention", nn_fused_attention}, {NULL, NULL}};
    luaL_newlib(L, f);
    int mod = lua_gettop(L);
    /* the layers' methods, where the prelude adds those written in Lua (adapt) */
    lua_getfield(L, LUA_REGISTRYINDEX, "ldist.layer_methods");
    lua_setfield(L, mod, "_layer_methods");
    lb_weight_options_register(L, mod);
    /* a constructor per layer class (and its alias), its help from the class */
    const ld_layer_class *const *cs = ld_layer_classes();
    const char *docs[2 * 128 + 1];   /* a name and its doc per class and per alias */
    int nd = 0;
    for (int i = 0; cs[i]; i++) {
        for (int a = 0; a < 2; a++) {
            const char *nm = a ? cs[i]->alias : cs[i]->class_name;
            if (!nm) continue;
            lua_pushlightuserdata(L, (void *)cs[i]);
            lua_pushcclosure(L, nn_layer_new, 1);
            lua_setfield(L, mod, nm);
            if (nd < 2 * 128) { docs[nd++] = nm; docs[nd++] = cs[i]->doc ? cs[i]->doc : ""; }
        }
    }
    docs[nd] = NULL;
    lb_set_docs(L, "nn.", docs);

    static const luaL_Reg cm[] = {
        {"add", model_add}, {"add_weight", model_add_weight}, {"build", model_build}, {"summary_text", model_summary_text}, {"_track", model_track},
        {"train_step", model_train_step}, {"_grads", model_grads}, {"save_weights", model_save_weights},
        {"load_weights", model_load_weights}, {"count_params", model_count_params}, {NULL, NULL}};
    luaL_newmetatable(L, MODEL_MT);
    int mt = lua_gettop(L);
    {
        static const char *const f[] = {"trainable_variables", "weights", "variables", "name", "built", "layers", "history",
                                        "trainable", NULL};
        lua_newtable(L);
        for (int i = 0; f[i]; i++) { lua_pushstring(L, f[i]); lua_rawseti(L, -2, i + 1); }
        lua_setfield(L, -2, "__fields");   /* computed fields, for completion */
    }

    lua_newtable(L);                    /* C methods */
    luaL_setfuncs(L, cm, 0);
    lua_newtable(L);                    /* nn.Model: methods added in Lua */
    lua_pushvalue(L, -1);
    lua_setfield(L, mod, "Model");
    lua_pushcclosure(L, model_index, 2);
    lua_setfield(L, mt, "__index");
    lua_pushcfunction(L, model_newindex); lua_setfield(L, mt, "__newindex");
    lua_pushcfunction(L, model_call); lua_setfield(L, mt, "__call");
    lua_pushcfunction(L, model_tostring); lua_setfield(L, mt, "__tostring");
    lua_pushcfunction(L, model_gc); lua_setfield(L, mt, "__gc");
    lua_settop(L, mod);
    lb_set_docs(L, "nn.", nn_docs);
    return 1;
}
