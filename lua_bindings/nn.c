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
#include "lbind.h"
#include "ld_nn.h"
#include "ld_optim.h"
#include "ld_autograd.h"
#include "ld_ops.h"
#include "ld_io.h"
#include "ld_strategy.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#define LAYER_MT "ldist.Layer"
#define MODEL_MT "ldist.Model"
#define LOSS_MT "ldist.Loss"

/* ================================================================ helpers */
static ld_layer *check_layer(lua_State *L, int i) {
    ld_layer **p = luaL_checkudata(L, i, LAYER_MT);
    return *p;
}
static ld_model *check_model(lua_State *L, int i) {
    ld_model **p = luaL_checkudata(L, i, MODEL_MT);
    return *p;
}

static int push_layer(lua_State *L, ld_layer *l) {
    if (!l) return lb_engine_error(L, 1);
    ld_layer **p = lua_newuserdatauv(L, sizeof *p, 1);
    *p = l;
    luaL_setmetatable(L, LAYER_MT);
    return 1;
}

static ld_activation get_act(lua_State *L, int idx) {
    ld_activation a = LD_ACT_NONE;
    if (lua_isnoneornil(L, idx)) return a;
    if (ld_activation_from_name(luaL_checkstring(L, idx), &a)) lb_engine_error(L, idx);
    return a;
}

/* options: either a table at idx, or nothing */
static int opt_field(lua_State *L, int opts, const char *k) {
    if (!opts || !lua_istable(L, opts)) { lua_pushnil(L); return LUA_TNIL; }
    return lua_getfield(L, opts, k);
}

