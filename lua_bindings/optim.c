/*
 * optim.c - the `optim` module: SGD, Adam, AdamW, RMSprop, Adagrad, Adamax, Nadam, Lion, Adadelta, Ftrl
 * and schedules.
 *
 *   local opt = optim.Adam{learning_rate = 1e-3}
 *   opt:apply_gradients(grads, vars)          -- two parallel tables (or {{g, v}, ...})
 *
 * learning_rate is a number, a schedule (optim.schedules.ExponentialDecay{...})
 * or a Lua function of the step.
 */
#include "lbind.h"
#include "ld_optim.h"
#include "ld_ops.h"

#include <lauxlib.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

typedef struct { ld_optimizer *o; } lb_opt;

ld_optimizer *lb_check_optimizer(lua_State *L, int idx) {
    lb_opt *p = luaL_checkudata(L, idx, LB_OPTIMIZER_MT);
    if (!p->o) luaL_argerror(L, idx, "optimizer has been freed");
    /* a Lua function as learning rate: evaluate it for this step */
    if (lua_getiuservalue(L, idx, 1) == LUA_TFUNCTION) {
        lua_pushinteger(L, p->o->iterations);
        lua_call(L, 1, 1);
        int ok;
        double v = lua_tonumberx(L, -1, &ok);
        if (!ok) luaL_error(L, "the learning-rate function returned a %s, not a number", luaL_typename(L, -1));
        p->o->lr.kind = LD_SCHED_CONSTANT;
        p->o->lr.initial = v;
    }
    lua_pop(L, 1);
    return p->o;
}

static double fnum(lua_State *L, int t, const char *k, double def) {
    lua_getfield(L, t, k);
    double v = luaL_optnumber(L, -1, def);
    lua_pop(L, 1);
    return v;
}

/* A schedule table is {kind=..., ...} made by optim.schedules.* (or by
   push_schedule, which writes every field this reads) */
static const char *const sched_kinds[] = {"constant", "ExponentialDecay", "CosineDecay", "PiecewiseConstantDecay",
                                          "InverseTimeDecay", "PolynomialDecay", "CosineDecayRestarts", NULL};
static void read_schedule(lua_State *L, int t, ld_schedule *s) {
    lua_getfield(L, t, "kind");
    const char *k = luaL_checkstring(L, -1);
    s->initial = fnum(L, t, "initial_learning_rate", 0.001);
    s->decay_steps = (int64_t)fnum(L, t, "decay_steps", 1000);
    s->decay_rate = fnum(L, t, "decay_rate", 0.96);
    s->alpha = fnum(L, t, "alpha", 0);
    s->end_lr = fnum(L, t, "end_learning_rate", 0.0001);
    s->power = fnum(L, t, "power", 1.0);
    s->t_mul = fnum(L, t, "t_mul", 2.0);
    s->m_mul = fnum(L, t, "m_mul", 1.0);
    s->warmup_steps = (int64_t)fnum(L, t, "warmup_steps", 0);
    lua_getfield(L, t, "staircase");
    s->staircase = lua_toboolean(L, -1);
    lua_getfield(L, t, "cycle");
    s->cycle = lua_toboolean(L, -1);
    lua_getfield(L, t, "warmup_target");
    s->warmup = !lua_isnil(L, -1);
    s->warmup_target = s->warmup ? luaL_checknumber(L, -1) : 0;
    lua_pop(L, 3);
    int kind = 1;
    while (sched_kinds[kind] && strcmp(k, sched_kinds[kind])) kind++;
    if (!sched_kinds[kind]) luaL_error(L, "unknown schedule kind '%s'", k);
    s->kind = (ld_sched_kind)kind;
    if (s->kind == LD_SCHED_COSINE_RESTARTS) s->decay_steps = (int64_t)fnum(L, t, "first_decay_steps", 1000);
    if (s->kind == LD_SCHED_PIECEWISE) {
        lua_getfield(L, t, "boundaries");
        lua_getfield(L, t, "values");
        int nb = (int)luaL_len(L, -2), nv = (int)luaL_len(L, -1);
        if (nb > 16 || nv != nb + 1) luaL_error(L, "PiecewiseConstantDecay needs len(values) == len(boundaries) + 1 (at most 16 boundaries)");
        for (int i = 0; i < nb; i++) { lua_geti(L, -2, i + 1); s->bounds[i] = (int64_t)luaL_checknumber(L, -1); lua_pop(L, 1); }
        for (int i = 0; i < nv; i++) { lua_geti(L, -1, i + 1); s->values[i] = luaL_checknumber(L, -1); lua_pop(L, 1); }
        s->n_bounds = nb;
        lua_pop(L, 2);
    }
    if (s->kind == LD_SCHED_COSINE_RESTARTS && !(s->t_mul > 0)) luaL_error(L, "CosineDecayRestarts: t_mul must be positive");
    lua_pop(L, 1);
}

/* the schedule's table as read_schedule reads it (a config shipped to other processes) */
static void push_schedule(lua_State *L, const ld_schedule *s) {
    lua_newtable(L);
    lua_pushstring(L, sched_kinds[s->kind]); lua_setfield(L, -2, "kind");
    lua_pushnumber(L, s->initial); lua_setfield(L, -2, "initial_learning_rate");
    lua_pushinteger(L, s->decay_steps);
    lua_setfield(L, -2, s->kind == LD_SCHED_COSINE_RESTARTS ? "first_decay_steps" : "decay_steps");
    lua_pushnumber(L, s->decay_rate); lua_setfield(L, -2, "decay_rate");
    lua_pushnumber(L, s->alpha); lua_setfield(L, -2, "alpha");
    lua_pushboolean(L, s->staircase); lua_setfield(L, -2, "staircase");
    lua_pushnumber(L, s->end_lr); lua_setfield(L, -2, "end_learning_rate");
    lua_pushnumber(L, s->power); lua_setfield(L, -2, "power");
    lua_pushboolean(L, s->cycle); lua_setfield(L, -2, "cycle");
    lua_pushnumber(L, s->t_mul); lua_setfield(L, -2, "t_mul");
    lua_pushnumber(L, s->m_mul); lua_setfield(L, -2, "m_mul");
    if (s->warmup) { lua_pushnumber(L, s->warmup_target); lua_setfield(L, -2, "warmup_target"); }
    lua_pushinteger(L, s->warmup_steps); lua_setfield(L, -2, "warmup_steps");
    lua_newtable(L);
    for (int i = 0; i < s->n_bounds; i++) { lua_pushinteger(L, s->bounds[i]); lua_rawseti(L, -2, i + 1); }
    lua_setfield(L, -2, "boundaries");
    lua_newtable(L);
    for (int i = 0; i <= s->n_bounds && s->kind == LD_SCHED_PIECEWISE; i++) { lua_pushnumber(L, s->values[i]); lua_rawseti(L, -2, i + 1); }
    lua_setfield(L, -2, "values");
}

