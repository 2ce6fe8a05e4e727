/*
 * nn_options.c - Keras's per-weight options of layers in Lua: the values
 * kernel_initializer=, kernel_regularizer=, kernel_constraint= (and the
 * bias_, recurrent_, embeddings_ and activity_ ones) take, read into the
 * engine's structs (ld_nn.h) and written back as Keras serializes them:
 * {class_name = "HeNormal", config = {seed = 3}}.
 *
 * A value is a name ("he_normal", "HeNormal", "l2", "max_norm"), such a
 * {class_name=, config=} table (what get_config, to_json and save write), or
 * an object of nn.initializers / regularizers / constraints (lua/keras/training.lua
 * makes those from nn._weight_option, so the classes and their keys live in
 * the engine only).
 */
#include "ld_nn.h"   /* before lbind.h: its nn helpers */
#include "lbind.h"

#include <lauxlib.h>
#include <string.h>

static const char *const kind_names[] = {"initializer", "regularizer", "constraint"};

typedef union { ld_initializer init; ld_regularizer reg; ld_constraint con; } any_option;

static int named(ld_wopt_kind k, const char *name, any_option *o) {
    switch (k) {
    case LD_WOPT_INITIALIZER: return ld_initializer_named(name, &o->init);
    case LD_WOPT_REGULARIZER: return ld_regularizer_named(name, &o->reg);
    default: return ld_constraint_named(name, &o->con);
    }
}
static int set_key(ld_wopt_kind k, any_option *o, const char *key, double v) {
    switch (k) {
    case LD_WOPT_INITIALIZER: return ld_initializer_set(&o->init, key, v);
    case LD_WOPT_REGULARIZER: return ld_regularizer_set(&o->reg, key, v);
    default: return ld_constraint_set(&o->con, key, v);
    }
}

/* an unknown name of kind k: the engine's message, with "did you mean" by
   the REPL's own rule (ldist._closest, lua/ui/help.lua) when a name is close */
static void unknown_name(lua_State *L, ld_wopt_kind k, const char *name, const char *what) {
    const char *msg = lua_pushfstring(L, "%s: %s", what, ld_error());   /* anchored on the stack */
    lua_newtable(L);
    int list = lua_gettop(L);
    const char *cn, *alias;
    for (int i = 0, n = 0; (cn = ld_weight_option_class(k, i, &alias)); i++) {
        lua_pushstring(L, cn); lua_rawseti(L, -2, ++n);
        lua_pushstring(L, alias); lua_rawseti(L, -2, ++n);
    }
    lua_getfield(L, LUA_REGISTRYINDEX, "ldist.module");
    if (lua_istable(L, -1) && lua_getfield(L, -1, "_closest") == LUA_TFUNCTION) {
        lua_pushstring(L, name);
        lua_pushvalue(L, list);
        lua_call(L, 2, 1);
        const char *guess = lua_tostring(L, -1), *cut = guess ? strstr(msg, "' (") : NULL;   /* after the name */
        if (cut) {
            const char *head = lua_pushlstring(L, msg, (size_t)(cut - msg) + 1);
            luaL_error(L, "%s; did you mean '%s'?%s", head, guess, cut + 1);
        }
    }
    luaL_error(L, "%s", msg);
}

/* the value at idx as an option of kind k into *o; raises naming `what`
   (the layer option, or the constructor) on a bad value */
static void read_option(lua_State *L, int idx, ld_wopt_kind k, any_option *o, const char *what) {
    idx = lua_absindex(L, idx);
    if (lua_type(L, idx) == LUA_TSTRING) {
        if (named(k, lua_tostring(L, idx), o)) unknown_name(L, k, lua_tostring(L, idx), what);
        return;
    }
    if (!lua_istable(L, idx))
        luaL_error(L, "%s: %s name or object expected, got %s", what, kind_names[k], luaL_typename(L, idx));
    lua_getfield(L, idx, "class_name");
    if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "%s: a %s table needs a class_name", what, kind_names[k]);
    if (named(k, lua_tostring(L, -1), o)) unknown_name(L, k, lua_tostring(L, -1), what);
    lua_pop(L, 1);
    if (lua_getfield(L, idx, "config") == LUA_TTABLE) {
        int c = lua_gettop(L);
        lua_pushnil(L);
        while (lua_next(L, c)) {
            if (lua_type(L, -2) != LUA_TSTRING) luaL_error(L, "%s: %s config keys must be strings", what, kind_names[k]);
            const char *key = lua_tostring(L, -2);
            int isnum;
            double v = lua_tonumberx(L, -1, &isnum);
            if (!isnum) luaL_error(L, "%s: %s option '%s' must be a number, got %s", what, kind_names[k], key, luaL_typename(L, -1));
            if (set_key(k, o, key, v)) luaL_error(L, "%s: %s", what, ld_error());
            lua_pop(L, 1);
        }
    } else if (!lua_isnil(L, -1)) luaL_error(L, "%s: a %s's config must be a table", what, kind_names[k]);
    lua_pop(L, 1);
}