static int opt_bool(lua_State *L, int opts, const char *k, int def) {
    int t = opt_field(L, opts, k);
    int v = t == LUA_TNIL ? def : lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

/* a size given as n or {h, w} */
static void opt_pair(lua_State *L, int idx, int *a, int *b, int def) {
    if (lua_isnoneornil(L, idx)) { *a = *b = def; return; }
    if (lua_istable(L, idx)) {
        lua_geti(L, idx, 1); lua_geti(L, idx, 2);
        *a = (int)luaL_checkinteger(L, -2);
        *b = (int)luaL_optinteger(L, -1, *a);
        lua_pop(L, 2);
        return;
    }
    *a = *b = (int)luaL_checkinteger(L, idx);
}

/* ================================================================ layer constructors */
/* nn.Dense(units, activation) or nn.Dense{units=, activation=, use_bias=} */
static int nn_dense(lua_State *L) {
    int opts = 0;
    lua_Integer units;
    ld_activation act;
    if (lua_istable(L, 1)) {
        opts = 1;
        opt_field(L, 1, "units");
        if (lua_isnil(L, -1)) lua_geti(L, 1, 1);
        units = luaL_checkinteger(L, -1);
        opt_field(L, 1, "activation");
        act = get_act(L, lua_gettop(L));
        lua_pop(L, 3);
    } else {
        units = luaL_checkinteger(L, 1);
        if (lua_istable(L, 2)) {
            opts = 2;
            opt_field(L, 2, "activation");
            act = get_act(L, lua_gettop(L));
            lua_pop(L, 1);
        } else act = get_act(L, 2);
        if (lua_istable(L, 3)) opts = 3;
    }
    if (units < 1) return luaL_argerror(L, 1, "units must be a positive integer");
    return push_layer(L, ld_dense_new(units, act, opt_bool(L, opts, "use_bias", 1)));
}

static int nn_flatten(lua_State *L) { return push_layer(L, ld_flatten_new()); }

static int nn_dropout(lua_State *L) {
    double r;
    if (lua_istable(L, 1)) { lua_getfield(L, 1, "rate"); r = luaL_checknumber(L, -1); lua_pop(L, 1); }
    else r = luaL_checknumber(L, 1);
    if (!(r >= 0 && r < 1)) return luaL_argerror(L, 1, "rate must be in [0, 1)");
    return push_layer(L, ld_dropout_new((float)r));
}

/* nn.Conv2D(filters, kernel_size, {strides=1, padding="valid", activation=, use_bias=true})
   (the third argument may also be the activation's name) */
static int nn_conv2d(lua_State *L) {
    lua_Integer filters = luaL_checkinteger(L, 1);
    int kh, kw, sh = 1, sw = 1, same = 0, opts = 0;
    opt_pair(L, 2, &kh, &kw, 3);
    ld_activation act = LD_ACT_NONE;
    if (lua_isstring(L, 3)) act = get_act(L, 3);
    else if (lua_istable(L, 3)) opts = 3;
    if (opts) {
        opt_field(L, opts, "strides");
        opt_pair(L, lua_gettop(L), &sh, &sw, 1);
        lua_pop(L, 1);
        opt_field(L, opts, "padding");
        const char *p = luaL_optstring(L, -1, "valid");
        if (!strcmp(p, "same")) same = 1;
        else if (strcmp(p, "valid")) return luaL_argerror(L, opts, "padding must be \"valid\" or \"same\"");
        lua_pop(L, 1);
        opt_field(L, opts, "activation");
        act = get_act(L, lua_gettop(L));
        lua_pop(L, 1);
    }
    if (filters < 1 || kh < 1 || kw < 1) return luaL_argerror(L, 1, "filters and kernel size must be positive");
    return push_layer(L, ld_conv2d_new(filters, kh, kw, sh, sw, same, act, opt_bool(L, opts, "use_bias", 1)));
}

/* nn.MaxPool2D(pool_size=2, {strides=pool_size}) */
static int nn_maxpool(lua_State *L) {
    int kh, kw, sh, sw;
    opt_pair(L, 1, &kh, &kw, 2);
    sh = kh; sw = kw;
    if (lua_istable(L, 2)) {
        lua_getfield(L, 2, "strides");
        if (!lua_isnil(L, -1)) opt_pair(L, lua_gettop(L), &sh, &sw, kh);
        lua_pop(L, 1);
    }
    return push_layer(L, ld_maxpool2d_new(kh, kw, sh, sw));
}

static int nn_activation(lua_State *L) { return push_layer(L, ld_activation_layer_new(get_act(L, 1))); }

/* nn.Reshape{d1, d2, ...} or nn.Reshape(d1, d2, ...): the engine checks the
   entries as t:reshape does (one -1, no other negative, no overflow) */
static int nn_reshape(lua_State *L) {
    int64_t s[LD_MAX_DIMS];
    int n = 0;
    if (lua_istable(L, 1)) {
        lua_Integer len = luaL_len(L, 1);
        if (len > LD_MAX_DIMS - 1)
            return luaL_argerror(L, 1, lua_pushfstring(L, "Reshape target must have 1 to %d dimensions", LD_MAX_DIMS - 1));
        for (lua_Integer i = 1; i <= len; i++) {
            lua_geti(L, 1, i);
            int ok;
            s[n++] = lua_tointegerx(L, -1, &ok);
            if (!ok) return luaL_argerror(L, 1, "shape entries must be integers");
            lua_pop(L, 1);
        }
    } else {
        if (lua_gettop(L) > LD_MAX_DIMS - 1)
            return luaL_argerror(L, LD_MAX_DIMS, lua_pushfstring(L, "Reshape target must have 1 to %d dimensions", LD_MAX_DIMS - 1));
        for (int i = 1; i <= lua_gettop(L); i++) s[n++] = luaL_checkinteger(L, i);
    }
    return push_layer(L, ld_reshape_layer_new(n, s));
}

/* ================================================================ layer methods */
static void read_training(lua_State *L, int idx, int *training) {
    *training = 0;
    if (lua_istable(L, idx)) { lua_getfield(L, idx, "training"); *training = lua_toboolean(L, -1); lua_pop(L, 1); }
    else if (lua_isboolean(L, idx)) *training = lua_toboolean(L, idx);
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

static ld_tensor *layer_fwd(void *l, ld_tensor *x, int t) { return ld_layer_forward(l, x, t); }
static ld_tensor *model_fwd(void *m, ld_tensor *x, int t) { return ld_model_forward(m, x, t); }

static int layer_call(lua_State *L) { return call_forward(L, check_layer(L, 1), layer_fwd); }

static void push_vars(lua_State *L, ld_tensor **v, int n) {
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lb_push_tensor(L, ld_tensor_retain(v[i]), 0);
        lua_rawseti(L, -2, i + 1);
    }
}

static int layer_index(lua_State *L) {
    ld_layer *l = check_layer(L, 1);
    const char *k = luaL_checkstring(L, 2);
    if (!strcmp(k, "name")) { lua_pushstring(L, l->name); return 1; }
    if (!strcmp(k, "kind")) { lua_pushstring(L, ld_layer_kind_name(l->kind)); return 1; }
    if (!strcmp(k, "built")) { lua_pushboolean(L, l->built); return 1; }
    if (!strcmp(k, "input_shape") && l->built) {   /* without the batch axis, as Keras's (minus None) */
        lua_createtable(L, l->in_ndim, 0);
        for (int i = 0; i < l->in_ndim; i++) { lua_pushinteger(L, l->in_shape[i]); lua_rawseti(L, -2, i + 1); }
        return 1;
    }
    if (!strcmp(k, "trainable_variables") || !strcmp(k, "weights")) { push_vars(L, l->vars, l->n_vars); return 1; }
    if (!strcmp(k, "kernel") && l->n_vars > 0) { lb_push_tensor(L, ld_tensor_retain(l->vars[0]), 0); return 1; }
    if (!strcmp(k, "bias") && l->n_vars > 1) { lb_push_tensor(L, ld_tensor_retain(l->vars[1]), 0); return 1; }
    if (!strcmp(k, "units") && l->kind == LD_LAYER_DENSE) { lua_pushinteger(L, l->units); return 1; }
    if (!strcmp(k, "activation")) { lua_pushstring(L, ld_activation_name(l->act)); return 1; }
    if (!strcmp(k, "count_params")) { lua_pushinteger(L, ld_layer_param_count(l)); return 1; }
    return 0;
}

static int layer_tostring(lua_State *L) {
    ld_layer *l = check_layer(L, 1);
    lua_pushfstring(L, "<%s layer '%s'%s>", ld_layer_kind_name(l->kind), l->name, l->built ? "" : " (not built)");
    return 1;
}

static int layer_gc(lua_State *L) {
    ld_layer **p = luaL_checkudata(L, 1, LAYER_MT);
    ld_layer_release(*p);
    *p = NULL;
    return 0;
}

/* ================================================================ Sequential */
static int model_add_layer(lua_State *L, int model_idx, int layer_idx) {
    ld_model *m = check_model(L, model_idx);
    ld_layer *l = check_layer(L, layer_idx);
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i] == l) return luaL_argerror(L, layer_idx, "this layer is already in the model");
    if (ld_model_add(m, l)) return lb_engine_error(L, layer_idx);
    lua_getiuservalue(L, model_idx, 1);
    lua_getfield(L, -1, "layers");
    lua_pushvalue(L, layer_idx);
    lua_rawseti(L, -2, (lua_Integer)luaL_len(L, -2) + 1);
    lua_pop(L, 2);
    return 0;
}