/* the error where the user called LossScaleOptimizer: level 2, past the
   prelude's wrapper (mixed_precision.lua) that calls optim._loss_scale */
static int loss_scale_error(lua_State *L, const char *fmt, ...) {
    luaL_where(L, 2);
    va_list ap;
    va_start(ap, fmt);
    lua_pushvfstring(L, fmt, ap);
    va_end(ap);
    lua_concat(L, 2);
    return lua_error(L);
}

/* loss scaling from the table at t, as mixed_precision.LossScaleOptimizer
   gives it: {dynamic=true, initial_scale=2^15, dynamic_growth_steps=2000}
   (and scale=, good_steps= to carry a running one over); errors name the field */
static void read_loss_scale(lua_State *L, int t, ld_optimizer *o) {
    ld_loss_scale ls = {1, 1, 32768.0, 2000, 0, 0};
    lua_getfield(L, t, "dynamic");
    if (!lua_isnil(L, -1)) {
        if (!lua_isboolean(L, -1)) loss_scale_error(L, "bad argument #2 to 'LossScaleOptimizer' (dynamic must be a boolean, got %s)", luaL_typename(L, -1));
        ls.dynamic = lua_toboolean(L, -1);
    }
    lua_pop(L, 1);
    static const char *const num[] = {"initial_scale", "scale", NULL};
    for (int i = 0; num[i]; i++) {
        if (lua_getfield(L, t, num[i]) != LUA_TNIL) {
            int ok;
            double v = lua_tonumberx(L, -1, &ok);
            if (!ok || !(v > 0) || !isfinite(v))
                loss_scale_error(L, "bad argument #2 to 'LossScaleOptimizer' (%s must be a positive finite number)", num[i]);
            ls.scale = v;
        }
        lua_pop(L, 1);
    }
    if (lua_getfield(L, t, "dynamic_growth_steps") != LUA_TNIL) {
        int ok;
        lua_Integer v = lua_tointegerx(L, -1, &ok);
        if (!ok || v < 1) loss_scale_error(L, "bad argument #2 to 'LossScaleOptimizer' (dynamic_growth_steps must be a positive integer)");
        ls.growth_steps = v;
    }
    lua_pop(L, 1);
    if (lua_getfield(L, t, "good_steps") != LUA_TNIL) ls.good_steps = luaL_checkinteger(L, -1);
    lua_pop(L, 1);
    o->loss_scale = ls;
}

static void push_loss_scale(lua_State *L, const ld_optimizer *o);

/* optim._loss_scale(opt [, settings]) -> {dynamic=, scale=, dynamic_growth_steps=,
   good_steps=, skipped=} or nil when off; settings (a table) turn loss scaling
   on first (mixed_precision.LossScaleOptimizer), false turns it off */
static int opt_loss_scale(lua_State *L) {
    ld_optimizer *o = lb_check_optimizer(L, 1);
    if (lua_istable(L, 2)) read_loss_scale(L, 2, o);
    else if (lua_isboolean(L, 2) && !lua_toboolean(L, 2)) o->loss_scale.on = 0;
    push_loss_scale(L, o);
    return 1;
}

static void push_loss_scale(lua_State *L, const ld_optimizer *o) {
    const ld_loss_scale *ls = &o->loss_scale;
    if (!ls->on) { lua_pushnil(L); return; }
    lua_createtable(L, 0, 5);
    lua_pushboolean(L, ls->dynamic); lua_setfield(L, -2, "dynamic");
    lua_pushnumber(L, ls->scale); lua_setfield(L, -2, "scale");
    lua_pushinteger(L, ls->growth_steps); lua_setfield(L, -2, "dynamic_growth_steps");
    lua_pushinteger(L, ls->good_steps); lua_setfield(L, -2, "good_steps");
    lua_pushinteger(L, ls->skipped); lua_setfield(L, -2, "skipped");
}

/* optim._unscale(opt, grads) -> the gradients divided by opt's loss scale,
   or nil when the step is to be skipped (an inf or NaN: the scale halves),
   by the engine's rule (ld_loss_scale_step). A parameter-server worker
   checks its own step's gradients so before it pushes them; without loss
   scaling, grads itself. */