void lb_read_initializer(lua_State *L, int idx, ld_initializer *out, const char *what) {
    any_option o;
    read_option(L, idx, LD_WOPT_INITIALIZER, &o, what);
    *out = o.init;
}
void lb_read_constraint(lua_State *L, int idx, ld_constraint *out, const char *what) {
    any_option o;
    read_option(L, idx, LD_WOPT_CONSTRAINT, &o, what);
    *out = o.con;
}

/* {class_name=, config={...}} of an option, pushed */
static void push_option(lua_State *L, ld_wopt_kind k, const any_option *o) {
    const char *names[4];
    double vals[4];
    int n = 0;
    const char *cn;
    switch (k) {
    case LD_WOPT_INITIALIZER: cn = o->init.class_name; n = ld_initializer_params(&o->init, names, vals); break;
    case LD_WOPT_REGULARIZER: cn = o->reg.class_name; n = ld_regularizer_params(&o->reg, names, vals); break;
    default: cn = o->con.class_name; n = ld_constraint_params(&o->con, names, vals); break;
    }
    lua_createtable(L, 0, 2);
    lua_pushstring(L, cn);
    lua_setfield(L, -2, "class_name");
    lua_createtable(L, 0, n + 1);
    for (int i = 0; i < n; i++) {
        if (!strcmp(names[i], "axis")) lua_pushinteger(L, (lua_Integer)vals[i]); else lua_pushnumber(L, vals[i]);
        lua_setfield(L, -2, names[i]);
    }
    if (k == LD_WOPT_INITIALIZER && o->init.seeded) {
        lua_pushinteger(L, (lua_Integer)o->init.seed);
        lua_setfield(L, -2, "seed");
    }
    lua_setfield(L, -2, "config");
}

/* the option slot of a layer: role -1 is activity_regularizer */
static void *slot(ld_layer *l, int role, ld_wopt_kind k) {
    if (role < 0) return &l->wopt.activity;
    switch (k) {
    case LD_WOPT_INITIALIZER: return &l->wopt.init[role];
    case LD_WOPT_REGULARIZER: return &l->wopt.reg[role];
    default: return &l->wopt.constraint[role];
    }
}
static size_t slot_size(ld_wopt_kind k) {
    return k == LD_WOPT_INITIALIZER ? sizeof(ld_initializer) : k == LD_WOPT_REGULARIZER ? sizeof(ld_regularizer) : sizeof(ld_constraint);
}

int lb_layer_weight_option(lua_State *L, ld_layer *l, const char *key, int vidx) {
    int role;
    ld_wopt_kind k;
    if (ld_weight_option_find(l->cls, key, &role, &k)) return 0;
    void *dst = slot(l, role, k);
    if (lua_isnil(L, vidx)) { memset(dst, 0, slot_size(k)); return 1; }   /* the class's default */
    if (l->built) luaL_error(L, "nn.%s: %s cannot change once the layer is built", l->cls->class_name, key);
    char what[96];
    snprintf(what, sizeof what, "nn.%s: %s", l->cls->class_name, key);
    any_option o;
    read_option(L, vidx, k, &o, what);
    memcpy(dst, &o, slot_size(k));
    return 1;
}

int lb_layer_get_weight_option(lua_State *L, ld_layer *l, const char *key) {
    int role;
    ld_wopt_kind k;
    if (ld_weight_option_find(l->cls, key, &role, &k)) return 0;
    const char *cn = slot(l, role, k);   /* every slot starts with its class name */
    if (!cn[0]) { lua_pushnil(L); return 1; }   /* the class's default */
    any_option o;
    memcpy(&o, slot(l, role, k), slot_size(k));
    push_option(L, k, &o);
    return 1;
}