/* ---- a model builds its variables under the strategy it was created in ----
   distribute._on_model_created (lua/60_distribute.lua) stores the devices
   that strategy mirrors variables on as the model's _variable_devices; the
   first call or build places the variables there wherever it happens (inside
   the scope or not), as Keras builds under model.distribute_strategy. */
static int model_is_built(const ld_model *m) { return m->n_layers > 0 && m->layers[m->n_layers - 1]->built; }

static int build_placed(lua_State *L, int mi, ld_model *m, int ndim, const int64_t *shape) {
    if (model_is_built(m)) return LD_OK;
    lua_getiuservalue(L, mi, 1);
    lua_getfield(L, -1, "_variable_devices");
    if (!lua_istable(L, -1)) { lua_pop(L, 2); return ndim >= 0 ? ld_model_build(m, ndim, shape) : LD_OK; }
    ld_device *devs[LD_MAX_LOGICAL];
    int n = lb_check_devices(L, lua_gettop(L), devs);
    lua_pop(L, 2);
    if (ld_mirror_set_devices(n, devs)) return ld_error_status();
    int st = ld_model_build(m, ndim, shape);
    lb_call_hook(L, "distribute", "_place_variables", 0);   /* back to the open scope's placement */
    return st;
}

/* build for an input x (batch axis first) */
static void build_for(lua_State *L, int mi, ld_model *m, const ld_tensor *x) {
    if (model_is_built(m) || x->ndim < 1) return;
    if (build_placed(L, mi, m, x->ndim - 1, x->shape + 1)) lb_engine_error(L, 2);
}

/* nn.Sequential{layer, layer, ..., name=} */
static int nn_sequential(lua_State *L) {
    const char *name = NULL;
    if (lua_istable(L, 1)) { lua_getfield(L, 1, "name"); name = lua_tostring(L, -1); lua_pop(L, 1); }
    ld_model **p = lua_newuserdatauv(L, sizeof *p, 1);
    *p = NULL;
    luaL_setmetatable(L, MODEL_MT);
    int mi = lua_gettop(L);
    lua_createtable(L, 0, 4);
    lua_newtable(L);
    lua_setfield(L, -2, "layers");
    lua_setiuservalue(L, mi, 1);
    *p = ld_model_new(name);
    if (!*p) return lb_engine_error(L, 0);
    if (lua_istable(L, 1)) {
        lua_Integer n = luaL_len(L, 1);
        for (lua_Integer i = 1; i <= n; i++) {
            lua_geti(L, 1, i);
            if (!luaL_testudata(L, -1, LAYER_MT))
                return luaL_error(L, "bad argument #1 to 'Sequential' (item %d is a %s, not a layer)", (int)i, luaL_typename(L, -1));
            model_add_layer(L, mi, lua_gettop(L));
            lua_pop(L, 1);
        }
    }
    lua_settop(L, mi);
    lua_pushvalue(L, mi);
    lb_call_hook(L, "distribute", "_on_model_created", 1);
    return 1;
}