static int opt_unscale(lua_State *L) {
    ld_optimizer *o = lb_check_optimizer(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    if (!o->loss_scale.on) { lua_settop(L, 2); return 1; }
    int n = (int)luaL_len(L, 2);
    ld_tensor **g = lua_newuserdatauv(L, sizeof *g * (size_t)(n ? n : 1), 0);
    for (int i = 0; i < n; i++) {
        lua_geti(L, 2, i + 1);
        g[i] = lua_isnil(L, -1) ? NULL : lb_check_tensor(L, -1);
        lua_pop(L, 1);
    }
    double unscale;
    int go = ld_loss_scale_step(&o->loss_scale, n, g, 1, &unscale);
    if (go < 0) return lb_engine_error(L, 2);
    if (!go) { lua_pushnil(L); return 1; }
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        if (!g[i]) continue;
        ld_tensor *u = ld_mul_scalar(g[i], (float)unscale);
        if (!u) return lb_engine_error(L, 2);
        lb_push_tensor(L, u, 0);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* The options each optimizer takes, as Keras 3's: its own, then the base
   class's. An option that is not there is an error naming it (Keras:
   "Argument(s) not recognized"). */
static const char *const own_opts[][7] = {
    [LD_OPT_SGD] = {"momentum", "nesterov", NULL},
    [LD_OPT_ADAM] = {"beta_1", "beta_2", "epsilon", "amsgrad", NULL},
    [LD_OPT_ADAMW] = {"beta_1", "beta_2", "epsilon", "amsgrad", NULL},
    [LD_OPT_RMSPROP] = {"rho", "momentum", "epsilon", "centered", NULL},
    [LD_OPT_ADAGRAD] = {"initial_accumulator_value", "epsilon", NULL},
    [LD_OPT_ADAMAX] = {"beta_1", "beta_2", "epsilon", NULL},
    [LD_OPT_NADAM] = {"beta_1", "beta_2", "epsilon", NULL},
    [LD_OPT_LION] = {"beta_1", "beta_2", NULL},
    [LD_OPT_ADADELTA] = {"rho", "epsilon", NULL},
    [LD_OPT_FTRL] = {"learning_rate_power", "initial_accumulator_value", "l1_regularization_strength",
                     "l2_regularization_strength", "l2_shrinkage_regularization_strength", "beta", NULL},
};
static const char *const base_opts[] = {"learning_rate", "weight_decay", "clipnorm", "clipvalue", "global_clipnorm",
                                        "use_ema", "ema_momentum", "ema_overwrite_frequency", "loss_scale_factor",
                                        "gradient_accumulation_steps", "name", NULL};

static int in_list(const char *const *l, const char *k) {
    for (; *l; l++) if (!strcmp(*l, k)) return 1;
    return 0;
}
/* whether optimizer `kind` takes option `k` (loss_scale: a shipped LossScaleOptimizer's) */
static int takes(ld_opt_kind kind, const char *k) {
    return in_list(own_opts[kind], k) || in_list(base_opts, k) || !strcmp(k, "loss_scale");
}

/* optim._accepts(name, key): whether optimizer `name` takes option `key`
   (a model saved before the options were checked carries every field) */
static int opt_accepts(lua_State *L) {
    const char *name = luaL_checkstring(L, 1), *key = luaL_checkstring(L, 2);
    for (int k = LD_OPT_SGD; k < LD_OPT_COUNT; k++)
        if (!strcmp(ld_optimizer_name((ld_opt_kind)k), name)) {
            lua_pushboolean(L, takes((ld_opt_kind)k, key));
            return 1;
        }
    return luaL_argerror(L, 1, "not an optimizer's name");
}

static int check_options(lua_State *L, int t, ld_opt_kind kind) {
    const char *name = ld_optimizer_name(kind);
    lua_pushnil(L);
    while (lua_next(L, t)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) != LUA_TSTRING) return luaL_argerror(L, 1, "option names must be strings");
        const char *k = lua_tostring(L, -1);
        if (takes(kind, k)) continue;
        char what[64];
        snprintf(what, sizeof what, "optim.%s", name);
        if (!strcmp(k, "decay")) lua_pushfstring(L, "%s: unknown option 'decay' (Keras 3 has no decay: give a schedule as "
                                                    "learning_rate)", what);
        else if (!strcmp(k, "lr")) lua_pushfstring(L, "%s: unknown option 'lr' (Keras 3 calls it learning_rate)", what);
        else lb_unknown_option_in(L, what, k, own_opts[kind], base_opts);
        return lua_error(L);
    }
    /* Keras's loss_scale_factor: a positive number (or nil) */
    int ty = lua_getfield(L, t, "loss_scale_factor");
    if (ty != LUA_TNIL) {
        int ok;
        double v = lua_tonumberx(L, -1, &ok);
        if (!ok || !(v > 0) || !isfinite(v))
            return luaL_error(L, "bad argument #1 to '%s' (loss_scale_factor must be a positive number, got %s)", name,
                              luaL_tolstring(L, -1, NULL));
    }
    lua_pop(L, 1);
    /* Keras's checks: accumulation over 2 or more steps (0 or nil: off),
       the EMA's momentum in [0, 1] and its overwrite frequency >= 1 */
    if (lua_getfield(L, t, "gradient_accumulation_steps") != LUA_TNIL && lua_toboolean(L, -1)) {   /* false: off */
        int isint;
        lua_Integer k = lua_tointegerx(L, -1, &isint);
        if (!isint || (k != 0 && k < 2))
            return luaL_error(L, "bad argument #1 to '%s' (gradient_accumulation_steps must be an integer >= 2, got %s)",
                              name, luaL_tolstring(L, -1, NULL));
    }
    lua_pop(L, 1);
    lua_getfield(L, t, "use_ema");
    int ema = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (ema) {
        ty = lua_getfield(L, t, "ema_momentum");
        if (ty != LUA_TNIL) {
            int ok;
            double v = lua_tonumberx(L, -1, &ok);
            if (!ok || !(v >= 0 && v <= 1))
                return luaL_error(L, "bad argument #1 to '%s' (ema_momentum must be in [0, 1], got %s)", name,
                                  luaL_tolstring(L, -1, NULL));
        }
        lua_pop(L, 1);
        ty = lua_getfield(L, t, "ema_overwrite_frequency");
        if (ty != LUA_TNIL) {
            int isint;
            lua_Integer k = lua_tointegerx(L, -1, &isint);
            if (!isint || k < 1)
                return luaL_error(L, "bad argument #1 to '%s' (ema_overwrite_frequency must be an integer >= 1 or nil, "
                                     "got %s)", name, luaL_tolstring(L, -1, NULL));
        }
        lua_pop(L, 1);
    }
    /* Keras: only one of the three */
    int clips = 0;
    static const char *const clip[] = {"clipnorm", "clipvalue", "global_clipnorm", NULL};
    for (int i = 0; clip[i]; i++) {
        int ty = lua_getfield(L, t, clip[i]);
        if (ty != LUA_TNIL) {
            int ok;
            double v = lua_tonumberx(L, -1, &ok);
            if (!ok || !(v >= 0) || !isfinite(v))
                return luaL_error(L, "bad argument #1 to '%s' (%s must be a number >= 0, got %s)", name, clip[i],
                                  luaL_tolstring(L, -1, NULL));
            clips++;
        }
        lua_pop(L, 1);
    }
    if (clips > 1) return luaL_error(L, "bad argument #1 to '%s' (only one of clipnorm, clipvalue and global_clipnorm "
                                        "can be set, as in Keras)", name);
    return 0;
}