/* every option set on l (the others are the class's defaults) into the table at t */
void lb_layer_push_weight_options(lua_State *L, ld_layer *l, int t) {
    t = lua_absindex(L, t);
    for (int role = -1; role < LD_ROLE_COUNT; role++)
        for (int k = 0; k < 3; k++) {
            /* activity_regularizer: for a class that takes it (ActivityRegularization sets its own from l1, l2) */
            if (role < 0 && (k != LD_WOPT_REGULARIZER || !l->cls->roles)) continue;
            if (role >= 0 && !(l->cls->roles & LD_ROLE_BIT(role))) continue;
            const char *cn = slot(l, role, (ld_wopt_kind)k);   /* every slot starts with its class name */
            if (!cn[0]) continue;
            any_option o;
            memcpy(&o, slot(l, role, (ld_wopt_kind)k), slot_size((ld_wopt_kind)k));
            push_option(L, (ld_wopt_kind)k, &o);
            char key[48];
            snprintf(key, sizeof key, "%s%s", ld_weight_role_name(role),
                     k == 0 ? "_initializer" : k == 1 ? "_regularizer" : "_constraint");
            lua_setfield(L, t, key);
        }
}

/* nn._weight_option(kind, value) -> {class_name=, config={...}} with every
   key of the class, and the class's keys in Keras's order (a list).
   kind: "initializer", "regularizer" or "constraint". What the Lua
   constructors (nn.initializers.HeNormal{seed=1}, regularizers.L2(0.01))
   build their objects with, so the classes live in the engine only.
   nn._weight_option(kind) -> the class names of that kind. */
static int nn_weight_option(lua_State *L) {
    int k = luaL_checkoption(L, 1, NULL, kind_names);
    if (lua_isnoneornil(L, 2)) {
        lua_newtable(L);
        const char *cn;
        for (int i = 0; (cn = ld_weight_option_class((ld_wopt_kind)k, i, NULL)); i++) { lua_pushstring(L, cn); lua_rawseti(L, -2, i + 1); }
        return 1;
    }
    any_option o;
    read_option(L, 2, (ld_wopt_kind)k, &o, kind_names[k]);
    push_option(L, (ld_wopt_kind)k, &o);
    const char *names[4];
    double vals[4];
    int n = k == 0 ? ld_initializer_params(&o.init, names, vals) : k == 1 ? ld_regularizer_params(&o.reg, names, vals)
                                                                          : ld_constraint_params(&o.con, names, vals);
    lua_createtable(L, n + 1, 0);
    for (int i = 0; i < n; i++) { lua_pushstring(L, names[i]); lua_rawseti(L, -2, i + 1); }
    if (k == 0) { lua_pushliteral(L, "seed"); lua_rawseti(L, -2, n + 1); }
    return 2;
}

/* nn._constraint_of(v) -> v's constraint as {class_name=, config=}, or nil;
   nn._constrain(t, constraint | nil): the optimizer applies it to t after
   each update (a parameter server's copy of a constrained weight) */
static int nn_constraint_of(lua_State *L) {
    any_option o;
    if (!ld_variable_constraint(lb_check_tensor(L, 1), &o.con)) return 0;
    push_option(L, LD_WOPT_CONSTRAINT, &o);
    return 1;
}
static int nn_constrain(lua_State *L) {
    ld_tensor *t = lb_check_tensor(L, 1);
    any_option o;
    if (!lua_isnoneornil(L, 2)) read_option(L, 2, LD_WOPT_CONSTRAINT, &o, "_constrain");
    if (ld_tensor_set_constraint(t, lua_isnoneornil(L, 2) ? NULL : &o.con)) return lb_engine_error(L, 1);
    return 0;
}

void lb_weight_options_register(lua_State *L, int mod) {
    lua_pushcfunction(L, nn_weight_option);
    lua_setfield(L, mod, "_weight_option");
    lua_pushcfunction(L, nn_constraint_of);
    lua_setfield(L, mod, "_constraint_of");
    lua_pushcfunction(L, nn_constrain);
    lua_setfield(L, mod, "_constrain");
}