static int model_add(lua_State *L) { model_add_layer(L, 1, 2); lua_settop(L, 1); return 1; }

static int model_call(lua_State *L) {
    ld_model *m = check_model(L, 1);
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

static int model_summary_text(lua_State *L) {
    ld_model *m = check_model(L, 1);
    char buf[8192];
    ld_model_summary(m, buf, sizeof buf);
    lua_pushstring(L, buf);
    return 1;
}

static ld_loss *check_loss(lua_State *L, int i) { return luaL_checkudata(L, i, LOSS_MT); }
static ld_tensor *reduce_weighted(const ld_loss *l, ld_tensor *pw);

/* The forward and backward half of a step, shared by train_step and _grads:
   forward under a tape, loss, gradients of every trainable variable. Raises
   on failure. On return vars/grads point into a userdata left on the stack
   (grads are new references), and lv/pred are cut from their graphs. */
typedef struct { int n; ld_tensor **vars, **grads, *lv, *pred; } step_result;

/* The step's loss: with per-example weights w ([batch], or NULL), the
   weighted reduction of the per-example losses (Keras's sample_weight). */
static ld_tensor *step_loss(ld_loss *loss, ld_tensor *y, ld_tensor *pred, ld_tensor *w) {
    if (!w) return ld_loss_compute(loss, y, pred);
    ld_loss per_l = *loss;
    per_l.reduction_sum = 2;
    ld_tensor *per = ld_loss_compute(&per_l, y, pred);
    if (!per) return NULL;
    if (per->ndim != 1 || w->ndim != 1 || per->shape[0] != w->shape[0]) {
        char b1[64], b2[64];
        ld_fail(LD_ESHAPE, "sample weights of shape %s for %s per-example losses (one weight per example expected)",
                ld_shape_str(w, b1, sizeof b1), ld_shape_str(per, b2, sizeof b2));
        ld_tensor_release(per);
        return NULL;
    }
    ld_tensor *wd = w->storage->device == per->storage->device ? ld_tensor_retain(w) : ld_to_device(w, per->storage->device);
    ld_tensor *pw = wd ? ld_mul(per, wd) : NULL;
    ld_tensor_release(per);
    ld_tensor_release(wd);
    if (!pw) return NULL;
    ld_tensor *v = loss->reduction_sum == 2 ? ld_tensor_retain(pw) : reduce_weighted(loss, pw);
    ld_tensor_release(pw);
    return v;
}

static void forward_backward(lua_State *L, ld_model *m, ld_tensor *x, ld_tensor *y, ld_loss *loss, int defer,
                             ld_tensor *w, step_result *r) {
    ld_tape *tape = ld_tape_new(0);
    if (!tape) { lb_engine_error(L, 0); return; }
    ld_tape_push(tape);
    ld_tensor *pred = ld_model_forward(m, x, 1);
    ld_tensor *lv = pred ? step_loss(loss, y, pred, w) : NULL;
    ld_tape_pop(tape);
    int n = ld_model_variables(m, NULL, 0), st = lv ? LD_OK : ld_error_status();
    ld_tensor **vars = lua_newuserdatauv(L, sizeof *vars * (size_t)(n ? 2 * n : 1), 0);
    ld_tensor **grads = vars + n;
    if (!st) {
        ld_model_variables(m, vars, n);
        ld_defer_weight_grads(defer);
        st = ld_tape_gradient(tape, lv, n, vars, grads);
        ld_defer_weight_grads(0);
    }
    ld_tape_free(tape);
    if (st) { ld_tensor_release(lv); ld_tensor_release(pred); luaL_error(L, "%s", ld_error()); return; }
    /* the values without their graphs: callers only read them */
    if (lv->grad_fn) { ld_node_release(lv->grad_fn); lv->grad_fn = NULL; }
    if (pred->grad_fn) { ld_node_release(pred->grad_fn); pred->grad_fn = NULL; }
    *r = (step_result){n, vars, grads, lv, pred};
}

/* model:train_step(x, y, loss, optimizer) -> loss value, predictions
   One step in C: forward under a tape, loss, backward, update. */
static int model_train_step(lua_State *L) {
    ld_model *m = check_model(L, 1);
    ld_tensor *x = lb_check_tensor(L, 2), *y = lb_check_tensor(L, 3);
    ld_loss *loss = check_loss(L, 4);
    ld_optimizer *opt = lb_check_optimizer(L, 5);
    ld_tensor *w = lua_isnoneornil(L, 6) ? NULL : lb_check_tensor(L, 6);
    build_for(L, 1, m, x);
    step_result r;
    forward_backward(L, m, x, y, loss, 0, w, &r);
    double value = 0;
    int st = ld_tensor_item(r.lv, &value);
    if (!st) st = ld_optimizer_apply(opt, r.n, r.grads, r.vars);
    for (int i = 0; i < r.n; i++) ld_tensor_release(r.grads[i]);
    ld_tensor_release(r.lv);
    if (st) { ld_tensor_release(r.pred); return luaL_error(L, "%s", ld_error()); }
    lua_pushnumber(L, value);
    lb_push_tensor(L, r.pred, 0);
    return 2;
}

/* model:_grads(x, y, loss [, defer]) -> loss tensor, gradients (table), predictions
   The forward and backward half of a training step, for strategies that
   reduce gradients across replicas before applying them. Nothing here waits
   for the device: the values are queued on a logical device's executor.
   defer: dense kernels' gradients may be left as products for the
   collective to compute (ld_defer_weight_grads). */
static int model_grads(lua_State *L) {
    ld_model *m = check_model(L, 1);
    ld_tensor *x = lb_check_tensor(L, 2), *y = lb_check_tensor(L, 3);
    ld_loss *loss = check_loss(L, 4);
    ld_tensor *w = lua_isnoneornil(L, 6) ? NULL : lb_check_tensor(L, 6);
    build_for(L, 1, m, x);
    step_result r;
    forward_backward(L, m, x, y, loss, lua_toboolean(L, 5), w, &r);
    lb_push_tensor(L, r.lv, 0);
    lua_createtable(L, r.n, 0);
    for (int i = 0; i < r.n; i++) { lb_push_tensor(L, r.grads[i], 0); lua_rawseti(L, -2, i + 1); }
    lb_push_tensor(L, r.pred, 0);
    return 3;
}

/* model:save_weights(path) / model:load_weights(path): safetensors keyed by variable name */
static int model_save_weights(lua_State *L) {
    ld_model *m = check_model(L, 1);
    const char *path = luaL_checkstring(L, 2);
    int n = ld_model_variables(m, NULL, 0);
    if (n == 0) return luaL_error(L, "model has no weights yet (call it on data or model:build(shape) first)");
    ld_tensor **v = lua_newuserdatauv(L, sizeof *v * (size_t)n, 0);
    const char **names = lua_newuserdatauv(L, sizeof *names * (size_t)n, 0);
    ld_model_variables(m, v, n);
    for (int i = 0; i < n; i++) names[i] = lua_pushfstring(L, "%d/%s", i, v[i]->name ? v[i]->name : "var");
    const char *meta[] = {"format", "ldist", "model", m->name};
    if (ld_save_safetensors(path, n, names, v, 2, meta)) return lb_engine_error(L, 2);
    lua_settop(L, 1);
    return 1;
}

/* load_weights' check of a file's header against the model, made before any
   tensor is allocated or read: one entry per variable, named "<index>/...",
   with the variable's shape and dtype. F16 and BF16 files load into float32
   variables on purpose (half-precision checkpoints are common); any other
   difference of dtype is refused. slot[i]: the entry for variable i. */
typedef struct { ld_tensor **v; int n; int *slot; } weights_check;

static const char *file_dtype_of(ld_dtype dt) {
    switch (dt) {
    case LD_F32: return "F32";
    case LD_I32: return "I32";
    case LD_I64: return "I64";
    case LD_U8: return "U8";
    default: return "?";
    }
}

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
        int half = v->dtype == LD_F32 && (!strcmp(f->dtype, "F16") || !strcmp(f->dtype, "BF16"));
        if (!half && strcmp(f->dtype, file_dtype_of(v->dtype)))
            return ld_fail(LD_ETYPE, "weight %d (%s) is %s in '%s' but %s in the model (only F16 and BF16 are "
                           "converted, into float32)", i, vn, f->dtype, path, ld_dtype_name(v->dtype));
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
    lua_settop(L, 1);
    return 1;
}