static int opt_new(lua_State *L, ld_opt_kind kind) {
    lb_opt *p = lua_newuserdatauv(L, sizeof *p, 1);
    p->o = NULL;
    luaL_setmetatable(L, LB_OPTIMIZER_MT);
    int ud = lua_gettop(L);
    p->o = ld_optimizer_new(kind);
    if (!p->o) return lb_engine_error(L, 0);
    ld_optimizer *o = p->o;
    if (lua_isnumber(L, 1)) o->lr.initial = lua_tonumber(L, 1);
    else if (lua_istable(L, 1)) {
        int t = 1;
        check_options(L, t, kind);
        lua_getfield(L, t, "learning_rate");
        if (lua_isnumber(L, -1)) o->lr.initial = lua_tonumber(L, -1);
        else if (lua_isfunction(L, -1)) { lua_pushvalue(L, -1); lua_setiuservalue(L, ud, 1); }
        else if (lua_istable(L, -1)) read_schedule(L, lua_gettop(L), &o->lr);
        else if (!lua_isnil(L, -1)) return luaL_argerror(L, 1, "learning_rate must be a number, a schedule or a function");
        lua_pop(L, 1);
        o->momentum = (float)fnum(L, t, "momentum", o->momentum);
        o->beta1 = (float)fnum(L, t, "beta_1", o->beta1);
        o->beta2 = (float)fnum(L, t, "beta_2", o->beta2);
        o->epsilon = (float)fnum(L, t, "epsilon", o->epsilon);
        o->rho = (float)fnum(L, t, "rho", o->rho);
        o->initial_accumulator = (float)fnum(L, t, "initial_accumulator_value", o->initial_accumulator);
        o->weight_decay = (float)fnum(L, t, "weight_decay", o->weight_decay);
        o->lr_power = (float)fnum(L, t, "learning_rate_power", o->lr_power);
        o->l1 = (float)fnum(L, t, "l1_regularization_strength", o->l1);
        o->l2 = (float)fnum(L, t, "l2_regularization_strength", o->l2);
        o->l2_shrinkage = (float)fnum(L, t, "l2_shrinkage_regularization_strength", o->l2_shrinkage);
        o->ftrl_beta = (float)fnum(L, t, "beta", o->ftrl_beta);
        o->clipnorm = (float)fnum(L, t, "clipnorm", 0);
        o->global_clipnorm = (float)fnum(L, t, "global_clipnorm", 0);
        o->clipvalue = (float)fnum(L, t, "clipvalue", 0);
        lua_getfield(L, t, "nesterov");
        o->nesterov = lua_toboolean(L, -1);
        lua_getfield(L, t, "amsgrad");
        o->amsgrad = lua_toboolean(L, -1);
        lua_getfield(L, t, "centered");
        o->centered = lua_toboolean(L, -1);
        lua_getfield(L, t, "use_ema");
        o->use_ema = lua_toboolean(L, -1);
        lua_pop(L, 4);
        o->ema_momentum = (float)fnum(L, t, "ema_momentum", o->ema_momentum);
        o->ema_overwrite_frequency = (int64_t)fnum(L, t, "ema_overwrite_frequency", 0);
        if (lua_getfield(L, t, "gradient_accumulation_steps") == LUA_TNUMBER) o->accum_steps = lua_tointeger(L, -1);
        lua_pop(L, 1);
        /* Keras's loss_scale_factor: the loss times it, the gradients divided by it, no
           step skipped (a fixed loss scale, as TF's LossScaleOptimizer(dynamic=False)) */
        if (lua_getfield(L, t, "loss_scale_factor") == LUA_TNUMBER)
            o->loss_scale = (ld_loss_scale){1, 0, lua_tonumber(L, -1), 2000, 0, 0};
        lua_pop(L, 1);
        if (lua_getfield(L, t, "loss_scale") == LUA_TTABLE) read_loss_scale(L, lua_gettop(L), o);   /* a shipped LossScaleOptimizer */
        lua_pop(L, 1);
    }
    /* Keras takes 0.0 (a step that changes nothing, with the optimizer's
       state still updated); a negative or NaN rate is refused as a mistake */
    if (o->lr.kind == LD_SCHED_CONSTANT && !(o->lr.initial >= 0 && isfinite(o->lr.initial)))
        return luaL_argerror(L, 1, "learning_rate must be zero or positive");
    if (o->momentum < 0 || o->momentum >= 1) return luaL_argerror(L, 1, "momentum must be in [0, 1)");
    if ((kind == LD_OPT_ADAGRAD || kind == LD_OPT_FTRL) && !(o->initial_accumulator >= 0))
        return luaL_argerror(L, 1, "initial_accumulator_value must be zero or positive");
    if (kind == LD_OPT_FTRL) {   /* Keras's checks */
        if (!(o->lr_power <= 0)) return luaL_argerror(L, 1, "learning_rate_power must be zero or negative");
        if (!(o->l1 >= 0 && o->l2 >= 0 && o->l2_shrinkage >= 0 && o->ftrl_beta >= 0))
            return luaL_argerror(L, 1, "Ftrl's l1, l2 and l2_shrinkage regularization strengths and beta must be zero or positive");
    }
    if (kind == LD_OPT_ADADELTA && !(o->rho >= 0 && o->rho <= 1)) return luaL_argerror(L, 1, "rho must be in [0, 1]");
    /* Keras's Lion: beta_1 in (0, 1] (0 makes it SignSGD) */
    if (kind == LD_OPT_LION && !(o->beta1 > 0 && o->beta1 <= 1))
        return luaL_argerror(L, 1, "beta_1 must be in (0, 1] (Lion with beta_1 = 0 is SignSGD)");
    lua_settop(L, ud);
    return 1;
}
static int opt_sgd(lua_State *L) { return opt_new(L, LD_OPT_SGD); }
static int opt_adam(lua_State *L) { return opt_new(L, LD_OPT_ADAM); }
static int opt_adamw(lua_State *L) { return opt_new(L, LD_OPT_ADAMW); }
static int opt_rmsprop(lua_State *L) { return opt_new(L, LD_OPT_RMSPROP); }
static int opt_adagrad(lua_State *L) { return opt_new(L, LD_OPT_ADAGRAD); }
static int opt_adamax(lua_State *L) { return opt_new(L, LD_OPT_ADAMAX); }
static int opt_nadam(lua_State *L) { return opt_new(L, LD_OPT_NADAM); }
static int opt_lion(lua_State *L) { return opt_new(L, LD_OPT_LION); }
static int opt_adadelta(lua_State *L) { return opt_new(L, LD_OPT_ADADELTA); }
static int opt_ftrl(lua_State *L) { return opt_new(L, LD_OPT_FTRL); }

/* opt:apply_gradients(grads, vars) or opt:apply_gradients({{g, v}, ...}) */
static int opt_apply(lua_State *L) {
    ld_optimizer *o = lb_check_optimizer(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    int pairs = lua_isnoneornil(L, 3);
    int n = (int)luaL_len(L, 2);
    if (!pairs) {
        luaL_checktype(L, 3, LUA_TTABLE);
        if ((int)luaL_len(L, 3) != n)
            return luaL_error(L, "bad argument #2 to 'apply_gradients' (%d gradients for %d variables)", n, (int)luaL_len(L, 3));
    }
    ld_tensor **g = lua_newuserdatauv(L, sizeof *g * (size_t)(n ? 2 * n : 1), 0);
    ld_tensor **v = g + n;
    for (int i = 0; i < n; i++) {
        if (pairs) {
            lua_geti(L, 2, i + 1);
            luaL_checktype(L, -1, LUA_TTABLE);
            lua_geti(L, -1, 1); lua_geti(L, -2, 2);
            g[i] = lua_isnil(L, -2) ? NULL : lb_check_tensor(L, -2);
            v[i] = lb_check_tensor(L, -1);
            lua_pop(L, 3);
        } else {
            lua_geti(L, 2, i + 1);
            g[i] = lua_isnil(L, -1) ? NULL : lb_test_tensor(L, -1);
            if (!g[i] && !lua_isnil(L, -1)) return luaL_error(L, "bad argument #1 to 'apply_gradients' (gradient %d is a %s)", i + 1, luaL_typename(L, -1));
            lua_geti(L, 3, i + 1);
            v[i] = lb_test_tensor(L, -1);
            if (!v[i]) return luaL_error(L, "bad argument #2 to 'apply_gradients' (variable %d is a %s)", i + 1, luaL_typename(L, -1));
            lua_pop(L, 2);
        }
    }
    if (ld_optimizer_apply(o, n, g, v)) return luaL_error(L, "bad argument #1 to 'apply_gradients' (%s)", ld_error());
    return 0;
}

static int opt_index(lua_State *L) {
    lb_opt *p = luaL_checkudata(L, 1, LB_OPTIMIZER_MT);
    ld_optimizer *o = p->o;
    if (!o) return luaL_argerror(L, 1, "optimizer has been freed");
    /* methods defined in Lua (optim.Optimizer) come first */
    lua_pushvalue(L, 2);
    if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL) return 1;
    lua_pop(L, 1);
    const char *k = luaL_checkstring(L, 2);
    if (!strcmp(k, "learning_rate") || !strcmp(k, "lr")) { lua_pushnumber(L, ld_optimizer_lr(o)); return 1; }
    if (!strcmp(k, "iterations")) { lua_pushinteger(L, o->iterations); return 1; }
    if (!strcmp(k, "name")) { lua_pushstring(L, ld_optimizer_name(o->kind)); return 1; }
    if (!strcmp(k, "apply_gradients")) { lua_pushcfunction(L, opt_apply); return 1; }
    /* a LossScaleOptimizer's (mixed_precision): its current scale, growth period, itself as the inner one */
    if (o->loss_scale.on && (!strcmp(k, "dynamic_scale") || !strcmp(k, "loss_scale"))) { lua_pushnumber(L, o->loss_scale.scale); return 1; }
    if (o->loss_scale.on && !strcmp(k, "dynamic_growth_steps")) { lua_pushinteger(L, o->loss_scale.growth_steps); return 1; }
    if (o->loss_scale.on && !strcmp(k, "inner_optimizer")) { lua_settop(L, 1); return 1; }
    return 0;
}

static int opt_newindex(lua_State *L) {
    ld_optimizer *o = lb_check_optimizer(L, 1);
    const char *k = luaL_checkstring(L, 2);
    if (!strcmp(k, "learning_rate") || !strcmp(k, "lr")) {
        double v = luaL_checknumber(L, 3);
        if (!(v >= 0 && isfinite(v))) return luaL_argerror(L, 3, "learning_rate must be zero or positive");
        o->lr.kind = LD_SCHED_CONSTANT;
        o->lr.initial = v;
        lua_pushnil(L);
        lua_setiuservalue(L, 1, 1);
        return 0;
    }
    return luaL_error(L, "optimizer has no settable field '%s'", k);
}

static int opt_tostring(lua_State *L) {
    ld_optimizer *o = lb_check_optimizer(L, 1);
    if (o->loss_scale.on)
        lua_pushfstring(L, "<optimizer LossScaleOptimizer(%s) lr=%f step=%d loss_scale=%f>", ld_optimizer_name(o->kind),
                        ld_optimizer_lr(o), (int)o->iterations, o->loss_scale.scale);
    else lua_pushfstring(L, "<optimizer %s lr=%f step=%d>", ld_optimizer_name(o->kind), ld_optimizer_lr(o), (int)o->iterations);
    return 1;
}

static int opt_gc(lua_State *L) {
    lb_opt *p = luaL_checkudata(L, 1, LB_OPTIMIZER_MT);
    ld_optimizer_free(p->o);
    p->o = NULL;
    return 0;
}

/* schedules are plain tables the optimizer reads; calling one gives the rate at a step */
static int sched_call(lua_State *L) {
    ld_schedule s = {0};
    read_schedule(L, 1, &s);
    lua_pushnumber(L, ld_schedule_at(&s, (int64_t)luaL_checkinteger(L, 2)));
    return 1;
}

/* Is the value at idx a table of options (string keys), not a list? */
static int is_options(lua_State *L, int idx) {
    if (!lua_istable(L, idx)) return 0;
    if (lua_getmetatable(L, idx)) { lua_pop(L, 1); return 0; }
    int list = lua_rawgeti(L, idx, 1) != LUA_TNIL;
    lua_pop(L, 1);
    return !list;
}

/* optim.schedules.<kind>(...) as Keras's: the arguments in Keras's order
   (keys; the first nreq required), by position, in an options table, or
   both (positions first, then a table of the rest). An unknown option is an
   error, not a default (a misspelt staircase would decay smoothly). */