static int model_index(lua_State *L) {
    ld_model *m = check_model(L, 1);
    /* C methods first */
    lua_pushvalue(L, 2);
    lua_rawget(L, lua_upvalueindex(1));
    if (!lua_isnil(L, -1)) return 1;
    lua_pop(L, 1);
    if (lua_type(L, 2) == LUA_TSTRING) {
        const char *k = lua_tostring(L, 2);
        if (!strcmp(k, "trainable_variables") || !strcmp(k, "weights") || !strcmp(k, "variables")) return model_vars(L, m);
        if (!strcmp(k, "name")) { lua_pushstring(L, m->name); return 1; }
        if (!strcmp(k, "built")) { lua_pushboolean(L, model_is_built(m)); return 1; }
    }
    /* per-model state (compile's settings, history) */
    lua_getiuservalue(L, 1, 1);
    lua_pushvalue(L, 2);
    lua_rawget(L, -2);
    if (!lua_isnil(L, -1)) return 1;
    lua_pop(L, 2);
    /* methods added in Lua (nn.Model) */
    lua_pushvalue(L, 2);
    lua_rawget(L, lua_upvalueindex(2));
    return 1;
}

static int model_newindex(lua_State *L) {
    check_model(L, 1);
    lua_getiuservalue(L, 1, 1);
    lua_pushvalue(L, 2);
    lua_pushvalue(L, 3);
    lua_rawset(L, -3);
    return 0;
}