static int sched_make(lua_State *L, const char *kind, const char *const *keys, int nreq) {
    char what[64];
    snprintf(what, sizeof what, "optim.schedules.%s", kind);
    int top = lua_gettop(L);
    lua_newtable(L);
    int t = top + 1, nkeys = 0;
    while (keys[nkeys]) nkeys++;
    for (int i = 1; i <= top; i++) {
        if (i == top && is_options(L, i)) {
            lb_check_options(L, i, what, keys);
            lua_pushnil(L);
            while (lua_next(L, i)) {
                lua_pushvalue(L, -2);
                if (lua_rawget(L, t) != LUA_TNIL)
                    luaL_error(L, "%s: %s given twice (by position and by name)", what, lua_tostring(L, -3));
                lua_pop(L, 1);
                lua_pushvalue(L, -2); lua_insert(L, -2); lua_rawset(L, t);
            }
        } else if (i <= nkeys - 1) {              /* the last key is name=, by name only */
            lua_pushvalue(L, i);
            lua_setfield(L, t, keys[i - 1]);
        } else {
            luaL_error(L, "%s takes at most %d arguments by position (%s, ...), then a table of options", what,
                       nkeys - 1, keys[0]);
        }
    }
    for (int i = 0; i < nreq; i++) {
        if (lua_getfield(L, t, keys[i]) == LUA_TNIL) luaL_error(L, "%s: %s is required", what, keys[i]);
        lua_pop(L, 1);
    }
    static const char *const counts[] = {"decay_steps", "first_decay_steps", "warmup_steps", NULL};
    for (int i = 0; counts[i]; i++) {
        lua_getfield(L, t, counts[i]);
        lua_Integer min = i == 2 ? 0 : 1;
        if (!lua_isnil(L, -1) && !(lua_isinteger(L, -1) && lua_tointeger(L, -1) >= min))
            luaL_error(L, "%s: %s must be a %s integer, got %s", what, counts[i], min ? "positive" : "non-negative",
                       luaL_tolstring(L, -1, NULL));
        lua_pop(L, 1);
    }
    lua_pushstring(L, kind);
    lua_setfield(L, t, "kind");
    ld_schedule s = {0};
    read_schedule(L, t, &s);   /* validate now */
    luaL_getmetatable(L, "ldist.Schedule");
    lua_setmetatable(L, t);
    lua_settop(L, t);
    return 1;
}
static int sched_exp(lua_State *L) {
    static const char *const k[] = {"initial_learning_rate", "decay_steps", "decay_rate", "staircase", "name", NULL};
    return sched_make(L, "ExponentialDecay", k, 3);
}
static int sched_cos(lua_State *L) {
    static const char *const k[] = {"initial_learning_rate", "decay_steps", "alpha", "warmup_target", "warmup_steps",
                                    "name", NULL};
    return sched_make(L, "CosineDecay", k, 2);
}
static int sched_inv(lua_State *L) {
    static const char *const k[] = {"initial_learning_rate", "decay_steps", "decay_rate", "staircase", "name", NULL};
    return sched_make(L, "InverseTimeDecay", k, 3);
}
static int sched_poly(lua_State *L) {
    static const char *const k[] = {"initial_learning_rate", "decay_steps", "end_learning_rate", "power", "cycle",
                                    "name", NULL};
    return sched_make(L, "PolynomialDecay", k, 2);
}
static int sched_restarts(lua_State *L) {
    static const char *const k[] = {"initial_learning_rate", "first_decay_steps", "t_mul", "m_mul", "alpha", "name", NULL};
    return sched_make(L, "CosineDecayRestarts", k, 2);
}
static int sched_pw(lua_State *L) {
    static const char *const k[] = {"boundaries", "values", "name", NULL};
    return sched_make(L, "PiecewiseConstantDecay", k, 2);
}

/* <ExponentialDecay initial_learning_rate=0.1 decay_steps=1000 decay_rate=0.96> */
static int sched_tostring(lua_State *L) {
    ld_schedule s = {0};
    read_schedule(L, 1, &s);
    switch (s.kind) {
    case LD_SCHED_EXP_DECAY:
        lua_pushfstring(L, "<ExponentialDecay initial_learning_rate=%f decay_steps=%I decay_rate=%f%s>", s.initial,
                        (lua_Integer)s.decay_steps, s.decay_rate, s.staircase ? " staircase" : "");
        break;
    case LD_SCHED_COSINE:
        if (s.warmup)
            lua_pushfstring(L, "<CosineDecay initial_learning_rate=%f decay_steps=%I alpha=%f warmup_target=%f "
                            "warmup_steps=%I>", s.initial, (lua_Integer)s.decay_steps, s.alpha, s.warmup_target,
                            (lua_Integer)s.warmup_steps);
        else
            lua_pushfstring(L, "<CosineDecay initial_learning_rate=%f decay_steps=%I alpha=%f>", s.initial,
                            (lua_Integer)s.decay_steps, s.alpha);
        break;
    case LD_SCHED_INVERSE_TIME:
        lua_pushfstring(L, "<InverseTimeDecay initial_learning_rate=%f decay_steps=%I decay_rate=%f%s>", s.initial,
                        (lua_Integer)s.decay_steps, s.decay_rate, s.staircase ? " staircase" : "");
        break;
    case LD_SCHED_POLYNOMIAL:
        lua_pushfstring(L, "<PolynomialDecay initial_learning_rate=%f decay_steps=%I end_learning_rate=%f power=%f%s>",
                        s.initial, (lua_Integer)s.decay_steps, s.end_lr, s.power, s.cycle ? " cycle" : "");
        break;
    case LD_SCHED_COSINE_RESTARTS:
        lua_pushfstring(L, "<CosineDecayRestarts initial_learning_rate=%f first_decay_steps=%I t_mul=%f m_mul=%f "
                        "alpha=%f>", s.initial, (lua_Integer)s.decay_steps, s.t_mul, s.m_mul, s.alpha);
        break;
    default:
        lua_pushfstring(L, "<PiecewiseConstantDecay %d boundar%s>", s.n_bounds, s.n_bounds == 1 ? "y" : "ies");
    }
    return 1;
}

/* optim._state(opt, vars) -> {iterations=, slots={{s1, s2, s3}, ...}} (copies,
   ld_slot's order, nil where none), for checkpoints (BackupAndRestore) and
   for shipping a model to workers */
static int opt_state(lua_State *L) {
    lua_settop(L, 2);
    ld_optimizer *o = lb_check_optimizer(L, 1);
    ld_tensor **v;
    int n = lb_check_tensors(L, 2, 2, 0, &v);
    ld_tensor **s = lua_newuserdatauv(L, sizeof *s * (size_t)(LD_OPT_SLOTS * n + 1), 0);
    if (ld_optimizer_state_get(o, n, v, s)) return lb_engine_error(L, 1);
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, o->iterations); lua_setfield(L, -2, "iterations");
    if (o->accum_steps >= 2) { lua_pushinteger(L, o->accum_calls); lua_setfield(L, -2, "accum_calls"); }
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_createtable(L, LD_OPT_SLOTS, 0);
        for (int q = 0; q < LD_OPT_SLOTS; q++) {
            ld_tensor *t = s[q * n + i];
            if (!t) continue;
            ld_tensor *c = ld_clone(t);
            ld_tensor_release(t);
            lb_push_tensor(L, c, 0);
            lua_rawseti(L, -2, q + 1);
        }
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "slots");
    return 1;
}

/* optim._set_state(opt, vars, {iterations=, slots=, accum_calls=}) */
static int opt_set_state(lua_State *L) {
    lua_settop(L, 3);
    ld_optimizer *o = lb_check_optimizer(L, 1);
    ld_tensor **v;
    int n = lb_check_tensors(L, 2, 2, 0, &v);
    luaL_checktype(L, 3, LUA_TTABLE);
    lua_getfield(L, 3, "iterations");
    int64_t it = (int64_t)luaL_checkinteger(L, -1);
    lua_pop(L, 1);
    ld_tensor **s = lua_newuserdatauv(L, sizeof *s * (size_t)(LD_OPT_SLOTS * n + 1), 0);
    memset(s, 0, sizeof *s * (size_t)(LD_OPT_SLOTS * n + 1));
    lua_getfield(L, 3, "slots");
    if (lua_istable(L, -1)) {
        for (int i = 0; i < n; i++) {
            if (lua_geti(L, -1, i + 1) == LUA_TTABLE) {
                for (int q = 0; q < LD_OPT_SLOTS; q++) {
                    lua_geti(L, -1, q + 1);
                    s[q * n + i] = lua_isnil(L, -1) ? NULL : lb_check_tensor(L, -1);
                    lua_pop(L, 1);
                }
            }
            lua_pop(L, 1);
        }
    }
    if (ld_optimizer_state_set(o, it, n, v, s)) return luaL_error(L, "%s", ld_error());
    /* gradient accumulation's count of calls (Keras's _iterations); a state
       without it: the updates' calls, none pending */
    lua_getfield(L, 3, "accum_calls");
    int isint;
    lua_Integer calls = lua_tointegerx(L, -1, &isint);
    o->accum_calls = isint ? (int64_t)calls : it * (o->accum_steps >= 2 ? o->accum_steps : 0);
    return 0;
}

/* optim._finalize(opt, vars): Keras's finalize_variable_values (the end of fit) */
static int opt_finalize(lua_State *L) {
    lua_settop(L, 2);
    ld_optimizer *o = lb_check_optimizer(L, 1);
    ld_tensor **v;
    int n = lb_check_tensors(L, 2, 2, 0, &v);
    if (ld_optimizer_finalize(o, n, v)) return lb_engine_error(L, 1);
    return 0;
}


/* optim._config(opt) -> {name=, learning_rate=number|schedule table, momentum=, ...} */
static int opt_config(lua_State *L) {
    luaL_checkudata(L, 1, LB_OPTIMIZER_MT);
    int fn = lua_getiuservalue(L, 1, 1) == LUA_TFUNCTION;
    lua_pop(L, 1);
    if (fn) return luaL_error(L, "an optimizer whose learning rate is a Lua function cannot be sent to other processes; "
                                 "use a number or an optim.schedules.* schedule");
    ld_optimizer *o = lb_check_optimizer(L, 1);
    lua_newtable(L);
    lua_pushstring(L, ld_optimizer_name(o->kind)); lua_setfield(L, -2, "name");
    if (o->lr.kind == LD_SCHED_CONSTANT) lua_pushnumber(L, o->lr.initial);
    else push_schedule(L, &o->lr);
    lua_setfield(L, -2, "learning_rate");
    /* this optimizer's own options (Keras's get_config), then the base's */
    const char *const *own = own_opts[o->kind];
    if (in_list(own, "momentum")) { lua_pushnumber(L, o->momentum); lua_setfield(L, -2, "momentum"); }
    if (in_list(own, "beta_1")) { lua_pushnumber(L, o->beta1); lua_setfield(L, -2, "beta_1"); }
    if (in_list(own, "beta_2")) { lua_pushnumber(L, o->beta2); lua_setfield(L, -2, "beta_2"); }
    if (in_list(own, "epsilon")) { lua_pushnumber(L, o->epsilon); lua_setfield(L, -2, "epsilon"); }
    if (in_list(own, "rho")) { lua_pushnumber(L, o->rho); lua_setfield(L, -2, "rho"); }
    if (in_list(own, "nesterov")) { lua_pushboolean(L, o->nesterov); lua_setfield(L, -2, "nesterov"); }
    if (in_list(own, "amsgrad")) { lua_pushboolean(L, o->amsgrad); lua_setfield(L, -2, "amsgrad"); }
    if (in_list(own, "centered")) { lua_pushboolean(L, o->centered); lua_setfield(L, -2, "centered"); }
    if (in_list(own, "initial_accumulator_value")) {
        lua_pushnumber(L, o->initial_accumulator); lua_setfield(L, -2, "initial_accumulator_value");
    }
    if (o->kind == LD_OPT_FTRL) {
        static const char *const f[] = {"learning_rate_power", "l1_regularization_strength", "l2_regularization_strength",
                                        "l2_shrinkage_regularization_strength", "beta"};
        const float v[] = {o->lr_power, o->l1, o->l2, o->l2_shrinkage, o->ftrl_beta};
        for (int i = 0; i < 5; i++) { lua_pushnumber(L, v[i]); lua_setfield(L, -2, f[i]); }
    }
    lua_pushnumber(L, o->weight_decay); lua_setfield(L, -2, "weight_decay");
    if (o->clipnorm > 0) { lua_pushnumber(L, o->clipnorm); lua_setfield(L, -2, "clipnorm"); }
    if (o->global_clipnorm > 0) { lua_pushnumber(L, o->global_clipnorm); lua_setfield(L, -2, "global_clipnorm"); }
    if (o->clipvalue > 0) { lua_pushnumber(L, o->clipvalue); lua_setfield(L, -2, "clipvalue"); }
    if (o->use_ema) {
        lua_pushboolean(L, 1); lua_setfield(L, -2, "use_ema");
        lua_pushnumber(L, o->ema_momentum); lua_setfield(L, -2, "ema_momentum");
        if (o->ema_overwrite_frequency > 0) { lua_pushinteger(L, o->ema_overwrite_frequency); lua_setfield(L, -2, "ema_overwrite_frequency"); }
    }
    if (o->accum_steps >= 2) { lua_pushinteger(L, o->accum_steps); lua_setfield(L, -2, "gradient_accumulation_steps"); }
    if (o->loss_scale.on) {   /* a LossScaleOptimizer, with where its scale is */
        push_loss_scale(L, o);
        lua_setfield(L, -2, "loss_scale");
    }
    return 1;
}