static int model_tostring(lua_State *L) {
    ld_model *m = check_model(L, 1);
    lua_pushfstring(L, "<Sequential model '%s' with %d layers>", m->name, m->n_layers);
    return 1;
}

static int model_gc(lua_State *L) {
    ld_model **p = luaL_checkudata(L, 1, MODEL_MT);
    ld_model_free(*p);
    *p = NULL;
    return 0;
}

/* ================================================================ losses */
static int loss_new(lua_State *L, ld_loss_kind kind) {
    ld_loss *l = lua_newuserdatauv(L, sizeof *l, 0);
    memset(l, 0, sizeof *l);
    l->kind = kind;
    if (lua_istable(L, 1)) {
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

/* Keras 3's squeeze_or_expand_to_same_rank (keras/src/losses/loss.py) for
   per-example losses and sample weights: when the ranks differ by one and
   the longer one ends in 1, that 1 is dropped, or a rank-1 other side gets
   one. Replaces the tensors at slots ia and ib (reshapes: tape-aware). */
static void same_rank(lua_State *L, int ia, int ib) {
    for (int pass = 0; pass < 2; pass++) {
        int ix = pass ? ib : ia, iy = pass ? ia : ib;      /* x: the longer one */
        ld_tensor *x = lb_test_tensor(L, ix), *y = lb_test_tensor(L, iy);
        if (x->ndim != y->ndim + 1 || x->shape[x->ndim - 1] != 1) continue;
        int64_t s[LD_MAX_DIMS];
        if (y->ndim == 1) {                                 /* y [n] -> [n, 1] */
            s[0] = y->shape[0], s[1] = 1;
            lb_push_tensor(L, ld_reshape_op(y, 2, s), 0);
            lua_replace(L, iy);
        } else {                                            /* x [..., 1] -> [...] */
            memcpy(s, x->shape, sizeof(int64_t) * (size_t)(x->ndim - 1));
            lb_push_tensor(L, ld_reshape_op(x, x->ndim - 1, s), 0);
            lua_replace(L, ix);
        }
        return;
    }
}

/* The reduction of weighted per-example losses pw (w * l), as Keras 3's
   reduce_weighted_values: "sum" sum(pw); "sum_over_batch_size" sum(pw) /
   number of losses (not the sum of the weights), that number scaled to the
   global batch in a replica of a synchronous strategy, as the unweighted
   loss is (ld_nn.c). A new reference, or NULL with the engine's error. */
static ld_tensor *reduce_weighted(const ld_loss *l, ld_tensor *pw) {
    int64_t n = ld_tensor_numel(pw);
    ld_tensor *sum = ld_sum(pw, LD_ALL_AXES, 0);
    if (!sum || l->reduction_sum == 1) return sum;
    double denom = (double)n;
    const ld_replica_ctx *c = ld_replica_get();
    if (c && c->n > 1 && c->global_batch > 0 && pw->ndim > 0 && pw->shape[0] > 0)
        denom = (double)n / (double)pw->shape[0] * c->global_batch;
    ld_tensor *v = ld_mul_scalar(sum, (float)(1.0 / (denom > 0 ? denom : 1.0)));
    ld_tensor_release(sum);
    return v;
}

/* loss(y_true, y_pred [, sample_weight]). With sample_weight (a number or a
   tensor broadcast against the per-example losses), as Keras 3's
   reduce_weighted_values: "none" gives w * l; "sum" sum(w * l);
   "sum_over_batch_size" sum(w * l) / number of weighted losses (not the sum
   of the weights). In a replica of a synchronous strategy that number is
   scaled to the global batch, as the unweighted loss is (ld_nn.c). */
static int loss_call(lua_State *L) {
    ld_loss *l = check_loss(L, 1);
    lua_settop(L, 4);                                      /* 4: sample_weight or nil */
    ld_tensor *yt = lb_to_tensor(L, 2, l->kind == LD_LOSS_SPARSE_CCE ? LD_I64 : LD_F32);
    lb_push_tensor(L, yt, 0);
    ld_tensor *yp = lb_to_tensor(L, 3, LD_F32);
    lb_push_tensor(L, yp, 0);
    if (lua_isnil(L, 4)) {
        ld_tensor *v = ld_loss_compute(l, yt, yp);
        if (!v) return luaL_error(L, "%s", ld_error());
        lb_push_tensor(L, v, 0);
        return 1;
    }
    if (!lb_test_tensor(L, 4) && !lua_isnumber(L, 4) && !lua_istable(L, 4))
        return luaL_error(L, "bad argument #3 to 'loss' (sample_weight must be a number or a tensor, got %s)", luaL_typename(L, 4));
    lb_push_tensor(L, lb_to_tensor(L, 4, LD_F32), 3);     /* 7: the weights */
    ld_loss per_l = *l;
    per_l.reduction_sum = 2;                               /* per-example losses */
    ld_tensor *per = ld_loss_compute(&per_l, yt, yp);
    if (!per) return luaL_error(L, "%s", ld_error());
    lb_push_tensor(L, per, 0);                             /* 8 */
    ld_tensor *w = lb_test_tensor(L, 7);
    if (w->storage->device != per->storage->device) {     /* weights made on the host, losses on a GPU */
        lb_push_tensor(L, ld_to_device(w, per->storage->device), 3);
        lua_replace(L, 7);
    }
    same_rank(L, 8, 7);
    ld_tensor *pw = ld_mul(lb_test_tensor(L, 8), lb_test_tensor(L, 7));
    if (!pw) {
        char b1[64], b2[64];
        return luaL_error(L, "bad argument #3 to 'loss' (sample_weight %s does not broadcast against the losses %s)",
                          ld_shape_str(lb_test_tensor(L, 7), b1, sizeof b1), ld_shape_str(lb_test_tensor(L, 8), b2, sizeof b2));
    }
    lb_push_tensor(L, pw, 0);
    /* Keras returns a scalar or an empty loss unreduced */
    int64_t n = ld_tensor_numel(pw);
    if (l->reduction_sum == 2 || pw->ndim == 0 || (pw->ndim == 1 && n == 0)) return 1;
    lb_push_tensor(L, reduce_weighted(l, pw), 0);
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
    if (!strcmp(k, "sparse")) { lua_pushboolean(L, l->kind == LD_LOSS_SPARSE_CCE); return 1; }
    return 0;
}

/* nn._count_correct(y_true, y_pred, sparse) -> number of correct rows */
static int nn_count_correct(lua_State *L) {
    ld_tensor *yt = lb_check_tensor(L, 1), *yp = lb_check_tensor(L, 2);
    int64_t c;
    if (ld_count_correct(yt, yp, lua_toboolean(L, 3), &c)) return lb_engine_error(L, 1);
    lua_pushinteger(L, c);
    return 1;
}

static const char *const nn_docs[] = {
    "Dense", "nn.Dense(units, activation) or nn.Dense{units=, activation=, use_bias=true}\n\n"
             "A fully connected layer: activation(x @ kernel + bias) on the last axis.\n"
             "Kernel glorot_uniform, bias zeros (Keras' defaults). Activations: relu, sigmoid, tanh, softmax, gelu.",
    "Flatten", "nn.Flatten()\n\nReshape [batch, ...] to [batch, features].",
    "Dropout", "nn.Dropout(rate)\n\nDuring training, zero a fraction `rate` of the inputs and scale the rest by 1/(1-rate).",
    "Conv2D", "nn.Conv2D(filters, kernel_size, {strides=1, padding=\"valid\"|\"same\", activation=})\n\n"
              "2-d convolution over NHWC images [batch, height, width, channels]; kernel HWIO.",
    "MaxPool2D", "nn.MaxPool2D(pool_size=2, {strides=pool_size})\n\nMaximum over windows of NHWC images.",
    "MaxPooling2D", "nn.MaxPooling2D: the same as nn.MaxPool2D.",
    "Activation", "nn.Activation(name)\n\nApply an activation (relu, sigmoid, tanh, softmax, gelu).",
    "Reshape", "nn.Reshape{d1, d2, ...}\n\nReshape each example (the batch axis is kept); one entry may be -1.",
    "Sequential", "nn.Sequential{layer1, layer2, ..., name=}\n\nA stack of layers. model(x, {training=}) runs it;\n"
                  "model.trainable_variables lists the weights; model:summary() prints a table;\n"
                  "model:compile{optimizer=, loss=, metrics=}, model:fit(ds, {epochs=}), model:evaluate(ds), model:predict(x);\n"
                  "model:save_weights(path) and model:load_weights(path) use safetensors.",
    "Model:summary", "model:summary()\n\nPrint (and return) a table of the layers, output shapes and parameter counts.",
    "Model:train_step", "model:train_step(x, y, loss, optimizer)\n\nOne training step in C; returns the loss value and the predictions.",
    "Model:save_weights", "model:save_weights(path)\n\nWrite the weights as safetensors (readable by Python's safetensors).",
    "Model:load_weights", "model:load_weights(path)\n\nRead weights written by save_weights. The file is checked before any\n"
    "data is read: one entry per weight, shapes and dtypes must match (F16 and BF16 files are converted\n"
    "into float32 weights on purpose; any other dtype is an error naming both).",
    NULL};

static const char *const loss_docs[] = {
    "SparseCategoricalCrossentropy", "losses.SparseCategoricalCrossentropy{from_logits=false, reduction=\"sum_over_batch_size\"}\n\n"
        "Cross-entropy between integer labels [batch] and predictions [batch, classes]; loss(y_true, y_pred).",
    "CategoricalCrossentropy", "losses.CategoricalCrossentropy{from_logits=false}\n\nCross-entropy with one-hot labels.",
    "BinaryCrossentropy", "losses.BinaryCrossentropy{from_logits=false}\n\nCross-entropy for 0/1 labels.",
    "MeanSquaredError", "losses.MeanSquaredError()\n\nMean of (y_pred - y_true)^2.",
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
        {"BinaryCrossentropy", loss_bce}, {"MeanSquaredError", loss_mse}, {"MSE", loss_mse}, {NULL, NULL}};
    luaL_newlib(L, f);
    lb_set_docs(L, "losses.", loss_docs);
    return 1;
}

int lb_open_nn(lua_State *L) {
    luaL_newmetatable(L, LAYER_MT);
    {
        static const char *const f[] = {"name", "kind", "built", "trainable_variables", "weights", "kernel", "bias", "units", "activation", "count_params", NULL};
        lua_newtable(L);
        for (int i = 0; f[i]; i++) { lua_pushstring(L, f[i]); lua_rawseti(L, -2, i + 1); }
        lua_setfield(L, -2, "__fields");   /* computed fields, for completion */
    }

    lua_pushcfunction(L, layer_call); lua_setfield(L, -2, "__call");
    lua_pushcfunction(L, layer_index); lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, layer_tostring); lua_setfield(L, -2, "__tostring");
    lua_pushcfunction(L, layer_gc); lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);

    static const luaL_Reg f[] = {
        {"Dense", nn_dense}, {"Flatten", nn_flatten}, {"Dropout", nn_dropout}, {"Conv2D", nn_conv2d},
        {"MaxPool2D", nn_maxpool}, {"MaxPooling2D", nn_maxpool}, {"Activation", nn_activation},
        {"Reshape", nn_reshape}, {"Sequential", nn_sequential}, {"_count_correct", nn_count_correct},
        {NULL, NULL}};
    luaL_newlib(L, f);
    int mod = lua_gettop(L);

    static const luaL_Reg cm[] = {
        {"add", model_add}, {"build", model_build}, {"summary_text", model_summary_text},
        {"train_step", model_train_step}, {"_grads", model_grads}, {"save_weights", model_save_weights},
        {"load_weights", model_load_weights}, {NULL, NULL}};
    luaL_newmetatable(L, MODEL_MT);
    int mt = lua_gettop(L);
    {
        static const char *const f[] = {"trainable_variables", "weights", "variables", "name", "built", "layers", "history", NULL};
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