/* what every optimizer's help says besides its own line */
#define COMMON_DOC                                                                                                     \
    "\n\nEvery optimizer also takes Keras's weight_decay (decoupled, as Keras 3's: w -= lr * wd * w before each "    \
    "step) and one of clipnorm (each gradient to that norm on its own), " \
    "global_clipnorm (all of them by their joint norm) or clipvalue (each element to [-v, v]), applied to the "          \
    "gradients summed across replicas; gradient_accumulation_steps=k (k >= 2) applies the mean of k calls' gradients "    \
    "every k-th call (a batch k times larger, in k pieces); use_ema=true keeps each variable's moving average "          \
    "(ema_momentum=0.99), written into the variables every ema_overwrite_frequency steps and when fit ends; "            \
    "loss_scale_factor=f multiplies the loss by f and divides the gradients by it. An unknown option is an error."
static const char *const docs[] = {
    "SGD", "optim.SGD{learning_rate=0.01, momentum=0, nesterov=false, weight_decay=0, clipnorm=, global_clipnorm=, clipvalue=}\n\nStochastic gradient descent (Keras' rule)." COMMON_DOC,
    "Adam", "optim.Adam{learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=false}\n\nAdam (Keras' rule); amsgrad divides by the running maximum of v (a third slot per variable)." COMMON_DOC,
    "AdamW", "optim.AdamW{learning_rate=0.001, weight_decay=0.004, beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=false}\n\nAdam with decoupled weight decay." COMMON_DOC,
    "RMSprop", "optim.RMSprop{learning_rate=0.001, rho=0.9, momentum=0, epsilon=1e-7, centered=false}\n\nRMSprop (Keras' rule); centered divides by the variance of the gradient (its mean square less its squared mean, a third slot per variable)." COMMON_DOC,
    "Adagrad", "optim.Adagrad{learning_rate=0.001, initial_accumulator_value=0.1, epsilon=1e-7}\n\nAdagrad (Keras' rule): "
               "each element's rate divided by the root of its gradients' squares summed (from initial_accumulator_value)." COMMON_DOC,
    "Adamax", "optim.Adamax{learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7}\n\nAdamax (Keras' rule): Adam "
              "with the infinity norm in v's place." COMMON_DOC,
    "Nadam", "optim.Nadam{learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7}\n\nNadam (Keras 3's rule): Adam "
             "with Nesterov's momentum (its momentum schedule b1 (1 - 0.96^t / 2))." COMMON_DOC,
    "Lion", "optim.Lion{learning_rate=0.001, beta_1=0.9, beta_2=0.99}\n\nLion (Keras' rule): steps of the sign of an "
            "interpolated momentum, one slot per variable; use a rate 3-10x below Adam's." COMMON_DOC,
    "Adadelta", "optim.Adadelta{learning_rate=0.001, rho=0.95, epsilon=1e-7}\n\nAdadelta (Keras' rule): each step is "
                "the gradient times the root of the steps' mean square over the root of the gradients' (two slots per "
                "variable); Keras's rate multiplies it (1.0 is the paper's)." COMMON_DOC,
    "Ftrl", "optim.Ftrl{learning_rate=0.001, learning_rate_power=-0.5, initial_accumulator_value=0.1, "
            "l1_regularization_strength=0, l2_regularization_strength=0, l2_shrinkage_regularization_strength=0, beta=0}"
            "\n\nFollow The Regularized Leader (Keras' rule, McMahan et al. 2013), for wide, sparse linear models: "
            "an accumulator of squared gradients and a linear term per variable; l1 sets small weights to exactly 0." COMMON_DOC,
    "Optimizer:apply_gradients", "opt:apply_gradients(grads, vars)\n\nOne update of each variable by its gradient (tables in the same order; nil gradients are skipped).",
    NULL};

int lb_open_optim(lua_State *L) {
    luaL_newmetatable(L, LB_OPTIMIZER_MT);
    {
        static const char *const f[] = {"learning_rate", "lr", "iterations", "name", "apply_gradients", NULL};
        lua_newtable(L);
        for (int i = 0; f[i]; i++) { lua_pushstring(L, f[i]); lua_rawseti(L, -2, i + 1); }
        lua_setfield(L, -2, "__fields");   /* computed fields, for completion */
    }

    lua_newtable(L);                                   /* optim.Optimizer */
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, "ldist.Optimizer.methods");
    lua_pushcclosure(L, opt_index, 1);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, opt_newindex); lua_setfield(L, -2, "__newindex");
    lua_pushcfunction(L, opt_tostring); lua_setfield(L, -2, "__tostring");
    lua_pushcfunction(L, opt_gc); lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
    luaL_newmetatable(L, "ldist.Schedule");
    lua_pushcfunction(L, sched_call); lua_setfield(L, -2, "__call");
    lua_pushcfunction(L, sched_tostring); lua_setfield(L, -2, "__tostring");
    lua_pop(L, 1);
    static const luaL_Reg f[] = {{"SGD", opt_sgd}, {"Adam", opt_adam}, {"AdamW", opt_adamw},
                                 {"RMSprop", opt_rmsprop}, {"Adagrad", opt_adagrad}, {"Adamax", opt_adamax}, {"Nadam", opt_nadam},
                                 {"Lion", opt_lion}, {"Adadelta", opt_adadelta}, {"Ftrl", opt_ftrl}, {"_state", opt_state}, {"_config", opt_config}, {"_accepts", opt_accepts}, {"_set_state", opt_set_state}, {"_finalize", opt_finalize},
                                 {"_loss_scale", opt_loss_scale}, {"_unscale", opt_unscale}, {NULL, NULL}};
    luaL_newlib(L, f);
    lua_getfield(L, LUA_REGISTRYINDEX, "ldist.Optimizer.methods");
    lua_setfield(L, -2, "Optimizer");
    lua_pushinteger(L, LD_OPT_SLOTS);   /* slots per variable in _state's tables */
    lua_setfield(L, -2, "_n_slots");
    lua_pushcfunction(L, opt_apply);
    lua_setfield(L, -2, "_apply_gradients");
    static const luaL_Reg s[] = {{"ExponentialDecay", sched_exp}, {"CosineDecay", sched_cos},
                                 {"PiecewiseConstantDecay", sched_pw}, {"InverseTimeDecay", sched_inv},
                                 {"PolynomialDecay", sched_poly}, {"CosineDecayRestarts", sched_restarts},
                                 {NULL, NULL}};
    luaL_newlib(L, s);
    lua_setfield(L, -2, "schedules");
    lb_set_docs(L, "optim.", docs);
    return 1;
}
